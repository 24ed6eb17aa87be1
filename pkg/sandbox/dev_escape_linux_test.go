package sandbox

import (
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// The minimal /dev holds the host's own device nodes, bound: a root
// command must not change their metadata (a mode, times, an owner), which
// is the host's, nor add, remove or rename anything in /dev, where the
// helper makes the mount points itself; the kernel's knobs in the private
// /proc stay read-only, each of them (a missing one is skipped, not a
// failing one).
func TestEscapeDevAndProcKnobs(t *testing.T) {
	requireRoot(t)
	requireSandbox(t)
	_, ws, _ := dirs(t)
	before := map[string]unix.Stat_t{}
	for _, name := range []string{"null", "zero", "full", "random", "urandom", "tty"} {
		var st unix.Stat_t
		if unix.Stat("/dev/"+name, &st) == nil {
			before[name] = st
		}
	}
	for _, p := range []Policy{
		{Mode: ModeWorkspaceWrite, Workspace: ws, Net: NetNone},
		{Mode: ModeReadOnly},
	} {
		res, _ := sandboxed(t, p, ws, "sh", "-c", `
try() { if (eval "$1") >/dev/null 2>&1; then echo "$2: allowed"; else echo "$2: denied"; fi; }
for d in null zero full random urandom tty; do
  [ -e /dev/$d ] || continue
  # Each to what it is already (this is the host's node if it works),
  # which still changes its ctime.
  try "chmod $(stat -c %a /dev/$d) /dev/$d" chmod-$d
  try "touch -r /dev/$d /dev/$d" utimes-$d
  try "chgrp $(stat -c %g /dev/$d) /dev/$d" chgrp-$d
done
try 'echo x >/dev/planted' create
try 'mkdir /dev/dir' mkdir
try 'mknod /dev/mem2 c 1 1' mknod
try 'mkfifo /dev/fifo' mkfifo
try 'ln -s /etc /dev/etc' symlink
try 'rm -f /dev/null' unlink
try 'mv /dev/zero /dev/zero2' rename
try 'echo c >/dev/sysrq-trigger' dev-sysrq
for k in sys/kernel/core_pattern sys/kernel/domainname sys/vm/drop_caches sysrq-trigger irq/default_smp_affinity; do
  [ -e /proc/$k ] || continue
  try "echo 1 >/proc/$k" proc-$(echo $k | tr / -)
done
# The mode of a /proc file is the kernel's one entry, which every procfs
# mounted later shows (to what it is: nothing changes if this works).
for k in meminfo kmsg cpuinfo; do
  try "chmod $(stat -c %a /proc/$k) /proc/$k" proc-chmod-$k
  try "touch -r /proc/$k /proc/$k" proc-utimes-$k
done
echo null=$(echo hi >/dev/null && echo writable)
echo stdout=writable >/dev/stdout
echo fd1=writable >/proc/self/fd/1
echo end`)
		o := out(res)
		if !strings.Contains(o, "end\n") || !strings.Contains(o, "null=writable\n") || !strings.Contains(o, "stdout=writable\n") || !strings.Contains(o, "fd1=writable\n") {
			t.Fatalf("%s: %q", p.Mode, o)
		}
		for _, line := range strings.Split(o, "\n") {
			if strings.HasSuffix(line, ": allowed") {
				t.Errorf("%s: %s", p.Mode, line)
			}
		}
	}
	for name, was := range before {
		var st unix.Stat_t
		must(t, unix.Stat("/dev/"+name, &st))
		// (A terminal's times move as it is used.)
		if st.Mode != was.Mode || st.Gid != was.Gid || (name != "tty" && st.Ctim != was.Ctim) {
			t.Errorf("the host's /dev/%s changed: mode %o -> %o, gid %d -> %d, ctime %v -> %v", name, was.Mode, st.Mode, was.Gid, st.Gid, was.Ctim, st.Ctim)
		}
	}
}
