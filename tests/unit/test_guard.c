/* test_guard.c: the accuracy guard's figure (shim/guard.c), as
 * docs/log-format.md ("The guard's figure") defines it: the lower of
 * sqnr_db and the median element's relative error in dB, -20 log10(p50);
 * minus infinity when a position is finite in one output only, or when the
 * median element's error is infinite; the median alone is not used when no
 * quantiles were measured. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "shim.h"

static gs_gpu_time measured(double sqnr, int quantiles, double p50, uint64_t mismatch) {
  gs_gpu_time t;
  memset(&t, 0, sizeof t);
  t.has_acc = 1;
  t.acc_sqnr_db = sqnr;
  t.has_acc_quantiles = quantiles;
  t.acc_p50 = p50;
  t.acc_mismatch = mismatch;
  return t;
}

static void test_figure(void **state) {
  (void)state;
  gs_gpu_time t = measured(30.0, 1, 0.01, 0); /* median element: 40 dB */
  assert_true(fabs(guard_figure(&t) - 30.0) < 1e-9);
  t = measured(30.0, 1, 0.1, 0); /* 20 dB: the lower */
  assert_true(fabs(guard_figure(&t) - 20.0) < 1e-9);
  t = measured(30.0, 0, 0.1, 0); /* no quantiles: SQNR alone */
  assert_true(fabs(guard_figure(&t) - 30.0) < 1e-9);
  t = measured(INFINITY, 1, 0.0, 0); /* identical outputs */
  assert_true(isinf(guard_figure(&t)) && guard_figure(&t) > 0);
  /* A median error of inf: minus infinity, never a finite number. */
  t = measured(122.0, 1, INFINITY, 0);
  assert_true(isinf(guard_figure(&t)) && guard_figure(&t) < 0);
  /* An Inf or NaN the route made or lost: minus infinity, whatever else. */
  t = measured(INFINITY, 0, 0.0, 1);
  assert_true(isinf(guard_figure(&t)) && guard_figure(&t) < 0);
  t = measured(29.0, 1, 0.001, 48);
  assert_true(isinf(guard_figure(&t)) && guard_figure(&t) < 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_figure)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
