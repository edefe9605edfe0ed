/* runtime.c: runtime-style context set-up and device pointer checks for the
 * stand-in cuBLAS/cuBLASLt (see runtime.h). */
#include "runtime.h"

#include <pthread.h>
#include <stdlib.h>

#include "common.h"
#include "gemm_ref.h"

static pthread_mutex_t rt_lock = PTHREAD_MUTEX_INITIALIZER;

/* As the driver's (driver_init.c): a forked child gets a fresh lock. */
static void rt_after_fork_child(void) { pthread_mutex_init(&rt_lock, NULL); }

__attribute__((constructor)) static void rt_register_fork(void) { pthread_atfork(NULL, NULL, rt_after_fork_child); }
static CUcontext rt_primary[64]; /* retained by "the runtime", per device */

CUresult rt_ensure_context(int device) {
  CUresult r = cuInit(0);
  if (r) return r;
  CUcontext cur = NULL;
  r = cuCtxGetCurrent(&cur);
  if (r) return r;
  if (cur) return CUDA_SUCCESS;
  if (device < 0) device = 0;
  if (device >= 64) return CUDA_ERROR_INVALID_DEVICE;
  pthread_mutex_lock(&rt_lock);
  if (!rt_primary[device]) r = cuDevicePrimaryCtxRetain(&rt_primary[device], device);
  CUcontext ctx = rt_primary[device];
  pthread_mutex_unlock(&rt_lock);
  if (r) return r;
  return cuCtxSetCurrent(ctx);
}

CUresult rt_current_device(int *device) {
  CUdevice d;
  CUresult r = cuCtxGetDevice(&d);
  if (!r) *device = d;
  return r;
}

CUresult rt_device_cc(int device, int *major, int *minor) {
  CUresult r = cuDeviceGetAttribute(major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device);
  if (!r) r = cuDeviceGetAttribute(minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device);
  return r;
}

CUresult rt_stream_device(CUstream stream, int *device, int *major, int *minor) {
  CUcontext ctx;
  CUresult r = cuStreamGetCtx(stream, &ctx);
  CUdevice d = 0;
  if (!r) r = cuCtxGetDevice_v2(&d, ctx);
  if (!r) r = rt_device_cc(d, major, minor);
  if (!r) *device = d;
  return r;
}

int rt_is_device_pointer(const void *p) {
  unsigned int type = 0;
  return p && cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)p) ==
                  CUDA_SUCCESS;
}

int rt_is_device_range(const void *p, size_t bytes) {
  if (bytes == 0) return 1;
  CUdeviceptr start = 0;
  size_t size = 0;
  if (!p || cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, (CUdeviceptr)p) ||
      cuPointerGetAttribute(&size, CU_POINTER_ATTRIBUTE_RANGE_SIZE, (CUdeviceptr)p))
    return 0;
  return bytes <= start + size - (CUdeviceptr)p;
}

size_t rt_matrix_span(size_t elem_size, int64_t rows, int64_t cols, int64_t ld, int row_major,
                      int64_t batch_count, int64_t stride) {
  if (rows <= 0 || cols <= 0 || batch_count <= 0) return 0;
  /* Sizes come straight from the caller: an overflow means "more than any
   * allocation", which the range check then refuses. */
  int64_t one, members, total;
  uint64_t bytes;
  if (__builtin_mul_overflow(row_major ? rows - 1 : cols - 1, ld, &one) ||
      __builtin_add_overflow(one, row_major ? cols : rows, &one) ||
      __builtin_mul_overflow(batch_count - 1, stride, &members) ||
      __builtin_add_overflow(members, one, &total) || total < 0 ||
      __builtin_mul_overflow((uint64_t)total, (uint64_t)elem_size, &bytes) || bytes > SIZE_MAX)
    return SIZE_MAX;
  return (size_t)bytes;
}

int rt_check_operand(const char *fn, const char *what, const void *p, size_t bytes) {
  if (rt_is_device_range(p, bytes)) return 1;
  if (rt_is_device_pointer(p))
    standin_msg("%s: %s (%p, %zu bytes) runs past the end of its device allocation", fn, what,
                p, bytes);
  else
    standin_msg("%s: %s (%p) is not device memory; a GPU would fault on it", fn, what, p);
  return 0;
}

/* ------------------------------------------------------------------------ */
/* GEMMs in stream order. A captured GEMM's closure belongs to every graph
 * made from the capture (clones, parents, instantiations), whose lifetimes
 * the library does not see: closures are kept until the process exits. */
typedef struct rt_closure {
  struct rt_closure *next;
  sg_problem p;
  rt_late late;
} rt_closure;
static rt_closure *rt_closures;
static pthread_mutex_t rt_closures_lock = PTHREAD_MUTEX_INITIALIZER;

static void rt_closures_after_fork_child(void) { pthread_mutex_init(&rt_closures_lock, NULL); }

__attribute__((constructor)) static void rt_closures_register_fork(void) {
  pthread_atfork(NULL, NULL, rt_closures_after_fork_child);
}

static void rt_run_closure(void *arg) {
  rt_closure *c = arg;
  sg_problem p = c->p;
  if (c->late.alpha) p.alpha = sg_read_scalar(c->late.alpha, (cudaDataType_t)c->late.scalar_type);
  if (c->late.beta) p.beta = sg_read_scalar(c->late.beta, (cudaDataType_t)c->late.scalar_type);
  if (c->late.scale_a) p.scale_a = *c->late.scale_a;
  if (c->late.scale_b) p.scale_b = *c->late.scale_b;
  if (sg_gemm(&p)) standin_msg("captured GEMM: out of host memory at launch");
}

int rt_gemm_on_stream(const sg_problem *p, const rt_late *late, CUstream stream) {
  CUstreamCaptureStatus cs = CU_STREAM_CAPTURE_STATUS_NONE;
  if (cuStreamIsCapturing(stream, &cs) != CUDA_SUCCESS || cs != CU_STREAM_CAPTURE_STATUS_ACTIVE)
    return sg_gemm(p);
  rt_closure *c = calloc(1, sizeof *c);
  if (!c) return -1;
  c->p = *p;
  if (late) c->late = *late;
  if (cuLaunchHostFunc(stream, rt_run_closure, c) != CUDA_SUCCESS) {
    free(c);
    return -2;
  }
  pthread_mutex_lock(&rt_closures_lock);
  c->next = rt_closures;
  rt_closures = c;
  pthread_mutex_unlock(&rt_closures_lock);
  return 0;
}

__attribute__((destructor)) static void rt_free_closures(void) {
  pthread_mutex_lock(&rt_closures_lock);
  while (rt_closures) {
    rt_closure *next = rt_closures->next;
    free(rt_closures);
    rt_closures = next;
  }
  pthread_mutex_unlock(&rt_closures_lock);
}
