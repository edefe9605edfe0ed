/* client_framework.c: loading pattern 2. The program links no cuBLAS; it
 * dlopen()s cuN/libfakeframework.so (next to this executable) with
 * RTLD_LOCAL|RTLD_NOW, as Python imports torch, and runs the suite through
 * the library's entry point. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "loader_args.h"

int main(int argc, char **argv) {
  int major = loader_cuda_major(argc, argv);
  if (major < 0) return 2;
  char exe[PATH_MAX], path[PATH_MAX + 64];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) return perror("readlink /proc/self/exe"), 2;
  exe[n] = 0;
  char *slash = strrchr(exe, '/');
  if (slash) *slash = 0;
  snprintf(path, sizeof path, "%s/cu%d/libfakeframework.so", exe, major);
  void *fw = dlopen(path, RTLD_LOCAL | RTLD_NOW);
  if (!fw) return fprintf(stderr, "client_framework: %s\n", dlerror()), 2;
  /* The point of this pattern: cuBLAS is loaded, but not in the global
   * scope. cublasLtCreate is not interposed by anything, so it is absent
   * from the global scope with or without a preloaded shim. */
  printf("global_scope cublasLtCreate=%s\n", dlsym(RTLD_DEFAULT, "cublasLtCreate") ? "present" : "absent");
  int (*entry)(int, char **) = (int (*)(int, char **))dlsym(fw, "fakeframework_main");
  if (!entry) return fprintf(stderr, "client_framework: %s\n", dlerror()), 2;
  return entry(argc, argv);
}
