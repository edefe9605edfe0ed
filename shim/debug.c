/* debug.c: WARN/INFO/TRACE messages, NCCL style:
 *
 *     gemmshim <host>:<pid>:<tid> INFO <message>
 *
 * to stderr or to GEMMSHIM_DEBUG_FILE (placeholders as in GEMMSHIM_LOG:
 * %h host, %p pid, %r rank, %% a percent). Each message is formatted into a
 * stack buffer and written with one write(), so lines from many threads and
 * processes sharing the file never interleave mid-line. gs_debug works before
 * options_init has run (gs_opt is zero: WARN, stderr) and from any thread. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "shim.h"
#include "sys.h"

/* NCCL's own limit: long enough for any message the shim writes; a longer
 * one ends in "..." rather than spilling into a second write. */
#define DEBUG_LINE_MAX 1024

static const char *const level_names[] = {"WARN", "INFO", "TRACE"};

/* Written by debug_init, read by every thread: atomics keep the readers
 * from seeing a half-switched state and keep ThreadSanitizer quiet. */
static int debug_fd = STDERR_FILENO;

/* The host name costs a system call; the pid too (glibc stopped caching it);
 * the tid as well, and TRACE may print once per GEMM. The child of a fork
 * gets fresh values through the atfork handler below. */
static pthread_once_t host_once = PTHREAD_ONCE_INIT;
static char debug_host[256];
static int debug_pid;
static __thread int debug_tid __attribute__((tls_model("initial-exec")));

static void debug_after_fork_child(void) {
  __atomic_store_n(&debug_pid, 0, __ATOMIC_RELAXED);
  debug_tid = 0; /* the forking thread, the child's only one */
}

/* Registered at load, not lazily: a first message from inside another fork
 * handler would otherwise call pthread_atfork while fork holds its lock. */
__attribute__((constructor)) static void debug_register_fork(void) {
  pthread_atfork(NULL, NULL, debug_after_fork_child);
}

static void debug_setup_once(void) {
  if (log_expand_path("%h", debug_host, sizeof debug_host) != 0)
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

static void write_line(int fd, const char *buf, size_t len) {
  ssize_t n;
  do n = GS_CALL(write, fd, buf, len);
  while (n < 0 && errno == EINTR);
  /* Nothing else to do on failure: there is nowhere left to report it. */
}

static void debug_vwrite(int fd, gs_level level, const char *fmt, va_list ap) {
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
  write_line(fd, line, len);
  errno = saved_errno;
}

void gs_debug(gs_level level, const char *fmt, ...) {
  if (level > gs_opt.debug_level) return;
  va_list ap;
  va_start(ap, fmt);
  debug_vwrite(__atomic_load_n(&debug_fd, __ATOMIC_ACQUIRE), level, fmt, ap);
  va_end(ap);
}

/* One warning on stderr, whatever debug_fd is. */
static void warn_stderr(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void warn_stderr(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  debug_vwrite(STDERR_FILENO, GS_LEVEL_WARN, fmt, ap);
  va_end(ap);
}

void debug_init(void) {
  int fd = STDERR_FILENO;
  if (gs_opt.debug_file[0]) {
    char path[sizeof gs_opt.debug_file + 256];
    if (log_expand_path(gs_opt.debug_file, path, sizeof path) != 0) {
      warn_stderr("GEMMSHIM_DEBUG_FILE='%s': too long once %%h/%%p are expanded; debug output goes to stderr instead",
                  gs_opt.debug_file);
    } else {
      /* O_APPEND: forked children keep writing to the same file, and whole
       * lines from each process must not overwrite each other. */
      fd = GS_CALL(open, path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644);
      if (fd < 0) {
        char ebuf[128];
        warn_stderr("GEMMSHIM_DEBUG_FILE='%s': cannot open '%s' (%s); debug output goes to stderr instead",
                    gs_opt.debug_file, path, strerror_r(errno, ebuf, sizeof ebuf));
        fd = STDERR_FILENO;
      }
    }
  }
  int old = __atomic_exchange_n(&debug_fd, fd, __ATOMIC_ACQ_REL);
  if (old != STDERR_FILENO && old != fd) GS_CALL(close, old);
}
