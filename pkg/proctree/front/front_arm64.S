	.globl _start
	.text
_start:
	mov	x0, #15			// prctl(PR_SET_NAME, name): ps shows it by name
	adr	x1, name
	mov	x8, #167
	svc	#0
	mov	x0, #4			// prctl(PR_SET_DUMPABLE, 0): no process of the
	mov	x1, #0			// user may trace it or take its descriptors
	mov	x8, #167
	svc	#0
	mov	x19, sp			// x19 -> argc, argv[0], ..., NULL, envp...
	sub	sp, sp, #80		// a read buffer (64 bytes), then two pollfds
	mov	x22, #0			// x22: 1 once "rmdir" was read
	mov	x9, #0x100000000	// {0, POLLIN}: the owner's stream
	str	x9, [sp, #64]
	mov	w9, #3			// {3, POLLIN}: the owner's pidfd, which it
	str	w9, [sp, #72]		// passes (closed there if it has none)
	mov	w9, #1
	str	w9, [sp, #76]
1:	add	x0, sp, #64		// ppoll(fds, 2, NULL, NULL, 8)
	mov	x1, #2
	mov	x2, #0
	mov	x3, #0
	mov	x4, #8
	mov	x8, #73
	svc	#0
	cmn	x0, #4			// EINTR: poll again
	b.eq	1b
	cmp	x0, #0
	b.lt	2f
	ldrh	w9, [sp, #78]
	cbz	w9, 9f
	mov	w10, #-1		// watched no more
	str	w10, [sp, #72]
	tbnz	w9, #5, 1b		// POLLNVAL: no pidfd was passed
	// The owner exited. Its stream's end of file may never come (a copy
	// of its end, taken with pidfd_getfd by root, keeps it open): shut the
	// stream down for reading, so that what the owner wrote before its
	// exit is read and then end of file. On a pipe (ENOTSOCK) the reading
	// goes on as before.
	mov	x0, #0			// shutdown(0, SHUT_RD)
	mov	x1, #0
	mov	x8, #210
	svc	#0
	b	1b
9:	ldrh	w9, [sp, #70]
	cbz	w9, 1b
	mov	x0, #0			// read(0, buf, 64)
	mov	x1, sp
	mov	x2, #64
	mov	x8, #63
	svc	#0
	cmn	x0, #4			// EINTR: poll again
	b.eq	1b
	cmp	x0, #0
	b.le	4f			// end of file or an error: the owner is gone
	cbnz	x22, 1b			// released: only the end matters now
	ldrb	w9, [sp]
	cmp	w9, #'d'
	b.eq	6f
	cmp	w9, #'r'
	b.ne	2f
	mov	x22, #1			// "rmdir": released while a member of the
	b	1b			// cgroup is still exiting; wait for the end
4:	cbz	x22, 2f
	// Released with "rmdir" and the owner gone: remove the cgroup, argv[5]
	// of the guard's argv (agentplane-watchdog /bin/sh -c SCRIPT NAME
	// CGROUP TOKEN), once the member is gone: every 10 ms, 500 times.
	ldr	x9, [x19]		// argc: no cgroup argument, nothing to remove
	cmp	x9, #6
	b.lt	6f
	ldr	x20, [x19, #48]		// argv[5]
	mov	x21, #500
5:	mov	x0, #-100		// unlinkat(AT_FDCWD, argv[5], AT_REMOVEDIR)
	mov	x1, x20
	mov	x2, #0x200
	mov	x8, #35
	svc	#0
	cbz	x0, 6f
	cmn	x0, #2			// ENOENT: removed already
	b.eq	6f
	subs	x21, x21, #1
	b.eq	7f
	adr	x0, ts			// nanosleep(10 ms)
	mov	x1, #0
	mov	x8, #101
	svc	#0
	b	5b
6:	mov	x0, #0			// exit_group(0)
	mov	x8, #94
	svc	#0
7:	mov	x0, #1			// exit_group(1): the cgroup stayed busy
	mov	x8, #94
	svc	#0
	// The owner is gone: kill. The command may have lowered this
	// process's resource limits (prlimit(2) needs no ptrace access): no
	// descriptor, memory or stack left the shell no way to start. They
	// are restored first (as root; otherwise they stay as they are), then
	// the cgroup is killed through its cgroup.kill, which the owner opened
	// for it as descriptor 4 (KillFD) and which needs no resource at all
	// (absent: EBADF, and the shell does it).
2:	adr	x20, limits
	mov	x21, #7
8:	mov	x0, #0			// prlimit64(0, resource, &limit, NULL)
	ldr	x1, [x20]
	add	x2, x20, #8
	mov	x3, #0
	mov	x8, #261
	svc	#0
	add	x20, x20, #24
	subs	x21, x21, #1
	b.ne	8b
	mov	x0, #4			// write(4, "1", 1)
	adr	x1, one
	mov	x2, #1
	mov	x8, #64
	svc	#0
	mov	x0, #4			// close(4)
	mov	x8, #57
	svc	#0
	mov	x0, #3			// close(3): the watchdog needs no pidfd
	mov	x8, #57
	svc	#0
	ldr	x9, [x19]		// argc
	cmp	x9, #2
	b.lt	3f
	add	x1, x19, #16		// argv+1
	ldr	x0, [x1]		// argv[1]
	add	x2, x19, x9, lsl #3
	add	x2, x2, #16		// envp = argv + argc + 1
	mov	x8, #221		// execve
	svc	#0
3:	mov	x0, #127		// exit_group(127): nothing to exec
	mov	x8, #94
	svc	#0
	.balign	8
ts:	.quad	0, 10000000
	// The limits restored before the shell starts: resource, soft, hard.
limits:	.quad	0, -1, -1		// RLIMIT_CPU
	.quad	1, -1, -1		// RLIMIT_FSIZE
	.quad	2, -1, -1		// RLIMIT_DATA
	.quad	3, 8388608, -1		// RLIMIT_STACK
	.quad	6, -1, -1		// RLIMIT_NPROC
	.quad	7, 1024, 1024		// RLIMIT_NOFILE
	.quad	9, -1, -1		// RLIMIT_AS
one:	.ascii	"1"
name:	.asciz	"agentplane-wd"
