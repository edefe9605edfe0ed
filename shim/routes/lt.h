/* lt.h: the cuBLASLt objects a route builds for its own matmul
 * (routes/lt.c): plans made once per problem and kept, and the workspace
 * the GemmEx family's calls lend cuBLASLt. */
#ifndef GEMMSHIM_ROUTE_LT_H
#define GEMMSHIM_ROUTE_LT_H

#include <cublasLt.h>
#include <stddef.h>
#include <stdint.h>

#include "../shim.h"

/* One matrix layout: column-major, with its batch count and stride. */
typedef struct route_lt_layout_key {
  int64_t type; /* cudaDataType */
  int64_t rows, cols, ld, batch, stride;
} route_lt_layout_key;

/* Everything a plan's descriptor, layouts and algorithm depend on. Built
 * with route_lt_key_init (all bytes zero, so keys compare with memcmp);
 * a field left at its "unset" value sets no attribute. */
typedef struct route_lt_key {
  unsigned long long ctx_id; /* the algorithm is the device's */
  void *ctx;
  int32_t compute, scale, transa, transb, pointer_mode;
  uint32_t epilogue;
  int32_t has_bias;          /* BIAS_POINTER (per call) and BIAS_DATA_TYPE set */
  int32_t bias_type;
  int64_t bias_stride;       /* 0: BIAS_BATCH_STRIDE not set */
  const void *a_scale, *b_scale; /* NULL: not set */
  int32_t scales_per_call;   /* A/B scale pointers set on each call (route_lt_set_scales) */
  int32_t fast_accum;        /* FAST_ACCUM set to 1 */
  int32_t a_scale_mode, b_scale_mode; /* A/B_SCALE_MODE; 0 (SCALAR_32F): not set */
  route_lt_layout_key l[4];  /* A, B, C, D */
  uint32_t align[4];         /* A, B, C, D pointers' alignment, at most 256 */
  uint64_t workspace_size;
} route_lt_key;

typedef struct route_lt_plan route_lt_plan;

/* 1 when every builder function of the loaded cuBLASLt was found. */
int route_lt_available(void);
/* A zeroed key for call c's context. */
void route_lt_key_init(route_lt_key *k, const gs_call *c);
void route_lt_key_layout(route_lt_key *k, int which, int type, int64_t rows, int64_t cols, int64_t ld, int64_t batch,
                         int64_t stride);
/* The alignment cuBLASLt's heuristic may assume of p: its largest power of
 * two up to 256 (the preference's default). */
uint32_t route_lt_alignment(const void *p);

/* A plan of key k, made with handle h on first use (descriptor, layouts,
 * the heuristic's first algorithm; bias: the first BIAS_POINTER) and held
 * by this call alone until route_lt_plan_put. NULL with *status
 * (cuBLASLt's) when it cannot be made; nothing is kept then, so the next
 * call tries again. *why (when why is not NULL): NULL, or why the shim
 * itself could not make it (host memory), for the call's reason. */
const route_lt_plan *route_lt_plan_get(cublasLtHandle_t h, const route_lt_key *k, const void *bias,
                                       cublasStatus_t *status, const char **why);
void route_lt_plan_put(const route_lt_plan *p);
/* For a held plan whose key has scales_per_call: this call's A and B
 * scale pointers (cuBLASLt's status). */
cublasStatus_t route_lt_set_scales(const route_lt_plan *p, const void *a_scale, const void *b_scale);
/* cublasLtMatmul with held plan p's objects and algorithm on stream s;
 * bias (where the key has one) is set first if the descriptor holds
 * another. */
cublasStatus_t route_lt_matmul(cublasLtHandle_t h, const route_lt_plan *p, const void *alpha, const void *A,
                               const void *B, const void *beta, const void *C, void *D, const void *bias, void *ws,
                               size_t wss, void *stream);

/* The persistent workspace of c's stream for cuBLASLt calls of the GemmEx
 * family (which bring none): ROUTE_LT_WORKSPACE bytes, or NULL / 0 when
 * there is none to lend (the matmul then picks among algorithms that need
 * none). Returns NULL, or why a stream that could have one has none (for
 * the call's reason): its allocation failed at its first call (kept, not
 * tried again), or its device's ROUTE_LT_WORKSPACES are taken. None for a
 * captured call (c->captured): replays may run beside the stream's eager
 * calls. */
#define ROUTE_LT_WORKSPACE ((size_t)1 << 20)
/* Per device, for its live contexts (routes/lt.c says why): PyTorch's
 * streams of one device are the default stream and at most
 * max_compile_time_stream_priorities (4) x kStreamsPerPool (32) pool
 * streams, created once and never destroyed (c10/cuda/CUDAStream.h and
 * CUDAStream.cpp), all of which torch.cuda.Stream() hands out. */
#define ROUTE_LT_WORKSPACES 129
const char *route_lt_workspace(const gs_call *c, void **ws, size_t *size);

/* ---- for tests ------------------------------------------------------------------------ */
/* At most n plans kept from now on (0: the default, ROUTE_LT_PLANS in
 * routes/lt.c); returns the limit it replaces. */
size_t route_lt_plans_set_limit(size_t n);
/* Plans kept, and how many were ever built. */
size_t route_lt_plans_live(void);
uint64_t route_lt_plans_built(void);
/* Workspaces lent on device d by its live contexts. */
size_t route_lt_workspaces_lent(int device);

#endif
