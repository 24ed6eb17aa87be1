package confine

import (
	"reflect"
	"testing"
)

func TestParseCgroupMounts(t *testing.T) {
	table := `25 30 0:22 / /sys/fs/cgroup rw,relatime shared:8 - tmpfs tmpfs rw,mode=755
26 25 0:23 / /sys/fs/cgroup/memory rw,relatime shared:9 - cgroup cgroup rw,memory
27 25 0:24 / /sys/fs/cgroup/cpu,cpuacct rw,relatime shared:10 - cgroup cgroup rw,cpu,cpuacct
28 25 0:25 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
29 25 0:26 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw,nsdelegate
30 1 8:1 / /mnt/odd\040dir rw - cgroup cgroup ro,pids
31 1 8:1 / / rw - ext4 /dev/sda1 rw
garbage line
`
	want := []cgroupMount{
		{"/sys/fs/cgroup/memory", "cgroup", "memory"},
		{"/sys/fs/cgroup/cpu,cpuacct", "cgroup", "cpu,cpuacct"},
		{"/sys/fs/cgroup/systemd", "cgroup", "name=systemd"},
		{"/sys/fs/cgroup/unified", "cgroup2", "nsdelegate"},
		{"/mnt/odd dir", "cgroup", "pids"},
	}
	if got := parseCgroupMounts(table); !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
}
