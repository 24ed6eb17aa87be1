package sandbox

import (
	"errors"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/agentplane/agentplane/pkg/netproxy"
	"github.com/agentplane/agentplane/pkg/result"
)

// The network allowlist (--net proxy). The command gets its own network
// namespace, as with --net none; the helper, once inside it, creates a TCP
// listener on ProxyAddr there and passes the listening descriptor back over
// a socket pair (SCM_RIGHTS) before it execs the command. The runner, in
// the host's namespace, serves netproxy on that listener, so connections
// the command makes to ProxyAddr arrive outside, where the proxy dials the
// allowed hosts. The command inherits neither the socket pair nor the
// listener: the proxy is the one door, and it closes when its holder (the
// agentsh call, the session server, the job supervisor) exits, SIGKILL
// included, since a descriptor dies with the last process holding it.

// ProxyPort is the port the proxy listens on inside the command's network
// namespace. The namespace is new and empty, so the port is always free.
const ProxyPort = 3128

// ProxyAddr is where the command reaches the proxy.
var ProxyAddr = "127.0.0.1:" + strconv.Itoa(ProxyPort)

// proxyEnv is what the command's environment says about the proxy, in both
// spellings (curl reads only the lower-case http_proxy, others only the
// upper case). socks5h makes SOCKS clients leave name lookups to the proxy,
// which is the only resolver that answers. Loopback stays direct, because
// inside the namespace it is the command's own, unless a rule allows a
// loopback address of the host, which only the proxy can reach.
func proxyEnv(rules netproxy.Rules) []string {
	httpURL, socksURL := "http://"+ProxyAddr, "socks5h://"+ProxyAddr
	noProxy := "localhost,127.0.0.1,::1"
	if rules.HasLoopback() {
		noProxy = ""
	}
	var env []string
	for _, kv := range [][2]string{{"HTTP_PROXY", httpURL}, {"HTTPS_PROXY", httpURL}, {"ALL_PROXY", socksURL}, {"NO_PROXY", noProxy}} {
		env = append(env, kv[0]+"="+kv[1], strings.ToLower(kv[0])+"="+kv[1])
	}
	return env
}

// netProxy is the runner's half: the proxy and the socket pairs of the
// starts that are still handing over their listener.
type netProxy struct {
	proxy *netproxy.Proxy
	mu    sync.Mutex
	conns []*net.UnixConn
}

func newNetProxy(rules netproxy.Rules) *netProxy {
	return &netProxy{proxy: netproxy.New(netproxy.Config{Rules: rules})}
}

// launch makes the socket pair of one start. The returned file is the
// command's fd 3; started closes the runner's copy of it once the command
// started (or failed to), so that a helper that dies before sending ends
// the receive instead of leaving it waiting.
func (n *netProxy) launch() ([]*os.File, func(), error) {
	fds, err := handoverPair()
	if err != nil {
		return nil, nil, result.Errorf(result.CodeSandboxFailed, "cannot create the proxy's socket pair: %v", err)
	}
	child := os.NewFile(uintptr(fds[1]), "agentplane-proxy-handoff")
	pf := os.NewFile(uintptr(fds[0]), "agentplane-proxy-handoff")
	c, err := net.FileConn(pf)
	pf.Close()
	if err != nil {
		child.Close()
		return nil, nil, result.Errorf(result.CodeSandboxFailed, "cannot use the proxy's socket pair: %v", err)
	}
	uc := c.(*net.UnixConn)
	n.mu.Lock()
	n.conns = append(n.conns, uc)
	n.mu.Unlock()
	go n.receive(uc)
	var once sync.Once
	return []*os.File{child}, func() { once.Do(func() { child.Close() }) }, nil
}

// receive waits for the helper's listener and serves the proxy on it.
func (n *netProxy) receive(uc *net.UnixConn) {
	defer func() {
		uc.Close()
		n.mu.Lock()
		for i, c := range n.conns {
			if c == uc {
				n.conns = append(n.conns[:i], n.conns[i+1:]...)
				break
			}
		}
		n.mu.Unlock()
	}()
	ln, err := receiveListener(uc)
	if err != nil {
		return // the helper died, or the run was cleaned up first
	}
	_ = n.proxy.Serve(ln)
}

// receiveListener reads one message carrying exactly one descriptor, a
// listening TCP socket.
func receiveListener(uc *net.UnixConn) (net.Listener, error) {
	buf := make([]byte, 1)
	oob := make([]byte, unix.CmsgSpace(4))
	_, oobn, _, _, err := uc.ReadMsgUnix(buf, oob)
	if err != nil {
		return nil, err
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil || len(msgs) != 1 {
		return nil, errors.New("no descriptor in the helper's message")
	}
	fds, err := unix.ParseUnixRights(&msgs[0])
	if err != nil || len(fds) != 1 {
		for _, fd := range fds {
			unix.Close(fd)
		}
		return nil, errors.New("not one descriptor in the helper's message")
	}
	unix.CloseOnExec(fds[0])
	f := os.NewFile(uintptr(fds[0]), "agentplane-proxy-listener")
	defer f.Close()
	return net.FileListener(f)
}

func (n *netProxy) close() {
	n.mu.Lock()
	for _, c := range n.conns {
		c.Close()
	}
	n.mu.Unlock()
	_ = n.proxy.Close()
}
