/* ctx_table.c: the per-context table (contract: ctx_table.h; design:
 * docs/architecture.md, "The per-context table").
 *
 * Slots fill from the first and never go back to NULL, so a lookup scans
 * from slot 0 to the first NULL and stops at its address's slot: as short
 * as the number of addresses the process used, usually one or two. A slot
 * a sweep empties holds `vacant` instead (no context's address), which the
 * scan passes over and the next placement takes. */
#include "ctx_table.h"

#include "sys.h"

static ctx_entry vacant;

ctx_entry *ctx_table_newest(ctx_table *t, const void *ctx) {
  if (!ctx) return NULL;
  for (int i = 0; i < t->size; i++) {
    ctx_entry *e = atomic_load_explicit(&t->slot[i], memory_order_acquire);
    if (!e) return NULL;
    if (e->ctx == ctx) return e;
  }
  return NULL;
}

ctx_entry *ctx_table_find(ctx_table *t, const void *ctx, unsigned long long id) {
  ctx_entry *e = ctx_table_newest(t, ctx);
  return e && e->id == id ? e : NULL;
}

void ctx_table_lock(ctx_table *t) { pthread_mutex_lock(&t->lock); }
void ctx_table_unlock(ctx_table *t) { pthread_mutex_unlock(&t->lock); }

/* cuda.h, cuCtxGetId: CUDA_ERROR_CONTEXT_IS_DESTROYED is among its
 * results, so a context's handle can be asked after its end, and a
 * released primary context's answers CUDA_ERROR_INVALID_CONTEXT; a handle
 * that now names another context answers with another id (ids are "unique
 * for the life of the program"). Those say the context is gone. Any other
 * failure (the driver shutting down, an injected fault) says nothing about
 * it: kept, since giving a live context's slot away would tear its state
 * from under it. Without cuCtxGetId (before CUDA 12.0): kept. */
int ctx_table_gone(const ctx_entry *e) {
  unsigned long long now = 0;
  if (!gs_sys.cuCtxGetId) return 0;
  CUresult r = GS_CALL(cuCtxGetId, (CUcontext)e->ctx, &now);
  if (r == CUDA_SUCCESS) return now != e->id;
  return r == CUDA_ERROR_CONTEXT_IS_DESTROYED || r == CUDA_ERROR_INVALID_CONTEXT;
}

int ctx_table_place(ctx_table *t, const void *ctx, ctx_entry **old) {
  int free_at = -1;
  *old = NULL;
  for (int i = 0; i < t->size; i++) {
    ctx_entry *e = atomic_load_explicit(&t->slot[i], memory_order_relaxed);
    if (!e) {
      if (free_at < 0) free_at = i;
      break;
    }
    if (e->ctx == ctx) {
      *old = e;
      return i;
    }
    if (e == &vacant && free_at < 0) free_at = i;
  }
  if (free_at >= 0) return free_at;
  /* Full: a program that made and destroyed more contexts than the table
   * holds, at addresses the driver did not hand out again. */
  for (int i = 0; i < t->size; i++) {
    ctx_entry *e = atomic_load_explicit(&t->slot[i], memory_order_relaxed);
    if (ctx_table_gone(e)) {
      *old = e;
      return i;
    }
  }
  return -1;
}

void ctx_table_publish(ctx_table *t, int slot, ctx_entry *e, void *ctx, unsigned long long id) {
  ctx_entry *old = atomic_load_explicit(&t->slot[slot], memory_order_relaxed);
  if (old == &vacant) old = NULL;
  e->ctx = ctx;
  e->id = id;
  e->older = old;
  atomic_store_explicit(&t->slot[slot], e, memory_order_release);
  if (old && t->release) t->release(old);
}

int ctx_table_sweep(ctx_table *t) {
  int n = 0;
  if (!t->release) return 0; /* abandoned entries must stay reachable */
  for (int i = 0; i < t->size; i++) {
    ctx_entry *e = atomic_load_explicit(&t->slot[i], memory_order_relaxed);
    if (!e) break;
    if (e == &vacant || !ctx_table_gone(e)) continue;
    atomic_store_explicit(&t->slot[i], &vacant, memory_order_release);
    t->release(e);
    n++;
  }
  return n;
}

void ctx_table_after_fork_child(ctx_table *t, int forget) {
  pthread_mutex_init(&t->lock, NULL);
  if (forget)
    for (int i = 0; i < t->size; i++) atomic_store_explicit(&t->slot[i], NULL, memory_order_relaxed);
}
