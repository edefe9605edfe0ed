/* files.c: how the shim opens and writes the files a user names for it
 * (the routing log, the debug output) and waits on the ones it reads.
 *
 * The shim runs in every process a job starts (shells, compilers, daemons
 * that close every descriptor), so a file it writes must never cost the
 * host anything or touch a file the user did not mean:
 *
 *  - Opened O_NOFOLLOW (a final symbolic link is refused: it could point
 *    at anything), O_CLOEXEC, O_NONBLOCK (a FIFO with no reader fails at
 *    once with ENXIO instead of blocking in open), O_APPEND and never
 *    O_TRUNC: a file is only ever added to, in whole lines, so a process
 *    cannot wipe what another wrote, whichever of them created it.
 *  - Kept only when fstat says it is a regular file, a FIFO or a character
 *    device (a terminal, /dev/null): the user named it, so writing lines to
 *    it is what was asked. Anything else (a block device, a directory) is
 *    closed unwritten.
 *  - /dev/stdout, /dev/stderr, /dev/fd/N and /proc/self/fd/N are links by
 *    nature and name a descriptor the user plainly means: that descriptor
 *    is duplicated rather than the link followed, so a regular file behind
 *    it shares the program's offset and neither overwrites the other.
 *  - Before each write, fstat checks the descriptor still is the file that
 *    was opened (device and inode). A program that closed it and opened a
 *    file of its own under the same number gets nothing written into it.
 *    (A close and reopen between the check and the write cannot be seen;
 *    the window is one system call.)
 *  - SIGPIPE is blocked on the writing thread around each write and one the
 *    write raised is taken back: a reader that went away is EPIPE for the
 *    shim, never the end of the host (whose default action for SIGPIPE is
 *    to die, losing its buffered output).
 *  - A pipe, FIFO or terminal is written in whole lines of at most PIPE_BUF
 *    bytes after poll() says there is room: such a write neither blocks
 *    (POSIX: a write of up to PIPE_BUF bytes to a pipe with that much room
 *    completes at once) nor interleaves with another process's line. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "shim.h"
#include "sys.h"

uint64_t gs_monotonic_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* ---- opening ----------------------------------------------------------------- */
/* The descriptor a name of an open descriptor means, or -1. */
static int named_descriptor(const char *path) {
  if (strcmp(path, "/dev/stdout") == 0) return STDOUT_FILENO;
  if (strcmp(path, "/dev/stderr") == 0) return STDERR_FILENO;
  const char *digits = NULL;
  if (strncmp(path, "/dev/fd/", 8) == 0) digits = path + 8;
  else if (strncmp(path, "/proc/self/fd/", 14) == 0) digits = path + 14;
  if (!digits || *digits < '0' || *digits > '9') return -1;
  long n = 0;
  for (const char *p = digits; *p; p++) {
    if (*p < '0' || *p > '9' || n > 1000000) return -1;
    n = n * 10 + (*p - '0');
  }
  return (int)n;
}

int file_open_append(const char *path, int debug, gs_file *f, char *why, size_t whylen) {
  char ebuf[128];
  *f = (gs_file)GS_FILE_NONE;
  f->debug = debug;
  int named = named_descriptor(path);
  int fd;
  if (named >= 0) {
    fd = GS_CALL(fcntl, named, F_DUPFD_CLOEXEC, 0);
    if (fd < 0) {
      if (errno == EBADF) snprintf(why, whylen, "descriptor %d is not open", named);
      else snprintf(why, whylen, "cannot duplicate descriptor %d (%s)", named, strerror_r(errno, ebuf, sizeof ebuf));
      return -1;
    }
  } else {
    fd = GS_CALL(open, path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0644);
    if (fd < 0) {
      if (errno == ELOOP)
        snprintf(why, whylen, "a symbolic link, which is not followed; expected a regular file, a FIFO or a device");
      else if (errno == ENXIO)
        snprintf(why, whylen, "a FIFO with no reader");
      else
        snprintf(why, whylen, "%s", strerror_r(errno, ebuf, sizeof ebuf));
      return -1;
    }
  }
  struct stat st;
  if (GS_CALL(fstat, fd, &st) != 0) {
    snprintf(why, whylen, "fstat: %s", strerror_r(errno, ebuf, sizeof ebuf));
    GS_CALL(close, fd);
    return -1;
  }
  /* A socket only arrives through a named descriptor: the user's own. */
  if (!S_ISREG(st.st_mode) && !S_ISFIFO(st.st_mode) && !S_ISCHR(st.st_mode) &&
      !(named >= 0 && S_ISSOCK(st.st_mode))) {
    snprintf(why, whylen, "not a regular file, FIFO or character device");
    GS_CALL(close, fd);
    return -1;
  }
  f->fd = fd;
  f->dev = (uint64_t)st.st_dev;
  f->ino = (uint64_t)st.st_ino;
  f->checked = 1;
  f->stream = !S_ISREG(st.st_mode);
  return 0;
}

int file_is_ours(const gs_file *f) {
  if (f->fd < 0) return 0;
  if (!f->checked) return 1;
  struct stat st;
  /* Only EBADF says the descriptor is gone; fstat fails otherwise on no
   * valid descriptor, so another error cannot mean another file. */
  if (GS_CALL(fstat, f->fd, &st) != 0) return errno != EBADF;
  return (uint64_t)st.st_dev == f->dev && (uint64_t)st.st_ino == f->ino;
}

void file_close(gs_file *f) {
  if (f->fd >= 0 && file_is_ours(f)) GS_CALL(close, f->fd);
  f->fd = -1;
}

/* ---- waiting ---------------------------------------------------------------- */
#define WAIT_SLICE_MS 100

int file_wait(int fd, short events, const volatile uint64_t *deadline_ns) {
  for (;;) {
    uint64_t deadline = deadline_ns ? __atomic_load_n(deadline_ns, __ATOMIC_ACQUIRE) : 0;
    int slice = WAIT_SLICE_MS;
    if (deadline) {
      uint64_t now = gs_monotonic_ns();
      if (now >= deadline) {
        errno = ETIMEDOUT;
        return -1;
      }
      uint64_t left_ms = (deadline - now + 999999) / 1000000;
      if (left_ms < (uint64_t)slice) slice = (int)left_ms;
    }
    /* Slices, so that a deadline set later (at exit) is seen within one. */
    struct pollfd p = {.fd = fd, .events = events};
    int r = GS_CALL(poll, &p, 1, slice);
    if (r < 0 && errno != EINTR) return -1;
    if (r > 0) return 0; /* ready, or an error the next call will report */
  }
}

/* ---- writing ---------------------------------------------------------------- */
static ssize_t write_once(const gs_file *f, const char *buf, size_t len) {
  sigset_t pipe_set, old, pending;
  sigemptyset(&pipe_set);
  sigaddset(&pipe_set, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe_set, &old);
  int was_pending = sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE);
  ssize_t n;
  do n = f->debug ? GS_CALL(debug_write, f->fd, buf, len) : GS_CALL(write, f->fd, buf, len);
  while (n < 0 && errno == EINTR);
  if (n < 0 && errno == EPIPE && !was_pending) {
    /* The write's own SIGPIPE, pending on this thread: take it back. */
    int saved = errno;
    struct timespec zero = {0, 0};
    while (sigtimedwait(&pipe_set, NULL, &zero) < 0 && errno == EINTR) {}
    errno = saved;
  }
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  return n;
}

/* The whole lines at the start of buf that fit PIPE_BUF, or PIPE_BUF bytes
 * of a longer line. */
static size_t pipe_chunk(const char *buf, size_t len) {
  if (len <= PIPE_BUF) return len;
  for (size_t i = PIPE_BUF; i > 0; i--)
    if (buf[i - 1] == '\n') return i;
  return PIPE_BUF;
}

size_t file_write(const gs_file *f, const char *buf, size_t len, const volatile uint64_t *deadline_ns) {
  size_t done = 0;
  while (done < len) {
    size_t n = f->stream ? pipe_chunk(buf + done, len - done) : len - done;
    if (f->stream && file_wait(f->fd, POLLOUT, deadline_ns) != 0) return done;
    ssize_t w = write_once(f, buf + done, n);
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) continue; /* room taken meanwhile */
    if (w < 0) return done;
    if (w == 0) {
      errno = EIO; /* no progress: stop rather than spin */
      return done;
    }
    done += (size_t)w;
  }
  return done;
}
