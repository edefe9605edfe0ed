/* common.c: counters file, environment parsing and diagnostics shared by the
 * stand-in libraries (see common.h). */
#define _GNU_SOURCE /* gettid */
#include "common.h"
#include "cublas_status.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* prefix, the message, '\n' into buf (truncated to fit); the length, or 0. */
static size_t format_line(char *buf, size_t size, const char *prefix, const char *fmt, va_list ap) {
  int n = snprintf(buf, size, "%s", prefix);
  int m = vsnprintf(buf + n, size - (size_t)n - 1, fmt, ap);
  if (m < 0) return 0;
  size_t len = (size_t)n + ((size_t)m < size - (size_t)n - 1 ? (size_t)m : size - (size_t)n - 2);
  buf[len++] = '\n';
  return len;
}

void standin_msg(const char *fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  size_t len = format_line(buf, sizeof buf, "standin: ", fmt, ap);
  va_end(ap);
  ssize_t w = len ? write(2, buf, len) : 0;
  (void)w;
}

void standin_append_line(const char *var, const char *fmt, ...) {
  const char *path = getenv(var);
  if (!path || !*path) return;
  char buf[640], tid[24];
  snprintf(tid, sizeof tid, "%ld ", (long)gettid());
  va_list ap;
  va_start(ap, fmt);
  size_t len = format_line(buf, sizeof buf, tid, fmt, ap);
  va_end(ap);
  if (!len) return;
  int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) {
    standin_msg("%s: cannot open %s: %s", var, path, strerror(errno));
    return;
  }
  ssize_t w = write(fd, buf, len);
  (void)w;
  close(fd);
}

int standin_counts_path(char *out, size_t len) {
  const char *p = getenv("STANDIN_COUNTS");
  if (!p || !*p) return 0;
  size_t o = 0;
  for (; *p; p++) {
    char tmp[24];
    const char *ins = tmp;
    if (p[0] == '%' && p[1] == 'p') {
      snprintf(tmp, sizeof tmp, "%ld", (long)getpid());
      p++;
    } else if (p[0] == '%' && p[1] == '%') {
      tmp[0] = '%', tmp[1] = 0;
      p++;
    } else {
      tmp[0] = *p, tmp[1] = 0;
    }
    size_t l = strlen(ins);
    if (o + l + 1 > len) return 0;
    memcpy(out + o, ins, l);
    o += l;
  }
  out[o] = 0;
  return 1;
}

void standin_counts_truncate(void) {
  char path[1024];
  if (!standin_counts_path(path, sizeof path)) return;
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    standin_msg("STANDIN_COUNTS: cannot create %s: %s", path, strerror(errno));
    return;
  }
  close(fd);
}

void standin_counts_append(const standin_counters *c, const char *extra) {
  char path[1024];
  if (!standin_counts_path(path, sizeof path)) return;
  size_t cap = 64 + (extra ? strlen(extra) : 0);
  for (size_t i = 0; i < c->n; i++) cap += strlen(c->names[i]) + 24;
  char *buf = malloc(cap);
  if (!buf) return;
  size_t o = 0;
  for (size_t i = 0; i < c->n; i++)
    o += (size_t)snprintf(buf + o, cap - o, "%s %llu\n", c->names[i],
                          __atomic_load_n(&c->counts[i], __ATOMIC_RELAXED));
  if (extra) o += (size_t)snprintf(buf + o, cap - o, "%s", extra);
  int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd >= 0) {
    ssize_t w = write(fd, buf, o);
    (void)w;
    close(fd);
  } else {
    standin_msg("STANDIN_COUNTS: cannot open %s: %s", path, strerror(errno));
  }
  free(buf);
}

int standin_env_flag(const char *name, int *out) {
  const char *v = getenv(name);
  if (!v || !*v) return 0;
  if (!strcmp(v, "0") || !strcmp(v, "1")) {
    *out = v[0] - '0';
    return 1;
  }
  standin_msg("%s=\"%s\": expected 0 or 1; using 0", name, v);
  return -1;
}

int standin_env_size(const char *name, uint64_t *out) {
  const char *v = getenv(name);
  if (!v || !*v) return 0;
  char *end = NULL;
  errno = 0;
  unsigned long long x = strtoull(v, &end, 10);
  uint64_t mul = 1;
  if (end && (*end == 'k' || *end == 'K')) mul = 1ull << 10, end++;
  else if (end && (*end == 'm' || *end == 'M')) mul = 1ull << 20, end++;
  else if (end && (*end == 'g' || *end == 'G')) mul = 1ull << 30, end++;
  if (errno || end == v || *end || v[0] == '-' || (mul > 1 && x > UINT64_MAX / mul)) {
    standin_msg("%s=\"%s\": expected a byte count (digits, optional k/m/g suffix); "
                "using no limit", name, v);
    return -1;
  }
  *out = (uint64_t)x * mul;
  return 1;
}

/* STANDIN_CUBLASLT_VERSION=N (major*10000 + minor*100 + patch, 10000 to
 * 999999) stands in for an older or newer cuBLAS release: the version
 * queries of cuBLAS and cuBLASLt (built from this file each) and
 * cuBLASLt's refusals by version follow it. Read once; a bad value is named
 * and the build's version kept. */
size_t standin_lt_version(void) {
  static size_t v;
  size_t got = __atomic_load_n(&v, __ATOMIC_RELAXED);
  if (got) return got;
  got = STANDIN_CUBLAS_VERSION;
  const char *e = getenv("STANDIN_CUBLASLT_VERSION");
  if (e && *e) {
    char *end = NULL;
    unsigned long x = strtoul(e, &end, 10);
    if (*end || x < 10000 || x > 999999)
      standin_msg("STANDIN_CUBLASLT_VERSION=\"%s\": expected a version number 10000 to 999999 (e.g. 120800); using %zu", e, got);
    else
      got = x;
  }
  __atomic_store_n(&v, got, __ATOMIC_RELAXED);
  return got;
}
