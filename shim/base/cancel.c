/* cancel.c: the shim's own code runs with thread cancellation disabled.
 *
 * A thread of the program cancelled with pthread_cancel (deferred
 * cancellation, the default) acts on the request at the next cancellation
 * point it reaches (pthreads(7), "Cancellation points"): write, poll, open,
 * close, pthread_cond_wait and pthread_cond_timedwait, pthread_join, ...
 * The shim makes such calls while it holds its locks (the routing log's
 * mutex, which a condition wait re-acquires before the thread unwinds; the
 * debug output's lock; a scratch slot's lock), and a thread that unwound
 * there would leave the lock held: every later GEMM or message of the
 * process would wait for it forever. So every entry into the shim's code on
 * a thread of the program (the hooked calls, the handle and dlsym hooks,
 * load and exit, the fork handlers, debug messages, the exec wrappers) is
 * bracketed by cancel_enter and cancel_leave: the outermost enter disables
 * cancellation (pthread_setcancelstate(PTHREAD_CANCEL_DISABLE)), the
 * matching leave gives the thread back the state it had. A request made
 * meanwhile stays pending and acts at the thread's next cancellation point
 * once the state is enabled again (POSIX, pthread_setcancelstate): in the
 * program's own code, after the shim's call has returned. (A thread of the
 * asynchronous type acts on it in cancel_leave, after everything else, as
 * a cancelled thread: see there.)
 *
 * Nesting is counted per thread: a hooked call cuBLAS makes inside a call
 * the shim forwards, a message from inside a call, the fork handlers of a
 * fork. Only the outermost pair changes the state, so an inner leave never
 * enables cancellation while the shim's code still runs.
 *
 * Failure. pthread_setcancelstate has none for valid arguments (POSIX lists
 * EINVAL for an invalid state only); the fault loop injects one. A failed
 * disabling call leaves the thread's state as the program set it: the
 * shim's code runs as it did before this file existed, and the matching
 * leave changes nothing. The restoring call uses the table's binding but
 * not fault injection: it undoes the shim's own change, and a failure
 * there would leave the program's thread unable to be cancelled for good.
 * errno is the caller's on return from either. */
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
