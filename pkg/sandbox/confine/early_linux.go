package confine

import (
	"errors"
	"fmt"
	"syscall"
)

// ReadEarlySpec is ReadSpec for a helper started before its run was
// prepared (its argv names only the spec's descriptor): the spec comes on
// a socket, its first bytes with three descriptors, the target's standard
// input, output and error, which it puts at 0, 1 and 2 (the helper was
// started with /dev/null there). A spec without them, or without the end
// report (Report) or the target's argv, is refused.
func ReadEarlySpec(fd int) (Spec, int, error) {
	var sp Spec
	if fd < 0 || syscall.SetNonblock(fd, false) != nil {
		return sp, -1, fmt.Errorf("bad sandbox spec descriptor %d", fd)
	}
	syscall.CloseOnExec(fd)
	fail := func(err error) (Spec, int, error) {
		syscall.Close(fd)
		return Spec{}, -1, err
	}
	buf := make([]byte, 4<<10)
	oob := make([]byte, syscall.CmsgSpace(3*4))
	var n, oobn, flags int
	var err error
	for {
		n, oobn, flags, _, err = syscall.Recvmsg(fd, buf, oob, syscall.MSG_CMSG_CLOEXEC)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	if err != nil {
		return fail(fmt.Errorf("cannot read the sandbox spec: %v", err))
	}
	var streams []int
	if msgs, err := syscall.ParseSocketControlMessage(oob[:oobn]); err == nil {
		for i := range msgs {
			if fds, err := syscall.ParseUnixRights(&msgs[i]); err == nil {
				streams = append(streams, fds...)
			}
		}
	}
	defer func() {
		for _, s := range streams {
			syscall.Close(s)
		}
	}()
	if len(streams) != 3 || flags&syscall.MSG_CTRUNC != 0 {
		return fail(fmt.Errorf("the sandbox spec came without the command's three standard streams"))
	}
	for i, s := range streams {
		// Not close-on-exec: the target's own. Each received descriptor
		// is above 2, which /dev/null held.
		if err := syscall.Dup3(s, i, 0); err != nil {
			return fail(fmt.Errorf("cannot take the command's standard streams: %v", err))
		}
	}
	data, err := readMore(fd, buf[:n], maxSpec+1)
	if err != nil {
		return fail(fmt.Errorf("cannot read the sandbox spec: %v", unwrap(err)))
	}
	if sp, err = ParseSpec(data); err != nil {
		return fail(err)
	}
	if !sp.Report || len(sp.Argv) == 0 {
		return fail(fmt.Errorf("bad sandbox spec: a helper started early needs the end report and the command's argv"))
	}
	return sp, fd, nil
}
