package sandbox

import (
	"encoding/base64"
	"unsafe"
)

func unsafePointer(b *byte) unsafe.Pointer { return unsafe.Pointer(b) }

func base64RawURL(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }
