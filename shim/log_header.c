/* log_header.c: one line at the head of each process's records, so that
 * runs appended to one log, and the processes of one job sharing a file,
 * can be told apart, and a report can say on what hardware its times were
 * taken (a device named "Standin GPU" is the CPU stand-in). Its keys are
 * in docs/log-format.md. Written once per process, at its first write
 * (log.c), by whichever thread writes; it reads the driver only through
 * the call table, and a failed read leaves the devices out, never the
 * records. */
#define _GNU_SOURCE
#include "log_header.h"

#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/sys.h"
#include "resolve.h"
#include "shim.h"

#define DEVICES_MAX 16
#define ARGV_MAX 256

extern const char gemmshim_version[]; /* resolve.c */

static unsigned long long realtime_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (unsigned long long)ts.tv_sec * 1000000000ull + (unsigned long long)ts.tv_nsec;
}

typedef struct out {
  char *p, *end;
  int full;
} out;

__attribute__((format(printf, 2, 3))) static void put(out *o, const char *fmt, ...) {
  if (o->full) return;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(o->p, (size_t)(o->end - o->p), fmt, ap);
  va_end(ap);
  if (n < 0 || n >= o->end - o->p) o->full = 1;
  else o->p += n;
}

/* s (n bytes) as a JSON string (RFC 8259): '"' and '\' escaped, control
 * bytes as \u00XX, bytes that are not UTF-8 as U+FFFD. */
static void put_json(out *o, const char *s, size_t n) {
  put(o, "\"");
  for (size_t i = 0; i < n && !o->full;) {
    unsigned char c = (unsigned char)s[i];
    size_t seq = c >= 0x80 ? gs_utf8_seq(s + i, n - i) : 1;
    if (c == '"' || c == '\\') put(o, "\\%c", c);
    else if (c < 0x20 || c == 0x7f) put(o, "\\u%04x", c);
    else if (seq == 0) put(o, "\\ufffd");
    else put(o, "%.*s", (int)seq, s + i);
    i += seq ? seq : 1;
  }
  put(o, "\"");
}

/* The first ARGV_MAX bytes of the command line, arguments joined by
 * spaces; "" when /proc cannot be read. */
static size_t command_line(char *buf, size_t len) {
  int fd = GS_CALL(open, "/proc/self/cmdline", O_RDONLY | O_CLOEXEC, 0);
  if (fd < 0) return 0;
  ssize_t n = GS_CALL(read, fd, buf, len);
  GS_CALL(close, fd);
  if (n <= 0) return 0;
  while (n > 0 && buf[n - 1] == '\0') n--;
  for (ssize_t i = 0; i < n; i++)
    if (buf[i] == '\0') buf[i] = ' ';
  return (size_t)n;
}

static void put_devices(out *o) {
  int count = 0;
  put(o, ",\"devices\":[");
  if (!resolve_driver() && gs_sys.cuDeviceGetCount && GS_CALL(cuDeviceGetCount, &count) == CUDA_SUCCESS) {
    for (int d = 0; d < count && d < DEVICES_MAX; d++) {
      char name[256];
      int major = -1, minor = -1;
      if (!gs_sys.cuDeviceGetName || GS_CALL(cuDeviceGetName, name, (int)sizeof name, d) != CUDA_SUCCESS) continue;
      name[sizeof name - 1] = '\0';
      GS_CALL(cuDeviceGetAttribute, &major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, d);
      GS_CALL(cuDeviceGetAttribute, &minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, d);
      put(o, "%s{\"device\":%d,\"name\":", o->p[-1] == '[' ? "" : ",", d);
      put_json(o, name, strlen(name));
      if (major >= 0 && minor >= 0) put(o, ",\"sm\":\"%d.%d\"}", major, minor);
      else put(o, ",\"sm\":null}");
    }
  }
  put(o, "]");
}

size_t log_header_format(char *buf, size_t len) {
  if (len < 2) return 0;
  out o = {buf, buf + len - 1, 0}; /* the last byte for the '\n' */
  char host[256], cmd[ARGV_MAX], value[600];
  if (path_expand_here("%h", host, sizeof host) != 0) snprintf(host, sizeof host, "unknown");
  put(&o, "{\"header\":");
  put_json(&o, gemmshim_version, strlen(gemmshim_version));
  put(&o, ",\"pid\":%ld,\"t_ns\":%llu,\"host\":", (long)getpid(), realtime_ns());
  put_json(&o, host, strlen(host));
  put(&o, ",\"rank\":");
  const char *rank = path_rank();
  put_json(&o, rank, strlen(rank));
  size_t n = command_line(cmd, sizeof cmd);
  put(&o, ",\"command\":");
  put_json(&o, cmd, n);
  put(&o, ",\"options\":{");
  const char *name;
  for (size_t i = 0; (name = options_describe(i, NULL, NULL, NULL)); i++) {
    options_value(i, value, sizeof value);
    put(&o, "%s\"%s\":", i ? "," : "", name);
    put_json(&o, value, strlen(value));
  }
  put(&o, "}");
  put_devices(&o);
  put(&o, "}");
  if (o.full) return 0;
  *o.p++ = '\n';
  return (size_t)(o.p - buf);
}
