/* fp8 call sites (shim/routes/fp8_sites.c) over a fake driver whose device memory
 * is host memory: identity across training steps with moving activation
 * pointers, hybrid gradient detection, eviction and its log flags,
 * per-context separation, ring initialisation, parity, stream changes,
 * capture pinning and injected failures, each with exact values.
 *
 * The training model: L Linear layers of one shape (the hardest case: one
 * group per GEMM kind, L sites in each), PyTorch's three GEMMs per layer as
 * cuBLAS sees them (column-major: A is the weight in forward and
 * grad-input, the saved input in grad-weight; B the activation or the
 * incoming gradient), forward on the main thread, backward on another
 * thread, activations from a simulated allocator. Order matters once: the
 * first test runs its backward on unnamed threads, before any test names a
 * thread "pt_autograd_0" (after that, the process counts only named
 * threads as backward ones, as the shim does in PyTorch). */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <cmocka.h>

#include "fp8_sites.h"
#include "shim.h"
#include "sys.h"

/* ---- fake driver ---------------------------------------------------------------- */
/* Threads call the fakes at once (test_concurrent_calls_own_sites: each
 * site's ring is set up under that site's lock only), so their counters
 * and the block list change under fake_lock. */
static pthread_mutex_t fake_lock = PTHREAD_MUTEX_INITIALIZER;
static int allocs, memsets, event_records, stream_waits, events_created, fail_records, fail_waits;
static void *last_record_stream, *last_wait_stream;
static CUevent last_record_event, last_wait_event;

/* Device memory is never freed by the shim (a context's goes with it);
 * the fake keeps every block listed so the leak checker sees it owned. */
typedef struct fake_block { struct fake_block *next; } fake_block;
static fake_block *fake_blocks;

static CUresult fake_alloc(CUdeviceptr *p, size_t n) {
  size_t head = 256;
  char *m = aligned_alloc(256, head + ((n + 255) & ~(size_t)255));
  if (!m) return CUDA_ERROR_OUT_OF_MEMORY;
  pthread_mutex_lock(&fake_lock);
  ((fake_block *)m)->next = fake_blocks;
  fake_blocks = (fake_block *)m;
  allocs++;
  pthread_mutex_unlock(&fake_lock);
  m += head;
  memset(m, 0xA5, n); /* device memory starts undefined */
  *p = (CUdeviceptr)(uintptr_t)m;
  return CUDA_SUCCESS;
}
static CUresult fake_push(CUcontext c) { return CUDA_SUCCESS; }
static CUresult fake_pop(CUcontext *c) { return CUDA_SUCCESS; }
static void fake_count(int *counter) {
  pthread_mutex_lock(&fake_lock);
  ++*counter;
  pthread_mutex_unlock(&fake_lock);
}
static CUresult fake_memset8(CUdeviceptr p, unsigned char v, size_t n, CUstream s) {
  fake_count(&memsets);
  memset((void *)(uintptr_t)p, v, n);
  return CUDA_SUCCESS;
}
static CUresult fake_memset32(CUdeviceptr p, unsigned int v, size_t n, CUstream s) {
  fake_count(&memsets);
  for (size_t i = 0; i < n; i++) memcpy((char *)(uintptr_t)p + 4 * i, &v, 4);
  return CUDA_SUCCESS;
}
static CUresult fake_event_create(CUevent *e, unsigned flags) {
  pthread_mutex_lock(&fake_lock);
  *e = (CUevent)(uintptr_t)(0xE000 + 0x10 * ++events_created); /* each its own */
  pthread_mutex_unlock(&fake_lock);
  return CUDA_SUCCESS;
}
static CUresult fake_event_record(CUevent e, CUstream s) {
  if (fail_records) return CUDA_ERROR_LAUNCH_FAILED;
  pthread_mutex_lock(&fake_lock);
  event_records++;
  last_record_stream = s;
  last_record_event = e;
  pthread_mutex_unlock(&fake_lock);
  return CUDA_SUCCESS;
}
static CUresult fake_stream_wait(CUstream s, CUevent e, unsigned flags) {
  if (fail_waits) return CUDA_ERROR_LAUNCH_FAILED;
  pthread_mutex_lock(&fake_lock);
  stream_waits++;
  last_wait_stream = s;
  last_wait_event = e;
  pthread_mutex_unlock(&fake_lock);
  return CUDA_SUCCESS;
}

static int setup(void **state) {
  gs_fault_clear();
  gs_sys.cuMemAlloc_v2 = fake_alloc;
  gs_sys.cuCtxPushCurrent_v2 = fake_push;
  gs_sys.cuCtxPopCurrent_v2 = fake_pop;
  gs_sys.cuMemsetD8Async = fake_memset8;
  gs_sys.cuMemsetD32Async = fake_memset32;
  gs_sys.cuEventCreate = fake_event_create;
  gs_sys.cuEventRecord = fake_event_record;
  gs_sys.cuStreamWaitEvent = fake_stream_wait;
  gs_opt.fp8_format = GS_FP8_FORMAT_HYBRID;
  gs_opt.fp8_history = 16;
  gs_opt.fp8_margin = 0;
  gs_opt.fp8_max_sites = 4096;
  allocs = memsets = event_records = stream_waits = events_created = fail_records = fail_waits = 0;
  last_record_stream = last_wait_stream = NULL;
  last_record_event = last_wait_event = NULL;
  return 0;
}

static int teardown(void **state) {
  gs_fault_clear();
  return 0;
}

/* Every test its own context (the table keeps them for the process). */
static void *fresh_ctx(void) {
  static uintptr_t next = 0x7000;
  next += 0x100;
  return (void *)next;
}

/* ---- calls ------------------------------------------------------------------------ */
static const float one = 1.0f, zero = 0.0f;
#define STREAM ((void *)0x5100)
#define CALLER ((const void *)&one) /* every GEMM through one return address, as in PyTorch */

static void make_call(gs_call *c, void *ctx, int64_t m, int64_t n, int64_t k, int ta, int tb, uintptr_t A,
                      uintptr_t B, uintptr_t C) {
  memset(c, 0, sizeof *c);
  int64_t lda = ta == CUBLAS_OP_N ? m : k, ldb = tb == CUBLAS_OP_N ? k : n;
  decode_gemm(&c->g, (void *)0x4000, ta, tb, m, n, k, &one, (const void *)A, CUDA_R_16BF, lda, 0, (const void *)B,
              CUDA_R_16BF, ldb, 0, &zero, (void *)C, CUDA_R_16BF, m, 0, 1, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  c->g.stream = STREAM;
  c->ctx = ctx;
  c->device = 0;
  c->sm = 90;
  c->caller = CALLER;
}

/* Acquire and release as a successful fp8 call does. */
static uint64_t run_site(gs_call *c, fp8_use *out) {
  fp8_use u;
  c->site_flags = 0; /* each call starts with none, as in hooks.c */
  c->evicted_site = 0;
  const char *why = fp8_site_acquire(c, 0, &u);
  if (why) fail_msg("fp8_site_acquire: %s", why);
  fp8_site_release(&u, (u.needs_amax_init ? FP8_RAN_AMAX_INIT : 0) | FP8_RAN_QUANTIZE);
  if (out) *out = u;
  return u.id;
}

/* ---- the training model ------------------------------------------------------------- */
#define L 6
#define H 64
#define NTOK 32
#define STEPS 5
enum { FWD, GRAD_IN, GRAD_W, KINDS };

/* Equal-sized blocks: "moving" hands out a new address every time (no
 * activation pointer ever repeats); "caching" reuses the last freed block
 * first, as PyTorch's caching allocator does, and step 1 allocates an
 * extra block before the first step ends (the optimizer's state), so step 2
 * sees other addresses than step 1, later steps the same ones. */
typedef struct allocator {
  int caching;
  uintptr_t next;
  uintptr_t free_list[4096];
  int nfree;
} allocator;

static uintptr_t blk_alloc(allocator *a) {
  if (a->caching && a->nfree) return a->free_list[--a->nfree];
  a->next += 0x10000;
  return a->next;
}
static void blk_free(allocator *a, uintptr_t p) {
  if (a->caching) a->free_list[a->nfree++] = p;
}

typedef struct model {
  void *ctx;
  allocator mem;
  uintptr_t W[L];
  uintptr_t x[L + 1];
  uint64_t ids[STEPS][KINDS][L];
  uint32_t flags[STEPS][KINDS][L];
  int fmt[KINDS][L][2];
  int step;
  int named;   /* name the backward thread pt_autograd_0 */
  int first_input_grad; /* layer 0 computes a grad-input too */
} model;

static void record(model *md, int kind, int l, gs_call *c, const fp8_use *u) {
  md->ids[md->step][kind][l] = u->id;
  md->flags[md->step][kind][l] = c->site_flags;
  if (md->step == 0) {
    md->fmt[kind][l][0] = u->fmt[0];
    md->fmt[kind][l][1] = u->fmt[1];
  }
}

static void forward(model *md) {
  md->x[0] = blk_alloc(&md->mem);
  for (int l = 0; l < L; l++) {
    md->x[l + 1] = blk_alloc(&md->mem);
    gs_call c;
    fp8_use u;
    /* y = x W^T: m = out, n = tokens, k = in; A = W (T), B = x (N). */
    make_call(&c, md->ctx, H, NTOK, H, CUBLAS_OP_T, CUBLAS_OP_N, md->W[l], md->x[l], md->x[l + 1]);
    run_site(&c, &u);
    record(md, FWD, l, &c, &u);
  }
}

static void *backward(void *arg) {
  model *md = arg;
  if (md->named) pthread_setname_np(pthread_self(), "pt_autograd_0");
  uintptr_t dy = blk_alloc(&md->mem);
  uintptr_t dW[L];
  for (int l = L - 1; l >= 0; l--) {
    gs_call c;
    fp8_use u;
    uintptr_t dx = 0;
    if (l > 0 || md->first_input_grad) {
      dx = blk_alloc(&md->mem);
      /* dx = dy W: m = in, n = tokens, k = out; A = W (N), B = dy (N). */
      make_call(&c, md->ctx, H, NTOK, H, CUBLAS_OP_N, CUBLAS_OP_N, md->W[l], dy, dx);
      run_site(&c, &u);
      record(md, GRAD_IN, l, &c, &u);
    }
    dW[l] = blk_alloc(&md->mem);
    /* dW = dy^T x: m = in, n = out, k = tokens; A = x (N), B = dy (T). */
    make_call(&c, md->ctx, H, H, NTOK, CUBLAS_OP_N, CUBLAS_OP_T, md->x[l], dy, dW[l]);
    run_site(&c, &u);
    record(md, GRAD_W, l, &c, &u);
    blk_free(&md->mem, dy);
    blk_free(&md->mem, md->x[l + 1]);
    dy = dx;
  }
  if (dy) blk_free(&md->mem, dy);
  blk_free(&md->mem, md->x[0]);
  if (md->step == 0) blk_alloc(&md->mem); /* optimizer state, kept */
  for (int l = 0; l < L; l++) blk_free(&md->mem, dW[l]); /* zero_grad(set_to_none=True) */
  return NULL;
}

static void train(model *md, int caching, int named, int first_input_grad) {
  memset(md, 0, sizeof *md);
  md->ctx = fresh_ctx();
  md->mem.caching = caching;
  md->mem.next = 0x70000000;
  md->named = named;
  md->first_input_grad = first_input_grad;
  for (int l = 0; l < L; l++) md->W[l] = 0x10000000 + (uintptr_t)l * 0x100000;
  for (md->step = 0; md->step < STEPS; md->step++) {
    forward(md);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, backward, md), 0);
    pthread_join(t, NULL);
  }
}

/* Same layer, same id in every step; 3L (or 3L - 1) distinct ids; NEW on
 * the first step's calls only; one epoch per step boundary. */
static void check_identity(model *md) {
  size_t expect = (size_t)(3 * L - (md->first_input_grad ? 0 : 1));
  assert_int_equal(fp8_sites_live(md->ctx), expect);
  assert_int_equal(fp8_sites_epoch(md->ctx), STEPS - 1);
  for (int k = 0; k < KINDS; k++)
    for (int l = 0; l < L; l++) {
      if (k == GRAD_IN && l == 0 && !md->first_input_grad) continue;
      uint64_t id = md->ids[0][k][l];
      assert_true(id != 0);
      if (md->flags[0][k][l] != GS_SITE_NEW)
        fail_msg("kind %d layer %d: the first step's call did not make a new site (flags %u)", k, l,
                 md->flags[0][k][l]);
      for (int s = 1; s < STEPS; s++) {
        if (md->ids[s][k][l] != id)
          fail_msg("kind %d layer %d: step %d has site %016llx, step 0 had %016llx", k, l, s,
                   (unsigned long long)md->ids[s][k][l], (unsigned long long)id);
        assert_int_equal(md->flags[s][k][l], 0);
      }
      for (int k2 = 0; k2 < KINDS; k2++)
        for (int l2 = 0; l2 < L; l2++)
          if ((k2 != k || l2 != l) && !(k2 == GRAD_IN && l2 == 0 && !md->first_input_grad))
            assert_true(md->ids[0][k2][l2] != id);
    }
}

static void check_hybrid_formats(model *md) {
  for (int l = 0; l < L; l++) {
    assert_int_equal(md->fmt[FWD][l][0], GS_FP8_E4M3);
    assert_int_equal(md->fmt[FWD][l][1], GS_FP8_E4M3);
    assert_int_equal(md->fmt[GRAD_W][l][0], GS_FP8_E4M3); /* saved input */
    assert_int_equal(md->fmt[GRAD_W][l][1], GS_FP8_E5M2); /* incoming gradient */
    if (l == 0 && !md->first_input_grad) continue;
    assert_int_equal(md->fmt[GRAD_IN][l][0], GS_FP8_E4M3); /* weight */
    assert_int_equal(md->fmt[GRAD_IN][l][1], GS_FP8_E5M2); /* incoming gradient */
  }
}

/* Runs first: no thread of this process is named pt_autograd_ yet. */
static void test_training_unnamed_backward_thread(void **state) {
  static model md;
  train(&md, 0, 0, 1);
  check_identity(&md);
  check_hybrid_formats(&md);
}

static void test_training_autograd_thread_moving(void **state) {
  static model md;
  train(&md, 0, 1, 1);
  check_identity(&md);
  check_hybrid_formats(&md);
}

static void test_training_autograd_thread_caching(void **state) {
  static model md;
  train(&md, 1, 1, 0);
  check_identity(&md);
  check_hybrid_formats(&md);
}

/* PyTorch's own pattern: one autograd thread, alive for every step
 * (torch/csrc/autograd/engine.cpp: a worker thread per device): its sites
 * stay its own from step to step, through the same-thread rule (it never
 * exits). */
typedef struct persist { model *md; pthread_mutex_t mu; pthread_cond_t cv; int go, done, quit; } persist;
static void *persist_main(void *arg) {
  persist *p = arg;
  pthread_setname_np(pthread_self(), "pt_autograd_0");
  model *md = p->md; md->named = 0; /* already named */
  for (;;) {
    pthread_mutex_lock(&p->mu);
    while (!p->go && !p->quit) pthread_cond_wait(&p->cv, &p->mu);
    if (p->quit) { pthread_mutex_unlock(&p->mu); return NULL; }
    p->go = 0;
    pthread_mutex_unlock(&p->mu);
    backward(md);
    pthread_mutex_lock(&p->mu); p->done = 1; pthread_cond_broadcast(&p->cv); pthread_mutex_unlock(&p->mu);
  }
}
static void test_training_persistent_autograd_thread(void **state) {
  static model md;
  static persist p;
  memset(&md, 0, sizeof md);
  md.ctx = fresh_ctx();
  md.mem.caching = 0;
  md.mem.next = 0x70000000;
  md.first_input_grad = 1;
  for (int l = 0; l < L; l++) md.W[l] = 0x10000000 + (uintptr_t)l * 0x100000;
  p.md = &md;
  pthread_mutex_init(&p.mu, NULL); pthread_cond_init(&p.cv, NULL);
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, persist_main, &p), 0);
  for (md.step = 0; md.step < STEPS; md.step++) {
    forward(&md);
    pthread_mutex_lock(&p.mu); p.done = 0; p.go = 1; pthread_cond_broadcast(&p.cv);
    while (!p.done) pthread_cond_wait(&p.cv, &p.mu);
    pthread_mutex_unlock(&p.mu);
  }
  pthread_mutex_lock(&p.mu); p.quit = 1; pthread_cond_broadcast(&p.cv); pthread_mutex_unlock(&p.mu);
  pthread_join(t, NULL);
  check_identity(&md);
}

/* A forward-only loop on one thread (inference): steps are found from the
 * first layer's weight repeating. */
static void test_inference_loop(void **state) {
  void *ctx = fresh_ctx();
  uint64_t ids[STEPS][L];
  uintptr_t act = 0x90000000;
  for (int s = 0; s < STEPS; s++)
    for (int l = 0; l < L; l++) {
      gs_call c;
      act += 0x10000;
      make_call(&c, ctx, H, NTOK, H, CUBLAS_OP_T, CUBLAS_OP_N, 0x20000000 + (uintptr_t)l * 0x1000, act, act + 0x8000);
      ids[s][l] = run_site(&c, NULL);
      assert_int_equal(c.site_flags, s == 0 ? GS_SITE_NEW : 0);
    }
  assert_int_equal(fp8_sites_live(ctx), L);
  assert_int_equal(fp8_sites_epoch(ctx), STEPS - 1);
  for (int s = 1; s < STEPS; s++)
    for (int l = 0; l < L; l++) assert_int_equal(ids[s][l], ids[0][l]);
}

/* A weight reused twice per pass is one site (its calls share a history). */
static void test_shared_weight_one_site(void **state) {
  void *ctx = fresh_ctx();
  uint64_t first = 0;
  for (int s = 0; s < 3; s++) {
    gs_call c;
    make_call(&c, ctx, H, NTOK, H, CUBLAS_OP_T, CUBLAS_OP_N, 0x30000000, 0x31000000 + (uintptr_t)s * 64, 0x32000000);
    uint64_t a = run_site(&c, NULL);
    make_call(&c, ctx, H, NTOK, H, CUBLAS_OP_T, CUBLAS_OP_N, 0x30000000, 0x33000000 + (uintptr_t)s * 64, 0x34000000);
    uint64_t b = run_site(&c, NULL);
    assert_int_equal(a, b);
    if (!first) first = a;
    assert_int_equal(a, first);
  }
  assert_int_equal(fp8_sites_live(ctx), 1);
}


/* ---- formats ------------------------------------------------------------------------ */
static void test_format_options(void **state) {
  static model md;
  gs_opt.fp8_format = GS_FP8_FORMAT_E5M2;
  train(&md, 0, 1, 1);
  for (int k = 0; k < KINDS; k++)
    for (int l = 0; l < L; l++) {
      assert_int_equal(md.fmt[k][l][0], GS_FP8_E5M2);
      assert_int_equal(md.fmt[k][l][1], GS_FP8_E5M2);
    }
  gs_opt.fp8_format = GS_FP8_FORMAT_E4M3;
  train(&md, 0, 1, 1);
  for (int k = 0; k < KINDS; k++)
    for (int l = 0; l < L; l++) {
      assert_int_equal(md.fmt[k][l][0], GS_FP8_E4M3);
      assert_int_equal(md.fmt[k][l][1], GS_FP8_E4M3);
    }
}

typedef struct bwd_call {
  void *ctx;
  int64_t m;
  uintptr_t A, B;
  fp8_use u;
} bwd_call;

static void *named_backward_call(void *arg) {
  bwd_call *b = arg;
  pthread_setname_np(pthread_self(), "pt_autograd_0");
  gs_call c;
  make_call(&c, b->ctx, b->m, NTOK, H, CUBLAS_OP_N, CUBLAS_OP_N, b->A, b->B, 0x4F000000);
  run_site(&c, &b->u);
  return NULL;
}

/* A backward GEMM of its own shape m (a new site) on an autograd thread. */
static fp8_use backward_call(void *ctx, int64_t m, uintptr_t A, uintptr_t B) {
  bwd_call b = {ctx, m, A, B, {0}};
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, named_backward_call, &b), 0);
  pthread_join(t, NULL);
  return b.u;
}

static fp8_use forward_call(void *ctx, int64_t m, uintptr_t A, uintptr_t B) {
  gs_call c;
  fp8_use u;
  make_call(&c, ctx, m, NTOK, H, CUBLAS_OP_T, CUBLAS_OP_N, A, B, 0x4E000000);
  run_site(&c, &u);
  return u;
}

/* A site taken over from an exited thread belongs to the thread that took
 * it: a third, live thread does not get it while that one lives. */
typedef struct hold_call {
  void *ctx;
  uintptr_t A, B, D;
  uint64_t id;
  pthread_barrier_t *bar;
  void *stream; /* the call's stream; STREAM when NULL */
  fp8_use use;  /* what the call was given */
  int64_t m;    /* the GEMM's m; 2H when 0 */
} hold_call;
static void *hold_thread(void *arg) {
  hold_call *h = arg;
  pthread_setname_np(pthread_self(), "pt_autograd_0");
  gs_call c;
  make_call(&c, h->ctx, h->m ? h->m : 2 * H, NTOK, H, CUBLAS_OP_N, CUBLAS_OP_N, h->A, h->B, h->D);
  if (h->stream) c.g.stream = h->stream;
  h->id = run_site(&c, &h->use);
  if (h->bar) { pthread_barrier_wait(h->bar); pthread_barrier_wait(h->bar); }
  return NULL;
}
static void test_handed_over_site_is_the_new_threads(void **state) {
  void *ctx = fresh_ctx();
  pthread_barrier_t bar;
  pthread_barrier_init(&bar, NULL, 2);
  forward_call(ctx, H, 0x61000000, 0x62000000);
  hold_call b0 = {ctx, 0x63000000, 0x64000000, 0x65000000, 0, NULL, NULL, {0}, 0};
  pthread_t t0, t1, tz;
  pthread_create(&t0, NULL, hold_thread, &b0); pthread_join(t0, NULL);
  forward_call(ctx, H, 0x61000000, 0x66000000);
  hold_call b1 = {ctx, 0x67000000, 0x68000000, 0x69000000, 0, &bar, NULL, {0}, 0};
  pthread_create(&t1, NULL, hold_thread, &b1);
  pthread_barrier_wait(&bar);           /* b1 has called and stays alive */
  assert_int_equal(b1.id, b0.id);       /* taken over from the exited b0 */
  forward_call(ctx, H, 0x61000000, 0x6A000000);
  hold_call z = {ctx, 0x6B000000, 0x6C000000, 0x6D000000, 0, NULL, NULL, {0}, 0};
  pthread_create(&tz, NULL, hold_thread, &z); pthread_join(tz, NULL);
  pthread_barrier_wait(&bar);
  pthread_join(t1, NULL);
  if (z.id == b1.id) fail_msg("live thread z took live thread b1's site %016llx", (unsigned long long)z.id);
  pthread_barrier_destroy(&bar);
}

/* A live thread's own site comes before an exited thread's: the main
 * thread and a worker share a weight (A), each with its own B and D; the
 * worker calls twice and exits; the main thread's next call keeps its own
 * site (the worker's matches it on the same stable weight). */
typedef struct twice_call {
  void *ctx;
  uint64_t id;
} twice_call;

static void *twice_thread(void *arg) {
  twice_call *w = arg;
  for (int i = 0; i < 2; i++) {
    gs_call c;
    make_call(&c, w->ctx, H, NTOK, H, CUBLAS_OP_T, CUBLAS_OP_N, 0x5A000000, 0x5B000000, 0x5C000000);
    w->id = run_site(&c, NULL);
  }
  return NULL;
}

static void test_own_site_before_an_exited_threads(void **state) {
  void *ctx = fresh_ctx();
  gs_call c;
  uint64_t mine = 0;
  for (int i = 0; i < 2; i++) {
    make_call(&c, ctx, H, NTOK, H, CUBLAS_OP_T, CUBLAS_OP_N, 0x5A000000, 0x5D000000, 0x5E000000);
    mine = run_site(&c, NULL);
  }
  twice_call w = {ctx, 0};
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, twice_thread, &w), 0);
  pthread_join(t, NULL);
  assert_true(w.id != mine);
  for (int i = 0; i < 3; i++) {
    make_call(&c, ctx, H, NTOK, H, CUBLAS_OP_T, CUBLAS_OP_N, 0x5A000000, 0x5D000000, 0x5E000000);
    assert_int_equal(run_site(&c, NULL), mine);
  }
  assert_int_equal(fp8_sites_live(ctx), 2);
}

/* The first thread to call in a context is its forward thread; a call from
 * any other counts as backward (before any thread is named pt_autograd_).
 * A thread that has exited is not the thread that later gets its pthread_t:
 * POSIX leaves a terminated thread's ID free for reuse (pthread_create:
 * "the thread ID ... may be reused"; glibc hands a joined thread's cached
 * stack, whose top is the pthread_t, to the next thread), so the shim tells
 * threads apart by its own thread numbers. */
typedef struct unnamed_call {
  void *ctx;
  int64_t m;
  uintptr_t A, B;
  fp8_use u;
  pthread_t self;
} unnamed_call;

static void *unnamed_thread_call(void *arg) {
  unnamed_call *b = arg;
  b->self = pthread_self();
  gs_call c;
  make_call(&c, b->ctx, b->m, NTOK, H, CUBLAS_OP_N, CUBLAS_OP_N, b->A, b->B, 0x4D000000);
  run_site(&c, &b->u);
  return NULL;
}

static unnamed_call unnamed_call_on_new_thread(void *ctx, int64_t m, uintptr_t A, uintptr_t B) {
  unnamed_call b = {ctx, m, A, B, {0}, 0};
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, unnamed_thread_call, &b), 0);
  pthread_join(t, NULL);
  return b;
}

/* Runs before any thread is named pt_autograd_ (see the top of the file). */
static void test_exited_first_thread_is_not_reused(void **state) {
  void *ctx = fresh_ctx();
  /* The context's first call, on a thread that then exits: the weight
   * 0x61000000 and input 0x62000000 are seen in forward. */
  unnamed_call first = unnamed_call_on_new_thread(ctx, 16, 0x61000000, 0x62000000);
  assert_int_equal(first.u.fmt[0], GS_FP8_E4M3);
  assert_int_equal(first.u.fmt[1], GS_FP8_E4M3);
  /* The next thread (on glibc, most likely with the same pthread_t): A is
   * new, B the weight. As a backward call, A is the gradient (E5M2); taken
   * for the first thread, it would be a forward call, both E4M3. */
  unnamed_call next = unnamed_call_on_new_thread(ctx, 48, 0x63000000, 0x61000000);
  if (!pthread_equal(first.self, next.self))
    print_message("note: this libc gave the second thread a new pthread_t; the reuse case was not met\n");
  assert_int_equal(next.u.fmt[0], GS_FP8_E5M2);
  assert_int_equal(next.u.gradient[0], 1);
  assert_int_equal(next.u.fmt[1], GS_FP8_E4M3);
}

/* The operand no forward call of this step used, beside one that one did,
 * is the gradient, whichever side it is on; where detection cannot tell
 * (both seen, neither seen), E4M3. A forward tensor stops counting as seen
 * after its backward use (its memory comes back as gradients). */
static void test_hybrid_detection(void **state) {
  void *ctx = fresh_ctx();
  fp8_use u = forward_call(ctx, 16, 0x41000000, 0x42000000);
  assert_int_equal(u.fmt[0], GS_FP8_E4M3);
  assert_int_equal(u.fmt[1], GS_FP8_E4M3);
  forward_call(ctx, 32, 0x41000000, 0x43000000); /* W used twice: two backward uses */

  u = backward_call(ctx, 48, 0x44000000, 0x45000000); /* neither seen */
  assert_int_equal(u.fmt[0], GS_FP8_E4M3);
  assert_int_equal(u.fmt[1], GS_FP8_E4M3);
  assert_int_equal(u.gradient[0] | u.gradient[1], 0);

  u = backward_call(ctx, 64, 0x41000000, 0x42000000); /* both seen */
  assert_int_equal(u.fmt[0], GS_FP8_E4M3);
  assert_int_equal(u.fmt[1], GS_FP8_E4M3);

  u = backward_call(ctx, 80, 0x46000000, 0x41000000); /* A new, B a weight with a use left */
  assert_int_equal(u.fmt[0], GS_FP8_E5M2);
  assert_int_equal(u.gradient[0], 1);
  assert_int_equal(u.fmt[1], GS_FP8_E4M3);
  assert_int_equal(u.gradient[1], 0);

  /* 0x42000000 had one forward use, taken above: now it is gradient memory. */
  u = backward_call(ctx, 96, 0x43000000, 0x42000000);
  assert_int_equal(u.fmt[0], GS_FP8_E4M3);
  assert_int_equal(u.fmt[1], GS_FP8_E5M2);
  assert_int_equal(u.gradient[1], 1);
}

/* ---- rings --------------------------------------------------------------------------- */
static void test_ring_initialised(void **state) {
  void *ctx = fresh_ctx();
  gs_opt.fp8_margin = 3;
  gs_opt.fp8_format = GS_FP8_FORMAT_E5M2;
  gs_call c;
  make_call(&c, ctx, H, NTOK, H, CUBLAS_OP_T, CUBLAS_OP_N, 0x50000000, 0x51000000, 0x52000000);
  fp8_use u;
  assert_null(fp8_site_acquire(&c, 0, &u));
  assert_int_equal(u.needs_amax_init, 1);
  assert_int_equal(u.parity, 0);
  assert_int_equal(c.site, u.id);
  assert_int_equal(c.site_flags, GS_SITE_NEW);
  for (int i = 0; i < 2; i++) {
    const gs_fp8_ring *r = u.ring[i];
    assert_true(((uintptr_t)r & 255) == 0);
    assert_true(r->scale[0][0] == 1.0f && r->scale[1][0] == 1.0f);
    assert_int_equal(r->history, 16);
    assert_int_equal(r->fmt, GS_FP8_E5M2);
    assert_true(r->margin_pow2 == 8.0f);
    assert_int_equal(r->blocks_done, 0);
    assert_int_equal(r->pos, 0);
    assert_true(r->last_amax == 0.0f);
    for (int s = 0; s < GS_FP8_AMAX_SLOTS; s++) assert_true(r->amax_slot[s] == 0.0f);
    for (int h = 0; h < 16; h++) assert_true(r->hist[h] == 0.0f);
  }
  assert_true((char *)u.ring[1] - (char *)u.ring[0] >= (ptrdiff_t)gs_fp8_ring_bytes(16));
  fp8_site_release(&u, FP8_RAN_AMAX_INIT | FP8_RAN_QUANTIZE);
  /* One slab of 32 sites, two 256-byte-rounded rings each. */
  assert_int_equal(allocs, 1);
  assert_int_equal(fp8_sites_ring_bytes(ctx), 32 * 2 * ((gs_fp8_ring_bytes(16) + 255) & ~255ull));
}

static void test_parity_and_first_call(void **state) {
  void *ctx = fresh_ctx();
  gs_call c;
  make_call(&c, ctx, H, NTOK, H, CUBLAS_OP_T, CUBLAS_OP_N, 0x53000000, 0x54000000, 0x55000000);
  fp8_use u;
  assert_null(fp8_site_acquire(&c, 0, &u));
  assert_int_equal(u.needs_amax_init, 1);
  fp8_site_release(&u, 0); /* nothing ran: still unmeasured, parity kept */
  assert_null(fp8_site_acquire(&c, 0, &u));
  assert_int_equal(u.needs_amax_init, 1);
  assert_int_equal(u.parity, 0);
  fp8_site_release(&u, FP8_RAN_AMAX_INIT); /* measured, quantize failed: parity kept */
  assert_null(fp8_site_acquire(&c, 0, &u));
  assert_int_equal(u.needs_amax_init, 0);
  assert_int_equal(u.parity, 0);
  fp8_site_release(&u, FP8_RAN_QUANTIZE);
  for (int i = 1; i <= 4; i++) {
    assert_null(fp8_site_acquire(&c, 0, &u));
    assert_int_equal(u.parity, i & 1);
    fp8_site_release(&u, FP8_RAN_QUANTIZE);
  }
  /* During capture the parity stays (the route carries the scale over). */
  assert_null(fp8_site_acquire(&c, 1, &u));
  assert_int_equal(u.parity, 1);
  fp8_site_release(&u, FP8_RAN_QUANTIZE);
  c.site_flags = 0;
  assert_null(fp8_site_acquire(&c, 0, &u));
  assert_int_equal(u.parity, 1);
  fp8_site_release(&u, 0);
  assert_int_equal(c.site_flags, 0);
}

/* ---- eviction ---------------------------------------------------------------------------- */
static uint64_t shape_call(void *ctx, int64_t m, uint32_t *flags, uint64_t *evicted, int capturing) {
  gs_call c;
  make_call(&c, ctx, m, NTOK, H, CUBLAS_OP_T, CUBLAS_OP_N, 0x60000000 + (uintptr_t)m * 0x1000, 0x61000000,
            0x62000000);
  fp8_use u;
  const char *why = fp8_site_acquire(&c, capturing, &u);
  if (why) fail_msg("%s", why);
  fp8_site_release(&u, FP8_RAN_AMAX_INIT | FP8_RAN_QUANTIZE);
  *flags = c.site_flags;
  *evicted = c.evicted_site;
  return u.id;
}

static void test_eviction_lru(void **state) {
  void *ctx = fresh_ctx();
  gs_opt.fp8_max_sites = 4;
  uint32_t f;
  uint64_t ev, id[6];
  for (int i = 0; i < 4; i++) {
    id[i] = shape_call(ctx, 16 * (i + 1), &f, &ev, 0);
    assert_int_equal(f, GS_SITE_NEW);
  }
  assert_int_equal(fp8_sites_live(ctx), 4);
  /* Site 0 used again: site 1 is now the least recently used. */
  assert_int_equal(shape_call(ctx, 16, &f, &ev, 0), id[0]);
  assert_int_equal(f, 0);
  id[4] = shape_call(ctx, 80, &f, &ev, 0);
  assert_int_equal(f, GS_SITE_NEW | GS_SITE_EVICTED);
  assert_int_equal(ev, id[1]);
  assert_int_equal(fp8_sites_live(ctx), 4);
  /* Site 1 comes back as new, with its old id; site 2 makes room. */
  assert_int_equal(shape_call(ctx, 32, &f, &ev, 0), id[1]);
  assert_int_equal(f, GS_SITE_NEW | GS_SITE_EVICTED);
  assert_int_equal(ev, id[2]);
  /* Evicted sites' rings are reused: still one slab. */
  assert_int_equal(allocs, 1);
}

static void test_eviction_skips_captured(void **state) {
  void *ctx = fresh_ctx();
  gs_opt.fp8_max_sites = 2;
  uint32_t f;
  uint64_t ev;
  uint64_t a = shape_call(ctx, 16, &f, &ev, 0);
  assert_int_equal(shape_call(ctx, 16, &f, &ev, 1), a); /* used in a graph: pinned */
  uint64_t b = shape_call(ctx, 32, &f, &ev, 0);
  shape_call(ctx, 48, &f, &ev, 0);
  assert_int_equal(f, GS_SITE_NEW | GS_SITE_EVICTED);
  assert_int_equal(ev, b); /* not a, though a is the least recently used */
  shape_call(ctx, 48, &f, &ev, 1); /* both pinned now */
  gs_call c;
  make_call(&c, ctx, 64, NTOK, H, CUBLAS_OP_T, CUBLAS_OP_N, 0x63000000, 0x61000000, 0x62000000);
  fp8_use u;
  assert_string_equal(fp8_site_acquire(&c, 0, &u),
                      "the fp8 site table is full (GEMMSHIM_FP8_MAX_SITES) and every site is held or used by a "
                      "captured graph");
  assert_int_equal(fp8_sites_live(ctx), 2);
}

/* ---- contexts ----------------------------------------------------------------------------- */
static void test_per_context(void **state) {
  void *ctx1 = fresh_ctx(), *ctx2 = fresh_ctx();
  gs_call c1, c2;
  make_call(&c1, ctx1, H, NTOK, H, CUBLAS_OP_T, CUBLAS_OP_N, 0x64000000, 0x65000000, 0x66000000);
  make_call(&c2, ctx2, H, NTOK, H, CUBLAS_OP_T, CUBLAS_OP_N, 0x64000000, 0x65000000, 0x66000000);
  c2.device = 1;
  fp8_use u1, u2;
  run_site(&c1, &u1);
  run_site(&c2, &u2);
  assert_int_equal(c1.site_flags, GS_SITE_NEW);
  assert_int_equal(c2.site_flags, GS_SITE_NEW);
  assert_int_equal(fp8_sites_live(ctx1), 1);
  assert_int_equal(fp8_sites_live(ctx2), 1);
  assert_true(u1.id != u2.id); /* the device is part of the id */
  assert_true(u1.ring[0] != u2.ring[0]);
  assert_int_equal(allocs, 2); /* one slab per context */
  run_site(&c1, &u1);
  assert_int_equal(c1.site_flags, 0);
}

/* A new context at an old one's address (a device reset, cuCtxDestroy +
 * cuCtxCreate) has a new cuCtxGetId id, which the CUDA Driver API says "is
 * unique for the life of the program": its sites start over (new, first
 * call measures, fresh ring memory from its own slab), the old table is
 * retired and a call holding one of its sites still releases it cleanly. */
static void test_context_reset_same_address(void **state) {
  void *ctx = fresh_ctx();
  gs_call c, held_call;
  make_call(&c, ctx, H, NTOK, H, CUBLAS_OP_T, CUBLAS_OP_N, 0x6a000000, 0x6b000000, 0x6c000000);
  make_call(&held_call, ctx, H, NTOK, 2 * H, CUBLAS_OP_T, CUBLAS_OP_N, 0x6d000000, 0x6e000000, 0x6f000000);
  c.ctx_id = held_call.ctx_id = 41;
  fp8_use u1, u2, held;
  run_site(&c, &u1);
  run_site(&c, &u1);
  assert_int_equal(u1.needs_amax_init, 0);
  assert_null(fp8_site_acquire(&held_call, 0, &held)); /* in flight across the reset */
  assert_int_equal(allocs, 1);
  uint64_t tables0, kept0, tables, kept;
  fp8_sites_retired(&tables0, &kept0);
  c.ctx_id = 42;
  c.site_flags = 0;
  run_site(&c, &u2);
  /* Retired with a site held: its slab of slot records stays. */
  fp8_sites_retired(&tables, &kept);
  assert_int_equal(tables, tables0 + 1);
  assert_int_equal(kept, kept0 + 1);
  assert_int_equal(c.site_flags, GS_SITE_NEW);
  assert_int_equal(u2.needs_amax_init, 1);
  assert_int_equal(u2.id, u1.id); /* the same program point keeps its id */
  assert_int_equal(allocs, 2);    /* the old context's ring memory went with it */
  assert_int_equal(fp8_sites_live(ctx), 1);
  fp8_site_release(&held, FP8_RAN_QUANTIZE);
  /* The last hold ended: the held site and the slot records are freed. */
  fp8_sites_retired(&tables, &kept);
  assert_int_equal(kept, kept0);
  run_site(&c, &u2);
  assert_int_equal(c.site_flags, 0);
  assert_int_equal(u2.needs_amax_init, 0);
  /* 100 more resets with no call in flight: each retired table frees its
   * sites, buckets and slot records (the table's few hundred bytes stay). */
  for (unsigned long long id = 43; id < 143; id++) {
    c.ctx_id = id;
    c.site_flags = 0;
    run_site(&c, &u2);
    assert_int_equal(c.site_flags, GS_SITE_NEW);
  }
  fp8_sites_retired(&tables, &kept);
  assert_int_equal(tables, tables0 + 101);
  assert_int_equal(kept, kept0);
  assert_int_equal(fp8_sites_live(ctx), 1);
}

/* ---- streams -------------------------------------------------------------------------------- */
static void test_stream_change_waits(void **state) {
  void *ctx = fresh_ctx();
  gs_call c;
  make_call(&c, ctx, H, NTOK, H, CUBLAS_OP_T, CUBLAS_OP_N, 0x67000000, 0x68000000, 0x69000000);
  fp8_use u1, u2;
  run_site(&c, &u1);
  c.g.stream = (void *)0x5200;
  c.site_flags = 0;
  run_site(&c, &u2);
  assert_int_equal(event_records, 1);
  assert_ptr_equal(last_record_stream, STREAM);
  assert_int_equal(stream_waits, 1);
  assert_ptr_equal(last_wait_stream, (void *)0x5200);
  assert_ptr_equal(u2.ring[0], u1.ring[0]); /* same state, ordered */
  assert_int_equal(u2.needs_amax_init, 0);
  assert_int_equal(u2.parity, 1);
  run_site(&c, &u2); /* same stream again: no more waits */
  assert_int_equal(stream_waits, 1);
}

static void test_stream_change_without_events_starts_over(void **state) {
  void *ctx = fresh_ctx();
  gs_sys.cuStreamWaitEvent = NULL;
  gs_call c;
  make_call(&c, ctx, H, NTOK, H, CUBLAS_OP_T, CUBLAS_OP_N, 0x6A000000, 0x6B000000, 0x6C000000);
  fp8_use u1, u2;
  run_site(&c, &u1);
  c.g.stream = (void *)0x5200;
  run_site(&c, &u2);
  assert_int_equal(u2.id, u1.id);
  assert_true(u2.ring[0] != u1.ring[0]); /* a fresh ring: the old stream may still use the old one */
  assert_int_equal(u2.needs_amax_init, 1);
  assert_int_equal(u2.parity, 0);
  assert_int_equal(event_records, 0);
}

/* Runs fn(arg) on a thread of its own and waits for it to exit. */
static void on_new_thread(void *(*fn)(void *), void *arg) {
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, fn, arg), 0);
  pthread_join(t, NULL);
}

/* The per-thread default stream (CUDA Runtime API, "Stream
 * synchronization behavior": CU_STREAM_PER_THREAD is "an implicit stream
 * local to both the thread and the CUcontext") is another stream in each
 * thread, and no thread can record on another's. A backward pass on a new
 * thread each step on that stream: each call's thread records the slot's
 * own event on its stream after its use, and the next thread, taking the
 * exited thread's site, waits on that event (cuStreamWaitEvent: "all
 * future work submitted to hStream will wait until hEvent completes") and
 * keeps the ring, its history and its parity: no new ring, no memset. */
static void test_per_thread_stream_handover_waits_on_the_last_use(void **state) {
  void *ctx = fresh_ctx();
  forward_call(ctx, H, 0x71000000, 0x72000000);
  hold_call b0 = {ctx, 0x73000000, 0x74000000, 0x75000000, 0, NULL, CU_STREAM_PER_THREAD, {0}, 0};
  on_new_thread(hold_thread, &b0);
  assert_int_equal(b0.use.needs_amax_init, 1);
  /* b0's mark: its own event, on its per-thread stream */
  assert_int_equal(event_records, 1);
  assert_ptr_equal(last_record_stream, CU_STREAM_PER_THREAD);
  CUevent mark = last_record_event;
  assert_non_null(mark);
  assert_int_equal(stream_waits, 0);
  int allocs0 = allocs, memsets0 = memsets;
  forward_call(ctx, H, 0x71000000, 0x76000000);
  hold_call b1 = {ctx, 0x77000000, 0x78000000, 0x79000000, 0, NULL, CU_STREAM_PER_THREAD, {0}, 0};
  on_new_thread(hold_thread, &b1);
  assert_int_equal(b1.id, b0.id);
  assert_int_equal(stream_waits, 1);
  assert_ptr_equal(last_wait_stream, CU_STREAM_PER_THREAD);
  assert_ptr_equal(last_wait_event, mark);           /* the slot's mark, not a new record */
  assert_ptr_equal(b1.use.ring[0], b0.use.ring[0]);  /* the ring and its history kept */
  assert_ptr_equal(b1.use.ring[1], b0.use.ring[1]);
  assert_int_equal(b1.use.needs_amax_init, 0);
  assert_int_equal(b1.use.parity, 1);
  assert_int_equal(allocs, allocs0);
  assert_int_equal(memsets, memsets0);
  assert_int_equal(event_records, 2);                /* b1's own mark, same event */
  assert_ptr_equal(last_record_event, mark);
  assert_int_equal(events_created, 1);
}

/* The mark is the release's: nothing is recorded while the call holds
 * the site (its kernels are enqueued between acquire and release). */
static void test_per_thread_stream_mark_at_release(void **state) {
  void *ctx = fresh_ctx();
  gs_call c;
  make_call(&c, ctx, H, NTOK, H, CUBLAS_OP_T, CUBLAS_OP_N, 0x9B000000, 0x9C000000, 0x9D000000);
  c.g.stream = CU_STREAM_PER_THREAD;
  fp8_use u;
  assert_null(fp8_site_acquire(&c, 0, &u));
  assert_int_equal(event_records, 0);
  fp8_site_release(&u, FP8_RAN_AMAX_INIT | FP8_RAN_QUANTIZE);
  assert_int_equal(event_records, 1);
  assert_ptr_equal(last_record_stream, CU_STREAM_PER_THREAD);
}

/* The taker waits on the mark, on its own stream, whatever that stream
 * is, and not on the context's order event (made here first by a move
 * between two ordinary streams): an ordinary-stream call taking an exited
 * thread's per-thread-stream site by its pointers waits there. */
static void test_per_thread_stream_handover_to_an_ordinary_stream(void **state) {
  void *ctx = fresh_ctx();
  gs_call c;
  make_call(&c, ctx, H, NTOK, H, CUBLAS_OP_T, CUBLAS_OP_N, 0x9E000000, 0x9F000000, 0xA0000000);
  run_site(&c, NULL);
  c.g.stream = (void *)0x5500;
  run_site(&c, NULL); /* an ordinary move: the order event exists now */
  assert_int_equal(stream_waits, 1);
  CUevent order = last_wait_event;
  hold_call b0 = {ctx, 0xA1000000, 0xA2000000, 0xA3000000, 0, NULL, CU_STREAM_PER_THREAD, {0}, 0};
  on_new_thread(hold_thread, &b0);
  CUevent mark = last_record_event;
  assert_ptr_equal(last_record_stream, CU_STREAM_PER_THREAD);
  assert_true(mark != order);
  hold_call b1 = {ctx, 0xA1000000, 0xA2000000, 0xA3000000, 0, NULL, (void *)0x5600, {0}, 0};
  on_new_thread(hold_thread, &b1);
  assert_int_equal(b1.id, b0.id);
  assert_int_equal(stream_waits, 2);
  assert_ptr_equal(last_wait_stream, (void *)0x5600);
  assert_ptr_equal(last_wait_event, mark);
  assert_ptr_equal(b1.use.ring[0], b0.use.ring[0]);
  assert_int_equal(b1.use.needs_amax_init, 0);
}

/* A mark covers the uses before it only. A thread's site X is marked; its
 * next call, a new site Y, evicts X (GEMMSHIM_FP8_MAX_SITES=1) and takes
 * its slot, and fails setting the rings up after enqueuing a memset on
 * them. The next thread, taking Y, must not trust X's mark: it starts
 * over on another ring, with no wait. */
typedef struct stale_call {
  void *ctx;
  fp8_use x, y;
  uint64_t y_id; /* Y's site, from the failed call */
  const char *why;
} stale_call;

static void *stale_thread(void *arg) {
  stale_call *h = arg;
  pthread_setname_np(pthread_self(), "pt_autograd_0");
  gs_call c;
  make_call(&c, h->ctx, 2 * H, NTOK, H, CUBLAS_OP_N, CUBLAS_OP_N, 0xA4000000, 0xA5000000, 0xA6000000);
  c.g.stream = CU_STREAM_PER_THREAD;
  run_site(&c, &h->x);
  make_call(&c, h->ctx, 3 * H, NTOK, H, CUBLAS_OP_N, CUBLAS_OP_N, 0xA7000000, 0xA8000000, 0xA9000000);
  c.g.stream = CU_STREAM_PER_THREAD;
  gs_fault_arm(GS_SYS_cuMemsetD32Async, 1, 0);
  h->why = fp8_site_acquire(&c, 0, &h->y);
  h->y_id = c.site;
  return NULL;
}

static void test_per_thread_stream_failed_setup_voids_the_mark(void **state) {
  void *ctx = fresh_ctx();
  gs_opt.fp8_max_sites = 1;
  stale_call b0 = {ctx, {0}, {0}, 0, NULL};
  on_new_thread(stale_thread, &b0);
  assert_non_null(b0.why); /* Y's ring set-up failed */
  assert_int_equal(event_records, 1); /* X's mark only */
  hold_call b1 = {ctx, 0xA7000000, 0xA8000000, 0xA9000000, 0, NULL, CU_STREAM_PER_THREAD, {0}, 3 * H};
  on_new_thread(hold_thread, &b1);
  assert_int_equal(b1.id, b0.y_id);
  assert_int_equal(stream_waits, 0);
  assert_true(b1.use.ring[0] != b0.x.ring[0]);
  assert_int_equal(b1.use.needs_amax_init, 1);
}

/* Ordinals name layers among calls of one stream only: an exited
 * thread's site on an ordinary stream is not taken by position by a call
 * on another ordinary stream with no pointer in common. */
static void test_ordinal_across_ordinary_streams_is_another_site(void **state) {
  void *ctx = fresh_ctx();
  forward_call(ctx, H, 0xAA000000, 0xAB000000);
  hold_call b0 = {ctx, 0xAC000000, 0xAD000000, 0xAE000000, 0, NULL, (void *)0x5700, {0}, 0};
  on_new_thread(hold_thread, &b0);
  forward_call(ctx, H, 0xAA000000, 0xAF000000);
  hold_call b1 = {ctx, 0xB0000000, 0xB1000000, 0xB2000000, 0, NULL, (void *)0x5800, {0}, 0};
  on_new_thread(hold_thread, &b1);
  assert_true(b1.id != b0.id);
  assert_int_equal(b1.use.needs_amax_init, 1);
  /* the same on b0's stream is b0's layer */
  forward_call(ctx, H, 0xAA000000, 0xB3000000);
  hold_call b2 = {ctx, 0xB4000000, 0xB5000000, 0xB6000000, 0, NULL, (void *)0x5700, {0}, 0};
  on_new_thread(hold_thread, &b2);
  assert_int_equal(b2.id, b0.id);
}

/* Without a mark (the record failed) or with the wait refused, the next
 * thread cannot order after the exited one's stream: a fresh ring,
 * measured again. */
static void handover_starts_over(int *fail) {
  void *ctx = fresh_ctx();
  forward_call(ctx, H, 0x7A000000, 0x7B000000);
  fail_records = fail == &fail_records;
  hold_call b0 = {ctx, 0x7C000000, 0x7D000000, 0x7E000000, 0, NULL, CU_STREAM_PER_THREAD, {0}, 0};
  on_new_thread(hold_thread, &b0);
  fail_records = 0;
  forward_call(ctx, H, 0x7A000000, 0x7F000000);
  fail_waits = fail == &fail_waits;
  hold_call b1 = {ctx, 0x80000000, 0x81000000, 0x82000000, 0, NULL, CU_STREAM_PER_THREAD, {0}, 0};
  on_new_thread(hold_thread, &b1);
  assert_int_equal(b1.id, b0.id);
  assert_int_equal(stream_waits, 0);
  assert_true(b1.use.ring[0] != b0.use.ring[0]);
  assert_int_equal(b1.use.needs_amax_init, 1);
  assert_int_equal(b1.use.parity, 0);
}

static void test_per_thread_stream_handover_without_a_mark_starts_over(void **state) { handover_starts_over(&fail_records); }
static void test_per_thread_stream_handover_wait_refused_starts_over(void **state) { handover_starts_over(&fail_waits); }

/* A use under capture leaves no mark: an event recorded on a capturing
 * stream is a captured event, and an eager stream waiting on it would
 * join the capture (CUDA C++ Programming Guide, "Cross-stream Dependencies
 * and Events"). A later thread starts over instead. */
static void *captured_thread(void *arg) {
  hold_call *h = arg;
  pthread_setname_np(pthread_self(), "pt_autograd_0");
  gs_call c;
  make_call(&c, h->ctx, 2 * H, NTOK, H, CUBLAS_OP_N, CUBLAS_OP_N, h->A, h->B, h->D);
  c.g.stream = CU_STREAM_PER_THREAD;
  const char *why = fp8_site_acquire(&c, 1, &h->use);
  if (why) fail_msg("fp8_site_acquire: %s", why);
  h->id = h->use.id;
  fp8_site_release(&h->use, FP8_RAN_AMAX_INIT | FP8_RAN_QUANTIZE);
  return NULL;
}

static void test_per_thread_stream_captured_use_leaves_no_mark(void **state) {
  void *ctx = fresh_ctx();
  forward_call(ctx, H, 0x83000000, 0x84000000);
  hold_call b0 = {ctx, 0x85000000, 0x86000000, 0x87000000, 0, NULL, CU_STREAM_PER_THREAD, {0}, 0};
  on_new_thread(captured_thread, &b0);
  assert_int_equal(event_records, 0);
  assert_int_equal(events_created, 0);
}

static void test_capture_new_site_needs_free_ring(void **state) {
  void *ctx = fresh_ctx();
  gs_opt.fp8_max_sites = 1;
  uint32_t f;
  uint64_t ev;
  /* The slab holds max_sites * 2 + 32 = 34 slots at most, all allocated
   * lazily: one slab of 32 now. */
  shape_call(ctx, 16, &f, &ev, 0);
  /* A new site during capture on another stream takes a never-used ring. */
  gs_call c;
  make_call(&c, ctx, 32, NTOK, H, CUBLAS_OP_T, CUBLAS_OP_N, 0x6D000000, 0x6E000000, 0x6F000000);
  c.g.stream = (void *)0x5300;
  fp8_use u;
  assert_null(fp8_site_acquire(&c, 1, &u));
  assert_int_equal(c.site_flags, GS_SITE_NEW | GS_SITE_EVICTED);
  fp8_site_release(&u, FP8_RAN_AMAX_INIT | FP8_RAN_QUANTIZE);
  assert_int_equal(allocs, 1);
}

/* ---- failures ---------------------------------------------------------------------------------- */
static void test_alloc_failure(void **state) {
  void *ctx = fresh_ctx();
  gs_call c;
  make_call(&c, ctx, H, NTOK, H, CUBLAS_OP_T, CUBLAS_OP_N, 0x70000000, 0x71000000, 0x72000000);
  fp8_use u;
  gs_fault_arm(GS_SYS_cuMemAlloc_v2, 1, 0);
  assert_string_equal(fp8_site_acquire(&c, 0, &u), "cuMemAlloc of fp8 ring memory: out of device memory");
  assert_int_equal(fp8_sites_live(ctx), 0);
  assert_null(u.site);
  /* The next call gets its site. */
  assert_null(fp8_site_acquire(&c, 0, &u));
  assert_int_equal(fp8_sites_live(ctx), 1);
  fp8_site_release(&u, 0);
}

static void test_capture_cannot_allocate(void **state) {
  void *ctx = fresh_ctx();
  gs_call c;
  make_call(&c, ctx, H, NTOK, H, CUBLAS_OP_T, CUBLAS_OP_N, 0x73000000, 0x74000000, 0x75000000);
  fp8_use u;
  assert_string_equal(fp8_site_acquire(&c, 1, &u),
                      "new fp8 ring state is needed during graph capture and no ring memory is free for this stream "
                      "(run the call once outside capture, on the capture stream)");
  assert_int_equal(allocs, 0);
  assert_int_equal(fp8_sites_live(ctx), 0);
}

static void test_memset_failure_retries(void **state) {
  void *ctx = fresh_ctx();
  gs_call c;
  make_call(&c, ctx, H, NTOK, H, CUBLAS_OP_T, CUBLAS_OP_N, 0x76000000, 0x77000000, 0x78000000);
  fp8_use u;
  gs_fault_arm(GS_SYS_cuMemsetD8Async, 1, 0);
  /* CUDA_ERROR_UNKNOWN (999): cuMemsetD8Async's fault value (sys.h). */
  assert_string_equal(fp8_site_acquire(&c, 0, &u),
                      "could not initialise the site's fp8 rings (cuMemsetD8Async failed, CUresult 999)");
  assert_int_equal(c.site_flags, GS_SITE_NEW); /* the site exists, its rings are not set up */
  c.site_flags = 0;
  assert_null(fp8_site_acquire(&c, 0, &u));
  assert_int_equal(c.site_flags, 0);
  assert_true(u.ring[0]->scale[0][0] == 1.0f);
  assert_int_equal(u.ring[1]->history, 16);
  fp8_site_release(&u, 0);
}

/* ---- threads --------------------------------------------------------------------------------- */
typedef struct hammer {
  void *ctx;
  int calls;
  pthread_barrier_t *live; /* all alive until every call ran */
  uint64_t id;             /* the site of the thread's calls */
  int parity;              /* its parity after them */
} hammer;

static void *hammer_main(void *arg) {
  hammer *h = arg;
  for (int i = 0; i <= h->calls; i++) {
    gs_call c;
    make_call(&c, h->ctx, H, NTOK, H, CUBLAS_OP_T, CUBLAS_OP_N, 0x79000000, 0x7A000000, 0x7B000000);
    fp8_use u;
    if (fp8_site_acquire(&c, 0, &u)) return (void *)1;
    if (i > 0 && u.id != h->id) return (void *)2; /* one site for all its calls */
    h->id = u.id, h->parity = u.parity;
    fp8_site_release(&u, i < h->calls ? FP8_RAN_QUANTIZE : 0); /* the last only looks */
  }
  pthread_barrier_wait(h->live);
  return NULL;
}

/* Four live threads calling with the same pointers at once, a site each:
 * a live thread's calls are its own work (even with a weight, or every
 * buffer, in common) and never read another's history. Each site's parity
 * moves once per call of its thread, so no call of another thread went
 * through it. */
static void test_concurrent_calls_own_sites(void **state) {
  void *ctx = fresh_ctx();
  pthread_barrier_t live;
  pthread_barrier_init(&live, NULL, 4);
  hammer h[4];
  pthread_t t[4];
  for (int i = 0; i < 4; i++) {
    h[i] = (hammer){ctx, 1001, &live, 0, -1};
    assert_int_equal(pthread_create(&t[i], NULL, hammer_main, &h[i]), 0);
  }
  for (int i = 0; i < 4; i++) {
    void *r;
    pthread_join(t[i], &r);
    assert_null(r);
  }
  assert_int_equal(fp8_sites_live(ctx), 4);
  for (int i = 0; i < 4; i++) {
    assert_int_equal(h[i].parity, 1001 & 1);
    for (int j = 0; j < i; j++) assert_true(h[i].id != h[j].id);
  }
  pthread_barrier_destroy(&live);
}

/* Threads of one program, each with its own handle and buffers but all on
 * one stream (the legacy stream: cuBLAS docs, cublasSetStream), calling
 * one GEMM line in turns while all are alive: each keeps a site of its
 * own. A position in the group names a layer for successive threads (the
 * training cases above) but never for live ones, whose calls are
 * independent work. */
#define TURN_THREADS 4
#define TURN_CALLS 5
typedef struct turns {
  void *ctx;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int turn;
  pthread_barrier_t done; /* nobody exits before every call ran */
  uint64_t ids[TURN_THREADS][TURN_CALLS];
} turns;
typedef struct turn_arg {
  turns *t;
  int i;
} turn_arg;

/* Who calls at turn n: each round its own order (0 1 2 3, 1 3 0 2,
 * 3 2 1 0, ...), as threads racing to one stream would. */
static int turn_thread(int n) {
  static const int order[3][TURN_THREADS] = {{0, 1, 2, 3}, {1, 3, 0, 2}, {3, 2, 1, 0}};
  return order[(n / TURN_THREADS) % 3][n % TURN_THREADS];
}

static void *turn_main(void *arg) {
  turn_arg *a = arg;
  turns *t = a->t;
  uintptr_t base = 0x40000000 + (uintptr_t)a->i * 0x1000000;
  for (int k = 0; k < TURN_CALLS; k++) {
    pthread_mutex_lock(&t->mu);
    while (turn_thread(t->turn) != a->i) pthread_cond_wait(&t->cv, &t->mu);
    gs_call c;
    make_call(&c, t->ctx, H, NTOK, H, CUBLAS_OP_T, CUBLAS_OP_N, base, base + 0x100000, base + 0x200000);
    t->ids[a->i][k] = run_site(&c, NULL);
    t->turn++;
    pthread_cond_broadcast(&t->cv);
    pthread_mutex_unlock(&t->mu);
  }
  pthread_barrier_wait(&t->done);
  return NULL;
}

static void test_live_threads_on_one_stream_keep_their_own_sites(void **state) {
  static turns t;
  memset(&t, 0, sizeof t);
  t.ctx = fresh_ctx();
  pthread_mutex_init(&t.mu, NULL);
  pthread_cond_init(&t.cv, NULL);
  pthread_barrier_init(&t.done, NULL, TURN_THREADS);
  pthread_t th[TURN_THREADS];
  turn_arg args[TURN_THREADS];
  for (int i = 0; i < TURN_THREADS; i++) {
    args[i] = (turn_arg){&t, i};
    assert_int_equal(pthread_create(&th[i], NULL, turn_main, &args[i]), 0);
  }
  for (int i = 0; i < TURN_THREADS; i++) pthread_join(th[i], NULL);
  assert_int_equal(fp8_sites_live(t.ctx), TURN_THREADS);
  for (int i = 0; i < TURN_THREADS; i++) {
    for (int k = 1; k < TURN_CALLS; k++)
      if (t.ids[i][k] != t.ids[i][0])
        fail_msg("thread %d call %d: site %016llx, its first call had %016llx", i, k, (unsigned long long)t.ids[i][k],
                 (unsigned long long)t.ids[i][0]);
    for (int j = 0; j < i; j++) assert_true(t.ids[i][0] != t.ids[j][0]);
  }
  pthread_barrier_destroy(&t.done);
  pthread_cond_destroy(&t.cv);
  pthread_mutex_destroy(&t.mu);
}

/* A program that made and destroyed more contexts than the table holds, at
 * addresses the driver did not hand out again (cuda.h promises unique ids,
 * nothing about addresses), then makes one more: the table gives it a gone
 * context's slot. A gone context is one cuCtxGetId refuses
 * (CUDA_ERROR_CONTEXT_IS_DESTROYED is among cuCtxGetId's documented
 * results) or answers with another id. Runs last: it fills the table. */
static void *live_ctx;
static CUresult fake_ctx_get_id(CUcontext ctx, unsigned long long *id) {
  if ((void *)ctx != live_ctx) return CUDA_ERROR_CONTEXT_IS_DESTROYED;
  *id = 0;
  return CUDA_SUCCESS;
}

static void test_gone_contexts_give_their_slots(void **state) {
  gs_call c;
  fp8_use u;
  const char *why = NULL;
  int filled = 0;
  /* Fill every slot (earlier tests hold some), without cuCtxGetId. */
  gs_sys.cuCtxGetId = NULL;
  for (int i = 0; i < 200 && !why; i++) {
    make_call(&c, fresh_ctx(), H, NTOK, H, CUBLAS_OP_T, CUBLAS_OP_N, 0x71000000, 0x72000000, 0x73000000);
    why = fp8_site_acquire(&c, 0, &u);
    if (!why) fp8_site_release(&u, FP8_RAN_AMAX_INIT | FP8_RAN_QUANTIZE), filled++;
  }
  assert_true(filled > 0);
  assert_string_equal(why, "more live CUDA contexts than the fp8 site table keeps (64)");
  /* All of them destroyed; one more context. */
  live_ctx = fresh_ctx();
  gs_sys.cuCtxGetId = fake_ctx_get_id;
  make_call(&c, live_ctx, H, NTOK, H, CUBLAS_OP_T, CUBLAS_OP_N, 0x71000000, 0x72000000, 0x73000000);
  why = fp8_site_acquire(&c, 0, &u);
  gs_sys.cuCtxGetId = NULL;
  if (why) fail_msg("a live context after 64 gone ones: %s", why);
  assert_int_equal(c.site_flags, GS_SITE_NEW);
  fp8_site_release(&u, FP8_RAN_AMAX_INIT | FP8_RAN_QUANTIZE);
  assert_int_equal(fp8_sites_live(live_ctx), 1);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_training_unnamed_backward_thread, setup, teardown),
      cmocka_unit_test_setup_teardown(test_exited_first_thread_is_not_reused, setup, teardown),
      cmocka_unit_test_setup_teardown(test_training_autograd_thread_moving, setup, teardown),
      cmocka_unit_test_setup_teardown(test_training_autograd_thread_caching, setup, teardown),
      cmocka_unit_test_setup_teardown(test_training_persistent_autograd_thread, setup, teardown),
      cmocka_unit_test_setup_teardown(test_handed_over_site_is_the_new_threads, setup, teardown),
      cmocka_unit_test_setup_teardown(test_own_site_before_an_exited_threads, setup, teardown),
      cmocka_unit_test_setup_teardown(test_inference_loop, setup, teardown),
      cmocka_unit_test_setup_teardown(test_shared_weight_one_site, setup, teardown),
      cmocka_unit_test_setup_teardown(test_format_options, setup, teardown),
      cmocka_unit_test_setup_teardown(test_hybrid_detection, setup, teardown),
      cmocka_unit_test_setup_teardown(test_ring_initialised, setup, teardown),
      cmocka_unit_test_setup_teardown(test_parity_and_first_call, setup, teardown),
      cmocka_unit_test_setup_teardown(test_eviction_lru, setup, teardown),
      cmocka_unit_test_setup_teardown(test_eviction_skips_captured, setup, teardown),
      cmocka_unit_test_setup_teardown(test_per_context, setup, teardown),
      cmocka_unit_test_setup_teardown(test_context_reset_same_address, setup, teardown),
      cmocka_unit_test_setup_teardown(test_stream_change_waits, setup, teardown),
      cmocka_unit_test_setup_teardown(test_stream_change_without_events_starts_over, setup, teardown),
      cmocka_unit_test_setup_teardown(test_per_thread_stream_handover_waits_on_the_last_use, setup, teardown),
      cmocka_unit_test_setup_teardown(test_per_thread_stream_handover_without_a_mark_starts_over, setup, teardown),
      cmocka_unit_test_setup_teardown(test_per_thread_stream_handover_wait_refused_starts_over, setup, teardown),
      cmocka_unit_test_setup_teardown(test_per_thread_stream_captured_use_leaves_no_mark, setup, teardown),
      cmocka_unit_test_setup_teardown(test_per_thread_stream_mark_at_release, setup, teardown),
      cmocka_unit_test_setup_teardown(test_per_thread_stream_handover_to_an_ordinary_stream, setup, teardown),
      cmocka_unit_test_setup_teardown(test_per_thread_stream_failed_setup_voids_the_mark, setup, teardown),
      cmocka_unit_test_setup_teardown(test_ordinal_across_ordinary_streams_is_another_site, setup, teardown),
      cmocka_unit_test_setup_teardown(test_capture_new_site_needs_free_ring, setup, teardown),
      cmocka_unit_test_setup_teardown(test_alloc_failure, setup, teardown),
      cmocka_unit_test_setup_teardown(test_capture_cannot_allocate, setup, teardown),
      cmocka_unit_test_setup_teardown(test_memset_failure_retries, setup, teardown),
      cmocka_unit_test_setup_teardown(test_concurrent_calls_own_sites, setup, teardown),
      cmocka_unit_test_setup_teardown(test_live_threads_on_one_stream_keep_their_own_sites, setup, teardown),
      cmocka_unit_test_setup_teardown(test_gone_contexts_give_their_slots, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
