package sandbox

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// cgroupName names a run's cgroup after its owner, with rnd to keep two
// runs of one owner apart.
func cgroupName(rnd string) string {
	return fmt.Sprintf("%s%s.%s", cgroupPrefix, ownerID(), rnd)
}

// sweepCgroups removes the run cgroups in dir whose owner is dead; the
// processes left in one (there should be none) are killed first.
func sweepCgroups(dir string) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		name, ok := strings.CutPrefix(e.Name(), cgroupPrefix)
		if !e.IsDir() || !ok {
			continue
		}
		i := strings.LastIndexByte(name, '.')
		if i < 0 {
			continue
		}
		if ownerGone(name[:i], "") {
			removeCgroup(filepath.Join(dir, e.Name()))
		}
	}
}
