/* test_files.c: files.c, the rules every file the shim writes follows.
 * Expected behaviour from POSIX/Linux man pages: open(2) (O_NOFOLLOW gives
 * ELOOP on a final symlink; O_WRONLY|O_NONBLOCK on a FIFO without a reader
 * gives ENXIO), write(2)/pipe(7) (a write to a pipe without a reader is
 * EPIPE plus SIGPIPE; up to PIPE_BUF bytes are written atomically; with
 * O_NONBLOCK a full pipe gives EAGAIN), dup(2) (a duplicate shares the
 * file offset), fcntl(2) (O_NONBLOCK is a flag of the open file
 * description, which a duplicate shares), proc(5) (opening /proc/self/fd/N
 * opens the file itself, a new description), send(2) (MSG_DONTWAIT: a
 * non-blocking send whatever the description's flags), signal(7) and
 * setrlimit(2) (a write past RLIMIT_FSIZE raises SIGXFSZ, whose default
 * action ends the process; with the signal blocked the write fails with
 * EFBIG; a write that crosses the limit is cut short at it). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
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
  assert_string_equal(why, "a symbolic link, which is not followed; expected a regular file, a FIFO, a terminal, /dev/null, /dev/full or /dev/kmsg");
  assert_int_equal(f.fd, -1);
  struct stat st;
  assert_int_equal(lstat(path, &st), -1); /* the dangling link's target was not created */

  in_dir(path, sizeof path, "fifo");
  assert_int_equal(mkfifo(path, 0600), 0);
  assert_int_equal(file_open_append(path, 0, &f, why, sizeof why), -1); /* at once, no reader */
  assert_string_equal(why, "a FIFO with no reader");
  assert_int_equal(file_open_append(dir, 0, &f, why, sizeof why), -1);
  assert_string_equal(why, "a directory; expected a regular file, a FIFO, a terminal, /dev/null, /dev/full or /dev/kmsg");
  assert_int_equal(file_open_append("/dev/fd/1000", 0, &f, why, sizeof why), -1);
  assert_string_equal(why, "descriptor 1000 is not open");

  /* Devices other than terminals, /dev/null and /dev/full, and sockets,
   * are refused by what they are. Character and block major 240 are
   * reserved for local use (devices.txt), so nothing is behind them here. */
  in_dir(path, sizeof path, "nodev");
  assert_int_equal(mknod(path, S_IFCHR | 0600, makedev(240, 0)), 0);
  assert_int_equal(file_open_append(path, 0, &f, why, sizeof why), -1);
  assert_string_equal(why, "a device other than a terminal, /dev/null, /dev/full or /dev/kmsg, which is not opened (opening a "
                           "device acts on it); expected a regular file, a FIFO, a terminal, /dev/null, /dev/full or /dev/kmsg");
  in_dir(path, sizeof path, "blockdev");
  assert_int_equal(mknod(path, S_IFBLK | 0600, makedev(240, 0)), 0);
  assert_int_equal(file_open_append(path, 0, &f, why, sizeof why), -1);
  assert_string_equal(why, "a block device, which is not opened (opening a device acts on it); expected a regular file, a FIFO, a terminal, /dev/null, /dev/full or /dev/kmsg");
  in_dir(path, sizeof path, "sock");
  int s = socket(AF_UNIX, SOCK_STREAM, 0);
  struct sockaddr_un addr = {.sun_family = AF_UNIX};
  assert_true(strlen(path) < sizeof addr.sun_path);
  memcpy(addr.sun_path, path, strlen(path) + 1);
  assert_int_equal(bind(s, (struct sockaddr *)&addr, sizeof addr), 0);
  assert_int_equal(file_open_append(path, 0, &f, why, sizeof why), -1);
  assert_string_equal(why, "a socket, which open() cannot write to; expected a regular file, a FIFO, a terminal, /dev/null, /dev/full or /dev/kmsg");
  close(s);
}

/* Every open the shim makes is recorded (the call table's open). */
static int seen_flags[8], n_seen;
static char seen_path[8][128];
static int recording_open(const char *path, int flags, mode_t mode) {
  if (n_seen < 8) {
    snprintf(seen_path[n_seen], sizeof seen_path[0], "%s", path);
    seen_flags[n_seen++] = flags;
  }
  return open(path, flags, mode);
}

/* What is refused is refused by its type, before open(2) runs the
 * device's driver (a tape rewinds, a watchdog arms): the only open made
 * for it is O_PATH, which open(2) says does not open the file itself. */
static void test_refused_before_open(void **state) {
  (void)state;
  char path[128], why[256];
  gs_file f;
  const char *names[] = {"nodev2", "blockdev2", "sock2", "link2", "", NULL};
  in_dir(path, sizeof path, "nodev2");
  assert_int_equal(mknod(path, S_IFCHR | 0600, makedev(240, 1)), 0);
  in_dir(path, sizeof path, "blockdev2");
  assert_int_equal(mknod(path, S_IFBLK | 0600, makedev(240, 1)), 0);
  in_dir(path, sizeof path, "sock2");
  int s = socket(AF_UNIX, SOCK_STREAM, 0);
  struct sockaddr_un addr = {.sun_family = AF_UNIX};
  memcpy(addr.sun_path, path, strlen(path) + 1);
  assert_int_equal(bind(s, (struct sockaddr *)&addr, sizeof addr), 0);
  in_dir(path, sizeof path, "link2");
  assert_int_equal(symlink("/dev/null", path), 0);
  __typeof__(gs_sys.open) real = gs_sys.open;
  gs_sys.open = recording_open;
  for (int i = 0; names[i]; i++) {
    in_dir(path, sizeof path, names[i]); /* "": the directory itself */
    n_seen = 0;
    assert_int_equal(file_open_append(path, 0, &f, why, sizeof why), -1);
    assert_non_null(strstr(why, "; expected a regular file, a FIFO, a terminal, /dev/null, /dev/full or /dev/kmsg"));
    for (int k = 0; k < n_seen; k++)
      if (!(seen_flags[k] & O_PATH)) fail_msg("'%s' was opened before it was refused (%s)", path, why);
  }
  gs_sys.open = real;
  close(s);
}

/* The file checked is the file opened: a directory on the path replaced
 * by a link between the look and the open (someone who can write to a
 * directory above it) cannot bring in another file, here a device. The
 * swap is made right after the shim's first look at the name, whichever
 * call that is. */
static char swap_dir[128], swap_old[128], swap_to[128];
static int swapped;
static void swap_now(void) {
  if (swapped) return;
  swapped = 1;
  assert_int_equal(rename(swap_dir, swap_old), 0);
  assert_int_equal(symlink(swap_to, swap_dir), 0);
}
static int swapping_lstat(const char *p, struct stat *st) {
  int r = lstat(p, st);
  swap_now();
  return r;
}
static int swapping_fstat(int fd, struct stat *st) {
  int r = fstat(fd, st);
  swap_now();
  return r;
}

static void test_checked_file_is_opened_file(void **state) {
  (void)state;
  char path[160], dev[160], why[256];
  in_dir(swap_dir, sizeof swap_dir, "d");
  in_dir(swap_old, sizeof swap_old, "d.old");
  in_dir(swap_to, sizeof swap_to, "e");
  assert_int_equal(mkdir(swap_dir, 0700), 0);
  assert_int_equal(mkdir(swap_to, 0700), 0);
  snprintf(path, sizeof path, "%s/log", swap_dir);
  int fd = open(path, O_WRONLY | O_CREAT, 0644);
  assert_true(fd >= 0);
  close(fd);
  struct stat want;
  assert_int_equal(stat(path, &want), 0);
  snprintf(dev, sizeof dev, "%s/log", swap_to);
  assert_int_equal(mknod(dev, S_IFCHR | 0600, makedev(240, 2)), 0);
  __typeof__(gs_sys.lstat) real_lstat = gs_sys.lstat;
  __typeof__(gs_sys.fstat) real_fstat = gs_sys.fstat;
  gs_sys.lstat = swapping_lstat;
  gs_sys.fstat = swapping_fstat;
  swapped = 0;
  gs_file f;
  int rc = file_open_append(path, 0, &f, why, sizeof why);
  gs_sys.lstat = real_lstat;
  gs_sys.fstat = real_fstat;
  assert_int_equal(swapped, 1);
  if (rc != 0) fail_msg("'%s' after the swap: %s", path, why);
  assert_int_equal(f.ino, (uint64_t)want.st_ino);
  assert_int_equal(f.stream, 0);
  file_close(&f);
}

/* open(2): without O_NOCTTY, a terminal opened by a session leader that
 * has no controlling terminal becomes its controlling terminal, and the
 * program's job control changes. (This machine's kernel gives none in a
 * plain open either, so what is checked is the flag every open by name
 * passes, through the call table's open.) */
static void test_opened_without_controlling_terminal(void **state) {
  (void)state;
  int master = posix_openpt(O_RDWR | O_NOCTTY);
  assert_true(master >= 0);
  assert_int_equal(grantpt(master), 0);
  assert_int_equal(unlockpt(master), 0);
  char slave[128], path[128], why[256];
  assert_int_equal(ptsname_r(master, slave, sizeof slave), 0);
  in_dir(path, sizeof path, "new.txt");
  const char *names[] = {slave, path, "/dev/null", NULL};
  __typeof__(gs_sys.open) real = gs_sys.open;
  gs_sys.open = recording_open;
  for (int i = 0; names[i]; i++) {
    n_seen = 0;
    gs_file f;
    int rc = file_open_append(names[i], 0, &f, why, sizeof why);
    if (rc != 0) fail_msg("%s: %s", names[i], why);
    file_close(&f);
    assert_true(n_seen >= 1);
    for (int k = 0; k < n_seen; k++)
      if (!(seen_flags[k] & (O_NOCTTY | O_PATH))) fail_msg("%s opened without O_NOCTTY", names[i]);
  }
  gs_sys.open = real;
  close(master);
}

/* A read end of the program's own pipe as the log (fd 2 after `2>&-` and a
 * pipe()): reopening it through /proc/self/fd for writing would open that
 * pipe's write side (proc(5)) and put the shim's lines into the program's
 * pipe. write(2) to the read end is EBADF: nothing may be written. */
static void test_read_end_not_reopened_for_writing(void **state) {
  (void)state;
  int p[2];
  assert_int_equal(pipe(p), 0);
  char name[64], why[256];
  snprintf(name, sizeof name, "/dev/fd/%d", p[0]);
  gs_file f;
  uint64_t deadline = gs_monotonic_ns() + 100000000ull;
  if (file_open_append(name, 0, &f, why, sizeof why) == 0) {
    file_write(&f, "x\n", 2, &deadline);
    file_close(&f);
  } else {
    char want[96];
    snprintf(want, sizeof want, "descriptor %d is open for reading only; expected one open for writing", p[0]);
    assert_string_equal(why, want);
  }
  int fl = fcntl(p[0], F_GETFL);
  fcntl(p[0], F_SETFL, fl | O_NONBLOCK);
  char buf[8];
  ssize_t n = read(p[0], buf, sizeof buf);
  if (n > 0) fail_msg("the shim wrote into the program's own pipe");
  assert_true(n < 0 && errno == EAGAIN);
  close(p[0]);
  close(p[1]);
}

/* Messages say what was expected. /dev/tty (5:0) answers ENXIO when the
 * process has no controlling terminal (tty(4)): said so, not "no device
 * behind it". A named descriptor of a directory is refused, saying what
 * was expected. */
static void test_refusal_texts(void **state) {
  (void)state;
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    if (setsid() < 0) _exit(10);
    char why[256];
    gs_file f;
    if (file_open_append("/dev/tty", 0, &f, why, sizeof why) == 0) _exit(11);
    _exit(strcmp(why, "/dev/tty, and the process has no controlling terminal (tty(4)); expected a regular file, a "
                      "FIFO, a terminal, /dev/null, /dev/full or /dev/kmsg") == 0 ? 0 : 12);
  }
  int st;
  assert_int_equal(waitpid(pid, &st, 0), pid);
  assert_true(WIFEXITED(st));
  assert_int_equal(WEXITSTATUS(st), 0);
  int d = open(dir, O_RDONLY | O_DIRECTORY);
  assert_true(d >= 0);
  char name[64], why[256];
  snprintf(name, sizeof name, "/dev/fd/%d", d);
  gs_file f;
  assert_int_equal(file_open_append(name, 0, &f, why, sizeof why), -1);
  /* O_RDONLY is how a directory is open: refused as such first */
  char want[96];
  snprintf(want, sizeof want, "descriptor %d is open for reading only; expected one open for writing", d);
  assert_string_equal(why, want);
  close(d);
}

static void test_null_and_full_allowed(void **state) {
  (void)state;
  char why[256];
  gs_file f;
  assert_int_equal(file_open_append("/dev/full", 0, &f, why, sizeof why), 0);
  assert_int_equal(f.stream, 1);
  file_close(&f);
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
  gs_file f = {p[1], 0, 0, 1, 0, 0, 0, 0, 0, 0, 0};
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
  gs_file f = {p[1], 0, 0, 1, 0, 0, 0, 0, 0, 0, 0};
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

/* A buffer of 100-byte lines, larger than any pipe, terminal or socket
 * buffer here. */
static const char *lines_text(size_t *len) {
  static char text[4 << 20];
  for (size_t i = 0; i < sizeof text; i++) text[i] = (i % 100 == 99) ? '\n' : 'a';
  *len = sizeof text;
  return text;
}

/* Written to a descriptor nobody reads, it stops at the deadline having
 * blocked nowhere; the program's own description keeps its flags. */
static void assert_gives_up_at_deadline(gs_file *f, int prog_fd) {
  int flags_before = fcntl(prog_fd, F_GETFL);
  size_t len;
  const char *text = lines_text(&len);
  uint64_t deadline = gs_monotonic_ns() + 30 * 1000000ull;
  errno = 0;
  size_t n = file_write(f, text, len, &deadline);
  assert_int_equal(errno, ETIMEDOUT);
  assert_true(n < len);
  assert_true(gs_monotonic_ns() >= deadline);
  assert_int_equal(fcntl(prog_fd, F_GETFL), flags_before);
  assert_int_equal(flags_before & O_NONBLOCK, 0);
}

/* /dev/fd/N on a pipe: a description of the shim's own, non-blocking. The
 * program's stays blocking: its writes still wait for the reader. With no
 * description of its own to be had (the open through /proc fails), the
 * shared one is written after poll, in pieces of PIPE_BUF at most, which a
 * pipe with room takes at once. */
static void named_pipe_case(int own) {
  int p[2];
  char name[64], why[256];
  assert_int_equal(pipe(p), 0);
  snprintf(name, sizeof name, "/dev/fd/%d", p[1]);
  gs_file f;
  if (!own) gs_fault_arm(GS_SYS_open, 1, 0);
  assert_int_equal(file_open_append(name, 0, &f, why, sizeof why), 0);
  gs_fault_clear();
  assert_int_equal(f.named, 1);
  assert_int_equal(f.stream, 1);
  assert_int_equal(f.nonblock, own);
  assert_int_equal((fcntl(f.fd, F_GETFL) & O_NONBLOCK) != 0, own);
  assert_gives_up_at_deadline(&f, p[1]);
  file_close(&f);
  close(p[0]);
  close(p[1]);
}

static void test_named_pipe_own_description(void **state) {
  (void)state;
  named_pipe_case(1);
}

static void test_named_pipe_shared_description(void **state) {
  (void)state;
  named_pipe_case(0);
}

/* /dev/fd/N on a pseudo-terminal nobody reads. poll() says a terminal is
 * writable with any room at all, and a blocking write then waits for all
 * of its bytes (the shim used to hang here for good): the shim writes
 * through a description of its own, O_NONBLOCK. */
static void test_named_pty_own_description(void **state) {
  (void)state;
  int master = posix_openpt(O_RDWR | O_NOCTTY);
  assert_true(master >= 0);
  assert_int_equal(grantpt(master), 0);
  assert_int_equal(unlockpt(master), 0);
  int slave = open(ptsname(master), O_WRONLY | O_NOCTTY);
  assert_true(slave >= 0);
  char name[64], why[256];
  snprintf(name, sizeof name, "/dev/fd/%d", slave);
  gs_file f;
  assert_int_equal(file_open_append(name, 0, &f, why, sizeof why), 0);
  assert_int_equal(f.nonblock, 1);
  assert_int_not_equal(f.fd, slave);
  assert_gives_up_at_deadline(&f, slave);
  file_close(&f);
  close(slave);
  close(master);
}

/* A socket cannot be opened through /proc: it is written with
 * send(MSG_DONTWAIT), which never blocks. */
static void test_named_socket_dontwait(void **state) {
  (void)state;
  int sv[2];
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  char name[64], why[256];
  snprintf(name, sizeof name, "/dev/fd/%d", sv[0]);
  gs_file f;
  assert_int_equal(file_open_append(name, 0, &f, why, sizeof why), 0);
  assert_int_equal(f.sock, 1);
  assert_int_equal(f.nonblock, 0);
  assert_gives_up_at_deadline(&f, sv[0]);
  file_close(&f);
  close(sv[0]);
  close(sv[1]);
}

/* The checks under a lowered RLIMIT_FSIZE run in a child, which says
 * which one failed by its exit status: with the limit lowered, the
 * runner's own output to a file (a failed assertion's message) would be
 * past it too. A SIGXFSZ the shim let through ends the child by signal. */
#define CHECK_OR_EXIT(cond, code) \
  do {                            \
    if (!(cond)) _exit(code);     \
  } while (0)

static void run_limited(void (*body)(void)) {
  fflush(NULL);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    body();
    _exit(0);
  }
  int status;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  if (WIFSIGNALED(status)) fail_msg("ended by signal %d (SIGXFSZ is %d)", WTERMSIG(status), SIGXFSZ);
  assert_true(WIFEXITED(status));
  assert_int_equal(WEXITSTATUS(status), 0);
}

static void limit_file_size(rlim_t bytes) {
  struct rlimit lim;
  CHECK_OR_EXIT(getrlimit(RLIMIT_FSIZE, &lim) == 0, 10);
  lim.rlim_cur = bytes;
  CHECK_OR_EXIT(setrlimit(RLIMIT_FSIZE, &lim) == 0, 11);
}

/* A file past the size limit: EFBIG, the process alive and no SIGXFSZ
 * left pending. The write that crosses the limit is cut at it. */
static void size_limit_body(void) {
  char path[128], why[256];
  in_dir(path, sizeof path, "limited.txt");
  limit_file_size(150);
  gs_file f;
  CHECK_OR_EXIT(file_open_append(path, 0, &f, why, sizeof why) == 0, 1);
  size_t len;
  const char *text = lines_text(&len);
  CHECK_OR_EXIT(file_write(&f, text, 100, NULL) == 100, 2);
  CHECK_OR_EXIT(file_write(&f, text, 100, NULL) == 50 && errno == EFBIG, 3); /* cut at the limit, then EFBIG */
  errno = 0;
  CHECK_OR_EXIT(file_write(&f, text, 100, NULL) == 0 && errno == EFBIG, 4);
  sigset_t pending;
  sigpending(&pending);
  CHECK_OR_EXIT(!sigismember(&pending, SIGXFSZ), 5);
  file_close(&f);
  struct stat st;
  CHECK_OR_EXIT(stat(path, &st) == 0 && st.st_size == 150, 6);
}

static void test_file_size_limit_is_efbig(void **state) {
  (void)state;
  run_limited(size_limit_body);
}

/* A SIGXFSZ the program itself had pending stays pending for it. */
static void pending_sigxfsz_body(void) {
  char path[128], why[256];
  in_dir(path, sizeof path, "limited2.txt");
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGXFSZ);
  CHECK_OR_EXIT(pthread_sigmask(SIG_BLOCK, &set, NULL) == 0, 1);
  raise(SIGXFSZ); /* the program's own, blocked */
  limit_file_size(10);
  gs_file f;
  CHECK_OR_EXIT(file_open_append(path, 0, &f, why, sizeof why) == 0, 2);
  CHECK_OR_EXIT(file_write(&f, "0123456789\n", 11, NULL) == 10 && errno == EFBIG, 3);
  sigset_t pending;
  sigpending(&pending);
  CHECK_OR_EXIT(sigismember(&pending, SIGXFSZ), 4); /* still the program's */
  struct timespec zero = {0, 0};
  CHECK_OR_EXIT(sigtimedwait(&set, NULL, &zero) == SIGXFSZ, 5);
  CHECK_OR_EXIT(sigtimedwait(&set, NULL, &zero) == -1, 6); /* and only the one */
  file_close(&f);
}

static void test_programs_pending_sigxfsz_kept(void **state) {
  (void)state;
  run_limited(pending_sigxfsz_body);
}

/* A file whose last line was cut short (an earlier writer's write hit a
 * full disk). The log's first line lands glued onto it: that one bad line
 * stays (never truncated), and the line is written again, whole. */
static void test_cut_line_repaired(void **state) {
  (void)state;
  char path[128], why[256];
  in_dir(path, sizeof path, "cut.jsonl");
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  assert_int_equal(write(fd, "{\"a\":1}\n{\"cu", 12), 12);
  close(fd);
  gs_file f;
  assert_int_equal(file_open_append(path, 0, &f, why, sizeof why), 0);
  assert_int_equal(f.tail, 1);
  assert_int_equal(file_write(&f, "{\"b\":2}\n{\"c\":3}\n", 16, NULL), 16);
  assert_int_equal(file_write(&f, "{\"d\":4}\n", 8, NULL), 8); /* after a whole line: once */
  file_close(&f);
  assert_string_equal(slurp(path), "{\"a\":1}\n{\"cu{\"b\":2}\n{\"c\":3}\n{\"b\":2}\n{\"d\":4}\n");
}

/* The debug file, written by many threads at once, ends a cut line when
 * it is opened. A FIFO is never opened for reading (it would then never
 * fail with ENXIO, fifo(7)): test_refusals. */
static void test_debug_file_ends_cut_line(void **state) {
  (void)state;
  char path[128], why[256];
  in_dir(path, sizeof path, "cut.debug");
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  assert_int_equal(write(fd, "gemmshim h:1:1 WARN cu", 22), 22);
  close(fd);
  gs_file f;
  assert_int_equal(file_open_append(path, 1, &f, why, sizeof why), 0);
  assert_int_equal(file_end_cut_line(&f), 1);
  assert_int_equal(file_end_cut_line(&f), 0);
  assert_int_equal(file_write(&f, "line\n", 5, NULL), 5);
  file_close(&f);
  assert_string_equal(slurp(path), "gemmshim h:1:1 WARN cu\nline\n");
}

static int group_setup(void **state) {
  (void)state;
  return tmpdir_make(dir, sizeof dir, "files");
}

static int group_teardown(void **state) {
  (void)state;
  return tmpdir_remove(dir);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_regular_file_appended),
      cmocka_unit_test(test_refusals),
      cmocka_unit_test(test_character_device),
      cmocka_unit_test(test_refused_before_open),
      cmocka_unit_test(test_checked_file_is_opened_file),
      cmocka_unit_test(test_read_end_not_reopened_for_writing),
      cmocka_unit_test(test_refusal_texts),
      cmocka_unit_test(test_opened_without_controlling_terminal),
      cmocka_unit_test(test_null_and_full_allowed),
      cmocka_unit_test(test_named_descriptor_shares_offset),
      cmocka_unit_test(test_reused_descriptor),
      cmocka_unit_test(test_no_sigpipe),
      cmocka_unit_test(test_full_pipe_deadline),
      cmocka_unit_test(test_named_pipe_own_description),
      cmocka_unit_test(test_named_pty_own_description),
      cmocka_unit_test(test_named_socket_dontwait),
      cmocka_unit_test(test_named_pipe_shared_description),
      cmocka_unit_test(test_file_size_limit_is_efbig),
      cmocka_unit_test(test_programs_pending_sigxfsz_kept),
      cmocka_unit_test(test_cut_line_repaired),
      cmocka_unit_test(test_debug_file_ends_cut_line),
  };
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
