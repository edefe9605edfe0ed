/* exec.c: the exec family, wrapped so that the routing log's buffered
 * records reach the file before the process image is replaced.
 *
 * Why: execve and its relatives replace the image without running atexit
 * handlers or destructors (execve(2)), so whatever log.c still buffers (up
 * to a second of records) would go with it. Each wrapper flushes the log,
 * bounded and with cancellation off, then calls libc's function of the
 * same name: its return value and errno are the caller's. A child of vfork
 * or clone(CLONE_VM) (whose memory is its parent's), or of a fork that ran
 * no fork handlers (whose buffers hold its parent's records), goes
 * straight to libc: it takes no lock and writes nothing.
 *
 * Guarantees: docs/reliability.md, "Exec". */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "resolve.h"
#include "shim.h"
#include "base/sys.h"

#define GS_EXPORT __attribute__((visibility("default")))

/* The pid of the process whose memory this is; 0 before load. Atomic. */
static int exec_pid;

static int kernel_pid(void) { return (int)syscall(SYS_getpid); }

static void exec_after_fork_child(void) { __atomic_store_n(&exec_pid, kernel_pid(), __ATOMIC_RELAXED); }

static void **exec_slot(gs_sys_id id) { return (void **)&((void **)&gs_sys)[id]; }

static void *lookup(gs_sys_id id) {
  void *(*real_dlsym)(void *, const char *) = (void *(*)(void *, const char *))gs_resolve_real_dlsym();
  return real_dlsym ? real_dlsym(RTLD_NEXT, gs_sys_names[id]) : NULL;
}

static const gs_sys_id exec_entries[] = {GS_SYS_execve,  GS_SYS_execv,   GS_SYS_execvp,
                                         GS_SYS_execvpe, GS_SYS_fexecve, GS_SYS_execveat};

void exec_init(void) {
  for (size_t i = 0; i < sizeof exec_entries / sizeof exec_entries[0]; i++)
    if (!__atomic_load_n(exec_slot(exec_entries[i]), __ATOMIC_ACQUIRE))
      __atomic_store_n(exec_slot(exec_entries[i]), lookup(exec_entries[i]), __ATOMIC_RELEASE);
  __atomic_store_n(&exec_pid, kernel_pid(), __ATOMIC_RELAXED);
  pthread_atfork(NULL, NULL, exec_after_fork_child);
}

/* Whether the shim's memory is this process's own (not a vfork child's
 * view of its parent's). 0 before load too: nothing is buffered yet. */
static int own_memory(void) {
  int pid = __atomic_load_n(&exec_pid, __ATOMIC_RELAXED);
  return pid != 0 && kernel_pid() == pid;
}

/* Flushes when the memory is ours; returns own_memory(). errno is kept.
 *
 * execve is async-signal-safe (POSIX XSH 2.4.3, signal-safety(7)): a
 * program may exec from a signal handler, and the handler may have
 * interrupted this very thread inside the shim, holding one of its locks
 * (the log's, the debug output's). Flushing then would wait for that lock
 * forever. Every entry into the shim's code on a program thread is inside
 * cancel_enter/cancel_leave (cancel.c), so a thread already inside one
 * has interrupted the shim: its exec goes straight to libc's function, and
 * what the log still buffers is lost, as it would be without the wrapper.
 * A lock another thread holds is released within the flush's bound. */
static int before_exec(void) {
  if (!own_memory()) return 0;
  if (cancel_inside()) return 1;
  int saved_errno = errno;
  cancel_enter();
  log_flush_before_exec();
  cancel_leave();
  errno = saved_errno;
  return 1;
}

/* libc's function of entry id; looked up now if exec_init has not run yet
 * (an exec from a constructor that ran before the shim's), never in a vfork
 * child of a loaded shim (the loader's lock may be its parent's). NULL:
 * -1 with ENOSYS. */
static void *real_of(gs_sys_id id, int own) {
  void *p = __atomic_load_n(exec_slot(id), __ATOMIC_ACQUIRE);
  if (!p && (own || !__atomic_load_n(&exec_pid, __ATOMIC_RELAXED))) {
    p = lookup(id);
    if (p) __atomic_store_n(exec_slot(id), p, __ATOMIC_RELEASE);
  }
  if (!p) errno = ENOSYS;
  return p;
}

/* The call, through the table's fault injection in our own process only:
 * a vfork child writes nothing, not even the fault counters. */
#define REAL_EXEC(name, ...)                                                   \
  do {                                                                         \
    int own_ = before_exec();                                                  \
    if (!real_of(GS_SYS_##name, own_)) return -1;                              \
    return own_ ? GS_CALL(name, __VA_ARGS__) : gs_sys.name(__VA_ARGS__);       \
  } while (0)

static int do_execve(const char *path, char *const argv[], char *const envp[]) {
  REAL_EXEC(execve, path, argv, envp);
}

static int do_execv(const char *path, char *const argv[]) { REAL_EXEC(execv, path, argv); }

static int do_execvp(const char *file, char *const argv[]) { REAL_EXEC(execvp, file, argv); }

GS_EXPORT int execve(const char *path, char *const argv[], char *const envp[]) {
  return do_execve(path, argv, envp);
}

GS_EXPORT int execv(const char *path, char *const argv[]) { return do_execv(path, argv); }

GS_EXPORT int execvp(const char *file, char *const argv[]) { return do_execvp(file, argv); }

GS_EXPORT int execvpe(const char *file, char *const argv[], char *const envp[]) {
  REAL_EXEC(execvpe, file, argv, envp);
}

GS_EXPORT int fexecve(int fd, char *const argv[], char *const envp[]) { REAL_EXEC(fexecve, fd, argv, envp); }

GS_EXPORT int execveat(int dirfd, const char *path, char *const argv[], char *const envp[], int flags) {
  REAL_EXEC(execveat, dirfd, path, argv, envp, flags);
}

/* The variadic ones, as glibc's posix/execl.c, execlp.c and execle.c: the
 * arguments up to the NULL that ends them (E2BIG past INT_MAX), in an array
 * on the stack (no malloc: a vfork child may call these), then for execle
 * the environment after that NULL. */
#define COUNT_ARGS(arg, argc)                                                  \
  do {                                                                         \
    va_list ap_;                                                               \
    va_start(ap_, arg);                                                        \
    for (argc = 1; va_arg(ap_, const char *); argc++) {                        \
      if (argc == INT_MAX) {                                                   \
        va_end(ap_);                                                           \
        errno = E2BIG;                                                         \
        return -1;                                                             \
      }                                                                        \
    }                                                                          \
    va_end(ap_);                                                               \
  } while (0)

/* Declares argv (the arguments from arg to the NULL, NULL included) and
 * leaves the va_list ap open just after that NULL (execle's environment). */
#define COLLECT_ARGS(arg, argv, ap)                                            \
  ptrdiff_t argc_;                                                             \
  COUNT_ARGS(arg, argc_);                                                      \
  char *argv[argc_ + 1];                                                       \
  va_list ap;                                                                  \
  va_start(ap, arg);                                                           \
  argv[0] = (char *)arg;                                                       \
  for (ptrdiff_t i_ = 1; i_ <= argc_; i_++) argv[i_] = va_arg(ap, char *)

GS_EXPORT int execl(const char *path, const char *arg, ...) {
  COLLECT_ARGS(arg, argv, ap);
  va_end(ap);
  return do_execv(path, argv);
}

GS_EXPORT int execlp(const char *file, const char *arg, ...) {
  COLLECT_ARGS(arg, argv, ap);
  va_end(ap);
  return do_execvp(file, argv);
}

GS_EXPORT int execle(const char *path, const char *arg, ...) {
  COLLECT_ARGS(arg, argv, ap);
  char *const *envp = va_arg(ap, char *const *);
  va_end(ap);
  return do_execve(path, argv, envp);
}
