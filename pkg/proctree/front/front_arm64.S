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
	b.ne	2f
	mov	x0, #0			// exit_group(0)
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
name:	.asciz	"agentplane-wd"
