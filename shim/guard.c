/* guard.c: GEMMSHIM_GUARD_SQNR=DB, a site whose compared call measured
 * below DB runs native from its next call on.
 *
 * The log's writer, reading a compared call's accuracy (accuracy.c), adds
 * the site here when its figure is below DB; a routed call asks before it
 * runs (route.c for ffma and fp16, fp8.c once its per-layer site is known)
 * and declines with the measurement as its reason. The figure is the lower
 * of sqnr_db and the median element's, -20 log10(rel_err_p50): why both,
 * docs/log-format.md, "The guard's figure".
 *
 * Sites are shared across threads: the writer adds, every calling thread
 * reads. An entry's fields are written before its key is published
 * (release) and read after the key is seen (acquire); writers take a lock.
 * A full table guards no more sites and says so once. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "shim.h"

#define GUARD_SLOTS 4096 /* a power of two */

static struct guard_entry {
  uint64_t site; /* 0: free; published last */
  double db;
  int route;
} table[GUARD_SLOTS];
static pthread_mutex_t write_lock = PTHREAD_MUTEX_INITIALIZER;

/* A child forked while the log writer held the lock would wait on it for
 * ever: it gets a fresh one (the table is consistent: entries are
 * published last). Registered at load, as device.c's. */
static void guard_after_fork_child(void) { pthread_mutex_init(&write_lock, NULL); }

__attribute__((constructor)) static void guard_register_fork(void) {
  pthread_atfork(NULL, NULL, guard_after_fork_child);
}
static unsigned guarded;
static int full_said;

static unsigned slot_of(uint64_t site) { return (unsigned)((site ^ (site >> 31)) * 0x9e3779b97f4a7c15ull >> 52) % GUARD_SLOTS; }

static const struct guard_entry *find(uint64_t site) {
  unsigned i = slot_of(site);
  for (unsigned n = 0; n < GUARD_SLOTS; n++, i = (i + 1) % GUARD_SLOTS) {
    uint64_t s = __atomic_load_n(&table[i].site, __ATOMIC_ACQUIRE);
    if (s == site) return &table[i];
    if (!s) return NULL;
  }
  return NULL;
}

double guard_figure(const gs_gpu_time *t) {
  /* A position finite in one output and not the other (an Inf or NaN the
   * route made or lost) is as wrong as a figure can say. */
  if (t->acc_mismatch) return -__builtin_inf();
  double f = t->acc_sqnr_db;
  if (t->has_acc_quantiles) {
    const double p = t->acc_p50;
    const double med = !(p > 0) ? __builtin_inf() : !(p < __builtin_inf()) ? -__builtin_inf() : -20 * gs_log10(p);
    if (med < f) f = med;
  }
  return f;
}

void guard_observe(uint64_t site, int route, const gs_gpu_time *t) {
  if (!gs_opt.guard_sqnr_db || !site || !t->has_acc || route == GS_ROUTE_NATIVE) return;
  const double db = guard_figure(t);
  if (!(db < (double)gs_opt.guard_sqnr_db)) return;
  pthread_mutex_lock(&write_lock);
  unsigned i = slot_of(site), n = 0;
  for (; n < GUARD_SLOTS; n++, i = (i + 1) % GUARD_SLOTS)
    if (!table[i].site || table[i].site == site) break;
  if (n == GUARD_SLOTS || (!table[i].site && guarded + 1 >= GUARD_SLOTS / 2)) {
    if (!full_said) GS_WARN("GEMMSHIM_GUARD_SQNR: %u sites guarded, the most it keeps; later ones keep their route", guarded);
    full_said = 1;
  } else if (!table[i].site) {
    table[i].db = db;
    table[i].route = route;
    __atomic_store_n(&table[i].site, site, __ATOMIC_RELEASE);
    guarded++;
  }
  pthread_mutex_unlock(&write_lock);
}

int guard_reason(uint64_t site, const char *route, char *why, size_t len) {
  if (!gs_opt.guard_sqnr_db) return 0;
  const struct guard_entry *e = find(site);
  if (!e) return 0;
  snprintf(why, len, "%s off for this site: measured %.1f dB < GEMMSHIM_GUARD_SQNR %llu dB", route, e->db,
           (unsigned long long)gs_opt.guard_sqnr_db);
  return 1;
}

unsigned guard_list(uint64_t *sites, double *db, int *routes, unsigned most) {
  unsigned n = 0;
  for (unsigned i = 0; i < GUARD_SLOTS && n < most; i++) {
    uint64_t s = __atomic_load_n(&table[i].site, __ATOMIC_ACQUIRE);
    if (!s) continue;
    sites[n] = s;
    db[n] = table[i].db;
    routes[n] = table[i].route;
    n++;
  }
  return n;
}

void guard_forget_for_tests(void) {
  pthread_mutex_lock(&write_lock);
  for (unsigned i = 0; i < GUARD_SLOTS; i++) __atomic_store_n(&table[i].site, 0, __ATOMIC_RELEASE);
  guarded = 0;
  full_said = 0;
  pthread_mutex_unlock(&write_lock);
}
