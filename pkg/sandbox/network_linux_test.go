package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentplane/agentplane/pkg/netproxy"
	"github.com/agentplane/agentplane/pkg/result"
	"github.com/agentplane/agentplane/pkg/run"
)

// proxyProbeCommand makes the test binary, run as the sandboxed command,
// list its descriptors and fetch each URL in its arguments through the
// proxy, printing one line per step.
const proxyProbeCommand = "__proxy-probe"

func proxyProbe(urls []string) int {
	ents, _ := os.ReadDir("/proc/self/fd")
	var fds []string
	for _, e := range ents {
		target, _ := os.Readlink("/proc/self/fd/" + e.Name())
		if strings.HasPrefix(target, "socket:") || strings.HasPrefix(target, "anon_inode:") {
			fds = append(fds, e.Name()+"="+target[:6])
		}
	}
	sort.Strings(fds)
	fmt.Printf("sockets: [%s]\n", strings.Join(fds, " "))
	pu, _ := url.Parse(os.Getenv("HTTP_PROXY"))
	c := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{Proxy: http.ProxyURL(pu)}}
	for _, u := range urls {
		resp, err := c.Get(u)
		if err != nil {
			fmt.Printf("%s: %v\n", u, err)
			continue
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Printf("%d %s\n", resp.StatusCode, strings.TrimSpace(string(b)))
	}
	// Without the proxy, the host's loopback is out of reach.
	direct := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: nil}}
	if _, err := direct.Get(urls[0]); err != nil {
		fmt.Println("direct: refused")
	} else {
		fmt.Println("direct: reached")
	}
	return 0
}

func requireNetNS(t *testing.T) {
	t.Helper()
	if c := Probe(); !c.NetNS || !(c.Root || c.UserNS) {
		t.Skip("no network namespaces for this user")
	}
}

func TestNetProxy(t *testing.T) {
	requireNetNS(t)
	allowed := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "allowed") }))
	defer allowed.Close()
	denied := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "leaked") }))
	defer denied.Close()
	prep, err := Prepare(Policy{AllowHosts: []string{allowed.Listener.Addr().String()}}, self(t))
	if err != nil {
		t.Fatal(err)
	}
	defer prep.Cleanup()
	var mu sync.Mutex
	var denials []string
	prep.OnDeny = func(d netproxy.Denial) {
		mu.Lock()
		denials = append(denials, fmt.Sprintf("%s:%d", d.Host, d.Port))
		mu.Unlock()
	}
	// Two starts, as a job's restarts: each hands over its own listener
	// and the one proxy counts both.
	for i := 0; i < 2; i++ {
		files, started, err := prep.Launch()
		if err != nil {
			t.Fatal(err)
		}
		res, err := run.Run(context.Background(), run.Request{
			Argv: prep.Argv([]string{self(t), proxyProbeCommand, allowed.URL, denied.URL}), Env: append(os.Environ(), prep.Env...),
			Timeout: 60 * time.Second, KillAfter: time.Second, MaxOutput: 64 << 10,
			SysProcAttr: prep.SysProcAttr, ExtraFiles: files,
		})
		started()
		if err != nil {
			t.Fatal(err)
		}
		if err := prep.Failure(); err != nil {
			t.Fatal(err)
		}
		o := out(res)
		for _, w := range []string{"sockets: []\n", "200 allowed\n", "403 agentplane network allowlist: connection to " + denied.Listener.Addr().String() + " not allowed", "direct: refused"} {
			if !strings.Contains(o, w) {
				t.Errorf("run %d: missing %q in %q (stderr %q)", i, w, o, text(res.Stderr))
			}
		}
		if strings.Contains(o, "leaked") {
			t.Errorf("run %d reached the denied server: %q", i, o)
		}
	}
	n := prep.Network()
	if n == nil || len(n.Denied) != 1 || n.Denied[0].Count != 2 || len(n.Allowed) != 1 {
		t.Fatalf("network %+v", n)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(denials) != 2 {
		t.Fatalf("OnDeny saw %v", denials)
	}
	if prep.Report["network"] != NetProxy || prep.Report["proxy"] != ProxyAddr {
		t.Errorf("report %v", prep.Report)
	}
}

// A start that never happens (or a helper that dies before the handover)
// must not leave the receiver waiting or Cleanup hanging.
func TestNetProxyLaunchWithoutStart(t *testing.T) {
	requireNetNS(t)
	prep, err := Prepare(Policy{Net: NetProxy}, self(t))
	if err != nil {
		t.Fatal(err)
	}
	_, started, err := prep.Launch()
	if err != nil {
		t.Fatal(err)
	}
	started()
	done := make(chan struct{})
	go func() { prep.Cleanup(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("Cleanup hung")
	}
}

func TestNetProxyPolicy(t *testing.T) {
	full := Capabilities{Root: true, LandlockABI: 7, NetNS: true, MountNS: true, PidNS: true, IPCNS: true, CgroupNS: true, MountAPI: true, Seccomp: true, SeccompNotify: true}
	prep, err := PrepareWith(Policy{Net: NetHost, AllowHosts: []string{"github.com"}}, "/nonexistent", full)
	if err != nil {
		t.Fatal(err)
	}
	if prep.Report["network"] != NetProxy || prep.Network() == nil {
		t.Errorf("--allow-host alone did not imply --net proxy: %v", prep.Report)
	}
	env := strings.Join(prep.Env, " ")
	for _, w := range []string{"HTTP_PROXY=http://127.0.0.1:3128", "https_proxy=http://127.0.0.1:3128", "ALL_PROXY=socks5h://127.0.0.1:3128", "no_proxy=localhost,127.0.0.1,::1"} {
		if !strings.Contains(env, w) {
			t.Errorf("env lacks %s: %s", w, env)
		}
	}
	prep.Cleanup()
	// A loopback rule sends the command's loopback through the proxy.
	prep, err = PrepareWith(Policy{Net: NetProxy, AllowHosts: []string{"127.0.0.1:8080"}}, "/nonexistent", full)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(prep.Env, " "), "NO_PROXY= ") {
		t.Errorf("env %v", prep.Env)
	}
	prep.Cleanup()
	// --net none is stricter than any allowlist and wins.
	prep, err = PrepareWith(Policy{Net: NetNone, AllowHosts: []string{"github.com"}}, "/nonexistent", full)
	if err != nil {
		t.Fatal(err)
	}
	if prep.Report["network"] != "namespace" || prep.Network() != nil {
		t.Errorf("report %v", prep.Report)
	}
	prep.Cleanup()
	for _, tc := range []struct {
		p    Policy
		caps Capabilities
		code string
	}{
		{Policy{AllowHosts: []string{"http://github.com/"}}, full, result.CodeInvalidRequest},
		{Policy{AllowHosts: []string{"*"}}, full, result.CodeInvalidRequest},
		{Policy{Net: NetProxy}, Capabilities{Root: true}, result.CodeSandboxUnavailable},
		{Policy{AllowHosts: []string{"github.com"}}, Capabilities{NetNS: true}, result.CodeSandboxUnavailable},
	} {
		prep, err := PrepareWith(tc.p, "/nonexistent", tc.caps)
		var e *result.Error
		if err == nil {
			prep.Cleanup()
		}
		if !errors.As(err, &e) || e.Code != tc.code {
			t.Errorf("%+v: %v, want %s", tc.p, err, tc.code)
		}
	}
}
