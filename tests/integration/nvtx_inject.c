/* nvtx_inject.c: a small NVTX tool, loaded the way Nsight Systems is: the
 * program runs with NVTX_INJECTION64_PATH=libnvtx_inject.so, and the first
 * NVTX call of each NVTX instance (here the shim's) dlopens it and calls
 * its InitializeInjectionNvtx2 with the instance's export table.
 *
 * The protocol, from the NVTX v3 headers (nvtxDetail/nvtxInit.h and
 * nvtxTypes.h): the export table NVTX_ETID_CALLBACKS holds
 * GetModuleFunctionTable(module, &table, &size); table[i] points at the
 * slot of callback i of that module (NVTX_CBID_CORE2_* for the domain
 * functions), and a tool attaches by writing its function into the slot.
 * InitializeInjectionNvtx2 returns nonzero on success.
 *
 * It records, one line per event, appended (O_APPEND, one write, with the
 * stand-in's own line writer) to
 * NVTX_TEST_RECORD, the same file the stand-in appends its kernel launches
 * and GEMMs to (STANDIN_TRACE), so the test sees them in one order:
 *
 *   <tid> domain <id> <name>
 *   <tid> category <domain id> <category> <name>
 *   <tid> push <domain id> <category> <payload> <name>
 *   <tid> pop <domain id>
 */
#define _GNU_SOURCE
#include <inttypes.h>
#include <stddef.h>

#define NVTX_NO_IMPL
#include <nvtx3/nvToolsExt.h>

#include "common.h"

/* One event line (tests/standin/common.c, linked in). */
#define record(...) standin_append_line("NVTX_TEST_RECORD", __VA_ARGS__)

/* Domains are handed out as small numbers, which is all a handle is to
 * the caller: an opaque value the tool gives back meaning to. */
static int domains;
#define DOMAIN_ID(d) ((int)(intptr_t)(d))

static nvtxDomainHandle_t domain_create(const char *name) {
  int id = __atomic_add_fetch(&domains, 1, __ATOMIC_RELAXED);
  record("domain %d %s", id, name);
  return (nvtxDomainHandle_t)(intptr_t)id;
}

static void domain_name_category(nvtxDomainHandle_t d, uint32_t category, const char *name) {
  record("category %d %" PRIu32 " %s", DOMAIN_ID(d), category, name);
}

static int domain_push(nvtxDomainHandle_t d, const nvtxEventAttributes_t *a) {
  const char *name = a && a->messageType == NVTX_MESSAGE_TYPE_ASCII ? a->message.ascii : "?";
  uint64_t payload = a && a->payloadType == NVTX_PAYLOAD_TYPE_UNSIGNED_INT64 ? a->payload.ullValue : UINT64_MAX;
  record("push %d %" PRIu32 " %" PRIu64 " %s", DOMAIN_ID(d), a ? a->category : 0, payload, name);
  return 0;
}

static int domain_pop(nvtxDomainHandle_t d) {
  record("pop %d", DOMAIN_ID(d));
  return 0;
}

__attribute__((visibility("default"))) int InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get_table) {
  const NvtxExportTableCallbacks *cb = (const NvtxExportTableCallbacks *)get_table(NVTX_ETID_CALLBACKS);
  if (!cb || cb->struct_size < sizeof *cb) return 0;
  NvtxFunctionTable table = NULL;
  unsigned int size = 0;
  if (!cb->GetModuleFunctionTable(NVTX_CB_MODULE_CORE2, &table, &size) || size <= NVTX_CBID_CORE2_DomainCreateA)
    return 0;
  *table[NVTX_CBID_CORE2_DomainCreateA] = (NvtxFunctionPointer)domain_create;
  *table[NVTX_CBID_CORE2_DomainNameCategoryA] = (NvtxFunctionPointer)domain_name_category;
  *table[NVTX_CBID_CORE2_DomainRangePushEx] = (NvtxFunctionPointer)domain_push;
  *table[NVTX_CBID_CORE2_DomainRangePop] = (NvtxFunctionPointer)domain_pop;
  record("init");
  return 1;
}
