/* log_format.h: the routing log's record, as a calling thread copies it
 * out of its gs_call and as the writer turns it into a line of JSON
 * (log_format.c). Two steps, because the copy is paid for by the program's
 * thread on every call and the formatting is not: the flusher thread (log.c)
 * formats whole buffers of records at once, off the call path.
 *
 * The record is the fixed part below, then the call's GPU events when GPU
 * time is on, then its backend and reason bytes; it is all log.c needs to
 * size a buffer (rec_size_gpu) and to reserve room for the text
 * (rec_text_bound), so that the writer can format without checking room.
 * The format itself (keys, order, escaping) is docs/log-format.md.
 */
#ifndef GEMMSHIM_LOG_FORMAT_H
#define GEMMSHIM_LOG_FORMAT_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "shim.h"

/* A record's text less its backend and reason: every key, every value at
 * its widest (~1540 bytes with the fp8 statistics), and the slack the unchecked formatter may write
 * past the end before overwriting it (32 bytes) plus the NUL. The unit
 * tests check a record with every field at its widest against it. */
#define LOG_TEXT_FIXED 2048

/* The record's fields, one line each, in the order of their keys in a
 * line of the log (docs/log-format.md): the record's struct, its copy from
 * the gs_call, the formatter and the key list are all made from this list.
 *
 *   X(key, type, kind, when, from)
 *
 * key   the JSON key, and the member of log_rec that holds the value
 * type  the member's type: u64, i64, i32, u32; str: a string whose bytes
 *       follow the record (member key_len, the length; log.c copies the
 *       bytes); none: no member (the value is another field's, or in the
 *       GPU block, which log_rec_fill_gpu copies)
 * kind  how the value prints: U64, I64 (a decimal number); ENUM(names) (a
 *       string, the value's name from that table of log_format.c's
 *       LOG_ENUMS, else "unknown(N)"); ADDR ("0x" and lowercase hex); ID
 *       (16 lowercase hex digits); STRING (escaped); OWN(name) (printed by
 *       log_format.c's fmt_name, for a field whose text follows no rule)
 * when  whether the key is there: ALWAYS; SET (the value is not -1); LT
 *       (cublasLtMatmul only); LT_SET (both); GEMM_EX (the GemmEx family
 *       only); BIAS, BACKEND (the call has one); RECIPE (an fp8 call: not
 *       0, gs_fp8_recipe's "none"); SITE_EVENT, EVICTED (the
 *       site_event bits say so); GPU_NS, GPU_KERNELS, GPU_NATIVE,
 *       GPU_SKIPPED, GPU_ACC, GPU_ACC_Q, GPU_FP8, GPU_FP8_BLOCKS (what the
 *       GPU block measured)
 * from  where the value comes from in the gs_call c (g is &c->g), copied
 *       by log_rec_fill for the stored types
 */
#define GS_LOG_FIELDS(X)                                                       \
  X(seq, u64, U64, ALWAYS, c->seq)                                             \
  X(t_ns, u64, U64, ALWAYS, c->t_ns)                                           \
  X(tid, i32, I64, ALWAYS, c->tid)                                             \
  X(api, i32, ENUM(api), ALWAYS, g->api)                                       \
  X(m, i64, I64, ALWAYS, g->m)                                                 \
  X(n, i64, I64, ALWAYS, g->n)                                                 \
  X(k, i64, I64, ALWAYS, g->k)                                                 \
  X(batch, i64, I64, ALWAYS, g->batch)                                         \
  X(transa, i32, ENUM(op), ALWAYS, g->transa)                                  \
  X(transb, i32, ENUM(op), ALWAYS, g->transb)                                  \
  X(a_type, i32, ENUM(type), ALWAYS, g->a_type)                                \
  X(b_type, i32, ENUM(type), ALWAYS, g->b_type)                                \
  X(c_type, i32, ENUM(type), ALWAYS, g->c_type)                                \
  X(d_type, i32, ENUM(type), LT_SET, g->d_type)                                \
  X(compute_type, i32, ENUM(compute), ALWAYS, g->compute_type)                 \
  X(scale_type, i32, ENUM(type), SET, g->scale_type)                           \
  X(lda, i64, I64, ALWAYS, g->lda)                                             \
  X(ldb, i64, I64, ALWAYS, g->ldb)                                             \
  X(ldc, i64, I64, ALWAYS, g->ldc)                                             \
  X(ldd, i64, I64, LT_SET, g->ldd)                                             \
  X(stride_a, i64, I64, SET, g->stride_a)                                      \
  X(stride_b, i64, I64, SET, g->stride_b)                                      \
  X(stride_c, i64, I64, SET, g->stride_c)                                      \
  X(epilogue, i32, ENUM(epilogue), LT, g->epilogue)                            \
  X(bias_type, i32, ENUM(type), BIAS, g->bias_type)                            \
  X(pointer_mode, i32, ENUM(pointer_mode), SET, g->pointer_mode)               \
  X(algo, i32, I64, GEMM_EX, g->algo)                                          \
  X(device, i32, I64, ALWAYS, c->device)                                       \
  X(sm, i32, OWN(sm), ALWAYS, c->sm)                                           \
  X(stream, u64, ADDR, ALWAYS, (uintptr_t)g->stream)                           \
  X(site, u64, ID, ALWAYS, c->site)                                            \
  X(site_event, u32, OWN(site_event), SITE_EVENT, c->site_flags)               \
  X(evicted_site, u64, ID, EVICTED, c->evicted_site)                           \
  X(decided, i32, ENUM(route), ALWAYS, c->decided)                             \
  X(route, i32, ENUM(route), ALWAYS, c->route)                                 \
  X(backend, str, STRING, BACKEND, c->backend)                                 \
  X(recipe, i32, ENUM(recipe), RECIPE, c->recipe)                              \
  X(captured, u32, U64, CAPTURED, c->captured)                                 \
  X(reason, str, STRING, ALWAYS, c->reason)                                    \
  X(status, i32, I64, ALWAYS, c->status)                                       \
  X(status_name, none, OWN(status_name), ALWAYS, c->status)                    \
  X(dur_ns, u64, U64, ALWAYS, c->dur_ns)                                       \
  X(gpu_ns, none, OWN(gpu_ns), GPU_NS, c->gpu.gpu_ns)                          \
  X(gpu_ns_kernels, none, OWN(gpu_ns_kernels), GPU_KERNELS, c->gpu.kernels_ns) \
  X(native_gpu_ns, none, OWN(native_gpu_ns), GPU_NATIVE, c->gpu.native_ns)     \
  X(sqnr_db, none, OWN(sqnr_db), GPU_ACC, c->gpu.acc_sqnr_db)                  \
  X(max_rel, none, OWN(max_rel), GPU_ACC, c->gpu.acc_max_rel)                  \
  X(nonfinite_mismatch, none, OWN(nonfinite_mismatch), GPU_ACC, c->gpu.acc_mismatch) \
  X(rel_err_p50, none, OWN(rel_err_p50), GPU_ACC_Q, c->gpu.acc_p50)            \
  X(rel_err_p99, none, OWN(rel_err_p99), GPU_ACC_Q, c->gpu.acc_p99)            \
  X(a_amax, none, OWN(a_amax), GPU_FP8, c->gpu.fp8[0].amax)                    \
  X(a_scale, none, OWN(a_scale), GPU_FP8, c->gpu.fp8[0].step)                  \
  X(a_elems, none, OWN(a_elems), GPU_FP8, c->gpu.fp8[0].elems)                 \
  X(a_sat, none, OWN(a_sat), GPU_FP8, c->gpu.fp8[0].saturated)                 \
  X(a_flush, none, OWN(a_flush), GPU_FP8, c->gpu.fp8[0].flushed)               \
  X(a_worst_sat, none, OWN(a_worst_sat), GPU_FP8_BLOCKS, c->gpu.fp8[0].worst_sat)      \
  X(a_worst_sat_block, none, OWN(a_worst_sat_block), GPU_FP8_BLOCKS, c->gpu.fp8[0].worst_sat_block) \
  X(a_worst_flush, none, OWN(a_worst_flush), GPU_FP8_BLOCKS, c->gpu.fp8[0].worst_flush)  \
  X(a_worst_flush_block, none, OWN(a_worst_flush_block), GPU_FP8_BLOCKS, c->gpu.fp8[0].worst_flush_block) \
  X(b_amax, none, OWN(b_amax), GPU_FP8, c->gpu.fp8[1].amax)                    \
  X(b_scale, none, OWN(b_scale), GPU_FP8, c->gpu.fp8[1].step)                  \
  X(b_elems, none, OWN(b_elems), GPU_FP8, c->gpu.fp8[1].elems)                 \
  X(b_sat, none, OWN(b_sat), GPU_FP8, c->gpu.fp8[1].saturated)                 \
  X(b_flush, none, OWN(b_flush), GPU_FP8, c->gpu.fp8[1].flushed)               \
  X(b_worst_sat, none, OWN(b_worst_sat), GPU_FP8_BLOCKS, c->gpu.fp8[1].worst_sat)      \
  X(b_worst_sat_block, none, OWN(b_worst_sat_block), GPU_FP8_BLOCKS, c->gpu.fp8[1].worst_sat_block) \
  X(b_worst_flush, none, OWN(b_worst_flush), GPU_FP8_BLOCKS, c->gpu.fp8[1].worst_flush)  \
  X(b_worst_flush_block, none, OWN(b_worst_flush_block), GPU_FP8_BLOCKS, c->gpu.fp8[1].worst_flush_block) \
  X(gpu_skipped, none, OWN(gpu_skipped), GPU_SKIPPED, c->gpu.skip)

/* The keys, as strings, in their order: GS_LOG_FIELDS(LOG_KEY_NAME). */
#define LOG_KEY_NAME(key, type, kind, when, from) #key,

/* The members: the 8-byte ones first, then the 4-byte ones, so that no
 * padding comes between them whatever the keys' order. */
#define LOG_REC_MEMBER8(key, type, kind, when, from) LOG_REC_MEMBER8_##type(key)
#define LOG_REC_MEMBER8_u64(key) uint64_t key;
#define LOG_REC_MEMBER8_i64(key) int64_t key;
#define LOG_REC_MEMBER8_i32(key)
#define LOG_REC_MEMBER8_u32(key)
#define LOG_REC_MEMBER8_str(key)
#define LOG_REC_MEMBER8_none(key)
#define LOG_REC_MEMBER4(key, type, kind, when, from) LOG_REC_MEMBER4_##type(key)
#define LOG_REC_MEMBER4_u64(key)
#define LOG_REC_MEMBER4_i64(key)
#define LOG_REC_MEMBER4_i32(key) int32_t key;
#define LOG_REC_MEMBER4_u32(key) uint32_t key;
#define LOG_REC_MEMBER4_str(key) uint32_t key##_len;
#define LOG_REC_MEMBER4_none(key)

/* What log_format prints of a gs_call, copied field by field: 232 bytes,
 * a quarter of the gs_call. The GPU block (has_gpu), the backend's bytes,
 * then the reason's, follow it; size (a multiple of 8, so the next header
 * is aligned) leads to the next record. */
typedef struct log_rec {
  GS_LOG_FIELDS(LOG_REC_MEMBER8)
  GS_LOG_FIELDS(LOG_REC_MEMBER4)
  uint32_t size;
  uint8_t has_backend, has_bias;
  uint8_t kind; /* LOG_REC_CALL, or LOG_REC_TEXT: a ready line of reason_len bytes follows */
  uint8_t has_gpu; /* LOG_REC_CALL: a gs_gpu_time follows the fixed part */
} log_rec;
enum { LOG_REC_CALL = 0, LOG_REC_TEXT };

/* A record with GPU time carries its events after the fixed part. */
static inline size_t rec_gpu_bytes(int has_gpu) { return has_gpu ? (sizeof(gs_gpu_time) + 7) & ~(size_t)7 : 0; }

static inline size_t rec_size_gpu(size_t reason_len, size_t backend_len, int has_gpu) {
  return (sizeof(log_rec) + rec_gpu_bytes(has_gpu) + backend_len + reason_len + 7) & ~(size_t)7;
}

static inline size_t rec_size(size_t reason_len, size_t backend_len) { return rec_size_gpu(reason_len, backend_len, 0); }

static inline gs_gpu_time *rec_gpu(const log_rec *r) {
  return r->has_gpu ? (gs_gpu_time *)(void *)((char *)(uintptr_t)r + sizeof(log_rec)) : NULL;
}

static inline const char *rec_strings(const log_rec *r) { return (const char *)(r + 1) + rec_gpu_bytes(r->has_gpu); }

/* The longest text a record with strings of these lengths can become,
 * with the fast formatter's slack and the NUL. */
static inline size_t rec_text_bound(size_t reason_len, size_t backend_len) {
  return LOG_TEXT_FIXED + 6 * (reason_len + backend_len);
}

/* The copy of a stored field; a string's bytes are the caller's to copy. */
#define LOG_REC_COPY(key, type, kind, when, from) LOG_REC_COPY_##type(key, from)
#define LOG_REC_COPY_u64(key, from) r->key = (uint64_t)(from);
#define LOG_REC_COPY_i64(key, from) r->key = (int64_t)(from);
#define LOG_REC_COPY_i32(key, from) r->key = (int32_t)(from);
#define LOG_REC_COPY_u32(key, from) r->key = (uint32_t)(from);
#define LOG_REC_COPY_str(key, from)
#define LOG_REC_COPY_none(key, from)

static inline void log_rec_fill(log_rec *r, const gs_call *c, size_t reason_len, size_t backend_len) {
  const gs_gemm *g = &c->g;
  GS_LOG_FIELDS(LOG_REC_COPY)
  r->kind = LOG_REC_CALL;
  r->reason_len = (uint32_t)reason_len;
  r->backend_len = (uint32_t)backend_len;
  r->has_backend = c->backend != NULL;
  r->has_bias = g->bias != NULL;
  r->has_gpu = 0;
}

/* What a call's record says of GPU time: its events (owned by the record
 * from here on), or why there are none. */
static inline void log_rec_fill_gpu(gs_gpu_time *out, const gs_call *c) {
  if (!c->work_begun) { /* c->gpu was never set */
    memset(out, 0, sizeof *out);
    out->skip = GS_GPU_SKIP_NO_WORK;
    return;
  }
  *out = c->gpu;
}

/* r's text into buf (len bytes): its length, or 0 (buf "") if it did not
 * fit. gpu: the record's events, resolved, or why it has none; NULL when
 * GPU time is off. */
size_t log_rec_format(const log_rec *r, const gs_gpu_time *gpu, const char *backend, const char *reason, char *buf,
                      size_t len);

#endif
