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
 * its widest (~1250 bytes), and the slack the unchecked formatter may write
 * past the end before overwriting it (32 bytes) plus the NUL. The unit
 * tests check a record with every field at its widest against it. */
#define LOG_TEXT_FIXED 1536

/* What log_format prints of a gs_call, copied field by field: 232 bytes
 * instead of the 848-byte gs_call. The backend's bytes, then the reason's,
 * follow it; size (a multiple of 8, so the next header is aligned) leads
 * to the next record. */
typedef struct log_rec {
  uint64_t seq, t_ns, dur_ns, site, evicted_site, stream;
  int64_t m, n, k, batch, lda, ldb, ldc, ldd, stride_a, stride_b, stride_c;
  uint32_t size, reason_len, backend_len, site_flags;
  int32_t tid, device, sm, status, decided, route;
  int32_t api, transa, transb, a_type, b_type, c_type, d_type, compute_type, scale_type;
  int32_t epilogue, bias_type, pointer_mode, algo;
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

static inline void log_rec_fill(log_rec *r, const gs_call *c, size_t reason_len, size_t backend_len) {
  const gs_gemm *g = &c->g;
  r->kind = LOG_REC_CALL;
  r->reason_len = (uint32_t)reason_len;
  r->backend_len = (uint32_t)backend_len;
  r->site_flags = c->site_flags;
  r->has_backend = c->backend != NULL;
  r->has_bias = g->bias != NULL;
  r->seq = c->seq;
  r->t_ns = c->t_ns;
  r->dur_ns = c->dur_ns;
  r->site = c->site;
  r->evicted_site = c->evicted_site;
  r->stream = (uintptr_t)g->stream;
  r->m = g->m, r->n = g->n, r->k = g->k, r->batch = g->batch;
  r->lda = g->lda, r->ldb = g->ldb, r->ldc = g->ldc, r->ldd = g->ldd;
  r->stride_a = g->stride_a, r->stride_b = g->stride_b, r->stride_c = g->stride_c;
  r->tid = c->tid, r->device = c->device, r->sm = c->sm, r->status = c->status;
  r->decided = (int32_t)c->decided, r->route = (int32_t)c->route;
  r->api = (int32_t)g->api, r->transa = g->transa, r->transb = g->transb;
  r->a_type = g->a_type, r->b_type = g->b_type, r->c_type = g->c_type, r->d_type = g->d_type;
  r->compute_type = g->compute_type, r->scale_type = g->scale_type;
  r->epilogue = g->epilogue, r->bias_type = g->bias_type, r->pointer_mode = g->pointer_mode, r->algo = g->algo;
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
