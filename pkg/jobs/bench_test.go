package jobs

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/agentplane/agentplane/pkg/state"
)

// BenchmarkList2000 lists an environment with 2,000 finished jobs.
func BenchmarkList2000(b *testing.B) {
	st := fakeFinished(b, 2000)
	b.ResetTimer()
	for b.Loop() {
		l, err := st.List()
		if err != nil || len(l) != 2000 {
			b.Fatal(len(l), err)
		}
	}
}

// BenchmarkStatus2000 reads one status among 2,000 jobs; it must not
// depend on the number of jobs.
func BenchmarkStatus2000(b *testing.B) {
	st := fakeFinished(b, 2000)
	h := st.dir.Mint("job", "1000")
	b.ResetTimer()
	for b.Loop() {
		if _, err := st.Status(h); err != nil {
			b.Fatal(err)
		}
	}
}

func fakeFinished(b *testing.B, n int) *Store {
	st := newStore(b)
	for i := 1; i <= n; i++ {
		id, err := st.dir.NextID("job")
		if err != nil {
			b.Fatal(err)
		}
		dir := st.jobDir(strconv.FormatUint(id, 10))
		os.MkdirAll(dir, 0o700)
		zero := 0
		rec := record{Status: StatusExited, Final: true, Argv: []string{"true"}, Cwd: "/",
			StartedAt: state.FormatTime(time.Now()), EndedAt: state.FormatTime(time.Now()), ExitCode: &zero}
		b2, _ := json.Marshal(rec)
		if err := state.WriteFileAtomic(filepath.Join(dir, statusFile), b2, 0o600); err != nil {
			b.Fatal(err)
		}
	}
	return st
}

// BenchmarkStartTrue measures Start of `true` through to the supervisor's
// confirmation (the test binary is the supervisor here, so this is an upper
// bound for a small CLI binary).
func BenchmarkStartTrue(b *testing.B) {
	st := newStore(b)
	ctx := context.Background()
	cwd := b.TempDir()
	var hs []string
	for b.Loop() {
		s, err := st.Start(ctx, Spec{Argv: []string{"true"}, Cwd: cwd})
		if err != nil {
			b.Fatal(err)
		}
		hs = append(hs, s.Handle)
	}
	b.StopTimer()
	if _, err := st.Wait(ctx, hs, ForExit, false); err != nil {
		b.Fatal(err)
	}
}
