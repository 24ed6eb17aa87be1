package agentjob

import (
	"github.com/spf13/cobra"

	"github.com/agentplane/agentplane/pkg/cli/clikit"
)

// statusDoc lists the fields of a job's status object (CONTRACT §3).
const statusDoc = `handle: the job's handle (job_…), to pass as JOB
name: the --name given, or null
status: starting, running, ready, exited, failed, stopped, timeout or lost
exit_code, signal: how the job ended (null while it runs)
pid: the job's process
command: the shell string (-c) or the argv
cwd: the job's working directory
started_at, ended_at: timestamps (ended_at null while it runs)
ready: whether a readiness probe passed
restarts: how many times the job was restarted
stdout_bytes, stderr_bytes: the bytes each stream has written
description: the --description given, or null
reason: why a job failed when no exit code says it: ready_timeout, the code of a start failure, policy_denied or approval_required when the runtime policy refused an exec, or sandbox_refreshed when a process outside replaced a file the run's sandbox protects or hides and the run was killed for it
denied: with reason policy_denied or approval_required, the refused exec: argv, exe, chain (its parents' argv), decision, rule, justification, source
lost_reason: host_restarted or supervisor_died, for a lost job
orphan_pid: a lost job's process that is provably still alive (stop kills it)`

// commandDocs are the man-page sections of the program and its
// operations: examples and the result's fields, keyed by the command path
// below the root ("" is the root).
var commandDocs = map[string]clikit.Doc{
	"": {
		Example: `  h=$(agentjob start -q handle --name web --ready-http http://localhost:8080/ --wait-ready -- npm run dev)
  agentjob logs "$h" --since-last --stream stdout -q data
  agentjob wait build --timeout 10m && agentjob rm build`,
		Result: `success: whether the operation succeeded; the fields of each operation are in its own page
error: on failure, {code, message} and what helps to recover (the job, a hint)`,
	},
	"start": {
		Example: `  h=$(agentjob start -q handle --name build -- make -j8)
  agentjob start --name web --ready-log 'listening on' --wait-ready -c 'npm run dev'
  agentjob start --request call.json   # {"command": "pytest -x", "name": "tests", "timeout": "30m"}`,
		Result: `success: true (false with error not_ready when --wait-ready saw the job end first)
` + statusDoc + `
policy: the policy decision, with --policy
sandbox: what the sandbox enforces, with sandbox flags`,
	},
	"status": {
		Example: `  agentjob status web -q status
  agentjob status "$h1" "$h2" -q 'jobs.#.status'
  echo '{"jobs": ["web"]}' | agentjob status --request -`,
		Result: `success: true
` + statusDoc + `
jobs: with several JOBs, one status object each instead of the fields above`,
	},
	"logs": {
		Example: `  agentjob logs web --tail 50 --stream stderr -q data
  agentjob logs "$h" --since-last --reader agent --stream stdout
  agentjob logs build --grep 'error|FAIL' -q 'stdout.matches.#.line'`,
		Result: `success: true
handle, status: the job and its status at the time of the read
data: with --stream stdout or stderr, the text read
offset, next_offset: with --stream stdout or stderr, the absolute byte offsets read from and to (pass next_offset as --offset)
eof: with --stream stdout or stderr, whether the read reached the end of what the job has written
dropped_bytes: the bytes before offset that --log-limit dropped, if any
matches: with --grep, the matching lines as {offset, line} instead of data
stdout, stderr: with --stream both (the default), one object each with the fields above
interrupted: with --follow, true when the stream stopped before the job ended (--follow first prints {type, data, offset, next_offset, eof} lines, or {type: match, stream, offset, line} with --grep)`,
	},
	"wait": {
		Example: `  agentjob wait build --timeout 10m && ./deploy.sh
  agentjob wait web --for ready --timeout 60s -q status
  agentjob wait "$h1" "$h2" --any -q first`,
		Result: `success: whether what was awaited happened and went well (exited 0, or ready)
` + statusDoc + `
jobs: with several JOBs, one status object each instead of the fields above
first: with --any and several JOBs, the handle of the first job done
timed_out: true when --timeout passed first (exit 124)
error: job_failed when a job ended otherwise, wait_timeout on a timeout,
wait_cancelled when SIGINT or SIGTERM stopped the wait (exit 128+N; the jobs go on)`,
	},
	"stop": {
		Example: `  agentjob stop web
  agentjob stop "$h" --signal INT --grace 10s -q status
  echo '{"job": "web", "grace": "2s"}' | agentjob stop --request -`,
		Result: `success: true (stopping an ended job is not an error)
` + statusDoc,
	},
	"restart": {
		Example: `  agentjob restart web
  agentjob restart "$h" -q restarts
  echo '{"job": "web"}' | agentjob restart --request -`,
		Result: `success: true
` + statusDoc,
	},
	"list": {
		Example: `  agentjob list
  agentjob list --status running,ready -q 'jobs.#.handle'
  echo '{"status": ["failed"]}' | agentjob list --request -`,
		Result: `success: true
jobs: one status object per job of the environment, newest first (fields as in agentjob status)`,
	},
	"rm": {
		Example: `  agentjob rm build
  agentjob rm web --force -q removed
  echo '{"job": "build"}' | agentjob rm --request -`,
		Result: `success: true
` + statusDoc + `
removed: true`,
	},
	"gc": {
		Example: `  agentjob gc
  agentjob gc --older-than 24h -q count
  echo '{"older_than": "1h"}' | agentjob gc --request -`,
		Result: `success: true
removed: the status objects of the jobs removed
count: how many jobs were removed`,
	},
	"events": {
		Example: `  agentjob events --since 42
  agentjob events --job web --follow
  last=$(agentjob events -q last_seq)`,
		Result: `events: printed first, one NDJSON line each: seq, time, handle, name (if any), type (started, ready, exited, failed, stopped, timeout, restarted or lost), and exit_code, signal or restarts where there is one
success: true, in the final line
count: how many events were printed
last_seq: the sequence number of the last event, to pass as --since`,
	},
}

// annotateDocs attaches the man-page sections to the commands.
func annotateDocs(root *cobra.Command) { clikit.AnnotateDocs(root, commandDocs) }
