/* dlsym_probe.c: what dlsym answers, as seen from the program and from two
 * libraries it links (libprobe_first, libprobe_second, then cuBLAS), printed
 * as "<object basename>:<symbol>" so two runs (with and without a preloaded
 * library) can be compared line for line. Lines marked "same" must read the
 * same in both runs; the one line about a cuBLAS handle lookup of a hooked
 * name is where an interposer of the XLA pattern differs by design. */
#define _GNU_SOURCE
#include <cublas_v2.h>
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

void *probe_first_next(const char *name);
void *probe_first_default(const char *name);
void *probe_second_next(const char *name);

/* -rdynamic puts this in the global scope ahead of the libraries' copies. */
int probe_target(void) { return 0; }

static void describe(const char *label, const char *kind, void *p) {
  /* Read the error right after the lookup, as a caller would. */
  const char *err = dlerror();
  char what[512];
  Dl_info info;
  if (!p) {
    snprintf(what, sizeof what, "NULL");
  } else if (dladdr(p, &info) && info.dli_fname) {
    const char *base = strrchr(info.dli_fname, '/');
    snprintf(what, sizeof what, "%s:%s", base ? base + 1 : info.dli_fname,
             info.dli_sname ? info.dli_sname : "?");
  } else {
    snprintf(what, sizeof what, "unknown");
  }
  printf("probe %s %s result=%s error=%s\n", kind, label, what, err ? err : "NULL");
}

int main(int argc, char **argv) {
  if (argc != 2) return fprintf(stderr, "usage: %s libcublas.so.N\n", argv[0]), 2;
  dlerror();
  describe("main_next_probe_target", "same", dlsym(RTLD_NEXT, "probe_target"));
  describe("first_next_probe_target", "same", probe_first_next("probe_target"));
  describe("second_next_probe_target", "same", probe_second_next("probe_target"));
  describe("main_default_probe_target", "same", dlsym(RTLD_DEFAULT, "probe_target"));
  describe("first_default_probe_target", "same", probe_first_default("probe_target"));
  describe("main_default_missing", "same", dlsym(RTLD_DEFAULT, "probe_no_such_symbol"));
  describe("main_next_missing", "same", dlsym(RTLD_NEXT, "probe_no_such_symbol"));
  describe("first_next_missing", "same", probe_first_next("probe_no_such_symbol"));

  void *second = dlopen("libprobe_second.so", RTLD_LAZY | RTLD_NOLOAD);
  describe("handle_second_probe_target", "same", second ? dlsym(second, "probe_target") : NULL);
  describe("handle_second_missing", "same", second ? dlsym(second, "probe_no_such_symbol") : NULL);

  /* cuBLAS names: RTLD_NEXT from a library after any preloaded one finds the
   * real cuBLAS; RTLD_DEFAULT finds whatever the program's own calls bind
   * to, interposed or not. */
  describe("first_next_cublasGemmEx", "same", probe_first_next("cublasGemmEx"));
  describe("first_next_cublasLtMatmul", "same", probe_first_next("cublasLtMatmul"));
  describe("first_next_cublasLtCreate", "same", probe_first_next("cublasLtCreate"));
  void *def = dlsym(RTLD_DEFAULT, "cublasGemmEx");
  printf("probe same main_default_cublasGemmEx_is_direct result=%d\n", def == (void *)cublasGemmEx);
  void *blas = dlopen(argv[1], RTLD_LAZY | RTLD_NOLOAD);
  describe("handle_cublas_cublasLtCreate", "same", blas ? dlsym(blas, "cublasLtCreate") : NULL);
  describe("handle_cublas_missing", "same", blas ? dlsym(blas, "probe_no_such_symbol") : NULL);
  describe("handle_cublas_cublasGemmEx", "hooked", blas ? dlsym(blas, "cublasGemmEx") : NULL);

  /* dlerror(): NULL after a successful lookup, and reading it clears it. */
  dlsym(RTLD_DEFAULT, "probe_no_such_symbol");
  dlsym(RTLD_DEFAULT, "probe_target");
  const char *after_success = dlerror();
  printf("probe same dlerror_after_success result=%s\n", after_success ? "set" : "NULL");
  dlsym(RTLD_NEXT, "probe_no_such_symbol");
  const char *first_read = dlerror(), *second_read = dlerror();
  printf("probe same dlerror_read_twice result=%s,%s\n", first_read ? "set" : "NULL",
         second_read ? "set" : "NULL");
  return 0;
}
