/* test_exec.c: exec.c, the exec family's wrappers, linked into this
 * program (the other unit programs leave them out, unit.mk), so this
 * program's own exec calls go through them.
 *
 * execve is async-signal-safe (POSIX XSH 2.4.3, signal-safety(7)), so a
 * program may exec from a signal handler, which may have interrupted the
 * same thread inside the shim with the routing log's lock held. Here the
 * log's first record allocates its buffers under that lock, and the
 * allocation (the call table's malloc) raises the signal; the record is
 * made as a hooked call makes it, inside cancel_enter/cancel_leave. The wrapper's
 * flush used to wait for that lock forever. The exec fails (ENOENT, no
 * such file), so the handler returns and the child reports; an alarm
 * turns a hang into a failure. */
#define _GNU_SOURCE
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "tmpdir.h"

#include "shim.h"
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include "sys.h"
#pragma GCC diagnostic pop

static char dir[64];

static volatile sig_atomic_t exec_errno_seen;
static int raised;

static void exec_from_handler(int sig) {
  (void)sig;
  char *const argv[] = {"nothing-here", NULL};
  int saved = errno;
  if (execve("/nonexistent/gemmshim-test", argv, argv + 1) < 0) exec_errno_seen = errno;
  errno = saved;
}

static void *raising_malloc(size_t n) {
  if (!raised++) raise(SIGUSR1);
  return malloc(n);
}

static gs_call small_call(void) {
  gs_call c;
  memset(&c, 0, sizeof c);
  c.g.api = GS_API_GEMM_EX;
  c.g.m = c.g.n = c.g.k = 64;
  c.g.batch = 1;
  c.seq = 1;
  c.device = 0;
  c.sm = 61;
  return c;
}

static void test_exec_from_signal_handler_inside_shim(void **state) {
  (void)state;
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    alarm(5);
    snprintf(gs_opt.log_path, sizeof gs_opt.log_path, "%s/sigexec.jsonl", dir);
    debug_init();
    log_init();
    exec_init();
    signal(SIGUSR1, exec_from_handler);
    gs_sys.malloc = raising_malloc;
    gs_call c = small_call();
    cancel_enter(); /* as a hooked call does, from call_begin to call_end (hooks.c) */
    log_record(&c);
    cancel_leave();
    _exit(raised && exec_errno_seen == ENOENT ? 0 : 20);
  }
  int st;
  assert_int_equal(waitpid(pid, &st, 0), pid);
  if (WIFSIGNALED(st) && WTERMSIG(st) == SIGALRM) fail_msg("an exec from a signal handler inside the shim hung");
  assert_true(WIFEXITED(st));
  assert_int_equal(WEXITSTATUS(st), 0);
}

static int group_setup(void **state) {
  (void)state;
  return tmpdir_make(dir, sizeof dir, "exec");
}

static int group_teardown(void **state) {
  (void)state;
  return tmpdir_remove(dir);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_exec_from_signal_handler_inside_shim),
  };
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
