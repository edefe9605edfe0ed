/* gpu_common.c: see gpu_common.h. */
#define _GNU_SOURCE
#include "gpu_common.h"

#include <dlfcn.h>
#include <link.h>
#include <stdlib.h>
#include <string.h>

gpu_driver drv;

void gpu_die_cu(const char *what, CUresult r) {
  const char *name = NULL;
  if (drv.cuGetErrorName) drv.cuGetErrorName(r, &name);
  fprintf(stderr, "gpu: %s failed: CUresult %d (%s)\n", what, (int)r, name ? name : "?");
  exit(GPU_EXIT_SETUP);
}

static void driver_load(void) {
  void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    fprintf(stderr, "gpu: libcuda.so.1 could not be loaded (%s): no NVIDIA driver here\n", dlerror());
    exit(GPU_EXIT_SETUP);
  }
#define GPU_LOAD(name)                                                         \
  drv.name = (__typeof__(drv.name))dlsym(h, #name);                            \
  if (!drv.name) {                                                             \
    fprintf(stderr, "gpu: libcuda.so.1 lacks %s\n", #name);                   \
    exit(GPU_EXIT_SETUP);                                                      \
  }
  GPU_DRIVER_FNS(GPU_LOAD)
#undef GPU_LOAD
#define GPU_LOAD_OPTIONAL(name) drv.name = (__typeof__(drv.name))dlsym(h, #name);
  GPU_DRIVER_OPTIONAL_FNS(GPU_LOAD_OPTIONAL)
#undef GPU_LOAD_OPTIONAL
}

void gpu_open(gpu_device *d) {
  memset(d, 0, sizeof *d);
  driver_load();
  CU_CHECK(drv.cuInit(0));
  CU_CHECK(drv.cuDriverGetVersion(&d->driver_version));
  CU_CHECK(drv.cuDeviceGet(&d->dev, 0));
  CU_CHECK(drv.cuDeviceGetName(d->name, (int)sizeof d->name, d->dev));
  CU_CHECK(drv.cuDeviceGetAttribute(&d->cc_major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, d->dev));
  CU_CHECK(drv.cuDeviceGetAttribute(&d->cc_minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, d->dev));
  CU_CHECK(drv.cuDeviceGetAttribute(&d->sm_count, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, d->dev));
  CU_CHECK(drv.cuDeviceTotalMem_v2(&d->total_mem, d->dev));
  /* The primary context is the one PyTorch and the CUDA runtime use. */
  CU_CHECK(drv.cuDevicePrimaryCtxRetain(&d->ctx, d->dev));
  CU_CHECK(drv.cuCtxSetCurrent(d->ctx));
  CU_CHECK(drv.cuStreamCreate(&d->stream, CU_STREAM_NON_BLOCKING));
}

void gpu_close(gpu_device *d) {
  CU_CHECK(drv.cuStreamSynchronize(d->stream));
  CU_CHECK(drv.cuStreamDestroy_v2(d->stream));
  CU_CHECK(drv.cuDevicePrimaryCtxRelease_v2(d->dev));
}

typedef struct lib_query {
  const char *prefix;
  const char *path;
} lib_query;

static int find_lib(struct dl_phdr_info *info, size_t size, void *arg) {
  lib_query *q = arg;
  const char *name = info->dlpi_name;
  if (!name || !*name) return 0;
  const char *base = strrchr(name, '/');
  base = base ? base + 1 : name;
  if (strncmp(base, q->prefix, strlen(q->prefix)) != 0) return 0;
  q->path = name;
  return 1;
}

const char *gpu_loaded_path(const char *prefix) {
  lib_query q = {prefix, NULL};
  dl_iterate_phdr(find_lib, &q);
  return q.path;
}

void gpu_json_string(FILE *out, const char *s) {
  if (!s) {
    fputs("null", out);
    return;
  }
  fputc('"', out);
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    if (*p == '"' || *p == '\\') fprintf(out, "\\%c", *p);
    else if (*p < 0x20) fprintf(out, "\\u%04x", *p);
    else fputc(*p, out);
  }
  fputc('"', out);
}

void gpu_describe(const gpu_device *d, const char *program, FILE *out, FILE *json) {
  const char *cuda = gpu_loaded_path("libcuda.so");
  const char *blas = gpu_loaded_path("libcublas.so");
  const char *lt = gpu_loaded_path("libcublasLt.so");
  const char *shim = gpu_loaded_path("libgemmshim.so");
  fprintf(out, "%s: device 0 \"%s\" sm_%d%d, %d SMs, %.1f GiB; driver %d.%d; libcuda %s; cuBLAS %s; cuBLASLt %s; shim %s\n",
          program, d->name, d->cc_major, d->cc_minor, d->sm_count, (double)d->total_mem / (1u << 30),
          d->driver_version / 1000, d->driver_version % 1000 / 10, cuda ? cuda : "(not found)",
          blas ? blas : "(not loaded)", lt ? lt : "(not loaded)", shim ? shim : "not preloaded");
  if (!json) return;
  fprintf(json, "{\"kind\":\"device\",\"program\":");
  gpu_json_string(json, program);
  fprintf(json, ",\"name\":");
  gpu_json_string(json, d->name);
  fprintf(json, ",\"sm\":\"%d.%d\",\"sm_count\":%d,\"total_mem\":%zu,\"driver_version\":%d,\"libcuda\":",
          d->cc_major, d->cc_minor, d->sm_count, d->total_mem, d->driver_version);
  gpu_json_string(json, cuda);
  fprintf(json, ",\"libcublas\":");
  gpu_json_string(json, blas);
  fprintf(json, ",\"libcublasLt\":");
  gpu_json_string(json, lt);
  fprintf(json, ",\"shim\":");
  gpu_json_string(json, shim);
  fprintf(json, "}\n");
  fflush(json);
}

/* ---- timing ---------------------------------------------------------------- */
double gpu_time_ms(const gpu_device *d, gpu_work_fn fn, void *arg, int inner, int *status) {
  CUevent e0, e1;
  CU_CHECK(drv.cuEventCreate(&e0, CU_EVENT_DEFAULT));
  CU_CHECK(drv.cuEventCreate(&e1, CU_EVENT_DEFAULT));
  *status = 0;
  CU_CHECK(drv.cuEventRecord(e0, d->stream));
  for (int i = 0; i < inner && *status == 0; i++) *status = fn(arg);
  CU_CHECK(drv.cuEventRecord(e1, d->stream));
  CU_CHECK(drv.cuEventSynchronize(e1));
  float ms = 0.0f;
  CU_CHECK(drv.cuEventElapsedTime_v2(&ms, e0, e1));
  CU_CHECK(drv.cuEventDestroy_v2(e0));
  CU_CHECK(drv.cuEventDestroy_v2(e1));
  return *status ? -1.0 : (double)ms / inner;
}

int gpu_inner_for(double unit_ms, double target_ms) {
  if (!(unit_ms > 0.0)) return 1;
  double n = target_ms / unit_ms;
  if (n < 1.0) return 1;
  if (n > 1000.0) return 1000;
  return (int)n;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

double gpu_median(double *v, int n) {
  if (n <= 0) return -1.0;
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* ---- numbers ----------------------------------------------------------------- */
static uint64_t rng_next(uint64_t *s) {
  *s ^= *s >> 12;
  *s ^= *s << 25;
  *s ^= *s >> 27;
  return *s * 2685821657736338717ull;
}

uint64_t gpu_rng_seed(uint64_t seed, uint64_t stream) {
  uint64_t s = seed * 0x9e3779b97f4a7c15ull + stream * 0xbf58476d1ce4e5b9ull + 1;
  for (int i = 0; i < 4; i++) rng_next(&s);
  return s ? s : 1;
}

double gpu_rng_uniform(uint64_t *s) {
  return (double)(rng_next(s) >> 11) * (2.0 / 9007199254740992.0) - 1.0;
}

float gpu_bf16_to_f32(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

uint16_t gpu_f32_to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

void gpu_fill_bf16(uint16_t *h, float *f32, size_t n, uint64_t *rng, float scale) {
  for (size_t i = 0; i < n; i++) {
    h[i] = gpu_f32_to_bf16((float)gpu_rng_uniform(rng) * scale);
    if (f32) f32[i] = gpu_bf16_to_f32(h[i]);
  }
}

CUdeviceptr gpu_alloc(size_t bytes) {
  CUdeviceptr p = 0;
  CUresult r = drv.cuMemAlloc_v2(&p, bytes ? bytes : 1);
  if (r != CUDA_SUCCESS) {
    fprintf(stderr, "gpu: cuMemAlloc of %zu bytes failed: CUresult %d\n", bytes, (int)r);
    exit(GPU_EXIT_SETUP);
  }
  return p;
}
