/* lifecycle_client.c: a program that puts the preloaded shim through the
 * ends of a process's life (tests/lifecycle/test_lifecycle.py). It links
 * cuBLAS 13 and loads the driver as the CUDA runtime does (dlopen), so the
 * same binary runs over the stand-in or a GPU.
 *
 * Every GEMM is cublasGemmEx, bf16 in and out, fp32 compute, 32x32x32, on
 * operands set once; its status is checked.
 *
 *   --mode=exit --threads=T --stream=own|shared|legacy|per-thread
 *        T threads, each with its own handle, call GEMMs without end on
 *        their stream (own: one per thread; shared: one for all; legacy:
 *        CU_STREAM_LEGACY; per-thread: CU_STREAM_PER_THREAD); once every
 *        thread has made two calls the main thread prints "exiting
 *        calls=N" and calls exit(0) while they run.
 *   --mode=loop [--calls=N] [--sigint-exit]
 *        one thread, N calls (0: until killed), printing "call I T_NS"
 *        (CLOCK_REALTIME before the call) after each, flushed; with
 *        --sigint-exit, SIGINT makes the loop stop and main return 0, as a
 *        Python program's KeyboardInterrupt does.
 *   --mode=closefds [--calls=N]
 *        N calls; then closes every descriptor from 3 up, as daemons do,
 *        opens data0.bin .. data3.bin in the current folder and writes
 *        4096 known bytes to each (byte i of file f: f*37 + i*11 + 5);
 *        N more calls; the files stay open through exit.
 *
 * Exit status 0, 1 when a GEMM failed, 2 on a set-up
 * error. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../integration/client.h"

#define DIM 32

static CUcontext ctx;
static atomic_int calls_made;
static atomic_int failures;
static volatile sig_atomic_t stop;

static void die(const char *what) {
  fprintf(stderr, "lifecycle_client: %s failed\n", what);
  exit(2);
}

typedef struct worker {
  cublasHandle_t h;
  CUstream stream;
  CUdeviceptr a, b, c;
  int calls;
} worker;

static void worker_init(worker *w, CUstream stream) {
  static const uint16_t one = 0x3f80; /* bf16 1.0 */
  uint16_t host[DIM * DIM];
  for (int i = 0; i < DIM * DIM; i++) host[i] = one;
  if (client_drv.cuCtxSetCurrent(ctx)) die("cuCtxSetCurrent");
  if (cublasCreate(&w->h) || cublasSetStream(w->h, stream)) die("cublasCreate");
  w->stream = stream;
  if (client_drv.cuMemAlloc_v2(&w->a, sizeof host) || client_drv.cuMemAlloc_v2(&w->b, sizeof host) ||
      client_drv.cuMemAlloc_v2(&w->c, sizeof host))
    die("cuMemAlloc");
  client_drv.cuMemcpyHtoD_v2(w->a, host, sizeof host);
  client_drv.cuMemcpyHtoD_v2(w->b, host, sizeof host);
  w->calls = 0;
}

static void gemm(worker *w) {
  const float alpha = 1, beta = 0;
  cublasStatus_t s = cublasGemmEx(w->h, CUBLAS_OP_N, CUBLAS_OP_N, DIM, DIM, DIM, &alpha, (void *)w->a, CUDA_R_16BF,
                                  DIM, (void *)w->b, CUDA_R_16BF, DIM, &beta, (void *)w->c, CUDA_R_16BF, DIM,
                                  CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  if (s != CUBLAS_STATUS_SUCCESS) atomic_fetch_add(&failures, 1);
  w->calls++;
  atomic_fetch_add(&calls_made, 1);
}

/* ---- --mode=exit ------------------------------------------------------------ */
static CUstream shared_stream;
static const char *stream_kind = "own";
static atomic_int started;

static void *exit_worker(void *arg) {
  worker w;
  CUstream s = 0;
  client_drv.cuCtxSetCurrent(ctx);
  if (!strcmp(stream_kind, "own")) {
    if (client_drv.cuStreamCreate(&s, 0)) die("cuStreamCreate");
  } else if (!strcmp(stream_kind, "shared")) {
    s = shared_stream;
  } else if (!strcmp(stream_kind, "legacy")) {
    s = CU_STREAM_LEGACY;
  } else {
    s = CU_STREAM_PER_THREAD;
  }
  worker_init(&w, s);
  for (;;) {
    gemm(&w);
    if (w.calls == 2) atomic_fetch_add(&started, 1);
  }
  return arg;
}

static int mode_exit(int threads) {
  if (!strcmp(stream_kind, "shared") && client_drv.cuStreamCreate(&shared_stream, 0)) die("cuStreamCreate");
  for (int i = 0; i < threads; i++) {
    pthread_t t;
    if (pthread_create(&t, NULL, exit_worker, NULL)) die("pthread_create");
  }
  while (atomic_load(&started) < threads) usleep(1000);
  printf("exiting calls=%d\n", atomic_load(&calls_made));
  fflush(stdout);
  exit(atomic_load(&failures) ? 1 : 0);
}

/* ---- --mode=loop ------------------------------------------------------------ */
static void on_sigint(int sig) { stop = 1; }

static int mode_loop(int calls, int sigint_exit) {
  worker w;
  CUstream s;
  if (client_drv.cuStreamCreate(&s, 0)) die("cuStreamCreate");
  worker_init(&w, s);
  /* The tests kill this loop with SIGINT and SIGTERM and expect their
   * default action. A program started in the background by a
   * non-interactive shell begins with SIGINT and SIGQUIT ignored (POSIX,
   * Shell Command Language, 2.11 "Signals and Error Handling"), and an
   * ignored signal stays ignored across exec (execve(2)), so a CI runner
   * that starts make that way would leave the loop running. */
  signal(SIGINT, sigint_exit ? on_sigint : SIG_DFL);
  signal(SIGTERM, SIG_DFL);
  for (int i = 0; (calls == 0 || i < calls) && !stop; i++) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    gemm(&w);
    printf("call %d %lld\n", i, (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec);
    fflush(stdout);
  }
  printf("stopped calls=%d\n", w.calls);
  return atomic_load(&failures) ? 1 : 0;
}

/* ---- --mode=closefds -------------------------------------------------------- */
static void pattern_of(int file, unsigned char *buf, size_t n) {
  for (size_t i = 0; i < n; i++) buf[i] = (unsigned char)(file * 37 + i * 11 + 5);
}

static int mode_closefds(int calls) {
  worker w;
  CUstream s;
  if (client_drv.cuStreamCreate(&s, 0)) die("cuStreamCreate");
  worker_init(&w, s);
  for (int i = 0; i < calls; i++) gemm(&w);
  for (int fd = 3; fd < 1024; fd++) close(fd);
  unsigned char buf[4096];
  for (int f = 0; f < 4; f++) {
    char name[32];
    snprintf(name, sizeof name, "data%d.bin", f);
    int fd = open(name, O_RDWR | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) die("open");
    pattern_of(f, buf, sizeof buf);
    if (write(fd, buf, sizeof buf) != (ssize_t)sizeof buf) die("write");
  }
  for (int i = 0; i < calls; i++) gemm(&w);
  /* The files stay open through exit, as a daemon's would. */
  printf("files written calls=%d\n", w.calls);
  return atomic_load(&failures) ? 1 : 0;
}

int main(int argc, char **argv) {
  const char *mode = NULL;
  int threads = 16, calls = 0, sigint_exit = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strncmp(a, "--mode=", 7)) mode = a + 7;
    else if (!strncmp(a, "--threads=", 10)) threads = atoi(a + 10);
    else if (!strncmp(a, "--stream=", 9)) stream_kind = a + 9;
    else if (!strncmp(a, "--calls=", 8)) calls = atoi(a + 8);
    else if (!strcmp(a, "--sigint-exit")) sigint_exit = 1;
    else {
      fprintf(stderr, "lifecycle_client: unknown option %s (see the top of lifecycle_client.c)\n", a);
      return 2;
    }
  }
  const char *why = client_driver_load();
  CUdevice dev;
  if (why || client_drv.cuInit(0) || client_drv.cuDeviceGet(&dev, 0) ||
      client_drv.cuDevicePrimaryCtxRetain(&ctx, dev) || client_drv.cuCtxSetCurrent(ctx))
    die(why ? why : "driver set-up");
  if (mode && !strcmp(mode, "exit")) return mode_exit(threads);
  if (mode && !strcmp(mode, "loop")) return mode_loop(calls, sigint_exit);
  if (mode && !strcmp(mode, "closefds")) return mode_closefds(calls ? calls : 50);
  fprintf(stderr, "lifecycle_client: --mode=exit|loop|closefds\n");
  return 2;
}
