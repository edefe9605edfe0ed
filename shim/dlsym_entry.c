/* dlsym_entry.c: the C half of the exported dlsym (dlsym.S jumps here for
 * explicit handles) and the lookup of libc's own dlsym.
 *
 * This file is compiled without sanitizer instrumentation: a sanitizer
 * runtime calls dlsym(RTLD_NEXT, ...) while it is still initialising, which
 * reaches gs_resolve_real_dlsym before instrumented code may run. Nothing
 * here calls instrumented code except for the hooked cuBLAS names, which no
 * runtime looks up. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <string.h>

#include "base/sys.h"
#include "dlsym_entry.h"

void *gs_real_dlsym;

void *gs_resolve_real_dlsym(void) {
  void *p = __atomic_load_n(&gs_real_dlsym, __ATOMIC_ACQUIRE);
  if (p) return p;
  /* dlvsym is not wrapped, and from here RTLD_NEXT finds libc's dlsym.
   * glibc 2.34 moved dlsym into libc with a new version. */
  p = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
  if (!p) p = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
  if (p) {
    gs_sys.dlsym = (void *(*)(void *, const char *))p;
    __atomic_store_n(&gs_real_dlsym, p, __ATOMIC_RELEASE);
  }
  return p;
}

/* Set by the hooks at load (dlsym_entry_swap_with): this file sits below
 * them and knows nothing of the wrappers; NULL (unit tests, which link the
 * shim without its hooks) swaps nothing. */
static void *(*dlsym_swap)(const char *name, void *p);

void dlsym_entry_swap_with(void *(*swap)(const char *name, void *p)) {
  __atomic_store_n(&dlsym_swap, swap, __ATOMIC_RELEASE);
}

void *gs_dlsym_handle(void *handle, const char *name) {
  void *(*real_dlsym)(void *, const char *) = (void *(*)(void *, const char *))gs_resolve_real_dlsym();
  if (!real_dlsym) return NULL;
  void *p = real_dlsym(handle, name);
  /* Every hooked name starts with "cublas"; most lookups do not. */
  if (!p || !name || strncmp(name, "cublas", 6) != 0) return p;
  void *(*swap)(const char *, void *) = __atomic_load_n(&dlsym_swap, __ATOMIC_ACQUIRE);
  return swap ? swap(name, p) : p;
}
