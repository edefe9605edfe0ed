/* dlsym_probe_lib.c: built twice, as libprobe_first.so and libprobe_second.so
 * (PROBE_LIB = first | second). Each defines probe_target, so which object
 * answers a lookup shows who was asked, and each makes its RTLD_NEXT lookups
 * from its own code: the answer to RTLD_NEXT depends on the calling object,
 * which a dlsym wrapper must not change. */
#define _GNU_SOURCE
#include <dlfcn.h>

#define PROBE_CAT2(a, b) a##b
#define PROBE_CAT(a, b) PROBE_CAT2(a, b)
#define PROBE_FN(suffix) PROBE_CAT(PROBE_CAT(probe_, PROBE_LIB), suffix)

int probe_target(void) { return 1; }

/* Not tail calls: glibc takes the caller of dlsym from its return address,
 * and a sibling-call jump would make that our caller instead of us. */
void *PROBE_FN(_next)(const char *name) {
  void *volatile p = dlsym(RTLD_NEXT, name);
  return p;
}
void *PROBE_FN(_default)(const char *name) {
  void *volatile p = dlsym(RTLD_DEFAULT, name);
  return p;
}
