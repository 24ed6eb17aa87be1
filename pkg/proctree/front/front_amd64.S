	.globl _start
	.text
_start:
	mov	$15, %edi		# prctl(PR_SET_NAME, name): ps shows it by name
	lea	name(%rip), %rsi
	mov	$157, %eax
	syscall
	mov	$4, %edi		# prctl(PR_SET_DUMPABLE, 0): no process of the
	xor	%esi, %esi		# user may trace it or take its descriptors
	mov	$157, %eax
	syscall
	mov	%rsp, %r12		# r12 -> argc, argv[0], ..., NULL, envp...
	sub	$80, %rsp		# a read buffer (64 bytes), then two pollfds
	xor	%ebx, %ebx		# ebx: 1 once "rmdir" was read
	movl	$0, 64(%rsp)		# {0, POLLIN}: the owner's stream
	movl	$1, 68(%rsp)
	movl	$3, 72(%rsp)		# {3, POLLIN}: the owner's pidfd, which it
	movl	$1, 76(%rsp)		# passes (closed there if it has none)
1:	lea	64(%rsp), %rdi		# ppoll(fds, 2, NULL, NULL, 8)
	mov	$2, %esi
	xor	%edx, %edx
	xor	%r10d, %r10d
	mov	$8, %r8d
	mov	$271, %eax
	syscall
	cmp	$-4, %rax		# EINTR: poll again
	je	1b
	test	%rax, %rax
	js	2f
	movzwl	78(%rsp), %eax
	test	%eax, %eax
	jz	9f
	movl	$-1, 72(%rsp)		# watched no more
	test	$0x20, %eax		# POLLNVAL: no pidfd was passed
	jnz	1b
	# The owner exited. Its stream's end of file may never come (a copy
	# of its end, taken with pidfd_getfd by root, keeps it open): shut the
	# stream down for reading, so that what the owner wrote before its
	# exit is read and then end of file. On a pipe (ENOTSOCK) the reading
	# goes on as before.
	xor	%edi, %edi		# shutdown(0, SHUT_RD)
	xor	%esi, %esi
	mov	$48, %eax
	syscall
	jmp	1b
9:	cmpw	$0, 70(%rsp)
	je	1b
	xor	%eax, %eax		# read(0, buf, 64)
	xor	%edi, %edi
	mov	%rsp, %rsi
	mov	$64, %edx
	syscall
	cmp	$-4, %rax		# EINTR: poll again
	je	1b
	test	%rax, %rax
	jle	4f			# end of file or an error: the owner is gone
	test	%ebx, %ebx		# released: only the end matters now
	jnz	1b
	cmpb	$'d', (%rsp)
	je	6f
	cmpb	$'r', (%rsp)
	jne	2f
	mov	$1, %ebx		# "rmdir": released while a member of the
	jmp	1b			# cgroup is still exiting; wait for the end
4:	test	%ebx, %ebx
	jz	2f
	# Released with "rmdir" and the owner gone: remove the cgroup, argv[5]
	# of the guard's argv (agentplane-watchdog /bin/sh -c SCRIPT NAME
	# CGROUP TOKEN), once the member is gone: every 10 ms, 500 times.
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
	# The owner is gone: kill. The command may have lowered this
	# process's resource limits (prlimit(2) needs no ptrace access): no
	# descriptor, memory or stack left the shell no way to start. They
	# are restored first (as root; otherwise they stay as they are), then
	# the cgroup is killed through its cgroup.kill, which the owner opened
	# for it as descriptor 4 (KillFD) and which needs no resource at all
	# (absent: EBADF, and the shell does it).
2:	lea	limits(%rip), %r13
	mov	$7, %r14d
8:	xor	%edi, %edi		# prlimit64(0, resource, &limit, NULL)
	mov	(%r13), %esi
	lea	8(%r13), %rdx
	xor	%r10d, %r10d
	mov	$302, %eax
	syscall
	add	$24, %r13
	dec	%r14d
	jnz	8b
	mov	$4, %edi		# write(4, "1", 1)
	lea	one(%rip), %rsi
	mov	$1, %edx
	mov	$1, %eax
	syscall
	mov	$4, %edi		# close(4)
	mov	$3, %eax
	syscall
	mov	$3, %edi		# close(3): the watchdog needs no pidfd
	mov	$3, %eax
	syscall
	mov	(%r12), %rcx		# argc
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
	# The limits restored before the shell starts: resource, soft, hard.
limits:	.quad	0, -1, -1		# RLIMIT_CPU
	.quad	1, -1, -1		# RLIMIT_FSIZE
	.quad	2, -1, -1		# RLIMIT_DATA
	.quad	3, 8388608, -1		# RLIMIT_STACK
	.quad	6, -1, -1		# RLIMIT_NPROC
	.quad	7, 1024, 1024		# RLIMIT_NOFILE
	.quad	9, -1, -1		# RLIMIT_AS
one:	.ascii	"1"
name:	.asciz	"agentplane-wd"
