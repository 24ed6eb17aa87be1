package main

import (
	"fmt"
	"os"
	"path/filepath"
)

// pySockets is a chatty socket workload: sendmsg on a socket pair, and
// connects to the program's own Unix socket server.
const pySockets = `import socket, os, sys
a, b = socket.socketpair()
for _ in range(20000):
    a.sendmsg([b"x" * 64]); b.recv(64)
p = os.path.join(os.getcwd(), "own.sock")
if os.path.exists(p):
    os.remove(p)
srv = socket.socket(socket.AF_UNIX); srv.bind(p); srv.listen(64)
for _ in range(500):
    c = socket.socket(socket.AF_UNIX); c.connect(p); s, _ = srv.accept(); c.close(); s.close()
`

// benchUnixGate measures what the Unix socket gate of --net none costs a
// chatty workload: the same sandbox with the host network has no gate.
func benchUnixGate(b *bench) error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("needs root for namespaces and cgroups")
	}
	py, err := python()
	if err != nil {
		return err
	}
	ws := filepath.Join(b.tmp, "ws-sockets")
	if err := os.MkdirAll(ws, 0o755); err != nil {
		return err
	}
	script := filepath.Join(ws, "sockets.py")
	if err := os.WriteFile(script, []byte(pySockets), 0o644); err != nil {
		return err
	}
	names := []string{"agentsh --sandbox workspace-write -- python3 sockets.py",
		"agentsh --sandbox workspace-write --net none -- python3 sockets.py"}
	argvs := [][]string{{b.path("agentsh"), "--cwd", ws, "--sandbox", "workspace-write", "--", py, script},
		{b.path("agentsh"), "--cwd", ws, "--sandbox", "workspace-write", "--net", "none", "--", py, script}}
	med, rss, err := interleave(5, argvs)
	if err != nil {
		return err
	}
	b.table(names, med, rss, 0)
	per := (med[1] - med[0]) / 20500
	fmt.Fprintf(&b.out, "\ngated / ungated: **%s**, about %s more per gated call (20,000 sendmsg and 500 connects; runs: 5 each).\n",
		ratio(med[1], med[0]), per)
	return nil
}
