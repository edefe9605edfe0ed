/* module_launch.c: the shim's kernel modules, loaded once per context.
 *
 * Each kernel file's PTX (sm_61; sm_89 for the optional tensor-core file,
 * loaded only on such devices: module.h) is embedded in libgemmshim.so (ptx_blob.S);
 * at cuModuleLoadData the driver JIT-compiles it for the context's GPU,
 * once. Each context's functions are an immutable entry of the shim's
 * per-context table (../shim/base/ctx_table.h): readers find it without a
 * lock, loads serialise on the table's lock.
 *
 * An entry is keyed by the context's address and, where the driver has
 * cuCtxGetId (CUDA 12.0+), its id, which the driver documents as unique for
 * the life of the program: a context destroyed (or a primary context reset
 * by its last cuDevicePrimaryCtxRelease, or cuDevicePrimaryCtxReset) and
 * another created at the same address must not reuse the dead modules'
 * functions. The new context's entry takes the old one's slot; the old
 * entry is abandoned (a reader may still hold it; its modules went with its
 * context): a few hundred bytes per reset. Drivers without cuCtxGetId key
 * by address alone. With MODULE_SLOTS live contexts the launchers say so
 * and the route runs native.
 *
 * What a load needs of its context (id, compute capability) comes from the
 * caller's kernel_ctx (kernels.h); only what the caller did not know is
 * asked of the driver. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>

#include "../shim/base/base.h"
#include "../shim/base/ctx_table.h"
#include "../shim/base/sys.h"
#include "kernels.h"
#include "module.h"

#define MODULE_SLOTS 256

#define GS_KERNEL_NAME(name, ...) #name,
#define GS_KERNEL_FILE_NAMES(file, list, sm) list(GS_KERNEL_NAME)
static const char *const kernel_names[GS_KERNEL_COUNT] = {GS_KERNEL_FILES(GS_KERNEL_FILE_NAMES)};
#undef GS_KERNEL_FILE_NAMES
#undef GS_KERNEL_NAME

/* Each file's image, how many kernels it holds (their ids follow on from
 * the previous file's, as the enum lists them) and its PTX target. */
#define GS_KERNEL_ONE(name, ...) +1
#define GS_KERNEL_FILE(file, list, sm) {gs_ptx_##file, (0 list(GS_KERNEL_ONE)), sm},
static const struct kernel_file {
  const char *ptx;
  int count;
  int sm;
} kernel_files[] = {GS_KERNEL_FILES(GS_KERNEL_FILE)};
#undef GS_KERNEL_FILE
#undef GS_KERNEL_ONE

typedef struct module_slot {
  ctx_entry head;
  CUfunction fn[GS_KERNEL_COUNT];     /* NULL: an optional file's kernel, not loaded */
  const char *absent[GS_KERNEL_COUNT]; /* why fn is NULL */
} module_slot;

CTX_TABLE_DEFINE(modules, MODULE_SLOTS, NULL);
static _Atomic int warned;

/* The table's lock is held across cuModuleLoadData: a thread may hold it
 * when the program forks, and the child (the forking thread alone) would
 * wait for it for ever. A load in flight then never completed in the child
 * (its entry was not published), so a fresh lock is all it needs.
 * Registered at load: a first use inside another fork handler must not
 * call pthread_atfork. */
static void module_after_fork_child(void) { ctx_table_after_fork_child(&modules, 0); }

__attribute__((constructor)) static void module_register_fork(void) {
  pthread_atfork(NULL, NULL, module_after_fork_child);
}

#define FILE_COUNT ((int)(sizeof kernel_files / sizeof kernel_files[0]))

/* The (current) context's compute capability as major*10 + minor; 0
 * where the driver cannot say (optional files are then not loaded). The
 * routes know it from the call's device lookup: no extra driver call. */
static int current_sm(const kernel_ctx *kc) {
  if (kc->sm >= 0) return kc->sm;
  CUdevice dev;
  int major = 0, minor = 0;
  if (!gs_sys.cuCtxGetDevice || !gs_sys.cuDeviceGetAttribute || GS_CALL(cuCtxGetDevice, &dev) != CUDA_SUCCESS ||
      GS_CALL(cuDeviceGetAttribute, &major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev) != CUDA_SUCCESS ||
      GS_CALL(cuDeviceGetAttribute, &minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev) != CUDA_SUCCESS)
    return 0;
  return major * 10 + minor;
}

/* An optional file's kernels, not loaded: their slots say why. */
static void mark_absent(module_slot *s, int first, int count, const char *why) {
  for (int k = 0; k < count; k++) {
    s->fn[first + k] = NULL;
    s->absent[first + k] = why;
  }
}

/* Load every module into ctx (current meanwhile) and fill s. Returns the
 * load's result; a failure unloads what this attempt loaded. *pop_result is
 * the restoring of the caller's context, which can fail on its own. An
 * optional file (target above GS_KERNEL_BASE_SM) is skipped on an older
 * device, and its failing to load is not the context's failure. */
static CUresult slot_load(const kernel_ctx *kc, module_slot *s, const char **why, CUresult *pop_result) {
  CUcontext ctx = kc->ctx;
  *pop_result = CUDA_SUCCESS;
  CUcontext cur = NULL;
  CUresult r = GS_CALL(cuCtxGetCurrent, &cur);
  if (r != CUDA_SUCCESS) {
    *why = "cuCtxGetCurrent failed";
    return r;
  }
  /* cuModuleLoadData loads into the current context. */
  int pushed = cur != ctx;
  if (pushed && (r = GS_CALL(cuCtxPushCurrent_v2, ctx)) != CUDA_SUCCESS) {
    *why = "cuCtxPushCurrent failed";
    return r;
  }
  CUmodule loaded[FILE_COUNT];
  int nloaded = 0, id = 0, sm = -1;
  for (int i = 0; r == CUDA_SUCCESS && i < FILE_COUNT; id += kernel_files[i].count, i++) {
    const int optional = kernel_files[i].sm > GS_KERNEL_BASE_SM;
    if (optional) {
      if (sm < 0) sm = current_sm(kc);
      if (sm < kernel_files[i].sm) {
        mark_absent(s, id, kernel_files[i].count,
                    "the device's compute capability is below the kernel's PTX target");
        continue;
      }
    }
    CUmodule mod;
    r = GS_CALL(cuModuleLoadData, &mod, kernel_files[i].ptx);
    if (r != CUDA_SUCCESS && optional) {
      GS_INFO("kernels: the driver did not take the sm_%d PTX of file %d (CUresult %d); its kernels are absent",
              kernel_files[i].sm, i, (int)r);
      mark_absent(s, id, kernel_files[i].count, "cuModuleLoadData failed: the driver did not take the kernel's PTX");
      r = CUDA_SUCCESS;
      continue;
    }
    if (r != CUDA_SUCCESS) {
      *why = "cuModuleLoadData failed: the driver did not take the shim's sm_61 PTX";
      break;
    }
    loaded[nloaded++] = mod;
    /* A missing function means the PTX and the kernel list disagree, a
     * build error the tests catch. */
    for (int k = 0; r == CUDA_SUCCESS && k < kernel_files[i].count; k++) {
      s->absent[id + k] = NULL;
      r = GS_CALL(cuModuleGetFunction, &s->fn[id + k], mod, kernel_names[id + k]);
      if (r != CUDA_SUCCESS) *why = "cuModuleGetFunction failed: a kernel is missing from the shim's PTX";
    }
  }
  if (r != CUDA_SUCCESS)
    for (int i = 0; i < nloaded; i++) GS_CALL(cuModuleUnload, loaded[i]);
  if (pushed) {
    CUcontext popped;
    *pop_result = GS_CALL(cuCtxPopCurrent_v2, &popped);
  }
  return r;
}

static CUresult load_failed(CUcontext ctx, CUresult r, const char *why) {
  /* Not cached: a transient failure (memory) gets another try next call. */
  if (!atomic_exchange(&warned, 1))
    GS_WARN("kernels: %s (CUresult %d, context %p); GEMMs that need the shim's kernels run native",
            why, (int)r, (void *)ctx);
  else
    GS_TRACE("kernels: %s (CUresult %d, context %p)", why, (int)r, (void *)ctx);
  return r;
}

/* A loaded context's kernel, or why it is absent (no warning: the caller
 * has another kernel to run). */
static CUresult slot_function(const module_slot *s, gs_kernel_id id, CUfunction *f, const char **why) {
  if (!s->fn[id]) {
    *why = s->absent[id];
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  *f = s->fn[id];
  return CUDA_SUCCESS;
}

CUresult kernels_function(kernel_ctx *kc, gs_kernel_id id, CUfunction *f, const char **why) {
  CUcontext ctx = kc->ctx;
  *why = NULL;
  if (!ctx) {
    *why = "no context";
    return load_failed(ctx, CUDA_ERROR_INVALID_CONTEXT, *why);
  }
  if (!gs_sys.cuCtxGetCurrent || !gs_sys.cuCtxPushCurrent_v2 || !gs_sys.cuCtxPopCurrent_v2 ||
      !gs_sys.cuModuleLoadData || !gs_sys.cuModuleUnload || !gs_sys.cuModuleGetFunction ||
      !gs_sys.cuLaunchKernel) {
    *why = "the driver lacks a module or context function the kernels need";
    return load_failed(ctx, CUDA_ERROR_NOT_FOUND, *why);
  }
  unsigned long long ctx_id = 0;
  if (kc->id_known) {
    ctx_id = kc->ctx_id;
  } else if (gs_sys.cuCtxGetId) {
    CUresult r = GS_CALL(cuCtxGetId, ctx, &ctx_id);
    if (r != CUDA_SUCCESS) {
      *why = "cuCtxGetId failed (destroyed context?)";
      return load_failed(ctx, r, *why);
    }
  }
  const module_slot *found = (const module_slot *)ctx_table_find(&modules, ctx, ctx_id);
  if (found) return slot_function(found, id, f, why);

  CUresult r = CUDA_SUCCESS;
  ctx_table_lock(&modules);
  found = (const module_slot *)ctx_table_find(&modules, ctx, ctx_id);
  ctx_entry *dead = NULL;
  int i = found ? -1 : ctx_table_place(&modules, ctx, &dead);
  if (found) {
    /* another thread loaded it meanwhile */
  } else if (i < 0) {
    *why = "kernel module cache full (too many live contexts)";
    r = CUDA_ERROR_OUT_OF_MEMORY;
  } else {
    /* A new context, or a new one at a dead context's address (its id
     * changed), or in a gone context's slot: a fresh entry, published whole. */
    module_slot *s = GS_CALL(calloc, 1, sizeof *s);
    CUresult pop_result = CUDA_SUCCESS;
    if (!s) {
      *why = "out of host memory for the kernel module table";
      r = CUDA_ERROR_OUT_OF_MEMORY;
    } else {
      r = slot_load(kc, s, why, &pop_result);
    }
    if (r == CUDA_SUCCESS) {
      ctx_table_publish(&modules, i, &s->head, ctx, ctx_id);
      found = s;
      GS_INFO("kernels: %d modules loaded for context %p (id %llu%s): %d kernels", FILE_COUNT, (void *)ctx,
              ctx_id, !dead ? "" : dead->ctx == (void *)ctx ? ", replacing a destroyed context's at that address"
                                                           : ", in a destroyed context's slot", (int)GS_KERNEL_COUNT);
    } else {
      free(s);
      found = NULL;
    }
    /* The modules are good and kept even so; this call reports it. */
    if (r == CUDA_SUCCESS && pop_result != CUDA_SUCCESS) {
      *why = "cuCtxPopCurrent failed after loading the modules";
      r = pop_result;
    }
  }
  ctx_table_unlock(&modules);
  if (r != CUDA_SUCCESS) return load_failed(ctx, r, *why);
  return slot_function(found, id, f, why);
}

const char *kernels_ready(kernel_ctx *kc) {
  CUfunction f;
  const char *why;
  if (kernels_function(kc, (gs_kernel_id)0, &f, &why) != CUDA_SUCCESS) return why;
  return NULL;
}

CUresult kernels_launch(kernel_ctx *kc, CUfunction f, const unsigned grid[3],
                        const unsigned block[3], CUstream stream, void **params) {
  CUcontext ctx = kc->ctx, cur = NULL;
  CUresult r = CUDA_SUCCESS;
  if (kc->current_known) {
    cur = kc->current;
  } else {
    r = GS_CALL(cuCtxGetCurrent, &cur);
    if (r != CUDA_SUCCESS) return r;
    kc->current = cur;
    kc->current_known = 1;
  }
  int pushed = cur != ctx;
  if (pushed && (r = GS_CALL(cuCtxPushCurrent_v2, ctx)) != CUDA_SUCCESS) return r;
  r = GS_CALL(cuLaunchKernel, f, grid[0], grid[1], grid[2], block[0], block[1], block[2], 0,
              stream, params, NULL);
  if (pushed) {
    CUcontext popped;
    CUresult pr = GS_CALL(cuCtxPopCurrent_v2, &popped);
    if (r == CUDA_SUCCESS) r = pr;
  }
  return r;
}
