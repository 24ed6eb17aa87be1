	.globl _start
	.text
_start:
	mov	x0, #15			// prctl(PR_SET_NAME, name): ps shows it by name
	adr	x1, name
	mov	x8, #167
	svc	#0
	mov	x19, sp			// x19 -> argc, argv[0], ..., NULL, envp...
	sub	sp, sp, #64		// a read buffer below argc
1:	mov	x0, #0			// read(0, buf, 64)
	mov	x1, sp
	mov	x2, #64
	mov	x8, #63
	svc	#0
	cmn	x0, #4			// EINTR: read again
	b.eq	1b
	cmp	x0, #0
	b.le	2f			// end of file or an error: the owner is gone
	ldrb	w9, [sp]
	cmp	w9, #'d'
	b.eq	6f
	cmp	w9, #'r'
	b.ne	2f
	// "rmdir": released while a member of the cgroup is still exiting.
	// Wait for the owner's exit (end of file), then remove the cgroup,
	// argv[5] of the guard's argv (agentplane-watchdog /bin/sh -c SCRIPT
	// NAME CGROUP TOKEN), once the member is gone: every 10 ms, 500 times.
4:	mov	x0, #0			// read(0, buf, 64) to end of file
	mov	x1, sp
	mov	x2, #64
	mov	x8, #63
	svc	#0
	cmn	x0, #4
	b.eq	4b
	cmp	x0, #0
	b.gt	4b
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
2:	ldr	x9, [x19]		// argc
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
name:	.asciz	"agentplane-wd"
