/* Finding the real cuBLAS among the loaded objects, and refusing a copy of
 * the shim that sits under a cuBLAS name (calling it would only come back
 * into a shim). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "tmpdir.h"

#include "resolve.h"
#include "shim.h"
#include "sys.h"

static char build_dir[3072], tmp_dir[256], debug_path[512];

static void build_path(char *out, size_t len, const char *rel) {
  snprintf(out, len, "%s/%s", build_dir, rel);
}

static int setup(void **state) {
  ssize_t n = readlink("/proc/self/exe", build_dir, sizeof build_dir - 64);
  if (n <= 0) return -1;
  build_dir[n] = 0;
  strcpy(strrchr(build_dir, '/'), "/../..");
  if (tmpdir_make(tmp_dir, sizeof tmp_dir, "resolve") != 0) return -1;
  snprintf(debug_path, sizeof debug_path, "%s/debug.txt", tmp_dir);
  snprintf(gs_debug_file, sizeof gs_debug_file, "%s", debug_path);
  debug_init();
  resolve_init();
  return 0;
}

static int teardown(void **state) {
  (void)state;
  return tmpdir_remove(tmp_dir);
}

static void test_real_dlsym_is_libc(void **state) {
  void *p = gs_resolve_real_dlsym();
  assert_non_null(p);
  Dl_info info;
  assert_true(dladdr(p, &info));
  assert_non_null(strstr(info.dli_fname, "libc.so"));
}

static void test_copy_of_shim_refused_then_real_found(void **state) {
  char shim[4096], copy[600], cmd[5000], standin[4096];
  build_path(shim, sizeof shim, "libgemmshim.so");
  snprintf(copy, sizeof copy, "%s/libcublas.so.12", tmp_dir);
  snprintf(cmd, sizeof cmd, "cp '%s' '%s'", shim, copy);
  assert_int_equal(system(cmd), 0);
  void *h = dlopen(copy, RTLD_NOW | RTLD_LOCAL);
  assert_non_null(h);
  void *fake = dlsym(h, "cublasGemmEx");
  assert_non_null(fake);
  assert_int_equal(resolve_is_self(fake), 1);
  int lt = -1;
  assert_int_equal(resolve_object_is_cublas(fake, &lt), 1); /* by its name, it would be */
  assert_int_equal(lt, 0);

  /* Only the copy is loaded: refused, with one warning naming it. */
  assert_null(resolve_hooked(GS_SYS_cublasGemmEx));
  assert_null(resolve_hooked(GS_SYS_cublasGemmEx));
  FILE *f = fopen(debug_path, "r");
  char text[4096] = "";
  size_t n = fread(text, 1, sizeof text - 1, f);
  fclose(f);
  text[n] = 0;
  char want[1024];
  snprintf(want, sizeof want,
           "cublasGemmEx in %s is the shim's own wrapper (a copy of libgemmshim.so under a cuBLAS name?); refusing it\n",
           copy);
  if (!strstr(text, want)) fail_msg("expected '%s' in '%s'", want, text);
  assert_null(strstr(strstr(text, want) + 1, want)); /* once, though asked twice */
  assert_non_null(strstr(text, "cublasGemmEx: the real function was not found in any loaded cuBLAS library; "
                                "the call returns CUBLAS_STATUS_NOT_INITIALIZED\n"));

  /* Then the real one appears (cuBLAS loaded after the shim): found. */
  build_path(standin, sizeof standin, "standin/cu12/libcublas.so.12");
  void *real_h = dlopen(standin, RTLD_NOW | RTLD_LOCAL);
  assert_non_null(real_h);
  void *real = dlsym(real_h, "cublasGemmEx");
  assert_int_equal(resolve_is_self(real), 0);
  assert_ptr_equal(resolve_hooked(GS_SYS_cublasGemmEx), real);
  /* Its companions come from the same object. */
  assert_ptr_equal((void *)gs_sys.cublasGetStream_v2, dlsym(real_h, "cublasGetStream_v2"));
}

static void test_object_kinds(void **state) {
  char lt_path[4096];
  build_path(lt_path, sizeof lt_path, "standin/cu12/libcublasLt.so.12");
  void *h = dlopen(lt_path, RTLD_NOW | RTLD_LOCAL);
  assert_non_null(h);
  int lt = -1;
  assert_int_equal(resolve_object_is_cublas(dlsym(h, "cublasLtMatmul"), &lt), 1);
  assert_int_equal(lt, 1);
  assert_int_equal(resolve_object_is_cublas((void *)strlen, &lt), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_real_dlsym_is_libc),
      cmocka_unit_test(test_copy_of_shim_refused_then_real_found),
      cmocka_unit_test(test_object_kinds),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
