/* client_xla.c: loading pattern 3, as XLA/JAX/TensorFlow do it: no cuBLAS at
 * link time; libcublasLt.so.N and libcublas.so.N are dlopen()ed RTLD_LOCAL
 * by soname and every function is looked up with dlsym(handle, name). Plain
 * symbol interposition cannot reach these calls; only a dlsym wrapper can. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>

#include "client.h"
#include "loader_args.h"

client_blas_table client_blas;

int main(int argc, char **argv) {
  int major = loader_cuda_major(argc, argv);
  if (major < 0) return 2;
  char lt_name[32], blas_name[32];
  snprintf(lt_name, sizeof lt_name, "libcublasLt.so.%d", major);
  snprintf(blas_name, sizeof blas_name, "libcublas.so.%d", major);
  void *lt = dlopen(lt_name, RTLD_LAZY | RTLD_LOCAL);
  if (!lt) return fprintf(stderr, "client_xla: %s\n", dlerror()), 2;
  void *blas = dlopen(blas_name, RTLD_LAZY | RTLD_LOCAL);
  if (!blas) return fprintf(stderr, "client_xla: %s\n", dlerror()), 2;
#define LOOKUP(handle, name)                                                   \
  client_blas.name = (__typeof__(client_blas.name))dlsym(handle, #name);       \
  if (!client_blas.name) return fprintf(stderr, "client_xla: %s\n", dlerror()), 2;
#define FROM_BLAS(name) LOOKUP(blas, name)
#define FROM_LT(name) LOOKUP(lt, name)
  CLIENT_CUBLAS_FNS(FROM_BLAS)
  CLIENT_CUBLASLT_FNS(FROM_LT)
#undef FROM_LT
#undef FROM_BLAS
#undef LOOKUP
  printf("global_scope cublasLtCreate=%s\n", dlsym(RTLD_DEFAULT, "cublasLtCreate") ? "present" : "absent");
  return gemm_suite_main(argc, argv);
}
