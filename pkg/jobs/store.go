package jobs

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/gob"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/agentplane/agentplane/internal/faultpoint"
	"github.com/agentplane/agentplane/pkg/launch"
	"github.com/agentplane/agentplane/pkg/proctree"
	"github.com/agentplane/agentplane/pkg/reexec"
	"github.com/agentplane/agentplane/pkg/result"
	"github.com/agentplane/agentplane/pkg/slurm"
	"github.com/agentplane/agentplane/pkg/state"
	"golang.org/x/sys/unix"
)

// handshakeTimeout bounds how long Start waits for a supervisor that
// neither confirms nor exits.
const handshakeTimeout = 30 * time.Second

// Store manages the jobs of one state directory.
type Store struct {
	dir            *state.Dir
	supervisorArgv []string
	exe            string // executed in place of supervisorArgv[0] when set
	bootID         string
	host           string

	// sched runs the Slurm clients for slurm jobs; schedView caches its
	// answers briefly (see schedulerJob).
	sched     *slurm.Client
	schedMu   sync.Mutex
	schedView schedulerView

	// Admit, when set, decides a job's saved spec before Restart stops
	// the job to run it again (agentjob's sandbox_lock floor).
	Admit func(Spec) error

	// answerWait is how long Stop waits, past the grace, for the
	// supervisor to record the end before it takes the supervisor for
	// frozen and kills it and the job itself (supervisorAnswer; tests of
	// a supervisor that cannot answer shorten it).
	answerWait time.Duration
}

// supervisorAnswer is what Stop allows a supervisor beyond the grace to
// signal the job's tree, reap it and record the end, on a loaded machine.
const supervisorAnswer = 10 * time.Second

// SupervisorCommand is the hidden first argument by which a program that
// embeds this package runs a supervisor; it is declared in the table of
// hidden entry points (pkg/reexec), where agentsh also finds it to leave
// job supervisors alone when it cleans up after a command.
const SupervisorCommand = reexec.JobSupervisor

// NewStore returns the job store of d. supervisorArgv is the command that
// re-executes the calling program as a supervisor; Start and Restart append
// the job's id to it, and that command must call RunSupervisor(ctx, d, id)
// with the same state directory. For example
// [/proc/self/exe __supervise --state-dir DIR].
func NewStore(d *state.Dir, supervisorArgv []string) *Store {
	boot, _ := proctree.BootID()
	host, _ := os.Hostname()
	return &Store{dir: d, supervisorArgv: supervisorArgv, bootID: boot, host: host, sched: &slurm.Client{}, answerWait: supervisorAnswer}
}

// SetScheduler replaces the Slurm client of slurm jobs (to name the
// programs' paths, or fakes in tests).
func (st *Store) SetScheduler(c *slurm.Client) { st.sched = c }

// SetExecutable makes the supervisor run from the executable at path,
// with supervisorArgv as its complete argv (argv[0] included). A program
// re-executing itself uses this to keep its own name as argv[0] while
// running os.Executable().
func (st *Store) SetExecutable(path string) { st.exe = path }

// Dir returns the store's state directory.
func (st *Store) Dir() *state.Dir { return st.dir }

// handshake is what a supervisor writes on its confirmation pipe.
// Start records spec as a new job, launches its supervisor detached from
// the caller (new session, no terminal, stdin and stdout on /dev/null) and
// returns once the supervisor confirms the job runs. A job that cannot
// start (missing program, missing cwd) is an error, and leaves no job
// behind.
func (st *Store) Start(ctx context.Context, spec Spec) (_ Status, err error) {
	defer func() { err = state.Coded(err) }()
	if err := spec.Validate(); err != nil {
		return Status{}, err
	}
	spec.applyDefaults()
	if spec.Shell != "" && spec.ShellProgram == "" {
		spec.ShellProgram = "sh"
		if p, err := exec.LookPath("bash"); err == nil {
			spec.ShellProgram = p
		}
	}
	if !filepath.IsAbs(spec.Cwd) {
		abs, err := filepath.Abs(spec.Cwd)
		if err != nil {
			return Status{}, err
		}
		spec.Cwd = abs
	}
	if fi, err := os.Stat(spec.Cwd); err != nil || !fi.IsDir() {
		return Status{}, jobErr(result.CodeCwdNotFound, "working directory %s does not exist or is not a directory", spec.Cwd)
	}
	id, err := st.newJobDir()
	if err != nil {
		return Status{}, err
	}
	dir := st.jobDir(id)
	faultpoint.Hit("start.dir")
	specJSON, err := json.MarshalIndent(spec, "", "  ")
	if err != nil {
		os.RemoveAll(dir)
		return Status{}, err
	}
	specJSON = append(specJSON, '\n')
	if err := state.WriteFileAtomic(filepath.Join(dir, specFile), specJSON, 0o600); err != nil {
		os.RemoveAll(dir)
		return Status{}, err
	}
	faultpoint.Hit("start.spec")
	if spec.Backend == BackendSlurm {
		err = st.submit(ctx, id, &spec)
	} else {
		err = st.launch(ctx, id, SpecDigest(specJSON))
	}
	if err != nil {
		os.RemoveAll(dir)
		return Status{}, err
	}
	faultpoint.Hit("start.launched")
	if spec.Name != "" {
		if err := st.setName(spec.Name, id); err != nil {
			return Status{}, err
		}
	}
	return st.statusOf(id)
}

// newJobDir allocates a job id and creates its directory. Mkdir, not
// MkdirAll: should the id counter ever be lost, an existing job's directory
// is skipped rather than reused.
func (st *Store) newJobDir() (string, error) {
	if err := os.MkdirAll(st.dir.Join("jobs"), 0o700); err != nil {
		return "", err
	}
	for {
		n, err := st.dir.NextIDRepairing("job", st.highestJobID)
		if err != nil {
			return "", err
		}
		id := strconv.FormatUint(n, 10)
		err = os.Mkdir(st.jobDir(id), 0o700)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		return id, err
	}
}

// highestJobID is the highest job id still to be found, for repairing a
// damaged id counter: the job directories and the handles in the event
// log (which names every job that started, removed ones included).
func (st *Store) highestJobID() uint64 {
	var top uint64
	if ids, err := st.ids(); err == nil && len(ids) > 0 {
		top = ids[0]
	}
	evs, _ := st.dir.ReadEvents(0, nil)
	for _, e := range evs {
		if id, err := st.dir.Parse("job", e.Handle); err == nil {
			if n, err := strconv.ParseUint(id, 10, 64); err == nil && n > top {
				top = n
			}
		}
	}
	return top
}

// launch starts the supervisor of job id and waits for its confirmation on
// a pipe passed as fd 3: a JSON handshake, then EOF. No sleeping and no
// polling: the read returns when the supervisor writes or dies.
// SpecDigestEnv carries SpecDigest of the spec file to the supervisor a
// Store launches: the supervisor runs the spec its launcher wrote (Start)
// or decided (Restart, Admit), never one rewritten in between, by a
// command with write access to a state directory it did not name.
const SpecDigestEnv = "AGENTJOB_SPEC_SHA256"

// SpecDigest names the bytes of a spec file.
func SpecDigest(specJSON []byte) string {
	sum := sha256.Sum256(specJSON)
	return hex.EncodeToString(sum[:])
}

func (st *Store) launch(ctx context.Context, id, specDigest string) error {
	if len(st.supervisorArgv) == 0 {
		return errors.New("jobs: no supervisor command configured")
	}
	devnull, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer devnull.Close()
	// The supervisor's own diagnostics (a panic, say) go to a file in the
	// job directory: detached like /dev/null, but not lost.
	svlog, err := state.OpenFile(filepath.Join(st.jobDir(id), svLogFile), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer svlog.Close()
	argv := append(slices.Clone(st.supervisorArgv), id)
	if strings.Contains(argv[0], "/") && !filepath.IsAbs(argv[0]) {
		if abs, err := filepath.Abs(argv[0]); err == nil {
			argv[0] = abs
		}
	}
	cmd := &exec.Cmd{Path: st.exe, Args: argv}
	if st.exe == "" {
		cmd = exec.Command(argv[0], argv[1:]...)
	}
	// The supervisor runs in the state directory rather than the caller's
	// working directory, which it would otherwise keep busy (unmountable,
	// or deleted under it) for the job's whole life.
	cmd.Dir = st.dir.Path()
	cmd.Env = append(os.Environ(), SpecDigestEnv+"="+specDigest)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = devnull, devnull, svlog
	// Detached (launch.Start): a session of its own, so neither a hangup
	// nor a kill of the caller's group reaches it, and outside the guard of
	// an agentsh command that starts it.
	hctx, cancel := context.WithTimeout(ctx, handshakeTimeout)
	defer cancel()
	p, exited, rerr := launch.Start(hctx, cmd)
	if rerr == nil {
		return nil
	}
	if p == nil {
		return fmt.Errorf("jobs: start supervisor: %w", rerr)
	}
	// No confirmation: whatever the supervisor started must not outlive
	// this answer, whichever step it died (or hung, and launch killed it)
	// at; a refusal too, for a supervisor refused after it forked.
	<-exited
	st.killUnconfirmed(id, p.Pid)
	var refused *result.Error
	if errors.As(rerr, &refused) {
		return refused
	}
	diag, _ := state.ReadFile(filepath.Join(st.jobDir(id), svLogFile))
	return jobErr(result.CodeStartFailed, "the job supervisor did not confirm the start").
		With("supervisor_log", string(tailBytes(diag, 2000))).Wrap(rerr)
}

// killUnconfirmed kills the supervisor svPID of job id, if it still runs,
// and everything it started: a supervisor that died (or stalled) between
// starting the job and confirming it leaves processes no handle will
// reach. It returns once they are gone, so the caller's error is true.
//
// The supervisor is dead by now (launch killed one that did not answer);
// its start time, which names its session's mark, is in its run lock,
// written before it starts anything. No identity there means it died
// before it could start anything.
func (st *Store) killUnconfirmed(id string, svPID int) {
	sv, _ := st.lockHolder(id)
	if sv.PID != svPID {
		return
	}
	r := remains{sv: proctree.ID{PID: svPID, Start: sv.StartTime}}
	var rec record
	if state.ReadJSON(filepath.Join(st.jobDir(id), statusFile), &rec) == nil && rec.SupervisorPID == svPID {
		r.main = proctree.ID{PID: rec.PID, Start: rec.PIDStart}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*killWait)
	defer cancel()
	_ = r.kill(ctx, syscall.SIGKILL, 0)
}

func tailBytes(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

// Resolve turns a handle or a job name into a job id. A handle must verify
// against this environment's secret (invalid_handle otherwise); one whose
// job was removed answers job_expired. A name resolves to the newest job
// started with it.
func (st *Store) Resolve(ref string) (string, error) {
	if strings.HasPrefix(ref, "job_") {
		id, err := st.dir.Parse("job", ref)
		if err != nil {
			return "", err
		}
		if _, err := os.Stat(st.jobDir(id)); err != nil {
			return "", jobErr(result.CodeJobExpired, "job %s was removed", ref)
		}
		return id, nil
	}
	if ref == "" {
		return "", result.Errorf(result.CodeInvalidHandle, "no job handle or name given")
	}
	b, err := state.ReadFile(st.namePath(ref))
	if err == nil {
		id := strings.TrimSpace(string(b))
		if _, err := os.Stat(st.jobDir(id)); err == nil {
			return id, nil
		}
	}
	return "", jobErr(result.CodeJobNotFound, "no job is named %q in this environment", ref)
}

// namePath is the name index entry: names are hex-encoded so that any
// string is a safe file name.
func (st *Store) namePath(name string) string {
	return st.dir.Join("jobnames", hex.EncodeToString([]byte(name)))
}

// setName points name at id unless it already names a newer job (two
// concurrent Starts with one name: the newer id wins whatever the order).
func (st *Store) setName(name, id string) error {
	if err := os.MkdirAll(st.dir.Join("jobnames"), 0o700); err != nil {
		return err
	}
	unlock, err := state.Lock(st.dir.Join("jobnames", ".lock"))
	if err != nil {
		return err
	}
	defer unlock()
	if b, err := state.ReadFile(st.namePath(name)); err == nil {
		if cur, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64); err == nil {
			if n, _ := strconv.ParseUint(id, 10, 64); cur > n {
				return nil
			}
		}
	}
	return state.WriteFileAtomic(st.namePath(name), []byte(id+"\n"), 0o600)
}

func (st *Store) dropName(name, id string) {
	if name == "" {
		return
	}
	unlock, err := state.Lock(st.dir.Join("jobnames", ".lock"))
	if err != nil {
		return
	}
	defer unlock()
	if b, err := state.ReadFile(st.namePath(name)); err == nil && strings.TrimSpace(string(b)) == id {
		_ = os.Remove(st.namePath(name))
	}
}

// Status returns the status of the job ref (handle or name). It reads only
// that job's files.
func (st *Store) Status(ref string) (_ Status, err error) {
	defer func() { err = state.Coded(err) }()
	id, err := st.Resolve(ref)
	if err != nil {
		return Status{}, err
	}
	return st.statusOf(id)
}

// ids lists the job ids present, newest first.
func (st *Store) ids() ([]uint64, error) {
	ents, err := os.ReadDir(st.dir.Join("jobs"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	out := make([]uint64, 0, len(ents))
	for _, e := range ents {
		if n, err := strconv.ParseUint(e.Name(), 10, 64); err == nil {
			out = append(out, n)
		}
	}
	slices.SortFunc(out, func(a, b uint64) int { return -cmpU(a, b) })
	return out, nil
}

func cmpU(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// List returns the jobs whose status is one of statuses (all when empty),
// newest first. Jobs whose supervisor has not yet written a status are
// left out until it has.
//
// Ended jobs' records come from a cache validated per job by one stat of
// its status.json (inode, mtime, size), so listing thousands of finished
// jobs costs a stat each instead of an open, read and parse each.
func (st *Store) List(statuses ...string) ([]Status, error) {
	ids, err := st.ids()
	if err != nil {
		return nil, err
	}
	jobsDir, err := os.Open(st.dir.Join("jobs"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer jobsDir.Close()
	dirfd := int(jobsDir.Fd())
	cache := st.loadListCache()
	fresh := make(map[string]cacheEntry, len(cache))
	dirty := false
	// Records first, statuses second: the slurm jobs among them are then
	// resolved from one scheduler query instead of one each.
	type item struct {
		id      string
		rec     record
		queued  bool  // no record yet
		damaged error // the record does not parse
	}
	items := make([]item, 0, len(ids))
	var sids []string
	for _, n := range ids {
		id := strconv.FormatUint(n, 10)
		var sb unix.Stat_t
		if unix.Fstatat(dirfd, id+"/"+statusFile, &sb, 0) != nil {
			// Removed meanwhile, or its supervisor has not written yet
			// (a start in progress, or the remains of one that was
			// killed: listed, so that gc can see them); a slurm job may
			// wait in the queue with no supervisor at all.
			if spec, ok := st.queuedSpec(id); ok {
				sids = append(sids, spec.SlurmJobID)
			}
			items = append(items, item{id: id, queued: true})
			continue
		}
		key := fileKey{Ino: sb.Ino, Mtime: sb.Mtim.Nano(), Size: sb.Size}
		var rec record
		if e, ok := cache[id]; ok && e.Key == key {
			rec = e.record()
			fresh[id] = e
		} else {
			if err := state.ReadJSON(filepath.Join(st.jobDir(id), statusFile), &rec); err != nil {
				// A damaged record: still listed (and stoppable).
				items = append(items, item{id: id, damaged: err})
				continue
			}
			if rec.Final {
				fresh[id] = newCacheEntry(key, rec)
				dirty = true
			}
		}
		if rec.Backend == BackendSlurm && (!rec.Final || endedBySignal(&rec)) {
			sids = append(sids, rec.SlurmJobID)
		}
		items = append(items, item{id: id, rec: rec})
	}
	st.prefetchScheduler(sids)
	out := make([]Status, 0, len(items))
	for i := range items {
		var s Status
		switch {
		case items[i].queued:
			var err error
			if s, err = st.noRecord(items[i].id); err != nil {
				continue
			}
		case items[i].damaged != nil:
			s = st.corruptStatus(items[i].id, items[i].damaged)
		default:
			s = st.fromRecord(items[i].id, &items[i].rec)
		}
		if len(statuses) == 0 || slices.Contains(statuses, s.Status) {
			out = append(out, s)
		}
	}
	if dirty || len(fresh) != len(cache) {
		st.saveListCache(fresh)
	}
	return out, nil
}

// listCacheFile caches ended jobs' records for List. It is only a cache:
// unreadable means empty, and every entry is checked against its file. It
// is gob, not JSON, because decoding it is most of List's cost. (v2: gob
// does not transmit zero values, so a pointer to exit code 0 came back
// nil from v1; entries now carry the exit code beside the record.)
const listCacheFile = ".list-cache.v2.gob"

type fileKey struct {
	Ino   uint64 `json:"ino"`
	Mtime int64  `json:"mtime"`
	Size  int64  `json:"size"`
}

type cacheEntry struct {
	Key fileKey
	Rec record
	// Exit is Rec.ExitCode, which gob would lose when it is 0.
	Exit    int
	HasExit bool
}

func newCacheEntry(key fileKey, rec record) cacheEntry {
	e := cacheEntry{Key: key, Rec: rec}
	if rec.ExitCode != nil {
		e.Exit, e.HasExit = *rec.ExitCode, true
	}
	return e
}

// record is the cached record as it was written.
func (e cacheEntry) record() record {
	rec := e.Rec
	rec.ExitCode = nil
	if e.HasExit {
		code := e.Exit
		rec.ExitCode = &code
	}
	return rec
}

func (st *Store) loadListCache() map[string]cacheEntry {
	f, err := state.OpenFile(st.dir.Join("jobs", listCacheFile), os.O_RDONLY, 0)
	if err != nil {
		return nil
	}
	defer f.Close()
	var m map[string]cacheEntry
	if gob.NewDecoder(bufio.NewReaderSize(f, 256<<10)).Decode(&m) != nil {
		return nil
	}
	return m
}

// saveListCache replaces the cache by rename, without fsync: losing it in
// a crash only costs the next List some reads.
//
// Savers take turns on a lock, without waiting: a List that finds another
// saving leaves the cache to it. Holding the lock proves that any temp
// file of the cache is a killed saver's, and it is removed.
func (st *Store) saveListCache(m map[string]cacheEntry) {
	var b bytes.Buffer
	if gob.NewEncoder(&b).Encode(m) != nil {
		return
	}
	jobsDir := st.dir.Join("jobs")
	lock, err := state.OpenFile(filepath.Join(jobsDir, listCacheFile+".lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return
	}
	defer lock.Close()
	if unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB) != nil {
		return
	}
	state.RemoveTemps(jobsDir, listCacheFile)
	tmp, err := os.CreateTemp(jobsDir, state.TempPrefix(listCacheFile)+"*")
	if err != nil {
		return
	}
	_, werr := tmp.Write(b.Bytes())
	cerr := tmp.Close()
	if werr != nil || cerr != nil || os.Rename(tmp.Name(), st.dir.Join("jobs", listCacheFile)) != nil {
		_ = os.Remove(tmp.Name())
	}
}

// Remove deletes a job's files. Its handle then answers job_expired, since
// ids are never reused. A job that still runs is refused with job_running
// unless force, which stops it first.
func (st *Store) Remove(ctx context.Context, ref string, force bool) (_ Status, err error) {
	defer func() { err = state.Coded(err) }()
	id, err := st.Resolve(ref)
	if err != nil {
		return Status{}, err
	}
	s, err := st.statusOf(id)
	if state.IsCorrupt(err) {
		s, err = st.corruptStatus(id, err), nil
	}
	if err != nil {
		return Status{}, err
	}
	if !s.Ended() || s.OrphanPID != 0 {
		if !force {
			return s, jobErr(result.CodeJobRunning, "job %s is %s; stop it first or force the removal", s.Handle, s.Status).With("status", s.Status)
		}
		if s, err = st.Stop(ctx, ref, syscall.SIGTERM, DefaultKillGrace); err != nil {
			return s, err
		}
	}
	return s, st.removeDir(id, s.Name)
}

// removeDir renames the job directory out of the way first, so a
// concurrent reader sees the job either whole or gone.
func (st *Store) removeDir(id, name string) error {
	trash := st.dir.Join("jobs", ".removed-"+id)
	if err := os.Rename(st.jobDir(id), trash); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	}
	st.dropName(name, id)
	return os.RemoveAll(trash)
}

// GC removes jobs that ended (lost jobs with a live orphan excepted) more
// than olderThan before now, and returns their statuses.
func (st *Store) GC(olderThan time.Duration, now time.Time) (_ []Status, err error) {
	defer func() { err = state.Coded(err) }()
	all, err := st.List()
	if err != nil {
		return nil, err
	}
	// Finish removals that a crash interrupted.
	if ents, err := os.ReadDir(st.dir.Join("jobs")); err == nil {
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), ".removed-") {
				_ = os.RemoveAll(st.dir.Join("jobs", e.Name()))
			}
		}
	}
	cutoff := now.Add(-olderThan)
	var out []Status
	for _, s := range all {
		if !s.Ended() || s.OrphanPID != 0 {
			continue
		}
		ended := time.Time{}
		if s.EndedAt != nil {
			ended, _ = time.Parse(time.RFC3339Nano, *s.EndedAt)
		} else if fi, err := os.Stat(filepath.Join(st.jobDir(s.ID), statusFile)); err == nil {
			ended = fi.ModTime() // lost: the last sign of life
		} else if fi, err := os.Stat(st.jobDir(s.ID)); err == nil {
			// Lost with no record (a start that died, or a stop that
			// found no supervisor): the last file made in its directory.
			ended = fi.ModTime()
		}
		if ended.After(cutoff) {
			continue
		}
		if err := st.removeDir(s.ID, s.Name); err != nil {
			return out, err
		}
		out = append(out, s)
	}
	return out, nil
}

// stopRequest is stop.json: how the supervisor should stop the job when
// Stop signals it.
type stopRequest struct {
	Signal  int   `json:"signal"`
	GraceMS int64 `json:"grace_ms"`
}

// Stop stops the job's whole process tree: sig to its process group and
// every descendant, SIGKILL to what remains after grace (0: at once). It
// returns once the job has ended. Stopping a job that already ended is not
// an error (it returns the status). A lost job whose processes still run
// is killed directly.
//
// What it answers is true after it acted: it never returns success while
// a process of the job runs, and never a running status for a job it
// killed. When its supervisor does not finish the stop (SIGKILLed or
// frozen meanwhile), Stop kills the supervisor and the job itself. On a
// state directory where stop.json cannot be written (full, read-only) the
// supervisor is asked with SIGTERM alone and Stop applies sig and grace to
// the job itself.
func (st *Store) Stop(ctx context.Context, ref string, sig syscall.Signal, grace time.Duration) (_ Status, err error) {
	defer func() { err = state.Coded(err) }()
	id, err := st.Resolve(ref)
	if err != nil {
		return Status{}, err
	}
	if sig == 0 {
		sig = syscall.SIGTERM
	}
	s, err := st.statusOf(id)
	if err == nil && s.Backend == BackendSlurm {
		return st.stopSlurm(ctx, id, s, sig, grace)
	}
	if err != nil {
		return st.stopUnreadable(ctx, id, sig, grace, err)
	}
	if s.Ended() {
		return st.stopRemains(ctx, id, s, sig, grace)
	}
	werr := st.writeStopRequest(id, stopRequest{Signal: int(sig), GraceMS: grace.Milliseconds()})
	if werr != nil && state.Classify(werr) == nil {
		return s, werr
	}
	faultpoint.Hit("stop.requested")
	// Re-read after writing the request: if the supervisor is gone now,
	// signalling its old PID could hit a stranger.
	if s, err = st.statusOf(id); err != nil {
		return s, err
	}
	if s.Ended() {
		return st.stopRemains(ctx, id, s, sig, grace)
	}
	if s.svPID == 0 {
		// No supervisor has recorded itself, nor holds the run lock with
		// its identity: none may ever answer, and none is waited for.
		if s, done, err := st.stopUnsupervised(ctx, id, sig, grace); done {
			return s, err
		}
	}
	if s.svPID > 0 && proctree.Alive(s.svPID, s.svStart) {
		_ = syscall.Kill(s.svPID, syscall.SIGTERM)
	}
	faultpoint.Hit("stop.signalled")
	if werr != nil {
		// The supervisor stops with SIGTERM and its default grace; the
		// caller's signal and grace are applied here.
		st.stopWithoutRequest(ctx, s, sig, grace)
	}
	wctx, cancel := context.WithTimeout(ctx, grace+st.answerWait)
	defer cancel()
	got, err := st.waitIDs(wctx, []string{id}, ForExit, false)
	if err == nil && len(got) == 1 {
		return st.stopRemains(ctx, id, got[0], sig, grace)
	}
	// The supervisor did not finish the stop (it is frozen, say): kill it
	// and the job without it. Then nothing records an end, and the answer
	// is lost, which is what the record can prove. (One that held the run
	// lock without its identity yet when Stop looked has written it since.)
	if now, err := st.statusOf(id); err == nil && s.svPID == 0 && now.svPID != 0 {
		s = now
	}
	r := remainsOf(s, s.PID, st.pidStart(id))
	if s.svPID > 0 && proctree.Alive(s.svPID, s.svStart) {
		_ = syscall.Kill(s.svPID, syscall.SIGKILL)
		kctx, cancel := context.WithTimeout(ctx, killWait)
		_ = proctree.Wait(kctx, proctree.ID{PID: s.svPID, Start: s.svStart})
		cancel()
	}
	return st.afterKill(id, r.kill(ctx, syscall.SIGKILL, 0))
}

// stopUnsupervised stops a job that no supervisor has recorded (a start
// whose caller, or supervisor, died before the record), unless a
// supervisor turns out to hold the run lock: then it reports not done, and
// that supervisor is asked and waited for as usual. Otherwise it holds the
// lock, so that no supervisor starts the job meanwhile, kills what a dead
// supervisor may have started (its session, by the identity in the lock)
// and answers lost; a supervisor launched later finds the job lost and
// refuses to run it (begin).
func (st *Store) stopUnsupervised(ctx context.Context, id string, sig syscall.Signal, grace time.Duration) (_ Status, done bool, _ error) {
	sv, unlock, ok := st.takeRunLock(id)
	if !ok {
		return Status{}, false, nil
	}
	defer unlock()
	s, err := st.statusOf(id)
	if err != nil {
		return s, true, err
	}
	if s.svPID != 0 || s.Backend != BackendLocal {
		// Recorded meanwhile by a supervisor now gone (the lock is free):
		// its record tells the rest.
		s, err := st.stopRemains(ctx, id, s, sig, grace)
		return s, true, err
	}
	r := remains{sv: proctree.ID{PID: sv.PID, Start: sv.StartTime}}
	if err := r.kill(ctx, sig, grace); err != nil {
		return s, true, jobErr(result.CodeStopFailed, "job %s: %v", s.Handle, err).With("status", s.Status)
	}
	if !s.Ended() {
		st.lose(&s, LostSupervisorDied)
	}
	return s, true, nil
}

// writeStopRequest writes stop.json under the stop lock, which every
// writer of it holds, so that the temp files of killed writers can go.
func (st *Store) writeStopRequest(id string, req stopRequest) error {
	unlock, err := state.Lock(filepath.Join(st.jobDir(id), stopLockFile))
	if err != nil {
		return err
	}
	defer unlock()
	state.RemoveTemps(st.jobDir(id), stopFile)
	return state.WriteJSONAtomic(filepath.Join(st.jobDir(id), stopFile), req, 0o600)
}

// stopRemains finishes a stop of a job that has ended: a job whose
// supervisor died (lost) may have left processes running, the job's own
// or anything else in the supervisor's session, and those are stopped
// with sig and grace.
func (st *Store) stopRemains(ctx context.Context, id string, s Status, sig syscall.Signal, grace time.Duration) (Status, error) {
	if s.Status != StatusLost || s.LostReason == LostHostRestarted {
		return s, nil
	}
	r := remainsOf(s, s.PID, st.pidStart(id))
	if len(r.live()) == 0 {
		if r.cgroup != "" {
			proctree.KillTreeCgroup(r.cgroup, r.cgName, killWait) // removes it, empty
		}
		return s, nil
	}
	return st.afterKill(id, r.kill(ctx, sig, grace))
}

// afterKill is the answer of a stop that killed the job's processes
// itself: the status now, or an error if something survived.
func (st *Store) afterKill(id string, kerr error) (Status, error) {
	s, err := st.statusOf(id)
	if err != nil {
		return s, err
	}
	if kerr != nil {
		return s, jobErr(result.CodeStopFailed, "job %s: %v", s.Handle, kerr).With("status", s.Status)
	}
	if !s.Ended() {
		// Its supervisor is dead and every process is gone: whatever the
		// record said last is no longer true.
		st.lose(&s, LostSupervisorDied)
	}
	return s, nil
}

// stopWithoutRequest applies sig and grace to the job directly, for a stop
// whose request could not be written: the supervisor was told with SIGTERM
// (and stops with SIGTERM and the default grace); a different signal, or a
// shorter grace, is the caller's to deliver.
func (st *Store) stopWithoutRequest(ctx context.Context, s Status, sig syscall.Signal, grace time.Duration) {
	job := proctree.ID{PID: s.PID, Start: st.pidStart(s.ID)}
	if job.PID <= 0 || !job.Alive() {
		return
	}
	tree := proctree.Tree{Main: job, Group: job.PID, Root: job.PID}
	if sig != syscall.SIGTERM {
		tree.Signal(sig)
	}
	if grace < DefaultKillGrace {
		gctx, cancel := context.WithTimeout(ctx, grace)
		if proctree.Wait(gctx, job) != nil {
			tree.Signal(syscall.SIGKILL)
		}
		cancel()
	}
}

// stopUnreadable stops a job whose status.json cannot be read (damaged
// outside agentplane): its supervisor is found by the run lock it holds
// and the identity it keeps in that file, and asked to stop as usual. It
// then rewrites status.json, which repairs it.
func (st *Store) stopUnreadable(ctx context.Context, id string, sig syscall.Signal, grace time.Duration, rerr error) (Status, error) {
	if !state.IsCorrupt(rerr) {
		return Status{}, rerr
	}
	sv, ok := st.lockHolder(id)
	if !ok {
		// No supervisor runs: there is nothing of the job to stop but what
		// may be left in a dead supervisor's session.
		if sv.PID > 0 {
			r := remains{sv: proctree.ID{PID: sv.PID, Start: sv.StartTime}}
			if err := r.kill(ctx, sig, grace); err != nil {
				return Status{}, jobErr(result.CodeStopFailed, "job %s: %v", st.dir.Mint("job", id), err)
			}
		}
		return st.corruptStatus(id, rerr), rerr
	}
	_ = st.writeStopRequest(id, stopRequest{Signal: int(sig), GraceMS: grace.Milliseconds()})
	_ = syscall.Kill(sv.PID, syscall.SIGTERM)
	wctx, cancel := context.WithTimeout(ctx, grace+st.answerWait)
	defer cancel()
	if proctree.Wait(wctx, proctree.ID{PID: sv.PID, Start: sv.StartTime}) != nil {
		_ = syscall.Kill(sv.PID, syscall.SIGKILL)
	}
	r := remains{sv: proctree.ID{PID: sv.PID, Start: sv.StartTime}}
	if err := r.kill(ctx, syscall.SIGKILL, 0); err != nil {
		return Status{}, jobErr(result.CodeStopFailed, "job %s: %v", st.dir.Mint("job", id), err)
	}
	return st.statusOf(id)
}

// pidStart is the recorded start time of job id's main process (0 when
// unknown), which Status does not carry.
func (st *Store) pidStart(id string) uint64 {
	var rec record
	if state.ReadJSON(filepath.Join(st.jobDir(id), statusFile), &rec) != nil {
		return 0
	}
	return rec.PIDStart
}

// Restart stops the job if it still runs and starts a new run of it under
// the same handle, with a new supervisor; its restarts count goes up and a
// restarted event is recorded. Logs continue at the same offsets.
func (st *Store) Restart(ctx context.Context, ref string) (_ Status, err error) {
	defer func() { err = state.Coded(err) }()
	id, err := st.Resolve(ref)
	if err != nil {
		return Status{}, err
	}
	// The spec is decided before anything stops, and the new supervisor
	// runs these very bytes.
	specJSON, err := state.ReadFile(filepath.Join(st.jobDir(id), specFile))
	if err != nil {
		return Status{}, err
	}
	if st.Admit != nil {
		var spec Spec
		if err := json.Unmarshal(specJSON, &spec); err != nil {
			return Status{}, jobErr(result.CodeStateCorrupt, "job %s: its spec does not parse: %v", ref, err)
		}
		if err := st.Admit(spec); err != nil {
			return Status{}, err
		}
	}
	s, err := st.Stop(ctx, ref, syscall.SIGTERM, DefaultKillGrace)
	if err != nil {
		return s, err
	}
	if !s.Ended() || s.OrphanPID != 0 {
		return s, jobErr(result.CodeJobRunning, "job %s could not be stopped for the restart", s.Handle)
	}
	// The old supervisor records the end before it has cleaned up and
	// exited; until it exits it holds the job's run lock, and a new
	// supervisor launched now would refuse to run.
	if s.svPID > 0 && s.svLocal {
		wctx, cancel := context.WithTimeout(ctx, killWait+5*time.Second)
		_ = proctree.Wait(wctx, proctree.ID{PID: s.svPID, Start: s.svStart})
		cancel()
	}
	if s.Backend == BackendSlurm {
		return st.resubmit(ctx, id)
	}
	faultpoint.Hit("restart.stopped")
	if _, err := os.Lstat(filepath.Join(st.jobDir(id), statusFile)); errors.Is(err, fs.ErrNotExist) {
		// A job no supervisor ever recorded (its start died): the stop
		// found it lost, which the first run's supervisor would take for a
		// stop of its own start (begin). This launch is a new start.
		_ = os.Remove(filepath.Join(st.jobDir(id), lostMarker))
		_ = os.Remove(filepath.Join(st.jobDir(id), stopFile))
	}
	if err := st.launch(ctx, id, SpecDigest(specJSON)); err != nil {
		return Status{}, err
	}
	return st.statusOf(id)
}

// Events returns the environment's lifecycle events after seq since, only
// those of the job ref when ref is not empty.
func (st *Store) Events(since int64, ref string) ([]state.Event, error) {
	keep, err := st.eventFilter(ref)
	if err != nil {
		return nil, err
	}
	return st.dir.ReadEvents(since, keep)
}

// WaitEvents blocks until there are events after since (of job ref, if
// given) and returns them; see Events.
func (st *Store) WaitEvents(ctx context.Context, since int64, ref string) ([]state.Event, error) {
	keep, err := st.eventFilter(ref)
	if err != nil {
		return nil, err
	}
	return st.dir.WaitEvents(ctx, since, keep)
}

func (st *Store) eventFilter(ref string) (func(state.Event) bool, error) {
	if ref == "" {
		return nil, nil
	}
	id, err := st.Resolve(ref)
	if err != nil {
		return nil, err
	}
	h := st.dir.Mint("job", id)
	return func(e state.Event) bool { return e.Handle == h }, nil
}
