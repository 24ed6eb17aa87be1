package session

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// callDir is where the server puts each call's script, stdin and output
// FIFOs. The server runs outside the sandbox, often as root, so nothing in
// it may be something the shell planted: the directory is writable by the
// server alone (a sandboxed shell gets the right to open the FIFOs in it
// for writing, never to create, rename or delete anything there), every
// file is created with O_EXCL|O_NOFOLLOW under a random name, and its mode
// is set through the descriptor, not the path.
//
// Creating those files is most of what preparing a call costs (on a
// journaling filesystem each create is a metadata write), so the directory
// keeps one call's set made ahead (stock, while the session is idle): the
// next call only writes its text into a file that already exists, the
// trap FIFO among them.
type callDir struct {
	path  string
	share bool // a --user shell must read scripts and open FIFOs

	mu     sync.Mutex
	ready  *callFiles // made ahead for the next call; nil: none
	closed bool       // removed: nothing more is made
}

// callFiles are the files of one call: its script, open for writing, its
// output FIFOs, each open at both ends, and the FIFO its end hands the
// user's traps back through (see callEnd), open for reading.
type callFiles struct {
	script string
	w      *os.File
	fifos  []madeFifo
	traps  string
	trapsR *os.File
}

// madeFifo is a FIFO open for reading and, by our own holder, for writing,
// so that a read does not see EOF before the shell opens it.
type madeFifo struct {
	path string
	r, w *os.File
}

func (f madeFifo) discard() {
	f.r.Close()
	f.w.Close()
	_ = os.Remove(f.path)
}

func (c *callFiles) discard() {
	if c.w != nil {
		c.w.Close()
	}
	_ = os.Remove(c.script)
	if c.trapsR != nil {
		c.trapsR.Close()
		_ = os.Remove(c.traps)
	}
	for _, f := range c.fifos {
		f.discard()
	}
}

// stock makes the files of call n ahead of it, unless a set is ready.
func (d *callDir) stock(n int) {
	d.mu.Lock()
	skip := d.ready != nil || d.closed
	d.mu.Unlock()
	if skip {
		return
	}
	c, err := d.make(n, []string{"stdout", "stderr"})
	if err != nil {
		return // the call makes its own
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.ready != nil || d.closed {
		c.discard()
		return
	}
	d.ready = c
}

// files returns the files of call n with FIFOs named by outs: the set made
// ahead if there is one, else fresh ones.
func (d *callDir) files(n int, outs []string) (*callFiles, error) {
	d.mu.Lock()
	c := d.ready
	d.ready = nil
	d.mu.Unlock()
	if c == nil {
		return d.make(n, outs)
	}
	// A merged call needs one FIFO of the two.
	for len(c.fifos) > len(outs) {
		c.fifos[len(c.fifos)-1].discard()
		c.fifos = c.fifos[:len(c.fifos)-1]
	}
	return c, nil
}

func (d *callDir) make(n int, outs []string) (*callFiles, error) {
	c := &callFiles{script: d.name(n, "sh")}
	w, err := d.create(c.script)
	if err != nil {
		return nil, err
	}
	c.w = w
	for _, o := range outs {
		f, err := d.makeFifo(d.name(n, o))
		if err != nil {
			c.discard()
			return nil, err
		}
		c.fifos = append(c.fifos, f)
	}
	c.traps = d.name(n, "traps")
	if c.trapsR, err = d.fifo(c.traps); err != nil {
		c.discard()
		return nil, err
	}
	return c, nil
}

// makeFifo creates a FIFO and opens both of its ends.
func (d *callDir) makeFifo(path string) (madeFifo, error) {
	r, err := d.fifo(path)
	if err != nil {
		return madeFifo{}, err
	}
	w, err := os.OpenFile(path, os.O_WRONLY|syscall.O_NONBLOCK|syscall.O_NOFOLLOW, 0)
	if err != nil {
		r.Close()
		_ = os.Remove(path)
		return madeFifo{}, fmt.Errorf("open fifo: %w", err)
	}
	return madeFifo{path: path, r: r, w: w}, nil
}

// newCallDir creates the directory. An unsandboxed session keeps it in
// its own directory. A sandboxed one too, unless the shell runs as another
// user, who cannot traverse the state directory: then it is a fresh
// directory under /tmp, owned by the server, 0711 (enterable, not
// listable), whose files have unguessable names.
func newCallDir(sdir string, sandboxed bool, user string) (*callDir, error) {
	if !sandboxed || user == "" {
		p := filepath.Join(sdir, "calls")
		if err := os.Mkdir(p, 0o700); err != nil && !os.IsExist(err) {
			return nil, err
		}
		if st, err := os.Lstat(p); err != nil || !st.IsDir() {
			return nil, fmt.Errorf("%s is not a directory", p)
		}
		return &callDir{path: p}, nil
	}
	p, err := os.MkdirTemp("/tmp", "agentsh-calls-")
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(p, 0o711); err != nil {
		os.RemoveAll(p)
		return nil, err
	}
	return &callDir{path: p, share: true}, nil
}

func (d *callDir) remove() {
	d.mu.Lock()
	d.closed = true
	if d.ready != nil {
		d.ready.discard()
		d.ready = nil
	}
	d.mu.Unlock()
	_ = os.RemoveAll(d.path)
}

// name returns a fresh unguessable path for one of call n's files.
func (d *callDir) name(n int, suffix string) string {
	b := make([]byte, 9)
	_, _ = rand.Read(b)
	return filepath.Join(d.path, fmt.Sprintf("%d-%s.%s", n, hex.EncodeToString(b), suffix))
}

// writeFile creates a new file (never an existing one, never through a
// symlink) and writes data to it.
func (d *callDir) writeFile(path string, data []byte) error {
	f, err := d.create(path)
	if err != nil {
		return err
	}
	return fill(f, path, data)
}

// create creates a new file (never an existing one, never through a
// symlink), readable by a --user shell.
func (d *callDir) create(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, err
	}
	if d.share {
		if err := f.Chmod(0o644); err != nil {
			f.Close()
			_ = os.Remove(path)
			return nil, err
		}
	}
	return f, nil
}

// fill writes data to the file create made and closes it; the file goes
// if that fails.
func fill(f *os.File, path string, data []byte) error {
	_, err := f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(path)
	}
	return err
}

// fifo creates a FIFO and opens it for reading, without following a
// symlink and without blocking; the mode a --user shell needs is set
// through the descriptor.
func (d *callDir) fifo(path string) (*os.File, error) {
	if err := unix.Mkfifo(path, 0o600); err != nil {
		return nil, err
	}
	r, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOFOLLOW, 0)
	if err != nil {
		_ = os.Remove(path)
		return nil, err
	}
	if st, err := r.Stat(); err != nil || st.Mode()&os.ModeNamedPipe == 0 {
		r.Close()
		_ = os.Remove(path)
		return nil, fmt.Errorf("%s is not the FIFO just made", path)
	}
	if d.share {
		if err := r.Chmod(0o622); err != nil {
			r.Close()
			_ = os.Remove(path)
			return nil, err
		}
	}
	return r, nil
}

// controlChannel is a shell's control FIFOs and the server's ends of them.
// The shell holds no descriptor of them while a call runs: it reopens
// them by path after each call (see callProto.reopen).
type controlChannel struct {
	inPath, outPath string
	in              *os.File // the server writes lines here (read-write, so never a broken pipe)
	out             *os.File // and reads prompts here
	keeper          *os.File // the server's own writer of out: no end of file while a call runs
	shellIn         *os.File // the shell's first descriptors, closed once it started
	shellOut        *os.File
}

// control creates a fresh control channel.
func (d *callDir) control() (*controlChannel, error) {
	c := &controlChannel{inPath: d.name(0, "ctl-in"), outPath: d.name(0, "ctl-out")}
	fail := func(err error) (*controlChannel, error) {
		c.close()
		return nil, err
	}
	if err := unix.Mkfifo(c.inPath, 0o600); err != nil {
		return nil, err
	}
	in, err := os.OpenFile(c.inPath, os.O_RDWR|syscall.O_NOFOLLOW, 0)
	if err != nil {
		_ = os.Remove(c.inPath)
		return nil, err
	}
	c.in = in
	if st, err := in.Stat(); err != nil || st.Mode()&os.ModeNamedPipe == 0 {
		return fail(fmt.Errorf("%s is not the FIFO just made", c.inPath))
	}
	if d.share {
		if err := in.Chmod(0o644); err != nil {
			return fail(err)
		}
	}
	if c.out, err = d.fifo(c.outPath); err != nil {
		c.outPath = ""
		return fail(err)
	}
	if c.keeper, err = os.OpenFile(c.outPath, os.O_WRONLY|syscall.O_NOFOLLOW, 0); err != nil {
		return fail(err)
	}
	if c.shellIn, err = os.OpenFile(c.inPath, os.O_RDONLY|syscall.O_NOFOLLOW, 0); err != nil {
		return fail(err)
	}
	if c.shellOut, err = os.OpenFile(c.outPath, os.O_WRONLY|syscall.O_NOFOLLOW, 0); err != nil {
		return fail(err)
	}
	return c, nil
}

// close closes every end the server holds and removes the FIFOs.
func (c *controlChannel) close() {
	for _, f := range []*os.File{c.in, c.out, c.keeper, c.shellIn, c.shellOut} {
		if f != nil {
			f.Close()
		}
	}
	c.removeFiles()
}

func (c *controlChannel) removeFiles() {
	for _, p := range []string{c.inPath, c.outPath} {
		if p != "" {
			_ = os.Remove(p)
		}
	}
}
