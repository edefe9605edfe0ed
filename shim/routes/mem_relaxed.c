/* mem_relaxed.c: device memory outside any stream, in relaxed capture
 * mode: the shim's kept buffers (fp8 rings, cuBLASLt workspaces, scratch
 * slots: memory.c, lt.c) and the buffers of captured calls (graph_mem.c). */
#include "mem_relaxed.h"

#include "../shim.h"
#include "../base/sys.h"

/* cuMemAlloc and cuMemFree are "potentially unsafe" during stream capture:
 * a thread in the default (global) capture mode may not make them while
 * any other thread has a global-mode capture under way, and the attempt
 * fails with CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and invalidates that
 * capture (cuda.h, cuThreadExchangeStreamCaptureMode). torch.cuda.graph
 * captures in global mode by default, so a routed call on another thread
 * would break the framework's capture. A thread in relaxed mode "is not
 * prohibited from potentially unsafe API calls"; PyTorch allocates under
 * the same guard for the same reason (c10/cuda/CUDACachingAllocator.cpp,
 * cudaMallocMaybeCapturing with CUDAStreamCaptureModeGuard). The same
 * holds on a thread capturing itself: a captured call's graph buffer
 * (graph_mem.c) is made this way, outside the graph. A driver without
 * cuThreadExchangeStreamCaptureMode has no stream capture at all. */
static int relaxed_enter(CUstreamCaptureMode *saved) {
  if (!gs_sys.cuThreadExchangeStreamCaptureMode) return 0;
  *saved = CU_STREAM_CAPTURE_MODE_RELAXED;
  return GS_CALL(cuThreadExchangeStreamCaptureMode, saved) == CUDA_SUCCESS ? 1 : -1;
}

static void relaxed_leave(CUstreamCaptureMode saved) {
  /* Only fails for a driver torn down (cuda.h: DEINITIALIZED and the like):
   * then no capture is left to protect; the thread keeps relaxed mode. */
  if (GS_CALL(cuThreadExchangeStreamCaptureMode, &saved) != CUDA_SUCCESS)
    GS_WARN("cuThreadExchangeStreamCaptureMode failed restoring this thread's capture mode; it stays relaxed");
}

CUresult mem_alloc_relaxed(CUdeviceptr *p, size_t bytes, int *mode_failed) {
  CUstreamCaptureMode saved;
  int entered = relaxed_enter(&saved);
  *mode_failed = entered < 0;
  if (entered < 0) return CUDA_ERROR_UNKNOWN;
  CUresult r = GS_CALL(cuMemAlloc_v2, p, bytes);
  if (entered) relaxed_leave(saved);
  return r;
}

CUresult mem_free_relaxed(CUdeviceptr p) {
  CUstreamCaptureMode saved;
  int entered = relaxed_enter(&saved);
  CUresult r = GS_CALL(cuMemFree_v2, p); /* a failed switch frees anyway: keeping it would leak */
  if (entered > 0) relaxed_leave(saved);
  return r;
}

