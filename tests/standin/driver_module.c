/* driver_module.c: modules and kernel launches, per standin_kernel.h.
 *
 * A module remembers its PTX text (when the image is PTX) and a dlopen
 * handle on STANDIN_KERNELS. cuModuleLoadData applies the checks a driver's
 * JIT would (.target above the device, .version above the driver's PTX ISA);
 * cuModuleGetFunction requires the .entry in the PTX and the host symbol;
 * cuLaunchKernel validates the launch as a GPU does and then runs the host
 * kernel on the calling thread, without holding the driver lock. */
#include "driver.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SD_MAX_PARAMS 64

struct CUfunc_st {
  CUmodule mod;
  struct CUfunc_st *next;
  standin_kernel_fn fn;
  int max_dynamic_shared;  /* CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES */
  int carveout;
  int nparams;             /* from the PTX .entry; -1 unknown (binary image) */
  unsigned param_size[SD_MAX_PARAMS];
  char name[];
};

struct CUmod_st {
  CUcontext ctx;
  char *ptx;               /* NULL for binary images */
  void *lib;               /* dlopen(STANDIN_KERNELS), NULL if unavailable */
  struct CUfunc_st *funcs;
};

/* ELF (cubin) and fatbin images are accepted without inspection. */
static int sd_has_magic(const unsigned char *p, const unsigned char *magic) {
  /* Byte by byte: a short text image ends (NUL) before a mismatch is read
   * past, since no magic byte is 0. */
  for (int i = 0; i < 4; i++)
    if (p[i] != magic[i]) return 0;
  return 1;
}

static int sd_image_is_binary(const unsigned char *p) {
  static const unsigned char elf[4] = {0x7f, 'E', 'L', 'F'};
  static const unsigned char fatbin[4] = {0x50, 0xed, 0x55, 0xba};
  static const unsigned char fatwrap[4] = {0xb1, 0x43, 0x62, 0x46};
  return sd_has_magic(p, elf) || sd_has_magic(p, fatbin) || sd_has_magic(p, fatwrap);
}

/* Find directive `dir` (".version", ".target") at the start of a line. */
static const char *sd_ptx_directive(const char *ptx, const char *dir) {
  size_t n = strlen(dir);
  for (const char *p = strstr(ptx, dir); p; p = strstr(p + 1, dir)) {
    const char *q = p;
    while (q > ptx && (q[-1] == ' ' || q[-1] == '\t')) q--;
    if ((q == ptx || q[-1] == '\n') && (p[n] == ' ' || p[n] == '\t')) return p + n;
  }
  return NULL;
}

static CUresult sd_ptx_check(const char *ptx, const sd_device *d) {
  const char *v = sd_ptx_directive(ptx, ".version");
  if (v) {
    int major = 0, minor = 0;
    while (*v == ' ' || *v == '\t') v++;
    while (*v >= '0' && *v <= '9') major = major * 10 + (*v++ - '0');
    if (*v == '.') v++;
    while (*v >= '0' && *v <= '9') minor = minor * 10 + (*v++ - '0');
    if (major * 10 + minor > SD_PTX_ISA_MAX) return CUDA_ERROR_UNSUPPORTED_PTX_VERSION;
  }
  const char *t = sd_ptx_directive(ptx, ".target");
  if (t) {
    while (*t == ' ' || *t == '\t') t++;
    if (!strncmp(t, "sm_", 3)) {
      int sm = 0;
      t += 3;
      while (*t >= '0' && *t <= '9') sm = sm * 10 + (*t++ - '0');
      int dev = d->major * 10 + d->minor;
      /* sm_XYa code runs on exactly XY, sm_XYf on the XY family (same
       * major, minor >= Y), plain sm_XY on XY and newer. */
      int ok = *t == 'a' ? sm == dev : *t == 'f' ? (sm / 10 == d->major && sm <= dev) : sm <= dev;
      if (!ok) return CUDA_ERROR_INVALID_PTX;
    }
  }
  return CUDA_SUCCESS;
}

/* The module's `.entry` declarations, each from `.entry` to its
 * parameter list's `)`, one a line: all that cuModuleGetFunction and the
 * launches read of the PTX. Kept instead of the whole text, which a
 * context reset would copy and scan again per kernel (megabytes a module). */
static char *sd_ptx_entries(const char *ptx) {
  size_t cap = 4096, len = 0;
  char *out = malloc(cap);
  if (!out) return NULL;
  out[0] = 0;
  for (const char *p = strstr(ptx, ".entry"); p; p = strstr(p + 6, ".entry")) {
    const char *nl = strchr(p, '\n');
    const char *line_end = nl ? nl : p + strlen(p);
    const char *open = memchr(p, '(', (size_t)(line_end - p));
    const char *close = open ? strchr(open, ')') : NULL;
    /* The parameter list opens on the entry's line; an entry without one
     * ends at its line. */
    const char *end = close ? close + 1 : line_end;
    size_t n = (size_t)(end - p);
    if (len + n + 2 > cap) {
      while (len + n + 2 > cap) cap *= 2;
      char *grown = realloc(out, cap);
      if (!grown) {
        free(out);
        return NULL;
      }
      out = grown;
    }
    memcpy(out + len, p, n);
    len += n;
    out[len++] = '\n';
    out[len] = 0;
  }
  return out;
}

/* Does the PTX define `.entry name`? */
static int sd_ptx_has_entry(const char *ptx, const char *name) {
  size_t n = strlen(name);
  for (const char *p = strstr(ptx, ".entry"); p; p = strstr(p + 1, ".entry")) {
    const char *q = p + 6;
    if (*q != ' ' && *q != '\t') continue;
    while (*q == ' ' || *q == '\t') q++;
    if (!strncmp(q, name, n)) {
      char c = q[n];
      if (c == '(' || c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == 0) return 1;
    }
  }
  return 0;
}

/* The sizes of an entry's parameters, from its PTX declaration, as the
 * driver knows them when it copies kernelParams at a launch (for a graph,
 * the values are copied when the kernel node is made):
 *     .entry name(.param .u64 p0, .param .align 8 .b8 p1[72], ...)
 * Returns the count, or -1 when the declaration cannot be read. */
static int sd_ptx_param_sizes(const char *ptx, const char *name, unsigned *size) {
  size_t len = strlen(name);
  const char *p = ptx;
  while ((p = strstr(p, ".entry")) != NULL) {
    p += 6;
    while (*p == ' ' || *p == '\t') p++;
    if (strncmp(p, name, len) == 0 && (p[len] == '(' || p[len] == ' ' || p[len] == '\n' || p[len] == '\t')) break;
  }
  if (!p) return -1;
  p = strchr(p, '(');
  const char *end = p ? strchr(p, ')') : NULL;
  if (!p || !end) return -1;
  int n = 0;
  for (const char *q = p; (q = strstr(q, ".param")) != NULL && q < end; n++) {
    if (n == SD_MAX_PARAMS) return -1;
    q += 6;
    const char *decl_end = q;
    while (decl_end < end && *decl_end != ',') decl_end++;
    unsigned bits = 0;
    const char *t = q;
    while (t < decl_end && !bits) {
      t = strchr(t, '.');
      if (!t || t >= decl_end) break;
      t++;
      if ((*t == 'u' || *t == 's' || *t == 'b' || *t == 'f') && t[1] >= '0' && t[1] <= '9') bits = (unsigned)atoi(t + 1);
    }
    if (!bits || bits % 8) return -1;
    unsigned count = 1;
    const char *bracket = memchr(q, '[', (size_t)(decl_end - q));
    if (bracket) count = (unsigned)atoi(bracket + 1);
    if (!count) return -1;
    size[n] = bits / 8 * count;
    q = decl_end;
  }
  return n;
}

CUresult cuModuleLoadData(CUmodule *module, const void *image) {
  SD_COUNT(cuModuleLoadData);
  if (!module || !image) return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&sd_lock);
  CUcontext ctx;
  CUresult r = sd_ctx_current_locked(&ctx);
  sd_device dev = r ? sd.dev[0] : sd.dev[ctx->device];
  pthread_mutex_unlock(&sd_lock);
  if (r) return r;

  char *ptx = NULL;
  const char *text = image;
  if (!sd_image_is_binary(image) && strstr(text, ".entry")) {
    r = sd_ptx_check(text, &dev);
    if (r) return r;
    ptx = sd_ptx_entries(text);
    if (!ptx) return CUDA_ERROR_OUT_OF_MEMORY;
  }
  void *lib = NULL;
  if (sd.kernels[0]) {
    /* Kept loaded once loaded (RTLD_NODELETE): the host kernels keep
     * per-thread state (fiber stacks, TSan's fibers) that a fresh copy
     * after every context reset would leak, one block's worth per reset;
     * and they hold no per-module globals (no __device__ variables) that a
     * new context would need fresh. */
    lib = dlopen(sd.kernels, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
    if (!lib) standin_msg("STANDIN_KERNELS=%s: %s", sd.kernels, dlerror());
  }
  struct CUmod_st *m = calloc(1, sizeof *m);
  pthread_mutex_lock(&sd_lock);
  if (!m || sd_reg_add(m, SD_MODULE) != 0) {
    r = CUDA_ERROR_OUT_OF_MEMORY;
  } else {
    m->ctx = ctx;
    m->ptx = ptx;
    m->lib = lib;
    *module = m;
  }
  pthread_mutex_unlock(&sd_lock);
  if (r) {
    free(m);
    free(ptx);
    if (lib) dlclose(lib);
  }
  return r;
}

static void sd_module_free_locked(CUmodule m) {
  for (struct CUfunc_st *f = m->funcs, *next; f; f = next) {
    next = f->next;
    sd_reg_del(f);
    free(f);
  }
  sd_reg_del(m);
  /* dlclose runs the library's destructors: harmless under the lock, since
   * host kernel libraries do not call back into the driver when unloading. */
  if (m->lib) dlclose(m->lib);
  free(m->ptx);
  free(m);
}

static void sd_module_free_if_ctx(void *obj, void *arg) {
  CUmodule m = obj;
  if (m->ctx == arg) sd_module_free_locked(m);
}

void sd_modules_drop_ctx_locked(CUcontext ctx) {
  sd_reg_each(SD_MODULE, sd_module_free_if_ctx, ctx);
}

CUresult cuModuleUnload(CUmodule hmod) {
  SD_COUNT(cuModuleUnload);
  CUresult r = sd_check_init();
  if (r) return r;
  pthread_mutex_lock(&sd_lock);
  if (!sd_reg_has(hmod, SD_MODULE)) r = CUDA_ERROR_INVALID_HANDLE;
  else sd_module_free_locked(hmod);
  pthread_mutex_unlock(&sd_lock);
  return r;
}

CUresult cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name) {
  SD_COUNT(cuModuleGetFunction);
  CUresult r = sd_check_init();
  if (r) return r;
  if (!hfunc || !name) return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&sd_lock);
  if (!sd_reg_has(hmod, SD_MODULE)) {
    r = CUDA_ERROR_INVALID_HANDLE;
    goto out;
  }
  for (struct CUfunc_st *f = hmod->funcs; f; f = f->next)
    if (!strcmp(f->name, name)) {
      *hfunc = f;
      goto out;
    }
  if ((hmod->ptx && !sd_ptx_has_entry(hmod->ptx, name)) || !hmod->lib) {
    r = CUDA_ERROR_NOT_FOUND;
    goto out;
  }
  char sym[256];
  if ((size_t)snprintf(sym, sizeof sym, "%s%s", STANDIN_KERNEL_PREFIX, name) >= sizeof sym) {
    r = CUDA_ERROR_NOT_FOUND;
    goto out;
  }
  void *p = dlsym(hmod->lib, sym);
  if (!p) {
    r = CUDA_ERROR_NOT_FOUND;
    goto out;
  }
  struct CUfunc_st *f = calloc(1, sizeof *f + strlen(name) + 1);
  if (!f || sd_reg_add(f, SD_FUNC) != 0) {
    free(f);
    r = CUDA_ERROR_OUT_OF_MEMORY;
    goto out;
  }
  f->mod = hmod;
  memcpy(&f->fn, &p, sizeof p);
  f->max_dynamic_shared = 49152; /* a GPU's default before opting in */
  f->nparams = hmod->ptx ? sd_ptx_param_sizes(hmod->ptx, name, f->param_size) : -1;
  f->carveout = -1;
  strcpy(f->name, name);
  f->next = hmod->funcs;
  hmod->funcs = f;
  *hfunc = f;
out:
  pthread_mutex_unlock(&sd_lock);
  return r;
}

CUresult cuFuncSetAttribute(CUfunction hfunc, CUfunction_attribute attrib, int value) {
  SD_COUNT(cuFuncSetAttribute);
  CUresult r = sd_check_init();
  if (r) return r;
  pthread_mutex_lock(&sd_lock);
  if (!sd_reg_has(hfunc, SD_FUNC)) {
    r = CUDA_ERROR_INVALID_HANDLE;
  } else {
    const sd_device *d = &sd.dev[hfunc->mod->ctx->device];
    switch (attrib) {
    case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES:
      if (value < 0 || value > d->shared_optin) r = CUDA_ERROR_INVALID_VALUE;
      else hfunc->max_dynamic_shared = value;
      break;
    case CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT:
      if (value < -1 || value > 100) r = CUDA_ERROR_INVALID_VALUE;
      else hfunc->carveout = value;
      break;
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH:
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT:
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH:
    case CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED:
    case CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE:
      r = CUDA_ERROR_NOT_SUPPORTED; /* clusters are not modelled */
      break;
    default:
      r = CUDA_ERROR_INVALID_VALUE; /* read-only or unknown */
      break;
    }
  }
  pthread_mutex_unlock(&sd_lock);
  return r;
}

CUresult sd_kernel_call(standin_kernel_fn fn, standin_launch *l) {
  void *shared = NULL;
  if (l->shared_bytes) {
    shared = malloc(l->shared_bytes);
    if (!shared) return CUDA_ERROR_OUT_OF_MEMORY;
    memset(shared, 0xA5, l->shared_bytes);
  }
  l->shared = shared;
  int kr = fn(l);
  free(shared);
  l->shared = NULL;
  return (CUresult)kr;
}

/* A kernel node: the arguments copied by value, with the sizes the PTX
 * declared (a binary image's are unknown: CUDA_ERROR_NOT_SUPPORTED). */
static CUresult sd_kernel_record_locked(struct CUgraph_st *g, const struct CUfunc_st *f, const standin_launch *l,
                                        void **params) {
  if (f->nparams < 0) return CUDA_ERROR_NOT_SUPPORTED;
  size_t head = (size_t)f->nparams * sizeof(size_t), total = head;
  for (int i = 0; i < f->nparams; i++) total += f->param_size[i];
  sd_node n = {.kind = SD_NODE_KERNEL, .fn = f->fn, .launch = *l, .nparams = (unsigned)f->nparams};
  n.launch.params = NULL;
  n.blob_size = total;
  n.blob = malloc(total ? total : 1);
  if (!n.blob) return CUDA_ERROR_OUT_OF_MEMORY;
  size_t off = head;
  for (int i = 0; i < f->nparams; i++) {
    if (!params || !params[i]) {
      free(n.blob);
      return CUDA_ERROR_INVALID_VALUE;
    }
    memcpy(n.blob + i * sizeof(size_t), &off, sizeof off);
    memcpy(n.blob + off, params[i], f->param_size[i]);
    off += f->param_size[i];
  }
  int bad = sd_graph_append_locked(g, &n);
  free(n.blob); /* appended as a copy */
  return bad ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_SUCCESS;
}

CUresult cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                        unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
                        unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
                        void **kernelParams, void **extra) {
  SD_COUNT(cuLaunchKernel);
  CUresult r = sd_check_init();
  if (r) return r;
  if (extra) return kernelParams ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_NOT_SUPPORTED;
  standin_launch l;
  memset(&l, 0, sizeof l);
  standin_kernel_fn fn = NULL;
  int recorded = 0;
  pthread_mutex_lock(&sd_lock);
  CUcontext ctx;
  struct CUstream_st *st = NULL;
  if (!sd_reg_has(f, SD_FUNC)) r = CUDA_ERROR_INVALID_HANDLE;
  if (!r) r = sd_stream_enqueue_locked(hStream, &ctx, &st);
  if (!r && f->mod->ctx != ctx) r = CUDA_ERROR_INVALID_HANDLE;
  if (!r) {
    const sd_device *d = &sd.dev[ctx->device];
    unsigned long long threads = (unsigned long long)blockDimX * blockDimY * blockDimZ;
    if (!gridDimX || !gridDimY || !gridDimZ || !blockDimX || !blockDimY || !blockDimZ ||
        gridDimX > 2147483647u || gridDimY > 65535 || gridDimZ > 65535 || blockDimX > 1024 ||
        blockDimY > 1024 || blockDimZ > 64 || threads > 1024 ||
        sharedMemBytes > (unsigned)f->max_dynamic_shared)
      r = CUDA_ERROR_INVALID_VALUE;
    l.abi = STANDIN_KERNEL_ABI;
    l.grid = (standin_dim3){gridDimX, gridDimY, gridDimZ};
    l.block = (standin_dim3){blockDimX, blockDimY, blockDimZ};
    l.shared_bytes = sharedMemBytes;
    l.params = kernelParams;
    l.stream = hStream;
    l.device = ctx->device;
    l.cc_major = d->major;
    l.cc_minor = d->minor;
    fn = f->fn;
  }
  struct CUgraph_st *g = r ? NULL : sd_capture_graph_locked(st);
  if (g) {
    r = sd_kernel_record_locked(g, f, &l, kernelParams);
    recorded = 1;
  }
  pthread_mutex_unlock(&sd_lock);
  if (r || recorded) return r;
  standin_trace("launch %s", f->name);
  standin_append_line("STANDIN_GRIDS", "%s %u %u %u", f->name, gridDimX, gridDimY, gridDimZ);
  r = sd_kernel_call(fn, &l);
  if (!r && sd.kernel_ns) {
    pthread_mutex_lock(&sd_lock);
    sd.clock_ns += sd.kernel_ns;
    pthread_mutex_unlock(&sd_lock);
  }
  return r;
}
