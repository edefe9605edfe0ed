/* mem_relaxed.h: device memory outside any stream (mem_relaxed.c). */
#ifndef GEMMSHIM_MEM_RELAXED_H
#define GEMMSHIM_MEM_RELAXED_H

#include <cuda.h>
#include <stddef.h>

/* cuMemAlloc / cuMemFree in the current context for memory the shim keeps
 * outside any stream (fp8 rings, cuBLASLt workspaces, scratch buffers, the
 * buffers of captured calls), made in relaxed capture mode so that no
 * capture, another thread's global-mode one or the calling thread's own,
 * is refused or invalidated by them. *mode_failed (alloc): 1 when the
 * switch to relaxed mode failed, nothing allocated. */
CUresult mem_alloc_relaxed(CUdeviceptr *p, size_t bytes, int *mode_failed);
CUresult mem_free_relaxed(CUdeviceptr p);

#endif
