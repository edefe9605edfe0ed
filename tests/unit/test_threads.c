/* threads.c: thread numbers and exit. Expected behaviour from POSIX and
 * glibc: pthread_key_create's destructor runs at thread exit for a thread
 * whose value is not NULL (POSIX, pthread_key_create), before a joiner
 * returns from pthread_join (glibc nptl/pthread_create.c, start_thread:
 * __nptl_deallocate_tsd runs before the thread is marked finished); a
 * joined thread's pthread_t may be handed to the next thread (so the shim
 * numbers threads itself); a forked child has the forking thread alone
 * (POSIX, fork). */
#define _GNU_SOURCE
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "base.h"
#include "sys.h"

typedef struct probe {
  gs_thread t;
  pthread_t pt;
  int arm_setspecific;
  pthread_barrier_t *hold; /* when set: wait there twice (numbered, then let go) */
} probe;

static void *probe_run(void *arg) {
  probe *p = arg;
  if (p->arm_setspecific) gs_fault_arm(GS_SYS_pthread_setspecific, 1, 0);
  p->t = gs_thread_self();
  if (p->arm_setspecific) gs_fault_clear();
  if (p->hold) {
    pthread_barrier_wait(p->hold);
    pthread_barrier_wait(p->hold);
  }
  return NULL;
}

static void probe_start(probe *p) { assert_int_equal(pthread_create(&p->pt, NULL, probe_run, p), 0); }

/* Runs first: pthread_key_create is called once a process, at the first
 * number, so its failure is tried in a child. */
static void test_key_failure_means_never_exited(void **unused) {
  (void)unused;
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    gs_fault_arm(GS_SYS_pthread_key_create, 1, 1);
    probe p = {0};
    if (pthread_create(&p.pt, NULL, probe_run, &p)) _exit(2);
    pthread_join(p.pt, NULL);
    unsigned long long calls = 0, failed = 0;
    gs_fault_counts(GS_SYS_pthread_key_create, &calls, &failed);
    /* reached and failed; the thread is not followed and never reads as exited */
    _exit(failed == 1 && p.t.number != 0 && p.t.slot == -1 && !gs_thread_exited(p.t) ? 0 : 1);
  }
  int st = 0;
  assert_int_equal(waitpid(pid, &st, 0), pid);
  assert_true(WIFEXITED(st));
  assert_int_equal(WEXITSTATUS(st), 0);
}

static void test_numbers_never_reused_and_exit_seen(void **unused) {
  (void)unused;
  gs_thread me = gs_thread_self();
  assert_true(me.number != 0);
  assert_true(me.slot >= 0);
  assert_int_equal(gs_thread_number(), me.number);
  assert_false(gs_thread_exited(me));

  pthread_barrier_t hold;
  pthread_barrier_init(&hold, NULL, 2);
  probe a = {.hold = &hold};
  probe_start(&a);
  pthread_barrier_wait(&hold); /* a has its number and waits */
  assert_true(a.t.number != 0 && a.t.number != me.number);
  assert_true(a.t.slot >= 0 && a.t.slot != me.slot);
  assert_false(gs_thread_exited(a.t)); /* alive */
  pthread_barrier_wait(&hold);
  pthread_join(a.pt, NULL);
  assert_true(gs_thread_exited(a.t)); /* exited before the join returned */

  probe b = {0};
  probe_start(&b);
  pthread_join(b.pt, NULL);
  assert_true(b.t.number > a.t.number); /* a new number, whatever pthread_t it got */
  assert_true(gs_thread_exited(b.t));
  assert_true(gs_thread_exited(a.t)); /* a slot reused by b does not bring a back */
  assert_false(gs_thread_exited(me));
  pthread_barrier_destroy(&hold);
}

/* A thread whose exit cannot be followed never reads as exited. */
static void test_setspecific_failure_means_never_exited(void **unused) {
  (void)unused;
  probe p = {.arm_setspecific = 1};
  probe_start(&p);
  pthread_join(p.pt, NULL);
  assert_true(p.t.number != 0);
  assert_int_equal(p.t.slot, -1);
  assert_false(gs_thread_exited(p.t));
}

/* In a forked child, the parent's other threads are gone; the forking
 * thread is not. The parent's view is unchanged. */
static void test_fork_child_sees_other_threads_gone(void **unused) {
  (void)unused;
  gs_thread me = gs_thread_self();
  pthread_barrier_t hold;
  pthread_barrier_init(&hold, NULL, 2);
  probe a = {.hold = &hold};
  probe_start(&a);
  pthread_barrier_wait(&hold);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) _exit(gs_thread_exited(a.t) && !gs_thread_exited(me) && gs_thread_self().number == me.number ? 0 : 1);
  int st = 0;
  assert_int_equal(waitpid(pid, &st, 0), pid);
  assert_true(WIFEXITED(st));
  assert_int_equal(WEXITSTATUS(st), 0);
  assert_false(gs_thread_exited(a.t));
  pthread_barrier_wait(&hold);
  pthread_join(a.pt, NULL);
  assert_true(gs_thread_exited(a.t));
  pthread_barrier_destroy(&hold);
}

/* The same from a thread that never asked for its number (its slot field
 * reads 0, a slot like any other), with the live thread on slot 0. */
typedef struct forker {
  gs_thread holder;
  int child_ok;
} forker;

static void *fork_unnumbered(void *arg) {
  forker *f = arg;
  pid_t pid = fork();
  if (pid == 0) _exit(gs_thread_exited(f->holder) ? 0 : 1);
  int st = 0;
  f->child_ok = pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0;
  return NULL;
}

static void test_fork_from_unnumbered_thread_frees_slot_zero(void **unused) {
  (void)unused;
  pthread_barrier_t hold;
  pthread_barrier_init(&hold, NULL, 2);
  probe a = {.hold = &hold};
  /* numbers hash to slots one to one: within 4096 numbers one lands on 0 */
  for (int tries = 0;; tries++) {
    assert_true(tries < 2 * 4096);
    probe_start(&a);
    pthread_barrier_wait(&hold);
    if (a.t.slot == 0) break;
    pthread_barrier_wait(&hold);
    pthread_join(a.pt, NULL);
  }
  forker f = {a.t, 0};
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, fork_unnumbered, &f), 0);
  pthread_join(t, NULL);
  assert_true(f.child_ok);
  assert_false(gs_thread_exited(a.t));
  pthread_barrier_wait(&hold);
  pthread_join(a.pt, NULL);
  pthread_barrier_destroy(&hold);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_key_failure_means_never_exited),
      cmocka_unit_test(test_numbers_never_reused_and_exit_seen),
      cmocka_unit_test(test_setspecific_failure_means_never_exited),
      cmocka_unit_test(test_fork_child_sees_other_threads_gone),
      cmocka_unit_test(test_fork_from_unnumbered_thread_frees_slot_zero),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
