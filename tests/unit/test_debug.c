/* test_debug.c: the debug output. The exact NCCL-style prefix, level
 * filtering, one write per message, truncation, GEMMSHIM_DEBUG_FILE with its
 * placeholders and its open failures, whole lines from many threads, the
 * pid/tid of a forked child, and what the file may never suffer: creation
 * with nothing to say, truncation, a followed symlink, a write into a
 * descriptor the program reused. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "tmpdir.h"

#include "shim.h"
/* cublasLt.h (through sys.h) has a declaration without a prototype. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include "sys.h"
#pragma GCC diagnostic pop

static char dir[64];

/* ---- helpers -------------------------------------------------------------- */
static char *read_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  size_t cap = 1 << 16, n = 0;
  char *buf = malloc(cap + 1);
  for (size_t got; (got = fread(buf + n, 1, cap - n, f)) > 0;) {
    n += got;
    if (n == cap) buf = realloc(buf, (cap *= 2) + 1);
  }
  fclose(f);
  buf[n] = '\0';
  return buf;
}

static int count_lines(const char *s) {
  int n = 0;
  for (; *s; s++) n += *s == '\n';
  return n;
}

static int my_tid(void) { return (int)syscall(SYS_gettid); }

static void short_host(char *host, size_t len) {
  assert_int_equal(gethostname(host, len), 0);
  char *dot = strchr(host, '.');
  if (dot && dot != host) *dot = '\0';
}

/* "gemmshim <host>:<pid>:<tid> " for the calling thread. */
static void expected_prefix(char *out, size_t len, int pid, int tid) {
  char host[256];
  short_host(host, sizeof host);
  snprintf(out, len, "gemmshim %s:%d:%d ", host, pid, tid);
}

/* Debug output to dir/name at level. */
static void debug_to(const char *name, gs_level level, char *path, size_t len) {
  snprintf(path, len, "%s/%s", dir, name);
  snprintf(gs_debug_file, sizeof gs_debug_file, "%s", path);
  gs_debug_level = level;
  debug_init();
}

/* stderr into a file while a test looks at it. */
static int saved_stderr = -1;

static void capture_stderr(const char *name, char *path, size_t len) {
  snprintf(path, len, "%s/%s", dir, name);
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  assert_true(fd >= 0);
  saved_stderr = dup(STDERR_FILENO);
  dup2(fd, STDERR_FILENO);
  close(fd);
}

static void restore_stderr(void) {
  if (saved_stderr < 0) return;
  dup2(saved_stderr, STDERR_FILENO);
  close(saved_stderr);
  saved_stderr = -1;
}

static int teardown(void **state) {
  (void)state;
  restore_stderr();
  gs_fault_clear();
  gs_debug_file[0] = '\0';
  gs_debug_level = GS_LEVEL_WARN;
  debug_init();
  return 0;
}

/* ---- tests ---------------------------------------------------------------- */
static void test_prefix_and_levels(void **state) {
  (void)state;
  char path[128], prefix[512], want[2048];
  debug_to("levels.txt", GS_LEVEL_WARN, path, sizeof path);
  GS_WARN("warned %d", 1);
  GS_INFO("not at WARN");
  GS_TRACE("not at WARN");
  gs_debug(GS_LEVEL_INFO, "not at WARN either");
  gs_debug_level = GS_LEVEL_INFO;
  GS_INFO("informed %s", "x");
  GS_TRACE("not at INFO");
  gs_debug_level = GS_LEVEL_TRACE;
  GS_TRACE("traced");
  expected_prefix(prefix, sizeof prefix, (int)getpid(), my_tid());
  snprintf(want, sizeof want, "%sWARN warned 1\n%sINFO informed x\n%sTRACE traced\n", prefix, prefix, prefix);
  char *got = read_file(path);
  assert_string_equal(got, want);
  free(got);
}

/* A message that ends in a newline gets no second one. */
static void test_trailing_newline(void **state) {
  (void)state;
  char path[128], prefix[512], want[2048];
  debug_to("newline.txt", GS_LEVEL_WARN, path, sizeof path);
  GS_WARN("ends in a newline\n");
  GS_WARN("%s", "");
  expected_prefix(prefix, sizeof prefix, (int)getpid(), my_tid());
  snprintf(want, sizeof want, "%sWARN ends in a newline\n%sWARN \n", prefix, prefix);
  char *got = read_file(path);
  assert_string_equal(got, want);
  free(got);
}

static ssize_t (*real_write)(int, const void *, size_t);
static int writes;

static ssize_t counting_write(int fd, const void *buf, size_t n) {
  writes++;
  return real_write(fd, buf, n);
}

/* Lines longer than the 1024-byte line buffer end in "..." and a newline,
 * still in one write. */
static void test_long_message_truncated(void **state) {
  (void)state;
  char path[128], prefix[512], body[5000];
  debug_to("long.txt", GS_LEVEL_WARN, path, sizeof path);
  memset(body, 'a', sizeof body - 1);
  body[sizeof body - 1] = '\0';
  real_write = gs_sys.debug_write;
  gs_sys.debug_write = counting_write;
  writes = 0;
  GS_WARN("%s", body);
  GS_WARN("short");
  gs_sys.debug_write = real_write;
  assert_int_equal(writes, 2);
  expected_prefix(prefix, sizeof prefix, (int)getpid(), my_tid());
  char *got = read_file(path);
  char *nl = strchr(got, '\n');
  assert_int_equal(nl + 1 - got, 1023);
  assert_memory_equal(got, prefix, strlen(prefix));
  assert_memory_equal(got + strlen(prefix), "WARN aaaa", 9);
  assert_memory_equal(nl - 4, "a...\n", 5);
  assert_string_equal(nl + 1 + strlen(prefix), "WARN short\n");
  free(got);
}

/* Callers format strerror(errno) after a message: it must survive. */
static void test_errno_preserved(void **state) {
  (void)state;
  char path[128];
  debug_to("errno.txt", GS_LEVEL_WARN, path, sizeof path);
  errno = ENOSPC;
  GS_WARN("x");
  assert_int_equal(errno, ENOSPC);
  gs_fault_arm(GS_SYS_debug_write, 1, 0); /* even when the write itself fails */
  char err[128];
  capture_stderr("errno.stderr", err, sizeof err); /* where the failed file's output goes next */
  errno = ENOSPC;
  GS_WARN("lost");
  assert_int_equal(errno, ENOSPC);
  restore_stderr();
  char *got = read_file(err);
  assert_non_null(got);
  if (!strstr(got, " WARN GEMMSHIM_DEBUG_FILE: cannot write '") || !strstr(got, "errno.txt' (Input/output error); "
      "debug output goes to stderr instead\n") || !strstr(got, " WARN lost\n"))
    fail_msg("unexpected stderr: %s", got);
  free(got);
}

static void test_file_placeholders(void **state) {
  (void)state;
  char pattern[128], path[512], host[256], prefix[512], want[1024];
  short_host(host, sizeof host);
  snprintf(pattern, sizeof pattern, "%s/dbg.%%h.%%p.txt", dir);
  snprintf(gs_debug_file, sizeof gs_debug_file, "%s", pattern);
  debug_init();
  GS_WARN("to the expanded file");
  snprintf(path, sizeof path, "%s/dbg.%s.%d.txt", dir, host, (int)getpid());
  expected_prefix(prefix, sizeof prefix, (int)getpid(), my_tid());
  snprintf(want, sizeof want, "%sWARN to the expanded file\n", prefix);
  char *got = read_file(path);
  assert_non_null(got);
  assert_string_equal(got, want);
  free(got);
}

/* Before options_init (gs_opt as loaded) and with no file: stderr. */
static void test_default_is_stderr(void **state) {
  (void)state;
  char path[128], prefix[512], want[1024];
  capture_stderr("stderr_default.txt", path, sizeof path);
  GS_WARN("early %d", 7);
  GS_INFO("not shown");
  restore_stderr();
  expected_prefix(prefix, sizeof prefix, (int)getpid(), my_tid());
  snprintf(want, sizeof want, "%sWARN early 7\n", prefix);
  char *got = read_file(path);
  assert_string_equal(got, want);
  free(got);
}

static void check_open_failure(const char *file, const char *expanded, const char *why) {
  char path[128], prefix[512], want[2048];
  capture_stderr("stderr_open.txt", path, sizeof path);
  snprintf(gs_debug_file, sizeof gs_debug_file, "%s", file);
  debug_init();
  GS_WARN("after the failure");
  restore_stderr();
  expected_prefix(prefix, sizeof prefix, (int)getpid(), my_tid());
  snprintf(want, sizeof want,
           "%sWARN GEMMSHIM_DEBUG_FILE='%s': cannot open '%s' (%s); debug output goes to stderr instead\n"
           "%sWARN after the failure\n",
           prefix, file, expanded, why, prefix);
  char *got = read_file(path);
  assert_string_equal(got, want);
  free(got);
}

static void test_open_failure_falls_back(void **state) {
  (void)state;
  check_open_failure("/nonexistent-gemmshim-dir/debug.txt", "/nonexistent-gemmshim-dir/debug.txt",
                     "No such file or directory");
}

static void test_open_fault_falls_back(void **state) {
  (void)state;
  char file[128];
  snprintf(file, sizeof file, "%s/fault.txt", dir);
  gs_fault_arm(GS_SYS_open, 1, 0);
  check_open_failure(file, file, "Input/output error");
}

/* A debug file that takes nothing (/dev/full: every write is ENOSPC, as
 * the kernel's mem driver documents): one warning on stderr, and that
 * message and every later one there (they were all lost, the warning
 * too). */
static void test_write_failure_falls_back(void **state) {
  (void)state;
  char path[128], prefix[512], want[2048];
  capture_stderr("stderr_full.txt", path, sizeof path);
  snprintf(gs_debug_file, sizeof gs_debug_file, "/dev/full");
  debug_init();
  GS_WARN("first");
  GS_WARN("second");
  restore_stderr();
  expected_prefix(prefix, sizeof prefix, (int)getpid(), my_tid());
  snprintf(want, sizeof want,
           "%sWARN GEMMSHIM_DEBUG_FILE: cannot write '/dev/full' (No space left on device); debug output goes to "
           "stderr instead\n%sWARN first\n%sWARN second\n",
           prefix, prefix, prefix);
  char *got = read_file(path);
  assert_string_equal(got, want);
  free(got);
}

/* Switching back to stderr and to another file leaves no stale fd. */
static void test_reinit_switches(void **state) {
  (void)state;
  char first[128], second[128];
  debug_to("first.txt", GS_LEVEL_WARN, first, sizeof first);
  GS_WARN("one");
  debug_to("second.txt", GS_LEVEL_WARN, second, sizeof second);
  GS_WARN("two");
  char *a = read_file(first), *b = read_file(second);
  assert_int_equal(count_lines(a), 1);
  assert_non_null(strstr(a, "WARN one\n"));
  assert_int_equal(count_lines(b), 1);
  assert_non_null(strstr(b, "WARN two\n"));
  free(a);
  free(b);
}

#define THREADS 4
#define PER_THREAD 2000

static void *warn_many(void *arg) {
  (void)arg;
  int tid = my_tid();
  for (int i = 0; i < PER_THREAD; i++) GS_WARN("thread %d message %d", tid, i);
  return NULL;
}

/* Whole lines from every thread, each with its own tid in the prefix. */
static void test_threads_whole_lines(void **state) {
  (void)state;
  char path[128];
  debug_to("threads.txt", GS_LEVEL_WARN, path, sizeof path);
  pthread_t t[THREADS];
  for (int i = 0; i < THREADS; i++) assert_int_equal(pthread_create(&t[i], NULL, warn_many, NULL), 0);
  for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
  char *got = read_file(path);
  assert_int_equal(count_lines(got), THREADS * PER_THREAD);
  for (char *p = got, *nl; *p; p = nl + 1) {
    nl = strchr(p, '\n');
    int pid, tid, msg_tid, i;
    char *colon = strchr(p, ':');
    assert_int_equal(sscanf(colon, ":%d:%d WARN thread %d message %d", &pid, &tid, &msg_tid, &i), 4);
    assert_int_equal(pid, getpid());
    assert_int_equal(tid, msg_tid);
  }
  free(got);
}

/* The child's lines carry the child's pid and tid, not cached parent ones. */
static void test_fork_child_ids(void **state) {
  (void)state;
  char path[128], prefix[512], want[1024];
  debug_to("fork.txt", GS_LEVEL_WARN, path, sizeof path);
  GS_WARN("parent"); /* fills the parent's caches */
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    GS_WARN("child");
    _exit(0);
  }
  int status;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  char *got = read_file(path);
  expected_prefix(prefix, sizeof prefix, (int)pid, (int)pid);
  snprintf(want, sizeof want, "%sWARN child\n", prefix);
  assert_non_null(strstr(got, want));
  assert_int_equal(count_lines(got), 2);
  free(got);
}

/* Nothing said, nothing created; a file that exists is appended to (every
 * preloaded process used to truncate it at load). */
static void test_created_lazily_appended(void **state) {
  (void)state;
  char path[128], prefix[512], want[1024];
  debug_to("lazy.txt", GS_LEVEL_WARN, path, sizeof path);
  GS_INFO("below the level");
  struct stat st;
  assert_int_equal(stat(path, &st), -1);
  FILE *f = fopen(path, "w");
  fputs("earlier\n", f);
  fclose(f);
  debug_to("lazy.txt", GS_LEVEL_WARN, path, sizeof path);
  GS_WARN("later");
  expected_prefix(prefix, sizeof prefix, (int)getpid(), my_tid());
  snprintf(want, sizeof want, "earlier\n%sWARN later\n", prefix);
  char *got = read_file(path);
  assert_string_equal(got, want);
  free(got);
}

/* O_NOFOLLOW: a link, dangling or not, is refused and its target untouched. */
static void test_symlink_refused(void **state) {
  (void)state;
  char target[128], link_path[128], err_path[128], prefix[512], want[2048];
  snprintf(target, sizeof target, "%s/target.txt", dir);
  snprintf(link_path, sizeof link_path, "%s/link.txt", dir);
  assert_int_equal(symlink(target, link_path), 0);
  capture_stderr("stderr_link.txt", err_path, sizeof err_path);
  snprintf(gs_debug_file, sizeof gs_debug_file, "%s", link_path);
  debug_init();
  GS_WARN("to stderr");
  restore_stderr();
  struct stat st;
  assert_int_equal(stat(target, &st), -1); /* the dangling link's target was not created */
  expected_prefix(prefix, sizeof prefix, (int)getpid(), my_tid());
  snprintf(want, sizeof want,
           "%sWARN GEMMSHIM_DEBUG_FILE='%s': cannot open '%s' (a symbolic link, which is not followed; expected a "
           "regular file, a FIFO, a terminal, /dev/null, /dev/full or /dev/kmsg); debug output goes to stderr instead\n%sWARN to stderr\n",
           prefix, link_path, link_path, prefix);
  char *got = read_file(err_path);
  assert_string_equal(got, want);
  free(got);
}

/* The program closed the debug file's descriptor and opened a file of its
 * own under the number: that file gets nothing, the debug file is
 * reopened, with one warning on stderr. */
static void test_reused_descriptor_not_written(void **state) {
  (void)state;
  char path[128], theirs[128], err_path[128];
  debug_to("reused.txt", GS_LEVEL_WARN, path, sizeof path);
  GS_WARN("first");
  int fd = -1;
  for (int i = 3; i < 1024 && fd < 0; i++) /* the debug file's descriptor */
    if (fcntl(i, F_GETFD) >= 0) {
      char proc[64], target[256];
      snprintf(proc, sizeof proc, "/proc/self/fd/%d", i);
      ssize_t n = readlink(proc, target, sizeof target - 1);
      if (n > 0 && (target[n] = '\0', strcmp(target, path) == 0)) fd = i;
    }
  assert_true(fd >= 0);
  close(fd);
  snprintf(theirs, sizeof theirs, "%s/theirs.bin", dir);
  int mine = open(theirs, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  assert_int_equal(mine, fd); /* the lowest free number: the same */
  capture_stderr("stderr_reused.txt", err_path, sizeof err_path);
  GS_WARN("second");
  restore_stderr();
  close(mine);
  char *got = read_file(theirs);
  assert_string_equal(got, "");
  free(got);
  got = read_file(path);
  assert_int_equal(count_lines(got), 2);
  assert_non_null(strstr(got, "WARN second\n"));
  free(got);
  got = read_file(err_path);
  assert_int_equal(count_lines(got), 1);
  char want[512];
  snprintf(want, sizeof want, "WARN GEMMSHIM_DEBUG_FILE: descriptor %d no longer is '%s' (the program closed it); reopened\n",
           fd, path);
  assert_non_null(strstr(got, want));
  free(got);
}

/* %p in the name: a forked child writes its own file, not its parent's. */
static void test_fork_child_own_file(void **state) {
  (void)state;
  char pattern[128], parent_path[128], child_path[128];
  snprintf(pattern, sizeof pattern, "%s/own.%%p.txt", dir);
  snprintf(gs_debug_file, sizeof gs_debug_file, "%s", pattern);
  debug_init();
  GS_WARN("parent");
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    GS_WARN("child");
    _exit(0);
  }
  int status;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  snprintf(parent_path, sizeof parent_path, "%s/own.%d.txt", dir, (int)getpid());
  snprintf(child_path, sizeof child_path, "%s/own.%d.txt", dir, (int)pid);
  char *got = read_file(parent_path);
  assert_int_equal(count_lines(got), 1);
  assert_non_null(strstr(got, "WARN parent\n"));
  free(got);
  got = read_file(child_path);
  assert_non_null(got);
  assert_int_equal(count_lines(got), 1);
  assert_non_null(strstr(got, "WARN child\n"));
  free(got);
}

/* gs_quote: what a value may look like in a message. */
/* stderr is the program's own description, usually blocking. A pipe whose
 * reader stopped reading, or a terminal nobody reads (its output backs up
 * as when stopped with ^S), used to block the calling thread in write(2)
 * for good (pipe(7): a blocking write waits for room; the same for a
 * terminal, termios(3)). Now a message waits at most 10 ms and is dropped.
 * Run in a child with an alarm, which fails the test instead of hanging
 * it; the descriptor stays blocking for the program (fcntl(2): O_NONBLOCK
 * is the description's). */
static int fill_nonblocking(int fd) {
  /* Filled through a description of its own, so fd's own flags stay. */
  char link[48], chunk[4096];
  snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
  int own = open(link, O_WRONLY | O_NONBLOCK | O_NOCTTY);
  if (own < 0) return -1;
  memset(chunk, 'f', sizeof chunk);
  size_t total = 0;
  for (;;) {
    ssize_t w = write(own, chunk, sizeof chunk);
    if (w > 0) total += (size_t)w;
    else if (errno == EAGAIN) break;
    else return -1;
    if (total > (64u << 20)) return -1;
  }
  /* A terminal may take a little more byte by byte: fill to the end. */
  while (write(own, chunk, 1) == 1) {}
  close(own);
  return 0;
}

static void warn_into_full(int fd, const char *what) {
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    if (fill_nonblocking(fd) != 0) _exit(10);
    if (dup2(fd, STDERR_FILENO) < 0) _exit(11);
    if (fcntl(STDERR_FILENO, F_GETFL) & O_NONBLOCK) _exit(12);
    alarm(5);
    for (int i = 0; i < 3; i++) GS_WARN("into a full %s %d", what, i);
    _exit((fcntl(STDERR_FILENO, F_GETFL) & O_NONBLOCK) ? 13 : 0);
  }
  int st;
  assert_int_equal(waitpid(pid, &st, 0), pid);
  if (WIFSIGNALED(st) && WTERMSIG(st) == SIGALRM) fail_msg("a message into a full %s blocked the caller", what);
  assert_true(WIFEXITED(st));
  assert_int_equal(WEXITSTATUS(st), 0);
}

static void test_full_stderr_never_blocks(void **state) {
  (void)state;
  int p[2];
  assert_int_equal(pipe(p), 0);
  warn_into_full(p[1], "pipe");
  close(p[0]);
  close(p[1]);
  int master = posix_openpt(O_RDWR | O_NOCTTY);
  assert_true(master >= 0);
  assert_int_equal(grantpt(master), 0);
  assert_int_equal(unlockpt(master), 0);
  char slave[128];
  assert_int_equal(ptsname_r(master, slave, sizeof slave), 0);
  int s = open(slave, O_WRONLY | O_NOCTTY);
  assert_true(s >= 0);
  warn_into_full(s, "terminal");
  close(s);
  close(master);
}

/* A program that closes its stderr lets the reader of that pipe see the
 * end (pipe(7): read returns 0 once every write end is closed); a shell's
 * $(...) waits for exactly that. The shim's own description of the pipe,
 * used for a message, must not outlive the message, or the reader waits
 * for good. */
static void test_stderr_pipe_not_held_open(void **state) {
  (void)state;
  int p[2];
  assert_int_equal(pipe(p), 0);
  int saved = dup(STDERR_FILENO);
  assert_int_equal(dup2(p[1], STDERR_FILENO), STDERR_FILENO);
  close(p[1]);
  GS_WARN("one message");
  dup2(saved, STDERR_FILENO); /* the program is done with the pipe */
  close(saved);
  char buf[512];
  ssize_t n = read(p[0], buf, sizeof buf);
  assert_true(n > 0);
  assert_non_null(memmem(buf, (size_t)n, "WARN one message\n", 17));
  int fl = fcntl(p[0], F_GETFL);
  fcntl(p[0], F_SETFL, fl | O_NONBLOCK);
  n = read(p[0], buf, sizeof buf);
  if (n < 0 && errno == EAGAIN) fail_msg("the pipe is still open for writing after the program closed its stderr");
  assert_int_equal(n, 0);
  close(p[0]);
}

/* fd 2 the read end of the program's own pipe (after `2>&-`, a pipe()
 * took number 2): a message must not reach that pipe. Reopening
 * /proc/self/fd/2 for writing would open the pipe's write side (proc(5));
 * write(2) to the read end itself is EBADF, which is what is left. */
static void test_stderr_read_end_not_written(void **state) {
  (void)state;
  int p[2];
  assert_int_equal(pipe(p), 0);
  int saved = dup(STDERR_FILENO);
  assert_int_equal(dup2(p[0], STDERR_FILENO), STDERR_FILENO);
  GS_WARN("into the program's pipe?");
  dup2(saved, STDERR_FILENO);
  close(saved);
  int fl = fcntl(p[0], F_GETFL);
  fcntl(p[0], F_SETFL, fl | O_NONBLOCK);
  char buf[256];
  ssize_t n = read(p[0], buf, sizeof buf);
  if (n > 0) fail_msg("a message went into the program's own pipe: %.*s", (int)n, buf);
  assert_true(n < 0 && errno == EAGAIN);
  close(p[0]);
  close(p[1]);
}

static void test_quote(void **state) {
  (void)state;
  char q[GS_QUOTE_BUF], big[300];
  assert_string_equal(gs_quote("plain", q), "plain");
  assert_string_equal(gs_quote("a\nb\tc\rd\\e\x01\x7f", q), "a\\nb\\tc\\rd\\\\e\\x01\\x7f");
  assert_string_equal(gs_quote(NULL, q), "");
  memset(big, 'z', sizeof big - 1);
  big[sizeof big - 1] = '\0';
  char want[GS_QUOTE_BUF];
  snprintf(want, sizeof want, "%.96s...(299 bytes)", big);
  assert_string_equal(gs_quote(big, q), want);
  memset(big, '\n', 96);
  big[96] = '\0';
  assert_int_equal(strlen(gs_quote(big, q)), 192); /* fits GS_QUOTE_BUF */
  memset(big, '\x02', 200);
  big[200] = '\0';
  assert_true(strlen(gs_quote(big, q)) < GS_QUOTE_BUF);
  /* Bytes that are not UTF-8 (RFC 3629) as \xNN; characters as they are. */
  assert_string_equal(gs_quote("caf\xc3\xa9 \xff \xc3 \xc0\xaf \xed\xa0\x80 \xf0\x9f\x98\x80", q),
                      "caf\xc3\xa9 \\xff \\xc3 \\xc0\\xaf \\xed\\xa0\\x80 \xf0\x9f\x98\x80");
  /* Cut between characters only: a character that would cross byte 96 is
   * left out whole. */
  memset(big, 'z', 95);
  memcpy(big + 95, "\xc3\xa9", 3);
  snprintf(want, sizeof want, "%.95s...(97 bytes)", big);
  assert_string_equal(gs_quote(big, q), want);
  memset(big, 'z', 94);
  memcpy(big + 94, "\xc3\xa9x", 4);
  snprintf(want, sizeof want, "%.96s...(97 bytes)", big);
  assert_string_equal(gs_quote(big, q), want);
  memset(big, 'z', 93);
  memcpy(big + 93, "\xf0\x9f\x98\x80", 5);
  snprintf(want, sizeof want, "%.93s...(97 bytes)", big);
  assert_string_equal(gs_quote(big, q), want);
  /* 96 bytes that are not UTF-8 fill GS_QUOTE_BUF at most. */
  memset(big, '\xff', 200);
  big[200] = '\0';
  assert_int_equal(strlen(gs_quote(big, q)), 96 * 4 + strlen("...(200 bytes)"));
}

static int group_setup(void **state) {
  (void)state;
  return tmpdir_make(dir, sizeof dir, "debug");
}

static int group_teardown(void **state) {
  (void)state;
  return tmpdir_remove(dir);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      /* First, while gs_opt is as the loader left it. */
      cmocka_unit_test_teardown(test_default_is_stderr, teardown),
      cmocka_unit_test_teardown(test_prefix_and_levels, teardown),
      cmocka_unit_test_teardown(test_trailing_newline, teardown),
      cmocka_unit_test_teardown(test_long_message_truncated, teardown),
      cmocka_unit_test_teardown(test_errno_preserved, teardown),
      cmocka_unit_test_teardown(test_file_placeholders, teardown),
      cmocka_unit_test_teardown(test_open_failure_falls_back, teardown),
      cmocka_unit_test_teardown(test_open_fault_falls_back, teardown),
      cmocka_unit_test_teardown(test_write_failure_falls_back, teardown),
      cmocka_unit_test_teardown(test_reinit_switches, teardown),
      cmocka_unit_test_teardown(test_threads_whole_lines, teardown),
      cmocka_unit_test_teardown(test_fork_child_ids, teardown),
      cmocka_unit_test_teardown(test_created_lazily_appended, teardown),
      cmocka_unit_test_teardown(test_symlink_refused, teardown),
      cmocka_unit_test_teardown(test_reused_descriptor_not_written, teardown),
      cmocka_unit_test_teardown(test_fork_child_own_file, teardown),
      cmocka_unit_test_teardown(test_full_stderr_never_blocks, teardown),
      cmocka_unit_test_teardown(test_stderr_pipe_not_held_open, teardown),
      cmocka_unit_test_teardown(test_stderr_read_end_not_written, teardown),
      cmocka_unit_test(test_quote),
  };
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
