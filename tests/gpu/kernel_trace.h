/* kernel_trace.h: which kernels ran and for how long, from CUPTI's activity
 * records. The shim launches its cast and quantize kernels itself, with
 * arguments a bench cannot see; their start and end timestamps are the
 * honest way to measure them as the routes run them.
 *
 * CUPTI is dlopen()ed (libcupti.so.13, then libcupti.so): a driver without
 * it (the CPU stand-in) makes trace_init return why, and the bench reports
 * the trace as unavailable instead of failing. Tracing is on only between
 * trace_begin and trace_end, never while the cuEvent timings run. */
#ifndef GEMMSHIM_KERNEL_TRACE_H
#define GEMMSHIM_KERNEL_TRACE_H

#include <stddef.h>
#include <stdint.h>

typedef struct trace_kernel {
  char name[200];     /* as CUPTI reports it (mangled for C++ kernels) */
  uint64_t start_ns, end_ns;
  int grid[3], block[3];
} trace_kernel;

/* NULL when tracing is available, else why not (static text). */
const char *trace_init(void);

/* Start recording kernels. 0 on success; after a failure, trace_error()
 * says why and every later call fails the same way. */
int trace_begin(void);

/* Why tracing is unavailable (static text), or NULL while it works. */
const char *trace_error(void);

/* Stop, flush every record of work already synchronised, and hand back the
 * kernels seen since trace_begin in start order (*out is malloc'ed; the
 * caller frees it). 0 on success. */
int trace_end(trace_kernel **out, size_t *n);

#endif
