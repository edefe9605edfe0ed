/* route.c: hands a call decided for a non-native route to that route's
 * file. A route that cannot run the call declines (reason recorded) and the
 * hook runs it native: never a wrong answer, never a lost call. */
#include "shim.h"
#include "routes/cost.h"

int route_run(gs_call *c) {
  /* A route needs every field of an Lt call, not just the policy's. */
  decode_lt_rest(&c->g, 1);
  if (!c->g.decoded) {
    char why[GS_REASON_MAX];
    decode_failure(&c->g, why, sizeof why);
    call_decline(c, "%s; ran native", why);
    return GS_DECLINED;
  }
  int r = GS_DECLINED;
  /* The call's site as its record will name it; the fp8 route's delayed
   * recipe names its own (per layer) and asks again once it knows. */
  if (!c->site) c->site = site_id(c->caller, &c->g);
  char guarded[GS_REASON_MAX];
  if (guard_reason(c->site, gs_route_name(c->decided), guarded, sizeof guarded) ||
      (cost_gate_applies(c, c->decided) &&
       measured_reason(c->site, gs_route_name(c->decided), guarded, sizeof guarded))) {
    call_decline(c, "%s", guarded);
    return GS_DECLINED;
  }
  switch (c->decided) {
    case GS_ROUTE_FFMA:
      r = route_ffma(c);
      break;
    case GS_ROUTE_FP8:
      r = route_fp8(c);
      break;
    case GS_ROUTE_FP16:
      r = route_fp16(c);
      break;
    default:
      break;
  }
  return r;
}
