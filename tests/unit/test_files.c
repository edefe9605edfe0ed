/* test_files.c: files.c, the rules every file the shim writes follows.
 * Expected behaviour from POSIX/Linux man pages: open(2) (O_NOFOLLOW gives
 * ELOOP on a final symlink; O_WRONLY|O_NONBLOCK on a FIFO without a reader
 * gives ENXIO), write(2)/pipe(7) (a write to a pipe without a reader is
 * EPIPE plus SIGPIPE; up to PIPE_BUF bytes are written atomically; with
 * O_NONBLOCK a full pipe gives EAGAIN), dup(2) (a duplicate shares the
 * file offset). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "shim.h"
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include "sys.h"
#pragma GCC diagnostic pop

static char dir[64];

static void in_dir(char *out, size_t len, const char *name) { snprintf(out, len, "%s/%s", dir, name); }

static char *slurp(const char *path) {
  static char buf[1 << 16];
  int fd = open(path, O_RDONLY);
  if (fd < 0) return NULL;
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  buf[n > 0 ? n : 0] = '\0';
  return buf;
}

static void test_regular_file_appended(void **state) {
  (void)state;
  char path[128], why[256];
  in_dir(path, sizeof path, "reg.txt");
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  assert_int_equal(write(fd, "old\n", 4), 4);
  close(fd);
  gs_file f;
  assert_int_equal(file_open_append(path, 0, &f, why, sizeof why), 0);
  assert_int_equal(f.stream, 0);
  assert_int_equal(file_write(&f, "new\n", 4, NULL), 4);
  file_close(&f);
  assert_string_equal(slurp(path), "old\nnew\n"); /* never truncated */
}

static void test_refusals(void **state) {
  (void)state;
  char path[128], link_path[128], why[256];
  gs_file f;
  in_dir(path, sizeof path, "target.txt");
  in_dir(link_path, sizeof link_path, "link.txt");
  assert_int_equal(symlink(path, link_path), 0);
  assert_int_equal(file_open_append(link_path, 0, &f, why, sizeof why), -1);
  assert_string_equal(why, "a symbolic link, which is not followed; expected a regular file, a FIFO or a device");
  assert_int_equal(f.fd, -1);
  struct stat st;
  assert_int_equal(lstat(path, &st), -1); /* the dangling link's target was not created */

  in_dir(path, sizeof path, "fifo");
  assert_int_equal(mkfifo(path, 0600), 0);
  assert_int_equal(file_open_append(path, 0, &f, why, sizeof why), -1); /* at once, no reader */
  assert_string_equal(why, "a FIFO with no reader");
  assert_int_equal(file_open_append(dir, 0, &f, why, sizeof why), -1);
  assert_string_equal(why, "Is a directory");
  assert_int_equal(file_open_append("/dev/fd/1000", 0, &f, why, sizeof why), -1);
  assert_string_equal(why, "descriptor 1000 is not open");
}

static void test_character_device(void **state) {
  (void)state;
  char why[256];
  gs_file f;
  assert_int_equal(file_open_append("/dev/null", 0, &f, why, sizeof why), 0);
  assert_int_equal(f.stream, 1);
  assert_int_equal(file_write(&f, "x\n", 2, NULL), 2);
  file_close(&f);
}

/* /dev/fd/N is the program's descriptor, duplicated: its offset is shared,
 * so a file the program writes without O_APPEND and the shim's lines never
 * overwrite each other. */
static void test_named_descriptor_shares_offset(void **state) {
  (void)state;
  char path[128], name[64], why[256];
  in_dir(path, sizeof path, "stdout.txt");
  int prog = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  assert_int_equal(write(prog, "abc", 3), 3);
  snprintf(name, sizeof name, "/dev/fd/%d", prog);
  gs_file f;
  assert_int_equal(file_open_append(name, 0, &f, why, sizeof why), 0);
  assert_int_not_equal(f.fd, prog);
  assert_int_equal(file_write(&f, "line\n", 5, NULL), 5);
  assert_int_equal(write(prog, "def", 3), 3);
  file_close(&f);
  assert_true(fcntl(prog, F_GETFD) >= 0); /* the program's own stays open */
  close(prog);
  assert_string_equal(slurp(path), "abcline\ndef");
}

/* The descriptor closed and its number reused for another file: not ours,
 * and closing ours leaves the program's file open. */
static void test_reused_descriptor(void **state) {
  (void)state;
  char path[128], other[128], why[256];
  in_dir(path, sizeof path, "ours.txt");
  in_dir(other, sizeof other, "theirs.txt");
  gs_file f;
  assert_int_equal(file_open_append(path, 0, &f, why, sizeof why), 0);
  assert_int_equal(file_is_ours(&f), 1);
  gs_fault_arm(GS_SYS_fstat, 1, 0); /* a failure that is not EBADF proves nothing */
  assert_int_equal(file_is_ours(&f), 1);
  close(f.fd);
  assert_int_equal(file_is_ours(&f), 0);
  int theirs = open(other, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  assert_int_equal(theirs, f.fd);
  assert_int_equal(file_is_ours(&f), 0);
  file_close(&f);
  assert_true(fcntl(theirs, F_GETFD) >= 0);
  close(theirs);
}

/* A pipe whose reader is gone: EPIPE, no signal left pending, the process
 * alive (SIGPIPE's default action would have ended it). */
static void test_no_sigpipe(void **state) {
  (void)state;
  int p[2];
  assert_int_equal(pipe(p), 0);
  close(p[0]);
  gs_file f = {p[1], 0, 0, 1, 0, 0};
  errno = 0;
  assert_int_equal(file_write(&f, "x\n", 2, NULL), 0);
  assert_int_equal(errno, EPIPE);
  sigset_t pending;
  sigpending(&pending);
  assert_false(sigismember(&pending, SIGPIPE));
  close(p[1]);
}

/* A full pipe nobody reads: the write gives up at the deadline, having
 * written only whole lines (PIPE_BUF-sized chunks of whole lines). */
static void test_full_pipe_deadline(void **state) {
  (void)state;
  int p[2];
  assert_int_equal(pipe2(p, O_NONBLOCK), 0);
  static char text[256 * 1024];
  for (size_t i = 0; i < sizeof text; i++) text[i] = (i % 100 == 99) ? '\n' : 'a';
  gs_file f = {p[1], 0, 0, 1, 0, 0};
  uint64_t deadline = gs_monotonic_ns() + 30 * 1000000ull;
  errno = 0;
  size_t n = file_write(&f, text, sizeof text, &deadline);
  assert_int_equal(errno, ETIMEDOUT);
  assert_true(n > 0 && n < sizeof text);
  assert_int_equal(text[n - 1], '\n'); /* stopped at a line's end */
  assert_true(gs_monotonic_ns() >= deadline);
  close(p[0]);
  close(p[1]);
}

static int group_setup(void **state) {
  (void)state;
  snprintf(dir, sizeof dir, "/tmp/gemmshim_test_files.XXXXXX");
  return mkdtemp(dir) ? 0 : -1;
}

static int group_teardown(void **state) {
  (void)state;
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  return system(cmd) == 0 ? 0 : -1;
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_regular_file_appended),
      cmocka_unit_test(test_refusals),
      cmocka_unit_test(test_character_device),
      cmocka_unit_test(test_named_descriptor_shares_offset),
      cmocka_unit_test(test_reused_descriptor),
      cmocka_unit_test(test_no_sigpipe),
      cmocka_unit_test(test_full_pipe_deadline),
  };
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
