/* debug.c: WARN/INFO/TRACE messages, NCCL style:
 *
 *     gemmshim <host>:<pid>:<tid> INFO <message>
 *
 * to stderr or to GEMMSHIM_DEBUG_FILE (placeholders as in GEMMSHIM_LOG:
 * %h host, %p pid, %r rank, %% a percent). Each message is formatted into a
 * stack buffer and written with one write(), so lines from many threads and
 * processes sharing the file never interleave mid-line. The file is created
 * at the first message, only ever appended to (files.c), and shared by a
 * forked child unless its name has %p. gs_debug works before
 * the options are read (WARN, stderr) and from any thread. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "base.h"
#include "sys.h"

/* NCCL's own limit: long enough for any message the shim writes; a longer
 * one ends in "..." rather than spilling into a second write. */
#define DEBUG_LINE_MAX 1024

static const char *const level_names[] = {"WARN", "INFO", "TRACE"};

gs_level gs_debug_level = GS_LEVEL_WARN;
char gs_debug_file[GS_PATH_MAX];

/* Where messages go. debug_init names the file; it is opened at the first
 * message (a process that says nothing creates nothing), appended to, and
 * checked before every message to still be the file opened (files.c). The
 * state changes under debug_lock; a message takes a copy of `out` under it
 * and writes outside it. A descriptor no longer ours is left open (it is
 * the program's now), so a copy being written never goes stale. */
enum { DEBUG_STDERR = 0, DEBUG_PENDING, DEBUG_FILE };
static pthread_mutex_t debug_lock = PTHREAD_MUTEX_INITIALIZER;
static int debug_state; /* DEBUG_*; atomic: the stderr case takes no lock */
static gs_file debug_out = GS_FILE_NONE;
static char debug_path[sizeof gs_debug_file + 256]; /* expanded */
static int debug_recheck_path; /* a forked child: %p may name another file */

/* The host name costs a system call; the pid too (glibc stopped caching it);
 * the tid as well, and TRACE may print once per GEMM. The child of a fork
 * gets fresh values through the atfork handler below. */
static pthread_once_t host_once = PTHREAD_ONCE_INIT;
static char debug_host[256];
static int debug_pid;
static __thread int debug_tid __attribute__((tls_model("initial-exec")));

/* The forking thread is the child's only one: a debug_lock another thread
 * held at the fork is nobody's in the child. */
static void debug_after_fork_child(void) {
  __atomic_store_n(&debug_pid, 0, __ATOMIC_RELAXED);
  debug_tid = 0;
  pthread_mutex_init(&debug_lock, NULL);
  debug_recheck_path = 1;
}

/* Registered at load, not lazily: a first message from inside another fork
 * handler would otherwise call pthread_atfork while fork holds its lock. */
__attribute__((constructor)) static void debug_register_fork(void) {
  pthread_atfork(NULL, NULL, debug_after_fork_child);
}

static void debug_setup_once(void) {
  if (path_expand_here("%h", debug_host, sizeof debug_host) != 0)
    snprintf(debug_host, sizeof debug_host, "unknown");
}

static int current_pid(void) {
  int pid = __atomic_load_n(&debug_pid, __ATOMIC_RELAXED);
  if (pid == 0) {
    pid = (int)getpid();
    __atomic_store_n(&debug_pid, pid, __ATOMIC_RELAXED);
  }
  return pid;
}

static int current_tid(void) {
  if (debug_tid == 0) debug_tid = (int)syscall(SYS_gettid);
  return debug_tid;
}

/* A message waits this long at most for room in a pipe, FIFO or terminal
 * whose reader is slow or gone (stderr too: files.c), then is dropped:
 * messages come from the program's threads. A terminal takes what fits,
 * so a line cut there by the deadline stays cut (a pipe takes a line of
 * up to PIPE_BUF bytes whole or not at all, pipe(7)). */
#define DEBUG_WAIT_MS 10

/* 0 when the line went out, or was dropped for a reader too slow; -1 with
 * errno when the file refused it (a full disk, /dev/full, EIO). */
static int write_line(const gs_file *f, const char *buf, size_t len) {
  uint64_t deadline = gs_monotonic_ns() + DEBUG_WAIT_MS * 1000000ull;
  size_t n = file_write(f, buf, len, &deadline);
  return n == len || errno == ETIMEDOUT ? 0 : -1;
}


static void warn_stderr(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* The debug file refused a line: every later message goes to stderr, this
 * one included, after one warning there, so that the refusal itself is
 * seen where the messages go. The descriptor is left open: another thread
 * may be writing its copy of it. */
static void file_refused(const gs_file *f, const char *line, size_t len, int err) {
  pthread_mutex_lock(&debug_lock);
  char q[GS_QUOTE_BUF], ebuf[128];
  int first = debug_state == DEBUG_FILE && debug_out.fd == f->fd;
  if (first) __atomic_store_n(&debug_state, DEBUG_STDERR, __ATOMIC_RELEASE);
  gs_quote(debug_path, q);
  pthread_mutex_unlock(&debug_lock);
  if (first)
    warn_stderr("GEMMSHIM_DEBUG_FILE: cannot write '%s' (%s); debug output goes to stderr instead", q,
                strerror_r(err, ebuf, sizeof ebuf));
  gs_file to_stderr = file_stderr_begin();
  write_line(&to_stderr, line, len);
  file_stderr_end(&to_stderr);
}

/* Under debug_lock: open the named file, or fall back to stderr. */
static void open_locked(void) {
  char why[256], q[GS_QUOTE_BUF], qp[GS_QUOTE_BUF];
  if (file_open_append(debug_path, 1, &debug_out, why, sizeof why) == 0) {
    /* A line another process's write left cut (a full disk): ended, so
     * that this process's first line is a line of its own. */
    file_end_cut_line(&debug_out);
    __atomic_store_n(&debug_state, DEBUG_FILE, __ATOMIC_RELEASE);
    return;
  }
  __atomic_store_n(&debug_state, DEBUG_STDERR, __ATOMIC_RELEASE);
  warn_stderr("GEMMSHIM_DEBUG_FILE='%s': cannot open '%s' (%s); debug output goes to stderr instead",
              gs_quote(gs_debug_file, q), gs_quote(debug_path, qp), why);
}

/* Where the next message goes; opens the file at the first one. */
static gs_file current_output(void) {
  if (__atomic_load_n(&debug_state, __ATOMIC_ACQUIRE) == DEBUG_STDERR) return file_stderr_begin();
  pthread_mutex_lock(&debug_lock);
  if (debug_recheck_path) {
    debug_recheck_path = 0;
    char path[sizeof debug_path];
    if (debug_state != DEBUG_STDERR && path_expand_here(gs_debug_file, path, sizeof path) == 0 &&
        strcmp(path, debug_path) != 0) {
      /* A forked child whose %p names its own file: the parent's copy of
       * the descriptor is the child's to close. */
      file_close(&debug_out);
      memcpy(debug_path, path, sizeof path);
      debug_state = DEBUG_PENDING;
    }
  }
  if (debug_state == DEBUG_FILE && !file_is_ours(&debug_out)) {
    int old_fd = debug_out.fd;
    debug_out.fd = -1;
    char q[GS_QUOTE_BUF];
    if (debug_out.named) {
      /* Named by a descriptor: that number may be the program's own file
       * by now, so it is not resolved again (files.c). */
      __atomic_store_n(&debug_state, DEBUG_STDERR, __ATOMIC_RELEASE);
      warn_stderr("GEMMSHIM_DEBUG_FILE: descriptor %d, the shim's copy of '%s', was closed by the program; debug "
                  "output goes to stderr instead",
                  old_fd, gs_quote(debug_path, q));
    } else {
      open_locked();
      if (debug_state == DEBUG_FILE)
        warn_stderr("GEMMSHIM_DEBUG_FILE: descriptor %d no longer is '%s' (the program closed it); reopened", old_fd,
                    gs_quote(debug_path, q));
    }
  } else if (debug_state == DEBUG_PENDING) {
    open_locked();
  }
  int to_file = debug_state == DEBUG_FILE;
  gs_file f = debug_out;
  pthread_mutex_unlock(&debug_lock);
  return to_file ? f : file_stderr_begin();
}

static void debug_vwrite(const gs_file *f, gs_level level, const char *fmt, va_list ap) {
  char line[DEBUG_LINE_MAX];
  const size_t room = sizeof line - 1; /* keeps space for the newline */
  pthread_once(&host_once, debug_setup_once);
  int saved_errno = errno; /* callers format strerror(errno) after us */
  int head = snprintf(line, room, "gemmshim %s:%d:%d %s ", debug_host, current_pid(), current_tid(),
                      level_names[(unsigned)level < 3 ? level : 0]);
  if (head < 0) head = 0;
  if ((size_t)head >= room) head = (int)room - 1;
  int body = vsnprintf(line + head, room - (size_t)head, fmt, ap);
  size_t len = (size_t)head + (body > 0 ? (size_t)body : 0);
  if (len >= room) { /* truncated: mark it where the text stops */
    len = room - 1;
    memcpy(line + len - 3, "...", 3);
  }
  if (len == 0 || line[len - 1] != '\n') line[len++] = '\n';
  if (write_line(f, line, len) != 0 && f->checked) file_refused(f, line, len, errno); /* checked: the file, not stderr */
  errno = saved_errno;
}

/* Messages come from the program's threads too (the exit summary, a
 * warning at load): cancellation is off while one is written, since
 * current_output holds debug_lock across an open (cancel.c). */
void gs_debug(gs_level level, const char *fmt, ...) {
  if (level > gs_debug_level) return;
  cancel_enter();
  int saved_errno = errno;
  gs_file f = current_output();
  errno = saved_errno;
  va_list ap;
  va_start(ap, fmt);
  debug_vwrite(&f, level, fmt, ap);
  va_end(ap);
  file_stderr_end(&f);
  cancel_leave();
  errno = saved_errno;
}

/* One warning on stderr, wherever the debug output goes. */
static void warn_stderr(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  cancel_enter(); /* from debug_init at load too, outside gs_debug */
  int saved_errno = errno;
  gs_file err = file_stderr_begin();
  debug_vwrite(&err, GS_LEVEL_WARN, fmt, ap);
  file_stderr_end(&err);
  errno = saved_errno;
  cancel_leave();
  va_end(ap);
}

/* Names the file; nothing is opened until there is something to say. */
void debug_init(void) {
  pthread_mutex_lock(&debug_lock);
  file_close(&debug_out);
  debug_recheck_path = 0;
  int next = DEBUG_STDERR;
  if (gs_debug_file[0]) {
    char q[GS_QUOTE_BUF];
    if (path_expand_here(gs_debug_file, debug_path, sizeof debug_path) != 0)
      warn_stderr("GEMMSHIM_DEBUG_FILE='%s': too long once %%h/%%p are expanded; debug output goes to stderr instead",
                  gs_quote(gs_debug_file, q));
    else
      next = DEBUG_PENDING;
  }
  __atomic_store_n(&debug_state, next, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&debug_lock);
}
