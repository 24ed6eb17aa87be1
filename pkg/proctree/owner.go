package proctree

// Verdict says whether the recorded owner of something (a session's
// server, a job's supervisor) still runs.
type Verdict int

const (
	// OwnerAlive: the same process (pid and start time) runs on the same boot.
	OwnerAlive Verdict = iota
	// OwnerDied: the process is gone, a zombie, or its pid was recycled.
	OwnerDied
	// OwnerHostRestarted: the record comes from an earlier boot, where
	// pids and start times mean nothing now.
	OwnerHostRestarted
)

// Owner is the identity a record keeps of the process that owns it:
// pid and start time identify a process on one boot, the boot id says
// which boot.
type Owner struct {
	PID   int
	Start uint64
	Boot  string
}

// Self returns the calling process's Owner identity.
func Self() (Owner, error) {
	id, err := Identify(ownPID())
	if err != nil {
		return Owner{}, err
	}
	boot, err := BootID()
	if err != nil {
		return Owner{}, err
	}
	return Owner{PID: id.PID, Start: id.Start, Boot: boot}, nil
}

// Check is the one verdict on a recorded owner. A record without a boot
// id, or a machine whose boot id cannot be read, is judged by pid and
// start time alone; a pid of 0 was never a live owner.
func (o Owner) Check() Verdict {
	boot, _ := BootID()
	return o.CheckOn(boot)
}

// CheckOn is Check against a boot id the caller read once ("" when it
// could not be read): a store answering for many records reads it once.
func (o Owner) CheckOn(boot string) Verdict {
	if o.PID <= 0 {
		return OwnerDied
	}
	if o.Boot != "" && boot != "" && boot != o.Boot {
		return OwnerHostRestarted
	}
	if !Alive(o.PID, o.Start) {
		return OwnerDied
	}
	return OwnerAlive
}
