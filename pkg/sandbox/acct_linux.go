package sandbox

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/agentplane/agentplane/pkg/result"
)

// A CPU-time or file-size limit hit by a child of the command is reported
// even when the command itself exits 0 (`sh -c 'big-writer; true'`). The
// kernel's own record of it is BSD process accounting, which is kept per
// PID namespace: the helper, PID 1 of the run's namespace and still
// privileged, turns it on with acct(2) into a file in the run's private
// directory, and the kernel appends a record for every process of the
// namespace when it exits (in do_exit, before its parent can reap it),
// with its wait status and CPU time. The runner reads the file after the
// run: a death by SIGXCPU or SIGXFSZ, or CPU time at or past the soft
// limit (a process that catches SIGXCPU and is then killed at the hard
// limit), is a limit the kernel enforced. The file is covered by
// /dev/null in the command's view, and the kernel writes it through its
// own internal mount, so the read-only root does not stop it.
//
// acct(2) needs CAP_SYS_PACCT in the initial user namespace: a run as
// root (not in a container that drops it) gets it; an unprivileged run,
// which lives in a user namespace, does not, and reports only what its
// cgroups and its own exit status say. The kernel suspends accounting on
// a filesystem with less than 2% free space (kernel.acct), so a child's
// hit on a nearly full disk can go unreported.

const acctFile = "acct"

// processAcctAvailable reports whether this process can turn on process
// accounting: the kernel has it and CAP_SYS_PACCT is effective.
func processAcctAvailable() bool {
	if !exists("/proc/sys/kernel/acct") {
		return false
	}
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			eff, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return err == nil && eff&(1<<unix.CAP_SYS_PACCT) != 0
		}
	}
	return false
}

// accounting asks the helper for process accounting when the policy has a
// limit only a record of each process's death can show, and the machine
// allows it.
func (b *builder) accounting() error {
	if (b.p.CPUTime <= 0 && b.p.FileSize <= 0) || !b.caps.ProcessAcct {
		if b.p.CPUTime > 0 || b.p.FileSize > 0 {
			// Until a runtime guard says it traced the run (NoteTraced).
			b.report["limits_of_children"] = childrenOrphans
		}
		return nil
	}
	path := filepath.Join(b.base, acctFile)
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		return result.Errorf(result.CodeSandboxFailed, "cannot create the sandbox's accounting file: %v", unwrap(err))
	}
	b.sp.Acct = path
	b.sp.DenyFiles = append(b.sp.DenyFiles, path)
	b.report["limits_of_children"] = childrenAcct
	return nil
}

// acctRecord is what the runner needs of one accounting record.
type acctRecord struct {
	status  unix.WaitStatus
	cpuSecs float64 // user + system
}

// acctRecordSize is the size of struct acct and struct acct_v3 alike.
const acctRecordSize = 64

// readAcct parses the accounting file: struct acct_v3 (CONFIG_BSD_PROCESS_
// ACCT_V3) or struct acct (version 2), in this machine's byte order (the
// kernel wrote it here). Unknown records are skipped.
func readAcct(path string) []acctRecord {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	le := binary.LittleEndian
	var out []acctRecord
	for ; len(data) >= acctRecordSize; data = data[acctRecordSize:] {
		r := data[:acctRecordSize]
		var bo binary.ByteOrder = le
		if r[1]&0x80 != 0 { // ACCT_BYTEORDER: big endian
			bo = binary.BigEndian
		}
		switch r[1] & 0x0f {
		case 3:
			// AHZ is 100 for version 3.
			out = append(out, acctRecord{
				status:  unix.WaitStatus(bo.Uint32(r[4:])),
				cpuSecs: float64(compT(bo.Uint16(r[32:]))+compT(bo.Uint16(r[34:]))) / 100,
			})
		case 2:
			ahz := float64(bo.Uint16(r[30:]))
			if ahz == 0 {
				continue
			}
			out = append(out, acctRecord{
				status:  unix.WaitStatus(bo.Uint32(r[32:])),
				cpuSecs: float64(compT(bo.Uint16(r[12:]))+compT(bo.Uint16(r[14:]))) / ahz,
			})
		}
	}
	return out
}

// compT decodes a comp_t: a 13-bit mantissa and a 3-bit base-8 exponent.
func compT(c uint16) uint64 {
	return uint64(c&0x1fff) << (3 * uint(c>>13))
}

// acctLimitsHit names the process limits the accounting records show were
// enforced on any process of the run.
func acctLimitsHit(p Policy, path string) []string {
	if path == "" {
		return nil
	}
	cpu, fsize := false, false
	for _, r := range readAcct(path) {
		var sig unix.Signal
		if r.status.Signaled() {
			sig = r.status.Signal()
		}
		switch deathLimit(p, sig, r.cpuSecs) {
		case result.CodeCPULimit:
			cpu = true
		case result.CodeFileSizeLimit:
			fsize = true
		}
		// A process that caught SIGXCPU and then exited: CPU time past
		// the soft limit (comp_t keeps 13 significant bits).
		if p.CPUTime > 0 && r.cpuSecs >= softCPUSecs(p)*(1-1.0/4096) {
			cpu = true
		}
	}
	return limitCodes(cpu, fsize)
}
