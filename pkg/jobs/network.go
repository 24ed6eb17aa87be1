package jobs

import (
	"encoding/json"
	"path/filepath"

	"github.com/agentplane/agentplane/pkg/audit"
	"github.com/agentplane/agentplane/pkg/netproxy"
	"github.com/agentplane/agentplane/pkg/sandbox"
	"github.com/agentplane/agentplane/pkg/state"
)

// networkFile holds, for a job under --net proxy, the allowlist and the
// refusals of its supervisor's proxy, which status reports as "network".
// It is its own file, written by its own goroutine, so that a command
// hammering a refused host never delays the supervisor's status writes.
const networkFile = "network.json"

// networkRecorder keeps networkFile up to date: each refusal asks for a
// write, and writes coalesce, so the file trails the proxy by at most one
// write however fast refusals come.
type networkRecorder struct {
	path   string
	report func() *netproxy.Report
	// before holds the refusals of the job's earlier supervisors (a
	// manual restart starts a new one, with a new proxy), so that status
	// counts over the job's whole life.
	before []netproxy.DeniedHost
	kick   chan struct{}
	done   chan struct{}
}

// recordNetwork wires a prepared sandbox's proxy to the job's state and
// audit log. It returns nil when the sandbox has no proxy.
func (sv *supervisor) recordNetwork(prep *sandbox.Prepared) *networkRecorder {
	if prep.Network() == nil {
		return nil
	}
	nr := &networkRecorder{path: filepath.Join(sv.dir, networkFile), report: prep.Network,
		kick: make(chan struct{}, 1), done: make(chan struct{})}
	if sv.rec.Run > 1 {
		if prev := readNetwork(sv.dir); prev != nil {
			nr.before = prev.Denied
		}
	}
	audited := netproxy.Auditor(&audit.Log{Path: sv.d.Join(audit.FileName)},
		audit.Record{Program: "agentjob", Operation: "job", Command: commandOf(sv.spec.Shell, sv.spec.Argv),
			Cwd: sv.spec.Cwd, Handle: sv.d.Mint("job", sv.id), Description: sv.spec.Description}, nil)
	prep.OnDeny = func(d netproxy.Denial) {
		select {
		case nr.kick <- struct{}{}:
		default:
		}
		audited(d)
	}
	nr.write()
	go nr.loop()
	return nr
}

func (nr *networkRecorder) loop() {
	defer close(nr.done)
	for range nr.kick {
		nr.write()
	}
}

func (nr *networkRecorder) write() {
	r := nr.report()
	r.Denied = mergeDenied(nr.before, r.Denied)
	b, err := json.Marshal(r)
	if err == nil {
		_ = state.WriteFileAtomic(nr.path, append(b, '\n'), 0o600)
	}
}

// close writes the final report and stops the writer.
func (nr *networkRecorder) close() {
	close(nr.kick)
	<-nr.done
	nr.write()
}

// readNetwork returns the job's network report, or nil without one.
func readNetwork(dir string) *netproxy.Report {
	var r netproxy.Report
	if err := state.ReadJSON(filepath.Join(dir, networkFile), &r); err != nil {
		return nil
	}
	if r.Allowed == nil {
		r.Allowed = []string{}
	}
	if r.Denied == nil {
		r.Denied = []netproxy.DeniedHost{}
	}
	return &r
}

// mergeDenied adds the counts of now to those of before, host by host, in
// the order first refused.
func mergeDenied(before, now []netproxy.DeniedHost) []netproxy.DeniedHost {
	if len(before) == 0 {
		return now
	}
	out := append([]netproxy.DeniedHost(nil), before...)
	at := map[netproxy.DeniedHost]int{}
	for i, d := range out {
		at[netproxy.DeniedHost{Host: d.Host, Port: d.Port}] = i
	}
	for _, d := range now {
		if i, ok := at[netproxy.DeniedHost{Host: d.Host, Port: d.Port}]; ok {
			out[i].Count += d.Count
			continue
		}
		out = append(out, d)
	}
	return out
}
