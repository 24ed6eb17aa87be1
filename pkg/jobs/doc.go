// Package jobs runs detached jobs under a per-job supervisor process and
// manages them through a state directory: starting, honest status
// resolution, capped logs with absolute offsets, waiting without polling,
// stopping whole process trees, restarts, listing and garbage collection.
//
// A CLI wires it up in two places:
//
//	d, _ := state.Open(dir)
//	st := jobs.NewStore(d, []string{"/proc/self/exe", "__supervise", "--state-dir", d.Path()})
//	s, err := st.Start(ctx, jobs.Spec{Shell: "make build", Cwd: cwd})
//
// and the hidden command that argv re-executes (Start appends the job id):
//
//	agentjob __supervise --state-dir DIR ID  →  jobs.RunSupervisor(ctx, d, ID)
//
// Each job has a directory <state>/jobs/<id> holding spec.json (written
// once by Start), status.json (written only by the job's supervisor, always
// by atomic replace), stdout.log and stderr.log (appended only by the
// supervisor), a sidecar per log counting the bytes the cap dropped, reader
// cursors, a stop request, a lost marker, the run lock (supervisor.lock)
// and the space reserve. Ids come from a counter and
// are never reused, so a handle that verifies but whose directory is gone
// answers job_expired.
//
// Under faults (see faults_test.go, which kills at every named step with
// internal/faultpoint): a job starts through a gate that opens only once
// status.json names its pid, so a supervisor killed before that leaves a
// job that never ran; everything else it started is in its Unix session,
// or (a daemon that called setsid) carries its mark in its environment,
// and Start and Stop find it by either (remains.go). A process that also
// clears its environment escapes both: only a cgroup would hold it. Stop kills a
// supervisor that died or froze during the grace, and the job, itself, and
// never answers success while a process of the job runs. A log trim
// announces the trimmed copy's dropped count, keyed by its inode, before
// the rename, so offsets never tear. A supervisor holds a small space
// reserve, written before the start is confirmed, so that an end on a full
// disk is still recorded. A damaged status.json makes that job
// state_corrupt, still listed and stoppable through the identity its
// supervisor keeps in its run lock (svlock.go).
//
// Status never claims more than it can prove: a recorded end is final; a
// different boot id means lost (host_restarted); otherwise the supervisor
// must be alive by PID and start time, or the job is lost (with
// orphan_pid if its own process provably still runs). A lost event is
// appended the first time anyone observes the loss; nothing watches for it
// in the background.
//
// A spec with Backend "slurm" runs the same supervisor as a Slurm batch job
// (see slurm.go): Start submits it with sbatch and returns while it may
// still be queued (status pending); the scheduler's command then re-executes
// the supervisor with the Slurm job id as a third argument, which must call
// RunScheduledSupervisor. The state directory must be on a filesystem the
// submitting host and the compute nodes share. Such a job's status merges
// the supervisor's record with squeue's view, its spec.json is rewritten
// once with the Slurm job id, and scheduler_end.json keeps an end that
// only the scheduler saw.
package jobs
