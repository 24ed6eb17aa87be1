package state

import (
	"context"
	"path/filepath"

	"github.com/fsnotify/fsnotify"
)

// Watch watches paths (directories see changes to the files inside them)
// and returns a channel that receives a value after each batch of changes,
// coalesced: a pending signal is not duplicated. The channel is closed when
// ctx ends or the watcher fails.
//
// To never miss a change, arm the watch first and then check the state you
// are waiting for; wait on the channel only if the check says not yet, and
// check again after each signal.
func Watch(ctx context.Context, paths ...string) (<-chan struct{}, error) {
	return WatchNames(ctx, nil, paths...)
}

// WatchNames is Watch limited to changes of files whose base name is in
// names (all changes when names is empty). Waiting for one small file in a
// directory where a busy log is appended must not wake on every append.
// Files replaced by rename count as changed under their new name, and a
// watched directory that is removed or moved away counts as changed.
func WatchNames(ctx context.Context, names []string, paths ...string) (<-chan struct{}, error) {
	keep := func(string) bool { return true }
	if len(names) > 0 {
		set := make(map[string]bool, len(names))
		for _, n := range names {
			set[n] = true
		}
		// A watched path itself going away (removed, moved) always counts:
		// nothing inside it can change any more, so a waiter must look again.
		self := make(map[string]bool, len(paths))
		for _, p := range paths {
			self[filepath.Clean(p)] = true
		}
		keep = func(p string) bool { return set[filepath.Base(p)] || self[filepath.Clean(p)] }
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, err
	}
	for _, p := range paths {
		if err := w.Add(p); err != nil {
			_ = w.Close()
			return nil, err
		}
	}
	ch := make(chan struct{}, 1)
	go func() {
		defer close(ch)
		defer w.Close()
		for {
			select {
			case <-ctx.Done():
				return
			case ev, ok := <-w.Events:
				if !ok {
					return
				}
				if !keep(ev.Name) {
					continue
				}
				select {
				case ch <- struct{}{}:
				default:
				}
			case _, ok := <-w.Errors:
				if !ok {
					return
				}
				// An overflow means events were lost: report a change so
				// the caller re-checks rather than waits forever.
				select {
				case ch <- struct{}{}:
				default:
				}
			}
		}
	}()
	return ch, nil
}
