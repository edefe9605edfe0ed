/* The per-context table (shim/base/ctx_table.c) over the CPU stand-in's
 * libcuda, whose contexts behave as a driver's do: cuCtxCreate after
 * cuCtxDestroy hands out the destroyed context's address again with a new
 * cuCtxGetId id, and cuCtxGetId on a destroyed context answers
 * CUDA_ERROR_CONTEXT_IS_DESTROYED. The CUDA Driver API promises only that
 * the id "is unique for the life of the program" (cuda.h, cuCtxGetId), so
 * the table must key by address and id: a new context at an old address
 * never sees the old value. Checked one step at a time, over thousands of
 * contexts made and destroyed with the table's slots bounded, and with
 * threads looking up and inserting while others destroy and create
 * contexts (make tsan runs it under ThreadSanitizer). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "ctx_table.h"
#include "standin_driver.h"
#include "sys.h"

static CUresult (*ctx_create)(CUcontext *, CUctxCreateParams *, unsigned, CUdevice);
static CUresult (*ctx_destroy)(CUcontext);
static CUresult (*real_get_id)(CUcontext, unsigned long long *);
static _Atomic unsigned long long get_id_calls;

static CUresult counting_get_id(CUcontext c, unsigned long long *id) {
  atomic_fetch_add(&get_id_calls, 1);
  return real_get_id(c, id);
}

static int setup(void **state) {
  if (standin_driver_load("test_ctx_table", "9.0")) return -1;
  *(void **)&ctx_create = dlsym(RTLD_DEFAULT, "cuCtxCreate_v4");
  *(void **)&ctx_destroy = dlsym(RTLD_DEFAULT, "cuCtxDestroy_v2");
  real_get_id = gs_sys.cuCtxGetId;
  gs_sys.cuCtxGetId = counting_get_id;
  return ctx_create && ctx_destroy && real_get_id ? 0 : -1;
}

/* A context of device 0 that is not left current on this thread. */
static CUcontext new_ctx(void) {
  CUcontext c, popped;
  assert_int_equal(ctx_create(&c, NULL, 0, 0), CUDA_SUCCESS);
  assert_int_equal(gs_sys.cuCtxPopCurrent_v2(&popped), CUDA_SUCCESS);
  return c;
}

static unsigned long long id_of(CUcontext c) {
  unsigned long long id = 0;
  assert_int_equal(real_get_id(c, &id), CUDA_SUCCESS);
  return id;
}

/* What the tests keep per context: who it was made for. */
typedef struct value {
  ctx_entry head;
  void *made_for;
  unsigned long long made_for_id;
  struct value *next_made; /* every value this test made, to free at the end */
} value;

static value *made;
static pthread_mutex_t made_lock = PTHREAD_MUTEX_INITIALIZER;
static int releases;
static const ctx_entry *last_released;

static value *value_new(void *ctx, unsigned long long id) {
  value *v = calloc(1, sizeof *v);
  assert_non_null(v);
  v->made_for = ctx;
  v->made_for_id = id;
  pthread_mutex_lock(&made_lock);
  v->next_made = made;
  made = v;
  pthread_mutex_unlock(&made_lock);
  return v;
}

static void count_release(ctx_entry *old) {
  releases++;
  last_released = old;
}

/* As a user does it: found without the lock, else made under it (*old:
 * the entry its slot held, when replaced). NULL when every slot holds a
 * live context. */
static value *get_replacing(ctx_table *t, void *ctx, unsigned long long id, ctx_entry **old) {
  *old = NULL;
  value *v = (value *)ctx_table_find(t, ctx, id);
  if (v) return v;
  ctx_table_lock(t);
  v = (value *)ctx_table_find(t, ctx, id);
  int slot = v ? -1 : ctx_table_place(t, ctx, old);
  if (slot >= 0) {
    v = value_new(ctx, id);
    ctx_table_publish(t, slot, &v->head, ctx, id);
  }
  ctx_table_unlock(t);
  return v;
}

static value *get(ctx_table *t, void *ctx, unsigned long long id) {
  ctx_entry *old;
  return get_replacing(t, ctx, id, &old);
}

static void check_value(const value *v, void *ctx, unsigned long long id) {
  assert_non_null(v);
  assert_ptr_equal(v->head.ctx, ctx);
  assert_int_equal(v->head.id, id);
  assert_ptr_equal(v->made_for, ctx);
  assert_int_equal(v->made_for_id, id);
}

/* ---- one step at a time -------------------------------------------------- */
CTX_TABLE_DEFINE(small, 3, count_release);

static void test_address_and_id(void **state) {
  CUcontext a = new_ctx(), b = new_ctx();
  unsigned long long ida = id_of(a), idb = id_of(b);
  releases = 0;
  value *va = get(&small, a, ida), *vb = get(&small, b, idb);
  check_value(va, a, ida);
  check_value(vb, b, idb);
  /* Lookups make no driver call. */
  unsigned long long calls = atomic_load(&get_id_calls);
  for (int i = 0; i < 100; i++) {
    assert_ptr_equal(ctx_table_find(&small, a, ida), &va->head);
    assert_ptr_equal(ctx_table_find(&small, b, idb), &vb->head);
  }
  assert_int_equal(atomic_load(&get_id_calls), calls);
  assert_null(ctx_table_find(&small, a, idb));
  assert_null(ctx_table_find(&small, NULL, 0));
  /* a destroyed; a new context at its address, with a new id. */
  assert_int_equal(ctx_destroy(a), CUDA_SUCCESS);
  CUcontext a2 = new_ctx();
  assert_ptr_equal(a2, a);
  unsigned long long ida2 = id_of(a2);
  assert_true(ida2 != ida);
  assert_null(ctx_table_find(&small, a2, ida2));
  assert_ptr_equal(ctx_table_newest(&small, a2), &va->head); /* the address's entry is still the old one */
  value *va2 = get(&small, a2, ida2);
  check_value(va2, a2, ida2);
  assert_ptr_equal(va2->head.older, &va->head);
  assert_int_equal(releases, 1); /* the old entry went to the callback */
  assert_ptr_equal(last_released, &va->head);
  assert_null(ctx_table_find(&small, a, ida));
  assert_ptr_equal(ctx_table_find(&small, b, idb), &vb->head);
  /* One slot per address: a third context fits, a fourth live one does not. */
  CUcontext c = new_ctx(), d = new_ctx();
  value *vc = get(&small, c, id_of(c));
  check_value(vc, c, id_of(c));
  calls = atomic_load(&get_id_calls);
  assert_null(get(&small, d, id_of(d)));
  assert_int_equal(atomic_load(&get_id_calls), calls + 3); /* one question per slot */
  /* b gone: its slot is d's. */
  assert_int_equal(ctx_destroy(b), CUDA_SUCCESS);
  value *vd = get(&small, d, id_of(d));
  check_value(vd, d, id_of(d));
  assert_ptr_equal(vd->head.older, &vb->head);
  assert_int_equal(releases, 2);
  assert_ptr_equal(ctx_table_find(&small, a2, ida2), &va2->head);
  assert_ptr_equal(ctx_table_find(&small, c, id_of(c)), &vc->head);
  /* A sweep takes out exactly the gone ones; the next context takes the
   * freed slot and every other stays found. */
  assert_int_equal(ctx_table_sweep(&small), 0);
  assert_int_equal(ctx_destroy(a2), CUDA_SUCCESS);
  ctx_table_lock(&small);
  assert_int_equal(ctx_table_sweep(&small), 1);
  ctx_table_unlock(&small);
  assert_int_equal(releases, 3);
  assert_ptr_equal(last_released, &va2->head);
  assert_null(ctx_table_newest(&small, a2));
  assert_ptr_equal(ctx_table_find(&small, c, id_of(c)), &vc->head);
  assert_ptr_equal(ctx_table_find(&small, d, id_of(d)), &vd->head);
  CUcontext e = new_ctx(); /* a2's address again */
  ctx_entry *old = (ctx_entry *)1;
  ctx_table_lock(&small);
  assert_int_equal(ctx_table_place(&small, e, &old), 0);
  ctx_table_unlock(&small);
  assert_ptr_equal(e, a2);
  assert_null(old); /* a free slot: nothing to release */
  value *ve = get(&small, e, id_of(e));
  check_value(ve, e, id_of(e));
  assert_null(ve->head.older);
  assert_int_equal(releases, 3);
  assert_int_equal(ctx_destroy(c), CUDA_SUCCESS);
  assert_int_equal(ctx_destroy(d), CUDA_SUCCESS);
  assert_int_equal(ctx_destroy(e), CUDA_SUCCESS);
}

/* Without cuCtxGetId (drivers before CUDA 12.0) every id is 0 and no
 * context can be told gone: the table keeps what it has; a new context at
 * an old address is taken for the old one (the same address, the same
 * key), and a full table stays full. No sweep frees anything. */
CTX_TABLE_DEFINE(no_ids, 2, count_release);

static void test_without_context_ids(void **state) {
  CUcontext a = new_ctx(), b = new_ctx(), c = new_ctx();
  gs_sys.cuCtxGetId = NULL;
  releases = 0;
  value *va = get(&no_ids, a, 0);
  check_value(va, a, 0);
  check_value(get(&no_ids, b, 0), b, 0);
  assert_int_equal(ctx_destroy(b), CUDA_SUCCESS);
  assert_null(get(&no_ids, c, 0));
  ctx_table_lock(&no_ids);
  assert_int_equal(ctx_table_sweep(&no_ids), 0);
  ctx_table_unlock(&no_ids);
  assert_int_equal(releases, 0);
  gs_sys.cuCtxGetId = counting_get_id;
  assert_int_equal(ctx_destroy(a), CUDA_SUCCESS);
  assert_int_equal(ctx_destroy(c), CUDA_SUCCESS);
}

/* A cuCtxGetId that fails for another reason than the context's end (an
 * injected fault: CUDA_ERROR_UNKNOWN) tells nothing: a full table of live
 * contexts keeps them all, nothing is released, the newcomer gets no slot. */
CTX_TABLE_DEFINE(faulted, 2, count_release);

static void test_failed_query_is_not_gone(void **state) {
  CUcontext a = new_ctx(), b = new_ctx(), c = new_ctx();
  releases = 0;
  check_value(get(&faulted, a, id_of(a)), a, id_of(a));
  check_value(get(&faulted, b, id_of(b)), b, id_of(b));
  gs_fault_arm(GS_SYS_cuCtxGetId, 1, 1);
  assert_null(get(&faulted, c, 0x7777));
  ctx_table_lock(&faulted);
  assert_int_equal(ctx_table_sweep(&faulted), 0);
  ctx_table_unlock(&faulted);
  gs_fault_clear();
  assert_int_equal(releases, 0);
  check_value((value *)ctx_table_find(&faulted, a, id_of(a)), a, id_of(a));
  check_value((value *)ctx_table_find(&faulted, b, id_of(b)), b, id_of(b));
  /* Once b is destroyed, its answer says so and its slot goes to c. */
  unsigned long long ida = id_of(a), idc = id_of(c);
  assert_int_equal(ctx_destroy(b), CUDA_SUCCESS);
  check_value(get(&faulted, c, idc), c, idc);
  assert_int_equal(releases, 1);
  check_value((value *)ctx_table_find(&faulted, a, ida), a, ida);
  assert_int_equal(ctx_destroy(a), CUDA_SUCCESS);
  assert_int_equal(ctx_destroy(c), CUDA_SUCCESS);
}

/* ---- churn ---------------------------------------------------------------- */
/* Thousands of contexts made and destroyed, at addresses the stand-in
 * hands out again: POOL live at a time, of which at most SLOTS are in the
 * table (the contexts a program is using; the others live on without
 * calls). Each step checks every live context in the table against its
 * own value, and every live context not in it: its address may hold a
 * dead context's entry, which must not be found for it. A context whose
 * address never held another still finds a slot: a bounded table gives a
 * gone context's slot away. */
#define SLOTS 8
#define POOL 24
CTX_TABLE_DEFINE(churned, SLOTS, count_release);

static uint64_t rng = 0x63747874626c65ull;
static unsigned below(unsigned n) {
  uint64_t z = (rng += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return (unsigned)((z ^ (z >> 31)) % n);
}

static void test_churn_bounded(void **state) {
  enum { STEPS = 6000 };
  CUcontext live[POOL] = {0};
  unsigned long long ids[POOL] = {0};
  int inserted[POOL] = {0}, in_table = 0, creates = 0, reused_addresses = 0, gone_slots_given = 0;
  releases = 0;
  for (int step = 0; step < STEPS; step++) {
    unsigned i = below(POOL);
    if (!live[i]) {
      CUcontext c = new_ctx();
      for (unsigned j = 0; j < POOL; j++) assert_ptr_not_equal(live[j], c);
      ctx_entry *there = ctx_table_newest(&churned, c);
      if (there) reused_addresses++;
      live[i] = c;
      ids[i] = id_of(c);
      creates++;
      /* Never the value of the context that had the address before. */
      assert_null(ctx_table_find(&churned, c, ids[i]));
    } else if (!inserted[i] && in_table < SLOTS && below(2)) {
      ctx_entry *old;
      int before = releases;
      check_value(get_replacing(&churned, live[i], ids[i], &old), live[i], ids[i]);
      if (old) {
        assert_int_equal(releases, before + 1);
        assert_ptr_equal(last_released, old);
        assert_true(old->id != ids[i]);
        if (old->ctx != (void *)live[i]) gone_slots_given++;
      }
      inserted[i] = 1;
      in_table++;
    } else {
      assert_int_equal(ctx_destroy(live[i]), CUDA_SUCCESS);
      live[i] = NULL;
      in_table -= inserted[i];
      inserted[i] = 0;
    }
    for (unsigned j = 0; j < POOL; j++) {
      if (!live[j]) continue;
      const value *v = (const value *)ctx_table_find(&churned, live[j], ids[j]);
      if (inserted[j]) check_value(v, live[j], ids[j]);
      else assert_null(v);
    }
  }
  print_message("churn: %d contexts made, %d at a dead context's address, %d gone slots given, %d released\n",
                creates, reused_addresses, gone_slots_given, releases);
  /* The churn covered what it is for. */
  assert_true(creates > 2000);
  assert_true(reused_addresses > 500);
  assert_true(gone_slots_given > 100);
  assert_true(releases > 1000);
  for (unsigned j = 0; j < POOL; j++)
    if (live[j]) assert_int_equal(ctx_destroy(live[j]), CUDA_SUCCESS);
}

/* ---- threads ---------------------------------------------------------------- */
/* READERS threads look contexts up (and insert them where missing) while
 * CHURNERS threads destroy them and make new ones, often at the same
 * addresses. A value found is always the one made for the context and id
 * looked up; values are never freed while the threads run (replaced ones
 * are abandoned, as the shim's are). */
#define LIVE 6
#define READERS 4
#define CHURNERS 2
static _Atomic(CUcontext) shared_live[LIVE];
static _Atomic int churning;
static _Atomic long found_count, missing_count, full_count;
CTX_TABLE_DEFINE(shared, 16, NULL);

static void *reader(void *arg) {
  uint64_t r = (uintptr_t)arg * 0x9E3779B97F4A7C15ull + 1;
  while (atomic_load(&churning)) {
    r = r * 6364136223846793005ull + 1442695040888963407ull;
    CUcontext c = atomic_load(&shared_live[(r >> 33) % LIVE]);
    unsigned long long id;
    if (!c || gs_sys.cuCtxGetId(c, &id) != CUDA_SUCCESS) continue; /* destroyed meanwhile */
    const value *v = (const value *)ctx_table_find(&shared, c, id);
    if (v) {
      atomic_fetch_add(&found_count, 1);
    } else {
      atomic_fetch_add(&missing_count, 1);
      v = get(&shared, c, id);
      if (!v) {
        atomic_fetch_add(&full_count, 1);
        continue;
      }
    }
    /* Made for this context and id, published whole. */
    if (v->head.ctx != (void *)c || v->head.id != id || v->made_for != (void *)c || v->made_for_id != id) abort();
  }
  return NULL;
}

static void *churner(void *arg) {
  uintptr_t k = (uintptr_t)arg;
  for (int round = 0; round < 400; round++) {
    unsigned i = (unsigned)((k + (uintptr_t)round * CHURNERS) % LIVE);
    CUcontext old = atomic_exchange(&shared_live[i], NULL);
    if (old && ctx_destroy(old) != CUDA_SUCCESS) abort();
    CUcontext c, popped;
    if (ctx_create(&c, NULL, 0, 0) != CUDA_SUCCESS || gs_sys.cuCtxPopCurrent_v2(&popped) != CUDA_SUCCESS) abort();
    atomic_store(&shared_live[i], c);
    if (round % 16 == 0) usleep(100);
  }
  return NULL;
}

static void test_threads(void **state) {
  pthread_t r[READERS], c[CHURNERS];
  for (int i = 0; i < LIVE; i++) atomic_store(&shared_live[i], new_ctx());
  atomic_store(&churning, 1);
  for (uintptr_t i = 0; i < READERS; i++) assert_int_equal(pthread_create(&r[i], NULL, reader, (void *)i), 0);
  for (uintptr_t i = 0; i < CHURNERS; i++) assert_int_equal(pthread_create(&c[i], NULL, churner, (void *)i), 0);
  for (int i = 0; i < CHURNERS; i++) assert_int_equal(pthread_join(c[i], NULL), 0);
  atomic_store(&churning, 0);
  for (int i = 0; i < READERS; i++) assert_int_equal(pthread_join(r[i], NULL), 0);
  print_message("threads: %ld found, %ld missing\n", atomic_load(&found_count), atomic_load(&missing_count));
  /* Twice as many slots as live contexts: gone ones always give theirs. */
  assert_int_equal(atomic_load(&full_count), 0);
  assert_true(atomic_load(&found_count) > 0);
  assert_true(atomic_load(&missing_count) > 0);
  /* Afterwards every live context is found with its own value. */
  for (int i = 0; i < LIVE; i++) {
    CUcontext cx = atomic_load(&shared_live[i]);
    check_value(get(&shared, cx, id_of(cx)), cx, id_of(cx));
    check_value((const value *)ctx_table_find(&shared, cx, id_of(cx)), cx, id_of(cx));
    assert_int_equal(ctx_destroy(cx), CUDA_SUCCESS);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_address_and_id),
      cmocka_unit_test(test_without_context_ids),
      cmocka_unit_test(test_failed_query_is_not_gone),
      cmocka_unit_test(test_churn_bounded),
      cmocka_unit_test(test_threads),
  };
  int failed = cmocka_run_group_tests(tests, setup, NULL);
  for (value *v = made, *next; v; v = next) {
    next = v->next_made;
    free(v);
  }
  return failed;
}
