/* The CPU stand-in's libcuda (cu12) for a unit program: loaded from the
 * build folder next to the program's, global, so that resolve_driver's
 * soname lookup finds it, with its devices' compute capabilities set
 * (STANDIN_CC, e.g. "6.1,9.0"), then cuInit. */
#ifndef GEMMSHIM_TEST_STANDIN_DRIVER_H
#define GEMMSHIM_TEST_STANDIN_DRIVER_H

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "resolve.h"
#include "sys.h"

/* 0, or -1 with the reason on stderr. */
static inline int standin_driver_load(const char *program, const char *cc) {
  char path[4096];
  ssize_t n = readlink("/proc/self/exe", path, sizeof path - 64);
  if (n <= 0) return -1;
  path[n] = 0;
  strcpy(strrchr(path, '/'), "/../../standin/cu12/libcuda.so.1");
  setenv("STANDIN_CC", cc, 1);
  if (!dlopen(path, RTLD_NOW | RTLD_GLOBAL)) {
    fprintf(stderr, "%s: cannot load %s: %s\n", program, path, dlerror());
    return -1;
  }
  return resolve_driver() || gs_sys.cuInit(0) != CUDA_SUCCESS ? -1 : 0;
}

#endif
