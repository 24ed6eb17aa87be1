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
	jne	2f
	xor	%edi, %edi		# exit_group(0)
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
name:	.asciz	"agentplane-wd"
