/* driver_userobj.c: user objects, what cuda.h documents of them.
 *
 * cuUserObjectCreate: "Create a user object with the specified destructor
 * callback and initial reference count. The initial references are owned
 * by the caller." Its flags: "Currently it is required to pass
 * CU_USER_OBJECT_NO_DESTRUCTOR_SYNC, which is the only defined flag."
 * cuUserObjectRelease: "The object's destructor is invoked if the
 * reference count reaches zero." cuGraphRetainUserObject "Creates or moves
 * user object references that will be owned by a CUDA graph"; with
 * CU_GRAPH_USER_OBJECT_MOVE it "transfers references from the calling
 * thread, rather than create new references". Counts "Must be nonzero and
 * not larger than INT_MAX"; anything else is CUDA_ERROR_INVALID_VALUE,
 * the one error the five calls document.
 *
 * Who else holds references (CUDA C++ Programming Guide, "CUDA User
 * Objects"): a clone of a graph holds the references of the graph cloned,
 * a child graph node's copy of its child holds the child's, and an
 * executable graph holds those of the graph it was instantiated from, each
 * as references of its own. The stand-in copies them at cuGraphClone,
 * cuGraphAddChildGraphNode and cuGraphInstantiateWithFlags and gives them
 * back when that graph or instantiation goes (driver_graph.c). A capture
 * that ends invalidated, or never ends, frees its graph and its
 * references with it.
 *
 * Destructors: "Destructor callbacks cannot make CUDA API calls and should
 * avoid blocking behavior, as they are executed by a shared internal
 * thread." The stand-in runs them on the thread whose call dropped the
 * last reference, after it has let go of the driver's lock (a driver may
 * run them at any later time: a caller can count on neither), and a CUDA
 * call from a destructor fails with CUDA_ERROR_NOT_PERMITTED and a
 * complaint. */
#include "driver.h"

#include <limits.h>
#include <stdlib.h>

struct CUuserObject_st {
  void *ptr;
  CUhostFn destroy;
  unsigned long long refs; /* every owner's together */
  struct CUuserObject_st *next_pending;
};

/* Objects whose last reference went, destructors not yet run (sd_lock). */
static struct CUuserObject_st *sd_user_pending;
static __thread int sd_in_destructor;

int sd_user_in_destructor(void) { return sd_in_destructor; }

static int sd_count_ok(unsigned count) { return count != 0 && count <= INT_MAX; }

/* Lock held: drop count references of o (the caller checked it holds
 * them); the last one queues the destructor and retires the handle. */
static void sd_user_drop_locked(struct CUuserObject_st *o, unsigned long long count) {
  o->refs -= count;
  if (o->refs) return;
  sd_reg_del(o);
  o->next_pending = sd_user_pending;
  sd_user_pending = o;
}

void sd_user_run_pending(void) {
  pthread_mutex_lock(&sd_lock);
  struct CUuserObject_st *o = sd_user_pending;
  sd_user_pending = NULL;
  pthread_mutex_unlock(&sd_lock);
  while (o) {
    struct CUuserObject_st *next = o->next_pending;
    SD_COUNT(user_object_destroyed);
    sd_in_destructor = 1;
    o->destroy(o->ptr);
    sd_in_destructor = 0;
    free(o);
    o = next;
  }
}

void sd_user_refs_drop_locked(sd_user_refs *refs) {
  for (size_t i = 0; i < refs->n; i++) sd_user_drop_locked(refs->v[i].obj, refs->v[i].count);
  free(refs->v);
  refs->v = NULL;
  refs->n = refs->cap = 0;
}

/* The entry of o in refs, made (count 0) if absent; NULL out of memory. */
static sd_user_ref *sd_user_ref_slot(sd_user_refs *refs, struct CUuserObject_st *o) {
  for (size_t i = 0; i < refs->n; i++)
    if (refs->v[i].obj == o) return &refs->v[i];
  if (refs->n == refs->cap) {
    size_t cap = refs->cap ? 2 * refs->cap : 4;
    sd_user_ref *grown = realloc(refs->v, cap * sizeof *grown);
    if (!grown) return NULL;
    refs->v = grown;
    refs->cap = cap;
  }
  refs->v[refs->n] = (sd_user_ref){o, 0};
  return &refs->v[refs->n++];
}

int sd_user_refs_copy_locked(sd_user_refs *dst, const sd_user_refs *src) {
  /* Room first, so that a failure leaves dst as it was. */
  size_t need = dst->n + src->n;
  if (need > dst->cap) {
    sd_user_ref *grown = realloc(dst->v, need * sizeof *grown);
    if (!grown) return -1;
    dst->v = grown;
    dst->cap = need;
  }
  for (size_t i = 0; i < src->n; i++) {
    sd_user_ref *r = sd_user_ref_slot(dst, src->v[i].obj); /* cannot fail: room made */
    r->count += src->v[i].count;
    src->v[i].obj->refs += src->v[i].count;
  }
  return 0;
}

/* ------------------------------------------------------------------------ */
CUresult cuUserObjectCreate(CUuserObject *object_out, void *ptr, CUhostFn destroy, unsigned int initialRefcount,
                            unsigned int flags) {
  SD_COUNT(cuUserObjectCreate);
  CUresult r = sd_check_init();
  if (r) return r;
  if (!object_out || !destroy || !sd_count_ok(initialRefcount) || flags != CU_USER_OBJECT_NO_DESTRUCTOR_SYNC)
    return CUDA_ERROR_INVALID_VALUE;
  struct CUuserObject_st *o = calloc(1, sizeof *o);
  if (!o) return CUDA_ERROR_OUT_OF_MEMORY;
  o->ptr = ptr;
  o->destroy = destroy;
  o->refs = initialRefcount;
  pthread_mutex_lock(&sd_lock);
  if (sd_reg_add(o, SD_USER_OBJECT) != 0) r = CUDA_ERROR_OUT_OF_MEMORY;
  pthread_mutex_unlock(&sd_lock);
  if (r) free(o);
  else *object_out = o;
  return r;
}

CUresult cuUserObjectRetain(CUuserObject object, unsigned int count) {
  SD_COUNT(cuUserObjectRetain);
  CUresult r = sd_check_init();
  if (r) return r;
  if (!sd_count_ok(count)) return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&sd_lock);
  if (!sd_reg_has(object, SD_USER_OBJECT)) r = CUDA_ERROR_INVALID_VALUE;
  else object->refs += count;
  pthread_mutex_unlock(&sd_lock);
  return r;
}

/* "It is undefined behavior to release references not owned by the
 * caller": the stand-in refuses a release of more than the object has in
 * all, and otherwise cannot tell whose references they were. */
CUresult cuUserObjectRelease(CUuserObject object, unsigned int count) {
  SD_COUNT(cuUserObjectRelease);
  CUresult r = sd_check_init();
  if (r) return r;
  if (!sd_count_ok(count)) return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&sd_lock);
  if (!sd_reg_has(object, SD_USER_OBJECT) || object->refs < count) r = CUDA_ERROR_INVALID_VALUE;
  else sd_user_drop_locked(object, count);
  pthread_mutex_unlock(&sd_lock);
  sd_user_run_pending();
  return r;
}

/* "All operations other than destroy and node removal are permitted on
 * the graph while the capture sequence is in progress" (cuda.h,
 * cuStreamGetCaptureInfo on graph_out): a graph being captured takes
 * references too. It is not in the registry until the capture ends, so
 * the stand-in also accepts a capture's graph. */
static int sd_graph_usable_locked(struct CUgraph_st *g) {
  return sd_reg_has(g, SD_GRAPH) || sd_graph_capturing_locked(g);
}

CUresult cuGraphRetainUserObject(CUgraph graph, CUuserObject object, unsigned int count, unsigned int flags) {
  SD_COUNT(cuGraphRetainUserObject);
  CUresult r = sd_check_init();
  if (r) return r;
  if (!sd_count_ok(count) || (flags & ~(unsigned)CU_GRAPH_USER_OBJECT_MOVE)) return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&sd_lock);
  sd_user_ref *slot = NULL;
  if (!sd_graph_usable_locked(graph) || !sd_reg_has(object, SD_USER_OBJECT) ||
      ((flags & CU_GRAPH_USER_OBJECT_MOVE) && object->refs < count))
    r = CUDA_ERROR_INVALID_VALUE;
  else if (!(slot = sd_user_ref_slot(&graph->refs, object)))
    r = CUDA_ERROR_OUT_OF_MEMORY;
  if (!r) {
    slot->count += count;
    if (!(flags & CU_GRAPH_USER_OBJECT_MOVE)) object->refs += count; /* moved ones were counted already */
  }
  pthread_mutex_unlock(&sd_lock);
  return r;
}

CUresult cuGraphReleaseUserObject(CUgraph graph, CUuserObject object, unsigned int count) {
  SD_COUNT(cuGraphReleaseUserObject);
  CUresult r = sd_check_init();
  if (r) return r;
  if (!sd_count_ok(count)) return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&sd_lock);
  sd_user_ref *slot = NULL;
  if (sd_graph_usable_locked(graph) && sd_reg_has(object, SD_USER_OBJECT))
    for (size_t i = 0; i < graph->refs.n && !slot; i++)
      if (graph->refs.v[i].obj == object) slot = &graph->refs.v[i];
  if (!slot || slot->count < count) {
    r = CUDA_ERROR_INVALID_VALUE; /* not references this graph owns */
  } else {
    slot->count -= count;
    if (!slot->count) *slot = graph->refs.v[--graph->refs.n];
    sd_user_drop_locked(object, count);
  }
  pthread_mutex_unlock(&sd_lock);
  sd_user_run_pending();
  return r;
}
