/* driver_graph.c: CUDA graphs. A graph is the list of operations captured
 * into it (driver_stream.c begins and ends captures; the enqueuing calls
 * record into the capture's graph instead of running) or embedded in it as
 * child graphs. Launching an instantiation runs the operations in order on
 * the launching stream, each time it is launched, with the values recorded
 * (kernel arguments, memset values, host-mode cuBLAS scalars) and the memory
 * as it is at launch (device-side scalars and scales are read then).
 *
 * What the driver refuses, from cuda.h's documentation of
 * cuGraphAddMemAllocNode ("The following restrictions apply to graphs which
 * contain allocation and/or memory free nodes: ... The graph can only be
 * used in a child node if the ownership is moved to the parent. Only one
 * instantiation of the graph may exist at any point in time. The graph
 * cannot be cloned."), cuGraphClone ("Cloning is not supported for graphs
 * which contain memory allocation nodes, memory free nodes, or conditional
 * nodes") and cuGraphAddChildGraphNode ("If childGraph contains allocation
 * nodes, free nodes, or conditional nodes, this call will return an
 * error"): each is CUDA_ERROR_INVALID_VALUE here, the one error all three
 * calls document. */
#include "driver.h"

#include <stdlib.h>
#include <string.h>

struct CUgraphNode_st {
  struct CUgraph_st *graph;
};

struct CUgraphExec_st {
  CUcontext ctx;
  struct CUgraph_st *graph; /* its record kept (destroyed flag) while this lives */
  sd_node *nodes;
  size_t n;
  unsigned long long flags; /* CUDA_GRAPH_INSTANTIATE_FLAG_* */
  int launched;
  sd_user_refs refs; /* the graph's user object references, its own copy */
};

struct CUgraph_st *sd_capture_graph_locked(struct CUstream_st *st) {
  if (!st || st->capture != CU_STREAM_CAPTURE_STATUS_ACTIVE || !st->origin) return NULL;
  return st->origin->graph;
}

static int sd_node_copy(sd_node *dst, const sd_node *src) {
  *dst = *src;
  if (!src->blob) return 0;
  dst->blob = malloc(src->blob_size ? src->blob_size : 1);
  if (!dst->blob) return -1;
  memcpy(dst->blob, src->blob, src->blob_size);
  return 0;
}

static void sd_nodes_free(sd_node *nodes, size_t n) {
  for (size_t i = 0; i < n; i++) free(nodes[i].blob);
  free(nodes);
}

int sd_graph_append_locked(struct CUgraph_st *g, const sd_node *n) {
  if (g->n == g->cap) {
    size_t cap = g->cap ? 2 * g->cap : 16;
    sd_node *grown = realloc(g->nodes, cap * sizeof *grown);
    if (!grown) return -1;
    g->nodes = grown;
    g->cap = cap;
  }
  if (sd_node_copy(&g->nodes[g->n], n) != 0) return -1;
  g->n++;
  return 0;
}

struct CUgraph_st *sd_graph_new_locked(CUcontext ctx) {
  struct CUgraph_st *g = calloc(1, sizeof *g);
  if (g) g->ctx = ctx;
  return g;
}

static void sd_node_handle_free_if_graph(void *obj, void *arg) {
  struct CUgraphNode_st *node = obj;
  if (node->graph == arg) {
    sd_reg_del(node);
    free(node);
  }
}

void sd_graph_free_locked(struct CUgraph_st *g) {
  sd_reg_each(SD_GRAPH_NODE, sd_node_handle_free_if_graph, g);
  for (size_t i = 0; i < g->nallocs; i++) sd_mem_free_locked(g->allocs[i]);
  sd_user_refs_drop_locked(&g->refs);
  free(g->allocs);
  sd_nodes_free(g->nodes, g->n);
  free(g);
}

/* A destroyed graph gives back its user object references at once: from
 * then on only its executables' own copies, taken at instantiation, keep
 * the objects (CUDA C++ Programming Guide, "CUDA User Objects": references
 * owned by a graph are copied to its executables; cuGraphDestroy destroys
 * the graph). Its record (the allocations of its memory nodes, which its
 * executables' launches check) goes once no instantiation is left. */
static void sd_graph_release_locked(struct CUgraph_st *g) {
  if (!g->destroyed) return;
  sd_user_refs_drop_locked(&g->refs);
  if (g->execs == 0) sd_graph_free_locked(g);
}

static void sd_exec_free_locked(struct CUgraphExec_st *e) {
  sd_reg_del(e);
  sd_nodes_free(e->nodes, e->n);
  sd_user_refs_drop_locked(&e->refs);
  e->graph->execs--;
  sd_graph_release_locked(e->graph);
  free(e);
}

static void sd_exec_free_if_ctx(void *obj, void *arg) {
  struct CUgraphExec_st *e = obj;
  if (e->ctx == arg) sd_exec_free_locked(e);
}

static void sd_graph_free_if_ctx(void *obj, void *arg) {
  struct CUgraph_st *g = obj;
  if (g->ctx == arg) {
    sd_reg_del(g);
    g->destroyed = 1;
    sd_graph_release_locked(g);
  }
}

void sd_graphs_drop_ctx_locked(CUcontext ctx) {
  sd_reg_each(SD_GRAPH_EXEC, sd_exec_free_if_ctx, ctx);
  sd_reg_each(SD_GRAPH, sd_graph_free_if_ctx, ctx);
}

/* Register g as a handle: CUDA_SUCCESS, or OUT_OF_MEMORY (g freed). */
static CUresult sd_graph_publish_locked(struct CUgraph_st *g, CUgraph *out) {
  if (!g) return CUDA_ERROR_OUT_OF_MEMORY;
  if (sd_reg_add(g, SD_GRAPH) != 0) {
    sd_graph_free_locked(g);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  *out = g;
  return CUDA_SUCCESS;
}

/* Append copies of every operation of src to dst. */
static CUresult sd_graph_embed_locked(struct CUgraph_st *dst, const struct CUgraph_st *src) {
  for (size_t i = 0; i < src->n; i++)
    if (sd_graph_append_locked(dst, &src->nodes[i]) != 0) return CUDA_ERROR_OUT_OF_MEMORY;
  return CUDA_SUCCESS;
}

/* ------------------------------------------------------------------------ */
CUresult cuGraphCreate(CUgraph *phGraph, unsigned int flags) {
  SD_COUNT(cuGraphCreate);
  CUresult r = sd_check_init();
  if (r) return r;
  if (!phGraph || flags != 0) return CUDA_ERROR_INVALID_VALUE; /* "flags - must be zero" */
  pthread_mutex_lock(&sd_lock);
  CUcontext ctx;
  r = sd_ctx_current_locked(&ctx);
  if (!r) r = sd_graph_publish_locked(sd_graph_new_locked(ctx), phGraph);
  pthread_mutex_unlock(&sd_lock);
  return r;
}

CUresult cuGraphDestroy(CUgraph hGraph) {
  SD_COUNT(cuGraphDestroy);
  CUresult r = sd_check_init();
  if (r) return r;
  pthread_mutex_lock(&sd_lock);
  if (!sd_reg_has(hGraph, SD_GRAPH)) {
    r = CUDA_ERROR_INVALID_VALUE;
  } else {
    sd_reg_del(hGraph);
    hGraph->destroyed = 1;
    sd_graph_release_locked(hGraph);
  }
  pthread_mutex_unlock(&sd_lock);
  sd_user_run_pending();
  return r;
}

CUresult cuGraphClone(CUgraph *phGraphClone, CUgraph originalGraph) {
  SD_COUNT(cuGraphClone);
  CUresult r = sd_check_init();
  if (r) return r;
  if (!phGraphClone) return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&sd_lock);
  if (!sd_reg_has(originalGraph, SD_GRAPH) || originalGraph->mem_nodes) {
    r = CUDA_ERROR_INVALID_VALUE;
  } else {
    struct CUgraph_st *g = sd_graph_new_locked(originalGraph->ctx);
    if (g && (sd_graph_embed_locked(g, originalGraph) != CUDA_SUCCESS ||
              sd_user_refs_copy_locked(&g->refs, &originalGraph->refs) != 0)) {
      sd_graph_free_locked(g);
      g = NULL;
    }
    r = sd_graph_publish_locked(g, phGraphClone);
  }
  pthread_mutex_unlock(&sd_lock);
  sd_user_run_pending(); /* a clone that failed gave its references back */
  return r;
}

/* The child is cloned into the node (cuda.h), so later changes to it, or
 * its destruction, do not reach the parent. The clone holds the child's
 * user object references as its own (driver_userobj.c); flattened into
 * the parent here, the parent holds them, and gives them back with it. */
CUresult cuGraphAddChildGraphNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                                  size_t numDependencies, CUgraph childGraph) {
  SD_COUNT(cuGraphAddChildGraphNode);
  CUresult r = sd_check_init();
  if (r) return r;
  if (!phGraphNode || (numDependencies && !dependencies)) return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&sd_lock);
  if (!sd_reg_has(hGraph, SD_GRAPH) || !sd_reg_has(childGraph, SD_GRAPH) || childGraph == hGraph ||
      childGraph->mem_nodes)
    r = CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; !r && i < numDependencies; i++)
    if (!sd_reg_has(dependencies[i], SD_GRAPH_NODE) || dependencies[i]->graph != hGraph) r = CUDA_ERROR_INVALID_VALUE;
  struct CUgraphNode_st *node = NULL;
  if (!r) {
    node = calloc(1, sizeof *node);
    if (!node || sd_reg_add(node, SD_GRAPH_NODE) != 0) {
      free(node);
      r = CUDA_ERROR_OUT_OF_MEMORY;
    }
  }
  if (!r) {
    node->graph = hGraph;
    /* Node handles are kept in dependency order already: a child's
     * operations go after everything added before it. */
    size_t before = hGraph->n;
    r = sd_graph_embed_locked(hGraph, childGraph);
    if (!r && sd_user_refs_copy_locked(&hGraph->refs, &childGraph->refs) != 0) r = CUDA_ERROR_OUT_OF_MEMORY;
    if (r) {
      for (size_t i = before; i < hGraph->n; i++) free(hGraph->nodes[i].blob);
      hGraph->n = before;
      sd_reg_del(node);
      free(node);
    } else {
      *phGraphNode = node;
    }
  }
  pthread_mutex_unlock(&sd_lock);
  return r;
}

CUresult cuGraphInstantiateWithFlags(CUgraphExec *phGraphExec, CUgraph hGraph, unsigned long long flags) {
  SD_COUNT(cuGraphInstantiateWithFlags);
  CUresult r = sd_check_init();
  if (r) return r;
  const unsigned long long known = CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH |
                                   CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD | CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH |
                                   CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY;
  if (!phGraphExec || (flags & ~known)) return CUDA_ERROR_INVALID_VALUE;
  if (flags & (CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD | CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH))
    return CUDA_ERROR_NOT_SUPPORTED; /* upload streams and device launch: not modelled */
  pthread_mutex_lock(&sd_lock);
  struct CUgraphExec_st *e = NULL;
  if (!sd_reg_has(hGraph, SD_GRAPH) || (hGraph->mem_nodes && hGraph->execs)) r = CUDA_ERROR_INVALID_VALUE;
  if (!r) {
    e = calloc(1, sizeof *e);
    if (e && hGraph->n) e->nodes = calloc(hGraph->n, sizeof *e->nodes);
    if (!e || (hGraph->n && !e->nodes)) r = CUDA_ERROR_OUT_OF_MEMORY;
    for (size_t i = 0; !r && i < hGraph->n; i++) {
      if (sd_node_copy(&e->nodes[i], &hGraph->nodes[i]) != 0) r = CUDA_ERROR_OUT_OF_MEMORY;
      else e->n = i + 1;
    }
    if (!r && sd_user_refs_copy_locked(&e->refs, &hGraph->refs) != 0) r = CUDA_ERROR_OUT_OF_MEMORY;
    if (!r && sd_reg_add(e, SD_GRAPH_EXEC) != 0) r = CUDA_ERROR_OUT_OF_MEMORY;
    if (r && e) {
      sd_nodes_free(e->nodes, e->n);
      sd_user_refs_drop_locked(&e->refs);
      free(e);
    }
  }
  if (!r) {
    e->ctx = hGraph->ctx;
    e->graph = hGraph;
    e->flags = flags;
    hGraph->execs++;
    *phGraphExec = e;
  }
  pthread_mutex_unlock(&sd_lock);
  return r;
}

CUresult cuGraphExecDestroy(CUgraphExec hGraphExec) {
  SD_COUNT(cuGraphExecDestroy);
  CUresult r = sd_check_init();
  if (r) return r;
  pthread_mutex_lock(&sd_lock);
  if (!sd_reg_has(hGraphExec, SD_GRAPH_EXEC)) r = CUDA_ERROR_INVALID_VALUE;
  else sd_exec_free_locked(hGraphExec);
  pthread_mutex_unlock(&sd_lock);
  sd_user_run_pending();
  return r;
}

static CUresult sd_node_run(const sd_node *n, CUstream stream) {
  switch (n->kind) {
  case SD_NODE_KERNEL: {
    void *params[64];
    standin_launch l = n->launch;
    for (unsigned i = 0; i < n->nparams && i < 64; i++) {
      size_t off;
      memcpy(&off, n->blob + i * sizeof(size_t), sizeof off);
      params[i] = n->blob + off;
    }
    l.params = params;
    l.stream = stream;
    return sd_kernel_call(n->fn, &l);
  }
  case SD_NODE_MEMCPY:
    if (n->bytes) memmove((void *)n->dst, (const void *)n->src, n->bytes);
    return CUDA_SUCCESS;
  case SD_NODE_MEMSET:
    if (n->elem_size == 1) {
      memset((void *)n->dst, (int)n->value, n->bytes);
    } else {
      for (size_t i = 0; i < n->bytes / 4; i++) memcpy((char *)n->dst + 4 * i, &n->value, 4);
    }
    return CUDA_SUCCESS;
  case SD_NODE_HOST:
    n->host_fn(n->user_data);
    return CUDA_SUCCESS;
  default: /* alloc and free nodes: the graph owns the memory */
    return CUDA_SUCCESS;
  }
}

/* Whether the allocation of alloc node i is freed by a later free node of
 * the same exec. */
static int sd_exec_frees(const struct CUgraphExec_st *e, size_t i) {
  for (size_t j = i + 1; j < e->n; j++)
    if (e->nodes[j].kind == SD_NODE_MEM_FREE && e->nodes[j].dst == e->nodes[i].dst) return 1;
  return 0;
}

/* What the driver answers before running e's nodes. Lock held.
 * - A relaunch while an allocation of the previous launch is unfreed,
 *   without CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH:
 *   CUDA_ERROR_INVALID_VALUE (cuda.h, cuGraphLaunch: "If any allocations
 *   created by \p hGraphExec remain unfreed (from a previous launch) and
 *   \p hGraphExec was not instantiated with
 *   ::CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH, the launch will fail
 *   with ::CUDA_ERROR_INVALID_VALUE."). With the flag the driver frees it
 *   and allocates it again at the same address; here it simply stays.
 * - An allocation the program freed outside the graph: a GPU allocates it
 *   again at its fixed address, which host memory cannot do, so the launch
 *   is refused as not modelled (CUDA_ERROR_NOT_SUPPORTED).
 * - A memset or copy node whose device memory was freed since capture: on
 *   a GPU the graph's work faults (CUDA_ERROR_ILLEGAL_ADDRESS, cuda.h: "an
 *   instruction ... on an invalid memory address"); the stand-in says so
 *   at launch rather than writing freed host memory. Kernel nodes'
 *   parameters are opaque and not checked. */
static CUresult sd_exec_check_locked(const struct CUgraphExec_st *e) {
  for (size_t i = 0; i < e->n; i++) {
    const sd_node *n = &e->nodes[i];
    if (n->kind == SD_NODE_MEM_ALLOC) {
      if (!sd_mem_covers_locked(n->dst, n->bytes)) return CUDA_ERROR_NOT_SUPPORTED;
      if (e->launched && !(e->flags & CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH) && !sd_exec_frees(e, i))
        return CUDA_ERROR_INVALID_VALUE;
    } else if (n->kind == SD_NODE_MEMSET || n->kind == SD_NODE_MEMCPY) {
      if (n->bytes && !sd_mem_covers_locked(n->dst, n->bytes)) return CUDA_ERROR_ILLEGAL_ADDRESS;
      if (n->kind == SD_NODE_MEMCPY && n->bytes && !sd_mem_covers_locked(n->src, n->bytes))
        return CUDA_ERROR_ILLEGAL_ADDRESS;
    }
  }
  return CUDA_SUCCESS;
}

/* ---- STANDIN_GRAPH_OVERLAP=s: two executables' replays interleaved ----
 * A GPU may run two launches of two executables on two streams with no
 * ordering between them at once ("To execute a graph concurrently, it must
 * be instantiated multiple times", cuda.h, cuGraphInstantiate); launches
 * of one executable never overlap ("Each launch is ordered behind both any
 * previous work in hStream and any previous launches of hGraphExec",
 * cuGraphLaunch). Here everything runs on the host at once, so such a race
 * never shows. Under the knob, a launch on a stream of the program's own
 * (not NULL, the legacy or the per-thread stream, which order against
 * other work) is held back; if the very next driver call is a launch of
 * another executable on another such stream, the two run interleaved, the
 * second's operations shifted by s: at step t the first runs its
 * operation t, then the second its operation t - s (each executable's
 * operations stay in their order). Any other call first runs the held
 * launch to its end, so anything that orders the two (an event, a
 * synchronisation, a copy, work on the same stream) makes them run one
 * after the other, as they would on a GPU. Read at every launch. */
static pthread_mutex_t sd_overlap_lock = PTHREAD_MUTEX_INITIALIZER;
/* The held launch, and what was enqueued behind it on its stream (host
 * functions, device-to-host copies) before the launch it pairs with. */
#define SD_OVERLAP_TAIL 8
typedef struct sd_overlap_held {
  struct CUgraphExec_st *exec; /* NULL: none held */
  CUstream stream;
  sd_node tail[SD_OVERLAP_TAIL];
  size_t ntail;
} sd_overlap_held;
static sd_overlap_held sd_overlap;

/* The shift, or -1 when the knob is unset (or bad: one message). */
static long long sd_overlap_shift(void) {
  const char *v = getenv("STANDIN_GRAPH_OVERLAP");
  if (!v || !*v) return -1;
  char *end = NULL;
  long long s = strtoll(v, &end, 10);
  if (*end || s < 0 || v[0] == '-') {
    static int told;
    if (!__atomic_exchange_n(&told, 1, __ATOMIC_RELAXED))
      standin_msg("STANDIN_GRAPH_OVERLAP=\"%s\": expected a shift (a count of operations, 0 or more); "
                  "graph launches run one at a time", v);
    return -1;
  }
  return s;
}

static int sd_overlap_stream_ok(CUstream s) {
  return s != NULL && s != CU_STREAM_LEGACY && s != CU_STREAM_PER_THREAD;
}

/* Take the held launch (h->exec NULL when none). */
static void sd_overlap_take(sd_overlap_held *h) {
  h->exec = NULL;
  if (!__atomic_load_n(&sd_overlap.exec, __ATOMIC_ACQUIRE)) return;
  pthread_mutex_lock(&sd_overlap_lock);
  *h = sd_overlap;
  __atomic_store_n(&sd_overlap.exec, NULL, __ATOMIC_RELEASE);
  sd_overlap.ntail = 0;
  pthread_mutex_unlock(&sd_overlap_lock);
}

/* Operation t of a held launch: its executable's, then its tail's. */
static size_t sd_overlap_len(const sd_overlap_held *h) { return h->exec->n + h->ntail; }
static const sd_node *sd_overlap_node(const sd_overlap_held *h, size_t t) {
  return t < h->exec->n ? &h->exec->nodes[t] : &h->tail[t - h->exec->n];
}

static void sd_overlap_failed(CUresult r) {
  if (r) standin_msg("STANDIN_GRAPH_OVERLAP: an operation of a held graph launch failed (CUresult %d)", (int)r);
}

static void sd_overlap_run_held(const sd_overlap_held *h) {
  CUresult r = CUDA_SUCCESS;
  for (size_t t = 0; !r && t < sd_overlap_len(h); t++) r = sd_node_run(sd_overlap_node(h, t), h->stream);
  sd_overlap_failed(r);
}

/* The held launch's operations and e2's, e2's shifted by `shift` steps:
 * at step t the held one's operation t, then e2's operation t - shift. */
static CUresult sd_overlap_pair(const sd_overlap_held *h, struct CUgraphExec_st *e2, CUstream s2, size_t shift) {
  CUresult r1 = CUDA_SUCCESS, r2 = CUDA_SUCCESS;
  const size_t n1 = sd_overlap_len(h);
  for (size_t t = 0; t < n1 || t < shift + e2->n; t++) {
    if (t < n1 && !r1) r1 = sd_node_run(sd_overlap_node(h, t), h->stream);
    if (t >= shift && t - shift < e2->n && !r2) r2 = sd_node_run(&e2->nodes[t - shift], s2);
  }
  sd_overlap_failed(r1);
  return r2;
}

void sd_graph_overlap_flush(void) {
  sd_overlap_held h;
  sd_overlap_take(&h);
  if (h.exec) sd_overlap_run_held(&h);
}

int sd_graph_overlap_join(CUstream stream, const sd_node *n) {
  if (!__atomic_load_n(&sd_overlap.exec, __ATOMIC_ACQUIRE)) return 0;
  pthread_mutex_lock(&sd_overlap_lock);
  int joined = sd_overlap.exec && sd_overlap.stream == stream && sd_overlap.ntail < SD_OVERLAP_TAIL && !n->blob;
  if (joined) sd_overlap.tail[sd_overlap.ntail++] = *n;
  pthread_mutex_unlock(&sd_overlap_lock);
  if (!joined) sd_graph_overlap_flush();
  return joined;
}

/* Launching into a capture (a graph node of its own) is not modelled:
 * CUDA_ERROR_NOT_SUPPORTED. */
CUresult cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream) {
  SD_COUNT_ONLY(cuGraphLaunch);
  /* A held launch is taken, not run: this launch may pair with it. */
  sd_overlap_held held;
  sd_overlap_take(&held);
  CUresult r = sd_check_init();
  long long shift = sd_overlap_shift();
  pthread_mutex_lock(&sd_lock);
  CUcontext ctx;
  struct CUstream_st *st = NULL;
  if (!r && !sd_reg_has(hGraphExec, SD_GRAPH_EXEC)) r = CUDA_ERROR_INVALID_VALUE;
  if (!r) r = sd_stream_enqueue_locked(hStream, &ctx, &st);
  if (!r && ctx != hGraphExec->ctx) r = CUDA_ERROR_INVALID_CONTEXT;
  if (!r && sd_capture_graph_locked(st)) r = CUDA_ERROR_NOT_SUPPORTED;
  if (!r) r = sd_exec_check_locked(hGraphExec);
  if (!r) hGraphExec->launched = 1;
  pthread_mutex_unlock(&sd_lock);
  const int overlap = !r && shift >= 0 && sd_overlap_stream_ok(hStream);
  if (held.exec && overlap && held.exec != hGraphExec && held.stream != hStream)
    return sd_overlap_pair(&held, hGraphExec, hStream, (size_t)shift);
  if (held.exec) sd_overlap_run_held(&held);
  if (r) return r;
  if (overlap) {
    pthread_mutex_lock(&sd_overlap_lock);
    sd_overlap.stream = hStream;
    sd_overlap.ntail = 0;
    __atomic_store_n(&sd_overlap.exec, hGraphExec, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&sd_overlap_lock);
    return CUDA_SUCCESS;
  }
  for (size_t i = 0; !r && i < hGraphExec->n; i++) r = sd_node_run(&hGraphExec->nodes[i], hStream);
  return r;
}

/* The count of a graph's operations (cuda.h, cuGraphGetNodes: "nodes may
 * be NULL, in which case this function will return the number of nodes in
 * numNodes"). A child graph's operations count one by one here (the
 * stand-in flattens child graphs; the driver counts the child node once).
 * The node handles themselves are not modelled: CUDA_ERROR_NOT_SUPPORTED. */
CUresult cuGraphGetNodes(CUgraph hGraph, CUgraphNode *nodes, size_t *numNodes) {
  SD_COUNT(cuGraphGetNodes);
  CUresult r = sd_check_init();
  if (r) return r;
  if (!numNodes) return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&sd_lock);
  if (!sd_reg_has(hGraph, SD_GRAPH)) r = CUDA_ERROR_INVALID_VALUE;
  else if (nodes) r = CUDA_ERROR_NOT_SUPPORTED;
  else *numNodes = hGraph->n;
  pthread_mutex_unlock(&sd_lock);
  return r;
}

/* A host function runs in stream order; in a capture it becomes a host node
 * (run at each launch). */
CUresult cuLaunchHostFunc(CUstream hStream, CUhostFn fn, void *userData) {
  SD_COUNT_ONLY(cuLaunchHostFunc);
  CUresult r = sd_check_init();
  if (r) return r;
  if (!fn) return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&sd_lock);
  CUcontext ctx;
  struct CUstream_st *st = NULL;
  r = sd_stream_enqueue_locked(hStream, &ctx, &st);
  struct CUgraph_st *g = r ? NULL : sd_capture_graph_locked(st);
  int recorded = 0;
  if (g) {
    sd_node n = {.kind = SD_NODE_HOST, .host_fn = fn, .user_data = userData};
    r = sd_graph_append_locked(g, &n) ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_SUCCESS;
    recorded = 1;
  }
  pthread_mutex_unlock(&sd_lock);
  /* Behind a held launch on this stream, it runs after that launch. */
  sd_node later = {.kind = SD_NODE_HOST, .host_fn = fn, .user_data = userData};
  if (!r && !recorded && !sd_graph_overlap_join(hStream, &later)) fn(userData);
  else if (r || recorded) sd_graph_overlap_flush();
  return r;
}
