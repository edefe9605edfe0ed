/* runtime.h: what the CUDA runtime does on behalf of cuBLAS and cuBLASLt,
 * shared by the two stand-in libraries (each has its own copy; nothing is
 * exported).
 *
 * A real cuBLAS initialises the runtime on first use: cuInit, then, when the
 * calling thread has no current context, the primary context of the
 * runtime's current device is retained (once per process, never released)
 * and made current. That is why a program can create a handle and run GEMMs
 * on any thread without touching the driver API. The stand-ins do the same
 * through the stand-in libcuda, and check the pointers they are given the
 * way a GPU would fault on them: memory the driver did not allocate, or an
 * operand running past the end of its allocation, is reported on stderr and
 * the call fails.
 */
#ifndef STANDIN_RUNTIME_H
#define STANDIN_RUNTIME_H

#include <cuda.h>
#include <stddef.h>
#include <stdint.h>

/* cuInit, then make sure a context is current: if none is, the primary
 * context of `device` (device 0 when -1) becomes current. */
CUresult rt_ensure_context(int device);
/* The device of the calling thread's current context. */
CUresult rt_current_device(int *device);
/* The device work on `stream` runs on, and its compute capability. */
CUresult rt_stream_device(CUstream stream, int *device, int *major, int *minor);
/* Compute capability of a device. */
CUresult rt_device_cc(int device, int *major, int *minor);

/* 1 when [p, p + bytes) lies inside one device allocation (bytes == 0:
 * nothing is touched, always 1). */
int rt_is_device_range(const void *p, size_t bytes);
/* 1 when p is inside some device allocation. */
int rt_is_device_pointer(const void *p);
/* Bytes an operand spans: batch members `stride` elements apart, each
 * rows x cols with leading dimension ld, column- (row_major 0) or
 * row-major. 0 when it has no elements, SIZE_MAX when it overflows. */
size_t rt_matrix_span(size_t elem_size, int64_t rows, int64_t cols, int64_t ld, int row_major,
                      int64_t batch_count, int64_t stride);
/* Report ("standin: <fn>: <what> ...") and return 0 unless the operand is
 * device memory; 1 when it is. */
int rt_check_operand(const char *fn, const char *what, const void *p, size_t bytes);

/* What a GPU GEMM reads when it runs rather than when it is enqueued:
 * device-mode alpha/beta (of scalar_type) and the fp8 A/B scales. A NULL
 * pointer keeps the value the problem already holds. */
struct sg_problem;
typedef struct rt_late {
  const void *alpha, *beta;
  int scalar_type; /* cudaDataType_t */
  const float *scale_a, *scale_b;
} rt_late;
/* Run a checked GEMM on `stream` in stream order, as a GPU would: at once,
 * or, while the stream is being captured, as a host node of the graph
 * (cuLaunchHostFunc) that runs at every launch with the late values read
 * then (host-mode scalars are kept as read now, as kernel arguments are).
 * 0, -1 when host memory ran out, -2 when the driver refused the node. */
int rt_gemm_on_stream(const struct sg_problem *p, const rt_late *late, CUstream stream);

#endif
