package main

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
)

const proxyDownload = 100 << 20

// serveZeros serves proxyDownload zero bytes on 127.0.0.1 and returns its
// address and a function that stops it.
func serveZeros() (string, func(), error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	buf := make([]byte, 1<<20)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(proxyDownload))
		for n := 0; n < proxyDownload; n += len(buf) {
			if _, err := w.Write(buf); err != nil {
				return
			}
		}
	})}
	go func() { _ = srv.Serve(ln) }()
	return ln.Addr().String(), func() { _ = srv.Close() }, nil
}

func benchNetProxy(b *bench) error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("needs root for the network namespace")
	}
	if _, err := exec.LookPath("curl"); err != nil {
		return fmt.Errorf("needs curl: %v", err)
	}
	addr, stop, err := serveZeros()
	if err != nil {
		return err
	}
	defer stop()
	url := "http://" + addr + "/"
	curl := "curl -sS -o /dev/null --fail " + url
	names := []string{"curl (no agentsh)", "agentsh -c 'curl URL'", "agentsh --allow-host ADDR -c 'curl URL' (HTTP proxy)",
		"agentsh --allow-host ADDR -c 'curl -p URL' (CONNECT tunnel)", "agentsh --allow-host ADDR -c 'curl -x $ALL_PROXY URL' (SOCKS5)"}
	argvs := [][]string{
		{"sh", "-c", curl},
		{b.path("agentsh"), "-c", curl},
		{b.path("agentsh"), "--allow-host", addr, "-c", curl},
		{b.path("agentsh"), "--allow-host", addr, "-c", "curl -p -sS -o /dev/null --fail " + url},
		{b.path("agentsh"), "--allow-host", addr, "-c", "curl -x \"$ALL_PROXY\" -sS -o /dev/null --fail " + url},
	}
	const runs = 9
	med, rss, err := interleave(runs, argvs)
	if err != nil {
		return err
	}
	b.table(names, med, rss, 1)
	fmt.Fprintf(&b.out, "\nproxy / direct, both through agentsh: HTTP **%s**, CONNECT **%s**, SOCKS5 **%s** "+
		"(%d MiB each; runs: %d each). Target: within 1.2x.\n\n", ratio(med[2], med[1]), ratio(med[3], med[1]), ratio(med[4], med[1]),
		proxyDownload>>20, runs)

	names = []string{"agentsh --net none -- true", "agentsh --net proxy -- true"}
	argvs = [][]string{{b.path("agentsh"), "--net", "none", "--", "true"}, {b.path("agentsh"), "--net", "proxy", "--", "true"}}
	med, rss, err = interleave(b.runs/2, argvs)
	if err != nil {
		return err
	}
	b.table(names, med, rss, 0)
	fmt.Fprintf(&b.out, "\nstart-up of --net proxy / --net none: **%s** (runs: %d each).\n", ratio(med[1], med[0]), b.runs/2)
	return nil
}
