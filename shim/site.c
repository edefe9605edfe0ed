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

/* A word at a time: this runs on every logged call. The multiply-xorshift
 * finaliser (splitmix64's) spreads every input bit over the result. */
static uint64_t mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
  h ^= h >> 31;
  h *= 0xbf58476d1ce4e5b9ULL;
  return h ^ (h >> 29);
}

uint64_t site_id(const void *caller, const gs_gemm *g) {
  uint64_t h = caller_where(caller);
  h = mix(h, (uint64_t)g->m);
  h = mix(h, (uint64_t)g->n);
  h = mix(h, (uint64_t)g->k);
  h = mix(h, (uint64_t)g->batch);
  h = mix(h, (uint64_t)(uint32_t)g->api << 32 | (uint32_t)g->transa << 16 | (uint32_t)g->transb);
  h = mix(h, (uint64_t)(uint32_t)g->a_type << 32 | (uint32_t)g->b_type);
  h = mix(h, (uint64_t)(uint32_t)g->c_type << 32 | (uint32_t)g->compute_type);
  return mix(h, (uint64_t)(uint32_t)g->epilogue);
}
