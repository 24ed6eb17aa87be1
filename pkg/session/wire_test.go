package session

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/agentplane/agentplane/pkg/policy"
)

// TestRunRequestWire: the call's first message, built field by field,
// is what encoding/json writes for message and CallRequest, for a request
// with every field set and for one with none; a field added to
// CallRequest that runRequest does not write fails here.
func TestRunRequestWire(t *testing.T) {
	full := CallRequest{}
	v := reflect.ValueOf(&full).Elem()
	for i := 0; i < v.NumField(); i++ {
		f, sf := v.Field(i), v.Type().Field(i)
		if sf.Tag.Get("json") == "-" {
			continue
		}
		switch {
		case sf.Type == reflect.TypeOf(time.Duration(0)):
			f.SetInt(int64(i+1) * int64(time.Millisecond))
		case f.Kind() == reflect.String:
			f.SetString("<" + sf.Name + "> & \"x\"\n\x01é")
		case f.Kind() == reflect.Bool:
			f.SetBool(true)
		case f.Kind() == reflect.Int:
			f.SetInt(int64(i + 1))
		case sf.Type == reflect.TypeOf((*string)(nil)):
			s := "in<put>\x00"
			f.Set(reflect.ValueOf(&s))
		case sf.Type == reflect.TypeOf((*policy.Policy)(nil)):
			f.Set(reflect.ValueOf(&policy.Policy{Default: policy.Prompt, Rules: []policy.Rule{{Pattern: [][]string{{"rm"}, {"-rf", "-r"}}, Decision: policy.Forbidden, Justification: "no", Source: "p.star:1"}}}))
		default:
			t.Fatalf("CallRequest.%s: a field of a kind this test does not fill (%s): fill it, and write it in runRequest", sf.Name, sf.Type)
		}
	}
	for _, req := range []CallRequest{full, {}, {Command: "true", Timeout: time.Second, MaxOutput: 30000, Keep: "both"}} {
		got, err := runRequest("tok\"en", &req)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasSuffix(string(got), "}\n") || strings.Count(string(got), "\n") != 1 {
			t.Fatalf("not one line: %q", got)
		}
		want, err := json.Marshal(message{Op: "run", Token: "tok\"en", Call: &req})
		if err != nil {
			t.Fatal(err)
		}
		var g, w any
		if err := json.Unmarshal(got, &g); err != nil {
			t.Fatalf("%q: %v", got, err)
		}
		if err := json.Unmarshal(want, &w); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(g, w) {
			t.Errorf("runRequest wrote\n%s\nencoding/json writes\n%s", got, want)
		}
		var m message
		if err := json.Unmarshal(got, &m); err != nil || m.Op != "run" || m.Token != "tok\"en" || m.Call == nil || !reflect.DeepEqual(*m.Call, req) {
			t.Errorf("the server reads %+v (%v), want %+v", m.Call, err, req)
		}
	}
}
