/* resolve.c: finding the real cuBLAS and driver functions at run time.
 *
 * The shim links neither cuBLAS nor the driver, and cuBLAS may be loaded
 * after the shim, so every real function is looked up at its first use:
 *   1. dlsym(RTLD_NEXT, name): cuBLAS linked by the program or a library in
 *      the global scope;
 *   2. the loaded objects named libcublas*.so* (dl_iterate_phdr), opened with
 *      RTLD_NOLOAD: cuBLAS linked by a library that was itself dlopen'ed
 *      RTLD_LOCAL (the PyTorch wheel), where RTLD_NEXT answers NULL;
 *   3. what the dlsym wrapper saw a framework look up on a cuBLAS handle
 *      (the XLA pattern), recorded by resolve_adopt().
 * A candidate inside the shim itself is refused (a copy of the shim under a
 * cuBLAS name would otherwise call itself forever). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "resolve.h"
#include "shim.h"
#include "base/sys.h"

/* Exported: a candidate "real" function whose object has this symbol is a
 * copy of the shim (installed under a cuBLAS name, or preloaded twice), and
 * calling it would only come back here. */
__attribute__((visibility("default"))) const char gemmshim_version[] = "gemmshim 0.1";

int resolve_is_self(const void *p) {
  Dl_info self, other;
  if (!dladdr(gemmshim_version, &self) || !dladdr(p, &other)) return 0;
  if (self.dli_fbase == other.dli_fbase) return 1;
  if (!other.dli_fname || !gs_resolve_real_dlsym()) return 0;
  void *h = dlopen(other.dli_fname, RTLD_LAZY | RTLD_NOLOAD);
  if (!h) return 0;
  int copy = gs_sys.dlsym(h, "gemmshim_version") != NULL;
  dlclose(h);
  return copy;
}

/* Which library a hooked or companion entry comes from. */
static int entry_is_lt(gs_sys_id id) {
  return strncmp(gs_sys_names[id], "cublasLt", 8) == 0;
}

int resolve_object_is_cublas(const void *p, int *is_lt) {
  Dl_info info;
  if (!dladdr(p, &info) || !info.dli_fname) return 0;
  const char *base = strrchr(info.dli_fname, '/');
  base = base ? base + 1 : info.dli_fname;
  if (strncmp(base, "libcublasLt.so", 14) == 0) {
    if (is_lt) *is_lt = 1;
    return 1;
  }
  if (strncmp(base, "libcublas.so", 12) == 0) {
    if (is_lt) *is_lt = 0;
    return 1;
  }
  return 0;
}

int resolve_cublas_major(const void *p) {
  Dl_info info;
  if (!p || !dladdr(p, &info) || !info.dli_fname) return 0;
  const char *base = strrchr(info.dli_fname, '/');
  base = base ? base + 1 : info.dli_fname;
  const char *v = strncmp(base, "libcublasLt.so.", 15) == 0 ? base + 15
                  : strncmp(base, "libcublas.so.", 13) == 0 ? base + 13 : NULL;
  int major = 0;
  for (; v && *v >= '0' && *v <= '9' && major < 1000; v++) major = major * 10 + (*v - '0');
  return major;
}

/* ---- loaded-object search (pattern 2) ---------------------------------- */
#define MAX_CANDIDATES 8
static _Atomic int warned_copy;
typedef struct candidates {
  int want_lt;
  int n;
  char path[MAX_CANDIDATES][512];
} candidates;

static int collect_cublas(struct dl_phdr_info *info, size_t size, void *arg) {
  candidates *c = arg;
  const char *name = info->dlpi_name;
  if (!name || !*name || c->n >= MAX_CANDIDATES) return 0;
  const char *base = strrchr(name, '/');
  base = base ? base + 1 : name;
  int lt = strncmp(base, "libcublasLt.so", 14) == 0;
  int blas = !lt && strncmp(base, "libcublas.so", 12) == 0;
  if ((c->want_lt && lt) || (!c->want_lt && blas)) {
    snprintf(c->path[c->n], sizeof c->path[0], "%s", name);
    c->n++;
  }
  return 0;
}

/* dlopen is not called inside the dl_iterate_phdr callback: that runs with
 * the loader's lock held. */
static void *search_loaded(const char *name, int want_lt, char *from, size_t fromlen) {
  candidates c = {.want_lt = want_lt};
  dl_iterate_phdr(collect_cublas, &c);
  for (int i = 0; i < c.n; i++) {
    void *h = dlopen(c.path[i], RTLD_LAZY | RTLD_NOLOAD);
    if (!h) continue;
    void *p = gs_sys.dlsym(h, name);
    dlclose(h); /* NOLOAD took a reference; the object stays loaded */
    if (p && resolve_is_self(p)) {
      if (!atomic_exchange(&warned_copy, 1))
        GS_WARN("%s in %s is the shim's own wrapper (a copy of libgemmshim.so under a cuBLAS name?); refusing it",
              name, c.path[i]);
      continue;
    }
    if (p) {
      snprintf(from, fromlen, "%s", c.path[i]);
      return p;
    }
  }
  return NULL;
}

/* ---- hooked functions ---------------------------------------------------- */
static pthread_mutex_t resolve_lock = PTHREAD_MUTEX_INITIALIZER;

/* Held across dlsym: a child of a fork made while another thread held it
 * gets a fresh one (every slot is published last, with release). */
static void resolve_after_fork_child(void) { pthread_mutex_init(&resolve_lock, NULL); }

__attribute__((constructor)) static void resolve_register_fork(void) {
  pthread_atfork(NULL, NULL, resolve_after_fork_child);
}
static _Atomic int warned_self[GS_SYS_COUNT];
static _Atomic int warned_missing[GS_SYS_COUNT];
static _Atomic(void *) companions_from[2]; /* object base the companions came from */

static void **slot(gs_sys_id id) { return (void **)&((void **)&gs_sys)[id]; }

static void load_companions(const void *real, int lt);

void resolve_adopt(gs_sys_id id, void *real) {
  void **s = slot(id);
  if (__atomic_load_n(s, __ATOMIC_ACQUIRE) == real) return;
  pthread_mutex_lock(&resolve_lock);
  /* Companions first: a thread that sees the real function (acquire) may
   * call them at once. */
  load_companions(real, entry_is_lt(id));
  __atomic_store_n(s, real, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&resolve_lock);
  GS_TRACE("%s resolved through dlsym on a cuBLAS handle", gs_sys_names[id]);
}

void *resolve_hooked(gs_sys_id id) {
  void **s = slot(id);
  void *p = __atomic_load_n(s, __ATOMIC_ACQUIRE);
  if (p) return p;
  if (!gs_resolve_real_dlsym()) return NULL;

  pthread_mutex_lock(&resolve_lock);
  p = *s;
  char from[512] = "RTLD_NEXT";
  if (!p) {
    const char *name = gs_sys_names[id];
    void *next = gs_sys.dlsym(RTLD_NEXT, name);
    if (next && resolve_is_self(next)) {
      if (!atomic_exchange(&warned_self[id], 1))
        GS_WARN("%s: RTLD_NEXT found the shim's own wrapper (is libgemmshim.so loaded twice or installed under a cuBLAS name?); refusing it and searching the loaded cuBLAS objects", name);
      next = NULL;
    }
    p = next ? next : search_loaded(name, entry_is_lt(id), from, sizeof from);
    if (p) {
      load_companions(p, entry_is_lt(id));
      __atomic_store_n(s, p, __ATOMIC_RELEASE);
      GS_INFO("%s resolved from %s", name, from);
    } else if (!atomic_exchange(&warned_missing[id], 1)) {
      GS_WARN("%s: the real function was not found in any loaded cuBLAS library; the call returns CUBLAS_STATUS_NOT_INITIALIZED", name);
    }
  }
  pthread_mutex_unlock(&resolve_lock);
  return p;
}

/* The functions the shim calls besides the hooked ones come from the same
 * object as the real hooked function, so a process with two cuBLAS versions
 * never mixes them. Called with resolve_lock held. */
static void load_companions(const void *real, int lt) {
  Dl_info info;
  if (!dladdr(real, &info) || !info.dli_fname) return;
  if (atomic_load(&companions_from[lt]) == info.dli_fbase) return;
  void *h = dlopen(info.dli_fname, RTLD_LAZY | RTLD_NOLOAD);
  if (!h) return;
#define LOAD(name, ret, fail, params, args) \
  __atomic_store_n((void **)&gs_sys.name, gs_sys.dlsym(h, #name), __ATOMIC_RELEASE);
  if (lt) {
    GS_SYS_CUBLASLT(LOAD)
  } else {
    GS_SYS_CUBLAS(LOAD)
  }
#undef LOAD
  dlclose(h);
  atomic_store(&companions_from[lt], info.dli_fbase);
}

/* ---- the driver ------------------------------------------------------------ */
static pthread_once_t driver_once = PTHREAD_ONCE_INIT;
static const char *driver_error = "libcuda.so.1 not looked up yet";

static void load_driver(void) {
  if (!gs_resolve_real_dlsym()) {
    driver_error = "libc's dlsym not found";
    return;
  }
  /* A process that calls cuBLAS has the driver loaded already; this only
   * takes another reference to it. */
  void *h = GS_CALL(dlopen, "libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    driver_error = "libcuda.so.1 could not be loaded";
    return;
  }
#define LOAD(name, ret, fail, params, args) gs_sys.name = (ret(*) params)gs_sys.dlsym(h, #name);
  GS_SYS_DRIVER(LOAD)
#undef LOAD
  driver_error = gs_sys.cuStreamGetCtx ? NULL : "libcuda.so.1 has no cuStreamGetCtx";
}

const char *resolve_driver(void) {
  pthread_once(&driver_once, load_driver);
  return driver_error;
}

void resolve_init(void) { gs_resolve_real_dlsym(); }
