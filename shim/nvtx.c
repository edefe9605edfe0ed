/* nvtx.c: one NVTX range per intercepted call, so Nsight Systems (or any
 * NVTX tool) shows which framework call became which route, around the
 * kernels it launched:
 *
 *   gemmshim ffma 4096x4096x4096 bf16 (cublasGemmEx)
 *
 * in the domain "gemmshim", with the route as the range's category (named
 * "native", "ffma", "fp8": a tool can filter by it) and the call's log
 * sequence number as its payload (0 when the log is off), so a range can be
 * matched to its routing-log record. The name's shape and types are written
 * as `gemmshim report` writes them (python/gemmshim/report/read.py, shape_text).
 *
 * NVTX v3 is header-only; unless NVTX_INJECTION64_PATH is set when the
 * library loads, the shim makes no NVTX call at all, so a call without a
 * tool pays one test of a flag.
 *
 * Tool lookup and where the range opens: docs/profiling.md, "nvtx.c:
 * ranges". */
#define _GNU_SOURCE
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include <nvtx3/nvToolsExt.h>

#include "shim.h"

int gs_nvtx_on;
static nvtxDomainHandle_t domain;
static pthread_once_t domain_once = PTHREAD_ONCE_INIT;

void nvtx_init(void) {
  const char *tool = getenv("NVTX_INJECTION64_PATH");
  gs_nvtx_on = tool && *tool;
}

/* The first range creates the domain (and so loads the tool): never in
 * the library's constructor, where loading another library is fragile. */
static void create_domain(void) {
  domain = nvtxDomainCreateA("gemmshim");
  for (int r = 0; r < GS_ROUTE_COUNT; r++) nvtxDomainNameCategoryA(domain, (uint32_t)r + 1, gs_route_name((gs_route)r));
}

/* "bf16" when A, B, C (and D) agree, else "A,B->C" ("->C->D" for a D of
 * another type): the report's types_text (python/gemmshim/report/read.py). */
static int types_text(char *out, size_t len, const gs_gemm *g) {
  const char *a = gs_type_name(g->a_type), *b = gs_type_name(g->b_type), *c = gs_type_name(g->c_type);
  const char *d = g->d_type >= 0 ? gs_type_name(g->d_type) : c;
  int same_ab = g->a_type == g->b_type, same_cd = g->d_type < 0 || g->d_type == g->c_type;
  if (same_ab && same_cd && g->a_type == g->c_type) return snprintf(out, len, "%s", a);
  char ab[48], cd[48];
  if (same_ab) snprintf(ab, sizeof ab, "%s", a);
  else snprintf(ab, sizeof ab, "%s,%s", a, b);
  if (same_cd) snprintf(cd, sizeof cd, "%s", c);
  else snprintf(cd, sizeof cd, "%s->%s", c, d);
  return snprintf(out, len, "%s->%s", ab, cd);
}

size_t nvtx_range_name(const gs_call *c, gs_route route, char *out, size_t len) {
  const gs_gemm *g = &c->g;
  char types[128], batch[32] = "";
  types_text(types, sizeof types, g);
  if (g->batch != 1) snprintf(batch, sizeof batch, " batch %" PRId64, g->batch);
  int n = snprintf(out, len, "gemmshim %s %" PRId64 "x%" PRId64 "x%" PRId64 "%s %s (%s)", gs_route_name(route), g->m,
                   g->n, g->k, batch, types, gs_api_name(g->api));
  return n < 0 ? 0 : (size_t)n < len ? (size_t)n : len - 1;
}

void nvtx_call_begin(gs_call *c, gs_route route) {
  pthread_once(&domain_once, create_domain);
  char name[256];
  nvtx_range_name(c, route, name, sizeof name);
  nvtxEventAttributes_t a = {0};
  a.version = NVTX_VERSION;
  a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  a.category = (uint32_t)route + 1;
  a.payloadType = NVTX_PAYLOAD_TYPE_UNSIGNED_INT64;
  a.payload.ullValue = c->seq;
  a.messageType = NVTX_MESSAGE_TYPE_ASCII;
  a.message.ascii = name;
  nvtxDomainRangePushEx(domain, &a);
  c->nvtx_open = 1;
}

void nvtx_call_end(gs_call *c) {
  if (!c->nvtx_open) return;
  nvtxDomainRangePop(domain);
  c->nvtx_open = 0;
}
