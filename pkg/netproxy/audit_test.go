package netproxy

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/agentplane/agentplane/pkg/audit"
	"github.com/agentplane/agentplane/pkg/result"
)

func TestAuditorBoundsRecords(t *testing.T) {
	log := &audit.Log{Path: filepath.Join(t.TempDir(), audit.FileName), MaxBytes: 1 << 30}
	fn := Auditor(log, audit.Record{Program: "agentsh", Operation: "run", Command: "curl x", Cwd: "/w"}, func(err error) { t.Error(err) })
	for i := 0; i < MaxAuditedDenials+50; i++ {
		fn(Denial{Host: "evil.example", Port: 443, Protocol: ProtoConnect, Reason: "no rule"})
	}
	recs, err := log.Read(time.Time{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != MaxAuditedDenials+1 {
		t.Fatalf("%d records, want %d", len(recs), MaxAuditedDenials+1)
	}
	r := recs[0]
	if r.Status != "denied" || r.ErrorCode != result.CodeNetworkDenied || r.Network == nil || r.Network.Host != "evil.example" ||
		r.Network.Port != 443 || r.Network.Protocol != ProtoConnect || r.Command != "curl x" || r.Program != "agentsh" {
		t.Fatalf("record %+v", r)
	}
	if last := recs[len(recs)-1]; last.Network == nil || last.Network.Reason == "no rule" {
		t.Fatalf("the last record does not say the rest were not logged: %+v", last.Network)
	}
}
