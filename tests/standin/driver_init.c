/* driver_init.c: the stand-in driver's process-wide state.
 *
 * Test controls (environment, read once when libcuda.so.1 is loaded; see
 * tests/standin/README.md):
 *
 *   STANDIN_CC=M.m[,M.m...]  one device per entry with that compute
 *                            capability (default "8.0"). A bad value prints
 *                            one line and makes cuInit fail with
 *                            CUDA_ERROR_INVALID_VALUE.
 *   STANDIN_NO_POOLS=1       MEMORY_POOLS_SUPPORTED reports 0 and every
 *                            pool call (cuMemAllocAsync, cuMemPoolCreate,
 *                            ...) returns CUDA_ERROR_NOT_SUPPORTED.
 *   STANDIN_FRESH_STREAMS=1  a destroyed stream's address (cuStreamDestroy,
 *                            or its context's reset) is never handed out
 *                            again: a driver promises nothing about reuse.
 *   STANDIN_MEM_LIMIT=bytes  per device: an allocation (sync or async) that
 *                            would take the live bytes beyond this fails
 *                            with CUDA_ERROR_OUT_OF_MEMORY; also reported as
 *                            the total memory. Suffixes k, m, g allowed.
 *   STANDIN_FORBID_SYNC=1    every cuStreamSynchronize, cuCtxSynchronize,
 *                            cuEventSynchronize and synchronous cuMemcpy*
 *                            prints "standin: forbidden synchronisation:
 *                            <function>" and the process exits with status
 *                            86 at exit, whatever main returned.
 *   STANDIN_COUNTS=path      at exit each stand-in library appends
 *                            "<function> <calls>" for each of its exported
 *                            functions (libcuda adds standin_forbidden_syncs,
 *                            standin_live_allocations, standin_live_bytes,
 *                            standin_pool_maps, standin_pool_unmaps,
 *                            standin_prohibited_event_queries: cuEventQuery
 *                            calls a capture refused, driver_stream.c).
 *                            libcuda empties the file when it is loaded;
 *                            "%p" in the path is the process id.
 *   STANDIN_EVENT_LAG=N      a recorded event answers its first N
 *                            cuEventQuery calls with CUDA_ERROR_NOT_READY
 *                            (and cuEventElapsedTime with it meanwhile), as
 *                            on a GPU that is behind the host; a
 *                            synchronisation covering it completes it
 *   STANDIN_KERNEL_NS=N      each kernel launched eagerly with cuLaunchKernel
 *                            takes N ns of GPU time beyond what its host
 *                            emulation took: events recorded after it read
 *                            N ns later (cuEventElapsedTime), as on a GPU
 *                            where the shim's own kernels are slow (an
 *                            H200 ran the fp8 quantize kernels at 22% of
 *                            copy bandwidth). The stand-in cuBLAS's GEMMs
 *                            are not kernels and take their host time,
 *                            unless STANDIN_GEMM_NS is set.
 *   STANDIN_GEMM_NS=N        each GEMM the stand-in cuBLAS/cuBLASLt runs
 *                            takes N ns of GPU time beyond its host time,
 *                            one with fp8 A and B N/2 ns (NVIDIA's H100
 *                            datasheet: dense fp8 1979 TFLOP/s, bf16 989),
 *                            whatever its shape: a GEMM native runs
 *                            slower than a routed fp8 call's own GEMM, as
 *                            on a GPU where fp8 pays
 *                            (cuStandinGemmRan, below the public API).
 *   STANDIN_CLOCK_KHZ=N      every device's SM clock
 *                            (CU_DEVICE_ATTRIBUTE_CLOCK_RATE) in kHz: a slow
 *                            device, on which the shim's cost model
 *                            (shim/routes/cost.c: rates scaled by SMs x
 *                            clock, DRAM bandwidth from the memory clock)
 *                            estimates GEMMs slow against the passes and
 *                            launches, so routes pay at small shapes.
 *   STANDIN_TRACE=path       every kernel launch and every GEMM of the
 *                            stand-in cuBLAS/cuBLASLt appends a line
 *                            "<tid> launch <kernel>" / "<tid> gemm MxNxK
 *                            batch B" (common.h), in the order they run
 *   STANDIN_GRIDS=path       every kernel launch that runs appends
 *                            "<tid> <kernel> X Y Z", its grid
 *   STANDIN_KERNELS=path.so  the host build of the device kernels
 *                            (standin_kernel.h).
 *
 * Exit order: each library registers its atexit handler from its
 * constructor, and libcuda is constructed before the libraries that link
 * it, so its handler runs last: the counts of all three are written before
 * a forbidden synchronisation turns the exit status into 86.
 */
#include "driver.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

sd_state sd;
pthread_mutex_t sd_lock = PTHREAD_MUTEX_INITIALIZER;

/* A real driver refuses a forked child's calls (CUDA is not fork-safe);
 * the stand-in serves them, so that tests of a child reach the shim's own
 * locks. Its one lock must then not be inherited held from a thread that
 * does not exist in the child, nor its state half-updated: fork takes the
 * lock, so the child gets the state between two updates and the lock held
 * by its own (the forking) thread, which releases it (POSIX pthread_atfork
 * rationale). Re-initialising it instead raced, for ThreadSanitizer, with
 * the last use by a thread the fork left behind. The stand-in runs no
 * caller code under sd_lock, so taking it here orders after any lock of the
 * shim's own fork handlers. */
static void sd_before_fork(void) { pthread_mutex_lock(&sd_lock); }
static void sd_after_fork(void) { pthread_mutex_unlock(&sd_lock); }

__attribute__((constructor)) static void sd_register_fork(void) { pthread_atfork(sd_before_fork, sd_after_fork, sd_after_fork); }
unsigned long long sd_counts[SD_API_COUNT];

static const char *const sd_api_names[SD_API_COUNT] = {
#define SD_API_NAME(name) #name,
    SD_API_LIST(SD_API_NAME)
#undef SD_API_NAME
};

static char sd_cc_bad[256]; /* the bad STANDIN_CC value, reported by cuInit */

/* ------------------------------------------------------------------------ */
/* Devices: figures of a representative board of each capability, so code
 * that sizes work from attributes sees realistic numbers (the routes' cost
 * model reads SMs, clock, memory clock and bus width: docs/cost-model.md).
 * The parts behind the rows the tests pick, with NVIDIA's specifications:
 *  6.1 GeForce GTX 1080: 2560 CUDA cores = 20 SMs of 128, boost 1733 MHz,
 *      10 Gbps GDDR5X on 256 bits (320 GB/s);
 *  7.0 Tesla V100 SXM2: 80 SMs, boost 1530 MHz, HBM2 on 4096 bits, 900 GB/s;
 *  7.5 Tesla T4: 2560 CUDA cores = 40 SMs of 64, boost 1590 MHz, GDDR6 on
 *      256 bits, 320 GB/s;
 *  9.0 H100 SXM5: 132 SMs, boost 1980 MHz, HBM3 on 5120 bits, 3.35 TB/s.
 * Memory clocks are as the driver reports them (half the data rate: NVIDIA's
 * peak bandwidth is 2 x memory clock x bus width / 8), e.g. 2 x 5005 MHz x
 * 32 bytes = 320 GB/s for the GTX 1080. */
typedef struct sd_board {
  int major, minor;
  int sm_count, threads_per_sm, blocks_per_sm, shared_optin, shared_per_sm;
  int l2_mib, clock_khz, mem_clock_khz, bus_width, mem_gib;
} sd_board;

static const sd_board sd_boards[] = {
    {5, 0, 16, 2048, 32, 49152, 65536, 2, 1140000, 2505000, 128, 4},
    {5, 2, 24, 2048, 32, 49152, 98304, 3, 1216000, 3505000, 384, 12},
    {6, 0, 56, 2048, 32, 49152, 65536, 4, 1328500, 715000, 4096, 16},
    {6, 1, 20, 2048, 32, 49152, 98304, 2, 1733500, 5005000, 256, 8},
    {7, 0, 80, 2048, 32, 98304, 98304, 6, 1530000, 877000, 4096, 16},
    {7, 5, 40, 1024, 16, 65536, 65536, 4, 1590000, 5001000, 256, 15},
    {8, 0, 108, 2048, 32, 166912, 167936, 40, 1410000, 1593000, 5120, 80},
    {8, 6, 82, 1536, 16, 101376, 102400, 6, 1695000, 9751000, 384, 24},
    {8, 9, 58, 1536, 24, 101376, 102400, 48, 2040000, 6251000, 192, 24},
    {9, 0, 132, 2048, 32, 232448, 233472, 50, 1980000, 2619000, 5120, 80},
    {10, 0, 148, 2048, 32, 232448, 233472, 126, 1965000, 4000000, 8192, 180},
    {12, 0, 170, 1536, 24, 101376, 102400, 96, 2407000, 14001000, 512, 32},
};

static const sd_board *sd_board_for(int major, int minor) {
  const sd_board *best = NULL;
  size_t n = sizeof sd_boards / sizeof sd_boards[0];
  /* The newest board not newer than the asked capability, else the oldest. */
  for (size_t i = 0; i < n; i++) {
    const sd_board *b = &sd_boards[i];
    if (b->major < major || (b->major == major && b->minor <= minor)) best = b;
  }
  return best ? best : &sd_boards[0];
}

static void sd_device_fill(sd_device *d, int major, int minor) {
  const sd_board *b = sd_board_for(major, minor);
  memset(d, 0, sizeof *d);
  d->major = major;
  d->minor = minor;
  snprintf(d->name, sizeof d->name, "Standin GPU sm_%d%d", major, minor);
  d->sm_count = b->sm_count;
  d->max_threads_per_sm = b->threads_per_sm;
  d->max_blocks_per_sm = b->blocks_per_sm;
  d->shared_optin = b->shared_optin;
  d->shared_per_sm = b->shared_per_sm;
  d->l2_bytes = b->l2_mib << 20;
  d->clock_khz = b->clock_khz;
  d->mem_clock_khz = b->mem_clock_khz;
  d->bus_width = b->bus_width;
  d->total_mem = (uint64_t)b->mem_gib << 30;
}

/* "8.0" or "6.1,9.0": 1..15 . 0..9, at most SD_MAX_DEVICES entries. */
static int sd_parse_cc(const char *s) {
  int n = 0;
  const char *p = s;
  for (;;) {
    int major = 0, minor, digits = 0;
    while (*p >= '0' && *p <= '9' && digits < 3) major = major * 10 + (*p++ - '0'), digits++;
    if (!digits || *p++ != '.') return -1;
    if (*p < '0' || *p > '9') return -1;
    minor = *p++ - '0';
    if (major < 1 || major > 15 || n == SD_MAX_DEVICES) return -1;
    sd_device_fill(&sd.dev[n++], major, minor);
    if (*p == 0) break;
    if (*p++ != ',') return -1;
  }
  sd.ndev = n;
  return 0;
}

static void sd_at_exit(void);

__attribute__((constructor)) static void sd_load(void) {
  const char *cc = getenv("STANDIN_CC");
  if (!cc || !*cc) cc = "8.0";
  if (sd_parse_cc(cc) != 0) {
    snprintf(sd_cc_bad, sizeof sd_cc_bad, "%s", cc);
    sd.ndev = 0;
    sd.config_error = 1;
  }
  if (standin_env_flag("STANDIN_NO_POOLS", &sd.no_pools) < 0) sd.config_error = 1;
  if (standin_env_flag("STANDIN_FORBID_SYNC", &sd.forbid_sync) < 0) sd.config_error = 1;
  if (standin_env_flag("STANDIN_FRESH_STREAMS", &sd.fresh_streams) < 0) sd.config_error = 1;
  if (standin_env_size("STANDIN_MEM_LIMIT", &sd.mem_limit) < 0) sd.config_error = 1;
  if (standin_env_size("STANDIN_EVENT_LAG", &sd.event_lag) < 0) sd.config_error = 1;
  if (standin_env_size("STANDIN_KERNEL_NS", &sd.kernel_ns) < 0) sd.config_error = 1;
  if (standin_env_size("STANDIN_GEMM_NS", &sd.gemm_ns) < 0) sd.config_error = 1;
  if (standin_env_size("STANDIN_CLOCK_KHZ", &sd.clock_khz) < 0) {
    sd.config_error = 1;
  } else if (sd.clock_khz > INT32_MAX) {
    standin_msg("STANDIN_CLOCK_KHZ=%llu: expected kHz up to %d", (unsigned long long)sd.clock_khz, INT32_MAX);
    sd.config_error = 1;
  }
  const char *k = getenv("STANDIN_KERNELS");
  if (k) snprintf(sd.kernels, sizeof sd.kernels, "%s", k);
  for (int i = 0; i < sd.ndev; i++) {
    if (sd.mem_limit) sd.dev[i].total_mem = sd.mem_limit;
    if (sd.clock_khz) sd.dev[i].clock_khz = (int)sd.clock_khz;
  }
  standin_counts_truncate();
  atexit(sd_at_exit);
}

static void sd_at_exit(void) {
  unsigned long long allocs, bytes;
  sd_mem_totals(&allocs, &bytes);
  unsigned long long forbidden = __atomic_load_n(&sd.forbidden_syncs, __ATOMIC_RELAXED);
  unsigned long long refused = __atomic_load_n(&sd.prohibited_queries, __ATOMIC_RELAXED);
  pthread_mutex_lock(&sd_lock);
  unsigned long long maps = sd_pool_maps, unmaps = sd_pool_unmaps;
  pthread_mutex_unlock(&sd_lock);
  char extra[320];
  snprintf(extra, sizeof extra,
           "standin_forbidden_syncs %llu\nstandin_live_allocations %llu\n"
           "standin_live_bytes %llu\nstandin_pool_maps %llu\nstandin_pool_unmaps %llu\n"
           "standin_prohibited_event_queries %llu\n", forbidden, allocs, bytes, maps, unmaps, refused);
  standin_counters table = {sd_api_names, sd_counts, SD_API_COUNT};
  standin_counts_append(&table, extra);
  if (sd.forbid_sync && forbidden) {
    standin_msg("%llu forbidden synchronisation call(s): exit status 86", forbidden);
    fflush(NULL);
    _exit(86);
  }
}

/* ------------------------------------------------------------------------ */
/* The registry: a flat array, searched linearly. Processes hold a handful of
 * contexts, streams and modules, and lookups are a few compares. */
typedef struct sd_reg_entry {
  void *obj;
  sd_kind kind;
} sd_reg_entry;

static sd_reg_entry *sd_reg;
static size_t sd_reg_len, sd_reg_cap;

int sd_reg_add(void *obj, sd_kind kind) {
  if (sd_reg_len == sd_reg_cap) {
    size_t cap = sd_reg_cap ? sd_reg_cap * 2 : 64;
    sd_reg_entry *n = realloc(sd_reg, cap * sizeof *n);
    if (!n) return -1;
    sd_reg = n;
    sd_reg_cap = cap;
  }
  sd_reg[sd_reg_len].obj = obj;
  sd_reg[sd_reg_len].kind = kind;
  sd_reg_len++;
  return 0;
}

int sd_reg_has(const void *obj, sd_kind kind) {
  if (!obj) return 0;
  for (size_t i = 0; i < sd_reg_len; i++)
    if (sd_reg[i].obj == obj) return sd_reg[i].kind == kind;
  return 0;
}

void sd_reg_del(const void *obj) {
  for (size_t i = 0; i < sd_reg_len; i++)
    if (sd_reg[i].obj == obj) {
      sd_reg[i] = sd_reg[--sd_reg_len];
      return;
    }
}

void sd_reg_each(sd_kind kind, void (*fn)(void *obj, void *arg), void *arg) {
  /* Snapshot first: fn may delete entries (its own and others). */
  size_t n = 0;
  for (size_t i = 0; i < sd_reg_len; i++) n += sd_reg[i].kind == kind;
  if (!n) return;
  void **objs = malloc(n * sizeof *objs);
  if (!objs) return;
  n = 0;
  for (size_t i = 0; i < sd_reg_len; i++)
    if (sd_reg[i].kind == kind) objs[n++] = sd_reg[i].obj;
  for (size_t i = 0; i < n; i++)
    if (sd_reg_has(objs[i], kind)) fn(objs[i], arg);
  free(objs);
}

/* ------------------------------------------------------------------------ */
CUresult sd_check_init(void) {
  /* cuda.h, cuUserObjectCreate: "Destructor callbacks cannot make CUDA API
   * calls". */
  if (sd_user_in_destructor()) {
    standin_msg("a user object's destructor made a CUDA call");
    return CUDA_ERROR_NOT_PERMITTED;
  }
  return __atomic_load_n(&sd.initialized, __ATOMIC_ACQUIRE) ? CUDA_SUCCESS
                                                           : CUDA_ERROR_NOT_INITIALIZED;
}

CUresult sd_check_device(CUdevice dev) {
  CUresult r = sd_check_init();
  if (r) return r;
  return (dev >= 0 && dev < sd.ndev) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}

CUresult cuInit(unsigned int flags) {
  SD_COUNT(cuInit);
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&sd_lock);
  CUresult r = CUDA_SUCCESS;
  if (sd.config_error) {
    static int reported;
    if (sd_cc_bad[0] && !reported)
      standin_msg("STANDIN_CC=\"%s\": expected a comma list of major.minor "
                  "capabilities (e.g. 8.0 or 6.1,9.0); cuInit fails", sd_cc_bad);
    reported = 1;
    r = CUDA_ERROR_INVALID_VALUE;
  } else if (!sd.initialized) {
    for (int i = 0; i < sd.ndev && !r; i++) {
      sd.dev[i].primary = sd_ctx_new(i, 1);
      if (!sd.dev[i].primary) r = CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (!r) __atomic_store_n(&sd.initialized, 1, __ATOMIC_RELEASE);
  }
  pthread_mutex_unlock(&sd_lock);
  return r;
}

CUresult cuDriverGetVersion(int *driverVersion) {
  SD_COUNT(cuDriverGetVersion);
  if (!driverVersion) return CUDA_ERROR_INVALID_VALUE;
  *driverVersion = SD_DRIVER_VERSION;
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetCount(int *count) {
  SD_COUNT(cuDeviceGetCount);
  CUresult r = sd_check_init();
  if (r) return r;
  if (!count) return CUDA_ERROR_INVALID_VALUE;
  *count = sd.ndev;
  return CUDA_SUCCESS;
}

CUresult cuDeviceGet(CUdevice *device, int ordinal) {
  SD_COUNT(cuDeviceGet);
  CUresult r = sd_check_init();
  if (r) return r;
  if (!device) return CUDA_ERROR_INVALID_VALUE;
  if (ordinal < 0 || ordinal >= sd.ndev) return CUDA_ERROR_INVALID_DEVICE;
  *device = ordinal;
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetName(char *name, int len, CUdevice dev) {
  SD_COUNT(cuDeviceGetName);
  CUresult r = sd_check_device(dev);
  if (r) return r;
  if (!name || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  snprintf(name, (size_t)len, "%s", sd.dev[dev].name);
  return CUDA_SUCCESS;
}

CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev) {
  SD_COUNT(cuDeviceTotalMem_v2);
  CUresult r = sd_check_device(dev);
  if (r) return r;
  if (!bytes) return CUDA_ERROR_INVALID_VALUE;
  *bytes = (size_t)sd.dev[dev].total_mem;
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev) {
  SD_COUNT(cuDeviceGetAttribute);
  CUresult r = sd_check_device(dev);
  if (r) return r;
  if (!pi) return CUDA_ERROR_INVALID_VALUE;
  const sd_device *d = &sd.dev[dev];
  int sm = d->major * 10 + d->minor;
  int v;
  switch (attrib) {
  case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: v = 1024; break;
  case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X: v = 1024; break;
  case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y: v = 1024; break;
  case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z: v = 64; break;
  case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X: v = 2147483647; break;
  case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y: v = 65535; break;
  case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z: v = 65535; break;
  case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK: v = 49152; break;
  case CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY: v = 65536; break;
  case CU_DEVICE_ATTRIBUTE_WARP_SIZE: v = 32; break;
  case CU_DEVICE_ATTRIBUTE_MAX_PITCH: v = 2147483647; break;
  case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK: v = 65536; break;
  case CU_DEVICE_ATTRIBUTE_CLOCK_RATE: v = d->clock_khz; break;
  case CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT: v = 512; break;
  case CU_DEVICE_ATTRIBUTE_GPU_OVERLAP: v = 1; break;
  case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: v = d->sm_count; break;
  case CU_DEVICE_ATTRIBUTE_KERNEL_EXEC_TIMEOUT: v = 0; break;
  case CU_DEVICE_ATTRIBUTE_INTEGRATED: v = 0; break;
  case CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY: v = 1; break;
  case CU_DEVICE_ATTRIBUTE_COMPUTE_MODE: v = CU_COMPUTEMODE_DEFAULT; break;
  case CU_DEVICE_ATTRIBUTE_SURFACE_ALIGNMENT: v = 512; break;
  case CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS: v = 1; break;
  case CU_DEVICE_ATTRIBUTE_ECC_ENABLED: v = sm != 61 && sm != 75 && sm != 86 && sm != 120; break;
  case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID: v = 0x10 + (int)dev; break;
  case CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID: v = 0; break;
  case CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID: v = 0; break;
  case CU_DEVICE_ATTRIBUTE_TCC_DRIVER: v = 0; break;
  case CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE: v = d->mem_clock_khz; break;
  case CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH: v = d->bus_width; break;
  case CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE: v = d->l2_bytes; break;
  case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR: v = d->max_threads_per_sm; break;
  case CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT: v = 2; break;
  case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING: v = 1; break;
  case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: v = d->major; break;
  case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: v = d->minor; break;
  case CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED: v = 1; break;
  case CU_DEVICE_ATTRIBUTE_GLOBAL_L1_CACHE_SUPPORTED: v = 1; break;
  case CU_DEVICE_ATTRIBUTE_LOCAL_L1_CACHE_SUPPORTED: v = 1; break;
  case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR: v = d->shared_per_sm; break;
  case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR: v = 65536; break;
  case CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY: v = 1; break;
  case CU_DEVICE_ATTRIBUTE_MULTI_GPU_BOARD: v = 0; break;
  case CU_DEVICE_ATTRIBUTE_MULTI_GPU_BOARD_GROUP_ID: v = (int)dev; break;
  case CU_DEVICE_ATTRIBUTE_HOST_NATIVE_ATOMIC_SUPPORTED: v = 0; break;
  case CU_DEVICE_ATTRIBUTE_SINGLE_TO_DOUBLE_PRECISION_PERF_RATIO:
    v = (sm == 60 || sm == 70 || sm == 80 || sm == 90 || sm == 100) ? 2 : 32;
    break;
  case CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS: v = 0; break;
  case CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS: v = 1; break;
  case CU_DEVICE_ATTRIBUTE_COMPUTE_PREEMPTION_SUPPORTED: v = 1; break;
  case CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH: v = 1; break;
  case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: v = d->shared_optin; break;
  case CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED: v = 1; break;
  case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED: v = 1; break;
  case CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR: v = d->max_blocks_per_sm; break;
  case CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK: v = sm >= 80 ? 1024 : 0; break;
  case CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED: v = !sd.no_pools; break;
  case CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH: v = sm >= 90; break;
  case CU_DEVICE_ATTRIBUTE_TENSOR_MAP_ACCESS_SUPPORTED: v = sm >= 90; break;
  case CU_DEVICE_ATTRIBUTE_MPS_ENABLED: v = 0; break;
  default: return CUDA_ERROR_INVALID_VALUE;
  }
  *pi = v;
  return CUDA_SUCCESS;
}
