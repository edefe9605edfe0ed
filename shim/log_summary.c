/* log_summary.c: what the exit summary says at GEMMSHIM_DEBUG=INFO: the
 * calls per api and route, the commonest reasons and the busiest call
 * sites. A reader of stderr gets from it at a glance what the routing log
 * says call by call, and a run without a log still gets it.
 *
 * Counted only when the summary is wanted (log.c asks for it at INFO): at
 * WARN a call costs nothing here. Every call passes through the counting,
 * so it allocates nothing and is bounded: fixed open-addressing tables of
 * REASONS_MAX reasons and SITES_MAX sites, the rest counted as "other";
 * calls come in runs with one reason, so the previous call's slot is
 * compared before any hashing. No lock of its own: log.c calls it under
 * its lock, which orders it with the records.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "log_summary.h"

#define REASONS_MAX 64
#define REASON_SLOTS 128 /* open addressing, at most half full */
#define SITES_MAX 256
#define SITE_SLOTS 512

typedef struct reason_count {
  uint64_t count; /* 0: free slot */
  uint32_t hash;
  uint32_t len;
  char text[GS_REASON_MAX];
} reason_count;

typedef struct site_count {
  uint64_t count; /* 0: free slot */
  uint64_t site;
} site_count;

typedef struct log_stats {
  uint64_t calls;
  uint64_t by_api_route[GS_API_COUNT + 1][GS_ROUTE_COUNT + 1]; /* last: out of range */
  reason_count reasons[REASON_SLOTS];
  int n_reasons;
  int last_reason; /* the slot the previous call counted in; -1 none */
  uint64_t other_reasons;
  site_count sites[SITE_SLOTS];
  int n_sites;
  uint64_t other_sites;
} log_stats;

static log_stats stats = {.last_reason = -1}; /* under the log's lock */

void log_summary_reset(void) {
  memset(&stats, 0, sizeof stats);
  stats.last_reason = -1;
}

static uint32_t fnv1a(const char *s, size_t n) {
  uint32_t h = 2166136261u;
  for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 16777619u;
  return h;
}

static void count_reason(const char *reason) {
  size_t n = strnlen(reason, GS_REASON_MAX - 1);
  /* Calls come in runs with one reason (a layer's GEMMs, a training
   * step's): comparing with the previous call's slot spares the hash. */
  if (stats.last_reason >= 0) {
    reason_count *r = &stats.reasons[stats.last_reason];
    if (r->len == n && memcmp(r->text, reason, n) == 0) {
      r->count++;
      return;
    }
  }
  uint32_t h = fnv1a(reason, n);
  for (uint32_t i = 0; i < REASON_SLOTS; i++) {
    uint32_t slot = (h + i) % REASON_SLOTS;
    reason_count *r = &stats.reasons[slot];
    if (r->count == 0) {
      if (stats.n_reasons == REASONS_MAX) break;
      stats.n_reasons++;
      r->hash = h;
      r->len = (uint32_t)n;
      memcpy(r->text, reason, n);
      r->text[n] = '\0';
    } else if (r->hash != h || r->len != n || memcmp(r->text, reason, n) != 0) {
      continue;
    }
    r->count++;
    stats.last_reason = (int)slot;
    return;
  }
  stats.other_reasons++;
}

static void count_site(uint64_t site) {
  uint32_t start = (uint32_t)((site * 0x9e3779b97f4a7c15ull) >> 40) % SITE_SLOTS;
  for (uint32_t i = 0; i < SITE_SLOTS; i++) {
    site_count *s = &stats.sites[(start + i) % SITE_SLOTS];
    if (s->count == 0) {
      if (stats.n_sites == SITES_MAX) break;
      stats.n_sites++;
      s->site = site;
    } else if (s->site != site) {
      continue;
    }
    s->count++;
    return;
  }
  stats.other_sites++;
}

void log_summary_count(const gs_call *c) {
  unsigned api = (unsigned)c->g.api < GS_API_COUNT ? (unsigned)c->g.api : GS_API_COUNT;
  unsigned route = (unsigned)c->route < GS_ROUTE_COUNT ? (unsigned)c->route : GS_ROUTE_COUNT;
  stats.calls++;
  stats.by_api_route[api][route]++;
  count_reason(c->reason);
  count_site(c->site);
}
/* Index of the largest nonzero count, which is then cleared; -1 when none. */
static int take_top(uint64_t *counts, int n) {
  int best = -1;
  for (int i = 0; i < n; i++)
    if (counts[i] && (best < 0 || counts[i] > counts[best])) best = i;
  if (best >= 0) counts[best] = 0;
  return best;
}

static void summary_routes_locked(void) {
  char line[768];
  size_t used = 0;
  line[0] = '\0';
  for (int a = 0; a <= GS_API_COUNT; a++)
    for (int r = 0; r <= GS_ROUTE_COUNT; r++) {
      uint64_t n = stats.by_api_route[a][r];
      if (!n || used >= sizeof line) continue;
      const char *api = a < GS_API_COUNT ? gs_api_name((gs_api)a) : NULL;
      const char *route = r < GS_ROUTE_COUNT ? gs_route_name((gs_route)r) : NULL;
      int w = snprintf(line + used, sizeof line - used, "%s%s %s %" PRIu64, used ? ", " : "",
                       api ? api : "unknown", route ? route : "unknown", n);
      used += w > 0 ? (size_t)w : 0;
    }
  GS_INFO("summary: %" PRIu64 " calls%s%s", stats.calls, used ? ": " : "", line);
}

static void summary_top_locked(void) {
  uint64_t counts[SITE_SLOTS];
  for (int i = 0; i < REASON_SLOTS; i++) counts[i] = stats.reasons[i].count;
  for (int i = 0, r; i < 5 && (r = take_top(counts, REASON_SLOTS)) >= 0; i++)
    GS_INFO("summary: reason %" PRIu64 " calls: %s", stats.reasons[r].count, stats.reasons[r].text);
  if (stats.other_reasons)
    GS_INFO("summary: reason %" PRIu64 " calls: (other reasons, beyond the first %d)", stats.other_reasons,
            REASONS_MAX);
  for (int i = 0; i < SITE_SLOTS; i++) counts[i] = stats.sites[i].count;
  for (int i = 0, s; i < 5 && (s = take_top(counts, SITE_SLOTS)) >= 0; i++)
    GS_INFO("summary: site %016" PRIx64 " %" PRIu64 " calls", stats.sites[s].site, stats.sites[s].count);
  if (stats.other_sites)
    GS_INFO("summary: site other %" PRIu64 " calls (sites beyond the first %d)", stats.other_sites, SITES_MAX);
}

/* GEMMSHIM_GUARD_SQNR's sites (guard.c), at most the first 20. */
static void summary_guarded(void) {
  uint64_t sites[20];
  double db[20];
  int routes[20];
  unsigned n = guard_list(sites, db, routes, 20);
  for (unsigned i = 0; i < n; i++)
    GS_INFO("summary: guarded site %016" PRIx64 " %s off: measured %.1f dB < GEMMSHIM_GUARD_SQNR %" PRIu64 " dB",
            sites[i], routes[i] >= 0 && routes[i] < GS_ROUTE_COUNT ? gs_route_name((gs_route)routes[i]) : "unknown",
            db[i], gs_opt.guard_sqnr_db);
}

/* The measured gate's sites (measured_gate.c), at most the first 20. */
static void summary_measured(void) {
  uint64_t sites[20];
  int routes[20];
  static char why[20][GS_REASON_MAX]; /* the exit's one caller */
  unsigned n = measured_list(sites, routes, why, 20);
  for (unsigned i = 0; i < n; i++) GS_INFO("summary: slower site %016" PRIx64 " %s", sites[i], why[i]);
}

void log_summary_print(void) {
  summary_routes_locked();
  summary_top_locked();
  summary_guarded();
  summary_measured();
}
