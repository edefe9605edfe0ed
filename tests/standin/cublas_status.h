/* cublas_status.h: status names and texts, as the cuBLAS and cuBLASLt
 * libraries print them (checked against the real libraries), for the two
 * stand-ins. */
#ifndef STANDIN_CUBLAS_STATUS_H
#define STANDIN_CUBLAS_STATUS_H

#include <cublas_api.h>

static inline const char *standin_status_name(cublasStatus_t s) {
  switch (s) {
  case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
  case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
  case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
  case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
  case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
  case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
  case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
  case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
  case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
  case CUBLAS_STATUS_LICENSE_ERROR: return "CUBLAS_STATUS_LICENSE_ERROR";
  default: return "unrecognized status";
  }
}

static inline const char *standin_status_string(cublasStatus_t s) {
  switch (s) {
  case CUBLAS_STATUS_SUCCESS: return "success";
  case CUBLAS_STATUS_NOT_INITIALIZED: return "the library was not initialized";
  case CUBLAS_STATUS_ALLOC_FAILED: return "the resource allocation failed";
  case CUBLAS_STATUS_INVALID_VALUE:
    return "an unsupported value or parameter was passed to the function";
  case CUBLAS_STATUS_ARCH_MISMATCH:
    return "the function requires an architectural feature absent from the device";
  case CUBLAS_STATUS_MAPPING_ERROR: return "an access to GPU memory space failed";
  case CUBLAS_STATUS_EXECUTION_FAILED: return "the function failed to launch on the GPU";
  case CUBLAS_STATUS_INTERNAL_ERROR: return "an internal operation failed";
  case CUBLAS_STATUS_NOT_SUPPORTED: return "the requested functionality is not supported";
  case CUBLAS_STATUS_LICENSE_ERROR: return "the license check failed";
  default: return "unrecognized status";
  }
}

/* cuBLAS and cuBLASLt versions: CUBLAS_VERSION = major*10000 + minor*100 +
 * patch. cu12 builds stand in for cuBLAS 12.8.4 (CUDA 12.8), cu13 builds
 * for the 13.1.0 of the toolkit here. */
#if STANDIN_CUDA_MAJOR == 12
#define STANDIN_CUBLAS_MAJOR 12
#define STANDIN_CUBLAS_MINOR 8
#define STANDIN_CUBLAS_PATCH 4
#define STANDIN_CUDART_VERSION 12080
#else
#define STANDIN_CUBLAS_MAJOR 13
#define STANDIN_CUBLAS_MINOR 1
#define STANDIN_CUBLAS_PATCH 0
#define STANDIN_CUDART_VERSION 13000
#endif
#define STANDIN_CUBLAS_VERSION \
  (STANDIN_CUBLAS_MAJOR * 10000 + STANDIN_CUBLAS_MINOR * 100 + STANDIN_CUBLAS_PATCH)

#endif
