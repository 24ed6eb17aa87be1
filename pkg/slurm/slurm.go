// Package slurm talks to a Slurm cluster through its command-line clients
// (sbatch, squeue, scontrol, scancel), run as argv without a shell, and
// parses what they print. It knows Slurm, not agentjob: mapping scheduler
// states onto job statuses is the caller's business.
//
// Two quirks of the clients shape it. squeue --json reports exit_code as
// the raw wait status (exit 3 reads 768, SIGTERM reads 15), so it is
// decoded here. And in Slurm 22.05 squeue --json ignores --jobs and lists
// every job it knows, so one query answers for any number of jobs and the
// filtering is done here.
package slurm

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
)

// Job is what the scheduler says about one job.
type Job struct {
	ID string `json:"job_id"`
	// State is the base job state (PENDING, RUNNING, COMPLETED, CANCELLED,
	// TIMEOUT, NODE_FAIL, …), without flags or suffixes.
	State string `json:"state"`
	// Reason is the scheduler's reason: why a job pends (Resources,
	// Priority, …) or how it ended (NonZeroExitCode, …); empty for None.
	Reason string `json:"reason,omitempty"`
	// ExitCode and Signal are the batch script's end, when known.
	ExitCode *int   `json:"exit_code,omitempty"`
	Signal   string `json:"signal,omitempty"`
	Nodes    string `json:"nodes,omitempty"`
}

// Base job states that matter to callers.
const (
	StatePending     = "PENDING"
	StateRunning     = "RUNNING"
	StateCompleting  = "COMPLETING"
	StateCompleted   = "COMPLETED"
	StateCancelled   = "CANCELLED"
	StateFailed      = "FAILED"
	StateTimeout     = "TIMEOUT"
	StateNodeFail    = "NODE_FAIL"
	StatePreempted   = "PREEMPTED"
	StateOutOfMemory = "OUT_OF_MEMORY"
	StateBootFail    = "BOOT_FAIL"
	StateDeadline    = "DEADLINE"
)

// Queued reports whether a state means the job waits for resources and
// has not started: nothing of it runs anywhere yet.
func Queued(state string) bool {
	switch state {
	case StatePending, "CONFIGURING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD":
		return true
	}
	return false
}

// Terminal reports whether a state is a job's end.
func Terminal(state string) bool {
	switch state {
	case StateCompleted, StateCancelled, StateFailed, StateTimeout, StateNodeFail,
		StatePreempted, StateOutOfMemory, StateBootFail, StateDeadline, "REVOKED", "SPECIAL_EXIT":
		return true
	}
	return false
}

// baseState strips what Slurm may append to a state: flags after '+' in
// scontrol ("COMPLETING+"), "by UID" in sacct ("CANCELLED by 0").
func baseState(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexAny(s, " +"); i >= 0 {
		s = s[:i]
	}
	return strings.ToUpper(s)
}

// DecodeWaitStatus turns a raw wait status, as squeue --json reports
// exit_code, into an exit code or a signal name (exactly one is set).
func DecodeWaitStatus(raw int) (*int, string) {
	ws := syscall.WaitStatus(raw)
	if ws.Signaled() {
		return nil, signalName(ws.Signal())
	}
	code := ws.ExitStatus()
	return &code, ""
}

func signalName(sig syscall.Signal) string {
	names := map[syscall.Signal]string{
		syscall.SIGHUP: "SIGHUP", syscall.SIGINT: "SIGINT", syscall.SIGQUIT: "SIGQUIT",
		syscall.SIGABRT: "SIGABRT", syscall.SIGKILL: "SIGKILL", syscall.SIGSEGV: "SIGSEGV",
		syscall.SIGPIPE: "SIGPIPE", syscall.SIGALRM: "SIGALRM", syscall.SIGTERM: "SIGTERM",
		syscall.SIGUSR1: "SIGUSR1", syscall.SIGUSR2: "SIGUSR2", syscall.SIGBUS: "SIGBUS",
		syscall.SIGXCPU: "SIGXCPU", syscall.SIGXFSZ: "SIGXFSZ",
	}
	if n, ok := names[sig]; ok {
		return n
	}
	return "SIG" + strconv.Itoa(int(sig))
}

// squeueJob is the part of a squeue --json job this package reads. job_id
// is a number in 22.05; exit_code a raw wait status (a number, or in later
// releases an object, which is left alone).
type squeueJob struct {
	JobID       json.Number     `json:"job_id"`
	JobState    json.RawMessage `json:"job_state"`
	StateReason string          `json:"state_reason"`
	ExitCode    json.RawMessage `json:"exit_code"`
	Nodes       string          `json:"nodes"`
}

// ParseQueue parses the output of squeue --json into jobs by id.
func ParseQueue(data []byte) (map[string]Job, error) {
	var doc struct {
		Errors []json.RawMessage `json:"errors"`
		Jobs   []squeueJob       `json:"jobs"`
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(&doc); err != nil {
		return nil, fmt.Errorf("slurm: parse squeue --json: %w", err)
	}
	if len(doc.Errors) > 0 && len(doc.Jobs) == 0 {
		return nil, fmt.Errorf("slurm: squeue reported errors: %s", doc.Errors[0])
	}
	out := make(map[string]Job, len(doc.Jobs))
	for _, j := range doc.Jobs {
		job := Job{ID: j.JobID.String(), State: baseState(stateString(j.JobState)), Nodes: j.Nodes}
		if j.StateReason != "None" {
			job.Reason = j.StateReason
		}
		if Terminal(job.State) {
			var raw int
			if json.Unmarshal(j.ExitCode, &raw) == nil {
				job.ExitCode, job.Signal = DecodeWaitStatus(raw)
			}
		}
		out[job.ID] = job
	}
	return out, nil
}

// stateString reads job_state, a string in 22.05 and a list of strings
// (base state first) in later releases.
func stateString(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var list []string
	if json.Unmarshal(raw, &list) == nil && len(list) > 0 {
		return list[0]
	}
	return ""
}

// ParseShowJob parses the output of scontrol show job ID: KEY=VALUE pairs
// separated by white space. ExitCode there is CODE:SIGNAL, already decoded.
func ParseShowJob(text []byte) (Job, error) {
	fields := map[string]string{}
	for _, tok := range strings.Fields(string(text)) {
		k, v, ok := strings.Cut(tok, "=")
		if ok {
			if _, seen := fields[k]; !seen {
				fields[k] = v
			}
		}
	}
	id, ok := fields["JobId"]
	if !ok || fields["JobState"] == "" {
		return Job{}, errors.New("slurm: scontrol show job printed no JobId and JobState")
	}
	job := Job{ID: id, State: baseState(fields["JobState"]), Nodes: fields["NodeList"]}
	if r := fields["Reason"]; r != "None" && r != "(null)" {
		job.Reason = r
	}
	if job.Nodes == "(null)" {
		job.Nodes = ""
	}
	if ec, ok := fields["ExitCode"]; ok && Terminal(job.State) {
		c, s, _ := strings.Cut(ec, ":")
		code, err1 := strconv.Atoi(c)
		sig, err2 := strconv.Atoi(s)
		switch {
		case err2 == nil && sig != 0:
			job.Signal = signalName(syscall.Signal(sig))
		case err1 == nil:
			job.ExitCode = &code
		}
	}
	return job, nil
}

// ParseSubmit reads the job id that sbatch --parsable prints: "ID" or
// "ID;CLUSTER".
func ParseSubmit(out []byte) (string, error) {
	line := strings.TrimSpace(string(out))
	if i := strings.LastIndexByte(line, '\n'); i >= 0 {
		line = strings.TrimSpace(line[i+1:])
	}
	id, _, _ := strings.Cut(line, ";")
	if _, err := strconv.ParseUint(id, 10, 64); err != nil {
		return "", fmt.Errorf("slurm: sbatch printed no job id: %q", line)
	}
	return id, nil
}

// Client runs the Slurm clients. Program fields left empty mean the
// program of that name on PATH; the clients find the cluster through
// SLURM_CONF or their compiled-in default, as they do for users.
type Client struct {
	Sbatch, Squeue, Scontrol, Scancel string
}

// Error is a client program that failed, with what it said.
type Error struct {
	Argv   []string
	Stderr string
	Err    error
}

func (e *Error) Error() string {
	msg := strings.TrimSpace(e.Stderr)
	if msg == "" {
		msg = e.Err.Error()
	}
	return e.Argv[0] + ": " + msg
}

func (e *Error) Unwrap() error { return e.Err }

func orDefault(p, def string) string {
	if p == "" {
		return def
	}
	return p
}

func (c *Client) run(ctx context.Context, argv []string, stdin []byte) ([]byte, error) {
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	out, err := cmd.Output()
	if err != nil {
		return out, &Error{Argv: argv, Stderr: stderr.String(), Err: err}
	}
	return out, nil
}

// Submit runs sbatch --parsable with args and the batch script path, and
// returns the new job's id.
func (c *Client) Submit(ctx context.Context, args []string, script string) (string, error) {
	argv := append([]string{orDefault(c.Sbatch, "sbatch"), "--parsable"}, args...)
	argv = append(argv, script)
	out, err := c.run(ctx, argv, nil)
	if err != nil {
		return "", err
	}
	return ParseSubmit(out)
}

// Queue returns what the scheduler knows of the jobs ids, from one squeue
// call; a job it no longer knows (MinJobAge passed) is absent.
func (c *Client) Queue(ctx context.Context, ids []string) (map[string]Job, error) {
	argv := []string{orDefault(c.Squeue, "squeue"), "--json", "--states=all"}
	if len(ids) > 0 {
		argv = append(argv, "--jobs="+strings.Join(ids, ","))
	}
	out, err := c.run(ctx, argv, nil)
	if err != nil {
		return nil, err
	}
	all, err := ParseQueue(out)
	if err != nil || len(ids) == 0 {
		return all, err
	}
	got := make(map[string]Job, len(ids))
	for _, id := range ids {
		if j, ok := all[id]; ok {
			got[id] = j
		}
	}
	return got, nil
}

// Show returns scontrol show job ID; ok is false when the controller does
// not know the job (any more).
func (c *Client) Show(ctx context.Context, id string) (Job, bool, error) {
	out, err := c.run(ctx, []string{orDefault(c.Scontrol, "scontrol"), "show", "job", id}, nil)
	if err != nil {
		var e *Error
		if errors.As(err, &e) && strings.Contains(e.Stderr, "Invalid job id") {
			return Job{}, false, nil
		}
		return Job{}, false, err
	}
	j, err := ParseShowJob(out)
	return j, err == nil, err
}

// Cancel runs scancel. With batchOnly, signal goes to the batch script's
// own process only (scancel --batch), not to the job's other processes:
// that lets a supervisor running as the batch script stop its job in its
// own way. An empty signal is scancel's default (end the job).
func (c *Client) Cancel(ctx context.Context, id, signal string, batchOnly bool) error {
	argv := []string{orDefault(c.Scancel, "scancel")}
	if batchOnly {
		argv = append(argv, "--batch")
	}
	if signal != "" {
		argv = append(argv, "--signal="+signal)
	}
	argv = append(argv, id)
	_, err := c.run(ctx, argv, nil)
	return err
}
