/* The device of a call: handle -> stream -> context -> capability, cached
 * per context, and a destroyed handle never asked for its stream. Runs over
 * the CPU stand-in's libcuda (two devices, 6.1 and 9.0) with cuBLAS's
 * handle queries replaced by counting fakes. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "resolve.h"
#include "shim.h"
#include "standin_driver.h"
#include "sys.h"

static CUcontext ctxs[2];
static CUstream streams[2];
static int push_calls, get_stream_calls;
static CUresult (*real_push)(CUcontext);

/* The fake cuBLAS handles: 0x100 + d runs on streams[d]. */
static cublasStatus_t fake_get_stream(cublasHandle_t h, cudaStream_t *s) {
  get_stream_calls++;
  uintptr_t d = (uintptr_t)h - 0x100;
  if (d > 1) return CUBLAS_STATUS_NOT_INITIALIZED;
  *s = (cudaStream_t)streams[d];
  return CUBLAS_STATUS_SUCCESS;
}

static cublasStatus_t fake_pointer_mode(cublasHandle_t h, cublasPointerMode_t *m) {
  *m = CUBLAS_POINTER_MODE_DEVICE;
  return CUBLAS_STATUS_SUCCESS;
}

static CUresult counting_push(CUcontext c) {
  push_calls++;
  return real_push(c);
}

static int setup(void **state) {
  if (standin_driver_load("test_device", "6.1,9.0")) return -1;
  CUresult (*retain)(CUcontext *, CUdevice) = (CUresult(*)(CUcontext *, CUdevice))dlsym(RTLD_DEFAULT, "cuDevicePrimaryCtxRetain");
  CUresult (*stream_create)(CUstream *, unsigned) = (CUresult(*)(CUstream *, unsigned))dlsym(RTLD_DEFAULT, "cuStreamCreate");
  for (int d = 0; d < 2; d++) {
    CUcontext popped;
    if (retain(&ctxs[d], d) != CUDA_SUCCESS || gs_sys.cuCtxPushCurrent_v2(ctxs[d]) != CUDA_SUCCESS ||
        stream_create(&streams[d], 0) != CUDA_SUCCESS || gs_sys.cuCtxPopCurrent_v2(&popped) != CUDA_SUCCESS)
      return -1;
  }
  real_push = gs_sys.cuCtxPushCurrent_v2;
  gs_sys.cuCtxPushCurrent_v2 = counting_push;
  gs_sys.cublasGetStream_v2 = fake_get_stream;
  gs_sys.cublasGetPointerMode_v2 = fake_pointer_mode;
  return 0;
}

static gs_call gemm_call(uintptr_t handle) {
  gs_call c;
  memset(&c, 0, sizeof c);
  c.g.api = GS_API_GEMM_EX;
  c.g.handle = (void *)handle;
  c.g.pointer_mode = -1;
  return c;
}

static void test_device_and_cache(void **state) {
  push_calls = get_stream_calls = 0;
  gs_call c = gemm_call(0x100);
  assert_null(device_of_call(&c));
  assert_int_equal(c.device, 0);
  assert_int_equal(c.sm, 61);
  assert_ptr_equal(c.ctx, ctxs[0]);
  assert_ptr_equal(c.g.stream, streams[0]);
  assert_int_equal(c.g.pointer_mode, CUBLAS_POINTER_MODE_DEVICE);
  int pushes = push_calls;
  assert_int_equal(pushes, 1); /* the first call of the process: not cached yet */
  for (int i = 0; i < 10; i++) {
    c = gemm_call(0x100);
    assert_null(device_of_call(&c));
    assert_int_equal(c.sm, 61);
  }
  assert_int_equal(push_calls, pushes); /* cached: no more context switches */
  c = gemm_call(0x101);
  assert_null(device_of_call(&c));
  assert_int_equal(c.device, 1);
  assert_int_equal(c.sm, 90);
  assert_int_equal(get_stream_calls, 12);
}

static void test_lt_uses_its_stream(void **state) {
  get_stream_calls = 0;
  gs_call c = gemm_call(0);
  c.g.api = GS_API_LT_MATMUL;
  c.g.stream = streams[1];
  assert_null(device_of_call(&c));
  assert_int_equal(c.sm, 90);
  assert_int_equal(get_stream_calls, 0);
}

static void test_null_and_dead_handles(void **state) {
  get_stream_calls = 0;
  gs_call c = gemm_call(0);
  assert_string_equal(device_of_call(&c), "NULL cuBLAS handle");
  assert_int_equal(c.device, -1);
  assert_int_equal(c.sm, -1);
  device_handle_destroyed((void *)0x100);
  c = gemm_call(0x100);
  assert_string_equal(device_of_call(&c), "cuBLAS handle already destroyed");
  assert_int_equal(get_stream_calls, 0); /* never asked */
  c = gemm_call(0x101); /* another live handle is unaffected */
  assert_null(device_of_call(&c));
  device_handle_created((void *)0x100); /* the address handed out again */
  c = gemm_call(0x100);
  assert_null(device_of_call(&c));
  assert_int_equal(c.sm, 61);
}

static void test_failures_are_reasons(void **state) {
  gs_call c = gemm_call(0x100);
  gs_fault_arm(GS_SYS_cublasGetStream_v2, 1, 0);
  assert_string_equal(device_of_call(&c), "cublasGetStream failed");
  /* cuStreamGetId failing is no failure: the stream is asked for its
   * context (which the cache would have spared), and that failing is. */
  c = gemm_call(0x100);
  gs_fault_arm(GS_SYS_cuStreamGetId, 1, 0);
  assert_null(device_of_call(&c));
  assert_int_equal(c.sm, 61);
  assert_int_equal(c.stream_id, 0);
  c = gemm_call(0x100);
  gs_fault_arm(GS_SYS_cuStreamGetId, 1, 0);
  gs_fault_arm(GS_SYS_cuStreamGetCtx, 1, 0);
  assert_string_equal(device_of_call(&c), "cuStreamGetCtx failed (no current context?)");
  assert_int_equal(c.device, -1);
  gs_fault_clear();
  c = gemm_call(0x7777); /* a handle the fake does not know */
  assert_string_equal(device_of_call(&c), "cublasGetStream failed");
}

/* Handles destroyed by the thousand (cuSOLVER and frameworks create and
 * destroy them all the time): the most recent ones are still recognised,
 * live ones are not taken for dead. The lookup's cost does not grow with
 * this history (tests/bench/check_costs.py counts instructions per call). */
static void test_many_dead_handles(void **state) {
  enum { DESTROYED = 20000, RECENT = 256 };
  for (uintptr_t i = 0; i < DESTROYED; i++) device_handle_destroyed((void *)(0x1000000 + i * 0x40));
  for (uintptr_t i = DESTROYED - RECENT; i < DESTROYED; i++) {
    gs_call c = gemm_call(0x1000000 + i * 0x40);
    assert_string_equal(device_of_call(&c), "cuBLAS handle already destroyed");
  }
  gs_call c = gemm_call(0x101);
  assert_null(device_of_call(&c));
  assert_int_equal(c.sm, 90);
}

/* The primary context released to zero and retained again: the same
 * address with a new cuCtxGetId id (the CUDA Driver API: the id "is unique
 * for the life of the program"), so the cached device is asked for again. */
static void test_context_reset_requeried(void **state) {
  CUresult (*release)(CUdevice) = (CUresult(*)(CUdevice))dlsym(RTLD_DEFAULT, "cuDevicePrimaryCtxRelease_v2");
  CUresult (*retain)(CUcontext *, CUdevice) = (CUresult(*)(CUcontext *, CUdevice))dlsym(RTLD_DEFAULT, "cuDevicePrimaryCtxRetain");
  CUresult (*stream_create)(CUstream *, unsigned) = (CUresult(*)(CUstream *, unsigned))dlsym(RTLD_DEFAULT, "cuStreamCreate");
  gs_call c = gemm_call(0x101);
  assert_null(device_of_call(&c));
  unsigned long long old_id = c.ctx_id;
  int pushes = push_calls;
  CUcontext again, popped;
  assert_int_equal(release(1), CUDA_SUCCESS);
  assert_int_equal(retain(&again, 1), CUDA_SUCCESS);
  assert_ptr_equal(again, ctxs[1]);
  assert_int_equal(real_push(again), CUDA_SUCCESS);
  assert_int_equal(stream_create(&streams[1], 0), CUDA_SUCCESS);
  assert_int_equal(gs_sys.cuCtxPopCurrent_v2(&popped), CUDA_SUCCESS);
  c = gemm_call(0x101);
  assert_null(device_of_call(&c));
  assert_true(c.ctx_id != old_id);
  assert_int_equal(c.sm, 90);
  assert_int_equal(push_calls, pushes + 1); /* the new context is queried once... */
  c = gemm_call(0x101);
  assert_null(device_of_call(&c));
  assert_int_equal(push_calls, pushes + 1); /* ...then cached */
}

static int stream_ctx_calls, ctx_id_calls;
static CUresult (*real_stream_ctx)(CUstream, CUcontext *);
static CUresult (*real_ctx_id)(CUcontext, unsigned long long *);
static CUresult counting_stream_ctx(CUstream s, CUcontext *c) {
  stream_ctx_calls++;
  return real_stream_ctx(s, c);
}
static CUresult counting_ctx_id(CUcontext c, unsigned long long *id) {
  ctx_id_calls++;
  return real_ctx_id(c, id);
}

static gs_call lt_call(CUstream s) {
  gs_call c = gemm_call(0);
  c.g.api = GS_API_LT_MATMUL;
  c.g.stream = s;
  return c;
}

/* A created stream's context and id are cached by its cuStreamGetId: one
 * driver query per call instead of cuStreamGetCtx and cuCtxGetId. A stream
 * destroyed and another created at its address in another context, and a
 * context destroyed and another created at its address with a stream at the
 * old stream's address (the stand-in hands both addresses out again, as a
 * driver may), are new ids: never the dead stream's context. */
static void test_stream_cache_and_reuse(void **state) {
  CUresult (*stream_create)(CUstream *, unsigned) = (CUresult(*)(CUstream *, unsigned))dlsym(RTLD_DEFAULT, "cuStreamCreate");
  CUresult (*stream_destroy)(CUstream) = (CUresult(*)(CUstream))dlsym(RTLD_DEFAULT, "cuStreamDestroy_v2");
  CUresult (*ctx_create)(CUcontext *, CUctxCreateParams *, unsigned, CUdevice) =
      (CUresult(*)(CUcontext *, CUctxCreateParams *, unsigned, CUdevice))dlsym(RTLD_DEFAULT, "cuCtxCreate_v4");
  CUresult (*ctx_destroy)(CUcontext) = (CUresult(*)(CUcontext))dlsym(RTLD_DEFAULT, "cuCtxDestroy_v2");
  real_stream_ctx = gs_sys.cuStreamGetCtx;
  real_ctx_id = gs_sys.cuCtxGetId;
  gs_sys.cuStreamGetCtx = counting_stream_ctx;
  gs_sys.cuCtxGetId = counting_ctx_id;
  CUcontext popped;
  CUstream s1, s2;
  unsigned long long id0, sid;
  assert_int_equal(real_ctx_id(ctxs[0], &id0), CUDA_SUCCESS);
  assert_int_equal(real_push(ctxs[0]), CUDA_SUCCESS);
  assert_int_equal(stream_create(&s1, 0), CUDA_SUCCESS);
  assert_int_equal(gs_sys.cuCtxPopCurrent_v2(&popped), CUDA_SUCCESS);
  assert_int_equal(gs_sys.cuStreamGetId(s1, &sid), CUDA_SUCCESS);
  stream_ctx_calls = ctx_id_calls = 0;
  for (int i = 0; i < 3; i++) {
    gs_call c = lt_call(s1);
    assert_null(device_of_call(&c));
    assert_ptr_equal(c.ctx, ctxs[0]);
    assert_int_equal(c.ctx_id, id0);
    assert_int_equal(c.stream_id, sid);
    assert_int_equal(c.sm, 61);
  }
  assert_int_equal(stream_ctx_calls, 1); /* the first call only */
  assert_int_equal(ctx_id_calls, 1);
  /* the NULL stream is the current context's: asked every call */
  assert_int_equal(real_push(ctxs[1]), CUDA_SUCCESS);
  for (int i = 0; i < 2; i++) {
    gs_call c = lt_call(NULL);
    assert_null(device_of_call(&c));
    assert_ptr_equal(c.ctx, ctxs[1]);
    assert_int_equal(c.stream_id, 0);
  }
  assert_int_equal(stream_ctx_calls, 3);
  /* s1's address, now a stream of the 9.0 device's context */
  assert_int_equal(stream_destroy(s1), CUDA_SUCCESS);
  assert_int_equal(stream_create(&s2, 0), CUDA_SUCCESS);
  assert_int_equal(gs_sys.cuCtxPopCurrent_v2(&popped), CUDA_SUCCESS);
  assert_ptr_equal(s2, s1);
  gs_call c = lt_call(s2);
  assert_null(device_of_call(&c));
  assert_ptr_equal(c.ctx, ctxs[1]);
  assert_int_equal(c.sm, 90);
  assert_true(c.stream_id != sid);
  assert_int_equal(stream_destroy(s2), CUDA_SUCCESS);
  /* a created context with a stream; destroyed; another context (another
   * device) at its address, a stream at the old stream's address */
  CUcontext cx, cy;
  CUstream sx, sy;
  assert_int_equal(ctx_create(&cx, NULL, 0, 1), CUDA_SUCCESS);
  assert_int_equal(stream_create(&sx, 0), CUDA_SUCCESS);
  c = lt_call(sx);
  assert_null(device_of_call(&c));
  assert_ptr_equal(c.ctx, cx);
  assert_int_equal(c.sm, 90);
  unsigned long long old_id = c.ctx_id;
  assert_int_equal(ctx_destroy(cx), CUDA_SUCCESS);
  assert_int_equal(ctx_create(&cy, NULL, 0, 0), CUDA_SUCCESS);
  assert_int_equal(stream_create(&sy, 0), CUDA_SUCCESS);
  assert_ptr_equal(cy, cx);
  assert_ptr_equal(sy, sx);
  c = lt_call(sy);
  assert_null(device_of_call(&c));
  assert_ptr_equal(c.ctx, cy);
  assert_true(c.ctx_id != old_id);
  assert_int_equal(c.device, 0);
  assert_int_equal(c.sm, 61);
  assert_int_equal(ctx_destroy(cy), CUDA_SUCCESS);
  gs_sys.cuStreamGetCtx = real_stream_ctx;
  gs_sys.cuCtxGetId = real_ctx_id;
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_device_and_cache),
      cmocka_unit_test(test_lt_uses_its_stream),
      cmocka_unit_test(test_null_and_dead_handles),
      cmocka_unit_test(test_failures_are_reasons),
      cmocka_unit_test(test_many_dead_handles),
      cmocka_unit_test(test_context_reset_requeried),
      cmocka_unit_test(test_stream_cache_and_reuse),
  };
  return cmocka_run_group_tests(tests, setup, NULL);
}
