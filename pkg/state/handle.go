package state

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base32"
	"strings"

	"github.com/agentplane/agentplane/pkg/result"
)

// tagSize is how many bytes of the HMAC-SHA256 a handle carries: 128 bits is
// far beyond guessing and keeps handles short.
const tagSize = 16

// maxIDLen bounds the id inside a handle, so parsing cannot be made to do
// unbounded work.
const maxIDLen = 64

// handleAlphabet is lower-case base32: handles survive shells, URLs, file
// names and case-folding humans, and reveal nothing readable.
const handleAlphabet = "abcdefghijklmnopqrstuvwxyz234567"

func handleEncoding() *base32.Encoding {
	return base32.NewEncoding(handleAlphabet).WithPadding(base32.NoPadding)
}

// Mint returns the opaque handle for id of kind ("job", "ses"): the kind, an
// underscore, then base32 of the id followed by an HMAC-SHA256 tag over kind
// and id keyed with this environment's secret. Another environment, or
// anyone without the secret, cannot produce or alter a valid handle.
func (d *Dir) Mint(kind, id string) string {
	payload := append([]byte(id), d.tag(kind, id)...)
	return kind + "_" + handleEncoding().EncodeToString(payload)
}

// Parse checks handle against this environment's secret and returns the id
// it carries. Anything that is not a handle of kind minted here, including a
// handle from another environment or one with any character changed, is a
// *result.Error with code invalid_handle.
func (d *Dir) Parse(kind, handle string) (string, error) {
	bad := func() error {
		return result.Errorf(result.CodeInvalidHandle, "%q is not a valid %s handle in this environment", clip(handle), kind)
	}
	rest, ok := strings.CutPrefix(handle, kind+"_")
	if !ok || len(rest) > 2*(maxIDLen+tagSize) {
		return "", bad()
	}
	enc := handleEncoding()
	raw, err := enc.DecodeString(rest)
	// Base32 can spell the same bytes with different final characters;
	// accepting only the canonical spelling means every altered character
	// is rejected.
	if err != nil || enc.EncodeToString(raw) != rest || len(raw) <= tagSize {
		return "", bad()
	}
	id, tag := string(raw[:len(raw)-tagSize]), raw[len(raw)-tagSize:]
	if !hmac.Equal(tag, d.tag(kind, id)) {
		return "", bad()
	}
	return id, nil
}

func (d *Dir) tag(kind, id string) []byte {
	m := hmac.New(sha256.New, d.key)
	// The separators keep (kind, id) pairs from colliding as strings.
	m.Write([]byte("agentplane handle\x00" + kind + "\x00" + id))
	return m.Sum(nil)[:tagSize]
}

// clip keeps error messages short when fed garbage.
func clip(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}
