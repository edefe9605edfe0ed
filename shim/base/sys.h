/* sys.h: every call the shim makes that can fail goes through one table,
 * generated from the lists below, so the enum, the names and the pointer
 * types cannot drift apart. Tests arm a fault on any entry ("make the Nth
 * call of write fail") through gs_fault_arm() or GEMMSHIM_FAULT; the shim
 * must then run the GEMM native and say why, never crash.
 *
 * libc entries are bound at load. Driver entries come from libcuda.so.1 and
 * cuBLAS entries from the loaded libcublas/libcublasLt, found by resolve.c
 * at first use; a NULL entry means "not available" and callers check it.
 *
 * X(name, return type, failure value, (params), (args))
 *
 * pthread_setcancelstate fails (EINVAL) only under an injected fault: POSIX
 * gives it no other failure for valid arguments (cancel.c says what then).
 * The exec family is libc's, found with dlsym(RTLD_NEXT) at load (exec.c):
 * the shim exports wrappers of those names, which a static binding here
 * would resolve to.
 *
 * debug_write is libc's write for the debug output alone: the debug output
 * is where every other failure is reported, so a fault armed on `write`
 * (the routing log's writes) still leaves a way to say so.
 */
#ifndef GEMMSHIM_SYS_H
#define GEMMSHIM_SYS_H

#include <errno.h>
#include <cublasLt.h>
#include <cublas_v2.h> /* not cublas_api.h: CUDA 12's needs CUBLASAPI, which this defines */
#include <cuda.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>

#define GS_SYS_LIBC(X)                                                         \
  X(open, int, -1, (const char *path, int flags, mode_t mode), (path, flags, mode)) \
  X(read, ssize_t, -1, (int fd, void *buf, size_t n), (fd, buf, n))            \
  X(pread, ssize_t, -1, (int fd, void *buf, size_t n, off_t off), (fd, buf, n, off)) \
  X(write, ssize_t, -1, (int fd, const void *buf, size_t n), (fd, buf, n))     \
  X(send, ssize_t, -1, (int fd, const void *buf, size_t n, int flags), (fd, buf, n, flags)) \
  X(debug_write, ssize_t, -1, (int fd, const void *buf, size_t n), (fd, buf, n)) \
  X(fstat, int, -1, (int fd, struct stat *st), (fd, st))                       \
  X(lseek, off_t, -1, (int fd, off_t off, int whence), (fd, off, whence))      \
  X(lstat, int, -1, (const char *path, struct stat *st), (path, st))           \
  X(stat, int, -1, (const char *path, struct stat *st), (path, st))            \
  X(getcwd, char *, NULL, (char *buf, size_t size), (buf, size))              \
  X(fcntl, int, -1, (int fd, int cmd, int arg), (fd, cmd, arg))                \
  X(poll, int, -1, (struct pollfd *fds, nfds_t n, int timeout_ms), (fds, n, timeout_ms)) \
  X(close, int, -1, (int fd), (fd))                                            \
  X(malloc, void *, NULL, (size_t n), (n))                                     \
  X(calloc, void *, NULL, (size_t n, size_t size), (n, size))                  \
  X(pthread_create, int, EAGAIN,                                               \
    (pthread_t *t, const pthread_attr_t *a, void *(*fn)(void *), void *arg),   \
    (t, a, fn, arg))                                                           \
  X(gethostname, int, -1, (char *name, size_t len), (name, len))               \
  X(pthread_getname_np, int, ERANGE, (pthread_t t, char *name, size_t len),    \
    (t, name, len))                                                            \
  X(pthread_key_create, int, EAGAIN, (pthread_key_t *key, void (*dtor)(void *)), \
    (key, dtor))                                                               \
  X(pthread_setspecific, int, ENOMEM, (pthread_key_t key, const void *value),  \
    (key, value))                                                              \
  X(dlopen, void *, NULL, (const char *file, int mode), (file, mode))          \
  X(dlsym, void *, NULL, (void *handle, const char *name), (handle, name))     \
  X(pthread_setcancelstate, int, EINVAL, (int state, int *old), (state, old))  \
  X(execve, int, -1, (const char *path, char *const argv[], char *const envp[]), \
    (path, argv, envp))                                                        \
  X(execv, int, -1, (const char *path, char *const argv[]), (path, argv))      \
  X(execvp, int, -1, (const char *file, char *const argv[]), (file, argv))     \
  X(execvpe, int, -1, (const char *file, char *const argv[], char *const envp[]), \
    (file, argv, envp))                                                        \
  X(fexecve, int, -1, (int fd, char *const argv[], char *const envp[]), (fd, argv, envp)) \
  X(execveat, int, -1,                                                         \
    (int dirfd, const char *path, char *const argv[], char *const envp[], int flags), \
    (dirfd, path, argv, envp, flags))

/* The CUDA driver API, by the names libcuda.so.1 exports. */
#define GS_SYS_DRIVER(X)                                                       \
  X(cuInit, CUresult, CUDA_ERROR_UNKNOWN, (unsigned int flags), (flags))       \
  X(cuStreamGetCtx, CUresult, CUDA_ERROR_UNKNOWN, (CUstream s, CUcontext *c), (s, c)) \
  X(cuStreamGetId, CUresult, CUDA_ERROR_UNKNOWN, (CUstream s, unsigned long long *id), (s, id)) \
  X(cuCtxGetCurrent, CUresult, CUDA_ERROR_UNKNOWN, (CUcontext *c), (c))        \
  X(cuCtxGetId, CUresult, CUDA_ERROR_UNKNOWN, (CUcontext c, unsigned long long *id), (c, id)) \
  X(cuCtxPushCurrent_v2, CUresult, CUDA_ERROR_UNKNOWN, (CUcontext c), (c))     \
  X(cuCtxPopCurrent_v2, CUresult, CUDA_ERROR_UNKNOWN, (CUcontext *c), (c))     \
  X(cuCtxGetDevice, CUresult, CUDA_ERROR_UNKNOWN, (CUdevice *d), (d))          \
  X(cuDeviceGetCount, CUresult, CUDA_ERROR_UNKNOWN, (int *n), (n))              \
  X(cuDeviceGetName, CUresult, CUDA_ERROR_UNKNOWN, (char *name, int len, CUdevice d), (name, len, d)) \
  X(cuDeviceGetAttribute, CUresult, CUDA_ERROR_UNKNOWN,                        \
    (int *v, CUdevice_attribute a, CUdevice d), (v, a, d))                     \
  X(cuStreamIsCapturing, CUresult, CUDA_ERROR_UNKNOWN,                         \
    (CUstream s, CUstreamCaptureStatus *st), (s, st))                          \
  X(cuThreadExchangeStreamCaptureMode, CUresult, CUDA_ERROR_UNKNOWN,           \
    (CUstreamCaptureMode *mode), (mode))                                       \
  X(cuStreamGetCaptureInfo_v2, CUresult, CUDA_ERROR_INVALID_VALUE,             \
    (CUstream s, CUstreamCaptureStatus *st, cuuint64_t *id, CUgraph *g,        \
     const CUgraphNode **deps, size_t *ndeps), (s, st, id, g, deps, ndeps))    \
  X(cuUserObjectCreate, CUresult, CUDA_ERROR_INVALID_VALUE,                    \
    (CUuserObject *o, void *p, CUhostFn fn, unsigned int refs, unsigned int flags), \
    (o, p, fn, refs, flags))                                                   \
  X(cuUserObjectRelease, CUresult, CUDA_ERROR_INVALID_VALUE,                   \
    (CUuserObject o, unsigned int count), (o, count))                          \
  X(cuGraphRetainUserObject, CUresult, CUDA_ERROR_INVALID_VALUE,               \
    (CUgraph g, CUuserObject o, unsigned int count, unsigned int flags),       \
    (g, o, count, flags))                                                      \
  X(cuMemAlloc_v2, CUresult, CUDA_ERROR_OUT_OF_MEMORY, (CUdeviceptr *p, size_t n), (p, n)) \
  X(cuMemFree_v2, CUresult, CUDA_ERROR_UNKNOWN, (CUdeviceptr p), (p))          \
  X(cuMemFreeAsync, CUresult, CUDA_ERROR_UNKNOWN, (CUdeviceptr p, CUstream s), (p, s)) \
  X(cuMemPoolCreate, CUresult, CUDA_ERROR_UNKNOWN,                             \
    (CUmemoryPool *pool, const CUmemPoolProps *props), (pool, props))          \
  X(cuMemPoolDestroy, CUresult, CUDA_ERROR_UNKNOWN, (CUmemoryPool pool), (pool)) \
  X(cuMemPoolSetAttribute, CUresult, CUDA_ERROR_UNKNOWN,                       \
    (CUmemoryPool pool, CUmemPool_attribute a, void *v), (pool, a, v))         \
  X(cuMemPoolGetAttribute, CUresult, CUDA_ERROR_UNKNOWN,                       \
    (CUmemoryPool pool, CUmemPool_attribute a, void *v), (pool, a, v))         \
  X(cuMemPoolTrimTo, CUresult, CUDA_ERROR_UNKNOWN, (CUmemoryPool pool, size_t keep), (pool, keep)) \
  X(cuMemAllocFromPoolAsync, CUresult, CUDA_ERROR_OUT_OF_MEMORY,               \
    (CUdeviceptr *p, size_t n, CUmemoryPool pool, CUstream s), (p, n, pool, s)) \
  X(cuMemsetD8Async, CUresult, CUDA_ERROR_UNKNOWN,                             \
    (CUdeviceptr p, unsigned char v, size_t n, CUstream s), (p, v, n, s))      \
  X(cuMemsetD32Async, CUresult, CUDA_ERROR_UNKNOWN,                            \
    (CUdeviceptr p, unsigned int v, size_t n, CUstream s), (p, v, n, s))       \
  X(cuMemcpyDtoDAsync_v2, CUresult, CUDA_ERROR_UNKNOWN,                        \
    (CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s), (dst, src, n, s)) \
  X(cuMemHostAlloc, CUresult, CUDA_ERROR_OUT_OF_MEMORY, (void **p, size_t n, unsigned int flags), (p, n, flags)) \
  X(cuMemFreeHost, CUresult, CUDA_ERROR_UNKNOWN, (void *p), (p))               \
  X(cuMemcpyDtoHAsync_v2, CUresult, CUDA_ERROR_UNKNOWN,                        \
    (void *dst, CUdeviceptr src, size_t n, CUstream s), (dst, src, n, s))      \
  X(cuEventCreate, CUresult, CUDA_ERROR_UNKNOWN, (CUevent *e, unsigned int flags), (e, flags)) \
  X(cuEventRecord, CUresult, CUDA_ERROR_UNKNOWN, (CUevent e, CUstream s), (e, s)) \
  X(cuEventQuery, CUresult, CUDA_ERROR_UNKNOWN, (CUevent e), (e))              \
  X(cuEventElapsedTime_v2, CUresult, CUDA_ERROR_UNKNOWN,                       \
    (float *ms, CUevent a, CUevent b), (ms, a, b))                             \
  X(cuEventDestroy_v2, CUresult, CUDA_ERROR_UNKNOWN, (CUevent e), (e))         \
  X(cuStreamWaitEvent, CUresult, CUDA_ERROR_UNKNOWN,                           \
    (CUstream s, CUevent e, unsigned int flags), (s, e, flags))                \
  X(cuModuleLoadData, CUresult, CUDA_ERROR_UNKNOWN, (CUmodule *m, const void *img), (m, img)) \
  X(cuModuleUnload, CUresult, CUDA_ERROR_UNKNOWN, (CUmodule m), (m))          \
  X(cuModuleGetFunction, CUresult, CUDA_ERROR_UNKNOWN,                         \
    (CUfunction *f, CUmodule m, const char *name), (f, m, name))               \
  X(cuLaunchKernel, CUresult, CUDA_ERROR_UNKNOWN,                              \
    (CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,         \
     unsigned by, unsigned bz, unsigned shmem, CUstream s, void **params,      \
     void **extra),                                                            \
    (f, gx, gy, gz, bx, by, bz, shmem, s, params, extra))

/* Failure values are ones the real library documents for the call, so that
 * a test that injects them sees what a user could: cuBLAS's guide gives
 * NOT_INITIALIZED for the handle getters, cublasCreate and cublasDestroy,
 * EXECUTION_FAILED ("failed to launch on the GPU") for the GEMMs;
 * cublasLt.h gives INVALID_VALUE for the attribute getters and setters,
 * ALLOC_FAILED for descriptor creation, EXECUTION_FAILED for
 * cublasLtMatmul. The descriptor destroys document no failure: they get
 * INTERNAL_ERROR, cuBLAS's generic one. cublasLtGetVersion has none
 * either: its fault value is 0, a version no library has.
 *
 * cuBLAS functions the shim calls besides the hooked ones, from the same
 * libcublas object as the real hooked functions. */
#define GS_SYS_CUBLAS(X)                                                       \
  X(cublasGetStream_v2, cublasStatus_t, CUBLAS_STATUS_NOT_INITIALIZED,          \
    (cublasHandle_t h, cudaStream_t *s), (h, s))                               \
  X(cublasGetPointerMode_v2, cublasStatus_t, CUBLAS_STATUS_NOT_INITIALIZED,     \
    (cublasHandle_t h, cublasPointerMode_t *m), (h, m))                        \
  X(cublasGetMathMode, cublasStatus_t, CUBLAS_STATUS_NOT_INITIALIZED,           \
    (cublasHandle_t h, cublasMath_t *m), (h, m))

/* cuBLASLt functions the shim calls, from the real libcublasLt object. */
#define GS_SYS_CUBLASLT(X)                                                     \
  X(cublasLtGetVersion, size_t, 0, (void), ())                                 \
  X(cublasLtMatmulDescGetAttribute, cublasStatus_t, CUBLAS_STATUS_INVALID_VALUE, \
    (cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t a, void *buf,      \
     size_t n, size_t *written), (d, a, buf, n, written))                      \
  X(cublasLtMatrixLayoutGetAttribute, cublasStatus_t, CUBLAS_STATUS_INVALID_VALUE, \
    (cublasLtMatrixLayout_t l, cublasLtMatrixLayoutAttribute_t a, void *buf,   \
     size_t n, size_t *written), (l, a, buf, n, written))                      \
  X(cublasLtCreate, cublasStatus_t, CUBLAS_STATUS_NOT_INITIALIZED,             \
    (cublasLtHandle_t *h), (h))                                                \
  X(cublasLtMatmulDescCreate, cublasStatus_t, CUBLAS_STATUS_ALLOC_FAILED,      \
    (cublasLtMatmulDesc_t *d, cublasComputeType_t c, cudaDataType_t s), (d, c, s)) \
  X(cublasLtMatmulDescDestroy, cublasStatus_t, CUBLAS_STATUS_INTERNAL_ERROR,   \
    (cublasLtMatmulDesc_t d), (d))                                             \
  X(cublasLtMatmulDescSetAttribute, cublasStatus_t, CUBLAS_STATUS_INVALID_VALUE, \
    (cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t a, const void *buf, \
     size_t n), (d, a, buf, n))                                                \
  X(cublasLtMatrixLayoutCreate, cublasStatus_t, CUBLAS_STATUS_ALLOC_FAILED,    \
    (cublasLtMatrixLayout_t *l, cudaDataType t, uint64_t r, uint64_t c, int64_t ld), \
    (l, t, r, c, ld))                                                          \
  X(cublasLtMatrixLayoutDestroy, cublasStatus_t, CUBLAS_STATUS_INTERNAL_ERROR, \
    (cublasLtMatrixLayout_t l), (l))                                           \
  X(cublasLtMatrixLayoutSetAttribute, cublasStatus_t, CUBLAS_STATUS_INVALID_VALUE, \
    (cublasLtMatrixLayout_t l, cublasLtMatrixLayoutAttribute_t a, const void *buf, \
     size_t n), (l, a, buf, n))                                                \
  X(cublasLtMatmulPreferenceCreate, cublasStatus_t, CUBLAS_STATUS_ALLOC_FAILED, \
    (cublasLtMatmulPreference_t *p), (p))                                      \
  X(cublasLtMatmulPreferenceDestroy, cublasStatus_t, CUBLAS_STATUS_INTERNAL_ERROR, \
    (cublasLtMatmulPreference_t p), (p))                                       \
  X(cublasLtMatmulPreferenceSetAttribute, cublasStatus_t, CUBLAS_STATUS_INTERNAL_ERROR, \
    (cublasLtMatmulPreference_t p, cublasLtMatmulPreferenceAttributes_t a,     \
     const void *buf, size_t n), (p, a, buf, n))                               \
  X(cublasLtMatmulAlgoGetHeuristic, cublasStatus_t, CUBLAS_STATUS_NOT_SUPPORTED, \
    (cublasLtHandle_t h, cublasLtMatmulDesc_t d, cublasLtMatrixLayout_t a,     \
     cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t dd, \
     cublasLtMatmulPreference_t p, int req, cublasLtMatmulHeuristicResult_t *res, \
     int *n), (h, d, a, b, c, dd, p, req, res, n))

/* The hooked functions themselves: the real cuBLAS definitions. Handle
 * creation and destruction are hooked only to know which handles are dead. */
#define GS_SYS_HOOKED(X)                                                       \
  X(cublasCreate_v2, cublasStatus_t, CUBLAS_STATUS_NOT_INITIALIZED,           \
    (cublasHandle_t *h), (h))                                                  \
  X(cublasDestroy_v2, cublasStatus_t, CUBLAS_STATUS_NOT_INITIALIZED,           \
    (cublasHandle_t h), (h))                                                   \
  X(cublasGemmEx, cublasStatus_t, CUBLAS_STATUS_EXECUTION_FAILED,                \
    (cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,      \
     int n, int k, const void *alpha, const void *A, cudaDataType at, int lda, \
     const void *B, cudaDataType bt, int ldb, const void *beta, void *C,       \
     cudaDataType ct, int ldc, cublasComputeType_t comp, cublasGemmAlgo_t algo), \
    (h, ta, tb, m, n, k, alpha, A, at, lda, B, bt, ldb, beta, C, ct, ldc, comp, algo)) \
  X(cublasGemmEx_64, cublasStatus_t, CUBLAS_STATUS_EXECUTION_FAILED,             \
    (cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int64_t m,  \
     int64_t n, int64_t k, const void *alpha, const void *A, cudaDataType at,  \
     int64_t lda, const void *B, cudaDataType bt, int64_t ldb,                 \
     const void *beta, void *C, cudaDataType ct, int64_t ldc,                  \
     cublasComputeType_t comp, cublasGemmAlgo_t algo),                         \
    (h, ta, tb, m, n, k, alpha, A, at, lda, B, bt, ldb, beta, C, ct, ldc, comp, algo)) \
  X(cublasGemmStridedBatchedEx, cublasStatus_t, CUBLAS_STATUS_EXECUTION_FAILED,  \
    (cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,      \
     int n, int k, const void *alpha, const void *A, cudaDataType at, int lda, \
     long long sa, const void *B, cudaDataType bt, int ldb, long long sb,      \
     const void *beta, void *C, cudaDataType ct, int ldc, long long sc,        \
     int batch, cublasComputeType_t comp, cublasGemmAlgo_t algo),              \
    (h, ta, tb, m, n, k, alpha, A, at, lda, sa, B, bt, ldb, sb, beta, C, ct,   \
     ldc, sc, batch, comp, algo))                                              \
  X(cublasGemmStridedBatchedEx_64, cublasStatus_t, CUBLAS_STATUS_EXECUTION_FAILED, \
    (cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int64_t m,  \
     int64_t n, int64_t k, const void *alpha, const void *A, cudaDataType at,  \
     int64_t lda, long long sa, const void *B, cudaDataType bt, int64_t ldb,   \
     long long sb, const void *beta, void *C, cudaDataType ct, int64_t ldc,    \
     long long sc, int64_t batch, cublasComputeType_t comp, cublasGemmAlgo_t algo), \
    (h, ta, tb, m, n, k, alpha, A, at, lda, sa, B, bt, ldb, sb, beta, C, ct,   \
     ldc, sc, batch, comp, algo))                                              \
  X(cublasGemmBatchedEx, cublasStatus_t, CUBLAS_STATUS_EXECUTION_FAILED,         \
    (cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,      \
     int n, int k, const void *alpha, const void *const A[], cudaDataType at,  \
     int lda, const void *const B[], cudaDataType bt, int ldb,                 \
     const void *beta, void *const C[], cudaDataType ct, int ldc, int batch,   \
     cublasComputeType_t comp, cublasGemmAlgo_t algo),                         \
    (h, ta, tb, m, n, k, alpha, A, at, lda, B, bt, ldb, beta, C, ct, ldc,      \
     batch, comp, algo))                                                       \
  X(cublasGemmBatchedEx_64, cublasStatus_t, CUBLAS_STATUS_EXECUTION_FAILED,      \
    (cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int64_t m,  \
     int64_t n, int64_t k, const void *alpha, const void *const A[],           \
     cudaDataType at, int64_t lda, const void *const B[], cudaDataType bt,     \
     int64_t ldb, const void *beta, void *const C[], cudaDataType ct,          \
     int64_t ldc, int64_t batch, cublasComputeType_t comp, cublasGemmAlgo_t algo), \
    (h, ta, tb, m, n, k, alpha, A, at, lda, B, bt, ldb, beta, C, ct, ldc,      \
     batch, comp, algo))                                                       \
  X(cublasLtMatmul, cublasStatus_t, CUBLAS_STATUS_EXECUTION_FAILED,              \
    (cublasLtHandle_t h, cublasLtMatmulDesc_t desc, const void *alpha,         \
     const void *A, cublasLtMatrixLayout_t ad, const void *B,                  \
     cublasLtMatrixLayout_t bd, const void *beta, const void *C,               \
     cublasLtMatrixLayout_t cd, void *D, cublasLtMatrixLayout_t dd,            \
     const cublasLtMatmulAlgo_t *algo, void *ws, size_t wss, cudaStream_t s),  \
    (h, desc, alpha, A, ad, B, bd, beta, C, cd, D, dd, algo, ws, wss, s))

#define GS_SYS_ALL(X) GS_SYS_LIBC(X) GS_SYS_DRIVER(X) GS_SYS_CUBLAS(X) GS_SYS_CUBLASLT(X) GS_SYS_HOOKED(X)

/* One id per entry. */
typedef enum gs_sys_id {
#define GS_SYS_ID(name, ret, fail, params, args) GS_SYS_##name,
  GS_SYS_ALL(GS_SYS_ID)
#undef GS_SYS_ID
  GS_SYS_COUNT
} gs_sys_id;

/* One pointer per entry; NULL until resolved (driver/cuBLAS) or when absent. */
typedef struct gs_sys_table {
#define GS_SYS_PTR(name, ret, fail, params, args) ret(*name) params;
  GS_SYS_ALL(GS_SYS_PTR)
#undef GS_SYS_PTR
} gs_sys_table;

extern gs_sys_table gs_sys;
extern const char *const gs_sys_names[GS_SYS_COUNT];
extern volatile int gs_fault_armed; /* nonzero while any fault is armed */

/* Arm a fault: the nth call (1 = the next one) of entry `id` fails with the
 * entry's failure value (errno = EIO for libc entries); with persistent, that
 * call and every later one. n = 0 disarms the entry. */
void gs_fault_arm(gs_sys_id id, unsigned n, int persistent);
void gs_fault_clear(void);
int gs_fault_hit(gs_sys_id id); /* 1 when this call must fail */
/* Calls of entry id made while any fault was armed, and how many failed. */
void gs_fault_counts(gs_sys_id id, unsigned long long *calls, unsigned long long *failed);
/* "fault_spec.c": parse GEMMSHIM_FAULT ("name:N[+],name:N...") and arm
 * it; 0 ok, -1 with err set and nothing armed. */
int gs_fault_parse(const char *spec, char *err, size_t errlen);
/* GEMMSHIM_FAULT=route_output:N[+]: 1 when this compared call's route
 * output is to be corrupted (fault_spec.c). */
int gs_fault_corrupt_hit(void);
int gs_sys_lookup(const char *name, size_t len); /* id or -1 */

/* Call entry `name` through the table, honouring armed faults. The caller
 * checks the pointer first for driver/cuBLAS entries (they may be absent). */
#define GS_CALL(name, ...)                                                     \
  ((__builtin_expect(gs_fault_armed, 0) && gs_fault_hit(GS_SYS_##name))        \
       ? gs_sys_fail_##name()                                                  \
       : gs_sys.name(__VA_ARGS__))

/* The failure value of each entry, for GS_CALL. */
#define GS_SYS_FAILFN(name, ret, fail, params, args)                          \
  static inline ret gs_sys_fail_##name(void) { return (ret)(fail); }
GS_SYS_ALL(GS_SYS_FAILFN)
#undef GS_SYS_FAILFN

#endif
