/* cancel.c: the shim's code runs with cancellation disabled, and the thread
 * gets back the state it had. Expected behaviour from POSIX
 * (pthread_setcancelstate: the old state is returned, a request made while
 * cancellation is disabled stays pending until it is enabled again, and
 * acts at the next cancellation point; pthreads(7): usleep/nanosleep and
 * pthread_testcancel are cancellation points). */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "shim.h"
#include "sys.h"

static int current_state(void) {
  int old;
  assert_int_equal(pthread_setcancelstate(PTHREAD_CANCEL_ENABLE, &old), 0);
  assert_int_equal(pthread_setcancelstate(old, NULL), 0);
  return old;
}

static void test_enter_disables_leave_restores(void **unused) {
  (void)unused;
  assert_int_equal(current_state(), PTHREAD_CANCEL_ENABLE);
  errno = 1234;
  cancel_enter();
  assert_int_equal(errno, 1234);
  assert_int_equal(current_state(), PTHREAD_CANCEL_DISABLE);
  cancel_leave();
  assert_int_equal(errno, 1234);
  assert_int_equal(current_state(), PTHREAD_CANCEL_ENABLE);
  assert_int_equal(cancel_depth_for_tests(), 0);
}

/* A hooked call re-entered, a message from inside a call: an inner leave
 * must not enable cancellation while the outer code still runs. */
static void test_nested_pairs_restore_once(void **unused) {
  (void)unused;
  cancel_enter();
  cancel_enter();
  cancel_enter();
  cancel_leave();
  assert_int_equal(current_state(), PTHREAD_CANCEL_DISABLE);
  cancel_leave();
  assert_int_equal(current_state(), PTHREAD_CANCEL_DISABLE);
  cancel_leave();
  assert_int_equal(current_state(), PTHREAD_CANCEL_ENABLE);
  cancel_leave(); /* unmatched: changes nothing */
  assert_int_equal(current_state(), PTHREAD_CANCEL_ENABLE);
  assert_int_equal(cancel_depth_for_tests(), 0);
}

/* The program disabled it itself: it stays disabled after the shim's code. */
static void test_disabled_by_the_program_stays_disabled(void **unused) {
  (void)unused;
  int old;
  assert_int_equal(pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &old), 0);
  cancel_enter();
  cancel_leave();
  assert_int_equal(current_state(), PTHREAD_CANCEL_DISABLE);
  assert_int_equal(pthread_setcancelstate(old, NULL), 0);
}

/* An injected failure of the disabling call: the state stays the
 * program's, errno the caller's, and the leave changes nothing; the next
 * pair works again. */
static void test_failed_disable_changes_nothing(void **unused) {
  (void)unused;
  gs_fault_arm(GS_SYS_pthread_setcancelstate, 1, 0);
  errno = 77;
  cancel_enter();
  assert_int_equal(errno, 77);
  assert_int_equal(current_state(), PTHREAD_CANCEL_ENABLE);
  cancel_leave();
  assert_int_equal(current_state(), PTHREAD_CANCEL_ENABLE);
  gs_fault_clear();
  cancel_enter();
  assert_int_equal(current_state(), PTHREAD_CANCEL_DISABLE);
  cancel_leave();
  assert_int_equal(current_state(), PTHREAD_CANCEL_ENABLE);
}

/* A thread cancelled inside an enter/leave pair: the request waits through
 * a cancellation point there, and acts at the first one after the leave. */
static volatile int reached_sleep_end, reached_leave;
static pthread_barrier_t entered;

static void *cancelled_thread(void *arg) {
  (void)arg;
  cancel_enter();
  pthread_barrier_wait(&entered);
  struct timespec t = {0, 50 * 1000000L};
  while (nanosleep(&t, &t) != 0 && errno == EINTR) {} /* the main thread cancels meanwhile */
  reached_sleep_end = 1;
  cancel_leave();
  reached_leave = 1;
  pthread_testcancel();
  return NULL; /* not reached */
}

static void test_pending_request_acts_after_leave(void **unused) {
  (void)unused;
  pthread_barrier_init(&entered, NULL, 2);
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, cancelled_thread, NULL), 0);
  pthread_barrier_wait(&entered);
  assert_int_equal(pthread_cancel(t), 0);
  void *ret = NULL;
  assert_int_equal(pthread_join(t, &ret), 0);
  assert_ptr_equal(ret, PTHREAD_CANCELED);
  assert_true(reached_sleep_end);
  assert_true(reached_leave);
  pthread_barrier_destroy(&entered);
}

/* A thread of the asynchronous type cancelled while inside the shim ends
 * as a cancelled thread: pthread_join gives PTHREAD_CANCELED (POSIX,
 * pthread_join). glibc 2.36 acting on the request inside
 * pthread_setcancelstate ended it with a NULL result instead. */
static volatile int async_step;
static void *async_worker(void *unused) {
  (void)unused;
  pthread_setcanceltype(PTHREAD_CANCEL_ASYNCHRONOUS, NULL);
  cancel_enter();
  __atomic_store_n(&async_step, 1, __ATOMIC_RELEASE);
  while (__atomic_load_n(&async_step, __ATOMIC_ACQUIRE) != 2) {}
  cancel_leave(); /* the request acts here */
  return (void *)1;
}

static void test_asynchronous_thread_ends_cancelled(void **unused) {
  (void)unused;
  pthread_t t;
  async_step = 0;
  assert_int_equal(pthread_create(&t, NULL, async_worker, NULL), 0);
  while (__atomic_load_n(&async_step, __ATOMIC_ACQUIRE) != 1) {}
  assert_int_equal(pthread_cancel(t), 0);
  __atomic_store_n(&async_step, 2, __ATOMIC_RELEASE);
  void *result;
  assert_int_equal(pthread_join(t, &result), 0);
  if (result != PTHREAD_CANCELED) fail_msg("joined with %p, not PTHREAD_CANCELED", result);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_enter_disables_leave_restores),
      cmocka_unit_test(test_asynchronous_thread_ends_cancelled),
      cmocka_unit_test(test_nested_pairs_restore_once),
      cmocka_unit_test(test_disabled_by_the_program_stays_disabled),
      cmocka_unit_test(test_failed_disable_changes_nothing),
      cmocka_unit_test(test_pending_request_acts_after_leave),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
