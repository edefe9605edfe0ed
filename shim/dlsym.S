/* dlsym.S: the exported dlsym. For RTLD_NEXT and RTLD_DEFAULT it jumps
 * straight to libc's dlsym, so libc sees the original caller's return
 * address: the answer to an RTLD_NEXT lookup depends on who asks, and a C
 * wrapper (a call, not a jump) would change it. Explicit handles go to
 * gs_dlsym_handle (hooks.c), which swaps in the shim's wrapper for the hooked
 * cuBLAS names looked up on a cuBLAS handle (the XLA/TensorFlow pattern). */
#if defined(__x86_64__)
	.text
	.globl	dlsym
	.type	dlsym, @function
dlsym:
	.cfi_startproc
	cmpq	$-1, %rdi		/* RTLD_NEXT */
	je	1f
	testq	%rdi, %rdi		/* RTLD_DEFAULT */
	je	1f
	jmp	gs_dlsym_handle
1:	movq	gs_real_dlsym(%rip), %rax
	testq	%rax, %rax
	jz	2f
	jmp	*%rax
2:	/* First use before the constructor ran: find libc's dlsym, keeping
	 * the arguments; the stack stays 16-byte aligned for the call. */
	pushq	%rdi
	.cfi_adjust_cfa_offset 8
	pushq	%rsi
	.cfi_adjust_cfa_offset 8
	subq	$8, %rsp
	.cfi_adjust_cfa_offset 8
	call	gs_resolve_real_dlsym
	addq	$8, %rsp
	.cfi_adjust_cfa_offset -8
	popq	%rsi
	.cfi_adjust_cfa_offset -8
	popq	%rdi
	.cfi_adjust_cfa_offset -8
	testq	%rax, %rax
	jz	3f
	jmp	*%rax
3:	xorl	%eax, %eax
	ret
	.cfi_endproc
	.size	dlsym, .-dlsym
	.section .note.GNU-stack,"",@progbits
#else
#error "the dlsym wrapper exists for x86-64 only; port dlsym.S (a tail jump for RTLD_NEXT/RTLD_DEFAULT) first"
#endif
