package sandbox

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/agentplane/agentplane/pkg/result"
)

// v3Record builds a struct acct_v3 as the kernel writes it (little endian).
func v3Record(status uint32, utime, stime uint16) []byte {
	r := make([]byte, acctRecordSize)
	r[1] = 3
	binary.LittleEndian.PutUint32(r[4:], status)
	binary.LittleEndian.PutUint16(r[32:], utime)
	binary.LittleEndian.PutUint16(r[34:], stime)
	return r
}

func TestAcctLimitsHit(t *testing.T) {
	const xfsz, xcpu, kill = 25, 24, 9
	// comp_t: 150 ticks is mantissa 150, exponent 0; 8000 ticks (80 s)
	// is 1000<<3, exponent 1.
	cases := []struct {
		name    string
		p       Policy
		records [][]byte
		want    []string
	}{
		{"exit 0", Policy{FileSize: 1 << 20, CPUTime: time.Second}, [][]byte{v3Record(0, 1, 1)}, nil},
		{"SIGXFSZ", Policy{FileSize: 1 << 20}, [][]byte{v3Record(0, 0, 0), v3Record(xfsz, 0, 1)}, []string{result.CodeFileSizeLimit}},
		{"SIGXFSZ with core flag", Policy{FileSize: 1 << 20}, [][]byte{v3Record(0x80|xfsz, 0, 1)}, []string{result.CodeFileSizeLimit}},
		{"SIGXFSZ without the limit", Policy{CPUTime: time.Second}, [][]byte{v3Record(xfsz, 0, 1)}, nil},
		{"SIGXCPU", Policy{CPUTime: time.Second}, [][]byte{v3Record(xcpu, 90, 10)}, []string{result.CodeCPULimit}},
		{"SIGKILL at the hard limit", Policy{CPUTime: time.Second}, [][]byte{v3Record(kill, 150, 50)}, []string{result.CodeCPULimit}},
		{"SIGKILL early", Policy{CPUTime: 2 * time.Second}, [][]byte{v3Record(kill, 100, 50)}, nil},
		{"exit after the soft limit", Policy{CPUTime: 60 * time.Second}, [][]byte{v3Record(1<<8, 1<<13|1000, 0)}, []string{result.CodeCPULimit}},
		{"exit 1", Policy{FileSize: 1}, [][]byte{v3Record(1<<8, 0, 0)}, nil},
		{"both", Policy{FileSize: 1, CPUTime: time.Second}, [][]byte{v3Record(xcpu, 100, 0), v3Record(xfsz, 0, 0)}, []string{result.CodeCPULimit, result.CodeFileSizeLimit}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "acct")
			var data []byte
			for _, r := range c.records {
				data = append(data, r...)
			}
			data = append(data, 1, 2, 3) // a torn tail is ignored
			must(t, os.WriteFile(path, data, 0o600))
			if got := acctLimitsHit(c.p, path); !slices.Equal(got, c.want) {
				t.Errorf("got %v, want %v", got, c.want)
			}
		})
	}
	if got := acctLimitsHit(Policy{FileSize: 1}, ""); got != nil {
		t.Errorf("no accounting file: %v", got)
	}
}
