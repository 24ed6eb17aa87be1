package result

// Every error code any agentplane program reports is declared here, once,
// with its one-line meaning in Codes. Engines return these constants; the
// man pages' ERRORS sections are generated from Codes; a test checks that
// Codes, CONTRACT.md and every code used in the source name the same set.

// Program names a code is reported by, for the man pages.
const (
	ProgAgentsh  = "agentsh"
	ProgAgentjob = "agentjob"
	ProgAgentfs  = "agentfs"
)

// Shared codes: the CLI layer and the state directory.
const (
	CodeUsage          = "usage_error"
	CodeInvalidRequest = "invalid_request"
	CodeInvalidConfig  = "invalid_config"
	CodeInternal       = "internal_error"
	CodeInvalidHandle  = "invalid_handle"
	CodeStateDir       = "state_dir_error"
	CodeAudit          = "audit_error"
	CodeNoSpace        = "no_space"
	CodeStateReadOnly  = "state_read_only"
	CodeStateCorrupt   = "state_corrupt"
)

// Outcome codes report how the work the caller asked for ended, not a
// failure to do it: the call did what was asked and its result says how
// that went. Hosts that tell the two apart (MCP's isError) ask IsOutcome.
const (
	CodeWaitTimeout   = "wait_timeout"
	CodeWaitCancelled = "wait_cancelled"
	CodeJobFailed     = "job_failed"
	CodeNotReady      = "not_ready"
)

// Running a command (agentsh, agentjob start).
const (
	CodeCommandNotFound      = "command_not_found"
	CodeCommandNotExecutable = "command_not_executable"
	CodeCwdNotFound          = "cwd_not_found"
	CodeStdinFile            = "stdin_file_error"
	CodeSaveOutput           = "save_output_error"
	CodeStartFailed          = "start_failed"
)

// The sandbox.
const (
	CodeSandboxUnavailable = "sandbox_unavailable"
	CodeSandboxFailed      = "sandbox_failed"
	CodeSandboxLocked      = "sandbox_locked"
	CodeMemoryLimit        = "memory_limit"
	CodeCPULimit           = "cpu_limit"
	CodeFileSizeLimit      = "file_size_limit"
	CodePidsLimit          = "pids_limit"
	CodeNetworkDenied      = "network_denied"
)

// The command policy.
const (
	CodePolicyParse       = "policy_parse_error"
	CodePolicyInvalid     = "policy_invalid"
	CodePolicyDenied      = "policy_denied"
	CodeApprovalRequired  = "approval_required"
	CodePolicyUnavailable = "policy_unavailable"
)

// Sessions.
const (
	CodeSessionBusy        = "session_busy"
	CodeSessionEnded       = "session_ended"
	CodeSessionStartFailed = "session_start_failed"
	CodeSessionUnreachable = "session_unreachable"
	CodeSessionRefused     = "session_refused"
	CodeSessionReset       = "session_reset"
)

// Jobs.
const (
	CodeJobNotFound  = "job_not_found"
	CodeJobExpired   = "job_expired"
	CodeJobRunning   = "job_running"
	CodeSubmitFailed = "submit_failed"
	CodeStopFailed   = "stop_failed"
)

// Files and patches (agentfs).
const (
	CodeFileNotFound        = "file_not_found"
	CodeIsDirectory         = "is_directory"
	CodeNotRegularFile      = "not_regular_file"
	CodeOldStringNotFound   = "old_string_not_found"
	CodeOldStringNotUnique  = "old_string_not_unique"
	CodeCountMismatch       = "count_mismatch"
	CodeNoChange            = "no_change"
	CodeLineOutOfRange      = "line_out_of_range"
	CodeFileChanged         = "file_changed"
	CodeFileExists          = "file_exists"
	CodeBinaryFile          = "binary_file"
	CodeInvalidEncoding     = "invalid_encoding"
	CodeFileTooLarge        = "file_too_large"
	CodeOutsideRoot         = "outside_root"
	CodePathDenied          = "path_denied"
	CodePermissionDenied    = "permission_denied"
	CodeNothingToUndo       = "nothing_to_undo"
	CodeUndoConflict        = "undo_conflict"
	CodeIOError             = "io_error"
	CodeIndentationConflict = "indentation_conflict"
	CodePatchParse          = "patch_parse_error"
	CodePatchFailed         = "patch_failed"
)

// CodeInfo is one row of the code table.
type CodeInfo struct {
	Code     string
	Meaning  string   // one line, lower case, no final period
	Programs []string // the programs that report it
	Outcome  bool     // an outcome (see IsOutcome), not a failure of the tool
}

var (
	progAll = []string{ProgAgentsh, ProgAgentjob, ProgAgentfs}
	progSh  = []string{ProgAgentsh}
	progJob = []string{ProgAgentjob}
	progFS  = []string{ProgAgentfs}
	progRun = []string{ProgAgentsh, ProgAgentjob}
)

// Codes is the table of every error code, in the order the man pages list
// them.
var Codes = []CodeInfo{
	{CodeUsage, "the command line is wrong: an unknown flag or command, a bad value, a missing argument", progAll, false},
	{CodeInvalidRequest, "the --request object or MCP arguments are wrong: an unknown or operator-owned key, a bad type or value", progAll, false},
	{CodeInvalidConfig, "the config file or an AGENTPLANE_ environment variable holds an invalid value", progAll, false},
	{CodeInternal, "an unexpected failure with no better code; the message says what failed", progAll, false},
	{CodeInvalidHandle, "a handle that this environment did not issue, or that was altered", progRun, false},
	{CodeStateDir, "the state directory cannot be created or opened", progAll, false},
	{CodeAudit, "the audit log cannot be written, read or followed", progRun, false},
	{CodeNoSpace, "the filesystem holding the state (or the file) is full (ENOSPC or a quota); free space and retry", progAll, false},
	{CodeStateReadOnly, "the state directory is on a read-only mount, so an operation that records something cannot run", progAll, false},
	{CodeStateCorrupt, "a state file does not parse (damaged outside agentplane); the error names the file, and only what depends on it is affected", progAll, false},

	{CodeWaitTimeout, "a wait's timeout passed before what it waited for happened", progJob, true},
	{CodeWaitCancelled, "SIGINT or SIGTERM stopped a wait before what it waited for happened; the jobs go on; exit status 128+N", progJob, true},
	{CodeJobFailed, "the awaited job ended, but not well (failed, stopped, timeout, lost)", progJob, true},
	{CodeNotReady, "a job started to be awaited ready ended, or timed out, before it was ready", progJob, true},

	{CodeCommandNotFound, "the command (or the shell) is not on PATH or does not exist; exit status 127", progRun, false},
	{CodeCommandNotExecutable, "the command exists but cannot be executed; exit status 126", progRun, false},
	{CodeCwdNotFound, "the working directory does not exist", progRun, false},
	{CodeStdinFile, "the --stdin-file cannot be read", progSh, false},
	{CodeSaveOutput, "the --save-output directory or its files cannot be written", progSh, false},
	{CodeStartFailed, "the command could not be started for another reason", progRun, false},

	{CodeSandboxUnavailable, "the kernel cannot enforce the sandbox asked for, so the command was not run unprotected", progRun, false},
	{CodeSandboxFailed, "setting up the sandbox failed after the kernel offered it", progRun, false},
	{CodeSandboxLocked, "under sandbox_lock, a call asked for less than the operator's sandbox floor (agentfs: a change where the locked sandbox lets no command write, or a file a flag names for it to open)", progAll, false},
	{CodeMemoryLimit, "the command was killed for exceeding --memory", progRun, false},
	{CodeCPULimit, "the command was killed for exceeding --cpu-time", progRun, false},
	{CodeFileSizeLimit, "the command was killed for writing a file larger than --file-size", progRun, false},
	{CodePidsLimit, "the command could not fork beyond --pids", progRun, false},
	{CodeNetworkDenied, "the command tried to reach a host the network allowlist does not name", progRun, false},

	{CodePolicyParse, "a shell string could not be parsed for the command policy", progRun, false},
	{CodePolicyInvalid, "a policy rules file, or a setting of the policy, is wrong", progRun, false},
	{CodePolicyDenied, "the command policy decided a command is forbidden", progRun, false},
	{CodeApprovalRequired, "the command policy decided a command needs approval (prompt) and it was not approved", progRun, false},
	{CodePolicyUnavailable, "the policy cannot be enforced while the command runs and static-only enforcement was not chosen", progRun, false},

	{CodeSessionBusy, "the session is running another call and did not become free in time", progSh, false},
	{CodeSessionEnded, "the session's shell has exited or was stopped; start a new session", progSh, false},
	{CodeSessionStartFailed, "the session's server or shell could not be started", progSh, false},
	{CodeSessionUnreachable, "the session's server runs but its socket is gone or refuses, or it stopped answering within the call's bounds; session stop still ends it", progSh, false},
	{CodeSessionRefused, "the session's server did not accept the caller (sandboxed, another user, a wrong secret)", progSh, false},
	{CodeSessionReset, "the call changed the shell so that it could not report its end; the call's status is unknown and the shell was restarted", progSh, false},

	{CodeJobNotFound, "no job of this environment has that handle or name", progJob, false},
	{CodeJobExpired, "the job was removed by rm or gc; its id is never reused", progJob, false},
	{CodeJobRunning, "the operation needs an ended job (rm without --force)", progJob, false},
	{CodeSubmitFailed, "the scheduler refused the job (sbatch failed)", progJob, false},
	{CodeStopFailed, "a process of the job still ran after stop SIGKILLed it and waited; the job is not stopped", progJob, false},

	{CodeFileNotFound, "the file does not exist", progFS, false},
	{CodeIsDirectory, "the path is a directory where a file is needed", progFS, false},
	{CodeNotRegularFile, "the path is a device, socket, FIFO or other non-regular file", progFS, false},
	{CodeOldStringNotFound, "the edit's old_string is not in the file (the hint shows the closest near-miss)", progFS, false},
	{CodeOldStringNotUnique, "the edit's old_string matches more than once (the lines of every match are given)", progFS, false},
	{CodeCountMismatch, "an edit matched a different number of times than its expected_count", progFS, false},
	{CodeNoChange, "the edit would not change the file (old equals new)", progFS, false},
	{CodeLineOutOfRange, "a line number is outside the file", progFS, false},
	{CodeFileChanged, "the file changed since it was read (its sha256 differs from the one given)", progFS, false},
	{CodeFileExists, "the file exists and the operation would create it", progFS, false},
	{CodeBinaryFile, "the file is binary and the operation is for text", progFS, false},
	{CodeInvalidEncoding, "the file or the text is not valid in the encoding asked for", progFS, false},
	{CodeFileTooLarge, "the file is over the size limit", progFS, false},
	{CodeOutsideRoot, "the path is outside the root (absolute, or climbing out with ..)", progFS, false},
	{CodePathDenied, "the path is denied by the operator's path rules", progFS, false},
	{CodePermissionDenied, "the operating system refused access to the file", progFS, false},
	{CodeNothingToUndo, "no change made through agentfs to this file is recorded", progFS, false},
	{CodeUndoConflict, "the file changed since agentfs's last change, so undo would lose that change", progFS, false},
	{CodeIOError, "reading or writing the file failed for another reason", progFS, false},
	{CodeIndentationConflict, "a fuzzy edit cannot indent the new text the way the file is indented", progFS, false},
	{CodePatchParse, "the patch cannot be read (the line and its text are given)", progFS, false},
	{CodePatchFailed, "a hunk does not apply to the file it targets (the file and hunk are given)", progFS, false},
}

// Lookup returns the table row of code.
func Lookup(code string) (CodeInfo, bool) {
	for _, c := range Codes {
		if c.Code == code {
			return c, true
		}
	}
	return CodeInfo{}, false
}

// CodesOf returns the rows of the codes program reports, in table order.
func CodesOf(program string) []CodeInfo {
	var out []CodeInfo
	for _, c := range Codes {
		for _, p := range c.Programs {
			if p == program {
				out = append(out, c)
				break
			}
		}
	}
	return out
}

// IsOutcome reports whether code is an outcome code: a result that fails
// with it is a normal answer, not an error of the tool.
func IsOutcome(code string) bool {
	c, ok := Lookup(code)
	return ok && c.Outcome
}
