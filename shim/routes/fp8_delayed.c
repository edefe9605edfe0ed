/* fp8_delayed.c: the delayed recipe. Each call site and operand keeps an
 * amax history on the device (fp8_sites.c) and a call quantizes with the
 * scale the site's previous call published (TransformerEngine's
 * DelayedScaling): no amax pass on the steady path, but a per-site
 * identity that the shim must guess (docs/fp8-sites.md). */
#include "fp8_recipe.h"

static const char *delayed_acquire(gs_call *c, CUdeviceptr scratch, fp8_scales *s) {
  (void)scratch;
  const char *why = fp8_site_acquire(c, 0, &s->use);
  if (why) return why;
  for (int i = 0; i < 2; i++) {
    s->fmt[i] = s->use.fmt[i];
    s->gradient[i] = s->use.gradient[i];
    s->ring[i] = s->use.ring[i];
  }
  s->parity = s->use.parity;
  s->needs_amax_init = s->use.needs_amax_init;
  s->per_call = 0;
  /* Fast accumulation for forward GEMMs only (fp8.c, lt_fp8). */
  s->forward = fp8_thread_forward();
  s->note = s->use.needs_amax_init ? "first call: scales from its own amax" : NULL;
  return NULL;
}

static void delayed_release(fp8_scales *s, unsigned ran) { fp8_site_release(&s->use, ran); }

const fp8_recipe fp8_recipe_delayed = {"delayed", GS_FP8_RECIPE_AUTO, NULL, 0, delayed_acquire, delayed_release, FP8_LT_K_ALIGN, NULL, NULL};
