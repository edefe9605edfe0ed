/* graph_client.c: CUDA graphs as frameworks use them, around one Linear
 * layer's bf16 GEMM (y = W x: cublasGemmEx T,N, compute 32F), for
 * test_graph_recipes.py.
 *
 *   --recipe=pytorch   torch.cuda.graph / make_graphed_callables
 *                      (torch/cuda/graphs.py): warm-up iterations on a side
 *                      stream, capture on the graph's own stream (global
 *                      capture mode, static input and output buffers), the
 *                      graph destroyed right after its instantiation
 *                      (aten/src/ATen/cuda/CUDAGraph.cpp, capture_end:
 *                      cudaGraphDestroy unless keep_graph), then
 *                      replays on the program's stream (CUDAGraph.replay
 *                      launches on the current stream) interleaved with
 *                      eager calls of the same layer on fresh inputs.
 *   --recipe=xla       XLA's command buffers: the traced cuBLAS call
 *                      captured, then the graph cloned (cuGraphClone),
 *                      embedded as a child graph node
 *                      (cuGraphAddChildGraphNode), and instantiated twice,
 *                      each instantiation launched.
 *   --recipe=two-streams  one graph instantiated twice, the two
 *                      executables replayed in turn on two streams, eager
 *                      calls of the layer on a third between them.
 *   --recipe=cycles=N  N times, in PyTorch's order: an eager warm-up
 *                      call, capture the layer, instantiate, destroy the
 *                      graph, launch, destroy the executable
 *                      (make_graphed_callables per shape); prints the
 *                      most device memory in use after any cycle beyond
 *                      what it was before the first ("cycles n=N
 *                      grew=BYTES"), then makes one eager call.
 *   --recipe=recapture=N  the same without the warm-ups: each capture
 *                      follows the previous cycle's destruction directly.
 *   --recipe=beside-global  this thread captures the layer in global mode
 *                      while another thread holds a global-mode capture of
 *                      its own: neither capture may be invalidated.
 *   --recipe=ctx-reset  a graph with a captured call replayed, then the
 *                      primary context reset (cudaDeviceReset) with graph
 *                      and executable still alive: the reset destroys them
 *                      and the memory they held ("Destroy all allocations
 *                      and reset all state on the primary context", CUDA
 *                      driver API, cuDevicePrimaryCtxReset).
 *   --recipe=fork-child  a graph destroyed (its buffer released, not yet
 *                      freed) and a second one alive, then fork(): the
 *                      child makes an eager call and exits; the parent
 *                      waits, replays the live graph, destroys it and
 *                      makes an eager call. Prints "child pid=P status=S".
 *   --recipe=fork      an eager call on one stream while the stream the
 *                      layer last ran on is being captured by the program.
 *   --recipe=overlap   one graph instantiated twice and both executables
 *                      replayed at once on two streams with nothing ordering
 *                      them, under the stand-in's STANDIN_GRAPH_OVERLAP=s
 *                      (tests/standin/README.md), set here for every shift s
 *                      from 0 to the graph's node count (cuGraphGetNodes):
 *                      D as the first replay left it (a copy enqueued
 *                      behind it on its stream) and as the second left it
 *                      must each equal an eager call's D bit for bit, and
 *                      the inputs must be unchanged. Prints "graph nodes=N"
 *                      and "overlap shift=S first=0|1 second=0|1
 *                      inputs=0|1".
 *   --recipe=overlap-beta  the same with a cublasLtMatmul out of place,
 *                      D = W^T X + 0.5 C (bf16 C, D elsewhere).
 *   --recipe=other-thread  the program's first calls of the layer, on a
 *                      stream never used before, while another thread holds
 *                      a global-mode capture (torch.cuda.graph's default
 *                      capture_error_mode) on a stream of its own: the
 *                      calls run, and the other thread's capture survives.
 *
 * Every result is compared with a float64 product of the stored bf16
 * inputs. Prints "driver fn=NAME status=N" for each graph call, "result
 * kind=eager|replay step=S status=N err=E" (err: max |y - ref| / max |ref|,
 * inf when y has a NaN or infinity),
 * and exits 0 when every call returned 0. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../../kernels/convert.h"
#include "client.h"

enum { H = 64, T = 32 };

static struct {
  __typeof__(cuStreamBeginCapture_v2) *begin;
  __typeof__(cuStreamEndCapture) *end;
  __typeof__(cuGraphInstantiateWithFlags) *instantiate;
  __typeof__(cuGraphLaunch) *launch;
  __typeof__(cuGraphExecDestroy) *exec_destroy;
  __typeof__(cuGraphDestroy) *destroy;
  __typeof__(cuGraphClone) *clone;
  __typeof__(cuGraphCreate) *create;
  __typeof__(cuGraphAddChildGraphNode) *add_child;
  __typeof__(cuStreamIsCapturing) *is_capturing;
  __typeof__(cuMemGetInfo_v2) *mem_info;
  __typeof__(cuDevicePrimaryCtxReset_v2) *ctx_reset;
  __typeof__(cuGraphGetNodes) *get_nodes;
  __typeof__(cuMemcpyDtoHAsync_v2) *copy_async;
} gr;

static cublasHandle_t handle;
static int failures;

static uint64_t rng = 0x67726170;
static float uniform(void) {
  uint64_t z = (rng += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return (float)((double)(z >> 11) / (double)(1ull << 52) - 1.0);
}

typedef struct mat {
  CUdeviceptr dev;
  uint16_t host[H * H];
  int rows, cols;
} mat;

static void mat_init(mat *m, int rows, int cols) {
  m->rows = rows;
  m->cols = cols;
  if (client_drv.cuMemAlloc_v2(&m->dev, (size_t)rows * cols * 2) != CUDA_SUCCESS) {
    fprintf(stderr, "graph_client: allocation failed\n");
    exit(2);
  }
}

/* New values into the host copy and the device buffer (the static input a
 * graph reads: the framework copies each step's input into it). */
static void mat_fill(mat *m, float amp) {
  for (int i = 0; i < m->rows * m->cols; i++) m->host[i] = gs_f32_to_bf16_rn(amp * uniform());
  client_drv.cuMemcpyHtoD_v2(m->dev, m->host, (size_t)m->rows * m->cols * 2);
}

static void check(const char *fn, CUresult r) {
  printf("driver fn=%s status=%d\n", fn, (int)r);
  if (r != CUDA_SUCCESS) failures++;
}

/* Y = W^T X, as a Linear layer's forward reaches cuBLAS. */
static cublasStatus_t gemm(CUstream s, const mat *W, const mat *X, const mat *Y) {
  const float one = 1.0f, zero = 0.0f;
  cublasSetStream(handle, s);
  return cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, H, T, H, &one, (const void *)W->dev, CUDA_R_16BF, H,
                      (const void *)X->dev, CUDA_R_16BF, H, &zero, (void *)Y->dev, CUDA_R_16BF, H,
                      CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
}

static void report(const char *kind, int step, int status, const mat *W, const mat *X, mat *Y) {
  client_drv.cuMemcpyDtoH_v2(Y->host, Y->dev, (size_t)H * T * 2);
  double worst = 0, top = 0;
  for (int j = 0; j < T; j++)
    for (int i = 0; i < H; i++) {
      double r = 0;
      for (int k = 0; k < H; k++)
        r += (double)gs_bf16_to_f32(W->host[k + i * H]) * gs_bf16_to_f32(X->host[k + j * H]);
      double y = gs_bf16_to_f32(Y->host[i + j * H]);
      worst = isfinite(y) ? fmax(worst, fabs(y - r)) : INFINITY; /* fmax would drop a NaN */
      top = fmax(top, fabs(r));
    }
  if (status) failures++;
  printf("result kind=%s step=%d status=%d err=%.3e\n", kind, step, status, top > 0 ? worst / top : worst);
}

static mat W, X, Y, X2, Y2;

/* The overlap recipes' call: the layer, or (beta) cublasLtMatmul with
 * D = Y = W^T X + 0.5 C, C = Y2, out of place (cuBLASLt takes C != D). */
static cublasLtHandle_t lt;
static cublasStatus_t overlap_call(CUstream s, int beta) {
  if (!beta) return gemm(s, &W, &X, &Y);
  const float one = 1.0f, half = 0.5f;
  cublasLtMatmulDesc_t d = NULL;
  cublasLtMatrixLayout_t la = NULL, lb = NULL, lc = NULL;
  const cublasOperation_t t = CUBLAS_OP_T;
  cublasStatus_t st = cublasLtMatmulDescCreate(&d, CUBLAS_COMPUTE_32F, CUDA_R_32F);
  if (!st) st = cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof t);
  if (!st) st = cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, H, H, H);
  if (!st) st = cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, H, T, H);
  if (!st) st = cublasLtMatrixLayoutCreate(&lc, CUDA_R_16BF, H, T, H);
  if (!st)
    st = cublasLtMatmul(lt, d, &one, (const void *)W.dev, la, (const void *)X.dev, lb, &half, (const void *)Y2.dev,
                        lc, (void *)Y.dev, lc, NULL, NULL, 0, s);
  if (lc) cublasLtMatrixLayoutDestroy(lc);
  if (lb) cublasLtMatrixLayoutDestroy(lb);
  if (la) cublasLtMatrixLayoutDestroy(la);
  if (d) cublasLtMatmulDescDestroy(d);
  return st;
}

/* Whether the device buffer of m still holds its host copy. */
static int mat_same(const mat *m) {
  uint16_t now[H * H];
  size_t bytes = (size_t)m->rows * m->cols * 2;
  client_drv.cuMemcpyDtoH_v2(now, m->dev, bytes);
  return !memcmp(now, m->host, bytes);
}

/* Two executables of one captured call launched on two streams with
 * nothing between them, for every shift the stand-in may interleave them
 * by; D against an eager call's, the inputs against what was written. */
static void overlap(int beta) {
  CUstream s[3];
  for (int i = 0; i < 3; i++)
    if (client_drv.cuStreamCreate(&s[i], CU_STREAM_NON_BLOCKING)) exit(2);
  if (beta && cublasLtCreate(&lt)) exit(2);
  mat_fill(&X, 1.0f);
  mat_fill(&Y2, 1.0f);
  int st = overlap_call(s[0], beta);
  client_drv.cuStreamSynchronize(s[0]);
  uint16_t eager[H * T];
  client_drv.cuMemcpyDtoH_v2(eager, Y.dev, sizeof eager);
  if (!beta) report("eager", 0, st, &W, &X, &Y);
  else if (st) failures++;
  CUgraph g = NULL;
  CUgraphExec e[2] = {0};
  check("cuStreamBeginCapture_v2", gr.begin(s[0], CU_STREAM_CAPTURE_MODE_GLOBAL));
  if (overlap_call(s[0], beta)) failures++;
  check("cuStreamEndCapture", gr.end(s[0], &g));
  size_t nodes = 0;
  check("cuGraphGetNodes", g ? gr.get_nodes(g, NULL, &nodes) : CUDA_ERROR_INVALID_VALUE);
  printf("graph nodes=%zu\n", nodes);
  check("cuGraphInstantiateWithFlags", gr.instantiate(&e[0], g, 0));
  check("cuGraphInstantiateWithFlags", gr.instantiate(&e[1], g, 0));
  for (size_t shift = 0; e[0] && e[1] && shift <= nodes; shift++) {
    uint16_t poison[H * T], got[H * T];
    for (int i = 0; i < H * T; i++) poison[i] = 0x7fc1; /* a bf16 NaN: D is written by every replay */
    client_drv.cuMemcpyHtoD_v2(Y.dev, poison, sizeof poison);
    char v[32];
    snprintf(v, sizeof v, "%zu", shift);
    setenv("STANDIN_GRAPH_OVERLAP", v, 1);
    /* D as the first replay leaves it: a copy behind it on its stream */
    uint16_t first[H * T];
    CUresult r0 = gr.launch(e[0], s[1]);
    CUresult rc = gr.copy_async(first, Y.dev, sizeof first, s[1]);
    CUresult r1 = gr.launch(e[1], s[2]);
    unsetenv("STANDIN_GRAPH_OVERLAP");
    check("cuGraphLaunch", r0);
    check("cuMemcpyDtoHAsync_v2", rc);
    check("cuGraphLaunch", r1);
    client_drv.cuStreamSynchronize(s[1]);
    client_drv.cuStreamSynchronize(s[2]);
    client_drv.cuMemcpyDtoH_v2(got, Y.dev, sizeof got);
    int same1 = !memcmp(first, eager, sizeof first), same2 = !memcmp(got, eager, sizeof got);
    int inputs = mat_same(&W) && mat_same(&X) && (!beta || mat_same(&Y2));
    printf("overlap shift=%zu first=%d second=%d inputs=%d\n", shift, same1, same2, inputs);
    if (!same1 || !same2 || !inputs) failures++;
  }
  for (int i = 0; i < 2; i++)
    if (e[i]) check("cuGraphExecDestroy", gr.exec_destroy(e[i]));
  if (g) check("cuGraphDestroy", gr.destroy(g));
  if (beta) cublasLtDestroy(lt);
}

static void pytorch(CUstream main_stream) {
  CUstream side, capture;
  if (client_drv.cuStreamCreate(&side, 0) || client_drv.cuStreamCreate(&capture, 0)) exit(2);
  /* warm-up on a side stream (torch.cuda.graph's callers and
   * make_graphed_callables run 3 iterations there) */
  for (int i = 0; i < 3; i++) {
    mat_fill(&X, 1.0f);
    int st = gemm(side, &W, &X, &Y);
    client_drv.cuStreamSynchronize(side);
    report("eager", i - 3, st, &W, &X, &Y);
  }
  CUgraph g = NULL;
  CUgraphExec e = NULL;
  check("cuStreamBeginCapture_v2", gr.begin(capture, CU_STREAM_CAPTURE_MODE_GLOBAL));
  int captured = gemm(capture, &W, &X, &Y);
  check("cuStreamEndCapture", gr.end(capture, &g));
  check("cuGraphInstantiateWithFlags", gr.instantiate(&e, g, 0));
  check("cuGraphDestroy", gr.destroy(g)); /* the executable alone holds the buffer now */
  if (captured) failures++;
  /* an eager call of the layer first (e.g. an evaluation step outside the
   * graph), then replays and eager calls in turn */
  for (int step = 0; step < 3; step++) {
    mat_fill(&X2, 1.0f);
    int st = gemm(main_stream, &W, &X2, &Y2);
    client_drv.cuStreamSynchronize(main_stream);
    report("eager", step, st, &W, &X2, &Y2);
    mat_fill(&X, 1.0f);
    check("cuGraphLaunch", gr.launch(e, main_stream));
    client_drv.cuStreamSynchronize(main_stream);
    report("replay", step, 0, &W, &X, &Y);
  }
  check("cuGraphExecDestroy", gr.exec_destroy(e));
}

static void xla(CUstream s) {
  /* eager first: the same layer outside the command buffer */
  mat_fill(&X, 1.0f);
  int st = gemm(s, &W, &X, &Y);
  client_drv.cuStreamSynchronize(s);
  report("eager", 0, st, &W, &X, &Y);
  CUgraph g = NULL, clone = NULL, parent = NULL;
  CUgraphNode node;
  CUgraphExec e[4] = {0};
  check("cuStreamBeginCapture_v2", gr.begin(s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
  if (gemm(s, &W, &X, &Y)) failures++;
  check("cuStreamEndCapture", gr.end(s, &g));
  check("cuGraphClone", gr.clone(&clone, g));
  check("cuGraphCreate", gr.create(&parent, 0));
  check("cuGraphAddChildGraphNode", gr.add_child(&node, parent, NULL, 0, g));
  check("cuGraphInstantiateWithFlags", gr.instantiate(&e[0], g, 0));
  check("cuGraphInstantiateWithFlags", gr.instantiate(&e[1], g, 0));
  check("cuGraphInstantiateWithFlags", gr.instantiate(&e[2], clone, 0));
  check("cuGraphInstantiateWithFlags", gr.instantiate(&e[3], parent, 0));
  for (int i = 0; i < 4; i++) {
    if (!e[i]) continue;
    mat_fill(&X, 1.0f);
    check("cuGraphLaunch", gr.launch(e[i], s));
    client_drv.cuStreamSynchronize(s);
    report("replay", i, 0, &W, &X, &Y);
    mat_fill(&X2, 1.0f);
    st = gemm(s, &W, &X2, &Y2);
    client_drv.cuStreamSynchronize(s);
    report("eager", i + 1, st, &W, &X2, &Y2);
  }
  for (int i = 0; i < 4; i++)
    if (e[i]) check("cuGraphExecDestroy", gr.exec_destroy(e[i]));
  if (parent) check("cuGraphDestroy", gr.destroy(parent));
  if (clone) check("cuGraphDestroy", gr.destroy(clone));
  if (g) check("cuGraphDestroy", gr.destroy(g));
}

/* Someone else's capture on the stream an fp8 site last ran on: an eager
 * call of that site on another stream must run, and must not join the
 * capture (CUDA C++ Programming Guide, "Cross-stream Dependencies and
 * Events": a stream waiting on an event recorded in a capturing stream is
 * put in capture mode; cuStreamEndCapture then fails with
 * CUDA_ERROR_STREAM_CAPTURE_UNJOINED if a joined stream is not joined back). */
static void fork_recipe(CUstream t) {
  /* non-blocking: the client's synchronous copies (legacy stream) would
   * otherwise invalidate the capture (cuda.h, CU_STREAM_NON_BLOCKING) */
  CUstream s;
  if (client_drv.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING)) exit(2);
  mat_fill(&X, 1.0f);
  int st = gemm(s, &W, &X, &Y);
  client_drv.cuStreamSynchronize(s);
  report("eager", 0, st, &W, &X, &Y);
  check("cuStreamBeginCapture_v2", gr.begin(s, CU_STREAM_CAPTURE_MODE_RELAXED));
  mat_fill(&X2, 1.0f);
  st = gemm(t, &W, &X2, &Y2);
  CUstreamCaptureStatus cs = CU_STREAM_CAPTURE_STATUS_ACTIVE;
  check("cuStreamIsCapturing", gr.is_capturing(t, &cs));
  printf("capture stream=t status=%d\n", (int)cs);
  if (cs != CU_STREAM_CAPTURE_STATUS_NONE) failures++;
  client_drv.cuStreamSynchronize(t);
  report("eager", 1, st, &W, &X2, &Y2);
  CUgraph g = NULL;
  check("cuStreamEndCapture", gr.end(s, &g));
  if (g) check("cuGraphDestroy", gr.destroy(g));
}

/* A thread that begins a global-mode capture on its own stream, records
 * nothing, and ends it when told: cuStreamEndCapture fails with
 * CUDA_ERROR_STREAM_CAPTURE_INVALIDATED if any call made meanwhile was one
 * the capture prohibits (cuda.h, cuThreadExchangeStreamCaptureMode). */
static struct {
  pthread_mutex_t lock;
  pthread_cond_t cond;
  int phase; /* 1: capturing, 2: end it */
  CUcontext ctx;
  CUresult begin, end;
} other = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, NULL, 0, 0};

static void other_phase(int phase) {
  pthread_mutex_lock(&other.lock);
  other.phase = phase;
  pthread_cond_broadcast(&other.cond);
  pthread_mutex_unlock(&other.lock);
}

static void other_wait(int phase) {
  pthread_mutex_lock(&other.lock);
  while (other.phase != phase) pthread_cond_wait(&other.cond, &other.lock);
  pthread_mutex_unlock(&other.lock);
}

static void *other_capture(void *arg) {
  CUstream s = NULL;
  CUgraph g = NULL;
  client_drv.cuCtxSetCurrent(other.ctx);
  other.begin = client_drv.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING);
  if (!other.begin) other.begin = gr.begin(s, CU_STREAM_CAPTURE_MODE_GLOBAL);
  other_phase(1);
  other_wait(2);
  other.end = other.begin ? other.begin : gr.end(s, &g);
  if (g) gr.destroy(g);
  return NULL;
}

static void other_thread_recipe(CUcontext ctx) {
  /* The inputs are written before the capture: a synchronous copy is itself
   * a call the other thread's capture prohibits. */
  CUstream t;
  if (client_drv.cuStreamCreate(&t, CU_STREAM_NON_BLOCKING)) exit(2);
  mat_fill(&X, 1.0f);
  other.ctx = ctx;
  pthread_t th;
  if (pthread_create(&th, NULL, other_capture, NULL)) exit(2);
  other_wait(1);
  int st[2];
  for (int i = 0; i < 2; i++) st[i] = gemm(t, &W, &X, i ? &Y2 : &Y);
  other_phase(2);
  pthread_join(th, NULL);
  check("cuStreamBeginCapture_v2", other.begin);
  check("cuStreamEndCapture", other.end);
  client_drv.cuStreamSynchronize(t);
  report("eager", 0, st[0], &W, &X, &Y);
  report("eager", 1, st[1], &W, &X, &Y2);
}

/* One graph, two executables, replayed in turn on two streams; an eager
 * call of the layer on a third stream between replays. */
static void two_streams(void) {
  CUstream cap, s[2], eager;
  if (client_drv.cuStreamCreate(&cap, 0) || client_drv.cuStreamCreate(&s[0], 0) ||
      client_drv.cuStreamCreate(&s[1], 0) || client_drv.cuStreamCreate(&eager, 0))
    exit(2);
  mat_fill(&X, 1.0f);
  int st = gemm(eager, &W, &X, &Y); /* warm-up */
  client_drv.cuStreamSynchronize(eager);
  report("eager", 0, st, &W, &X, &Y);
  CUgraph g = NULL;
  CUgraphExec e[2] = {0};
  check("cuStreamBeginCapture_v2", gr.begin(cap, CU_STREAM_CAPTURE_MODE_GLOBAL));
  if (gemm(cap, &W, &X, &Y)) failures++;
  check("cuStreamEndCapture", gr.end(cap, &g));
  check("cuGraphInstantiateWithFlags", gr.instantiate(&e[0], g, 0));
  check("cuGraphInstantiateWithFlags", gr.instantiate(&e[1], g, 0));
  for (int step = 0; step < 4; step++) {
    if (!e[step & 1]) continue;
    mat_fill(&X, 1.0f);
    check("cuGraphLaunch", gr.launch(e[step & 1], s[step & 1]));
    client_drv.cuStreamSynchronize(s[step & 1]);
    report("replay", step, 0, &W, &X, &Y);
    mat_fill(&X2, 1.0f);
    st = gemm(eager, &W, &X2, &Y2);
    client_drv.cuStreamSynchronize(eager);
    report("eager", step + 1, st, &W, &X2, &Y2);
  }
  for (int i = 0; i < 2; i++)
    if (e[i]) check("cuGraphExecDestroy", gr.exec_destroy(e[i]));
  if (g) check("cuGraphDestroy", gr.destroy(g));
}

/* n capture / launch / destroy cycles; the device memory in use, from
 * cuMemGetInfo, at its highest after a cycle, beyond what it was before.
 * Only the last replay's result is printed (the loop is the point). */
static void cycles(int n, int warm) {
  CUstream s;
  if (client_drv.cuStreamCreate(&s, 0)) exit(2);
  mat_fill(&X, 1.0f);
  int st = gemm(s, &W, &X, &Y); /* warm-up: the route's kernels and handles */
  client_drv.cuStreamSynchronize(s);
  report("eager", 0, st, &W, &X, &Y);
  size_t free0 = 0, total = 0, grew = 0;
  gr.mem_info(&free0, &total);
  int bad = 0;
  for (int i = 0; i < n && !bad; i++) {
    CUgraph g = NULL;
    CUgraphExec e = NULL;
    if (warm) bad |= gemm(s, &W, &X, &Y) != 0; /* the eager warm-up */
    bad |= gr.begin(s, CU_STREAM_CAPTURE_MODE_GLOBAL) != CUDA_SUCCESS;
    bad |= gemm(s, &W, &X, &Y) != 0;
    bad |= gr.end(s, &g) != CUDA_SUCCESS;
    bad |= !g || gr.instantiate(&e, g, 0) != CUDA_SUCCESS;
    if (g) bad |= gr.destroy(g) != CUDA_SUCCESS;
    if (i == n - 1) mat_fill(&X, 1.0f);
    bad |= !e || gr.launch(e, s) != CUDA_SUCCESS;
    client_drv.cuStreamSynchronize(s);
    if (i == n - 1) report("replay", i, 0, &W, &X, &Y);
    if (e) bad |= gr.exec_destroy(e) != CUDA_SUCCESS;
    size_t f = 0;
    gr.mem_info(&f, &total);
    if (f < free0 && free0 - f > grew) grew = free0 - f;
  }
  if (bad) failures++;
  printf("cycles n=%d status=%d grew=%zu\n", n, bad, grew);
  /* a call after the last destruction: the shim frees what the graphs gave back */
  mat_fill(&X2, 1.0f);
  st = gemm(s, &W, &X2, &Y2);
  client_drv.cuStreamSynchronize(s);
  report("eager", 1, st, &W, &X2, &Y2);
}

/* This thread captures the layer in global mode while the other thread
 * (other_capture) holds a global-mode capture: the shim's calls for the
 * captured GEMM (its buffer included) must invalidate neither. */
static void beside_global(CUcontext ctx) {
  CUstream t;
  if (client_drv.cuStreamCreate(&t, CU_STREAM_NON_BLOCKING)) exit(2);
  mat_fill(&X, 1.0f);
  int st = gemm(t, &W, &X, &Y); /* warm-up, before the other capture */
  client_drv.cuStreamSynchronize(t);
  report("eager", 0, st, &W, &X, &Y);
  other.ctx = ctx;
  pthread_t th;
  if (pthread_create(&th, NULL, other_capture, NULL)) exit(2);
  other_wait(1);
  CUgraph g = NULL;
  CUresult b = gr.begin(t, CU_STREAM_CAPTURE_MODE_GLOBAL);
  int captured = gemm(t, &W, &X, &Y);
  CUresult e = gr.end(t, &g);
  other_phase(2);
  pthread_join(th, NULL);
  check("cuStreamBeginCapture_v2", other.begin);
  check("cuStreamBeginCapture_v2", b);
  check("cuStreamEndCapture", e);
  check("cuStreamEndCapture", other.end);
  if (captured) failures++;
  CUgraphExec x = NULL;
  if (g) check("cuGraphInstantiateWithFlags", gr.instantiate(&x, g, 0));
  mat_fill(&X, 1.0f);
  if (x) check("cuGraphLaunch", gr.launch(x, t));
  client_drv.cuStreamSynchronize(t);
  report("replay", 0, 0, &W, &X, &Y);
  if (x) check("cuGraphExecDestroy", gr.exec_destroy(x));
  if (g) check("cuGraphDestroy", gr.destroy(g));
}

/* Capture the layer on s (global mode) into *g and instantiate it. */
static CUgraphExec capture_layer(CUstream s, CUgraph *g) {
  CUgraphExec e = NULL;
  *g = NULL;
  check("cuStreamBeginCapture_v2", gr.begin(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  if (gemm(s, &W, &X, &Y)) failures++;
  check("cuStreamEndCapture", gr.end(s, g));
  check("cuGraphInstantiateWithFlags", gr.instantiate(&e, *g, 0));
  return e;
}

/* The same with the graph destroyed, as PyTorch does, and one launch. */
static CUgraphExec capture_once(CUstream s) {
  CUgraph g;
  CUgraphExec e = capture_layer(s, &g);
  check("cuGraphDestroy", gr.destroy(g));
  check("cuGraphLaunch", gr.launch(e, s));
  client_drv.cuStreamSynchronize(s);
  return e;
}

static void fork_child(CUstream s) {
  mat_fill(&X, 1.0f);
  int st = gemm(s, &W, &X, &Y);
  client_drv.cuStreamSynchronize(s);
  report("eager", 0, st, &W, &X, &Y);
  check("cuGraphExecDestroy", gr.exec_destroy(capture_once(s))); /* its buffer released */
  CUgraphExec live = capture_once(s);
  fflush(stdout);
  pid_t pid = fork();
  if (pid < 0) exit(2);
  if (pid == 0) {
    mat_fill(&X2, 1.0f);
    st = gemm(s, &W, &X2, &Y2);
    client_drv.cuStreamSynchronize(s);
    report("eager", 1, st, &W, &X2, &Y2);
    cublasDestroy(handle);
    exit(failures ? 1 : 0); /* atexit handlers run: the shim's and the driver's */
  }
  int status = 0;
  if (waitpid(pid, &status, 0) != pid) exit(2);
  int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  printf("child pid=%d status=%d\n", (int)pid, code);
  if (code) failures++;
  mat_fill(&X, 1.0f);
  check("cuGraphLaunch", gr.launch(live, s));
  client_drv.cuStreamSynchronize(s);
  report("replay", 0, 0, &W, &X, &Y);
  check("cuGraphExecDestroy", gr.exec_destroy(live));
  mat_fill(&X2, 1.0f);
  st = gemm(s, &W, &X2, &Y2); /* frees both graphs' buffers */
  client_drv.cuStreamSynchronize(s);
  report("eager", 2, st, &W, &X2, &Y2);
}

static void ctx_reset(CUdevice dev) {
  CUstream s;
  if (client_drv.cuStreamCreate(&s, 0)) exit(2);
  mat_fill(&X, 1.0f);
  int st = gemm(s, &W, &X, &Y);
  client_drv.cuStreamSynchronize(s);
  report("eager", 0, st, &W, &X, &Y);
  CUgraph g;
  CUgraphExec e = capture_layer(s, &g);
  mat_fill(&X, 1.0f);
  check("cuGraphLaunch", gr.launch(e, s));
  client_drv.cuStreamSynchronize(s);
  report("replay", 0, 0, &W, &X, &Y);
  check("cuDevicePrimaryCtxReset_v2", gr.ctx_reset ? gr.ctx_reset(dev) : CUDA_ERROR_NOT_FOUND);
  /* graph, executable, stream and matrices went with the context */
}

int main(int argc, char **argv) {
  const char *recipe = argc == 2 && !strncmp(argv[1], "--recipe=", 9) ? argv[1] + 9 : "";
  int ncycles = 0;
  if (!strncmp(recipe, "cycles=", 7)) {
    ncycles = atoi(recipe + 7);
    recipe = ncycles > 0 ? "cycles" : "";
  } else if (!strncmp(recipe, "recapture=", 10)) {
    ncycles = atoi(recipe + 10);
    recipe = ncycles > 0 ? "recapture" : "";
  }
  if (strcmp(recipe, "pytorch") && strcmp(recipe, "xla") && strcmp(recipe, "fork") && strcmp(recipe, "fork-child") &&
      strcmp(recipe, "other-thread") && strcmp(recipe, "two-streams") && strcmp(recipe, "cycles") &&
      strcmp(recipe, "recapture") && strcmp(recipe, "beside-global") && strcmp(recipe, "ctx-reset") &&
      strcmp(recipe, "overlap") && strcmp(recipe, "overlap-beta")) {
    fprintf(stderr, "usage: graph_client --recipe=pytorch|xla|two-streams|cycles=N|recapture=N|beside-global|"
                    "ctx-reset|fork|fork-child|other-thread|overlap|overlap-beta\n");
    return 2;
  }
  const char *why = client_driver_load();
  void *cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (!why && cuda) {
#define SYM(field, name) *(void **)&gr.field = dlsym(cuda, #name)
    SYM(begin, cuStreamBeginCapture_v2);
    SYM(end, cuStreamEndCapture);
    SYM(instantiate, cuGraphInstantiateWithFlags);
    SYM(launch, cuGraphLaunch);
    SYM(exec_destroy, cuGraphExecDestroy);
    SYM(destroy, cuGraphDestroy);
    SYM(clone, cuGraphClone);
    SYM(create, cuGraphCreate);
    SYM(add_child, cuGraphAddChildGraphNode);
    SYM(is_capturing, cuStreamIsCapturing);
    SYM(mem_info, cuMemGetInfo_v2);
    SYM(ctx_reset, cuDevicePrimaryCtxReset_v2);
    SYM(get_nodes, cuGraphGetNodes);
    SYM(copy_async, cuMemcpyDtoHAsync_v2);
#undef SYM
  }
  CUdevice dev;
  CUcontext ctx;
  CUstream s;
  if (why || !cuda || !gr.add_child || !gr.launch || !gr.get_nodes || !gr.copy_async || !gr.is_capturing || !gr.mem_info || client_drv.cuInit(0) || client_drv.cuDeviceGet(&dev, 0) ||
      client_drv.cuDevicePrimaryCtxRetain(&ctx, dev) || client_drv.cuCtxSetCurrent(ctx) ||
      client_drv.cuStreamCreate(&s, 0) || cublasCreate(&handle)) {
    fprintf(stderr, "graph_client: set-up failed: %s\n", why ? why : "driver, graph API or cuBLAS");
    return 2;
  }
  mat_init(&W, H, H);
  mat_init(&X, H, T);
  mat_init(&Y, H, T);
  mat_init(&X2, H, T);
  mat_init(&Y2, H, T);
  /* weights scaled 1/sqrt(H) as an initialised Linear layer's are */
  mat_fill(&W, 1.0f / sqrtf((float)H));
  if (!strcmp(recipe, "pytorch")) pytorch(s);
  else if (!strcmp(recipe, "fork")) fork_recipe(s);
  else if (!strcmp(recipe, "fork-child")) fork_child(s);
  else if (!strcmp(recipe, "other-thread")) other_thread_recipe(ctx);
  else if (!strcmp(recipe, "two-streams")) two_streams();
  else if (!strcmp(recipe, "cycles")) cycles(ncycles, 1);
  else if (!strcmp(recipe, "recapture")) cycles(ncycles, 0);
  else if (!strcmp(recipe, "beside-global")) beside_global(ctx);
  else if (!strcmp(recipe, "ctx-reset")) ctx_reset(dev);
  else if (!strcmp(recipe, "overlap")) overlap(0);
  else if (!strcmp(recipe, "overlap-beta")) overlap(1);
  else xla(s);
  cublasDestroy(handle);
  return failures ? 1 : 0;
}
