	.globl _start
	.text
_start:
	mov	$15, %edi		# prctl(PR_SET_NAME, name): ps shows it by name
	lea	name(%rip), %rsi
	mov	$157, %eax
	syscall
	mov	%rsp, %r12		# r12 -> argc, argv[0], ..., NULL, envp...
	sub	$64, %rsp		# a read buffer below argc
1:	xor	%eax, %eax		# read(0, buf, 64)
	xor	%edi, %edi
	mov	%rsp, %rsi
	mov	$64, %edx
	syscall
	cmp	$-4, %rax		# EINTR: read again
	je	1b
	test	%rax, %rax
	jle	2f			# end of file or an error: the owner is gone
	cmpb	$'d', (%rsp)
	je	6f
	cmpb	$'r', (%rsp)
	jne	2f
	# "rmdir": released while a member of the cgroup is still exiting.
	# Wait for the owner's exit (end of file), then remove the cgroup,
	# argv[5] of the guard's argv (agentplane-watchdog /bin/sh -c SCRIPT
	# NAME CGROUP TOKEN), once the member is gone: every 10 ms, 500 times.
4:	xor	%eax, %eax		# read(0, buf, 64) to end of file
	xor	%edi, %edi
	mov	%rsp, %rsi
	mov	$64, %edx
	syscall
	cmp	$-4, %rax
	je	4b
	test	%rax, %rax
	jg	4b
	cmpq	$6, (%r12)		# argc: no cgroup argument, nothing to remove
	jl	6f
	mov	48(%r12), %r13		# argv[5]
	mov	$500, %r14d
5:	mov	%r13, %rdi		# rmdir(argv[5])
	mov	$84, %eax
	syscall
	test	%rax, %rax
	je	6f
	cmp	$-2, %rax		# ENOENT: removed already
	je	6f
	dec	%r14d
	jz	7f
	lea	ts(%rip), %rdi		# nanosleep(10 ms)
	xor	%esi, %esi
	mov	$35, %eax
	syscall
	jmp	5b
6:	xor	%edi, %edi		# exit_group(0)
	mov	$231, %eax
	syscall
7:	mov	$1, %edi		# exit_group(1): the cgroup stayed busy
	mov	$231, %eax
	syscall
2:	mov	(%r12), %rcx		# argc
	cmp	$2, %rcx
	jl	3f
	lea	16(%r12), %rsi		# argv+1
	mov	(%rsi), %rdi		# argv[1]
	lea	16(%r12,%rcx,8), %rdx	# envp = argv + argc + 1
	mov	$59, %eax		# execve
	syscall
3:	mov	$127, %edi		# exit_group(127): nothing to exec
	mov	$231, %eax
	syscall
ts:	.quad	0, 10000000
name:	.asciz	"agentplane-wd"
