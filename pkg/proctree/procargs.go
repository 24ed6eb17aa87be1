package proctree

import (
	"bytes"
	"encoding/binary"
	"fmt"
)

// parseProcArgs parses macOS's kern.procargs2 record: argc as a 32-bit
// little-endian integer (both architectures macOS runs on are
// little-endian), the executable path, NUL padding, then argc
// NUL-terminated arguments, then the NUL-terminated environment (and, after
// an empty string, the kernel's apple[] strings, which are not read). It
// is here, not in the darwin file, so that its tests run everywhere.
func parseProcArgs(pid int, b []byte) (path string, argv, env []string, err error) {
	if len(b) < 4 {
		return "", nil, nil, fmt.Errorf("proctree: short kern.procargs2 for pid %d", pid)
	}
	argc := int(binary.LittleEndian.Uint32(b))
	b = b[4:]
	end := bytes.IndexByte(b, 0)
	if end < 0 {
		return "", nil, nil, fmt.Errorf("proctree: malformed kern.procargs2 for pid %d", pid)
	}
	path = string(b[:end])
	b = bytes.TrimLeft(b[end:], "\x00")
	argv = make([]string, 0, min(argc, 1024))
	for len(argv) < argc && len(b) > 0 {
		end := bytes.IndexByte(b, 0)
		if end < 0 {
			end = len(b)
		}
		argv = append(argv, string(b[:end]))
		b = b[min(end+1, len(b)):]
	}
	for len(b) > 0 {
		end := bytes.IndexByte(b, 0)
		if end <= 0 {
			break // the empty string before apple[], or the end
		}
		env = append(env, string(b[:end]))
		b = b[end+1:]
	}
	return path, argv, env, nil
}
