/* fuzz_log_path.c: libFuzzer harness for the log and debug file path
 * expansion (path_expand_here, shim/log.c). Input: two bytes of output
 * buffer size (0..1023), then the pattern (cut at a NUL byte).
 *
 * The expected expansion is computed here from the rules docs/environment.md states, not from
 * the shim's code: %p the pid, %h the host name up to its first dot (as
 * NCCL_DEBUG_FILE's %h), %r $RANK (set to 3 here), %% one percent; any other
 * "%x", and a trailing "%", stay as written. A result that fits (with its
 * NUL) is returned whole with 0; one that does not gives -1 and an empty
 * string. The buffer is exactly the size passed, so a write past it is an
 * AddressSanitizer report. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "shim.h"

static char pid_text[24], host[256], rank[] = "3";

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  setenv("RANK", rank, 1);
  snprintf(pid_text, sizeof pid_text, "%ld", (long)getpid());
  if (gethostname(host, sizeof host) != 0) snprintf(host, sizeof host, "unknown");
  host[sizeof host - 1] = '\0';
  char *dot = strchr(host, '.');
  if (dot && dot != host) *dot = '\0';
  return 0;
}

static size_t reference(const char *pat, char *out, size_t room) {
  size_t n = 0;
#define PUT(s, l) do { if (n + (l) <= room) memcpy(out + n, (s), (l)); n += (l); } while (0)
  for (const char *p = pat; *p; p++) {
    if (p[0] != '%' || p[1] == '\0') { PUT(p, 1); continue; }
    switch (*++p) {
      case 'p': PUT(pid_text, strlen(pid_text)); break;
      case 'h': PUT(host, strlen(host)); break;
      case 'r': PUT(rank, strlen(rank)); break;
      case '%': PUT("%", 1); break;
      default: PUT(p - 1, 2); break;
    }
  }
#undef PUT
  return n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 2) return 0;
  size_t len = ((size_t)data[0] | (size_t)data[1] << 8) % 1024;
  char *pattern = malloc(size - 1);
  memcpy(pattern, data + 2, size - 2);
  pattern[size - 2] = '\0';
  static char want[1 << 20];
  size_t need = reference(pattern, want, sizeof want);
  char *out = malloc(len ? len : 1);
  memset(out, 'z', len ? len : 1);
  int rc = path_expand_here(pattern, out, len);
  if (len > 0 && need + 1 <= len) {
    if (rc != 0 || strlen(out) != need || memcmp(out, want, need) != 0) {
      fprintf(stderr, "fuzz_log_path: '%s' (room %zu) gave rc %d '%s'\n", pattern, len, rc, out);
      abort();
    }
  } else if (rc != -1 || (len > 0 && out[0] != '\0')) {
    fprintf(stderr, "fuzz_log_path: '%s' needs %zu+1 bytes, room %zu: rc %d\n", pattern, need, len, rc);
    abort();
  }
  free(out);
  free(pattern);
  return 0;
}
