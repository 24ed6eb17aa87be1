package agentjob

import (
	"github.com/mattn/go-shellwords"
	"github.com/spf13/pflag"

	"github.com/agentplane/agentplane/pkg/cli/clikit"
	"github.com/agentplane/agentplane/pkg/jobs"
	"github.com/agentplane/agentplane/pkg/result"
)

// BackendOptions choose where start runs a job: --backend and the Slurm
// options. All are configurable (AGENTJOB_BACKEND, AGENTPLANE_BACKEND, the
// config file's backend key, …), so an environment can send every job to
// the cluster without its callers changing a flag.
type BackendOptions struct {
	Backend    string
	Partition  string
	TimeLimit  string
	CPUs       int
	Mem        string
	SbatchArgs string
}

// AddFlags adds the backend flags to start's flag set.
func (b *BackendOptions) AddFlags(f *pflag.FlagSet) {
	if b.Backend == "" {
		b.Backend = jobs.BackendLocal
	}
	f.Var(clikit.EnumValue{S: &b.Backend, Allowed: []string{jobs.BackendLocal, jobs.BackendSlurm}}, "backend",
		"where the job runs: local (a supervisor on this host) or slurm (a batch job; the state directory must be shared with the nodes)")
	f.StringVar(&b.Partition, "partition", "", "slurm: submit to `PARTITION`")
	f.StringVar(&b.TimeLimit, "time-limit", "", "slurm: the job's time limit, in sbatch time syntax (`LIMIT`: MINUTES, HH:MM:SS, D-HH, …)")
	f.IntVar(&b.CPUs, "cpus", 0, "slurm: `N` CPUs for the job (sbatch cpus-per-task)")
	f.StringVar(&b.Mem, "mem", "", "slurm: memory for the job, in sbatch mem syntax (`SIZE`: 500M, 4G)")
	f.StringVar(&b.SbatchArgs, "sbatch-args", "", "slurm: further sbatch `ARGS`, split like a shell would but never run through one")
	for _, n := range []string{"backend", "partition", "time-limit", "cpus", "mem", "sbatch-args"} {
		clikit.MarkFlags(f, clikit.Configurable, n)
	}
}

// Apply puts the backend choice into spec. Slurm options given to a local
// job are ignored rather than refused: they may come from the
// environment's configuration, which a per-call --backend local overrides.
func (b *BackendOptions) Apply(spec *jobs.Spec) error {
	if b.Backend != jobs.BackendSlurm {
		spec.Backend = jobs.BackendLocal
		return nil
	}
	spec.Backend = jobs.BackendSlurm
	if b.CPUs < 0 {
		return result.Errorf(result.CodeUsage, "--cpus must not be negative")
	}
	opts := &jobs.SlurmOptions{Partition: b.Partition, TimeLimit: b.TimeLimit, CPUs: b.CPUs, Mem: b.Mem}
	if b.SbatchArgs != "" {
		args, err := shellwords.Parse(b.SbatchArgs)
		if err != nil {
			return result.Errorf(result.CodeUsage, "--sbatch-args: %v", err)
		}
		opts.ExtraArgs = args
	}
	spec.Slurm = opts
	return nil
}
