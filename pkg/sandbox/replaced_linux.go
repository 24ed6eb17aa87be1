package sandbox

import (
	"os"
	"path/filepath"
	"slices"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/agentplane/agentplane/internal/ctlfile"
)

// WatchReplaced watches, from outside the sandbox, the protected and
// hidden paths of a prepared sandbox whose run goes on (a session's shell,
// its background jobs): a process outside that replaces one (git config
// renames a new .git/config into place, an editor's save) leaves a new
// file at the path, which no mount of the running sandbox covers; so does
// one that makes a --deny-read path missing at the start. The
// channel gets the path as soon as that is seen (inotify on the
// directories on the way to the paths, the identities then compared as
// Stale does), so that the caller stops everything the old sandbox runs before
// it writes there; the next start covers the new file. stop ends the
// watch. Without a helper, or without inotify, the channel is nil.
func (p *Prepared) WatchReplaced() (replaced <-chan string, stop func()) {
	if p.spec == nil {
		return nil, func() {}
	}
	p.smu.Lock()
	paths := slices.Concat(p.spec.ReadOnly, p.spec.Hidden, p.hideable)
	p.smu.Unlock()
	if len(paths) == 0 {
		return nil, func() {}
	}
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return nil, func() {}
	}
	f := os.NewFile(uintptr(fd), "inotify") // pollable: Close ends a Read
	const mask = unix.IN_CREATE | unix.IN_MOVED_TO | unix.IN_MOVED_FROM | unix.IN_DELETE |
		unix.IN_DELETE_SELF | unix.IN_MOVE_SELF | unix.IN_ONLYDIR
	// names: for each watched directory, the names in it that matter;
	// a directory of its own that moves or goes matters whole (selfs).
	names := map[int32]map[string]bool{}
	// Every directory on the way to each path is watched, for the name
	// of the next step: a directory above moved away and another put in
	// its place (mv sub sub.old; cp -a sub.old sub) replaces the path as
	// surely as a rename of the file itself, and one that is missing for
	// a while (mv .git .git.old, then a copy back) is watched again once
	// its parent sees it come back.
	watch := func() {
		// And what a path to hide leads to now: a link made at it (to a
		// file not there yet) is watched where the file would be made.
		targets := slices.Clone(paths)
		for _, path := range p.hideable {
			if real := leadsTo(path); real != path {
				targets = append(targets, real)
			}
		}
		for _, path := range targets {
			for p := path; p != filepath.Dir(p); p = filepath.Dir(p) {
				dir, name := filepath.Dir(p), filepath.Base(p)
				if wd, err := unix.InotifyAddWatch(fd, dir, mask); err == nil {
					if names[int32(wd)] == nil {
						names[int32(wd)] = map[string]bool{}
					}
					names[int32(wd)][name] = true
				}
			}
		}
	}
	watch()
	out := make(chan string, 1)
	go func() {
		buf := make([]byte, 64*1024)
		for {
			n, err := f.Read(buf)
			if err != nil {
				return
			}
			hit := false
			for off := 0; off+unix.SizeofInotifyEvent <= n; {
				ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
				nameLen := int(ev.Len)
				name := ""
				if nameLen > 0 && off+unix.SizeofInotifyEvent+nameLen <= n {
					b := buf[off+unix.SizeofInotifyEvent : off+unix.SizeofInotifyEvent+nameLen]
					if i := slices.Index(b, 0); i >= 0 {
						b = b[:i]
					}
					name = string(b)
				}
				switch {
				case ev.Mask&unix.IN_Q_OVERFLOW != 0,
					ev.Mask&(unix.IN_DELETE_SELF|unix.IN_MOVE_SELF|unix.IN_IGNORED) != 0,
					names[ev.Wd][name]:
					hit = true
				}
				off += unix.SizeofInotifyEvent + nameLen
			}
			if !hit {
				continue
			}
			send := func(path string) {
				select {
				case out <- path:
				default: // one not taken yet says it already
				}
			}
			if path := p.Stale(); path != "" {
				send(path)
			}
			// A directory replaced, or made, is a new one to watch; what
			// appeared in it before its watch is seen by a second look.
			watch()
			if path := p.Stale(); path != "" {
				send(path)
			}
		}
	}()
	return out, func() { f.Close() }
}

// KeptIDs are the identities (ctlfile.IdentityOf: device, inode, birth
// time) of the files the sandbox binds read-only, by path, as they are
// now: a caller that keeps them from its first start can tell a file
// renamed into place since, which a command could have written under its
// temporary name, also when it got a freed inode's number.
func (p *Prepared) KeptIDs() map[string]string {
	if p.spec == nil {
		return nil
	}
	p.smu.Lock()
	paths := slices.Clone(p.spec.ReadOnly)
	p.smu.Unlock()
	out := map[string]string{}
	for _, path := range paths {
		if id := ctlfile.IdentityOf(path); id != "" {
			out[path] = id
		}
	}
	return out
}

// leadsTo is where path leads through the symbolic links on its way, its
// own included, also when the end is not there (yet): a dangling link's
// target, where the file it names would be made.
func leadsTo(path string) string {
	for range 40 {
		dir, err := realPath(filepath.Dir(path))
		if err != nil {
			return path
		}
		path = filepath.Join(dir, filepath.Base(path))
		t, err := os.Readlink(path)
		if err != nil {
			return path
		}
		if !filepath.IsAbs(t) {
			t = filepath.Join(dir, t)
		}
		path = t
	}
	return path
}
