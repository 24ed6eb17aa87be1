package sandbox

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"sync"
)

// Readiness probes of a sandboxed job must see what the job sees: a
// --ready-cmd runs with the job's confinement, and --ready-tcp and
// --ready-http dial from inside the job's network namespace (under
// --net none the host cannot reach the job at all). The sandbox helper is
// already inside every namespace with the confinement applied to the
// thread that started the job, so it runs the probes itself, on request,
// over a control socket the runner passes as the first extra descriptor.

// Probe kinds of a control request.
const (
	ProbeCmd  = "cmd"  // Arg is argv (JSON array): run it confined like the job
	ProbeTCP  = "tcp"  // Arg is host:port
	ProbeHTTP = "http" // Arg is a URL; a status below 500 passes
)

type controlRequest struct {
	ID   int      `json:"id"`
	Kind string   `json:"kind"`
	Addr string   `json:"addr,omitempty"`
	Argv []string `json:"argv,omitempty"`
}

type controlReply struct {
	ID int  `json:"id"`
	OK bool `json:"ok"`
}

// Control is the runner's end of a helper's control socket.
type Control struct {
	f       *os.File
	mu      sync.Mutex
	enc     *json.Encoder
	next    int
	pending map[int]chan bool
	closed  chan struct{}
}

func newControl(f *os.File) *Control {
	c := &Control{f: f, enc: json.NewEncoder(f), pending: map[int]chan bool{}, closed: make(chan struct{})}
	go c.read()
	return c
}

func (c *Control) read() {
	defer close(c.closed)
	sc := bufio.NewScanner(c.f)
	for sc.Scan() {
		var r controlReply
		if json.Unmarshal(sc.Bytes(), &r) != nil {
			continue
		}
		c.mu.Lock()
		ch := c.pending[r.ID]
		delete(c.pending, r.ID)
		c.mu.Unlock()
		if ch != nil {
			ch <- r.OK
		}
	}
}

// Probe asks the helper to run one readiness check and waits for its
// answer, for ctx to end, or for the helper to go away (false).
func (c *Control) Probe(ctx context.Context, kind, addr string, argv []string) bool {
	ch := make(chan bool, 1)
	c.mu.Lock()
	c.next++
	id := c.next
	c.pending[id] = ch
	err := c.enc.Encode(controlRequest{ID: id, Kind: kind, Addr: addr, Argv: argv})
	c.mu.Unlock()
	if err != nil {
		return false
	}
	select {
	case ok := <-ch:
		return ok
	case <-ctx.Done():
	case <-c.closed:
	}
	c.mu.Lock()
	delete(c.pending, id)
	c.mu.Unlock()
	return false
}

// Close closes the runner's end.
func (c *Control) Close() error { return c.f.Close() }
