/* ptx_blob.S: one kernel file's PTX text (built from kernels/<file>.cu into
 * $(BUILD); path in GS_PTX_FILE), embedded in libgemmshim.so as the
 * NUL-terminated string GS_PTX_SYMBOL (gs_ptx_<file>) that cuModuleLoadData
 * takes. Hidden: the shim exports only its cuBLAS entry points. */
	.section .rodata.GS_PTX_SYMBOL, "a", @progbits
	.globl GS_PTX_SYMBOL
	.hidden GS_PTX_SYMBOL
	.type GS_PTX_SYMBOL, @object
	.balign 16
GS_PTX_SYMBOL:
	.incbin GS_PTX_FILE
	.byte 0
	.size GS_PTX_SYMBOL, . - GS_PTX_SYMBOL

	.section .note.GNU-stack, "", @progbits
