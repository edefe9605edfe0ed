/* client_cuda.c: the CUDA driver, loaded the way the CUDA runtime loads it
 * (dlopen of libcuda.so.1 by its soname), so every loading pattern finds the
 * same driver: the stand-in through LD_LIBRARY_PATH, or the real one. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stddef.h>

#include "client.h"

client_driver_table client_drv;

const char *client_driver_load(void) {
  void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!h) return "libcuda.so.1 could not be loaded";
#define CLIENT_LOAD(name)                                                      \
  client_drv.name = (__typeof__(client_drv.name))dlsym(h, #name);              \
  if (!client_drv.name) return "libcuda.so.1 lacks " #name;
  CLIENT_DRIVER_FNS(CLIENT_LOAD)
#undef CLIENT_LOAD
  return NULL;
}
