package netproxy

import (
	"sync"

	"github.com/agentplane/agentplane/pkg/audit"
	"github.com/agentplane/agentplane/pkg/result"
)

// MaxAuditedDenials is how many refused attempts one proxy writes to the
// audit log, each as its own record. A command that retries a refused host
// in a loop would otherwise fill the log until rotation pushed every other
// record out; past the bound one last record says that the rest were
// counted but not logged (the result's network.denied still counts all).
const MaxAuditedDenials = 1000

// Auditor returns an OnDeny that appends one audit record per refused
// attempt: base (program, operation, command, cwd, handle, …) with status
// "denied", error code network_denied and the connection. Errors writing
// the log are reported to onErr, which may be nil.
func Auditor(log *audit.Log, base audit.Record, onErr func(error)) func(Denial) {
	var mu sync.Mutex
	n := 0
	return func(d Denial) {
		mu.Lock()
		n++
		seq := n
		mu.Unlock()
		if seq > MaxAuditedDenials+1 {
			return
		}
		rec := base
		rec.Time, rec.Status, rec.ErrorCode, rec.ExitCode, rec.DurationMS = "", "denied", result.CodeNetworkDenied, nil, 0
		rec.Network = &audit.NetworkDenial{Host: d.Host, Port: d.Port, Protocol: d.Protocol, Reason: d.Reason}
		if seq == MaxAuditedDenials+1 {
			rec.Network.Reason = "more connections were refused; they are counted in the result but not logged one by one"
		}
		if err := log.Append(rec); err != nil && onErr != nil {
			onErr(err)
		}
	}
}
