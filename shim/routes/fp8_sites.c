/* fp8_sites.c: which fp8 call site a GEMM belongs to, and that site's
 * delayed-scaling state.
 *
 * Why sites: delayed scaling carries an amax history from one call of a
 * layer to the next, so a site must name one layer's GEMM across training
 * steps, and the return address cannot (every PyTorch GEMM comes through
 * the same one). Calls are grouped by caller, api, shape, types and device,
 * and within a group matched to a site by key pointer, ordinal in the step,
 * plain pointer or repeat, the calling thread's sites first, then those of
 * exited threads, never a live thread's, so a program gets the same site
 * ids in every run and live threads never share a history. The hybrid
 * format puts gradients in E5M2, and the shim is not told
 * which operand is one: it tells from the calling thread and the step's
 * forward tensors.
 *
 * Each site keeps its rings in device memory of one CUDA context and is
 * held by one call at a time: a call's quantize kernel and the previous
 * call's GEMM share the scale slots. Lock order: site mutex, then context
 * lock.
 *
 * Identity, gradients, state and locks: docs/fp8-sites.md,
 * "fp8_sites.c: identity, gradients, state and locks". */
#define _GNU_SOURCE
#include "fp8_ring.h"
#include "fp8_sites.h"

#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "memory.h"
#include "../base/ctx_table.h"
#include "../base/sys.h"

#define FP8_MAX_CTX 64
#define GROUP_BUCKETS 1024       /* per context; chains beyond */
#define SEEN_SLOTS 16384         /* recent forward operand pointers per context */
#define SEEN_PROBE 8
#define SLAB_SLOTS 32            /* sites' ring slots per cuMemAlloc */
#define STABLE_MAX 1000000u

/* ---- tables ------------------------------------------------------------------ */
typedef struct fp8_slot {
  CUdeviceptr ptr;          /* ring A; ring B at ptr + ring_stride() */
  void *stream;             /* stream of its last use (when used) */
  uintptr_t stream_thread;  /* for the per-thread stream: whose */
  int used;                 /* has run anything */
  CUevent done;             /* per-thread stream: recorded after each use */
  int done_valid;           /* done marks the last use (site held or context lock) */
  struct fp8_slot *next;    /* free list */
} fp8_slot;

/* One cuMemAlloc's worth of ring slots (host records); listed per context
 * so a retired context can free them. */
typedef struct fp8_slab {
  struct fp8_slab *next;
  size_t n;
  fp8_slot slots[];
} fp8_slab;

typedef struct fp8_ctx fp8_ctx;
typedef struct fp8_group fp8_group;

struct fp8_site {
  uint64_t id;
  fp8_ctx *owner;
  fp8_group *group;
  fp8_site *group_next;
  fp8_site *lru_prev, *lru_next; /* head = most recently used */
  uint64_t ordinal, round, last_tick;
  const void *ptr[FP8_ROLES];    /* the last call's operand pointers */
  unsigned stable[FP8_ROLES];    /* calls in a row with that pointer unchanged */
  gs_thread thread;              /* the last call's thread */
  fp8_slot *slot;
  int fmt[2], gradient[2];
  int parity;
  int ring_ready;  /* init memsets enqueued */
  int measured;    /* amax_init has run */
  int pinned;      /* used during capture */
  unsigned busy;   /* calls holding or waiting for mu (context lock) */
  pthread_mutex_t mu;
};

struct fp8_group {
  uint64_t hash;
  fp8_group *next;    /* bucket chain */
  fp8_site *sites;
  uint64_t round, pos, epoch;
};

typedef struct seen_entry {
  uintptr_t ptr;
  uint64_t epoch;
  uint64_t uses; /* forward calls this step that used it, less backward calls since */
} seen_entry;

struct fp8_ctx {
  ctx_entry head;      /* the context (../base/ctx_table.h); head.older: the
                        * retired table this one replaced (kept, never freed) */
  int retired;         /* context lock: a new context took the address */
  int retired_held;    /* context lock: when retired, its sites calls still hold */
  int device;
  pthread_mutex_t lock;
  fp8_group **buckets; /* GROUP_BUCKETS; freed when retired */
  fp8_site *lru_head, *lru_tail;
  size_t live;
  uint64_t tick, epoch;
  int backward_since_epoch;
  fp8_site *anchor;
  uint64_t primary;    /* the first thread that called in this context (gs_thread_number:
                        * a pthread_t may be reused once its thread has exited) */
  seen_entry *seen;    /* SEEN_SLOTS */
  fp8_slot *free_slots;
  fp8_slab *slabs;
  size_t slots_total;
  uint64_t ring_bytes;
  CUevent order_event;
};

/* A replaced table is retired (ctx_retire), never freed. */
static void ctx_retire_entry(ctx_entry *old);
CTX_TABLE_DEFINE(ctxs, FP8_MAX_CTX, ctx_retire_entry);

/* fork: a site's mu is held across the whole fp8 GEMM, and the context
 * lock across event calls, so another thread may hold either when the
 * program forks; the child (the forking thread alone) would wait for them
 * for ever. The child forgets the parent's contexts instead (their state
 * and device memory are the parent's; a real driver refuses a forked
 * child's calls anyway) and starts over at its first fp8 call. The
 * parent's tables are left allocated in the child, unreachable. */
static void fp8_sites_after_fork_child(void) {
  ctx_table_after_fork_child(&ctxs, 1);
}

/* At load: a first use inside another fork handler must not call
 * pthread_atfork. */
__attribute__((constructor)) static void fp8_sites_register_fork(void) {
  pthread_atfork(NULL, NULL, fp8_sites_after_fork_child);
}

static uint64_t ring_stride(void) {
  return (gs_fp8_ring_bytes((unsigned)gs_opt.fp8_history) + 255) & ~(uint64_t)255;
}

/* ---- hashing ----------------------------------------------------------------- */
static uint64_t mix64(uint64_t h, uint64_t v) {
  uint64_t z = h ^ (v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2));
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

static uint64_t group_hash(const gs_call *c) {
  uint64_t h = site_id(c->caller, &c->g);
  h = mix64(h, (uint64_t)(uint32_t)c->g.d_type);
  return mix64(h, (uint64_t)(uint32_t)c->device);
}

/* ---- contexts ----------------------------------------------------------------- */
static void site_free(fp8_site *s) {
  pthread_mutex_destroy(&s->mu);
  free(s);
}

/* Host memory of retired tables (for tests). */
static _Atomic uint64_t retired_tables, retired_slabs_kept;

/* Context lock held, x retired and no site of it held: its slot records. */
static void slabs_free_locked(fp8_ctx *x) {
  for (fp8_slab *sl = x->slabs, *next; sl; sl = next) {
    next = sl->next;
    free(sl);
    atomic_fetch_sub(&retired_slabs_kept, 1);
  }
  x->slabs = NULL;
  x->free_slots = NULL;
}

/* The context at x's address is gone. Calls that found x before the swap
 * see `retired` under its lock and decline, touching nothing else of it.
 * Its sites, groups, buckets and pointer table are freed now; a site a
 * call holds (its call still uses its ring slot) is freed when the last
 * hold ends, and the slot records with the last held site (site_unhold).
 * The table itself (a few hundred bytes) is kept: a call may have found it
 * just before the swap and not have taken its lock yet. */
static void ctx_retire(fp8_ctx *x) {
  pthread_mutex_lock(&x->lock);
  x->retired = 1;
  for (int b = 0; b < GROUP_BUCKETS; b++)
    for (fp8_group **gl = &x->buckets[b]; *gl;) {
      fp8_group *g = *gl;
      for (fp8_site **sl = &g->sites; *sl;) {
        fp8_site *site = *sl;
        *sl = site->group_next;
        if (site->busy) {
          x->retired_held++; /* never looked up again; freed by its last hold */
          continue;
        }
        site->slot->next = x->free_slots;
        x->free_slots = site->slot;
        site_free(site);
      }
      *gl = g->next;
      free(g);
    }
  x->lru_head = x->lru_tail = NULL;
  x->anchor = NULL;
  free(x->seen);
  x->seen = NULL;
  free(x->buckets);
  x->buckets = NULL;
  for (fp8_slab *sl = x->slabs; sl; sl = sl->next) atomic_fetch_add(&retired_slabs_kept, 1);
  if (!x->retired_held) slabs_free_locked(x);
  atomic_fetch_add(&retired_tables, 1);
  pthread_mutex_unlock(&x->lock);
}

static void ctx_retire_entry(ctx_entry *old) { ctx_retire((fp8_ctx *)old); }

/* Context lock held: one hold of s ends. 1 when s must be freed (its table
 * is retired and this was its last hold), after the lock is dropped. */
static int site_unhold_locked(fp8_ctx *x, fp8_site *s) {
  if (--s->busy || !x->retired) return 0;
  if (--x->retired_held == 0) slabs_free_locked(x);
  return 1;
}

void fp8_sites_retired(uint64_t *tables, uint64_t *slabs_kept) {
  *tables = atomic_load(&retired_tables);
  *slabs_kept = atomic_load(&retired_slabs_kept);
}

static fp8_ctx *ctx_get(const gs_call *c, const char **why) {
  fp8_ctx *x = (fp8_ctx *)ctx_table_find(&ctxs, c->ctx, c->ctx_id);
  if (x) return x;
  ctx_table_lock(&ctxs);
  x = (fp8_ctx *)ctx_table_find(&ctxs, c->ctx, c->ctx_id);
  ctx_entry *old;
  int slot = x ? -1 : ctx_table_place(&ctxs, c->ctx, &old);
  if (!x && slot < 0) *why = "more live CUDA contexts than the fp8 site table keeps (64)";
  if (!x && slot >= 0) {
    x = GS_CALL(calloc, 1, sizeof *x);
    seen_entry *seen = x ? GS_CALL(calloc, SEEN_SLOTS, sizeof *seen) : NULL;
    fp8_group **buckets = seen ? GS_CALL(calloc, GROUP_BUCKETS, sizeof *buckets) : NULL;
    if (!buckets) {
      free(seen);
      free(x);
      x = NULL;
      *why = "out of host memory for the fp8 site table";
    } else {
      x->device = c->device;
      x->seen = seen;
      x->buckets = buckets;
      x->primary = gs_thread_number();
      pthread_mutex_init(&x->lock, NULL);
      /* The table it replaces (a new context at the address, or a gone
       * context's slot) is retired. */
      ctx_table_publish(&ctxs, slot, &x->head, c->ctx, c->ctx_id);
    }
  }
  ctx_table_unlock(&ctxs);
  return x;
}

/* Driver calls with the site's context current (memsets and event
 * records on the legacy stream act on the current context). */
static CUresult ctx_push(const fp8_ctx *x) { return GS_CALL(cuCtxPushCurrent_v2, (CUcontext)x->head.ctx); }
static void ctx_pop(void) {
  CUcontext popped;
  GS_CALL(cuCtxPopCurrent_v2, &popped);
}

/* ---- threads: forward or backward ---------------------------------------------- */
enum { THREAD_UNKNOWN = 0, THREAD_AUTOGRAD, THREAD_OTHER };
/* initial-exec: the shim must need nothing but libc (the general-dynamic
 * model would import __tls_get_addr from ld.so). */
static __thread int thread_kind __attribute__((tls_model("initial-exec")));
static _Atomic int autograd_seen; /* a "pt_autograd_" thread has called */

static int thread_is_autograd(void) {
  if (thread_kind == THREAD_UNKNOWN) {
    char name[16] = "";
    thread_kind = THREAD_OTHER;
    if (gs_sys.pthread_getname_np && GS_CALL(pthread_getname_np, pthread_self(), name, sizeof name) == 0 &&
        strncmp(name, "pt_autograd_", 12) == 0)
      thread_kind = THREAD_AUTOGRAD;
  }
  if (thread_kind == THREAD_AUTOGRAD) {
    atomic_store_explicit(&autograd_seen, 1, memory_order_relaxed);
    return 1;
  }
  return 0;
}

int fp8_thread_backward(void) { return thread_is_autograd(); }

int fp8_autograd_seen(void) {
  return thread_is_autograd() || atomic_load_explicit(&autograd_seen, memory_order_relaxed);
}

int fp8_thread_forward(void) {
  return !thread_is_autograd() && atomic_load_explicit(&autograd_seen, memory_order_relaxed);
}

/* Backward-thread call: see the top of this file. */
static int thread_is_backward(const fp8_ctx *x) {
  if (thread_is_autograd()) return 1;
  if (atomic_load_explicit(&autograd_seen, memory_order_relaxed)) return 0;
  return gs_thread_number() != x->primary;
}

/* ---- forward operand pointers (hybrid detection) --------------------------------- */
static seen_entry *seen_probe(fp8_ctx *x, uintptr_t p, int insert) {
  unsigned start = (unsigned)(mix64(0, p) & (SEEN_SLOTS - 1));
  seen_entry *oldest = NULL;
  for (int i = 0; i < SEEN_PROBE; i++) {
    seen_entry *e = &x->seen[(start + (unsigned)i) & (SEEN_SLOTS - 1)];
    if (e->ptr == p) return e;
    if (!insert) continue;
    if (!e->ptr) return e;
    if (!oldest || e->epoch < oldest->epoch) oldest = e;
  }
  return oldest; /* insert over the stalest of the probe window */
}

static void seen_put(fp8_ctx *x, const void *p) {
  if (!p) return;
  seen_entry *e = seen_probe(x, (uintptr_t)p, 1);
  if (e->ptr != (uintptr_t)p || e->epoch != x->epoch) {
    e->ptr = (uintptr_t)p;
    e->epoch = x->epoch;
    e->uses = 0;
  }
  e->uses++;
}

/* A forward tensor is used once in backward per forward use (C = A B
 * saves A for dB and B for dA). After its last backward use it is freed
 * and its memory often comes back as a gradient: so it counts as seen only
 * while backward uses remain. */
static int seen_this_step(fp8_ctx *x, const void *p) {
  seen_entry *e = p ? seen_probe(x, (uintptr_t)p, 0) : NULL;
  return e && e->epoch == x->epoch && e->uses > 0;
}

static void seen_take(fp8_ctx *x, const void *p) {
  seen_entry *e = p ? seen_probe(x, (uintptr_t)p, 0) : NULL;
  if (e && e->epoch == x->epoch && e->uses > 0) e->uses--;
}

static void choose_formats(fp8_ctx *x, int backward, const void *A, const void *B, int fmt[2], int grad[2]) {
  grad[0] = grad[1] = 0;
  if (gs_opt.fp8_format == GS_FP8_FORMAT_E5M2) {
    fmt[0] = fmt[1] = GS_FP8_E5M2;
    return;
  }
  if (gs_opt.fp8_format == GS_FP8_FORMAT_HYBRID && backward) {
    int a = seen_this_step(x, A), b = seen_this_step(x, B);
    if (a && !b) grad[1] = 1;
    else if (b && !a) grad[0] = 1;
  }
  fmt[0] = grad[0] ? GS_FP8_E5M2 : GS_FP8_E4M3;
  fmt[1] = grad[1] ? GS_FP8_E5M2 : GS_FP8_E4M3;
}

/* ---- streams -------------------------------------------------------------------- */
/* The per-thread default stream is one handle for a different stream on
 * each thread. Threads are told apart by the shim's thread numbers, never
 * reused (memory.c): glibc hands a joined thread's pthread_t to the next
 * thread, whose per-thread stream is another stream. */
static uintptr_t stream_thread_of(const void *stream) {
  return stream == CU_STREAM_PER_THREAD ? (uintptr_t)gs_thread_number() : 0;
}

static int slot_on_stream(const fp8_slot *s, const gs_call *c) {
  return !s->used || (s->stream == c->g.stream && s->stream_thread == stream_thread_of(c->g.stream));
}

/* 1 when stream is not being captured now; 0 when it is, or when that
 * cannot be told (a driver without cuStreamIsCapturing predates capture,
 * but a failed query is not "not capturing"). */
static int stream_free_of_capture(const void *stream) {
  if (!gs_sys.cuStreamIsCapturing) return 1;
  CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
  return GS_CALL(cuStreamIsCapturing, (CUstream)stream, &st) == CUDA_SUCCESS && st == CU_STREAM_CAPTURE_STATUS_NONE;
}

/* Make everything enqueued so far on the slot's last stream come before
 * what c enqueues next on its stream. Context lock held (order_event).
 * Outside capture only: a captured stream cannot wait on an event recorded
 * outside its graph. The slot's last stream may be under someone else's
 * capture now: an event recorded there is a capture event, and waiting on
 * it would join c's eager stream to that capture (CUDA C++ Programming
 * Guide, stream capture, "Cross-stream Dependencies and Events": an event
 * recorded in a capturing stream is a captured event, and a stream that
 * waits on it is put in capture mode), so its later work would be
 * recorded, not run. Checked before
 * the record, and again after it, so a capture begun in between is not
 * joined either. Returns 1 when ordered; 0 leaves c's stream untouched. */
static int order_after_slot(fp8_ctx *x, const gs_call *c, const fp8_slot *s) {
  if (slot_on_stream(s, c)) return 1;
  if (!gs_sys.cuEventCreate || !gs_sys.cuEventRecord || !gs_sys.cuStreamWaitEvent) return 0;
  if (s->stream_thread && s->stream_thread != (uintptr_t)gs_thread_number()) {
    /* Another thread's per-thread stream: only that thread could record
     * on it, and it did, after the slot's last use (slot_mark_done). The
     * wait needs no context push: c's stream names its context. */
    return s->done_valid && GS_CALL(cuStreamWaitEvent, (CUstream)c->g.stream, s->done, 0) == CUDA_SUCCESS;
  }
  if (ctx_push(x) != CUDA_SUCCESS) return 0;
  CUresult r = stream_free_of_capture(s->stream) ? CUDA_SUCCESS : CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  if (r == CUDA_SUCCESS && !x->order_event) r = GS_CALL(cuEventCreate, &x->order_event, CU_EVENT_DISABLE_TIMING);
  if (r == CUDA_SUCCESS) r = GS_CALL(cuEventRecord, x->order_event, (CUstream)s->stream);
  if (r == CUDA_SUCCESS && !stream_free_of_capture(s->stream)) r = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  if (r == CUDA_SUCCESS) r = GS_CALL(cuStreamWaitEvent, (CUstream)c->g.stream, x->order_event, 0);
  ctx_pop();
  return r == CUDA_SUCCESS;
}

/* ---- ring slots ------------------------------------------------------------------ */
static size_t slots_cap(void) { return 2 * (size_t)gs_opt.fp8_max_sites + SLAB_SLOTS; }

/* A new slab of ring slots on the free list. Context lock held; never
 * during capture (cuMemAlloc is not a stream operation). */
static const char *slab_new(fp8_ctx *x) {
  size_t room = slots_cap() - x->slots_total;
  size_t n = room < SLAB_SLOTS ? room : SLAB_SLOTS;
  if (n == 0) return "fp8 ring memory is at its bound (2 x GEMMSHIM_FP8_MAX_SITES + 32 sites)";
  fp8_slab *slab = GS_CALL(calloc, 1, sizeof *slab + n * sizeof(fp8_slot));
  if (!slab) return "out of host memory for fp8 ring slots";
  fp8_slot *slots = slab->slots;
  uint64_t bytes = (uint64_t)n * 2 * ring_stride();
  CUdeviceptr p = 0;
  /* The reason names the call that failed: the push is not the allocation. */
  if (ctx_push(x) != CUDA_SUCCESS) {
    free(slab);
    return "cuCtxPushCurrent failed before allocating fp8 ring memory";
  }
  int mode_failed;
  CUresult r = mem_alloc_relaxed(&p, bytes, &mode_failed);
  ctx_pop();
  if (r != CUDA_SUCCESS) {
    free(slab);
    if (mode_failed) return "cuThreadExchangeStreamCaptureMode failed before allocating fp8 ring memory";
    return r == CUDA_ERROR_OUT_OF_MEMORY ? "cuMemAlloc of fp8 ring memory: out of device memory"
                                          : "cuMemAlloc of fp8 ring memory failed";
  }
  /* The slab stays for the process: freeing device memory synchronises. */
  for (size_t i = n; i-- > 0;) {
    slots[i].ptr = p + (CUdeviceptr)(i * 2 * ring_stride());
    slots[i].next = x->free_slots;
    x->free_slots = &slots[i];
  }
  slab->n = n;
  slab->next = x->slabs;
  x->slabs = slab;
  if (x->retired) atomic_fetch_add(&retired_slabs_kept, 1); /* a held site's call moved stream */
  x->slots_total += n;
  x->ring_bytes += bytes;
  return NULL;
}

/* Take a slot off the free list for c's stream (already ordered there). */
static fp8_slot *slot_unlink(fp8_slot **link, const gs_call *c) {
  fp8_slot *s = *link;
  *link = s->next;
  s->next = NULL;
  if (s->used) {
    s->stream = c->g.stream;
    s->stream_thread = stream_thread_of(c->g.stream);
  }
  return s;
}

/* A slot usable on c's stream. Context lock held. */
static const char *slot_take(fp8_ctx *x, const gs_call *c, int capturing, fp8_slot **out) {
  for (fp8_slot **l = &x->free_slots; *l; l = &(*l)->next)
    if (slot_on_stream(*l, c)) {
      *out = slot_unlink(l, c);
      return NULL;
    }
  if (capturing)
    return "new fp8 ring state is needed during graph capture and no ring memory is free for this stream "
           "(run the call once outside capture, on the capture stream)";
  for (fp8_slot **l = &x->free_slots; *l; l = &(*l)->next)
    if (order_after_slot(x, c, *l)) {
      *out = slot_unlink(l, c);
      return NULL;
    }
  const char *why = slab_new(x);
  if (why) return why;
  *out = slot_unlink(&x->free_slots, c);
  return NULL;
}

/* ---- groups and sites ------------------------------------------------------------- */
static fp8_group **bucket_of(fp8_ctx *x, uint64_t hash) { return &x->buckets[hash & (GROUP_BUCKETS - 1)]; }

static fp8_group *group_get(fp8_ctx *x, uint64_t hash) {
  fp8_group **b = bucket_of(x, hash);
  for (fp8_group *g = *b; g; g = g->next)
    if (g->hash == hash) return g;
  fp8_group *g = GS_CALL(calloc, 1, sizeof *g);
  if (!g) return NULL;
  g->hash = hash;
  g->epoch = x->epoch;
  g->next = *b;
  *b = g;
  return g;
}

static void group_drop_if_empty(fp8_ctx *x, fp8_group *g) {
  if (g->sites) return;
  for (fp8_group **l = bucket_of(x, g->hash); *l; l = &(*l)->next)
    if (*l == g) {
      *l = g->next;
      free(g);
      return;
    }
}

static void lru_unlink(fp8_ctx *x, fp8_site *s) {
  if (s->lru_prev) s->lru_prev->lru_next = s->lru_next;
  else x->lru_head = s->lru_next;
  if (s->lru_next) s->lru_next->lru_prev = s->lru_prev;
  else x->lru_tail = s->lru_prev;
  s->lru_prev = s->lru_next = NULL;
}

static void lru_push_head(fp8_ctx *x, fp8_site *s) {
  s->lru_next = x->lru_head;
  s->lru_prev = NULL;
  if (x->lru_head) x->lru_head->lru_prev = s;
  x->lru_head = s;
  if (!x->lru_tail) x->lru_tail = s;
}

/* A site's key pointer that the call does not carry: another layer. */
static int contradicted(const fp8_site *s, const void *const ptr[FP8_ROLES]) {
  for (int r = 0; r < FP8_ROLES; r++)
    if (s->stable[r] && s->ptr[r] != ptr[r]) return 1;
  return 0;
}

/* Steps 1-4 of the matching at the top of this file; NULL: a new site. */
/* An ordinal names a layer only among calls of one stream: calls on
 * different streams with no pointer in common are independent work (each
 * thread of a program with its own stream and buffers, say), and must not
 * read each other's histories. The per-thread default stream counts as
 * one stream here: a site of it is matched only by its own thread or
 * after that thread exited (site_matchable), and a backward pass on a new
 * thread each step on that stream is the same layers' next step. */
static int site_on_call_stream(const fp8_site *s, const gs_call *c) {
  return !s->slot || !s->slot->used || s->slot->stream == c->g.stream;
}

/* A site is matched only from the thread that used it last or after that
 * thread has exited (a backward pass on a new thread each step): a live
 * thread's calls are its own work with its own history, even on the same
 * stream, with a weight in common or with buffers another thread used
 * before. The calling thread's own sites come first: an exited thread's
 * are taken only where none of its own matches (a thread that keeps a
 * weight's site does not trade it for the same weight's site of one that
 * ended). Reading s->slot is ordered after that thread's last use (its own
 * earlier call, or its exit: threads.c's release store). */
enum { MATCH_OWN, MATCH_GONE };
static int site_matchable(const fp8_site *s, gs_thread me, int pass) {
  return pass == MATCH_OWN ? s->thread.number == me.number
                           : s->thread.number != me.number && gs_thread_exited(s->thread);
}

static fp8_site *group_match_pass(const fp8_group *g, const gs_call *c, const void *const ptr[FP8_ROLES],
                                  int backward, gs_thread me, int pass) {
  /* A before D before B: A holds weights and saved activations, D the
   * weight gradients, B the most short-lived tensors. */
  static const int role_rank[FP8_ROLES] = {0, 2, 1};
  fp8_site *key = NULL, *ord = NULL, *fresh = NULL, *repeat = NULL;
  int key_rank = INT_MAX, fresh_rank = INT_MAX;
  for (fp8_site *s = g->sites; s; s = s->group_next) {
    if (!site_matchable(s, me, pass)) continue;
    int unused = s->round != g->round;
    int contra = contradicted(s, ptr);
    if (unused && !contra && s->ordinal == g->pos && site_on_call_stream(s, c) && (!ord || s->last_tick > ord->last_tick))
      ord = s;
    for (int r = 0; r < FP8_ROLES; r++) {
      if (!ptr[r] || s->ptr[r] != ptr[r]) continue;
      if (s->stable[r]) {
        int rank = role_rank[r] * 4 + (unused ? 0 : 2) + (s->ordinal == g->pos ? 0 : 1);
        if (rank < key_rank) key = s, key_rank = rank;
      } else if (!contra && unused) {
        if (role_rank[r] < fresh_rank) fresh = s, fresh_rank = role_rank[r];
      } else if (!contra && !repeat && (r == FP8_ROLE_A || (r == FP8_ROLE_B && !backward))) {
        repeat = s;
      }
    }
  }
  if (key) return key;
  if (ord) return ord;
  if (fresh) return fresh;
  return repeat;
}

static fp8_site *group_match(const fp8_group *g, const gs_call *c, const void *const ptr[FP8_ROLES], int backward) {
  const gs_thread me = gs_thread_self();
  fp8_site *s = group_match_pass(g, c, ptr, backward, me, MATCH_OWN);
  return s ? s : group_match_pass(g, c, ptr, backward, me, MATCH_GONE);
}

/* Record a call of s; returns 1 when it started a new round of its group. */
static int site_touch(fp8_ctx *x, fp8_site *s, const void *const ptr[FP8_ROLES]) {
  fp8_group *g = s->group;
  int restarted = 0;
  if (s->round == g->round) {
    g->round++;
    restarted = 1;
  }
  s->round = g->round;
  g->pos = s->ordinal + 1;
  for (int r = 0; r < FP8_ROLES; r++) {
    if (s->ptr[r] == ptr[r]) {
      if (s->stable[r] < STABLE_MAX) s->stable[r]++;
    } else {
      s->stable[r] = 0;
      s->ptr[r] = ptr[r];
    }
  }
  s->thread = gs_thread_self();
  s->last_tick = ++x->tick;
  lru_unlink(x, s);
  lru_push_head(x, s);
  return restarted;
}

static void epoch_advance(fp8_ctx *x) {
  x->epoch++;
  x->backward_since_epoch = 0;
}

/* Evict the least recently used site that no call holds and no graph
 * uses; its slot goes on the free list. Never frees group `keep`. */
static int evict_one(fp8_ctx *x, fp8_group *keep, uint64_t *id) {
  fp8_site *s = x->lru_tail;
  while (s && (s->busy || s->pinned)) s = s->lru_prev;
  if (!s) return 0;
  lru_unlink(x, s);
  fp8_group *g = s->group;
  for (fp8_site **l = &g->sites; *l; l = &(*l)->group_next)
    if (*l == s) {
      *l = s->group_next;
      break;
    }
  if (g != keep) group_drop_if_empty(x, g);
  if (x->anchor == s) x->anchor = NULL;
  s->slot->next = x->free_slots;
  x->free_slots = s->slot;
  x->live--;
  *id = s->id;
  site_free(s);
  return 1;
}

static uint64_t site_new_id(const fp8_group *g, uint64_t ordinal) {
  uint64_t id = mix64(g->hash, ordinal);
  for (;;) {
    const fp8_site *s = g->sites;
    while (s && s->id != id) s = s->group_next;
    if (!s && id) return id;
    id = mix64(id, 1); /* two live sites at one ordinal: the later one differs */
  }
}

/* Step 5: a new site at the group's ordinal. Context lock held. */
static const char *site_create(fp8_ctx *x, fp8_group *g, gs_call *c, int capturing, int backward,
                               const void *const ptr[FP8_ROLES], fp8_site **out) {
  if (x->live >= gs_opt.fp8_max_sites) {
    uint64_t evicted = 0;
    if (!evict_one(x, g, &evicted))
      return "the fp8 site table is full (GEMMSHIM_FP8_MAX_SITES) and every site is held or used by a captured graph";
    c->site_flags |= GS_SITE_EVICTED;
    c->evicted_site = evicted;
  }
  fp8_slot *slot = NULL;
  const char *why = slot_take(x, c, capturing, &slot);
  if (why) return why;
  fp8_site *s = GS_CALL(calloc, 1, sizeof *s);
  if (!s) {
    slot->next = x->free_slots;
    x->free_slots = slot;
    return "out of host memory for an fp8 site";
  }
  pthread_mutex_init(&s->mu, NULL);
  s->owner = x;
  s->group = g;
  s->ordinal = g->pos;
  s->id = site_new_id(g, s->ordinal);
  s->round = g->round;
  s->slot = slot;
  for (int r = 0; r < FP8_ROLES; r++) s->ptr[r] = ptr[r];
  choose_formats(x, backward, ptr[FP8_ROLE_A], ptr[FP8_ROLE_B], s->fmt, s->gradient);
  s->group_next = g->sites;
  g->sites = s;
  g->pos = s->ordinal + 1;
  s->thread = gs_thread_self();
  s->last_tick = ++x->tick;
  lru_push_head(x, s);
  x->live++;
  c->site_flags |= GS_SITE_NEW;
  *out = s;
  return NULL;
}

/* ---- ring initialisation ---------------------------------------------------------- */
static CUresult ring_init(CUdeviceptr ring, int fmt, CUstream stream, const char **failed) {
  return fp8_ring_init(ring, fmt, (unsigned)gs_opt.fp8_history, (unsigned)gs_opt.fp8_margin, stream, failed);
}

/* With s held: put its rings on c's stream and initialise them if needed. */
static const char *site_prepare(fp8_ctx *x, fp8_site *s, const gs_call *c, int capturing) {
  if (!slot_on_stream(s->slot, c)) {
    pthread_mutex_lock(&x->lock);
    const char *why = NULL;
    if (capturing || !order_after_slot(x, c, s->slot)) {
      /* No way to order against the old stream: start over on a fresh
       * ring. The old slot is retired, never reused (its stream may still
       * be using it); it stays counted against the slot bound. */
      fp8_slot *fresh = NULL;
      why = slot_take(x, c, capturing, &fresh);
      if (!why) {
        s->slot = fresh;
        s->ring_ready = s->measured = 0;
        s->parity = 0;
      }
    }
    pthread_mutex_unlock(&x->lock);
    if (why) return why;
  }
  s->slot->used = 1;
  s->slot->stream = c->g.stream;
  s->slot->stream_thread = stream_thread_of(c->g.stream);
  /* From here this call may enqueue on the ring: an earlier mark no longer
   * covers it, and only this call's release marks again (a failure below
   * returns before it, and the next thread then starts over). */
  s->slot->done_valid = 0;
  if (!s->ring_ready) {
    if (ctx_push(x) != CUDA_SUCCESS) return "cuCtxPushCurrent failed before initialising fp8 rings";
    const char *failed = NULL;
    CUresult r = ring_init(s->slot->ptr, s->fmt[0], (CUstream)c->g.stream, &failed);
    if (r == CUDA_SUCCESS) r = ring_init(s->slot->ptr + ring_stride(), s->fmt[1], (CUstream)c->g.stream, &failed);
    ctx_pop();
    if (r != CUDA_SUCCESS) {
      /* Copied into the call's reason at once. */
      static __thread char why[96] __attribute__((tls_model("initial-exec")));
      snprintf(why, sizeof why, "could not initialise the site's fp8 rings (%s failed, CUresult %d)", failed, (int)r);
      return why;
    }
    s->ring_ready = 1;
  }
  return NULL;
}

/* ---- the interface ----------------------------------------------------------------- */
const char *fp8_site_acquire(gs_call *c, int capturing, fp8_use *u) {
  memset(u, 0, sizeof *u);
  u->capturing = capturing;
  if (!c->ctx) return "the call's context is unknown";
  const char *why = NULL;
  fp8_ctx *x = ctx_get(c, &why);
  if (!x) return why;
  const void *ptr[FP8_ROLES] = {c->g.A, c->g.B, c->g.D};
  uint64_t hash = group_hash(c);

  pthread_mutex_lock(&x->lock);
  if (x->retired) {
    pthread_mutex_unlock(&x->lock);
    return "the call's context was replaced by a new one at its address while the call looked it up";
  }
  int backward = thread_is_backward(x);
  if (backward) x->backward_since_epoch = 1;
  else if (x->backward_since_epoch) epoch_advance(x);
  fp8_group *g = group_get(x, hash);
  if (!g) {
    pthread_mutex_unlock(&x->lock);
    return "out of host memory for the fp8 site table";
  }
  if (g->epoch != x->epoch) {
    g->round++;
    g->pos = 0;
    g->epoch = x->epoch;
  }
  fp8_site *s = group_match(g, c, ptr, backward);
  if (s) {
    if (site_touch(x, s, ptr) && !backward) {
      if (!x->anchor) x->anchor = s;
      if (x->anchor == s) {
        epoch_advance(x);
        g->epoch = x->epoch;
      }
    }
  } else {
    why = site_create(x, g, c, capturing, backward, ptr, &s);
    if (why) {
      group_drop_if_empty(x, g);
      pthread_mutex_unlock(&x->lock);
      return why;
    }
  }
  if (!backward) {
    seen_put(x, c->g.A);
    seen_put(x, c->g.B);
  } else {
    seen_take(x, c->g.A);
    seen_take(x, c->g.B);
  }
  s->busy++;
  if (capturing) s->pinned = 1;
  c->site = s->id;
  pthread_mutex_unlock(&x->lock);

  pthread_mutex_lock(&s->mu);
  why = site_prepare(x, s, c, capturing);
  if (why) {
    pthread_mutex_unlock(&s->mu);
    pthread_mutex_lock(&x->lock);
    int gone = site_unhold_locked(x, s);
    pthread_mutex_unlock(&x->lock);
    if (gone) site_free(s);
    return why;
  }
  u->site = s;
  u->id = s->id;
  u->ring[0] = (gs_fp8_ring *)(uintptr_t)s->slot->ptr;
  u->ring[1] = (gs_fp8_ring *)(uintptr_t)(s->slot->ptr + ring_stride());
  u->fmt[0] = s->fmt[0];
  u->fmt[1] = s->fmt[1];
  u->gradient[0] = s->gradient[0];
  u->gradient[1] = s->gradient[1];
  u->parity = s->parity;
  u->needs_amax_init = !s->measured;
  return NULL;
}

/* With the slot's site held, after the call's last enqueue: on a
 * per-thread default stream, record the slot's event there, so a later
 * thread taking the site over (this one exited: group_match) can order
 * after this use (order_after_slot) and keep the ring and its history.
 * Only this thread can record on its per-thread stream. A failure, or a
 * use under capture (an event recorded there is a captured one), leaves
 * the mark site_prepare voided: the next thread starts over on a fresh
 * ring. No context push: the per-thread stream is the current context's
 * (the call's context, cuStreamGetCtx's answer for it), and so is the
 * event. */
static void slot_mark_done(fp8_slot *sl, int capturing) {
  if (sl->stream != CU_STREAM_PER_THREAD || capturing) return;
  if (!gs_sys.cuEventCreate || !gs_sys.cuEventRecord || !gs_sys.cuStreamWaitEvent) return;
  CUresult r = CUDA_SUCCESS;
  if (!sl->done) {
    CUevent ev = NULL;
    r = GS_CALL(cuEventCreate, &ev, CU_EVENT_DISABLE_TIMING);
    if (r == CUDA_SUCCESS) sl->done = ev;
  }
  if (r == CUDA_SUCCESS) r = GS_CALL(cuEventRecord, sl->done, CU_STREAM_PER_THREAD);
  sl->done_valid = r == CUDA_SUCCESS;
}

void fp8_site_release(fp8_use *u, unsigned ran) {
  fp8_site *s = u->site;
  if (!s) return;
  if (ran & FP8_RAN_AMAX_INIT) s->measured = 1;
  /* During capture the parity stays: every replay must quantize with the
   * same slot, which the route refreshes after its GEMM. */
  if ((ran & FP8_RAN_QUANTIZE) && !u->capturing) s->parity ^= 1;
  fp8_ctx *x = s->owner;
  slot_mark_done(s->slot, u->capturing);
  pthread_mutex_unlock(&s->mu);
  pthread_mutex_lock(&x->lock);
  int gone = site_unhold_locked(x, s);
  pthread_mutex_unlock(&x->lock);
  if (gone) site_free(s);
  u->site = NULL;
}

size_t fp8_sites_live(void *ctx) {
  fp8_ctx *x = (fp8_ctx *)ctx_table_newest(&ctxs, ctx);
  if (!x) return 0;
  pthread_mutex_lock(&x->lock);
  size_t n = x->live;
  pthread_mutex_unlock(&x->lock);
  return n;
}

uint64_t fp8_sites_ring_bytes(void *ctx) {
  fp8_ctx *x = (fp8_ctx *)ctx_table_newest(&ctxs, ctx);
  if (!x) return 0;
  pthread_mutex_lock(&x->lock);
  uint64_t n = x->ring_bytes;
  pthread_mutex_unlock(&x->lock);
  return n;
}

uint64_t fp8_sites_epoch(void *ctx) {
  fp8_ctx *x = (fp8_ctx *)ctx_table_newest(&ctxs, ctx);
  if (!x) return 0;
  pthread_mutex_lock(&x->lock);
  uint64_t e = x->epoch;
  pthread_mutex_unlock(&x->lock);
  return e;
}
