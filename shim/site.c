/* site.c: a stable id for the place a GEMM is called from. The return
 * address is taken relative to the object that holds it (so ASLR does not
 * change it between runs) together with the object's name, then mixed with
 * the GEMM's shape and types: every PyTorch GEMM comes through the same few
 * return addresses, and the shape tells its layers apart. The same lookup
 * says whether the caller is an NVIDIA library (decide.c). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "shim.h"

/* FNV-1a, 64-bit: simple, and good enough to tell sites apart. */
static uint64_t fnv(uint64_t h, const void *data, size_t n) {
  const unsigned char *p = data;
  for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ULL;
  return h;
}
#define FNV_SEED 0xcbf29ce484222325ULL

/* dladdr takes the loader's lock and walks the loaded objects: it runs
 * once per caller and thread, and its answer (the site hash and who the
 * caller is) is kept in a small per-thread table. The table is keyed by the
 * return address alone: an object unloaded and another loaded at the same
 * address would keep the first one's answer for that address (frameworks
 * keep their CUDA libraries loaded for the process).
 *
 * 8 sets of 4, most recent first, the set chosen by a multiplicative hash
 * of the address: a program's few hot callers may lie any distance apart
 * (a direct-mapped table indexed by address bits would put two callers 512
 * bytes apart in one slot, and ask the loader on every call). Five hot
 * callers in one set still miss; with a uniform hash, 6 callers do so with
 * a chance of about 0.15%, 8 about 1% (estimates). 768 bytes of static
 * TLS. */
#define CALLER_SETS 8
#define CALLER_WAYS 4
typedef struct caller_entry {
  const void *caller;
  uint64_t where;   /* hash of object name and offset */
  uint8_t library;  /* gs_caller */
  uint8_t object;   /* index in library_objects, with library != APP */
} caller_entry;
static __thread caller_entry caller_cache[CALLER_SETS][CALLER_WAYS] __attribute__((tls_model("initial-exec")));

/* The file names of the library objects callers were found in, for the
 * reason; appended under the lock, read without it once published. */
#define LIBRARY_OBJECTS 64
#define OBJECT_NAME_MAX 64
static char library_objects[LIBRARY_OBJECTS][OBJECT_NAME_MAX];
static _Atomic unsigned library_object_count;
static pthread_mutex_t library_objects_lock = PTHREAD_MUTEX_INITIALIZER;

/* A fork from another thread can land while that thread holds the lock
 * (it is held across snprintf): the child (the forking thread alone) gets
 * a fresh lock. An entry is published by its count last, so a half-written
 * one is invisible. Registered at load, never inside a fork handler. */
static void site_after_fork_child(void) { pthread_mutex_init(&library_objects_lock, NULL); }

__attribute__((constructor)) static void site_register_fork(void) {
  pthread_atfork(NULL, NULL, site_after_fork_child);
}

int site_objects_lock_for_tests(int take) {
  if (take) return pthread_mutex_trylock(&library_objects_lock);
  return pthread_mutex_unlock(&library_objects_lock);
}

static unsigned library_object_index(const char *base) {
  unsigned n = atomic_load_explicit(&library_object_count, memory_order_acquire);
  for (unsigned i = 0; i < n; i++)
    if (strncmp(library_objects[i], base, OBJECT_NAME_MAX - 1) == 0) return i;
  pthread_mutex_lock(&library_objects_lock);
  n = atomic_load_explicit(&library_object_count, memory_order_relaxed);
  unsigned i = 0;
  while (i < n && strncmp(library_objects[i], base, OBJECT_NAME_MAX - 1) != 0) i++;
  if (i == n && n < LIBRARY_OBJECTS) {
    snprintf(library_objects[n], OBJECT_NAME_MAX, "%s", base);
    atomic_store_explicit(&library_object_count, n + 1, memory_order_release);
  } else if (i == n) {
    i = LIBRARY_OBJECTS - 1; /* full: the reason names the last one kept */
  }
  pthread_mutex_unlock(&library_objects_lock);
  return i;
}

/* The loader's answer for caller, into e. Kept out of line: the hit path
 * below is a few instructions on every call. */
static __attribute__((noinline)) const caller_entry *caller_fill(caller_entry *e, const void *caller) {
  uint64_t h = FNV_SEED;
  gs_caller library = GS_CALLER_APP;
  unsigned object = 0;
  Dl_info info;
  if (caller && dladdr(caller, &info) && info.dli_fname) {
    const char *base = strrchr(info.dli_fname, '/');
    base = base ? base + 1 : info.dli_fname;
    uint64_t off = (uint64_t)((uintptr_t)caller - (uintptr_t)info.dli_fbase);
    h = fnv(h, base, strlen(base));
    h = fnv(h, &off, sizeof off);
    library = gs_caller_of_object(base);
    if (library != GS_CALLER_APP) object = library_object_index(base);
  } else {
    uintptr_t raw = (uintptr_t)caller;
    h = fnv(h, &raw, sizeof raw);
  }
  e->caller = caller;
  e->where = h;
  e->library = (uint8_t)library;
  e->object = (uint8_t)object;
  return e;
}

/* Not the hit in front: found further back (moved to the front), or asked
 * of the loader into the front, the set's oldest dropped. */
static __attribute__((noinline)) const caller_entry *caller_miss(caller_entry *set, const void *caller) {
  int w = 1;
  while (w < CALLER_WAYS && !(set[w].caller == caller && caller != NULL)) w++;
  caller_entry found = w < CALLER_WAYS ? set[w] : (caller_entry){0};
  memmove(set + 1, set, (size_t)(w < CALLER_WAYS ? w : CALLER_WAYS - 1) * sizeof *set);
  if (w < CALLER_WAYS) {
    set[0] = found;
    return set;
  }
  return caller_fill(set, caller);
}

static inline const caller_entry *caller_lookup(const void *caller) {
  /* Fibonacci hashing: the top 3 bits of the address times 2^64/phi. */
  caller_entry *set = caller_cache[((uint64_t)(uintptr_t)caller * 0x9e3779b97f4a7c15ULL) >> 61];
  if (__builtin_expect(set[0].caller == caller && caller != NULL, 1)) return set;
  return caller_miss(set, caller);
}

gs_caller site_caller(const void *caller, const char **object) {
  const caller_entry *e = caller_lookup(caller);
  if (e->library == GS_CALLER_APP) return GS_CALLER_APP;
  *object = library_objects[e->object];
  return (gs_caller)e->library;
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
  uint64_t h = caller_lookup(caller)->where;
  h = mix(h, (uint64_t)g->m);
  h = mix(h, (uint64_t)g->n);
  h = mix(h, (uint64_t)g->k);
  h = mix(h, (uint64_t)g->batch);
  h = mix(h, (uint64_t)(uint32_t)g->api << 32 | (uint32_t)g->transa << 16 | (uint32_t)g->transb);
  h = mix(h, (uint64_t)(uint32_t)g->a_type << 32 | (uint32_t)g->b_type);
  h = mix(h, (uint64_t)(uint32_t)g->c_type << 32 | (uint32_t)g->compute_type);
  return mix(h, (uint64_t)(uint32_t)g->epilogue);
}
