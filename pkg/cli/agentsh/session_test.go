package agentsh

import (
	"encoding/json"
	"reflect"
	"testing"
)

// TestReadCallResult: what a session call's client reads of the result
// with gjson is what json.Unmarshal into the fields' types reads, for a
// plain call, a sandboxed one under a runtime policy that refused an exec,
// and results with fields of the wrong type or missing.
func TestReadCallResult(t *testing.T) {
	for _, raw := range []string{
		`{"success":true,"status":"completed","exit_code":0,"signal":null,"stdout":"x\"y","cwd":"/w/d","command":"true","pid":27443,"session":"ses_a"}`,
		`{"success":false,"status":"timeout","exit_code":124,"cwd":"/w","pid":1,"session":"ses_b","sandbox":{"mode":"workspace-write","net":"none","allow_write":["/tmp/x"],"memory":1073741824},"policy":{"runtime":{"denied":[{"argv":["rm","-rf"],"rule":"p:1"}]}},"error":{"code":"policy_denied","message":"no"}}`,
		`{"status":3,"exit_code":"1","cwd":null,"pid":1.5,"error":{"code":7},"policy":{}}`,
		`{}`,
	} {
		var probe struct {
			Status   string `json:"status"`
			ExitCode int    `json:"exit_code"`
			Cwd      string `json:"cwd"`
			PID      int    `json:"pid"`
			Session  string `json:"session"`
			Sandbox  any    `json:"sandbox"`
			Error    *struct {
				Code string `json:"code"`
			} `json:"error"`
			Policy *struct {
				Runtime any `json:"runtime"`
			} `json:"policy"`
		}
		_ = json.Unmarshal([]byte(raw), &probe)
		want := callResult{Status: probe.Status, Cwd: probe.Cwd, Session: probe.Session, ExitCode: probe.ExitCode, PID: probe.PID, Sandbox: probe.Sandbox}
		if probe.Error != nil {
			want.ErrorCode = probe.Error.Code
		}
		if probe.Policy != nil {
			want.PolicyRuntime = probe.Policy.Runtime
		}
		if got := readCallResult([]byte(raw)); !reflect.DeepEqual(got, want) {
			t.Errorf("%s:\nreadCallResult %+v\njson.Unmarshal %+v", raw, got, want)
		}
	}
}
