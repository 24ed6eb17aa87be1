package jobs

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// openLock opens a second description of job id's run lock, as another
// process (a status reader, a supervisor) would.
func openLock(t *testing.T, st *Store, id string) *os.File {
	t.Helper()
	dir := st.jobDir(id)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(filepath.Join(dir, runLockFile), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// countRetries counts lockExclusive's retries, calling each with the
// count so far, for the length of the test.
func countRetries(t *testing.T, each func(n int)) *int {
	n := new(int)
	runLockRetried = func() { *n++; each(*n) }
	t.Cleanup(func() { runLockRetried = nil })
	return n
}

// A status reader's shared probe of the run lock, held when a stop tries
// to take it, is not a supervisor: the stop takes the lock once the reader
// lets go. The reader here lets go at the stop's first retry, so that the
// stop is certain to have met it.
func TestTakeRunLockWaitsOutReaders(t *testing.T) {
	st := newStore(t)
	reader := openLock(t, st, "j1")
	if err := unix.Flock(int(reader.Fd()), unix.LOCK_SH|unix.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	retries := countRetries(t, func(n int) {
		if n == 1 {
			_ = unix.Flock(int(reader.Fd()), unix.LOCK_UN)
		}
	})
	_, unlock, ok := st.takeRunLock("j1")
	if !ok {
		t.Fatal("a reader's shared lock was taken for a supervisor")
	}
	unlock()
	if *retries == 0 {
		t.Fatal("the lock was free at the first try: the reader was never met")
	}
}

// A supervisor's exclusive lock is reported at once, without retries.
func TestTakeRunLockSupervisor(t *testing.T) {
	st := newStore(t)
	sv := openLock(t, st, "j2")
	if err := unix.Flock(int(sv.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	retries := countRetries(t, func(int) {})
	if _, _, ok := st.takeRunLock("j2"); ok {
		t.Fatal("took a lock a supervisor holds")
	}
	if *retries != 0 {
		t.Errorf("%d retries against a supervisor's lock", *retries)
	}
}

func TestFlockReadersOnly(t *testing.T) {
	locks := []byte("1: FLOCK  ADVISORY  READ 10 fd:01:77 0 EOF\n" +
		"2: FLOCK  ADVISORY  WRITE 11 fd:01:78 0 EOF\n" +
		"2: -> FLOCK  ADVISORY  WRITE 12 fd:01:77 0 EOF\n" +
		"3: POSIX  ADVISORY  WRITE 13 fd:01:79 0 EOF\n" +
		"4: FLOCK  ADVISORY  READ 14 103:02:80 0 EOF\n")
	for _, tc := range []struct {
		major, minor, ino uint64
		want              bool
	}{
		{0xfd, 1, 77, true},  // a reader, and a waiter that holds nothing
		{0xfd, 1, 78, false}, // a writer
		{0xfd, 1, 79, false}, // a POSIX lock only: no flock held
		{0xfd, 1, 99, false}, // nothing
		{0x103, 2, 80, true}, // three hex digits
		{0x103, 0x2, 81, false},
	} {
		if got := flockReadersOnly(locks, tc.major, tc.minor, tc.ino); got != tc.want {
			t.Errorf("%x:%x:%d: %v, want %v", tc.major, tc.minor, tc.ino, got, tc.want)
		}
	}
	// The real file, on a real lock.
	dir := t.TempDir()
	f, err := os.Create(filepath.Join(dir, "l"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	g, err := os.Open(f.Name())
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if onlyReaders(g) {
		t.Error("no lock held, and readers only")
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_SH); err != nil {
		t.Fatal(err)
	}
	if !onlyReaders(g) {
		t.Error("a shared lock held, and not readers only")
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	if onlyReaders(g) {
		t.Error("an exclusive lock held, and readers only")
	}
}
