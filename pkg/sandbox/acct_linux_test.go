package sandbox

import (
	"context"
	"encoding/binary"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentplane/agentplane/pkg/result"
	"github.com/agentplane/agentplane/pkg/run"
	"github.com/agentplane/agentplane/pkg/sandbox/confine"
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

// TestChildLimitsWithoutAccounting runs as a machine without
// CAP_SYS_PACCT would: a file-size limit hit by an orphan (a process that
// waits for its parent to exit before it hits the limit, so that the
// namespace's init reaps it) is reported from
// the helper's own wait statuses, and the report says that only orphans
// are seen until a runtime guard that traced the run says otherwise.
func TestChildLimitsWithoutAccounting(t *testing.T) {
	requireSandbox(t)
	_, ws, _ := dirs(t)
	p := Policy{Mode: ModeWorkspaceWrite, Workspace: ws, FileSize: 1000, CPUTime: 30 * time.Second}
	caps := probeFor(p)
	caps.ProcessAcct = false
	prep, err := PrepareWith(p, self(t), caps)
	must(t, err)
	t.Cleanup(prep.Cleanup)
	if got := prep.Report["limits_of_children"]; got != childrenOrphans {
		t.Fatalf("limits_of_children %v, want %s", got, childrenOrphans)
	}
	files, started, err := prep.Launch()
	must(t, err)
	t.Cleanup(started)
	res, err := run.Run(context.Background(), run.Request{
		ExtraFiles: files,
		Argv: prep.Argv([]string{"sh", "-c", `
sh -c 'sh -c "while kill -0 $$ 2>/dev/null; do sleep 0.01; done; exec head -c 5000 /dev/zero > big" & echo $! > pid; exit 0'
while kill -0 "$(cat pid)" 2>/dev/null; do sleep 0.02; done
echo reaped; exit 0`}),
		Dir: ws, Env: append(os.Environ(), prep.Env...), Timeout: time.Minute, KillAfter: time.Second,
		MaxOutput: 64 << 10, SysProcAttr: prep.SysProcAttr,
	})
	must(t, err)
	must(t, prep.Failure())
	if out(res) != "reaped\n" || res.ExitCode != 0 {
		t.Fatalf("exit %d, output %q %q", res.ExitCode, out(res), text(res.Stderr))
	}
	if hit := prep.LimitsHit(); !slices.Equal(hit, []string{result.CodeFileSizeLimit}) {
		t.Fatalf("limits hit %v, want [file_size_limit]", hit)
	}
	// A child reaped by its own parent is invisible to init; the guard,
	// which traces every process, says what it saw.
	prep.NoteTraced(confine.Deaths{{Signal: int(unix.SIGKILL), Count: 1, CPUMillis: 30500}})
	if got := prep.Report["limits_of_children"]; got != childrenTraced {
		t.Fatalf("limits_of_children %v, want %s", got, childrenTraced)
	}
	if hit := prep.LimitsHit(); !slices.Equal(hit, []string{result.CodeCPULimit, result.CodeFileSizeLimit}) {
		t.Fatalf("limits hit %v, want [cpu_limit file_size_limit]", hit)
	}
}

func TestDeathsLimits(t *testing.T) {
	const xfsz, xcpu, kill = 25, 24, 9
	cases := []struct {
		name   string
		p      Policy
		deaths confine.Deaths
		want   []string
	}{
		{"none", Policy{FileSize: 1, CPUTime: time.Second}, nil, nil},
		{"SIGXFSZ", Policy{FileSize: 1}, confine.Deaths{{Signal: xfsz, Count: 1}}, []string{result.CodeFileSizeLimit}},
		{"SIGXFSZ without the limit", Policy{CPUTime: time.Second}, confine.Deaths{{Signal: xfsz, Count: 1}}, nil},
		{"SIGXCPU", Policy{CPUTime: time.Second}, confine.Deaths{{Signal: xcpu, Count: 1, CPUMillis: 1000}}, []string{result.CodeCPULimit}},
		{"SIGKILL past the soft limit", Policy{CPUTime: 1500 * time.Millisecond}, confine.Deaths{{Signal: kill, Count: 1, CPUMillis: 2001}}, []string{result.CodeCPULimit}},
		{"SIGKILL early", Policy{CPUTime: 2 * time.Second}, confine.Deaths{{Signal: kill, Count: 3, CPUMillis: 400}}, nil},
		{"SIGKILL without a CPU limit", Policy{FileSize: 1}, confine.Deaths{{Signal: kill, Count: 1, CPUMillis: 99000}}, nil},
		{"both", Policy{FileSize: 1, CPUTime: time.Second}, confine.Deaths{{Signal: xfsz, Count: 1}, {Signal: xcpu, Count: 1}}, []string{result.CodeCPULimit, result.CodeFileSizeLimit}},
	}
	for _, c := range cases {
		if got := deathsLimits(c.p, c.deaths); !slices.Equal(got, c.want) {
			t.Errorf("%s: got %v, want %v", c.name, got, c.want)
		}
	}
}
