/* fault_spec.c: GEMMSHIM_FAULT, the user's (a test's) way to arm sys.c's
 * faults from the environment, and the report at exit of what each armed
 * entry saw. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base.h"
#include "sys.h"

/* What GEMMSHIM_FAULT asked for, for the report at exit. */
static unsigned fault_spec_n[GS_SYS_COUNT];
static int fault_spec_persistent[GS_SYS_COUNT];
static int fault_from_env;

/* "route_output:N[+]": not a call of the table but a fault of the result:
 * the Nth compared routed call (GEMMSHIM_COMPARE) has its output's first
 * column zeroed after the route wrote it, so that the accuracy measure and
 * the guard can be tested against a known error (compare.c). */
static unsigned corrupt_n, corrupt_seen;
static int corrupt_persistent;
static pthread_mutex_t corrupt_lock = PTHREAD_MUTEX_INITIALIZER;

int gs_fault_corrupt_hit(void) {
  if (!__atomic_load_n(&corrupt_n, __ATOMIC_RELAXED)) return 0;
  pthread_mutex_lock(&corrupt_lock);
  unsigned seen = ++corrupt_seen;
  int hit = seen == corrupt_n || (corrupt_persistent && seen > corrupt_n);
  pthread_mutex_unlock(&corrupt_lock);
  return hit;
}

int gs_sys_lookup(const char *name, size_t len) {
  for (int i = 0; i < GS_SYS_COUNT; i++)
    if (strlen(gs_sys_names[i]) == len && strncmp(gs_sys_names[i], name, len) == 0) return i;
  return -1;
}

/* "write:3" fails the third write; "write:3+" the third and every later one.
 * The whole value is checked before anything is armed: a value refused
 * (pass-through) arms nothing, so a typo in its second entry does not leave
 * its first one failing calls. A name given twice is refused: which count
 * was meant cannot be told, and keeping either would silently drop the
 * other. */
int gs_fault_parse(const char *spec, char *err, size_t errlen) {
  /* Index GS_SYS_COUNT: route_output. */
  unsigned want_n[GS_SYS_COUNT + 1] = {0};
  int want_persistent[GS_SYS_COUNT + 1] = {0};
  const char *first_at[GS_SYS_COUNT + 1] = {0}; /* where each name's entry starts */
  size_t first_len[GS_SYS_COUNT + 1] = {0};
  const char *p = spec;
  for (;;) {
    const char *colon = strchr(p, ':');
    const char *end = strchr(p, ',');
    if (!end) end = p + strlen(p);
    char q[GS_QUOTE_BUF];
    if (end == p) { /* "write:1," or ",write:1" or "a:1,,b:2" */
      snprintf(err, errlen, "GEMMSHIM_FAULT='%s': an empty entry (a comma too many); expected name:N[+],...",
               gs_quote(spec, q));
      return -1;
    }
    if (!colon || colon > end) {
      snprintf(err, errlen, "GEMMSHIM_FAULT: '%s' has no ':N'; expected name:N[+],...",
               gs_quote_n(p, (size_t)(end - p), q));
      return -1;
    }
    int id = gs_sys_lookup(p, (size_t)(colon - p));
    if (id < 0 && (size_t)(colon - p) == strlen("route_output") && !strncmp(p, "route_output", 12)) id = GS_SYS_COUNT;
    if (id < 0) {
      snprintf(err, errlen, "GEMMSHIM_FAULT: unknown call '%s'; expected a name from the shim's call table (e.g. write, cuMemAllocFromPoolAsync)",
               gs_quote_n(p, (size_t)(colon - p), q));
      return -1;
    }
    char *num_end = (char *)colon + 1;
    errno = 0;
    /* A digit first: no white space or sign, as for every number. */
    unsigned long n = colon[1] >= '0' && colon[1] <= '9' ? strtoul(colon + 1, &num_end, 10) : 0;
    int persistent = 0;
    if (num_end < end && *num_end == '+') { persistent = 1; num_end++; }
    if (errno || num_end != end || num_end == colon + 1 || n == 0 || n > 1000000000UL) {
      snprintf(err, errlen, "GEMMSHIM_FAULT: bad count in '%s'; expected a number from 1, optionally followed by '+'",
               gs_quote_n(p, (size_t)(end - p), q));
      return -1;
    }
    if (first_at[id]) {
      char q2[GS_QUOTE_BUF];
      snprintf(err, errlen, "GEMMSHIM_FAULT: '%s' is named twice ('%s', then '%s'); expected each call at most once",
               id == GS_SYS_COUNT ? "route_output" : gs_sys_names[id], gs_quote_n(first_at[id], first_len[id], q), gs_quote_n(p, (size_t)(end - p), q2));
      return -1;
    }
    first_at[id] = p;
    first_len[id] = (size_t)(end - p);
    want_n[id] = (unsigned)n;
    want_persistent[id] = persistent;
    if (!*end) break;
    p = end + 1;
  }
  if (want_n[GS_SYS_COUNT]) {
    pthread_mutex_lock(&corrupt_lock);
    corrupt_seen = 0;
    corrupt_persistent = want_persistent[GS_SYS_COUNT];
    __atomic_store_n(&corrupt_n, want_n[GS_SYS_COUNT], __ATOMIC_RELAXED);
    pthread_mutex_unlock(&corrupt_lock);
  }
  for (int id = 0; id < GS_SYS_COUNT; id++) {
    if (!want_n[id]) continue;
    gs_fault_arm((gs_sys_id)id, want_n[id], want_persistent[id]);
    fault_spec_n[id] = want_n[id];
    fault_spec_persistent[id] = want_persistent[id];
    fault_from_env = 1;
  }
  return 0;
}

/* At exit, after the shim's own shutdown (a destructor of lower priority
 * runs later), at INFO: one line per entry GEMMSHIM_FAULT named, e.g.
 *     GEMMSHIM_FAULT write:3+: 7 calls while armed, 5 failed
 * "0 failed" means the operation completed without reaching the fault.
 * Faults are disarmed first, so the report's own write is not failed; only
 * calls made by later destructors (other libraries') go unfaulted. */
__attribute__((destructor(101))) static void gs_fault_report(void) {
  if (!fault_from_env) return;
  unsigned long long calls[GS_SYS_COUNT], failed[GS_SYS_COUNT];
  for (int i = 0; i < GS_SYS_COUNT; i++) gs_fault_counts((gs_sys_id)i, &calls[i], &failed[i]);
  gs_fault_clear();
  for (int i = 0; i < GS_SYS_COUNT; i++)
    if (fault_spec_n[i])
      GS_INFO("GEMMSHIM_FAULT %s:%u%s: %llu calls while armed, %llu failed", gs_sys_names[i], fault_spec_n[i],
              fault_spec_persistent[i] ? "+" : "", calls[i], failed[i]);
}
