/* measured_gate.c: with GEMMSHIM_COMPARE, a site whose compared calls show
 * its route slower than native on this GPU runs native from then on
 * (docs/cost-model.md, "The measured gate").
 *
 * The log's writer, reading a compared call's GPU times (gpu_ns: the
 * route's work between its events; native_gpu_ns: the native GEMM run
 * beside it, gpu_time.c), adds them to the site's sums here. Once a site
 * has MEASURED_GATE_CALLS compared calls and the route's sum is above
 * native's, the site is marked; a routed call asks before it runs
 * (route.c, and fp8.c once its per-layer site is known) and declines with
 * the measurement as its reason. A marked site stays marked for the run.
 *
 * Sites are shared across threads: writers (the log's) take a lock, every
 * calling thread reads without one. An entry's key is published last
 * (release) and found with acquire; its sums are read only once `slow` is
 * seen (acquire), after which nothing writes them. A full table measures
 * no more new sites and says so once. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "shim.h"

#define MG_SLOTS 4096 /* a power of two */

static struct mg_entry {
  uint64_t site; /* 0: free; published last */
  int route;
  unsigned calls;
  uint64_t route_ns, native_ns;
  int slow; /* published after the sums, never cleared */
} table[MG_SLOTS];
static pthread_mutex_t write_lock = PTHREAD_MUTEX_INITIALIZER;

/* A child forked while the log writer held the lock would wait on it for
 * ever: it gets a fresh one (the table is consistent: entries are
 * published last). Registered at load, as device.c's. */
static void measured_after_fork_child(void) { pthread_mutex_init(&write_lock, NULL); }

__attribute__((constructor)) static void measured_register_fork(void) {
  pthread_atfork(NULL, NULL, measured_after_fork_child);
}
static unsigned used;
static int full_said;

static unsigned slot_of(uint64_t site) { return (unsigned)((site ^ (site >> 31)) * 0x9e3779b97f4a7c15ull >> 52) % MG_SLOTS; }

static int active(void) { return gs_opt.compare && gs_opt.gate; }

void measured_observe(uint64_t site, int route, const gs_gpu_time *t) {
  if (!active() || !site || route == GS_ROUTE_NATIVE || !t->has_gpu_ns || !t->has_native_ns) return;
  pthread_mutex_lock(&write_lock);
  unsigned i = slot_of(site), n = 0;
  for (; n < MG_SLOTS; n++, i = (i + 1) % MG_SLOTS)
    if (!table[i].site || table[i].site == site) break;
  struct mg_entry *e = NULL;
  if (n < MG_SLOTS && table[i].site) {
    e = &table[i];
  } else if (n == MG_SLOTS || used >= MG_SLOTS / 2) {
    if (!full_said) GS_WARN("GEMMSHIM_COMPARE: %u sites measured, the most the measured gate keeps; later ones keep their route", used);
    full_said = 1;
  } else {
    e = &table[i];
    e->route = route;
    e->calls = 0;
    e->route_ns = e->native_ns = 0;
    __atomic_store_n(&e->slow, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&e->site, site, __ATOMIC_RELEASE);
    used++;
  }
  if (e && !__atomic_load_n(&e->slow, __ATOMIC_RELAXED)) {
    e->calls++;
    e->route_ns += t->gpu_ns;
    e->native_ns += t->native_ns;
    if (e->calls >= MEASURED_GATE_CALLS && e->route_ns > e->native_ns) __atomic_store_n(&e->slow, 1, __ATOMIC_RELEASE);
  }
  pthread_mutex_unlock(&write_lock);
}

static const struct mg_entry *find_slow(uint64_t site) {
  unsigned i = slot_of(site);
  for (unsigned n = 0; n < MG_SLOTS; n++, i = (i + 1) % MG_SLOTS) {
    uint64_t s = __atomic_load_n(&table[i].site, __ATOMIC_ACQUIRE);
    if (s == site) return __atomic_load_n(&table[i].slow, __ATOMIC_ACQUIRE) ? &table[i] : NULL;
    if (!s) return NULL;
  }
  return NULL;
}

static void describe(const struct mg_entry *e, const char *route, char *why, size_t len) {
  snprintf(why, len,
           "%s off for this site: slower than native here, measured %.3gx native's GPU time over %u compared calls "
           "(route %.1f us, native %.1f us a call); GEMMSHIM_GATE=off routes it anyway",
           route, (double)e->route_ns / (double)e->native_ns, e->calls, (double)e->route_ns / e->calls / 1e3,
           (double)e->native_ns / e->calls / 1e3);
}

int measured_reason(uint64_t site, const char *route, char *why, size_t len) {
  if (!active()) return 0;
  const struct mg_entry *e = find_slow(site);
  if (!e) return 0;
  describe(e, route, why, len);
  return 1;
}

unsigned measured_list(uint64_t *sites, int *routes, char (*why)[GS_REASON_MAX], unsigned most) {
  unsigned n = 0;
  for (unsigned i = 0; i < MG_SLOTS && n < most; i++) {
    uint64_t s = __atomic_load_n(&table[i].site, __ATOMIC_ACQUIRE);
    if (!s || !__atomic_load_n(&table[i].slow, __ATOMIC_ACQUIRE)) continue;
    sites[n] = s;
    routes[n] = table[i].route;
    const int r = table[i].route;
    describe(&table[i], r >= 0 && r < GS_ROUTE_COUNT ? gs_route_name((gs_route)r) : "unknown", why[n], GS_REASON_MAX);
    n++;
  }
  return n;
}

void measured_forget_for_tests(void) {
  pthread_mutex_lock(&write_lock);
  for (unsigned i = 0; i < MG_SLOTS; i++) {
    __atomic_store_n(&table[i].site, 0, __ATOMIC_RELEASE);
    __atomic_store_n(&table[i].slow, 0, __ATOMIC_RELEASE);
  }
  used = 0;
  full_said = 0;
  pthread_mutex_unlock(&write_lock);
}
