/* cost.c: the routes' cost-model gate (docs/cost-model.md). One table of
 * rates per architecture, each figure from a named measurement or
 * datasheet, scaled to the device by SMs x clock; DRAM bandwidth from the
 * device's memory clock and bus width. */
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "../shim.h"
#include "../base/sys.h"
#include "cost.h"
#include "fp8_recipe.h"

/* Rates in TFLOP/s of a reference part, with that part's SMs, boost clock
 * and DRAM bandwidth. Sources (docs/cost-model.md gives them in full):
 *  GTX 1080 Ti, V100 SXM2, T4: torch square-matmul rates measured by users,
 *   zzc0721/torch-performance-test-data issues #60, #140 and database.md;
 *  A100 SXM4: NVIDIA A100 datasheet dense peaks (no measured rate used);
 *  L40S: NVIDIA L40S datasheet dense peaks (fp8 733, bf16/fp16 362.05 with
 *   fp32 accumulation, fp32 91.6; no measured rate used);
 *  H100 SXM5: bf16 ~797 TFLOP/s measured (same repository, #79), fp32 the
 *   datasheet peak, fp8 an assumption (2x bf16, as the datasheet's peaks);
 *  B200 (HGX): NVIDIA HGX B200 datasheet, dense peaks (half its sparse
 *   figures: fp8 9 -> 4.5 PFLOP/s, bf16/fp16 4.5 -> 2.25), fp32 75, 7.7
 *   TB/s; 148 SMs at 1965 MHz an assumption (no datasheet gives them; only
 *   their ratio to the device's matters).
 * SMs, boost clocks and bandwidth: NVIDIA's product specifications. */
typedef struct cost_rates {
  int sm;
  const char *part;
  double fp32, fp16, bf16, fp8; /* fp16: tensor cores from sm_70; 0: none */
  int sms, clock_mhz;
  double bw_gbs;
} cost_rates;

static const cost_rates rates[] = {
    {61, "GTX 1080 Ti", 10.09, 9.62, 5.38, 0, 28, 1582, 484},
    {70, "V100 SXM2", 14.51, 97.36, 10.65, 0, 80, 1530, 900},
    {75, "T4", 4.3, 42.0, 2.4, 0, 40, 1590, 320},
    /* bf16 on tensor cores from sm_80, at the fp16 rate. */
    {80, "A100 SXM4", 19.5, 312, 312, 0, 108, 1410, 1555},
    {89, "L40S", 91.6, 362.05, 362.05, 733, 142, 2520, 864},
    {90, "H100 SXM5", 67, 790, 790, 1580, 132, 1980, 3350},
    {100, "B200", 75, 2250, 2250, 4500, 148, 1965, 7700},
};
#define N_RATES (sizeof rates / sizeof rates[0])

/* The row of the same major with the newest minor not above sm's (else the
 * oldest of that major), else the newest row of an older major. */
static const cost_rates *rates_for(int sm) {
  const cost_rates *same = NULL, *older = NULL;
  for (size_t i = 0; i < N_RATES; i++) {
    const cost_rates *r = &rates[i];
    if (r->sm / 10 == sm / 10) {
      if (!same || (r->sm <= sm && (same->sm > sm || r->sm > same->sm))) same = r;
    } else if (r->sm < sm) {
      older = r;
    }
  }
  return same ? same : older;
}

static double route_rate(const cost_rates *t, gs_cost_route r) {
  switch (r) {
    case GS_COST_FFMA: return t->fp32;
    case GS_COST_FP16: return t->fp16;
    case GS_COST_FP8: return t->fp8;
  }
  return 0;
}

static double native_rate(const cost_rates *t, int in_type) {
  if (in_type == CUDA_R_16BF) return t->bf16;
  if (in_type == CUDA_R_16F) return t->fp16;
  return t->fp32;
}

int cost_estimate(const gs_cost_device *d, gs_cost_route r, const gs_cost_work *w, gs_cost *e) {
  const cost_rates *t = rates_for(d->sm);
  if (!t || route_rate(t, r) <= 0) return -1;
  gs_cost x;
  memset(&x, 0, sizeof x);
  x.part = t->part;
  x.scale = d->sms > 0 && d->clock_khz > 0
                ? ((double)d->sms * d->clock_khz) / ((double)t->sms * t->clock_mhz * 1000.0)
                : 1.0;
  x.native_tflops = native_rate(t, w->in_type) * x.scale;
  x.route_tflops = route_rate(t, r) * x.scale;
  /* Peak bandwidth as NVIDIA's CUDA C++ blog computes it from the device
   * properties: memory clock x 2 (double data rate) x bus width / 8. */
  x.bw_gbs = d->mem_clock_khz > 0 && d->bus_width > 0
                 ? 2.0 * d->mem_clock_khz * 1e3 * (d->bus_width / 8.0) / 1e9
                 : t->bw_gbs;
  x.native_us = w->flops / (x.native_tflops * 1e12) * 1e6;
  x.gemm_us = w->flops / (x.route_tflops * 1e12) * 1e6;
  x.pass_us = w->pass_bytes / (x.bw_gbs * (w->stream_share > 0 ? w->stream_share : GS_COST_STREAM_SHARE) * 1e9) * 1e6;
  x.launch_us = w->launches * GS_COST_LAUNCH_US;
  x.route_us = x.gemm_us + x.pass_us + x.launch_us;
  x.speedup = x.native_us / x.route_us;
  *e = x;
  return 0;
}

static const char *const route_names[] = {"ffma", "fp16", "fp8"};

/* Microseconds below a millisecond, milliseconds above. */
static void fmt_time(double us, char *buf, size_t len) {
  if (us >= 1000) snprintf(buf, len, "%.2f ms", us / 1000);
  else if (us >= 1) snprintf(buf, len, "%.1f us", us);
  else snprintf(buf, len, "%.3f us", us);
}

void cost_describe(const gs_cost *e, gs_cost_route r, const gs_cost_work *w, char *buf, size_t len) {
  char nat[24], rt[24], gemm[24], pass[24], gaps[24];
  fmt_time(e->native_us, nat, sizeof nat);
  fmt_time(e->route_us, rt, sizeof rt);
  fmt_time(e->gemm_us, gemm, sizeof gemm);
  fmt_time(e->pass_us, pass, sizeof pass);
  fmt_time(e->launch_us, gaps, sizeof gaps);
  snprintf(buf, len,
           "estimated %.3gx native here: native %s, route %s (%s GEMM %s + passes %s + %d launches %s; %s rates "
           "x %.3g, %.0f GB/s); GEMMSHIM_GATE=off routes it anyway",
           e->speedup, nat, rt, route_names[r], gemm, pass, w->launches, gaps, e->part, e->scale, e->bw_gbs);
}

/* A device's figures, queried once: 0 for a query that failed (the
 * estimate then takes the reference part's). */
#define COST_DEVICES 64
static struct {
  atomic_int ready; /* 0 none, 1 being filled, 2 filled */
  gs_cost_device d;
} devices[COST_DEVICES];

static int attr(CUdevice_attribute a, int dev) {
  int v = 0;
  if (!gs_sys.cuDeviceGetAttribute || GS_CALL(cuDeviceGetAttribute, &v, a, dev) != CUDA_SUCCESS || v < 0) return 0;
  return v;
}

static gs_cost_device device_figures(int device, int sm) {
  gs_cost_device d = {sm, 0, 0, 0, 0};
  if (device < 0 || device >= COST_DEVICES) return d;
  if (atomic_load_explicit(&devices[device].ready, memory_order_acquire) == 2) {
    d = devices[device].d;
    d.sm = sm;
    return d;
  }
  d.sms = attr(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, device);
  d.clock_khz = attr(CU_DEVICE_ATTRIBUTE_CLOCK_RATE, device);
  d.mem_clock_khz = attr(CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE, device);
  d.bus_width = attr(CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH, device);
  /* Kept only when every query answered: a failed one is asked again. */
  int expected = 0;
  if (d.sms && d.clock_khz && d.mem_clock_khz && d.bus_width &&
      atomic_compare_exchange_strong(&devices[device].ready, &expected, 1)) {
    devices[device].d = d;
    atomic_store_explicit(&devices[device].ready, 2, memory_order_release);
  }
  return d;
}

int cost_device_sms(int device, int sm) { return device_figures(device, sm).sms; }

const char *cost_gate(int device, int sm, gs_cost_route r, const gs_cost_work *w, char *why) {
  /* Asked with the gate off too: the queries are made once per device,
   * and so the fault loop's forced routes cover them. */
  gs_cost_device d = device_figures(device, sm);
  if (!gs_opt.gate) return NULL;
  gs_cost e;
  if (cost_estimate(&d, r, w, &e) != 0) {
    snprintf(why, GS_COST_WHY, "no %s rate figures for sm_%d to estimate what it saves; GEMMSHIM_GATE=off routes it anyway",
             route_names[r], sm);
    return why;
  }
  if (e.speedup > 1.0) return NULL;
  cost_describe(&e, r, w, why, GS_COST_WHY);
  return why;
}

int cost_gate_applies(const gs_call *c, int route) {
  if (route != GS_ROUTE_FP8) return 1;
  return fp8_lt_path(c);
}

static double flops_of(const gs_gemm *g) { return 2.0 * (double)g->m * (double)g->n * (double)g->k * (double)g->batch; }

/* Widen A and B (read 2 bytes, write 4 an element); with a bf16/fp16 D,
 * narrow the fp32 result (read 4, write 2), and when beta may be nonzero
 * read C there too (2), or, for a cuBLASLt relu/gelu epilogue, widen C
 * first (read 2, write 4). One launch in, one out. */
gs_cost_work cost_work_ffma(double flops, int a_type, double ab_elems, double mn, int own_out, int c_pass) {
  double c_bytes = c_pass == GS_COST_FFMA_C_READ ? 2.0 : c_pass == GS_COST_FFMA_C_WIDENED ? 6.0 : 0.0;
  return (gs_cost_work){flops, a_type, 6.0 * ab_elems + (own_out ? 6.0 * mn : 0) + c_bytes * mn, 1 + (own_out ? 1 : 0),
                        0};
}

const char *cost_gate_ffma(const gs_call *c, double a_elems, double b_elems, int own_out, int c_pass, char *why) {
  const gs_gemm *g = &c->g;
  double mn = (double)g->m * (double)g->n * (double)g->batch;
  gs_cost_work w = cost_work_ffma(flops_of(g), g->a_type, a_elems + b_elems, mn, own_out, c_pass);
  return cost_gate(c->device, c->sm, GS_COST_FFMA, &w, why);
}

/* amax reads A and B (2 bytes), the cast reads them again and writes fp16
 * (2 + 2), the output kernel reads the fp32 product (4) and writes D (2 or
 * 4); three launches. C, when read, is not counted (docs/cost-model.md). */
gs_cost_work cost_work_fp16(double flops, int a_type, double ab_elems, double mn, int d_type) {
  return (gs_cost_work){flops, a_type, 6.0 * ab_elems + (d_type == CUDA_R_32F ? 8.0 : 6.0) * mn, 3, 0};
}

const char *cost_gate_fp16(const gs_call *c, double a_elems, double b_elems, char *why) {
  const gs_gemm *g = &c->g;
  double mn = (double)g->m * (double)g->n * (double)g->batch;
  gs_cost_work w = cost_work_fp16(flops_of(g), g->a_type, a_elems + b_elems, mn, g->d_type);
  return cost_gate(c->device, c->sm, GS_COST_FP16, &w, why);
}

/* The quantize pass reads A and B (2 bytes, 4 for fp32) and writes fp8 (1)
 * in one launch; the current recipe adds an amax pass before it that reads
 * them once more (a second launch; its per-block slots need no reset,
 * docs/fp8.md); block and mxfp8 launch
 * once per operand and write a scale per 128 (4 bytes) or 32 (1 byte)
 * elements, taken here at the larger. The kernels at their measured share
 * of bandwidth (GS_COST_FP8_STREAM_SHARE). */
gs_cost_work cost_work_fp8(double flops, int a_type, double ab_elems, int recipe, double out_bytes, int out_launches) {
  double in = a_type == CUDA_R_32F ? 4.0 : 2.0;
  gs_cost_work w = {flops, a_type, (in + 1.0) * ab_elems, 1, GS_COST_FP8_STREAM_SHARE};
  if (recipe == GS_COST_FP8_CURRENT) w.pass_bytes += in * ab_elems, w.launches = 2;
  if (recipe == GS_COST_FP8_BLOCK) w.pass_bytes += ab_elems / 32.0, w.launches = 2;
  w.pass_bytes += out_bytes;
  w.launches += out_launches;
  return w;
}

const char *cost_gate_fp8(const gs_call *c, double a_elems, double b_elems, int recipe, double out_bytes,
                          int out_launches, char *why) {
  const gs_gemm *g = &c->g;
  gs_cost_work w = cost_work_fp8(flops_of(g), g->a_type, a_elems + b_elems, recipe, out_bytes, out_launches);
  return cost_gate(c->device, c->sm, GS_COST_FP8, &w, why);
}
