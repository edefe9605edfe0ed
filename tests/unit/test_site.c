/* Call-site ids: the same place and shape give the same id, in this process
 * and in another one (ASLR moves the objects, the id must not move). */
#define _GNU_SOURCE
#include <pthread.h>
#include <setjmp.h>
#include <sys/wait.h>
#include <unistd.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "shim.h"

/* dladdr counted: this program is linked with --wrap=dladdr (unit.mk), so
 * the shim's calls come here. */
#include <dlfcn.h>
int __real_dladdr(const void *addr, Dl_info *info);
static int dladdr_calls;
int __wrap_dladdr(const void *addr, Dl_info *info) {
  dladdr_calls++;
  return __real_dladdr(addr, info);
}

static gs_gemm shape(int64_t m, int64_t n, int64_t k) {
  gs_gemm g;
  memset(&g, 0, sizeof g);
  g.api = GS_API_GEMM_EX;
  g.m = m, g.n = n, g.k = k, g.batch = 1;
  g.transa = 1, g.transb = 0;
  g.a_type = g.b_type = 14, g.c_type = 14, g.compute_type = 68;
  g.epilogue = -1;
  return g;
}

/* A stand-in return address inside this program's own code. */
static const void *caller_here(int offset) { return (const char *)(uintptr_t)&shape + offset; }

static void test_same_site_same_id(void **state) {
  gs_gemm a = shape(64, 32, 16), b = shape(64, 32, 16);
  assert_int_equal(site_id(caller_here(4), &a), site_id(caller_here(4), &b));
  /* The per-thread caller cache must not change the answer. */
  for (int i = 0; i < 40; i++) site_id(caller_here(i), &a);
  assert_int_equal(site_id(caller_here(4), &a), site_id(caller_here(4), &b));
}

/* The loader is asked once per caller and thread while a program's hot
 * callers fit the cache, wherever their addresses fall: a framework's few
 * GEMM call sites (PyTorch's at::cuda::blas wrappers, one per dtype and
 * entry point) can lie any distance apart, e.g. 512 bytes, which a
 * direct-mapped table indexed by address bits would put in one slot and
 * look up again on every call. */
static void test_hot_callers_looked_up_once(void **state) {
  gs_gemm a = shape(64, 32, 16);
  static const int spacings[] = {16, 512, 4096, 1 << 16};
  for (size_t s = 0; s < sizeof spacings / sizeof spacings[0]; s++) {
    /* 8 callers at fixed addresses (the set a caller falls in depends on
     * its address: fixed, so the test does not depend on where ASLR put
     * this program), never used by another test: new to the cache. */
    const char *base = (const char *)(uintptr_t)(0x7e0000001230ULL + (uint64_t)s * 0x10000000ULL);
    int before = dladdr_calls;
    for (int round = 0; round < 100; round++)
      for (int c = 0; c < 8; c++) site_id(base + c * spacings[s], &a);
    if (dladdr_calls - before != 8)
      fail_msg("8 callers %d bytes apart, 100 calls each: %d dladdr calls (8 expected)", spacings[s],
               dladdr_calls - before);
  }
}

static void test_shape_and_place_matter(void **state) {
  gs_gemm a = shape(64, 32, 16);
  uint64_t base = site_id(caller_here(4), &a);
  assert_int_not_equal(base, site_id(caller_here(8), &a));
  gs_gemm fields[8];
  for (int i = 0; i < 8; i++) fields[i] = a;
  fields[0].m = 65;
  fields[1].n = 33;
  fields[2].k = 17;
  fields[3].batch = 2;
  fields[4].transb = 1;
  fields[5].a_type = 0;
  fields[6].compute_type = 77;
  fields[7].api = GS_API_LT_MATMUL;
  for (int i = 0; i < 8; i++) assert_int_not_equal(base, site_id(caller_here(4), &fields[i]));
  /* m and n swapped is another GEMM. */
  gs_gemm swapped = shape(32, 64, 16);
  assert_int_not_equal(base, site_id(caller_here(4), &swapped));
}

/* Two runs of this program load it at different addresses; the id is the
 * same because the caller is taken relative to its object. */
static void test_stable_across_processes(void **state) {
  const char *self = getenv("SITE_TEST_SELF");
  assert_non_null(self);
  char cmd[512];
  snprintf(cmd, sizeof cmd, "%s --print-site", self);
  FILE *p = popen(cmd, "r");
  assert_non_null(p);
  unsigned long long other = 0;
  void *other_addr = NULL;
  assert_int_equal(fscanf(p, "%llx %p", &other, &other_addr), 2);
  assert_int_equal(pclose(p), 0);
  gs_gemm a = shape(4096, 4096, 4096);
  assert_int_equal(other, site_id(caller_here(12), &a));
  /* The child was really loaded elsewhere (PIE + ASLR); otherwise this test
   * proves nothing. */
  assert_ptr_not_equal(other_addr, caller_here(12));
}

/* A fork while another thread holds the object-name lock: POSIX
 * (pthread_atfork, fork: "the child process ... shall be created with a
 * single thread", and the state of mutexes held by other threads is copied
 * as is) leaves that lock held for ever in the child unless a child
 * handler renews it. The child must be able to take it. */
static pthread_barrier_t held, forked;
static void *hold_lock(void *arg) {
  (void)arg;
  int r = site_objects_lock_for_tests(1);
  pthread_barrier_wait(&held);
  pthread_barrier_wait(&forked);
  if (r == 0) site_objects_lock_for_tests(0);
  return (void *)(intptr_t)r;
}

static void test_fork_while_object_lock_held(void **state) {
  (void)state;
  pthread_barrier_init(&held, NULL, 2);
  pthread_barrier_init(&forked, NULL, 2);
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, hold_lock, NULL), 0);
  pthread_barrier_wait(&held);
  pid_t pid = fork();
  if (pid == 0) {
    int r = site_objects_lock_for_tests(1);
    if (r == 0) site_objects_lock_for_tests(0);
    _exit(r == 0 ? 0 : 1);
  }
  pthread_barrier_wait(&forked);
  void *held_result = NULL;
  pthread_join(t, &held_result);
  assert_int_equal((intptr_t)held_result, 0);
  int status = 0;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(WIFEXITED(status));
  assert_int_equal(WEXITSTATUS(status), 0);
  pthread_barrier_destroy(&held);
  pthread_barrier_destroy(&forked);
}

int main(int argc, char **argv) {
  if (argc == 2 && strcmp(argv[1], "--print-site") == 0) {
    gs_gemm a = shape(4096, 4096, 4096);
    printf("%llx %p\n", (unsigned long long)site_id(caller_here(12), &a), caller_here(12));
    return 0;
  }
  setenv("SITE_TEST_SELF", argv[0], 1);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_same_site_same_id),
      cmocka_unit_test(test_shape_and_place_matter),
      cmocka_unit_test(test_hot_callers_looked_up_once),
      cmocka_unit_test(test_stable_across_processes),
      cmocka_unit_test(test_fork_while_object_lock_held),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
