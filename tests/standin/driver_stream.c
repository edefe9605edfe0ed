/* driver_stream.c: streams, graph capture, events and synchronisation.
 *
 * Work runs inline, so a stream never has anything pending. During capture
 * (cuStreamBeginCapture_v2) work is recorded into the capture's graph and
 * does not run (driver_graph.c runs it at each launch of an instantiation),
 * and the capture rules of a GPU hold:
 *   - synchronising a capturing stream (or its context) fails with
 *     CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and invalidates the capture;
 *   - allocation, synchronous copies and synchronisation are refused while
 *     this thread captures (or any thread captures in global mode);
 *   - legacy-stream work while a blocking stream of the context captures
 *     fails with CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
 *   - waiting on an event recorded in a capture forks the waiting stream
 *     into it; the fork must be joined back (a stream of the capture waits
 *     on an event recorded after the forked stream's last work) before
 *     cuStreamEndCapture, else CUDA_ERROR_STREAM_CAPTURE_UNJOINED; two
 *     captures cannot merge (CUDA_ERROR_STREAM_CAPTURE_MERGE);
 *   - invalidating any stream of a capture invalidates all of it.
 * Waiting on an event recorded outside any capture is accepted as is. The
 * graph cuStreamEndCapture returns holds the recorded work in the order it
 * was enqueued, which respects every dependency the capture expressed. */
#include "driver.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

static int sd_is_special(CUstream s) {
  return s == NULL || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD;
}

static void sd_invalidate_one(void *obj, void *arg) {
  struct CUstream_st *st = obj;
  if (st->capture != CU_STREAM_CAPTURE_STATUS_NONE && st->origin == arg)
    st->capture = CU_STREAM_CAPTURE_STATUS_INVALIDATED;
}

/* Invalidate the whole capture st belongs to. Lock held. */
static void sd_capture_invalidate(struct CUstream_st *st) {
  if (st->capture == CU_STREAM_CAPTURE_STATUS_NONE) return;
  sd_reg_each(SD_STREAM, sd_invalidate_one, st->origin);
}

CUresult sd_stream_lookup_locked(CUstream s, CUcontext *ctx, struct CUstream_st **real) {
  CUresult r = sd_check_init();
  if (r) return r;
  if (sd_is_special(s)) {
    r = sd_ctx_current_locked(ctx);
    if (real) *real = NULL;
    return r;
  }
  if (!sd_reg_has(s, SD_STREAM)) return CUDA_ERROR_INVALID_HANDLE;
  r = sd_ctx_usable_locked(s->ctx);
  if (r) return r;
  *ctx = s->ctx;
  if (real) *real = s;
  return CUDA_SUCCESS;
}

typedef struct sd_implicit_scan {
  CUcontext ctx;
  int invalidate;
  int hit;
} sd_implicit_scan;

static void sd_implicit_one(void *obj, void *arg) {
  struct CUstream_st *st = obj;
  sd_implicit_scan *scan = arg;
  if (st->ctx == scan->ctx && !(st->flags & CU_STREAM_NON_BLOCKING) &&
      st->capture == CU_STREAM_CAPTURE_STATUS_ACTIVE) {
    if (scan->invalidate) sd_capture_invalidate(st);
    scan->hit = 1;
  }
}

CUresult sd_stream_enqueue_locked(CUstream s, CUcontext *ctx, struct CUstream_st **real) {
  struct CUstream_st *st;
  CUresult r = sd_stream_lookup_locked(s, ctx, &st);
  if (r) return r;
  if (real) *real = st;
  if (st && st->capture == CU_STREAM_CAPTURE_STATUS_INVALIDATED)
    return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
  if (s == NULL || s == CU_STREAM_LEGACY) {
    /* The legacy stream synchronises with every blocking stream: joining a
     * stream under capture is an implicit dependency, which invalidates it. */
    sd_implicit_scan scan = {*ctx, 1, 0};
    sd_reg_each(SD_STREAM, sd_implicit_one, &scan);
    if (scan.hit) return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
  }
  if (st && st->capture == CU_STREAM_CAPTURE_STATUS_ACTIVE) {
    st->work++;
    if (st->origin != st) st->unjoined = 1;
  }
  return CUDA_SUCCESS;
}

/* The calling thread's capture interaction mode (cuThreadExchangeStreamCaptureMode);
 * every thread starts in CU_STREAM_CAPTURE_MODE_GLOBAL, "the default mode". */
static __thread CUstreamCaptureMode sd_thread_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;

CUresult cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode *mode) {
  SD_COUNT(cuThreadExchangeStreamCaptureMode);
  CUresult r = sd_check_init();
  if (r) return r;
  if (!mode || (*mode != CU_STREAM_CAPTURE_MODE_GLOBAL && *mode != CU_STREAM_CAPTURE_MODE_THREAD_LOCAL &&
                *mode != CU_STREAM_CAPTURE_MODE_RELAXED))
    return CUDA_ERROR_INVALID_VALUE;
  CUstreamCaptureMode old = sd_thread_mode;
  sd_thread_mode = *mode;
  *mode = old;
  return CUDA_SUCCESS;
}

typedef struct sd_forbid_scan {
  pthread_t self;
  CUstreamCaptureMode mode; /* the calling thread's */
  int invalidate;
  int forbidden;
} sd_forbid_scan;

/* cuda.h, cuThreadExchangeStreamCaptureMode: a thread in GLOBAL mode is
 * prohibited from potentially unsafe calls while it has a capture of its
 * own not begun RELAXED, "or if any other thread has a concurrent capture
 * sequence initiated with CU_STREAM_CAPTURE_MODE_GLOBAL"; in THREAD_LOCAL
 * mode only its own captures count; in RELAXED mode nothing does. The
 * captures that prohibit the call are invalidated with it ("When an invalid
 * operation is attempted during stream capture, any associated capture
 * graphs are invalidated": CUDA C++ Programming Guide, "Prohibited and
 * Unhandled Operations"). Another thread's global-mode capture is among
 * them: vllm-project/vllm pull request 48053 saw every global-mode capture
 * invalidated by a background thread's side-stream copies on a Blackwell
 * GPU, and ROCm/rocm-systems pull request 4508 measured the same for a
 * second thread's synchronisation on NVIDIA hardware. */
static void sd_forbid_one(void *obj, void *arg) {
  struct CUstream_st *st = obj;
  sd_forbid_scan *scan = arg;
  if (st->capture != CU_STREAM_CAPTURE_STATUS_ACTIVE || scan->mode == CU_STREAM_CAPTURE_MODE_RELAXED) return;
  int mine = pthread_equal(st->capture_thread, scan->self);
  int prohibits = mine ? st->capture_mode != CU_STREAM_CAPTURE_MODE_RELAXED
                       : scan->mode == CU_STREAM_CAPTURE_MODE_GLOBAL && st->capture_mode == CU_STREAM_CAPTURE_MODE_GLOBAL;
  if (!prohibits) return;
  scan->forbidden = 1;
  if (scan->invalidate) sd_capture_invalidate(st);
}

CUresult sd_capture_forbids_locked(void) {
  sd_forbid_scan scan = {pthread_self(), sd_thread_mode, 0, 0};
  sd_reg_each(SD_STREAM, sd_forbid_one, &scan);
  if (!scan.forbidden) return CUDA_SUCCESS;
  scan.invalidate = 1;
  sd_reg_each(SD_STREAM, sd_forbid_one, &scan);
  return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
}

static void sd_thread_capture_one(void *obj, void *arg) {
  struct CUstream_st *st = obj;
  if (st->capture == CU_STREAM_CAPTURE_STATUS_ACTIVE && pthread_equal(st->capture_thread, pthread_self()))
    *(int *)arg = 1;
}

int sd_thread_capturing_locked(void) {
  int capturing = 0;
  sd_reg_each(SD_STREAM, sd_thread_capture_one, &capturing);
  return capturing;
}

void sd_note_sync(const char *fn) {
  if (!sd.forbid_sync) return;
  __atomic_fetch_add(&sd.forbidden_syncs, 1ull, __ATOMIC_RELAXED);
  standin_msg("forbidden synchronisation: %s", fn);
}

/* Destroyed streams, most recent last: cuStreamCreate hands their storage
 * out again, most recent first, as a driver's allocator gives back a freed
 * handle's address (in any context), so code that keys state by a
 * stream's address alone meets the hazard here as on a GPU. Ids are never
 * reused. With STANDIN_FRESH_STREAMS a destroyed stream's memory is kept
 * instead, listed (no leak to a leak checker), so no later stream gets its
 * address: the driver promises neither, and code must cope with both. */
#define SD_STREAM_REUSE_MAX 64
static struct CUstream_st *sd_stream_dead[SD_STREAM_REUSE_MAX];
static int sd_stream_ndead;
static struct CUstream_st *sd_kept_streams;
static unsigned long long sd_stream_ids; /* under sd_lock */
static unsigned long long sd_capture_ids; /* under sd_lock */

/* Lock held: the stream leaves the registry (its handle is invalid from
 * now on). */
static void sd_stream_free_locked(struct CUstream_st *st) {
  sd_reg_del(st);
  if (st->graph) sd_graph_free_locked(st->graph); /* a capture never ended */
  st->graph = NULL;
  if (sd.fresh_streams) {
    st->kept = sd_kept_streams;
    sd_kept_streams = st;
  } else if (sd_stream_ndead < SD_STREAM_REUSE_MAX) {
    sd_stream_dead[sd_stream_ndead++] = st;
  } else {
    free(st);
  }
}

static void sd_stream_free_if_ctx(void *obj, void *arg) {
  struct CUstream_st *st = obj;
  if (st->ctx == arg) sd_stream_free_locked(st);
}

static void sd_event_free_if_ctx(void *obj, void *arg) {
  struct CUevent_st *ev = obj;
  if (ev->ctx == arg) {
    sd_reg_del(ev);
    free(ev);
  }
}

void sd_streams_drop_ctx_locked(CUcontext ctx) {
  sd_reg_each(SD_STREAM, sd_stream_free_if_ctx, ctx);
  sd_reg_each(SD_EVENT, sd_event_free_if_ctx, ctx);
  sd_graphs_drop_ctx_locked(ctx);
}

/* ------------------------------------------------------------------------ */
CUresult cuStreamCreate(CUstream *phStream, unsigned int flags) {
  SD_COUNT(cuStreamCreate);
  if (!phStream || (flags & ~(unsigned)CU_STREAM_NON_BLOCKING)) return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&sd_lock);
  CUcontext ctx;
  CUresult r = sd_ctx_current_locked(&ctx);
  struct CUstream_st *st = NULL;
  if (!r) {
    st = sd_stream_ndead > 0 ? sd_stream_dead[--sd_stream_ndead] : malloc(sizeof *st);
    if (st) memset(st, 0, sizeof *st);
    if (!st || sd_reg_add(st, SD_STREAM) != 0) {
      free(st);
      r = CUDA_ERROR_OUT_OF_MEMORY;
    }
  }
  if (!r) {
    st->id = ++sd_stream_ids;
    st->ctx = ctx;
    st->flags = flags;
    st->capture = CU_STREAM_CAPTURE_STATUS_NONE;
    *phStream = st;
  }
  pthread_mutex_unlock(&sd_lock);
  return r;
}

CUresult cuStreamDestroy_v2(CUstream hStream) {
  SD_COUNT(cuStreamDestroy_v2);
  CUresult r = sd_check_init();
  if (r) return r;
  pthread_mutex_lock(&sd_lock);
  if (sd_is_special(hStream) || !sd_reg_has(hStream, SD_STREAM)) {
    r = CUDA_ERROR_INVALID_HANDLE;
  } else {
    sd_stream_free_locked(hStream);
  }
  pthread_mutex_unlock(&sd_lock);
  sd_user_run_pending(); /* a capture never ended gave its references back */
  return r;
}

CUresult cuStreamGetCtx(CUstream hStream, CUcontext *pctx) {
  SD_COUNT(cuStreamGetCtx);
  if (!pctx) return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&sd_lock);
  CUresult r = sd_stream_lookup_locked(hStream, pctx, NULL);
  pthread_mutex_unlock(&sd_lock);
  return r;
}

/* cuda.h: "the unique Id ... unique for the life of the program"; the
 * NULL stream and CU_STREAM_LEGACY are the current context's legacy
 * stream, whose id here is its context's id with the top bit set (unique,
 * and new when a context is reset). CU_STREAM_PER_THREAD is not modelled
 * as a stream of its own: CUDA_ERROR_NOT_SUPPORTED. */
CUresult cuStreamGetId(CUstream hStream, unsigned long long *streamId) {
  SD_COUNT(cuStreamGetId);
  if (!streamId) return CUDA_ERROR_INVALID_VALUE;
  if (hStream == CU_STREAM_PER_THREAD) return sd_check_init() ? sd_check_init() : CUDA_ERROR_NOT_SUPPORTED;
  pthread_mutex_lock(&sd_lock);
  CUcontext ctx;
  struct CUstream_st *st;
  CUresult r = sd_stream_lookup_locked(hStream, &ctx, &st);
  if (!r) *streamId = st ? st->id : (ctx->id | 1ull << 63);
  pthread_mutex_unlock(&sd_lock);
  return r;
}

/* A synchronisation completes the events it covers: those recorded on the
 * stream (scan.stream), or every event of the context (scan.stream NULL). */
typedef struct sd_event_scan {
  CUcontext ctx;
  struct CUstream_st *stream;
} sd_event_scan;

static void sd_complete_event(void *obj, void *arg) {
  struct CUevent_st *ev = obj;
  const sd_event_scan *scan = arg;
  if (ev->ctx == scan->ctx && (!scan->stream || ev->stream == scan->stream)) ev->lag = 0;
}

CUresult cuStreamSynchronize(CUstream hStream) {
  SD_COUNT(cuStreamSynchronize);
  sd_note_sync("cuStreamSynchronize");
  pthread_mutex_lock(&sd_lock);
  CUcontext ctx;
  struct CUstream_st *st;
  CUresult r = sd_stream_lookup_locked(hStream, &ctx, &st);
  if (!r && st && st->capture != CU_STREAM_CAPTURE_STATUS_NONE) {
    sd_capture_invalidate(st);
    r = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  }
  if (!r) r = sd_capture_forbids_locked();
  if (!r && (hStream == NULL || hStream == CU_STREAM_LEGACY))
    r = sd_stream_enqueue_locked(hStream, &ctx, NULL);
  if (!r) {
    /* The legacy NULL stream waits for every blocking stream: complete all. */
    sd_event_scan scan = {ctx, (hStream == NULL || hStream == CU_STREAM_LEGACY) ? NULL : st};
    sd_reg_each(SD_EVENT, sd_complete_event, &scan);
  }
  if (!r) sd_pools_sync_locked();
  pthread_mutex_unlock(&sd_lock);
  return r;
}

typedef struct sd_ctx_scan {
  CUcontext ctx;
  int hit;
} sd_ctx_scan;

static void sd_invalidate_in_ctx(void *obj, void *arg) {
  struct CUstream_st *st = obj;
  sd_ctx_scan *scan = arg;
  if (st->ctx == scan->ctx && st->capture != CU_STREAM_CAPTURE_STATUS_NONE) {
    sd_capture_invalidate(st);
    scan->hit = 1;
  }
}

CUresult cuCtxSynchronize(void) {
  SD_COUNT(cuCtxSynchronize);
  sd_note_sync("cuCtxSynchronize");
  pthread_mutex_lock(&sd_lock);
  CUcontext ctx;
  CUresult r = sd_ctx_current_locked(&ctx);
  if (!r) {
    /* Waiting for the whole context waits for every capturing stream. */
    sd_ctx_scan scan = {ctx, 0};
    sd_reg_each(SD_STREAM, sd_invalidate_in_ctx, &scan);
    if (scan.hit) r = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  }
  if (!r) r = sd_capture_forbids_locked();
  if (!r) {
    sd_event_scan events = {ctx, NULL};
    sd_reg_each(SD_EVENT, sd_complete_event, &events);
  }
  if (!r) sd_pools_sync_locked();
  pthread_mutex_unlock(&sd_lock);
  return r;
}

CUresult cuStreamIsCapturing(CUstream hStream, CUstreamCaptureStatus *captureStatus) {
  SD_COUNT(cuStreamIsCapturing);
  if (!captureStatus) return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&sd_lock);
  CUcontext ctx;
  struct CUstream_st *st;
  CUresult r = sd_stream_lookup_locked(hStream, &ctx, &st);
  if (!r) {
    *captureStatus = st ? st->capture : CU_STREAM_CAPTURE_STATUS_NONE;
    if (!st && (hStream == NULL || hStream == CU_STREAM_LEGACY)) {
      /* Asking the legacy stream while a blocking stream captures is an
       * error, but only a query: the capture stays valid. */
      sd_implicit_scan scan = {ctx, 0, 0};
      sd_reg_each(SD_STREAM, sd_implicit_one, &scan);
      if (scan.hit) r = CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
    }
  }
  pthread_mutex_unlock(&sd_lock);
  return r;
}

/* Whether g is the graph of a capture under way (or invalidated, not yet
 * ended). */
static void sd_capturing_one(void *obj, void *arg) {
  struct CUstream_st *st = obj;
  struct CUgraph_st **g = arg;
  if (*g && st->origin == st && st->capture != CU_STREAM_CAPTURE_STATUS_NONE && st->graph == *g) *g = NULL;
}

int sd_graph_capturing_locked(const struct CUgraph_st *g) {
  if (!g) return 0;
  const struct CUgraph_st *probe = g;
  sd_reg_each(SD_STREAM, sd_capturing_one, &probe);
  return probe == NULL;
}

/* cuda.h, cuStreamGetCaptureInfo (the _v3 entry point; _v2 is the same
 * without edge data): the capture status is required; "Valid data (other
 * than capture status) is returned only if ... the returned capture status
 * is CU_STREAM_CAPTURE_STATUS_ACTIVE"; id_out "an id for the capture
 * sequence, which is unique over the lifetime of the process"; graph_out
 * "the graph being captured into ... This API does not transfer ownership
 * of the graph". Dependencies are not modelled (the stand-in keeps captured
 * work as a list, without node handles): an empty set, no edge data. The
 * legacy stream while a blocking stream captures: STREAM_CAPTURE_IMPLICIT,
 * as cuStreamIsCapturing answers. */
static CUresult sd_capture_info(CUstream hStream, CUstreamCaptureStatus *status, cuuint64_t *id, CUgraph *graph,
                                const CUgraphNode **deps, const CUgraphEdgeData **edges, size_t *ndeps) {
  if (!status || (edges && !deps)) return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&sd_lock);
  CUcontext ctx;
  struct CUstream_st *st = NULL;
  CUresult r = sd_stream_lookup_locked(hStream, &ctx, &st);
  if (!r) *status = st ? st->capture : CU_STREAM_CAPTURE_STATUS_NONE;
  if (!r && !st && (hStream == NULL || hStream == CU_STREAM_LEGACY)) {
    sd_implicit_scan scan = {ctx, 0, 0};
    sd_reg_each(SD_STREAM, sd_implicit_one, &scan);
    if (scan.hit) r = CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
  }
  if (!r && st && st->capture == CU_STREAM_CAPTURE_STATUS_ACTIVE && st->origin) {
    if (id) *id = st->origin->capture_id;
    if (graph) *graph = st->origin->graph;
    if (deps) *deps = NULL;
    if (edges) *edges = NULL;
    if (ndeps) *ndeps = 0;
  }
  pthread_mutex_unlock(&sd_lock);
  return r;
}

CUresult cuStreamGetCaptureInfo_v2(CUstream hStream, CUstreamCaptureStatus *captureStatus_out, cuuint64_t *id_out,
                                   CUgraph *graph_out, const CUgraphNode **dependencies_out,
                                   size_t *numDependencies_out) {
  SD_COUNT(cuStreamGetCaptureInfo_v2);
  return sd_capture_info(hStream, captureStatus_out, id_out, graph_out, dependencies_out, NULL,
                         numDependencies_out);
}

CUresult cuStreamGetCaptureInfo_v3(CUstream hStream, CUstreamCaptureStatus *captureStatus_out, cuuint64_t *id_out,
                                   CUgraph *graph_out, const CUgraphNode **dependencies_out,
                                   const CUgraphEdgeData **edgeData_out, size_t *numDependencies_out) {
  SD_COUNT(cuStreamGetCaptureInfo_v3);
  return sd_capture_info(hStream, captureStatus_out, id_out, graph_out, dependencies_out, edgeData_out,
                         numDependencies_out);
}

CUresult cuStreamBeginCapture_v2(CUstream hStream, CUstreamCaptureMode mode) {
  SD_COUNT(cuStreamBeginCapture_v2);
  if (mode != CU_STREAM_CAPTURE_MODE_GLOBAL && mode != CU_STREAM_CAPTURE_MODE_THREAD_LOCAL &&
      mode != CU_STREAM_CAPTURE_MODE_RELAXED)
    return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&sd_lock);
  CUcontext ctx;
  struct CUstream_st *st;
  CUresult r = sd_stream_lookup_locked(hStream, &ctx, &st);
  if (!r && (hStream == NULL || hStream == CU_STREAM_LEGACY))
    r = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED; /* the legacy stream cannot capture */
  else if (!r && !st)
    r = CUDA_ERROR_NOT_SUPPORTED; /* per-thread stream capture: not modelled */
  else if (!r && st->capture != CU_STREAM_CAPTURE_STATUS_NONE)
    r = CUDA_ERROR_ILLEGAL_STATE;
  struct CUgraph_st *g = r ? NULL : sd_graph_new_locked(ctx);
  if (!r && !g) r = CUDA_ERROR_OUT_OF_MEMORY;
  if (!r) {
    st->graph = g;
    st->capture = CU_STREAM_CAPTURE_STATUS_ACTIVE;
    st->capture_mode = mode;
    st->capture_thread = pthread_self();
    st->origin = st;
    st->capture_id = ++sd_capture_ids;
    st->work = 0;
    st->unjoined = 0;
  }
  pthread_mutex_unlock(&sd_lock);
  return r;
}

typedef struct sd_end_scan {
  struct CUstream_st *origin;
  int unjoined, invalidated;
} sd_end_scan;

static void sd_end_one(void *obj, void *arg) {
  struct CUstream_st *st = obj;
  sd_end_scan *scan = arg;
  if (st->capture == CU_STREAM_CAPTURE_STATUS_NONE || st->origin != scan->origin) return;
  scan->unjoined |= st->unjoined;
  scan->invalidated |= st->capture == CU_STREAM_CAPTURE_STATUS_INVALIDATED;
  st->capture = CU_STREAM_CAPTURE_STATUS_NONE;
  st->origin = NULL;
  st->unjoined = 0;
}

CUresult cuStreamEndCapture(CUstream hStream, CUgraph *phGraph) {
  SD_COUNT(cuStreamEndCapture);
  if (!phGraph) return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&sd_lock);
  CUcontext ctx;
  struct CUstream_st *st;
  CUresult r = sd_stream_lookup_locked(hStream, &ctx, &st);
  if (!r && (!st || st->capture == CU_STREAM_CAPTURE_STATUS_NONE)) r = CUDA_ERROR_ILLEGAL_STATE;
  if (!r && st->origin != st) r = CUDA_ERROR_STREAM_CAPTURE_UNMATCHED; /* a forked stream */
  if (!r && st->capture_mode != CU_STREAM_CAPTURE_MODE_RELAXED &&
      !pthread_equal(st->capture_thread, pthread_self()))
    r = CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD;
  if (!r) {
    /* The capture ends for every stream in it, whatever the outcome. */
    sd_end_scan scan = {st, 0, 0};
    sd_reg_each(SD_STREAM, sd_end_one, &scan);
    struct CUgraph_st *g = st->graph;
    st->graph = NULL;
    *phGraph = NULL;
    if (scan.invalidated) {
      r = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    } else if (scan.unjoined) {
      r = CUDA_ERROR_STREAM_CAPTURE_UNJOINED;
    } else if (sd_reg_add(g, SD_GRAPH) != 0) {
      r = CUDA_ERROR_OUT_OF_MEMORY;
    } else {
      *phGraph = g;
      g = NULL;
    }
    if (g) sd_graph_free_locked(g);
  }
  pthread_mutex_unlock(&sd_lock);
  sd_user_run_pending(); /* an invalidated capture's graph gave its references back */
  return r;
}

/* Stream ordering is implicit (work runs at once); what is modelled is the
 * capture graph's shape: a fork into a capture and a join back. */
CUresult cuStreamWaitEvent(CUstream hStream, CUevent hEvent, unsigned int Flags) {
  SD_COUNT(cuStreamWaitEvent);
  if (Flags & ~(unsigned)CU_EVENT_WAIT_EXTERNAL) return CUDA_ERROR_INVALID_VALUE;
  CUresult r = sd_check_init();
  if (r) return r;
  pthread_mutex_lock(&sd_lock);
  CUcontext ctx;
  struct CUstream_st *st = NULL;
  if (!sd_reg_has(hEvent, SD_EVENT)) r = CUDA_ERROR_INVALID_HANDLE;
  if (!r) r = sd_stream_enqueue_locked(hStream, &ctx, &st);
  struct CUstream_st *src = hEvent && !r && hEvent->captured ? hEvent->captured_on : NULL;
  if (src && (!sd_reg_has(src, SD_STREAM) || src->capture != CU_STREAM_CAPTURE_STATUS_ACTIVE))
    src = NULL; /* that capture is over: an ordinary event now */
  if (src && !(Flags & CU_EVENT_WAIT_EXTERNAL)) {
    if (!st) {
      r = CUDA_ERROR_STREAM_CAPTURE_ISOLATION; /* special streams cannot join */
    } else if (st->capture == CU_STREAM_CAPTURE_STATUS_NONE) {
      /* fork: st joins src's capture and must be joined back */
      st->capture = CU_STREAM_CAPTURE_STATUS_ACTIVE;
      st->capture_mode = src->capture_mode;
      st->capture_thread = src->capture_thread;
      st->origin = src->origin;
      st->work = 0;
      st->unjoined = 1;
    } else if (st->origin != src->origin) {
      sd_capture_invalidate(st);
      sd_capture_invalidate(src);
      r = CUDA_ERROR_STREAM_CAPTURE_MERGE; /* two captures cannot merge */
    } else if (src != st && hEvent->captured_work == src->work) {
      src->unjoined = 0; /* everything src did is now behind st */
    }
  }
  pthread_mutex_unlock(&sd_lock);
  return r;
}

/* ------------------------------------------------------------------------ */
/* Events: a recorded event holds the host clock at the moment its stream
 * reached it, which with inline streams is the moment of cuEventRecord, so
 * the time between two events is the host time of the work between them.
 * With STANDIN_EVENT_LAG=N the work is done but the event still reads as
 * pending to its first N queries, so callers meet CUDA_ERROR_NOT_READY as
 * they do on a GPU (cuEventQuery, cuEventElapsedTime); cuEventSynchronize,
 * a stream or context synchronisation covering the event, and the
 * completion of an event recorded after it on its stream (a stream runs in
 * order) complete it. */
static unsigned long long sd_event_order; /* under sd_lock */

/* Under sd_lock: host time plus the GPU time STANDIN_KERNEL_NS added. */
static uint64_t sd_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec + sd.clock_ns;
}

/* STANDIN_GEMM_NS (driver_init.c): a GEMM of the stand-in cuBLAS or
 * cuBLASLt ran (gemm_ref.c) and moves the clock on. Not a driver
 * function: only the stand-in libraries call it. */
void cuStandinGemmRan(int fp8) {
  if (!sd.gemm_ns) return;
  pthread_mutex_lock(&sd_lock);
  sd.clock_ns += fp8 ? sd.gemm_ns / 2 : sd.gemm_ns;
  pthread_mutex_unlock(&sd_lock);
}

CUresult cuEventCreate(CUevent *phEvent, unsigned int flags) {
  SD_COUNT(cuEventCreate);
  const unsigned known = CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS;
  if (!phEvent || (flags & ~known)) return CUDA_ERROR_INVALID_VALUE;
  if ((flags & CU_EVENT_INTERPROCESS) && !(flags & CU_EVENT_DISABLE_TIMING))
    return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&sd_lock);
  CUcontext ctx;
  CUresult r = sd_ctx_current_locked(&ctx);
  struct CUevent_st *ev = NULL;
  if (!r) {
    ev = calloc(1, sizeof *ev);
    if (!ev || sd_reg_add(ev, SD_EVENT) != 0) {
      free(ev);
      r = CUDA_ERROR_OUT_OF_MEMORY;
    }
  }
  if (!r) {
    ev->ctx = ctx;
    ev->flags = flags;
    *phEvent = ev;
  }
  pthread_mutex_unlock(&sd_lock);
  return r;
}

CUresult cuEventRecord(CUevent hEvent, CUstream hStream) {
  SD_COUNT(cuEventRecord);
  CUresult r = sd_check_init();
  if (r) return r;
  pthread_mutex_lock(&sd_lock);
  CUcontext ctx;
  struct CUstream_st *st = NULL;
  if (!sd_reg_has(hEvent, SD_EVENT)) r = CUDA_ERROR_INVALID_HANDLE;
  if (!r) r = sd_stream_enqueue_locked(hStream, &ctx, &st);
  if (!r && ctx != hEvent->ctx) r = CUDA_ERROR_INVALID_HANDLE;
  if (!r) {
    hEvent->recorded = 1;
    hEvent->captured = st && st->capture == CU_STREAM_CAPTURE_STATUS_ACTIVE;
    hEvent->captured_on = hEvent->captured ? st : NULL;
    hEvent->captured_work = hEvent->captured ? st->work : 0;
    hEvent->t_ns = sd_now_ns();
    hEvent->stream = st;
    hEvent->lag = hEvent->captured ? 0 : (unsigned)sd.event_lag;
    hEvent->order = ++sd_event_order;
  }
  pthread_mutex_unlock(&sd_lock);
  return r;
}

/* CUDA driver API: CUDA_SUCCESS when all work the event captured has
 * completed, or when it was never recorded; CUDA_ERROR_NOT_READY while it
 * has not. */
/* A stream runs in order: once an event's work is done, so is the work of
 * every event recorded before it on that stream. */
static void sd_complete_earlier(void *obj, void *arg) {
  struct CUevent_st *ev = obj;
  const struct CUevent_st *done = arg;
  if (ev->ctx == done->ctx && ev->stream == done->stream && ev->order < done->order) ev->lag = 0;
}

/* cuEventQuery is one of the "potentially unsafe" calls of cuda.h's
 * cuThreadExchangeStreamCaptureMode (sd_capture_forbids_locked applies the
 * rule for the calling thread's mode): PyTorch met it as its NCCL
 * watchdog's event query breaking another thread's capture (pytorch pull
 * requests 104487, 104555) and fixed it by querying in a lenient mode
 * (105182, 148594); ROCm's HIP applies the same modes to hipEventQuery
 * (ROCm/rocm-systems pull request 3176). A refused query is counted. */
static CUresult sd_query_prohibited_locked(void) {
  CUresult r = sd_capture_forbids_locked();
  if (r) __atomic_fetch_add(&sd.prohibited_queries, 1ull, __ATOMIC_RELAXED);
  return r;
}

CUresult cuEventQuery(CUevent hEvent) {
  SD_COUNT(cuEventQuery);
  CUresult r = sd_check_init();
  if (r) return r;
  pthread_mutex_lock(&sd_lock);
  if (!sd_reg_has(hEvent, SD_EVENT)) {
    r = CUDA_ERROR_INVALID_HANDLE;
  } else if ((r = sd_query_prohibited_locked()) != CUDA_SUCCESS) {
    /* refused, before anything else is looked at */
  } else if (hEvent->lag) {
    hEvent->lag--;
    r = CUDA_ERROR_NOT_READY;
  }
  /* Without STANDIN_EVENT_LAG every event is complete once recorded. */
  if (!r && hEvent->recorded && sd.event_lag) sd_reg_each(SD_EVENT, sd_complete_earlier, hEvent);
  pthread_mutex_unlock(&sd_lock);
  return r;
}

CUresult cuEventSynchronize(CUevent hEvent) {
  SD_COUNT(cuEventSynchronize);
  sd_note_sync("cuEventSynchronize");
  CUresult r = sd_check_init();
  if (r) return r;
  pthread_mutex_lock(&sd_lock);
  if (!sd_reg_has(hEvent, SD_EVENT)) r = CUDA_ERROR_INVALID_HANDLE;
  else if (hEvent->captured) r = CUDA_ERROR_CAPTURED_EVENT;
  if (!r) r = sd_capture_forbids_locked();
  if (!r) hEvent->lag = 0;
  if (!r) sd_pools_sync_locked();
  pthread_mutex_unlock(&sd_lock);
  return r;
}

CUresult cuEventElapsedTime_v2(float *pMilliseconds, CUevent hStart, CUevent hEnd) {
  SD_COUNT(cuEventElapsedTime_v2);
  CUresult r = sd_check_init();
  if (r) return r;
  if (!pMilliseconds) return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&sd_lock);
  if (!sd_reg_has(hStart, SD_EVENT) || !sd_reg_has(hEnd, SD_EVENT) || hStart->ctx != hEnd->ctx)
    r = CUDA_ERROR_INVALID_HANDLE;
  else if ((hStart->flags | hEnd->flags) & CU_EVENT_DISABLE_TIMING)
    r = CUDA_ERROR_INVALID_HANDLE;
  else if (!hStart->recorded || !hEnd->recorded || hStart->captured || hEnd->captured)
    r = CUDA_ERROR_INVALID_HANDLE;
  else if (hStart->lag || hEnd->lag)
    r = CUDA_ERROR_NOT_READY; /* "one or both ... has not yet been completed" */
  else
    *pMilliseconds = (float)(((double)hEnd->t_ns - (double)hStart->t_ns) / 1e6);
  pthread_mutex_unlock(&sd_lock);
  return r;
}

CUresult cuEventDestroy_v2(CUevent hEvent) {
  SD_COUNT(cuEventDestroy_v2);
  CUresult r = sd_check_init();
  if (r) return r;
  pthread_mutex_lock(&sd_lock);
  if (!sd_reg_has(hEvent, SD_EVENT)) {
    r = CUDA_ERROR_INVALID_HANDLE;
  } else {
    sd_reg_del(hEvent);
    free(hEvent);
  }
  pthread_mutex_unlock(&sd_lock);
  return r;
}
