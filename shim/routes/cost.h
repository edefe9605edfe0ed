/* cost.h: whether a route pays on this GPU, estimated (docs/cost-model.md).
 * Native time is the GEMM at the architecture's native rate for its input
 * type; route time is the GEMM at the route's rate, plus the bytes the
 * shim's own kernels move at DRAM bandwidth, plus a gap per launch. */
#ifndef GS_COST_H
#define GS_COST_H

#include <stddef.h>

typedef enum gs_cost_route { GS_COST_FFMA = 0, GS_COST_FP16, GS_COST_FP8 } gs_cost_route;

/* What the estimate reads of a device: cuDeviceGetAttribute's figures
 * (0 where a query failed: the reference part's figure is used). */
typedef struct gs_cost_device {
  int sm;            /* major*10+minor */
  int sms;           /* CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT */
  int clock_khz;     /* CU_DEVICE_ATTRIBUTE_CLOCK_RATE */
  int mem_clock_khz; /* CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE */
  int bus_width;     /* CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH, bits */
} gs_cost_device;

/* The work a routed call adds besides its GEMM. */
typedef struct gs_cost_work {
  double flops;      /* 2 m n k batch */
  int in_type;       /* cudaDataType_t of A and B: picks the native rate */
  double pass_bytes; /* read and written by the shim's kernels */
  int launches;      /* the shim's kernel launches */
  double stream_share; /* of DRAM bandwidth the kernels reach; 0: GS_COST_STREAM_SHARE */
} gs_cost_work;

typedef struct gs_cost {
  const char *part;    /* the reference part of the rates */
  double scale;        /* device SMs x clock over the reference part's */
  double native_tflops, route_tflops, bw_gbs;
  double native_us, gemm_us, pass_us, launch_us, route_us;
  double speedup;      /* native_us / route_us */
} gs_cost;

/* Per kernel launch the route adds (an assumption, docs/cost-model.md). */
#define GS_COST_LAUNCH_US 5.0
/* Share of DRAM bandwidth the streaming kernels reach (an assumption). */
#define GS_COST_STREAM_SHARE 0.8
/* The fp8 quantize kernels' share, measured: on an H200 (2026-12-04,
 * docs/gpu-results.md) the current recipe's two passes moved 671 MB in
 * 413 us, 1.62 TB/s, 0.34 of the datasheet's 4.8 TB/s. Kept until a GPU
 * measures the kernels made since. */
#define GS_COST_FP8_STREAM_SHARE 0.34

/* The estimate; 0, or -1 when no rate figures cover d->sm or the route
 * (*e untouched then). Pure: the tests and the doc table call it too. */
int cost_estimate(const gs_cost_device *d, gs_cost_route r, const gs_cost_work *w, gs_cost *e);

/* The gate for a call on device `device` (ordinal) of capability sm: NULL
 * when the route pays or GEMMSHIM_GATE=0 (the device still queried), else
 * the reason, written into why (GS_COST_WHY bytes: the caller's, as no
 * thread-local storage is used). Device figures are queried once per
 * device through gs_sys and kept. */
#define GS_COST_WHY 320
const char *cost_gate(int device, int sm, gs_cost_route r, const gs_cost_work *w, char *why);

/* The SM count of device `device` (ordinal), from the same figures as the
 * gate (queried once per device); 0 where the driver could not say. */
int cost_device_sms(int device, int sm);

/* The routes' admission checks: the bytes their kernels move (docs/cost-model.md)
 * from the elements of their operands, all members counted. */
struct gs_call;
/* What the ffma route does with a bf16/fp16 C: nothing (beta 0, or fp32
 * C), read it in the output kernel (2 bytes an element), or widen it for a
 * cuBLASLt relu/gelu epilogue (read 2, write 4). */
enum { GS_COST_FFMA_C_NONE, GS_COST_FFMA_C_READ, GS_COST_FFMA_C_WIDENED };
const char *cost_gate_ffma(const struct gs_call *c, double a_elems, double b_elems, int own_out, int c_pass,
                           char *why);
const char *cost_gate_fp16(const struct gs_call *c, double a_elems, double b_elems, char *why);
/* The work each gate above prices, from the GEMM's flops, A's type, the
 * elements of A and B and of the output (mn), all members counted: what
 * the gates and the docs' table (tests/unit/test_cost.c) both use. */
gs_cost_work cost_work_ffma(double flops, int a_type, double ab_elems, double mn, int own_out, int c_pass);
gs_cost_work cost_work_fp16(double flops, int a_type, double ab_elems, double mn, int d_type);
/* recipe: GS_COST_FP8_CURRENT, _ONE_PASS (delayed), _BLOCK (block, mxfp8) */
enum { GS_COST_FP8_CURRENT, GS_COST_FP8_ONE_PASS, GS_COST_FP8_BLOCK };
/* out_bytes, out_launches: what the call adds around the GEMM (an unaligned
 * C/D through a transient output: C widened in, D' cast out). */
const char *cost_gate_fp8(const struct gs_call *c, double a_elems, double b_elems, int recipe, double out_bytes,
                          int out_launches, char *why);
gs_cost_work cost_work_fp8(double flops, int a_type, double ab_elems, int recipe, double out_bytes, int out_launches);

/* Whether the gates (this estimate and the measured one) judge call c for
 * route (a gs_route): not the fp8 route below sm_89, nor with an own fp8
 * kernel named (GEMMSHIM_FP8_BACKEND=own, own-mma): there the route is a
 * check of fp8 numerics, slower than native by design (docs/cost-model.md). */
int cost_gate_applies(const struct gs_call *c, int route);

/* The reason text for an estimate that does not pay, into buf. */
void cost_describe(const gs_cost *e, gs_cost_route r, const gs_cost_work *w, char *buf, size_t len);

#endif
