/* cancel.c: the shim's own code runs with thread cancellation disabled.
 *
 * Why: a thread cancelled with pthread_cancel acts on the request at its
 * next cancellation point (write, poll, open, pthread_cond_wait, ...), and
 * the shim makes such calls while it holds its locks (the routing log's
 * mutex, the debug output's lock, a scratch slot's lock). A thread that
 * unwound there would leave the lock held, and every later GEMM or message
 * of the process would wait for it forever. So every entry into the
 * shim's code on a program thread is bracketed by cancel_enter and
 * cancel_leave, counted per thread: the outermost pair disables
 * cancellation and gives the thread back its own state; a request made
 * meanwhile acts in the program's own code.
 *
 * Guarantees: docs/reliability.md, "Cancellation". */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>

#include "base.h"
#include "sys.h"

#define CANCEL_TLS __attribute__((tls_model("initial-exec")))

static __thread unsigned cancel_depth CANCEL_TLS;
static __thread int cancel_old CANCEL_TLS;     /* the state the outermost enter found */
static __thread int cancel_changed CANCEL_TLS; /* the outermost enter disabled it */

void cancel_enter(void) {
  if (cancel_depth++) return;
  int saved_errno = errno;
  int old = PTHREAD_CANCEL_ENABLE;
  cancel_changed = GS_CALL(pthread_setcancelstate, PTHREAD_CANCEL_DISABLE, &old) == 0;
  cancel_old = old;
  errno = saved_errno;
}

void cancel_leave(void) {
  if (!cancel_depth || --cancel_depth) return;
  if (!cancel_changed) return;
  cancel_changed = 0;
  if (cancel_old == PTHREAD_CANCEL_DISABLE) return; /* it was disabled already */
  int saved_errno = errno;
  /* Out-parameters in thread-local storage, not on the stack: the thread
   * may end inside pthread_testcancel below, and a frame of the shim's
   * with an addressed local would be left poisoned for AddressSanitizer
   * (its forced unwind does not unpoison it). */
  static __thread int ignored CANCEL_TLS, type CANCEL_TLS;
  type = PTHREAD_CANCEL_DEFERRED;
  /* A request made meanwhile acts at once inside pthread_setcancelstate
   * when the thread's type is asynchronous, and glibc 2.36 then ends the
   * thread without setting its result (nptl/pthread_setcancelstate.c calls
   * __do_cancel; pthread_join gets NULL, not the PTHREAD_CANCELED POSIX
   * promises). So an asynchronous thread is enabled under the deferred
   * type and then tested (pthread_testcancel sets the result), and given
   * its type back after. Neither call can fail for these arguments (POSIX):
   * they are made directly, like the restoring call above. */
  if (pthread_setcanceltype(PTHREAD_CANCEL_DEFERRED, &type) != 0) type = PTHREAD_CANCEL_DEFERRED;
  gs_sys.pthread_setcancelstate(cancel_old, &ignored);
  if (type == PTHREAD_CANCEL_ASYNCHRONOUS) {
    pthread_testcancel();
    pthread_setcanceltype(PTHREAD_CANCEL_ASYNCHRONOUS, &ignored);
  }
  errno = saved_errno;
}

unsigned cancel_depth_for_tests(void) { return cancel_depth; }

int cancel_inside(void) { return cancel_depth != 0; }
