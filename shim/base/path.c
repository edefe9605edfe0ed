/* path.c: the placeholders of file names the user gives (GEMMSHIM_LOG,
 * GEMMSHIM_DEBUG_FILE): %p pid, %h short host name, %r rank, %% a percent,
 * as NCCL_DEBUG_FILE's %h/%p. Any other "%x" is kept as written. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base.h"
#include "sys.h"

static int all_digits(const char *s) {
  if (!s || !*s) return 0;
  for (; *s; s++)
    if (*s < '0' || *s > '9') return 0;
  return 1;
}

/* Launchers set RANK (torchrun, most MPI wrappers through it) or only
 * LOCAL_RANK; anything that is not a plain number is ignored. */
const char *path_rank(void) {
  const char *r = getenv("RANK");
  if (all_digits(r)) return r;
  r = getenv("LOCAL_RANK");
  return all_digits(r) ? r : "0";
}

/* The short host name, as NCCL_DEBUG_FILE's %h: up to the first dot. */
static void host_string(char *host, size_t len) {
  if (GS_CALL(gethostname, host, len) != 0) snprintf(host, len, "unknown");
  host[len - 1] = '\0';
  char *dot = strchr(host, '.');
  if (dot && dot != host) *dot = '\0';
}

typedef struct path_out {
  char *p, *end; /* end: the last byte, kept for the NUL */
  int full;
} path_out;

static void put(path_out *o, const char *s, size_t n) {
  if (o->full || (size_t)(o->end - o->p) < n) {
    o->full = 1;
    return;
  }
  memcpy(o->p, s, n);
  o->p += n;
}

int path_expand(const char *pattern, long pid, char *out, size_t len, int *uses_pid) {
  if (len == 0) return -1;
  path_out o = {out, out + len - 1, 0};
  char num[24], host[256];
  if (uses_pid) *uses_pid = 0;
  for (const char *p = pattern; *p; p++) {
    if (p[0] != '%' || p[1] == '\0') {
      put(&o, p, 1);
      continue;
    }
    switch (*++p) {
      case 'p':
        snprintf(num, sizeof num, "%ld", pid);
        put(&o, num, strlen(num));
        if (uses_pid) *uses_pid = 1;
        break;
      case 'h': host_string(host, sizeof host), put(&o, host, strlen(host)); break;
      case 'r': {
        const char *r = path_rank();
        put(&o, r, strlen(r));
        break;
      }
      case '%': put(&o, "%", 1); break;
      default: put(&o, p - 1, 2); break; /* not ours: keep "%x" */
    }
  }
  if (o.full) {
    out[0] = '\0';
    return -1;
  }
  *o.p = '\0';
  return 0;
}

int path_expand_here(const char *pattern, char *out, size_t len) {
  return path_expand(pattern, (long)getpid(), out, len, NULL);
}
