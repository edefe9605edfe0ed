/* ctx_table.h: state kept per CUDA context (ctx_table.c). The contract:
 *
 *  - A table has a fixed number of slots; a slot holds one entry, the
 *    user's struct, which begins with a ctx_entry: the context's address
 *    and its cuCtxGetId id (0 where the driver has none).
 *  - Lookups take no lock: a slot is read with an acquire load, an entry
 *    is found by address AND id, so a new context at an old address (a
 *    primary context released and retained, cuCtxDestroy + cuCtxCreate)
 *    never sees the old context's value.
 *  - Writers serialise on the table's lock, which may be held while the
 *    value is made (a module load, cublasLtCreate); an entry is made whole,
 *    then published with a release store, and never changed afterwards
 *    except under the user's own lock.
 *  - One slot per address: a new id there takes the old entry's slot. When
 *    every slot is taken, a context that is gone (cuCtxGetId, through
 *    gs_sys, refuses its address or answers another id) gives its slot.
 *  - A replaced entry goes to the table's release callback; without one it
 *    is abandoned: never freed (a reader may hold it), kept reachable
 *    through the new entry's `older`, and its device state never torn
 *    down (it went with its context).
 * Why, and what each table keeps: docs/architecture.md, "The per-context
 * table". */
#ifndef GEMMSHIM_CTX_TABLE_H
#define GEMMSHIM_CTX_TABLE_H

#include <pthread.h>
#include <stdatomic.h>

/* The head of every entry; ctx_table_publish fills it. */
typedef struct ctx_entry {
  void *ctx;                      /* the context's address (CUcontext) */
  unsigned long long id;          /* its cuCtxGetId, 0 without one */
  const struct ctx_entry *older;  /* the entry this one replaced, or NULL */
} ctx_entry;

/* Called under the table's lock, after the new entry is published, with
 * the entry it replaced (or one ctx_table_sweep took out); it owns it. */
typedef void ctx_release_fn(ctx_entry *old);

typedef struct ctx_table {
  int size;
  _Atomic(ctx_entry *) *slot; /* size slots, filled in order: the first NULL ends a scan */
  ctx_release_fn *release;    /* NULL: replaced entries are abandoned */
  pthread_mutex_t lock;
} ctx_table;

/* A static table `name` of n slots. */
#define CTX_TABLE_DEFINE(name, n, release_fn)                                   \
  static _Atomic(ctx_entry *) name##_slots[n];                                  \
  static ctx_table name = {(n), name##_slots, (release_fn), PTHREAD_MUTEX_INITIALIZER}

/* The entry of (ctx, id), or NULL. No lock, no driver call. */
ctx_entry *ctx_table_find(ctx_table *t, const void *ctx, unsigned long long id);
/* The entry at address ctx, whatever its id (the newest context there). */
ctx_entry *ctx_table_newest(ctx_table *t, const void *ctx);

void ctx_table_lock(ctx_table *t);
void ctx_table_unlock(ctx_table *t);
/* Under the lock, for a context not in the table (find it first): the slot
 * its entry goes to, with *old the entry it will replace (NULL: a free
 * slot): the one at the same address, else a gone context's when no slot
 * is free. -1: every slot holds a live context (or one that cannot be told
 * gone). */
int ctx_table_place(ctx_table *t, const void *ctx, ctx_entry **old);
/* Under the lock: e, for (ctx, id), into slot (from ctx_table_place);
 * the entry there before is released or abandoned. */
void ctx_table_publish(ctx_table *t, int slot, ctx_entry *e, void *ctx, unsigned long long id);
/* Under the lock, for a table with a release callback: every entry whose
 * context is gone is taken out and released; its slot is free again.
 * Returns how many. One cuCtxGetId per entry. */
int ctx_table_sweep(ctx_table *t);
/* Whether e's context is gone (see the top). */
int ctx_table_gone(const ctx_entry *e);

/* In a fork's child (the forking thread alone): a fresh lock; with forget,
 * every entry dropped (the parent's contexts are not the child's). */
void ctx_table_after_fork_child(ctx_table *t, int forget);

#endif
