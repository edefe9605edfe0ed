/* decide.c: which route a call takes, and why. GEMMSHIM_MODE first, then
 * the policy table keyed on the device's compute capability and the GEMM's
 * types. The reason is written for a person reading the routing log, so it
 * is only composed when someone reads it (log or INFO on), and its common
 * parts are prepared once: this runs on every GEMM. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <library_types.h>

#include "shim.h"

/* "policy: <rule>" for every rule of gs_policy, made when the table is. */
static char rule_reason[POLICY_MAX_RULES][GS_REASON_MAX];

void decide_policy_loaded(void) {
  char rule[GS_REASON_MAX - 8];
  for (int i = 0; i < gs_policy.n; i++) {
    policy_rule_describe(&gs_policy, i, rule, sizeof rule);
    snprintf(rule_reason[i], sizeof rule_reason[i], "policy: %s", rule);
  }
}

/* Append "; " (unless empty) and s, truncating at the buffer's end; not
 * for a call nobody reads (c->quiet). */
static void reason_add(gs_call *c, const char *s) {
  if (c->quiet) return;
  size_t used = strnlen(c->reason, sizeof c->reason);
  size_t room = sizeof c->reason - 1 - used;
  if (used && room >= 2) {
    memcpy(c->reason + used, "; ", 2);
    used += 2;
    room -= 2;
  }
  size_t n = strnlen(s, room);
  memcpy(c->reason + used, s, n);
  c->reason[used + n] = '\0';
}

static void reason_vadd(gs_call *c, const char *fmt, va_list ap) {
  char part[GS_REASON_MAX];
  vsnprintf(part, sizeof part, fmt, ap);
  reason_add(c, part);
}

void call_decline(gs_call *c, const char *fmt, ...) {
  c->route = GS_ROUTE_NATIVE;
  if (c->quiet) return;
  va_list ap;
  va_start(ap, fmt);
  reason_vadd(c, fmt, ap);
  va_end(ap);
}

void call_note(gs_call *c, const char *fmt, ...) {
  if (c->quiet) return;
  va_list ap;
  va_start(ap, fmt);
  reason_vadd(c, fmt, ap);
  va_end(ap);
}

static void device_unknown(gs_call *c, const char *why) {
  if (!why || c->quiet) return;
  reason_add(c, "device unknown");
  /* "device unknown: <why>" without a format: this can be every call. */
  size_t used = strlen(c->reason);
  if (used + 2 < sizeof c->reason) {
    memcpy(c->reason + used, ": ", 3);
    strncat(c->reason, why, sizeof c->reason - used - 3);
  }
}

static policy_key key_of(gs_call *c, gs_caller caller) {
  policy_key k = {POLICY_SM_UNKNOWN, c->g.a_type, c->g.b_type, c->g.c_type, c->g.compute_type, c->g.api, caller,
                  c->g.m, c->g.n, c->g.k, c->g.batch, 0};
  /* The id the log gives a call that no route renamed (site.c); worked
   * out only when a rule asks for it. */
  if (gs_policy.has_site_keys) k.site = c->site = site_id(c->caller, &c->g);
  return k;
}

/* The rules of the user's policy file alone, before GEMMSHIM_MODE: the
 * mode replaces the built-in rules, never the user's. 1 when one matched
 * (c->decided and the reason set). */
static int decide_by_file(gs_call *c) {
  if (gs_policy.n_file == 0) return 0;
  policy_key k = key_of(c, GS_CALLER_APP);
  const char *no_device = device_of_call(c);
  k.sm = c->sm < 0 ? POLICY_SM_UNKNOWN : c->sm;
  int i = policy_match_in(&gs_policy, &k, 0, gs_policy.n_file);
  if (i < 0) return 0;
  c->decided = gs_policy.rules[i].route;
  if (!c->quiet) reason_add(c, rule_reason[i]);
  device_unknown(c, no_device);
  return 1;
}

/* object: the library's file name where caller is not the app. */
static void decide_by_policy(gs_call *c, gs_caller caller, const char *object) {
  policy_key k = key_of(c, caller);
  /* Nobody reads the reason: if no device-specific rule can claim this
   * GEMM, its device need not be found at all. */
  if (c->quiet) {
    int route = policy_route_without_sm(&gs_policy, &k);
    if (route >= 0) {
      c->decided = (gs_route)route;
      if (c->decided != GS_ROUTE_NATIVE) device_of_call(c);
      return;
    }
  }
  const char *no_device = device_of_call(c);
  k.sm = c->sm < 0 ? POLICY_SM_UNKNOWN : c->sm;
  int i = policy_match(&gs_policy, &k);
  if (i >= 0) c->decided = gs_policy.rules[i].route;
  if (!c->quiet) {
    /* Only rules that name a library's caller can match its calls: none
     * matching is the default, not a gap in the table. */
    if (caller != GS_CALLER_APP) {
      char from[GS_REASON_MAX];
      snprintf(from, sizeof from, i >= 0 ? "called from %s" : "called from %s: GEMMs inside NVIDIA libraries run native",
               object);
      reason_add(c, from);
    }
    if (i >= 0) reason_add(c, rule_reason[i]);
    else if (caller == GS_CALLER_APP) reason_add(c, "policy: no rule matched");
  }
  device_unknown(c, no_device);
}

/* GEMMSHIM_MODE=fp8 is an fp8 switch for the layers a framework runs in
 * bf16 or fp16, as TransformerEngine's and torchao's converters take
 * Linear layers of those types; an fp32 GEMM is left alone unless a
 * policy rule asks for it. */
static int fp8_mode_takes(const gs_gemm *g) {
  int a = g->a_type, b = g->b_type;
  return (a == CUDA_R_16BF || a == CUDA_R_16F) && b == a;
}

void call_decide(gs_call *c) {
  c->decided = c->route = GS_ROUTE_NATIVE;
  if (gs_opt.passthrough) {
    reason_add(c, "pass-through: bad configuration (see the shim's first warning)");
    return;
  }
  if (gs_opt.mode == GS_MODE_NATIVE) {
    if (c->quiet) return;
    reason_add(c, "GEMMSHIM_MODE=native");
    /* The log still says where the call ran. */
    device_of_call(c);
    return;
  }
  /* A GEMM an NVIDIA library makes inside itself (cuSOLVER's updates,
   * cuBLAS entry points forwarding to cuBLASLt) is part of an algorithm
   * the program did not write: the mode does not apply to it, only policy
   * rules that name its caller. */
  const char *object;
  gs_caller caller = site_caller(c->caller, &object);
  if (caller != GS_CALLER_APP) {
    decide_by_policy(c, caller, object);
  } else if (gs_opt.mode != GS_MODE_AUTO && c->g.decoded && decide_by_file(c)) {
    /* decided by the user's rule */
  } else if (gs_opt.mode == GS_MODE_FFMA) {
    c->decided = GS_ROUTE_FFMA;
    reason_add(c, "GEMMSHIM_MODE=ffma");
    device_unknown(c, device_of_call(c));
  } else if (gs_opt.mode == GS_MODE_FP8 && !c->g.decoded) {
    /* The types the mode goes by may be the ones that could not be read:
     * the reason names the failed read (below), not a type mismatch. */
    if (!c->quiet) {
      reason_add(c, "GEMMSHIM_MODE=fp8");
      device_of_call(c);
    }
  } else if (gs_opt.mode == GS_MODE_FP8 && fp8_mode_takes(&c->g)) {
    c->decided = GS_ROUTE_FP8;
    reason_add(c, "GEMMSHIM_MODE=fp8");
    device_unknown(c, device_of_call(c));
  } else {
    if (gs_opt.mode == GS_MODE_FP8 && !c->quiet) {
      const char *a = gs_type_name(c->g.a_type), *b = gs_type_name(c->g.b_type);
      char why[GS_REASON_MAX];
      snprintf(why, sizeof why, "GEMMSHIM_MODE=fp8 takes bf16 and fp16 GEMMs, not %s x %s ones",
               a ? a : "unknown", b ? b : "unknown");
      reason_add(c, why);
    }
    decide_by_policy(c, GS_CALLER_APP, NULL);
  }
  if (!c->g.decoded) {
    if (!c->quiet) {
      char why[GS_REASON_MAX];
      decode_failure(&c->g, why, sizeof why);
      reason_add(c, why);
    }
    c->decided = GS_ROUTE_NATIVE;
  }
}

void call_finish(gs_call *c) {
  if (c->quiet) return;
  /* The fp8 route sets its own site id (fp8_sites.c): stable per layer,
   * where this one is the same for every layer of a shape. */
  if (!c->site) c->site = site_id(c->caller, &c->g);
  log_record(c);
}
