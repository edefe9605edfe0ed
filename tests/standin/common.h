/* common.h: what the three stand-in libraries (libcuda, libcublas,
 * libcublasLt) share. Each library compiles its own copy of common.c; the
 * version scripts keep all of it local, so nothing here is ever exported.
 *
 *   - per-function call counters, appended to STANDIN_COUNTS at exit;
 *   - strict parsing of the STANDIN_* environment (a bad value is reported,
 *     never silently replaced);
 *   - diagnostics: one "standin: ..." line on stderr, written with one write;
 *   - the work trace (STANDIN_TRACE).
 */
#ifndef STANDIN_COMMON_H
#define STANDIN_COMMON_H

#include <stddef.h>
#include <stdint.h>

/* One library's call counters: names[i] was called counts[i] times. */
typedef struct standin_counters {
  const char *const *names;
  unsigned long long *counts;
  size_t n;
} standin_counters;

/* Counting is a relaxed atomic add: many threads call GEMMs at once and the
 * totals are only read at exit. */
#define STANDIN_BUMP(table, id) __atomic_fetch_add(&(table)[id], 1ull, __ATOMIC_RELAXED)

/* Expand STANDIN_COUNTS ("%p" = pid, "%%" = %) into out. Returns 1 when set
 * and it fit, else 0. */
int standin_counts_path(char *out, size_t len);
/* Empty the counts file (libcuda does this once, when it is loaded). */
void standin_counts_truncate(void);
/* Append "name count" lines for every entry of c, then `extra` (may be
 * NULL), with one write in O_APPEND mode so libraries never interleave. */
void standin_counts_append(const standin_counters *c, const char *extra);

/* Environment. Each returns 1 (set and valid, *out written), 0 (unset or
 * empty) or -1 (set but invalid: a "standin:" line says which variable,
 * what was expected and what is used instead). */
int standin_env_flag(const char *name, int *out);           /* 0 or 1 */
int standin_env_size(const char *name, uint64_t *out);      /* bytes, k/m/g suffix */

/* "<tid> <message>\n" appended, one write in O_APPEND mode, to the file
 * the variable `var` names (unset: nothing). STANDIN_TRACE: a line for each
 * unit of device work (a kernel launch, a GEMM), so a test sees where work
 * ran relative to what others append to the same file (the NVTX tool of
 * tests/integration/nvtx_inject.c, which links this file too). */
void standin_append_line(const char *var, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
#define standin_trace(...) standin_append_line("STANDIN_TRACE", __VA_ARGS__)

/* "standin: <message>\n" on stderr, one write. */
void standin_msg(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* The cuBLAS/cuBLASLt version this stand-in answers as
 * (STANDIN_CUBLASLT_VERSION, else the build's: cublas_status.h). */
size_t standin_lt_version(void);
/* libcuda (driver_stream.c): a stand-in GEMM ran; STANDIN_GEMM_NS moves
 * the GPU clock on by its time (fp8 A and B: half). */
void cuStandinGemmRan(int fp8);

#endif
