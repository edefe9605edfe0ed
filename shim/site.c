/* site.c: a stable id for the place a GEMM is called from. The return
 * address is taken relative to the object that holds it (so ASLR does not
 * change it between runs) together with the object's name, then mixed with
 * the GEMM's shape and types: every PyTorch GEMM comes through the same few
 * return addresses, and the shape tells its layers apart. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <string.h>

#include "shim.h"

/* FNV-1a, 64-bit: simple, and good enough to tell sites apart. */
static uint64_t fnv(uint64_t h, const void *data, size_t n) {
  const unsigned char *p = data;
  for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ULL;
  return h;
}
#define FNV_SEED 0xcbf29ce484222325ULL

/* dladdr takes the loader's lock; remember the last few callers per thread. */
#define CALLER_CACHE 16
typedef struct caller_entry {
  const void *caller;
  uint64_t where; /* hash of object name and offset */
} caller_entry;
static __thread caller_entry caller_cache[CALLER_CACHE] __attribute__((tls_model("initial-exec")));

static uint64_t caller_where(const void *caller) {
  unsigned slot = (unsigned)(((uintptr_t)caller >> 4) % CALLER_CACHE);
  caller_entry *e = &caller_cache[slot];
  if (e->caller == caller && caller) return e->where;
  uint64_t h = FNV_SEED;
  Dl_info info;
  if (caller && dladdr(caller, &info) && info.dli_fname) {
    const char *base = strrchr(info.dli_fname, '/');
    base = base ? base + 1 : info.dli_fname;
    uint64_t off = (uint64_t)((uintptr_t)caller - (uintptr_t)info.dli_fbase);
    h = fnv(h, base, strlen(base));
    h = fnv(h, &off, sizeof off);
  } else {
    uintptr_t raw = (uintptr_t)caller;
    h = fnv(h, &raw, sizeof raw);
  }
  e->caller = caller;
  e->where = h;
  return h;
}

uint64_t site_id(const void *caller, const gs_gemm *g) {
  struct {
    int64_t m, n, k, batch;
    int api, transa, transb, a_type, b_type, c_type, compute_type, epilogue;
  } shape = {g->m, g->n, g->k, g->batch, g->api, g->transa, g->transb,
             g->a_type, g->b_type, g->c_type, g->compute_type, g->epilogue};
  uint64_t h = caller_where(caller);
  return fnv(h, &shape, sizeof shape);
}
