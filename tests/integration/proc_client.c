/* proc_client.c: what processes do around the shim (test_processes.py).
 *
 * bf16 cublasGemmEx calls (64x64x64, fp32 out, compute 32F), which the shim
 * routes as GEMMSHIM_MODE and STANDIN_CC say, on T threads with a handle
 * and a stream each, while the main thread does one of:
 *
 *   --fork-at=K        once K calls have been made in all, fork; the child
 *                      makes --child-calls=C calls on a fresh handle and
 *                      stream and exits 0. The parent gives it --timeout=S
 *                      seconds (default 20), then kills it and exits 3:
 *                      a child that hangs fails the test, never the suite.
 *   --child-hang=H     (with --fork-at) a thread of the parent is inside
 *                      something of the program's own at the fork, which
 *                      the child enters after its calls (POSIX allows such
 *                      a child async-signal-safe calls only): H = lock (a
 *                      mutex: the child waits for ever), spin (a flag the
 *                      child spins on for ever, no system call), once
 *                      (pthread_once's routine: glibc runs it again in the
 *                      child; ThreadSanitizer's pthread_once waits for
 *                      ever), vfork (the child vforks, and its vfork
 *                      child waits 4 s for the mutex: the child waits in
 *                      the kernel, where no ptrace stop reaches it), or
 *                      thread-vfork (the same from a second thread of the
 *                      child, its first waiting on the mutex).
 *                      Checks what the parent prints about a hung child,
 *                      one line a thread of it (describe_hang).
 *   --close-fds-at=K   (one thread) after K calls, close descriptors 3..1023,
 *                      as daemons do, open --dir/data0.bin..data3.bin and
 *                      write a 4096-byte pattern to each, make the rest of
 *                      the calls, then read the files back: "files ok" or
 *                      "files changed <name>".
 *   --chdir=DIR        change into DIR after load, before the first call
 *                      (as a program that sets itself up does)
 *   --cancel           one thread makes calls until the log holds it up (a
 *                      GEMMSHIM_LOG pipe nobody reads, GEMMSHIM_LOG_WAIT=1:
 *                      no call returns for 500 ms), calling
 *                      pthread_testcancel between calls; the main thread
 *                      then cancels it (pthread_cancel), prints
 *                      "cancelled", joins it, prints "worker calls <k>",
 *                      and makes --calls=N calls of its own.
 *   --exec=VARIANT     after --calls=N calls, exec --exec-file=F (default
 *                      /bin/sh) through VARIANT (execv execve execvp execvpe
 *                      execl execlp execle fexecve execveat) with arguments
 *                      sh -c 'echo "$0|$1|${GS_EXEC_PROBE-unset}"' zero one
 *                      and, for those that take one, the environment
 *                      GS_EXEC_PROBE=from-envp alone. If it returns:
 *                      "exec failed <ret> <errno>", then --calls-after=M
 *                      more calls.
 *   --vfork-exec=F     after --calls=N calls and --pause-ms=P (default 1500:
 *                      the log's writer has taken the calls' records by
 *                      then, 1 s after the first), vfork; the child execv's
 *                      F (argv F) or _exit(127)s; the parent prints
 *                      "vforked", waits for it, prints "child status <s>"
 *                      and makes --calls-after=M more calls.
 *   --calls=N          calls per thread [50]; --threads=T [1]
 *   --stream=own|legacy  each session's own stream [own], or all on the
 *                      legacy stream, the child's too: then they share the
 *                      shim's per-stream state (a scratch slot without
 *                      memory pools), the hardest case for a fork
 *
 * Prints "calls <n> failed <f>" for the parent (and "child calls <n> failed
 * <f>" from a child). Exit 0 when every call returned CUBLAS_STATUS_SUCCESS,
 * 1 when one did not, 2 on a set-up error, 3 when a child hung or died. */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/uio.h>
#include <sys/user.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cublas_v2.h>
#include <cuda.h>

#define DRIVER_FNS(X)                                                          \
  X(cuInit) X(cuDeviceGet) X(cuDevicePrimaryCtxRetain) X(cuCtxSetCurrent)      \
  X(cuStreamCreate) X(cuStreamSynchronize) X(cuMemAlloc_v2) X(cuMemsetD32Async)

static struct {
#define FN_PTR(name) __typeof__(name) *name;
  DRIVER_FNS(FN_PTR)
#undef FN_PTR
} drv;

static void die(const char *what, long code) {
  fprintf(stderr, "proc_client: %s failed (%ld)\n", what, code);
  exit(2);
}
#define CU(call)                                                               \
  do {                                                                         \
    CUresult r_ = (call);                                                      \
    if (r_ != CUDA_SUCCESS) die(#call, (long)r_);                              \
  } while (0)

static CUcontext g_ctx;
#define DIM 64

typedef struct session {
  CUstream stream;
  cublasHandle_t h;
  CUdeviceptr a, b, c;
} session;

static int legacy_stream;

static void session_open(session *x) {
  CU(drv.cuCtxSetCurrent(g_ctx));
  x->stream = NULL;
  if (!legacy_stream) CU(drv.cuStreamCreate(&x->stream, CU_STREAM_NON_BLOCKING));
  if (cublasCreate(&x->h) != CUBLAS_STATUS_SUCCESS) die("cublasCreate", 0);
  if (cublasSetStream(x->h, (cudaStream_t)x->stream) != CUBLAS_STATUS_SUCCESS) die("cublasSetStream", 0);
  CU(drv.cuMemAlloc_v2(&x->a, DIM * DIM * 2));
  CU(drv.cuMemAlloc_v2(&x->b, DIM * DIM * 2));
  CU(drv.cuMemAlloc_v2(&x->c, DIM * DIM * 4));
  /* bf16 1.0 in both halves of each word: every product is 64. */
  CU(drv.cuMemsetD32Async(x->a, 0x3f803f80u, DIM * DIM / 2, x->stream));
  CU(drv.cuMemsetD32Async(x->b, 0x3f803f80u, DIM * DIM / 2, x->stream));
}

static int one_call(session *x) {
  const float alpha = 1, beta = 0;
  cublasStatus_t s = cublasGemmEx(x->h, CUBLAS_OP_T, CUBLAS_OP_N, DIM, DIM, DIM, &alpha, (void *)x->a, CUDA_R_16BF,
                                  DIM, (void *)x->b, CUDA_R_16BF, DIM, &beta, (void *)x->c, CUDA_R_32F, DIM,
                                  CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT_TENSOR_OP);
  return s == CUBLAS_STATUS_SUCCESS ? 0 : 1;
}

static int n_calls = 50, n_threads = 1, fork_at = -1, child_calls = 5, close_at = -1, timeout_s = 20;
static int cancel_mode, calls_after, pause_ms = 1500;
static const char *dir = ".", *exec_variant, *exec_file = "/bin/sh", *vfork_file;
static _Atomic int calls_made, calls_failed, forked;

static void *worker(void *arg) {
  session *x = arg;
  /* The legacy stream is the current context's: each thread sets it. */
  CU(drv.cuCtxSetCurrent(g_ctx));
  for (int i = 0; i < n_calls; i++) {
    calls_failed += one_call(x);
    calls_made++;
  }
  CU(drv.cuStreamSynchronize(x->stream));
  /* --fork-at forks while this thread lives: one that ended unjoined before
   * the fork is, for ThreadSanitizer, a thread the child leaks. */
  while (fork_at >= 0 && !forked) sched_yield();
  return NULL;
}

/* --cancel: calls until cancelled. pthread_testcancel is the program's own
 * cancellation point (pthreads(7)); a GEMM is not one, and a request made
 * while one runs must act here, after it returned. */
static void *cancel_worker(void *arg) {
  session *x = arg;
  CU(drv.cuCtxSetCurrent(g_ctx));
  for (;;) {
    calls_failed += one_call(x);
    calls_made++;
    pthread_testcancel();
  }
  return NULL;
}

static void sleep_ms(int ms) {
  struct timespec t = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&t, NULL);
}

static int run_cancel(session *worker_session, session *own) {
  pthread_t t;
  if (pthread_create(&t, NULL, cancel_worker, worker_session) != 0) die("pthread_create", 0);
  /* Held up: no call returned for 500 ms (the log's writer waits for a
   * reader that never comes, and the call for the writer). */
  int last = -1, still = 0;
  for (int waited = 0; still < 5; waited += 100) {
    if (waited > timeout_s * 1000) {
      printf("never held up (%d calls)\n", (int)calls_made);
      return 2;
    }
    sleep_ms(100);
    int now = calls_made;
    still = now == last && now > 0 ? still + 1 : 0;
    last = now;
  }
  if (pthread_cancel(t) != 0) die("pthread_cancel", 0);
  printf("cancelled\n");
  void *ret;
  if (pthread_join(t, &ret) != 0) die("pthread_join", 0);
  printf("worker calls %d%s\n", (int)calls_made, ret == PTHREAD_CANCELED ? "" : " (not cancelled)");
  for (int i = 0; i < n_calls; i++) {
    calls_failed += one_call(own);
    calls_made++;
  }
  CU(drv.cuStreamSynchronize(own->stream));
  return 0;
}

static int run_exec(session *x) {
  for (int i = 0; i < n_calls; i++) {
    calls_failed += one_call(x);
    calls_made++;
  }
  CU(drv.cuStreamSynchronize(x->stream));
  const char *script = "echo \"$0|$1|${GS_EXEC_PROBE-unset}\"";
  char *argv[] = {"sh", "-c", (char *)script, "zero", "one", NULL};
  char *envp[] = {"GS_EXEC_PROBE=from-envp", NULL};
  const char *v = exec_variant, *f = exec_file;
  fflush(stdout);
  int r;
  if (!strcmp(v, "execv")) r = execv(f, argv);
  else if (!strcmp(v, "execve")) r = execve(f, argv, envp);
  else if (!strcmp(v, "execvp")) r = execvp(f, argv);
  else if (!strcmp(v, "execvpe")) r = execvpe(f, argv, envp);
  else if (!strcmp(v, "execl")) r = execl(f, "sh", "-c", script, "zero", "one", (char *)NULL);
  else if (!strcmp(v, "execlp")) r = execlp(f, "sh", "-c", script, "zero", "one", (char *)NULL);
  else if (!strcmp(v, "execle")) r = execle(f, "sh", "-c", script, "zero", "one", (char *)NULL, envp);
  else if (!strcmp(v, "execveat")) r = execveat(AT_FDCWD, f, argv, envp, 0);
  else if (!strcmp(v, "fexecve")) {
    int fd = open(f, O_RDONLY);
    r = fexecve(fd, argv, envp);
    int e = errno;
    if (fd >= 0) close(fd);
    errno = e;
  } else die(v, 0);
  printf("exec failed %d %d\n", r, errno);
  for (int i = 0; i < calls_after; i++) {
    calls_failed += one_call(x);
    calls_made++;
  }
  CU(drv.cuStreamSynchronize(x->stream));
  return 0;
}

static int run_vfork(session *x) {
  for (int i = 0; i < n_calls; i++) {
    calls_failed += one_call(x);
    calls_made++;
  }
  sleep_ms(pause_ms);
  char *argv[] = {(char *)vfork_file, NULL};
  pid_t pid = vfork();
  if (pid < 0) die("vfork", errno);
  if (pid == 0) {
    execv(vfork_file, argv); /* the only calls a vfork child may make: exec, _exit */
    _exit(127);
  }
  printf("vforked\n");
  int status;
  if (waitpid(pid, &status, 0) != pid) die("waitpid", errno);
  printf("child status %d\n", WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
  for (int i = 0; i < calls_after; i++) {
    calls_failed += one_call(x);
    calls_made++;
  }
  CU(drv.cuStreamSynchronize(x->stream));
  return 0;
}

static const char *child_hang; /* NULL or --child-hang's H */
static pthread_mutex_t program_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t program_once = PTHREAD_ONCE_INIT;
static _Atomic int program_spin, held_at_fork;

static void once_routine(void) {
  held_at_fork = 1;
  while (!forked) sched_yield();
}
static void once_in_child(void) {}

/* Holds what --child-hang names until the fork is made. */
static void *hang_holder(void *arg) {
  (void)arg;
  if (!strcmp(child_hang, "once")) {
    pthread_once(&program_once, once_routine);
    return NULL;
  }
  int lock = strcmp(child_hang, "spin") != 0;
  if (lock) pthread_mutex_lock(&program_lock);
  else program_spin = 1;
  held_at_fork = 1;
  while (!forked) sched_yield();
  if (lock) pthread_mutex_unlock(&program_lock);
  else program_spin = 0;
  return NULL;
}

/* vforks; the vfork child waits 4 s for the mutex the fork left held,
 * the calling thread meanwhile in the kernel. */
static void *vfork_waiting(void *arg) {
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += 4;
  if (vfork() == 0) {
    pthread_mutex_timedlock(&program_lock, &until);
    _exit(0);
  }
  return arg;
}

static void child_enter_held(void) {
  pthread_t t;
  if (!strcmp(child_hang, "lock")) pthread_mutex_lock(&program_lock);
  else if (!strcmp(child_hang, "vfork")) vfork_waiting(NULL);
  else if (!strcmp(child_hang, "thread-vfork")) {
    if (pthread_create(&t, NULL, vfork_waiting, NULL) == 0) pthread_mutex_lock(&program_lock);
  } else if (!strcmp(child_hang, "once")) pthread_once(&program_once, once_in_child);
  else
    while (program_spin) {
    }
}

static void child_main(void) {
  session x;
  session_open(&x);
  int failed = 0;
  for (int i = 0; i < child_calls; i++) failed += one_call(&x);
  CU(drv.cuStreamSynchronize(x.stream));
  printf("child calls %d failed %d\n", child_calls, failed);
  if (child_hang) child_enter_held();
  exit(failed ? 1 : 0); /* exit, not _exit: the shim's exit path runs */
}

/* The object of pid's address space that holds addr: its file name, or
 * "[anon]"; "?" where the map cannot be read. */
static void object_at(pid_t pid, unsigned long long addr, char *out, size_t n) {
  char path[64], line[512];
  snprintf(out, n, "?");
  snprintf(path, sizeof path, "/proc/%d/maps", (int)pid);
  FILE *f = fopen(path, "r");
  if (!f) return;
  snprintf(out, n, "[anon]");
  while (fgets(line, sizeof line, f)) {
    unsigned long long lo, hi;
    int name_at = 0;
    if (sscanf(line, "%llx-%llx %*s %*s %*s %*s %n", &lo, &hi, &name_at) < 2 || addr < lo || addr >= hi) continue;
    line[strcspn(line, "\n")] = '\0';
    if (name_at > 0 && line[name_at]) snprintf(out, n, "%s", line + name_at);
    break;
  }
  fclose(f);
}

/* Set when the child ended while it was being described: a stop's wait
 * reaped it (its pid is then no longer ours to kill or wait for), with
 * its wait status. */
static int child_reaped, child_reaped_status;
/* Threads that did not stop: seized until the kill, after which each is a
 * traced zombie only its tracer's wait clears (ptrace(2)); the child's
 * own end waits for them. */
static pid_t stuck_tids[64];
static int n_stuck;

/* Where thread tid of child pid is now, read by stopping it (ptrace(2):
 * PTRACE_SEIZE, PTRACE_INTERRUPT, the registers, detach), also for a
 * thread that runs or yields, which /proc/<pid>/task/<tid>/syscall shows
 * as "running" without a pc: its program counter and, on x86-64, the
 * system call it stopped in or returning from (orig_rax, which the kernel
 * sets at a system call's entry and to -1 at an interrupt's), else -1.
 * 0 when it cannot be read; *stuck when the thread did not stop within
 * a second (an uninterruptible sleep, as a vfork parent's; a second, not
 * less, for a thread that waits for a busy CPU): it stays seized until
 * the kill, in stuck_tids. */
static unsigned long long thread_stop(pid_t pid, pid_t tid, long *syscall_nr, int *stuck) {
  *syscall_nr = -1;
  if (ptrace(PTRACE_SEIZE, tid, NULL, NULL) != 0) return 0;
  if (ptrace(PTRACE_INTERRUPT, tid, NULL, NULL) != 0) {
    ptrace(PTRACE_DETACH, tid, NULL, NULL);
    return 0;
  }
  int st = 0;
  pid_t r = 0;
  for (int ms = 0; ms < 1000 && (r = waitpid(tid, &st, __WALL | WNOHANG)) == 0; ms++) {
    struct timespec t = {0, 1000000};
    nanosleep(&t, NULL);
  }
  if (r != tid) {
    *stuck = 1;
    if (n_stuck < (int)(sizeof stuck_tids / sizeof stuck_tids[0])) stuck_tids[n_stuck++] = tid;
    return 0;
  }
  if (!WIFSTOPPED(st)) { /* the thread ended; the main one's end is the child's */
    if (tid == pid) child_reaped = 1, child_reaped_status = st;
    return 0;
  }
  unsigned long long pc = 0;
  struct user_regs_struct regs;
  struct iovec io = {&regs, sizeof regs};
  if (ptrace(PTRACE_GETREGSET, tid, (void *)(uintptr_t)NT_PRSTATUS, &io) == 0) {
#if defined(__x86_64__)
    pc = regs.rip;
    *syscall_nr = (long)regs.orig_rax;
#elif defined(__aarch64__)
    pc = regs.pc;
#endif
  }
  ptrace(PTRACE_DETACH, tid, NULL, NULL);
  return pc;
}

#define STOPS 20

/* Where each thread of a hung child is. First a line from /proc/<pid>/
 * task/<tid>/syscall (proc(5): the call's number, six arguments, stack
 * pointer, pc; "running" when in none):
 *   proc_client: hung thread <tid>: syscall <nr> pc <object> arg0 <object>
 *   proc_client: hung thread <tid>: running   (or the file's other text)
 * then one line for each different place among STOPS stops 2 ms apart
 * (thread_stop), in the order first seen:
 *   proc_client: hung thread <tid> stopped in <object>[ at syscall <nr>]
 *   proc_client: hung thread <tid> did not stop within 1 s   (the last)
 * objects named as object_at does. The test tells a wait in the program's
 * or the shim's code (a pthread lock waits in libc, a spin loop runs in
 * its own code) from one inside a sanitizer's runtime. */
static void describe_hang(pid_t pid) {
  char tasks[64];
  snprintf(tasks, sizeof tasks, "/proc/%d/task", (int)pid);
  DIR *d = opendir(tasks);
  if (!d) {
    fprintf(stderr, "proc_client: hung child %d: cannot read %s (%s)\n", (int)pid, tasks, strerror(errno));
    return;
  }
  struct dirent *e;
  while (!child_reaped && (e = readdir(d))) {
    if (e->d_name[0] == '.') continue;
    pid_t tid = (pid_t)atoi(e->d_name);
    char path[sizeof tasks + sizeof e->d_name + 16], line[512] = "";
    snprintf(path, sizeof path, "%s/%s/syscall", tasks, e->d_name);
    FILE *f = fopen(path, "r");
    if (f) {
      if (!fgets(line, sizeof line, f)) line[0] = '\0';
      fclose(f);
    }
    line[strcspn(line, "\n")] = '\0';
    long nr;
    unsigned long long a[6], sp, pc;
    if (sscanf(line, "%ld %llx %llx %llx %llx %llx %llx %llx %llx", &nr, &a[0], &a[1], &a[2], &a[3], &a[4], &a[5], &sp,
               &pc) == 9) {
      char pc_obj[256], arg_obj[256];
      object_at(pid, pc, pc_obj, sizeof pc_obj);
      object_at(pid, a[0], arg_obj, sizeof arg_obj);
      fprintf(stderr, "proc_client: hung thread %d: syscall %ld pc %s arg0 %s\n", (int)tid, nr, pc_obj, arg_obj);
    } else {
      fprintf(stderr, "proc_client: hung thread %d: %s\n", (int)tid, line[0] ? line : "(unreadable)");
    }
    struct { char obj[256]; long nr; } seen[STOPS];
    int n_seen = 0, stuck = 0;
    for (int i = 0; i < STOPS && !child_reaped; i++) {
      long stop_nr;
      unsigned long long stop_pc = thread_stop(pid, tid, &stop_nr, &stuck);
      if (stuck) {
        fprintf(stderr, "proc_client: hung thread %d did not stop within 1 s\n", (int)tid);
        break;
      }
      if (stop_pc) object_at(pid, stop_pc, seen[n_seen].obj, sizeof seen[n_seen].obj);
      else snprintf(seen[n_seen].obj, sizeof seen[n_seen].obj, "?");
      seen[n_seen].nr = stop_nr < 0 ? -1 : stop_nr;
      int known = 0;
      for (int j = 0; j < n_seen; j++) known |= seen[j].nr == seen[n_seen].nr && !strcmp(seen[j].obj, seen[n_seen].obj);
      if (!known) {
        if (seen[n_seen].nr >= 0)
          fprintf(stderr, "proc_client: hung thread %d stopped in %s at syscall %ld\n", (int)tid, seen[n_seen].obj,
                  seen[n_seen].nr);
        else
          fprintf(stderr, "proc_client: hung thread %d stopped in %s\n", (int)tid, seen[n_seen].obj);
        n_seen++;
      }
      struct timespec ms = {0, 2000000};
      nanosleep(&ms, NULL);
    }
  }
  closedir(d);
}

/* 0 when the child exited 0 within the timeout. */
static int wait_child(pid_t pid) {
  struct timespec start, now;
  clock_gettime(CLOCK_MONOTONIC, &start);
  for (;;) {
    int status;
    pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) {
      if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return 0;
      fprintf(stderr, "proc_client: child status %#x\n", status);
      return -1;
    }
    clock_gettime(CLOCK_MONOTONIC, &now);
    if ((now.tv_sec - start.tv_sec) * 1000000000LL + (now.tv_nsec - start.tv_nsec) >= timeout_s * 1000000000LL) {
      fprintf(stderr, "proc_client: child %d hung for %d s\n", (int)pid, timeout_s);
      describe_hang(pid);
      if (child_reaped) {
        fprintf(stderr, "proc_client: child %d ended while it was described (status %#x)\n", (int)pid,
                child_reaped_status);
        return -1;
      }
      kill(pid, SIGKILL);
      for (int i = 0; i < n_stuck; i++)
        if (stuck_tids[i] != pid) waitpid(stuck_tids[i], NULL, __WALL);
      waitpid(pid, &status, 0);
      return -1;
    }
    struct timespec ms = {0, 1000000};
    nanosleep(&ms, NULL);
  }
}

static unsigned char pattern_byte(int file, int i) { return (unsigned char)(file * 37 + i * 11 + 5); }

static void write_own_files(void) {
  for (int f = 0; f < 4; f++) {
    char path[1024];
    unsigned char buf[4096];
    snprintf(path, sizeof path, "%s/data%d.bin", dir, f);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) die("open own file", errno);
    for (int i = 0; i < 4096; i++) buf[i] = pattern_byte(f, i);
    if (write(fd, buf, sizeof buf) != (ssize_t)sizeof buf) die("write own file", errno);
    /* Left open, like a program's data files: a shim writing to a
     * reused descriptor would write here. */
  }
}

static int check_own_files(void) {
  int ok = 1;
  for (int f = 0; f < 4; f++) {
    char path[1024];
    unsigned char buf[8192];
    snprintf(path, sizeof path, "%s/data%d.bin", dir, f);
    FILE *fp = fopen(path, "rb");
    size_t n = fp ? fread(buf, 1, sizeof buf, fp) : 0;
    if (fp) fclose(fp);
    int same = n == 4096;
    for (size_t i = 0; same && i < n; i++) same = buf[i] == pattern_byte(f, (int)i);
    if (!same) {
      printf("files changed data%d.bin (%zu bytes)\n", f, n);
      ok = 0;
    }
  }
  if (ok) printf("files ok\n");
  return ok;
}

int main(int argc, char **argv) {
  const char *chdir_to = NULL;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strncmp(a, "--calls=", 8)) n_calls = atoi(a + 8);
    else if (!strncmp(a, "--threads=", 10)) n_threads = atoi(a + 10);
    else if (!strncmp(a, "--fork-at=", 10)) fork_at = atoi(a + 10);
    else if (!strncmp(a, "--child-calls=", 14)) child_calls = atoi(a + 14);
    else if (!strncmp(a, "--child-hang=", 13)) child_hang = a + 13;
    else if (!strncmp(a, "--close-fds-at=", 15)) close_at = atoi(a + 15);
    else if (!strncmp(a, "--timeout=", 10)) timeout_s = atoi(a + 10);
    else if (!strncmp(a, "--dir=", 6)) dir = a + 6;
    else if (!strncmp(a, "--chdir=", 8)) chdir_to = a + 8;
    else if (!strcmp(a, "--cancel")) cancel_mode = 1;
    else if (!strncmp(a, "--exec=", 7)) exec_variant = a + 7;
    else if (!strncmp(a, "--exec-file=", 12)) exec_file = a + 12;
    else if (!strncmp(a, "--vfork-exec=", 13)) vfork_file = a + 13;
    else if (!strncmp(a, "--calls-after=", 14)) calls_after = atoi(a + 14);
    else if (!strncmp(a, "--pause-ms=", 11)) pause_ms = atoi(a + 11);
    else if (!strcmp(a, "--stream=legacy")) legacy_stream = 1;
    else if (!strcmp(a, "--stream=own")) legacy_stream = 0;
    else die(a, 0);
  }
  if (n_threads < 1 || n_threads > 64 || (close_at >= 0 && n_threads != 1)) die("arguments", 0);
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (chdir_to && chdir(chdir_to) != 0) die("chdir", errno);
  void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!h) die("dlopen(libcuda.so.1)", 0);
#define LOAD(name)                                                             \
  drv.name = (__typeof__(drv.name))dlsym(h, #name);                            \
  if (!drv.name) die("dlsym(" #name ")", 0);
  DRIVER_FNS(LOAD)
#undef LOAD
  CUdevice dev;
  CU(drv.cuInit(0));
  CU(drv.cuDeviceGet(&dev, 0));
  CU(drv.cuDevicePrimaryCtxRetain(&g_ctx, dev));

  if (cancel_mode) n_threads = 2;
  session *xs = calloc((size_t)n_threads, sizeof *xs);
  for (int t = 0; t < n_threads; t++) session_open(&xs[t]);
  int rc = 0;
  if (cancel_mode || exec_variant || vfork_file) {
    rc = cancel_mode ? run_cancel(&xs[0], &xs[1]) : exec_variant ? run_exec(&xs[0]) : run_vfork(&xs[0]);
  } else if (close_at >= 0) {
    for (int i = 0; i < n_calls; i++) {
      if (i == close_at) {
        for (int fd = 3; fd < 1024; fd++) close(fd);
        write_own_files();
      }
      calls_failed += one_call(&xs[0]);
      calls_made++;
    }
    CU(drv.cuStreamSynchronize(xs[0].stream));
    if (!check_own_files()) rc = 1;
  } else {
    pthread_t *ts = calloc((size_t)n_threads, sizeof *ts);
    for (int t = 0; t < n_threads; t++)
      if (pthread_create(&ts[t], NULL, worker, &xs[t]) != 0) die("pthread_create", 0);
    pthread_t holder;
    if (child_hang && (fork_at < 0 || (strcmp(child_hang, "lock") && strcmp(child_hang, "spin") &&
                                       strcmp(child_hang, "once") && strcmp(child_hang, "vfork") &&
                                       strcmp(child_hang, "thread-vfork"))))
      die("--child-hang", 0);
    if (child_hang && pthread_create(&holder, NULL, hang_holder, NULL) != 0) die("pthread_create", 0);
    if (fork_at >= 0) {
      while (calls_made < fork_at && calls_made < n_calls * n_threads) sched_yield();
      while (child_hang && !held_at_fork) sched_yield();
      pid_t pid = fork();
      forked = 1;
      if (pid < 0) die("fork", errno);
      if (pid == 0) child_main();
      if (wait_child(pid) != 0) rc = 3;
    }
    for (int t = 0; t < n_threads; t++) pthread_join(ts[t], NULL);
    if (child_hang) pthread_join(holder, NULL);
    free(ts);
  }
  printf("calls %d failed %d\n", (int)calls_made, (int)calls_failed);
  if (!rc && calls_failed) rc = 1;
  return rc;
}
