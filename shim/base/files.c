/* files.c: how the shim opens and writes the files a user names for it
 * (the routing log, the debug output) and waits on the ones it reads.
 *
 * Why: the shim runs in every process a job starts (shells, compilers,
 * daemons that close every descriptor), so a file it writes must never
 * cost the host anything or touch a file the user did not mean. So a file
 * is only appended to, in whole lines, never truncated; only regular
 * files, FIFOs, terminals and a few named devices are opened (opening a
 * device runs its driver's open); a descriptor the user names is
 * duplicated, checked before each write, and never blocks the program;
 * SIGPIPE and SIGXFSZ never end the host; a line cut short by a full disk
 * is made one bad line, and its record is written again.
 *
 * Guarantees: docs/reliability.md, "Files". */
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
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#include "base.h"
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

int file_names_descriptor(const char *path) { return named_descriptor(path); }

#define EXPECTED "expected a regular file, a FIFO, a terminal, /dev/null, /dev/full or /dev/kmsg"

/* Unix98 pseudo-terminal slaves are character majors 136-143 (the kernel's
 * Documentation/admin-guide/devices.txt). Opening one again opens the same
 * terminal; the master (/dev/ptmx, 5:2) would make a new one, so it is never
 * opened this way. */
static int is_pty_slave(const struct stat *st) {
  return S_ISCHR(st->st_mode) && major(st->st_rdev) >= 136 && major(st->st_rdev) <= 143;
}

/* The character devices a line may be written to by name, by their numbers
 * in Documentation/admin-guide/devices.txt: /dev/null 1:3, /dev/full 1:7,
 * /dev/kmsg 1:11; terminals: BSD pseudo-terminal slaves (3), virtual
 * consoles and serial ports (4), /dev/tty and /dev/console (5:0, 5:1),
 * Unix98 pseudo-terminal slaves (136-143), ACM modems (166), USB serial
 * ports (188), low-density serial ports (204), hypervisor consoles (229).
 * A serial port's open raises its modem lines; a user who names one as a
 * log asked for that. Everything else (/dev/ptmx, tapes, watchdogs, ...)
 * acts on its device when opened, so it is never opened. */
static int writable_device(const struct stat *st) {
  unsigned ma = major(st->st_rdev), mi = minor(st->st_rdev);
  return (ma == 1 && (mi == 3 || mi == 7 || mi == 11)) || ma == 3 || ma == 4 || (ma == 5 && mi <= 1) ||
         is_pty_slave(st) || ma == 166 || ma == 188 || ma == 204 || ma == 229;
}

/* 0 when a file of this type may be opened and written by name; else -1
 * with why. */
static int type_refused(const struct stat *st, char *why, size_t whylen) {
  if (S_ISREG(st->st_mode) || S_ISFIFO(st->st_mode) || (S_ISCHR(st->st_mode) && writable_device(st))) return 0;
  const char *what = S_ISLNK(st->st_mode)    ? "a symbolic link, which is not followed"
                     : S_ISDIR(st->st_mode)  ? "a directory"
                     : S_ISSOCK(st->st_mode) ? "a socket, which open() cannot write to"
                     : S_ISBLK(st->st_mode)  ? "a block device, which is not opened (opening a device acts on it)"
                     : S_ISCHR(st->st_mode)  ? "a device other than a terminal, /dev/null, /dev/full or /dev/kmsg, "
                                               "which is not opened (opening a device acts on it)"
                                             : "not a regular file, FIFO or device";
  snprintf(why, whylen, "%s; " EXPECTED, what);
  return -1;
}

int file_name_refused(const char *path, char *why, size_t whylen) {
  struct stat st;
  if (GS_CALL(lstat, path, &st) != 0) return 0; /* absent (made at the first line) or not to be looked at */
  return type_refused(&st, why, whylen);
}

/* open(2) answers ENXIO for a FIFO without a reader and a device with
 * nothing behind it: say which it was. */
static void enxio_why(const struct stat *st, char *why, size_t whylen) {
  if (S_ISFIFO(st->st_mode))
    snprintf(why, whylen, "a FIFO with no reader");
  else if (S_ISCHR(st->st_mode) && major(st->st_rdev) == 5 && minor(st->st_rdev) == 0)
    snprintf(why, whylen, "/dev/tty, and the process has no controlling terminal (tty(4)); " EXPECTED);
  else if (S_ISCHR(st->st_mode))
    snprintf(why, whylen, "a device file with no device behind it; " EXPECTED);
  else
    snprintf(why, whylen, "No such device or address");
}

/* A description of its own, O_NONBLOCK, for the pipe or terminal fd is a
 * copy of; -1 when there is none to be had (no /proc, no reader left, a
 * terminal hung up, fd open for reading only): then fd itself is written,
 * after poll. Opening /proc/self/fd/N for writing opens the file itself
 * (proc(5)), so a read end must not be reopened that way: it would give
 * the shim the write end of the program's own pipe. */
static int own_description(int fd, const struct stat *st) {
  int fl = GS_CALL(fcntl, fd, F_GETFL, 0);
  if (fl < 0 || (fl & O_ACCMODE) == O_RDONLY) return -1;
  char link[48];
  snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
  int own = GS_CALL(open, link, O_WRONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY, 0);
  if (own < 0) return -1;
  struct stat ost;
  if (GS_CALL(fstat, own, &ost) != 0 || ost.st_dev != st->st_dev || ost.st_ino != st->st_ino) {
    GS_CALL(close, own);
    return -1;
  }
  return own;
}

/* Open a file named by path for appending. First found without opening it
 * (O_PATH: no driver's open runs, a FIFO gains no reader or writer;
 * O_NOFOLLOW with O_PATH gives the link itself, open(2)), its type checked
 * on that descriptor, and only then opened, through /proc/self/fd/N, which
 * opens the very file that was checked (proc(5)): a directory on the path
 * replaced in between cannot bring another file in. Nothing there: a
 * regular file is created, O_EXCL, so that nothing else that appeared
 * meanwhile is opened by it. Without /proc the checked name is opened
 * again (O_NOFOLLOW) and must turn out to be the same file.
 *
 * A regular file is opened for reading too, so that a write can see
 * whether it landed on a line cut short (line_ends_before); anything else
 * write-only, since O_RDWR would make the shim a reader of a FIFO, which
 * then never fails with ENXIO (fifo(7)). One without read permission is
 * opened write-only. */
static int open_by_name(const char *path, int *rw_out, char *why, size_t whylen) {
  char ebuf[128];
  const int flags = O_APPEND | O_CLOEXEC | O_NONBLOCK | O_NOCTTY;
  for (int attempt = 0; attempt < 2; attempt++) {
    int pfd = GS_CALL(open, path, O_PATH | O_NOFOLLOW | O_CLOEXEC, 0);
    if (pfd < 0 && errno == ENOENT) {
      int fd = GS_CALL(open, path, O_CREAT | O_EXCL | O_RDWR | O_NOFOLLOW | flags, 0644);
      if (fd < 0 && errno == EACCES) fd = GS_CALL(open, path, O_CREAT | O_EXCL | O_WRONLY | O_NOFOLLOW | flags, 0644);
      else *rw_out = 1;
      if (fd >= 0) return fd;
      if (errno == EEXIST) continue; /* made meanwhile: look at it */
      snprintf(why, whylen, "%s", strerror_r(errno, ebuf, sizeof ebuf));
      return -1;
    }
    if (pfd < 0) {
      snprintf(why, whylen, "%s", strerror_r(errno, ebuf, sizeof ebuf));
      return -1;
    }
    struct stat st;
    if (GS_CALL(fstat, pfd, &st) != 0) {
      snprintf(why, whylen, "fstat: %s", strerror_r(errno, ebuf, sizeof ebuf));
      GS_CALL(close, pfd);
      return -1;
    }
    if (type_refused(&st, why, whylen) != 0) {
      GS_CALL(close, pfd);
      return -1;
    }
    int rw = S_ISREG(st.st_mode);
    char link[48];
    snprintf(link, sizeof link, "/proc/self/fd/%d", pfd);
    const char *name = link;
    int by_link = 1;
    int fd = GS_CALL(open, name, (rw ? O_RDWR : O_WRONLY) | flags, 0);
    if (fd < 0 && errno == ENOENT) { /* no /proc: the name itself, once more */
      name = path;
      by_link = 0;
      fd = GS_CALL(open, name, (rw ? O_RDWR : O_WRONLY) | O_NOFOLLOW | flags, 0);
    }
    if (fd < 0 && rw && errno == EACCES) {
      rw = 0;
      fd = GS_CALL(open, name, O_WRONLY | (by_link ? 0 : O_NOFOLLOW) | flags, 0);
    }
    int err = errno;
    GS_CALL(close, pfd);
    if (fd < 0) {
      if (err == ENXIO) enxio_why(&st, why, whylen);
      else if (err == ELOOP) snprintf(why, whylen, "a symbolic link, which is not followed; " EXPECTED);
      else snprintf(why, whylen, "%s", strerror_r(err, ebuf, sizeof ebuf));
      return -1;
    }
    struct stat ost;
    if (!by_link && (GS_CALL(fstat, fd, &ost) != 0 || ost.st_dev != st.st_dev || ost.st_ino != st.st_ino)) {
      GS_CALL(close, fd);
      snprintf(why, whylen, "replaced by another file while it was opened; " EXPECTED);
      return -1;
    }
    *rw_out = rw;
    return fd;
  }
  snprintf(why, whylen, "created and removed again while it was opened; " EXPECTED);
  return -1;
}

int file_open_append(const char *path, int debug, gs_file *f, char *why, size_t whylen) {
  char ebuf[128];
  *f = (gs_file)GS_FILE_NONE;
  f->debug = debug;
  int named = named_descriptor(path);
  int fd, rw = 0;
  if (named >= 0) {
    /* Open for reading only (the read end of a pipe of the program's): a
     * write there is EBADF, and a reopen for writing would be the
     * program's own pipe, so it is refused here. */
    int fl = GS_CALL(fcntl, named, F_GETFL, 0);
    if (fl >= 0 && (fl & O_ACCMODE) == O_RDONLY) {
      snprintf(why, whylen, "descriptor %d is open for reading only; expected one open for writing", named);
      return -1;
    }
    fd = GS_CALL(fcntl, named, F_DUPFD_CLOEXEC, 0);
    if (fd < 0) {
      if (errno == EBADF) snprintf(why, whylen, "descriptor %d is not open", named);
      else snprintf(why, whylen, "cannot duplicate descriptor %d (%s)", named, strerror_r(errno, ebuf, sizeof ebuf));
      return -1;
    }
  } else if ((fd = open_by_name(path, &rw, why, whylen)) < 0) {
    return -1;
  }
  struct stat st;
  if (GS_CALL(fstat, fd, &st) != 0) {
    snprintf(why, whylen, "fstat: %s", strerror_r(errno, ebuf, sizeof ebuf));
    GS_CALL(close, fd);
    return -1;
  }
  /* A descriptor the program handed over (/dev/stdout, /dev/fd/N) is open
   * already: any file, FIFO, device or socket of the program's is written
   * (a file opened by name was checked before it was opened). */
  if (named >= 0 && !S_ISREG(st.st_mode) && !S_ISFIFO(st.st_mode) && !S_ISCHR(st.st_mode) && !S_ISSOCK(st.st_mode)) {
    snprintf(why, whylen, "a descriptor of another kind (a directory, a block device); expected a regular file, a "
                          "FIFO, a character device or a socket");
    GS_CALL(close, fd);
    return -1;
  }
  f->nonblock = named < 0; /* opened O_NONBLOCK above */
  if (named >= 0 && (S_ISFIFO(st.st_mode) || is_pty_slave(&st))) {
    int own = own_description(fd, &st);
    if (own >= 0) {
      GS_CALL(close, fd);
      fd = own;
      f->nonblock = 1;
    }
  }
  f->fd = fd;
  f->dev = (uint64_t)st.st_dev;
  f->ino = (uint64_t)st.st_ino;
  f->checked = 1;
  f->stream = !S_ISREG(st.st_mode);
  f->named = named >= 0;
  f->sock = S_ISSOCK(st.st_mode);
  f->tail = rw && S_ISREG(st.st_mode);
  return 0;
}

/* ---- stderr ------------------------------------------------------------------ */
/* Messages go to the program's stderr, whose description is the program's
 * and usually blocking: a pipe nobody drains (a supervisor that stopped
 * reading) or a terminal whose output is stopped (^S) would block the
 * program's thread in write(2) for good. So, as for a named descriptor, a
 * pipe, FIFO or pseudo-terminal on fd 2 is written through a description
 * of the shim's own, O_NONBLOCK, opened through /proc/self/fd/2; a socket
 * with send(MSG_DONTWAIT); anything else of stream kind after poll(). The
 * message then waits at most its deadline (debug.c: 10 ms) and is dropped.
 *
 * The own description lives for one message and is closed after it. Kept
 * longer, it would hold the pipe open behind the program's back: a program
 * that closes its stderr so that its reader sees the end (a shell's $(...)
 * waits for it), or a daemon child that points 0-2 at /dev/null
 * (daemon(3)), would leave that reader waiting for good. For the same
 * reason a fork never hands one to the child: the descriptions of messages
 * in flight are listed under stderr_lock, which the fork handlers take (an
 * open or a close at most, never a write, happens under it), and the child
 * closes them (their threads do not exist there). With more messages in
 * flight than the list holds, a message goes to fd 2 after poll(). */
#define STDERR_OWN_MAX 8
static pthread_mutex_t stderr_lock = PTHREAD_MUTEX_INITIALIZER;
static int stderr_own[STDERR_OWN_MAX]; /* descriptor + 1; 0: a free entry */

/* Cancellation off from prepare to the parent's or child's handler, as
 * for log.c's: close(2) is a cancellation point, met here with the lock
 * held (cancel.c). */
static void stderr_before_fork(void) {
  cancel_enter();
  pthread_mutex_lock(&stderr_lock);
}
static void stderr_after_fork_parent(void) {
  pthread_mutex_unlock(&stderr_lock);
  cancel_leave();
}
static void stderr_after_fork_child(void) {
  for (int i = 0; i < STDERR_OWN_MAX; i++) {
    if (stderr_own[i]) GS_CALL(close, stderr_own[i] - 1);
    stderr_own[i] = 0;
  }
  pthread_mutex_unlock(&stderr_lock);
  cancel_leave();
}

/* At load, not lazily: see debug.c's fork handler. */
__attribute__((constructor)) static void stderr_register_fork(void) {
  pthread_atfork(stderr_before_fork, stderr_after_fork_parent, stderr_after_fork_child);
}

gs_file file_stderr_begin(void) {
  gs_file f = GS_FILE_NONE;
  f.fd = STDERR_FILENO;
  f.debug = 1;
  struct stat st;
  if (GS_CALL(fstat, STDERR_FILENO, &st) != 0) return f; /* closed: the write says so (EBADF) */
  int fl = GS_CALL(fcntl, STDERR_FILENO, F_GETFL, 0);
  if (fl >= 0 && (fl & O_ACCMODE) == O_RDONLY) { /* the read end of a pipe of the program's: not for writing */
    f.fd = -1;
    return f;
  }
  f.stream = !S_ISREG(st.st_mode);
  f.sock = S_ISSOCK(st.st_mode);
  if (!S_ISFIFO(st.st_mode) && !is_pty_slave(&st)) return f;
  pthread_mutex_lock(&stderr_lock);
  int slot = -1;
  for (int i = 0; i < STDERR_OWN_MAX && slot < 0; i++)
    if (!stderr_own[i]) slot = i;
  int own = slot >= 0 ? own_description(STDERR_FILENO, &st) : -1;
  if (own >= 0) stderr_own[slot] = own + 1;
  pthread_mutex_unlock(&stderr_lock);
  if (own >= 0) {
    f.fd = own;
    f.nonblock = 1;
    f.temp = 1;
  }
  return f;
}

void file_stderr_end(gs_file *f) {
  if (!f->temp) return;
  pthread_mutex_lock(&stderr_lock);
  for (int i = 0; i < STDERR_OWN_MAX; i++)
    if (stderr_own[i] == f->fd + 1) {
      stderr_own[i] = 0;
      GS_CALL(close, f->fd);
      break;
    }
  pthread_mutex_unlock(&stderr_lock);
  f->fd = -1;
  f->temp = 0;
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
/* The signals a write can raise whose default action ends the process. */
static const int write_signals[] = {SIGPIPE, SIGXFSZ};

static ssize_t write_once(const gs_file *f, const char *buf, size_t len) {
  sigset_t set, old, pending;
  sigemptyset(&set);
  for (size_t i = 0; i < sizeof write_signals / sizeof write_signals[0]; i++) sigaddset(&set, write_signals[i]);
  pthread_sigmask(SIG_BLOCK, &set, &old);
  sigemptyset(&pending);
  sigpending(&pending);
  int pipe_was_pending = sigismember(&pending, SIGPIPE) == 1;
  int xfsz_was_pending = sigismember(&pending, SIGXFSZ) == 1;
  ssize_t n;
  do {
    if (f->sock) n = GS_CALL(send, f->fd, buf, len, MSG_DONTWAIT | MSG_NOSIGNAL);
    else if (f->debug) n = GS_CALL(debug_write, f->fd, buf, len);
    else n = GS_CALL(write, f->fd, buf, len);
  } while (n < 0 && errno == EINTR);
  /* The write's own signal, pending on this thread: take it back (one the
   * program had pending already stays the program's). */
  int take = n < 0 && errno == EPIPE && !pipe_was_pending ? SIGPIPE
             : n < 0 && errno == EFBIG && !xfsz_was_pending ? SIGXFSZ : 0;
  if (take) {
    int saved = errno;
    sigset_t one;
    sigemptyset(&one);
    sigaddset(&one, take);
    struct timespec zero = {0, 0};
    while (sigtimedwait(&one, NULL, &zero) < 0 && errno == EINTR) {}
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

/* The byte before offset at of f's file is a line's end (or at is 0). */
static int line_ends_before(const gs_file *f, off_t at) {
  char last;
  return at <= 0 || GS_CALL(pread, f->fd, &last, 1, at - 1) != 1 || last == '\n';
}

int file_end_cut_line(const gs_file *f) {
  struct stat st;
  if (!f->tail || GS_CALL(fstat, f->fd, &st) != 0 || line_ends_before(f, st.st_size)) return 0;
  return write_once(f, "\n", 1) == 1;
}

size_t file_write(const gs_file *f, const char *buf, size_t len, const volatile uint64_t *deadline_ns) {
  size_t done = 0;
  int glued = 0; /* the first line went onto the end of a line cut short */
  /* A description the shim shares with the program may block: room first.
   * Its own (O_NONBLOCK) or a socket's send is tried at once. */
  int poll_first = f->stream && !f->nonblock && !f->sock;
  while (done < len) {
    size_t n = f->stream ? pipe_chunk(buf + done, len - done) : len - done;
    if (poll_first && file_wait(f->fd, POLLOUT, deadline_ns) != 0) return done;
    ssize_t w = write_once(f, buf + done, n);
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      /* No room (or it was taken meanwhile): wait for some, then again. */
      if (!poll_first && file_wait(f->fd, POLLOUT, deadline_ns) != 0) return done;
      continue;
    }
    if (w < 0) return done;
    if (w == 0) {
      errno = EIO; /* no progress: stop rather than spin */
      return done;
    }
    /* Where the first piece landed (O_APPEND: it ends at the offset, and
     * no other write comes between the seek to the end and the write,
     * POSIX write(2)), and what is before it. */
    if (f->tail && !f->debug && done == 0) glued = !line_ends_before(f, GS_CALL(lseek, f->fd, 0, SEEK_CUR) - w);
    done += (size_t)w;
  }
  if (glued) {
    /* That line is now one bad line with the cut one; the record is
     * written again after the rest, whole. */
    const char *nl = memchr(buf, '\n', len);
    size_t first = nl ? (size_t)(nl - buf) + 1 : len;
    for (size_t again = 0; again < first;) {
      ssize_t w = write_once(f, buf + again, first - again);
      if (w <= 0) break;
      again += (size_t)w;
    }
  }
  return done;
}
