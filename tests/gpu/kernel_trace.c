/* kernel_trace.c: see kernel_trace.h. */
#define _GNU_SOURCE
#include "kernel_trace.h"

#include <cupti.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CUPTI_FNS(X)                                                           \
  X(cuptiActivityRegisterCallbacks) X(cuptiActivityEnable)                     \
  X(cuptiActivityDisable) X(cuptiActivityFlushAll)                             \
  X(cuptiActivityGetNextRecord) X(cuptiGetResultString)

static struct {
#define CUPTI_PTR(name) __typeof__(name) *name;
  CUPTI_FNS(CUPTI_PTR)
#undef CUPTI_PTR
} cupti;

/* Records arrive on CUPTI's own thread as well as in FlushAll's caller. */
static pthread_mutex_t records_lock = PTHREAD_MUTEX_INITIALIZER;
static trace_kernel *records;
static size_t n_records, cap_records;

#define TRACE_BUFFER_BYTES (8u << 20)

static void CUPTIAPI buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records) {
  /* CUPTI wants 8-byte alignment. */
  *buffer = aligned_alloc(8, TRACE_BUFFER_BYTES);
  *size = *buffer ? TRACE_BUFFER_BYTES : 0;
  *max_records = 0;
}

static void keep(const CUpti_ActivityKernel10 *k) {
  if (n_records == cap_records) {
    size_t cap = cap_records ? 2 * cap_records : 1024;
    trace_kernel *grown = realloc(records, cap * sizeof *grown);
    if (!grown) return; /* a lost record only shortens the table */
    records = grown, cap_records = cap;
  }
  trace_kernel *t = &records[n_records++];
  snprintf(t->name, sizeof t->name, "%s", k->name ? k->name : "?");
  t->start_ns = k->start, t->end_ns = k->end;
  t->grid[0] = k->gridX, t->grid[1] = k->gridY, t->grid[2] = k->gridZ;
  t->block[0] = k->blockX, t->block[1] = k->blockY, t->block[2] = k->blockZ;
}

static void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t *buffer, size_t size,
                                      size_t valid) {
  CUpti_Activity *rec = NULL;
  pthread_mutex_lock(&records_lock);
  while (valid && cupti.cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
    /* The kernel record's leading fields (times, grid, name) keep their
     * place across CUPTI versions; later versions only append. */
    if (rec->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL || rec->kind == CUPTI_ACTIVITY_KIND_KERNEL)
      keep((const CUpti_ActivityKernel10 *)rec);
  }
  pthread_mutex_unlock(&records_lock);
  free(buffer);
}

static const char *init_why;
static int init_done;
static char begin_why[160];
static int begin_failed;

const char *trace_init(void) {
  if (init_done) return init_why;
  init_done = 1;
  void *h = dlopen("libcupti.so.13", RTLD_NOW | RTLD_LOCAL);
  if (!h) h = dlopen("libcupti.so", RTLD_NOW | RTLD_LOCAL);
  if (!h) return init_why = "libcupti.so.13 not found (add the toolkit's CUPTI folder to LD_LIBRARY_PATH)";
#define CUPTI_LOAD(name)                                                       \
  if (!(cupti.name = (__typeof__(cupti.name))dlsym(h, #name))) return init_why = "libcupti lacks " #name;
  CUPTI_FNS(CUPTI_LOAD)
#undef CUPTI_LOAD
  if (cupti.cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed) != CUPTI_SUCCESS)
    return init_why = "cuptiActivityRegisterCallbacks failed (no CUPTI-capable driver)";
  return init_why = NULL;
}

int trace_begin(void) {
  if (trace_init()) return -1;
  /* A driver that cannot trace (the stand-in, a locked-down GPU) fails
   * here; later passes do not ask again. */
  if (begin_failed) return -1;
  pthread_mutex_lock(&records_lock);
  n_records = 0;
  pthread_mutex_unlock(&records_lock);
  CUptiResult r = cupti.cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  if (r != CUPTI_SUCCESS) {
    const char *s = NULL;
    cupti.cuptiGetResultString(r, &s);
    snprintf(begin_why, sizeof begin_why, "cuptiActivityEnable failed: %s", s ? s : "?");
    begin_failed = 1;
    return -1;
  }
  return 0;
}

const char *trace_error(void) {
  const char *why = trace_init();
  return why ? why : begin_failed ? begin_why : NULL;
}

static int by_start(const void *a, const void *b) {
  const trace_kernel *x = a, *y = b;
  return (x->start_ns > y->start_ns) - (x->start_ns < y->start_ns);
}

int trace_end(trace_kernel **out, size_t *n) {
  *out = NULL, *n = 0;
  if (trace_init()) return -1;
  cupti.cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  if (cupti.cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED) != CUPTI_SUCCESS) return -1;
  pthread_mutex_lock(&records_lock);
  if (n_records) {
    *out = malloc(n_records * sizeof **out);
    if (*out) {
      memcpy(*out, records, n_records * sizeof **out);
      *n = n_records;
    }
  }
  n_records = 0;
  pthread_mutex_unlock(&records_lock);
  if (*n) qsort(*out, *n, sizeof **out, by_start);
  return 0;
}
