/* lt.c: the cuBLASLt objects a route builds for its own matmul (the
 * ffma route's fp32 copy of an Lt call, the fp8 route's cuBLASLt backend).
 *
 * Why plans: a call in steady state makes cublasLtMatmul and no other
 * cuBLASLt call, so the descriptors, layouts and the heuristic's algorithm
 * are made on a problem's first call and kept. The heuristic is asked as
 * PyTorch asks it (workspace size, operand alignments), so an algorithm
 * that needs more alignment than a call's pointers have is never chosen.
 *
 * Why a workspace per stream: the GemmEx family brings none, and without
 * one cuBLASLt may only pick algorithms that need none (on Hopper that
 * excludes many). Matmuls on one stream run in order, so they never use it
 * at once; it is kept for its context's life, since the shim does not hear
 * of a stream's destruction.
 *
 * Everything fallible goes through the call table (sys.h), so tests can
 * make each step fail.
 *
 * Plans, heuristic and workspaces: docs/overhead.md, "lt.c: plans and
 * workspaces". */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "memory.h"
#include "lt.h"
#include "../base/ctx_table.h"
#include "../base/sys.h"

#define ROUTE_LT_PLANS 4096
static size_t plans_limit = ROUTE_LT_PLANS; /* under plans_lock; tests lower it */
#define ROUTE_LT_BUCKETS 1024

int route_lt_available(void) {
  return gs_sys.cublasLtMatmulDescCreate && gs_sys.cublasLtMatmulDescSetAttribute &&
         gs_sys.cublasLtMatrixLayoutCreate && gs_sys.cublasLtMatrixLayoutSetAttribute &&
         gs_sys.cublasLtMatmulDescDestroy && gs_sys.cublasLtMatrixLayoutDestroy;
}

void route_lt_key_init(route_lt_key *k, const gs_call *c) {
  memset(k, 0, sizeof *k);
  k->ctx = c->ctx;
  k->ctx_id = c->ctx_id;
}

void route_lt_key_layout(route_lt_key *k, int which, int type, int64_t rows, int64_t cols, int64_t ld, int64_t batch,
                         int64_t stride) {
  k->l[which] = (route_lt_layout_key){type, rows, cols, ld, batch, stride};
}

uint32_t route_lt_alignment(const void *p) {
  uintptr_t a = (uintptr_t)p;
  uint32_t al = 256;
  while (al > 1 && a % al) al /= 2;
  return al;
}

/* ---- plans ----------------------------------------------------------------------------- */
struct route_lt_plan {
  route_lt_key key;
  uint64_t hash;
  cublasLtMatmulDesc_t desc;
  cublasLtMatrixLayout_t l[4];
  cublasLtMatmulAlgo_t algo;
  int has_algo;
  const void *bias; /* BIAS_POINTER as the descriptor holds it (has_bias) */
  /* under plans_lock: */
  int held;
  int evicted; /* out of the table; destroyed when let go */
  uint64_t used; /* plans_clock at the last get */
  struct route_lt_plan *next;
};

static route_lt_plan *buckets[ROUTE_LT_BUCKETS];
static size_t plans_live;
static uint64_t plans_clock, plans_built;
static pthread_mutex_t plans_lock = PTHREAD_MUTEX_INITIALIZER;

/* Held across the builder's cuBLASLt calls: a child of a fork made while
 * another thread held it gets a fresh one (a plan is published whole, under
 * the lock). Registered at load, never inside a fork handler. */
static void plans_after_fork_child(void) { pthread_mutex_init(&plans_lock, NULL); }

__attribute__((constructor)) static void plans_register_fork(void) {
  pthread_atfork(NULL, NULL, plans_after_fork_child);
}

/* The key's 36 words, each multiplied in (route_lt_key_init zeroes the
 * padding, so equal keys hash equal), then the high bits folded down for
 * the bucket index. A word at a time: the byte-wise FNV-1a this replaces
 * cost about 1,450 instructions per call over the 288-byte key. */
_Static_assert(sizeof(route_lt_key) % sizeof(uint64_t) == 0, "the key is whole words");
static uint64_t key_hash(const route_lt_key *k) {
  uint64_t w[sizeof *k / sizeof(uint64_t)];
  memcpy(w, k, sizeof w);
  uint64_t h = 0x9E3779B97F4A7C15ull;
  for (size_t i = 0; i < sizeof w / sizeof w[0]; i++) h = (h ^ w[i]) * 0xFF51AFD7ED558CCDull;
  return h ^ (h >> 31);
}

static void plan_destroy(route_lt_plan *p) {
  if (p->desc) GS_CALL(cublasLtMatmulDescDestroy, p->desc);
  for (int i = 0; i < 4; i++)
    if (p->l[i]) GS_CALL(cublasLtMatrixLayoutDestroy, p->l[i]);
  free(p);
}

static cublasStatus_t layout_make(cublasLtMatrixLayout_t *l, const route_lt_layout_key *k) {
  int32_t b = (int32_t)k->batch;
  int64_t stride = k->stride;
  cublasStatus_t s =
      GS_CALL(cublasLtMatrixLayoutCreate, l, (cudaDataType)k->type, (uint64_t)k->rows, (uint64_t)k->cols, k->ld);
  if (s != CUBLAS_STATUS_SUCCESS) *l = NULL;
  if (s == CUBLAS_STATUS_SUCCESS)
    s = GS_CALL(cublasLtMatrixLayoutSetAttribute, *l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &b, sizeof b);
  if (s == CUBLAS_STATUS_SUCCESS)
    s = GS_CALL(cublasLtMatrixLayoutSetAttribute, *l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride,
                sizeof stride);
  return s;
}

static int heuristic_available(void) {
  return gs_sys.cublasLtMatmulPreferenceCreate && gs_sys.cublasLtMatmulPreferenceSetAttribute &&
         gs_sys.cublasLtMatmulPreferenceDestroy && gs_sys.cublasLtMatmulAlgoGetHeuristic;
}

/* The heuristic's first algorithm for p, or none (has_algo 0): a failure
 * here costs the plan its algorithm, not the call. */
static void plan_choose_algo(cublasLtHandle_t h, route_lt_plan *p) {
  if (!heuristic_available()) return;
  cublasLtMatmulPreference_t pref;
  if (GS_CALL(cublasLtMatmulPreferenceCreate, &pref) != CUBLAS_STATUS_SUCCESS) return;
  uint64_t wss = p->key.workspace_size;
  static const cublasLtMatmulPreferenceAttributes_t align_attr[4] = {
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
  cublasStatus_t s =
      GS_CALL(cublasLtMatmulPreferenceSetAttribute, pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wss, sizeof wss);
  for (int i = 0; i < 4 && s == CUBLAS_STATUS_SUCCESS; i++)
    s = GS_CALL(cublasLtMatmulPreferenceSetAttribute, pref, align_attr[i], &p->key.align[i], sizeof p->key.align[i]);
  cublasLtMatmulHeuristicResult_t res;
  int n = 0;
  memset(&res, 0, sizeof res);
  if (s == CUBLAS_STATUS_SUCCESS)
    s = GS_CALL(cublasLtMatmulAlgoGetHeuristic, h, p->desc, p->l[0], p->l[1], p->l[2], p->l[3], pref, 1, &res, &n);
  if (s == CUBLAS_STATUS_SUCCESS && n >= 1 && res.state == CUBLAS_STATUS_SUCCESS && res.workspaceSize <= wss) {
    p->algo = res.algo;
    p->has_algo = 1;
  }
  GS_CALL(cublasLtMatmulPreferenceDestroy, pref);
}

/* The descriptor attributes in the order the routes always set them. */
static cublasStatus_t plan_build(cublasLtHandle_t h, route_lt_plan *p) {
  const route_lt_key *k = &p->key;
  int32_t ta = k->transa, tb = k->transb, pm = k->pointer_mode, bias_type = k->bias_type;
  uint32_t epi = k->epilogue;
  int64_t bias_stride = k->bias_stride;
  const void *sa = k->a_scale, *sb = k->b_scale;
  cublasStatus_t s = GS_CALL(cublasLtMatmulDescCreate, &p->desc, (cublasComputeType_t)k->compute,
                             (cudaDataType_t)k->scale);
  if (s != CUBLAS_STATUS_SUCCESS) p->desc = NULL;
#define SET(attr, v) \
  if (s == CUBLAS_STATUS_SUCCESS) s = GS_CALL(cublasLtMatmulDescSetAttribute, p->desc, attr, &(v), sizeof(v))
  SET(CUBLASLT_MATMUL_DESC_TRANSA, ta);
  SET(CUBLASLT_MATMUL_DESC_TRANSB, tb);
  SET(CUBLASLT_MATMUL_DESC_POINTER_MODE, pm);
  SET(CUBLASLT_MATMUL_DESC_EPILOGUE, epi);
  if (sa) SET(CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, sa);
  if (sb) SET(CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, sb);
  /* cublasLt.h: the SCALE_MODE attributes are int32_t
   * (cublasLtMatmulMatrixScale_t); 0, SCALAR_32F, is the default. */
  int32_t amode = k->a_scale_mode, bmode = k->b_scale_mode;
  if (amode) SET(CUBLASLT_MATMUL_DESC_A_SCALE_MODE, amode);
  if (bmode) SET(CUBLASLT_MATMUL_DESC_B_SCALE_MODE, bmode);
  /* TransformerEngine sets the alpha-vector batch stride, unused by block
   * scaling, on MXFP8 descriptors when cuBLASLt is 12.8.3 or older:
   * "Workaround for heuristic cache bug in cublasLt. This separates the
   * MXFP8 cache key from non-block scaling." (cublaslt_gemm.cu). So does
   * this; an unknown version (0) counts as an old one. */
  if ((amode == CUBLASLT_MATMUL_MATRIX_SCALE_VEC32_UE8M0 || bmode == CUBLASLT_MATMUL_MATRIX_SCALE_VEC32_UE8M0) &&
      (!gs_sys.cublasLtGetVersion || GS_CALL(cublasLtGetVersion) <= 120803)) {
    int64_t mx_key = 1;
    SET(CUBLASLT_MATMUL_DESC_ALPHA_VECTOR_BATCH_STRIDE, mx_key);
  }
  if (k->fast_accum) {
    int8_t fast = 1; /* cublasLt.h: FAST_ACCUM is an int8_t */
    SET(CUBLASLT_MATMUL_DESC_FAST_ACCUM, fast);
  }
  if (k->has_bias) {
    SET(CUBLASLT_MATMUL_DESC_BIAS_POINTER, p->bias);
    SET(CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, bias_type);
  }
  if (bias_stride) SET(CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE, bias_stride);
#undef SET
  for (int i = 0; i < 4 && s == CUBLAS_STATUS_SUCCESS; i++) s = layout_make(&p->l[i], &k->l[i]);
  if (s == CUBLAS_STATUS_SUCCESS) plan_choose_algo(h, p);
  return s;
}

/* A plan of key k that nobody holds. */
static route_lt_plan *bucket_find(const route_lt_key *k, uint64_t hash) {
  for (route_lt_plan *p = buckets[hash % ROUTE_LT_BUCKETS]; p; p = p->next)
    if (!p->held && p->hash == hash && memcmp(&p->key, k, sizeof *k) == 0) return p;
  return NULL;
}

static void bucket_remove(route_lt_plan *p) {
  route_lt_plan **pp = &buckets[p->hash % ROUTE_LT_BUCKETS];
  while (*pp != p) pp = &(*pp)->next;
  *pp = p->next;
  p->next = NULL;
  plans_live--;
}

/* Takes least recently used plans out of the table until there is room
 * for one more; returns those nobody holds, chained by next, for the
 * caller to destroy outside the lock (a held one goes when let go). */
static route_lt_plan *evict_for_one(void) {
  route_lt_plan *victims = NULL;
  while (plans_live > 0 && plans_live >= plans_limit) {
    route_lt_plan *old = NULL;
    for (int b = 0; b < ROUTE_LT_BUCKETS; b++)
      for (route_lt_plan *p = buckets[b]; p; p = p->next)
        if (!old || p->used < old->used) old = p;
    bucket_remove(old);
    old->evicted = 1;
    if (!old->held) {
      old->next = victims;
      victims = old;
    }
  }
  return victims;
}

const route_lt_plan *route_lt_plan_get(cublasLtHandle_t h, const route_lt_key *k, const void *bias,
                                       cublasStatus_t *status, const char **why) {
  *status = CUBLAS_STATUS_SUCCESS;
  if (why) *why = NULL;
  uint64_t hash = key_hash(k);
  pthread_mutex_lock(&plans_lock);
  route_lt_plan *p = bucket_find(k, hash);
  if (p) {
    p->held = 1;
    p->used = ++plans_clock;
    pthread_mutex_unlock(&plans_lock);
    return p;
  }
  if (!route_lt_available()) {
    pthread_mutex_unlock(&plans_lock);
    *status = CUBLAS_STATUS_NOT_SUPPORTED;
    return NULL;
  }
  /* Built under the lock: first calls of new problems wait for each other,
   * steady-state calls only for the table lookup. */
  route_lt_plan *victim = NULL;
  p = GS_CALL(calloc, 1, sizeof *p);
  if (!p) {
    *status = CUBLAS_STATUS_ALLOC_FAILED;
    if (why) *why = "out of host memory for a cuBLASLt plan (calloc failed)";
  } else {
    p->key = *k;
    p->hash = hash;
    p->bias = bias;
    *status = plan_build(h, p);
    if (*status != CUBLAS_STATUS_SUCCESS) {
      plan_destroy(p);
      p = NULL;
    } else {
      victim = evict_for_one();
      route_lt_plan **b = &buckets[hash % ROUTE_LT_BUCKETS];
      p->next = *b;
      *b = p;
      plans_live++;
      plans_built++;
      p->held = 1;
      p->used = ++plans_clock;
    }
  }
  pthread_mutex_unlock(&plans_lock);
  while (victim) {
    route_lt_plan *next = victim->next;
    plan_destroy(victim);
    victim = next;
  }
  return p;
}

void route_lt_plan_put(const route_lt_plan *cp) {
  if (!cp) return;
  route_lt_plan *p = (route_lt_plan *)cp;
  pthread_mutex_lock(&plans_lock);
  p->held = 0;
  int gone = p->evicted;
  pthread_mutex_unlock(&plans_lock);
  if (gone) plan_destroy(p);
}

cublasStatus_t route_lt_set_scales(const route_lt_plan *cp, const void *a_scale, const void *b_scale) {
  route_lt_plan *p = (route_lt_plan *)cp; /* held: ours alone */
  cublasStatus_t s =
      GS_CALL(cublasLtMatmulDescSetAttribute, p->desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &a_scale, sizeof a_scale);
  if (s == CUBLAS_STATUS_SUCCESS)
    s = GS_CALL(cublasLtMatmulDescSetAttribute, p->desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &b_scale,
                sizeof b_scale);
  return s;
}

cublasStatus_t route_lt_matmul(cublasLtHandle_t h, const route_lt_plan *cp, const void *alpha, const void *A,
                               const void *B, const void *beta, const void *C, void *D, const void *bias, void *ws,
                               size_t wss, void *stream) {
  route_lt_plan *p = (route_lt_plan *)cp; /* held: ours alone */
  if (p->key.has_bias && bias != p->bias) {
    cublasStatus_t s =
        GS_CALL(cublasLtMatmulDescSetAttribute, p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias);
    if (s != CUBLAS_STATUS_SUCCESS) return s;
    p->bias = bias;
  }
  return GS_CALL(cublasLtMatmul, h, p->desc, alpha, A, p->l[0], B, p->l[1], beta, C, p->l[2], D, p->l[3],
                 p->has_algo ? &p->algo : NULL, ws, wss, (cudaStream_t)stream);
}

size_t route_lt_plans_set_limit(size_t n) {
  pthread_mutex_lock(&plans_lock);
  size_t old = plans_limit;
  plans_limit = n ? n : ROUTE_LT_PLANS;
  pthread_mutex_unlock(&plans_lock);
  return old;
}

size_t route_lt_plans_live(void) {
  pthread_mutex_lock(&plans_lock);
  size_t n = plans_live;
  pthread_mutex_unlock(&plans_lock);
  return n;
}

uint64_t route_lt_plans_built(void) {
  pthread_mutex_lock(&plans_lock);
  uint64_t n = plans_built;
  pthread_mutex_unlock(&plans_lock);
  return n;
}

/* ---- workspace ------------------------------------------------------------------------- */
/* Per context (../base/ctx_table.h): its device and how many workspaces
 * it holds. A context that is gone (a new id at its address, or, when a
 * device's workspaces or the stream table run out, cuCtxGetId refusing it)
 * gives its count back to its device: its buffers went with it, nothing is
 * freed. Records are recycled from ws_ctx_pool, which needs one more than
 * the table (a record is made before the one it replaces is released);
 * they are read and written only under the table's lock, which is also the
 * lock of everything else here. */
typedef struct ws_ctx {
  ctx_entry head;
  int device; /* -1: out of the workspace table's range */
  int lent;   /* workspaces it holds */
  int used;   /* taken from the pool */
} ws_ctx;

#define WS_CONTEXTS 64
#define WS_DEVICES 64
static void ws_ctx_release(ctx_entry *old);
CTX_TABLE_DEFINE(ws_contexts, WS_CONTEXTS, ws_ctx_release);
static ws_ctx ws_ctx_pool[WS_CONTEXTS + 1];
static int ws_lent[WS_DEVICES]; /* workspaces lent, per device, by live contexts */

static void ws_ctx_release(ctx_entry *old) {
  ws_ctx *x = (ws_ctx *)old;
  if (x->device >= 0) ws_lent[x->device] -= x->lent;
  x->lent = 0;
  x->used = 0;
}

/* Per stream: an open-addressing table keyed by (context, context id,
 * stream id), never shrunk. A slot stays its stream's while its context
 * is in the context table; then it passes in place to a new key whose
 * probe path crosses it, which keeps every other key's path intact.
 * Readers probe without a lock from the key's hash to the first free slot;
 * each slot is a seqlock (written under the lock: seq odd, the fields, seq
 * even), and a reader that sees one change treats the lookup as a miss and
 * asks again under the lock. */
typedef struct ws_slot {
  _Atomic unsigned seq;
  _Atomic(unsigned long long) stream_id; /* 0: free */
  _Atomic(uintptr_t) ctx;
  _Atomic(unsigned long long) ctx_id;
  _Atomic(CUdeviceptr) ptr; /* 0: the fill failed; why says so */
  _Atomic(const char *) why;
} ws_slot;

#define WS_TABLE 1024 /* a power of two */
static ws_slot ws_slots[WS_TABLE];

static void ws_after_fork_child(void) { ctx_table_after_fork_child(&ws_contexts, 0); }

__attribute__((constructor)) static void ws_register_fork(void) { pthread_atfork(NULL, NULL, ws_after_fork_child); }

/* The legacy stream's key beside cuStreamGetId's ids (small counters on
 * any driver; an id this large gets no workspace): it is its context's
 * (the context's address and id are part of every match). */
#define WS_LEGACY (~1ull)

static unsigned ws_hash(unsigned long long ctx_id, unsigned long long sid) {
  uint64_t h = (ctx_id * 0x9E3779B97F4A7C15ull) ^ (sid * 0xC2B2AE3D27D4EB4Full);
  return (unsigned)(h >> 54) & (WS_TABLE - 1);
}

/* Looks up (ctx, ctx_id, sid): 1 found (*ptr, *why its slot's), 0 not
 * there, -1 a slot changed while read (ask again under the lock). */
static int ws_find(void *ctx, unsigned long long ctx_id, unsigned long long sid, CUdeviceptr *ptr, const char **why) {
  unsigned h = ws_hash(ctx_id, sid);
  for (unsigned i = 0; i < WS_TABLE; i++) {
    ws_slot *s = &ws_slots[(h + i) & (WS_TABLE - 1)];
    unsigned q = atomic_load_explicit(&s->seq, memory_order_acquire);
    if (q & 1) return -1;
    unsigned long long id = atomic_load_explicit(&s->stream_id, memory_order_relaxed);
    uintptr_t c = atomic_load_explicit(&s->ctx, memory_order_relaxed);
    unsigned long long cid = atomic_load_explicit(&s->ctx_id, memory_order_relaxed);
    CUdeviceptr p = atomic_load_explicit(&s->ptr, memory_order_relaxed);
    const char *w = atomic_load_explicit(&s->why, memory_order_relaxed);
    atomic_thread_fence(memory_order_acquire);
    if (atomic_load_explicit(&s->seq, memory_order_relaxed) != q) return -1;
    if (id == 0) return 0;
    if (id == sid && c == (uintptr_t)ctx && cid == ctx_id) {
      *ptr = p;
      *why = w;
      return 1;
    }
  }
  return 0;
}

/* Under the lock: the slot for a key not in the table: the first on its
 * probe path whose context is gone from the context table, else the free
 * slot that ends the path; NULL when the table is full. */
static ws_slot *ws_slot_for(unsigned long long ctx_id, unsigned long long sid) {
  unsigned h = ws_hash(ctx_id, sid);
  for (unsigned i = 0; i < WS_TABLE; i++) {
    ws_slot *s = &ws_slots[(h + i) & (WS_TABLE - 1)];
    if (atomic_load_explicit(&s->stream_id, memory_order_relaxed) == 0 ||
        !ctx_table_find(&ws_contexts, (void *)atomic_load_explicit(&s->ctx, memory_order_relaxed),
                        atomic_load_explicit(&s->ctx_id, memory_order_relaxed)))
      return s;
  }
  return NULL;
}

static void ws_slot_write(ws_slot *t, const gs_call *c, unsigned long long sid, CUdeviceptr p, const char *why) {
  unsigned q = atomic_load_explicit(&t->seq, memory_order_relaxed);
  atomic_store_explicit(&t->seq, q + 1, memory_order_relaxed);
  atomic_thread_fence(memory_order_release);
  atomic_store_explicit(&t->stream_id, sid, memory_order_relaxed);
  atomic_store_explicit(&t->ctx, (uintptr_t)c->ctx, memory_order_relaxed);
  atomic_store_explicit(&t->ctx_id, c->ctx_id, memory_order_relaxed);
  atomic_store_explicit(&t->ptr, p, memory_order_relaxed);
  atomic_store_explicit(&t->why, why, memory_order_relaxed);
  atomic_store_explicit(&t->seq, q + 2, memory_order_release);
}

/* The stream's key, or 0 when it gets no workspace. */
static unsigned long long ws_stream_key(const gs_call *c, unsigned long long *sid) {
  void *s = c->g.stream;
  if (s == NULL || s == (void *)CU_STREAM_LEGACY) return *sid = WS_LEGACY;
  if (s == (void *)CU_STREAM_PER_THREAD) return *sid = 0;
  /* The device lookup's, where it asked (device.c). */
  if (c->stream_id) return *sid = c->stream_id < WS_LEGACY ? c->stream_id : 0;
  if (!gs_sys.cuStreamGetId) return *sid = 0;
  unsigned long long id = 0;
  if (GS_CALL(cuStreamGetId, (CUstream)s, &id) != CUDA_SUCCESS || id == 0 || id >= WS_LEGACY) return *sid = 0;
  return *sid = id;
}

#define WS_NONE "no cuBLASLt workspace on this stream: "
#define WS_STR2(x) #x
#define WS_STR(x) WS_STR2(x)

/* Under the lock: the record of c's context, made on its first call. */
static ws_ctx *ws_ctx_of(const gs_call *c, const char **why) {
  ws_ctx *x = (ws_ctx *)ctx_table_find(&ws_contexts, c->ctx, c->ctx_id);
  if (x) return x;
  ctx_entry *old;
  int i = ctx_table_place(&ws_contexts, c->ctx, &old);
  if (i < 0) {
    *why = WS_NONE "more live CUDA contexts than the workspace table keeps (" WS_STR(WS_CONTEXTS) ")";
    return NULL;
  }
  for (x = ws_ctx_pool; x->used; x++) {
  }
  x->used = 1;
  x->lent = 0;
  x->device = c->device >= 0 && c->device < WS_DEVICES ? c->device : -1;
  ctx_table_publish(&ws_contexts, i, &x->head, c->ctx, c->ctx_id);
  return x;
}

/* Under the lock: a workspace for c's stream (sid), kept in a slot with
 * its reason when there is none, so that a failure is not tried again on
 * each call. Contexts that are gone are swept out first when the device's
 * workspaces or the table's slots run out: only live contexts' streams
 * count. Returns the buffer (0: none, *why says why). */
static CUdeviceptr ws_fill(const gs_call *c, unsigned long long sid, const char **why) {
  *why = NULL;
  int device = c->device;
  int swept = 0;
  if (device >= 0 && device < WS_DEVICES && ws_lent[device] >= ROUTE_LT_WORKSPACES) {
    ctx_table_sweep(&ws_contexts);
    swept = 1;
  }
  ws_ctx *x = ws_ctx_of(c, why);
  ws_slot *t = x ? ws_slot_for(c->ctx_id, sid) : NULL;
  if (x && !t && !swept) {
    ctx_table_sweep(&ws_contexts); /* may have released x, if c's context is gone */
    x = ws_ctx_of(c, why);
    t = x ? ws_slot_for(c->ctx_id, sid) : NULL;
  }
  if (!x) return 0;
  if (!t) {
    *why = WS_NONE "the table of stream workspaces is full (" WS_STR(WS_TABLE) " streams)";
    return 0;
  }
  CUdeviceptr p = 0;
  if (x->device < 0) {
    *why = WS_NONE "the call's device ordinal is out of the workspace table's range";
  } else if (ws_lent[device] >= ROUTE_LT_WORKSPACES) {
    *why = WS_NONE "the device's " WS_STR(ROUTE_LT_WORKSPACES) " stream workspaces are taken for the process's "
           "life (PyTorch uses at most 4 x 32 pool streams and the default stream per device)";
  } else if (GS_CALL(cuCtxPushCurrent_v2, (CUcontext)c->ctx) != CUDA_SUCCESS) {
    *why = WS_NONE "cuCtxPushCurrent failed at the stream's first call (not tried again)";
  } else {
    int mode_failed;
    CUresult r = mem_alloc_relaxed(&p, ROUTE_LT_WORKSPACE, &mode_failed);
    CUcontext popped;
    GS_CALL(cuCtxPopCurrent_v2, &popped);
    if (mode_failed)
      *why = WS_NONE "cuThreadExchangeStreamCaptureMode failed at the stream's first call (not tried again)";
    else if (r == CUDA_ERROR_OUT_OF_MEMORY)
      *why = WS_NONE "cuMemAlloc: out of device memory at the stream's first call (not tried again)";
    else if (r != CUDA_SUCCESS)
      *why = WS_NONE "cuMemAlloc failed at the stream's first call (not tried again)";
    if (r != CUDA_SUCCESS) p = 0;
  }
  if (p) {
    ws_lent[device]++;
    x->lent++;
  }
  ws_slot_write(t, c, sid, p, *why);
  return p;
}

const char *route_lt_workspace(const gs_call *c, void **ws, size_t *size) {
  *ws = NULL;
  *size = 0;
  /* A replay may run beside the stream's eager calls (docs/graphs.md). */
  if (c->captured) return WS_NONE "the call is captured into a CUDA graph, and the stream's workspace serves its eager calls";
  unsigned long long sid;
  if (!c->ctx || !ws_stream_key(c, &sid)) return NULL;
  CUdeviceptr p = 0;
  const char *why = NULL;
  if (ws_find(c->ctx, c->ctx_id, sid, &p, &why) != 1) {
    ctx_table_lock(&ws_contexts);
    if (ws_find(c->ctx, c->ctx_id, sid, &p, &why) != 1) p = ws_fill(c, sid, &why);
    ctx_table_unlock(&ws_contexts);
  }
  if (!p) return why;
  *ws = (void *)(uintptr_t)p;
  *size = ROUTE_LT_WORKSPACE;
  return NULL;
}

size_t route_lt_workspaces_lent(int device) {
  if (device < 0 || device >= WS_DEVICES) return 0;
  ctx_table_lock(&ws_contexts);
  size_t n = (size_t)ws_lent[device];
  ctx_table_unlock(&ws_contexts);
  return n;
}
