/* fakeframework.c: libfakeframework.so, the framework library of loading
 * pattern 2. Like PyTorch's libtorch_cuda.so it links cuBLAS itself and is
 * dlopen()ed RTLD_LOCAL by the program, so cuBLAS never enters the global
 * scope and dlsym(RTLD_NEXT, "cublasGemmEx") from a preloaded library finds
 * nothing. Only the entry point is exported. */
#include "client.h"

__attribute__((visibility("default"))) int fakeframework_main(int argc, char **argv) {
  return gemm_suite_main(argc, argv);
}
