package jobs

import (
	"net"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/agentplane/agentplane/pkg/policy"
	"github.com/agentplane/agentplane/pkg/result"
	"github.com/agentplane/agentplane/pkg/sandbox"
)

// Job statuses (CONTRACT §3).
const (
	StatusStarting = "starting"
	StatusRunning  = "running"
	StatusReady    = "ready"
	StatusExited   = "exited"
	StatusFailed   = "failed"
	StatusStopped  = "stopped"
	StatusTimeout  = "timeout"
	StatusLost     = "lost"
	// StatusPending is a job the cluster scheduler has queued and not yet
	// started (slurm backend only); its Reason is the scheduler's.
	StatusPending = "pending"
)

// Lost reasons.
const (
	LostHostRestarted  = "host_restarted"
	LostSupervisorDied = "supervisor_died"
	// LostStateCorrupt: the job's status.json is damaged and no
	// supervisor of it runs, so nothing can say how it ended.
	LostStateCorrupt = "state_corrupt"
	// LostNodeFailed: the scheduler reports the job's node failed.
	LostNodeFailed = "node_failed"
	// LostUnknownToScheduler: the scheduler no longer knows the job, its
	// supervisor recorded no end and is not provably running.
	LostUnknownToScheduler = "unknown_to_scheduler"
)

// Backends: where a job runs.
const (
	BackendLocal = "local"
	BackendSlurm = "slurm"
)

// Restart policies.
const (
	RestartNo        = "no"
	RestartOnFailure = "on-failure"
	RestartAlways    = "always"
)

// Defaults applied by Start to a Spec that leaves them zero.
const (
	DefaultLogLimit     int64 = 64 << 20
	DefaultKillGrace          = 5 * time.Second
	DefaultReadyTimeout       = 60 * time.Second
)

// Spec describes a job. Exactly one of Argv and Shell is set.
type Spec struct {
	// Argv is the program and its arguments, run directly without a shell.
	Argv []string `json:"argv,omitempty"`
	// Shell is a shell string run as ShellProgram -c Shell.
	Shell string `json:"shell,omitempty"`
	// ShellProgram runs Shell; Start fills in bash if it is on PATH, else sh.
	ShellProgram string `json:"shell_program,omitempty"`
	// Cwd is the job's working directory; Start makes it absolute (empty
	// means the caller's working directory).
	Cwd string `json:"cwd"`
	// Env, when non-nil, is the job's complete environment; nil means the
	// environment of the process that called Start, which the supervisor
	// inherits.
	Env         []string `json:"env,omitempty"`
	Name        string   `json:"name,omitempty"`
	Description string   `json:"description,omitempty"`
	// Timeout bounds the job's whole life, restarts included; 0 is none.
	Timeout time.Duration `json:"timeout,omitempty"`
	// KillGrace is the time between the first signal (on timeout or a
	// failed readiness) and SIGKILL.
	KillGrace time.Duration `json:"kill_grace,omitempty"`
	Ready     Probe         `json:"ready,omitzero"`
	// Restart is no, on-failure or always. A stopped or timed out job is
	// never restarted.
	Restart string `json:"restart,omitempty"`
	// MaxRestarts limits automatic restarts; 0 means no limit (the backoff,
	// up to 30s between runs, bounds a flapping job's rate).
	MaxRestarts int `json:"max_restarts,omitempty"`
	// LogLimit caps each log stream in bytes, keeping the newest part.
	LogLimit int64 `json:"log_limit,omitempty"`
	// Sandbox, when set and not empty, confines every run of the job: the
	// supervisor prepares it once and starts the job inside the sandbox
	// helper (its own executable), releasing it when the job is over.
	Sandbox *sandbox.Policy `json:"sandbox,omitempty"`
	// Policy, when set, is enforced while the job runs: every program any
	// run of the job (restarts included) or its readiness command executes
	// is decided by the runtime guard, and a refused one ends the run.
	// PolicyApproved lets prompt-level programs run (a human approved the
	// start); forbidden ones never do.
	Policy         *policy.Policy `json:"policy,omitempty"`
	PolicyApproved bool           `json:"policy_approved,omitempty"`

	// Backend is where the supervisor runs: local (the default, a process
	// on this host) or slurm (a batch job placed by Slurm).
	Backend string `json:"backend,omitempty"`
	// Slurm holds the sbatch options of a slurm job.
	Slurm *SlurmOptions `json:"slurm,omitempty"`
	// SlurmJobID is the scheduler's id of the job. Start records it once
	// sbatch has answered; callers leave it empty.
	SlurmJobID string `json:"slurm_job_id,omitempty"`
}

// SlurmOptions are what a slurm job asks of the scheduler. Zero values
// leave the cluster's defaults.
type SlurmOptions struct {
	Partition string `json:"partition,omitempty"`
	// TimeLimit is in sbatch's --time syntax (minutes, MM:SS, HH:MM:SS,
	// D-HH, …); Slurm ends the job when it passes (status timeout).
	TimeLimit string `json:"time_limit,omitempty"`
	CPUs      int    `json:"cpus,omitempty"`
	// Mem is sbatch's --mem (megabytes, or with a K/M/G/T suffix).
	Mem string `json:"mem,omitempty"`
	// ExtraArgs are further sbatch arguments, passed as given after the
	// ones above (so they can override them).
	ExtraArgs []string `json:"extra_args,omitempty"`
}

// Probe is a readiness check; at most one of Log, HTTP, TCP and Cmd is set.
// HTTP counts any response with a status below 500 as ready (a dev server
// answering 404 on / is up); Cmd is ready when the shell command exits 0.
type Probe struct {
	Log     string        `json:"log,omitempty"`
	HTTP    string        `json:"http,omitempty"`
	TCP     string        `json:"tcp,omitempty"`
	Cmd     string        `json:"cmd,omitempty"`
	Timeout time.Duration `json:"timeout,omitempty"`
}

// Set reports whether a probe is configured.
func (p Probe) Set() bool { return p.Log != "" || p.HTTP != "" || p.TCP != "" || p.Cmd != "" }

func invalid(format string, args ...any) error {
	return result.Errorf(result.CodeInvalidRequest, format, args...)
}

// Validate checks a spec for mistakes a caller can fix.
func (s *Spec) Validate() error {
	if (len(s.Argv) == 0) == (s.Shell == "") {
		return invalid("give either a shell string or a program and its arguments")
	}
	if len(s.Argv) > 0 && s.Argv[0] == "" {
		return invalid("the program name is empty")
	}
	if strings.HasPrefix(s.Name, "job_") {
		return invalid("a job name may not start with job_, which is how handles start")
	}
	if strings.ContainsAny(s.Name, "\x00\n") || len(s.Name) > 200 {
		return invalid("a job name must be one line of at most 200 bytes")
	}
	switch s.Restart {
	case "", RestartNo, RestartOnFailure, RestartAlways:
	default:
		return invalid("restart must be no, on-failure or always, not %q", s.Restart)
	}
	if s.Timeout < 0 || s.KillGrace < 0 || s.Ready.Timeout < 0 || s.MaxRestarts < 0 || s.LogLimit < 0 {
		return invalid("durations, limits and counts must not be negative")
	}
	switch s.Backend {
	case "", BackendLocal:
		if s.Slurm != nil {
			return invalid("slurm options need the slurm backend")
		}
	case BackendSlurm:
		if s.Slurm != nil && s.Slurm.CPUs < 0 {
			return invalid("cpus must not be negative")
		}
	default:
		return invalid("backend must be local or slurm, not %q", s.Backend)
	}
	if s.LogLimit != 0 && s.LogLimit < 2 {
		return invalid("log limit must be at least 2 bytes")
	}
	n := 0
	for _, v := range []string{s.Ready.Log, s.Ready.HTTP, s.Ready.TCP, s.Ready.Cmd} {
		if v != "" {
			n++
		}
	}
	if n > 1 {
		return invalid("give at most one readiness probe")
	}
	if s.Ready.Log != "" {
		if _, err := regexp.Compile(s.Ready.Log); err != nil {
			return invalid("ready log pattern: %v", err)
		}
	}
	if s.Ready.HTTP != "" {
		u, err := url.Parse(s.Ready.HTTP)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return invalid("ready http probe needs an http:// or https:// URL, not %q", s.Ready.HTTP)
		}
	}
	if s.Ready.TCP != "" {
		if _, _, err := net.SplitHostPort(s.Ready.TCP); err != nil {
			return invalid("ready tcp probe needs HOST:PORT: %v", err)
		}
	}
	return nil
}

// command is how the job is shown in its status: the shell string, or the
// argv array.
func (s *Spec) command() any {
	if s.Shell != "" {
		return s.Shell
	}
	return s.Argv
}

// execArgv is what the supervisor executes.
func (s *Spec) execArgv() []string {
	if s.Shell != "" {
		return []string{s.ShellProgram, "-c", s.Shell}
	}
	return s.Argv
}

func (s *Spec) applyDefaults() {
	if s.Restart == "" {
		s.Restart = RestartNo
	}
	if s.LogLimit == 0 {
		s.LogLimit = DefaultLogLimit
	}
	if s.KillGrace == 0 {
		s.KillGrace = DefaultKillGrace
	}
	if s.Ready.Set() && s.Ready.Timeout == 0 {
		s.Ready.Timeout = DefaultReadyTimeout
	}
}

func jobErr(code, format string, args ...any) *result.Error {
	return result.Errorf(code, format, args...)
}
