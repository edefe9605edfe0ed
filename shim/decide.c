/* decide.c: which route a call takes, and why. GEMMSHIM_MODE first, then
 * the policy table keyed on the device's compute capability and the GEMM's
 * types. The reason is written for a person reading the routing log. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "shim.h"

static void reason_append(gs_call *c, const char *fmt, va_list ap) {
  size_t used = strlen(c->reason);
  if (used >= sizeof c->reason - 1) return;
  if (used) {
    snprintf(c->reason + used, sizeof c->reason - used, "; ");
    used = strlen(c->reason);
  }
  vsnprintf(c->reason + used, sizeof c->reason - used, fmt, ap);
}

static void reason_add(gs_call *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void reason_add(gs_call *c, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  reason_append(c, fmt, ap);
  va_end(ap);
}

void call_decline(gs_call *c, gs_route ran, const char *fmt, ...) {
  c->route = ran;
  va_list ap;
  va_start(ap, fmt);
  reason_append(c, fmt, ap);
  va_end(ap);
}

void call_decide(gs_call *c) {
  c->decided = c->route = GS_ROUTE_NATIVE;
  if (gs_opt.passthrough) {
    c->device = c->sm = -1;
    reason_add(c, "pass-through: bad configuration (see the shim's first warning)");
    return;
  }
  if (gs_opt.mode == GS_MODE_NATIVE) {
    c->device = c->sm = -1;
    reason_add(c, "GEMMSHIM_MODE=native");
    /* The log still says where the call ran when someone reads it. */
    if (hooks_timing()) device_of_call(c);
    return;
  }
  const char *no_device = device_of_call(c);
  if (gs_opt.mode == GS_MODE_FFMA || gs_opt.mode == GS_MODE_FP8) {
    c->decided = gs_opt.mode == GS_MODE_FFMA ? GS_ROUTE_FFMA : GS_ROUTE_FP8;
    reason_add(c, "GEMMSHIM_MODE=%s", gs_route_name(c->decided));
  } else {
    policy_key k = {c->sm < 0 ? POLICY_SM_UNKNOWN : c->sm,
                    c->g.a_type, c->g.b_type, c->g.c_type, c->g.compute_type, c->g.api};
    int i = policy_match(&gs_policy, &k);
    char rule[GS_REASON_MAX];
    if (i < 0) {
      reason_add(c, "policy: no rule matched");
    } else {
      c->decided = gs_policy.rules[i].route;
      policy_rule_describe(&gs_policy, i, rule, sizeof rule);
      reason_add(c, "policy: %s", rule);
    }
  }
  if (no_device) reason_add(c, "device unknown: %s", no_device);
  if (!c->g.decoded) {
    reason_add(c, "arguments could not be decoded");
    c->decided = GS_ROUTE_NATIVE;
  }
}

void call_finish(gs_call *c) {
  if (!hooks_timing()) return;
  /* The fp8 route sets its own site id (fp8_sites.c): stable per layer,
   * where this one is the same for every layer of a shape. */
  if (!c->site) c->site = site_id(c->caller, &c->g);
  log_record(c);
}
