/* test_measured_gate.c: the measured gate (shim/measured_gate.c) as
 * docs/cost-model.md ("The measured gate") states it: with GEMMSHIM_COMPARE
 * and the gate on, a site whose compared calls' route GPU time, summed over
 * at least MEASURED_GATE_CALLS (3) of them, is above native's runs native,
 * with the measurement in the reason; per site; a faster route, or fewer
 * compared calls, keeps the route. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "shim.h"

static gs_gpu_time timed(uint64_t route_ns, uint64_t native_ns) {
  gs_gpu_time t;
  memset(&t, 0, sizeof t);
  t.has_gpu_ns = 1;
  t.gpu_ns = route_ns;
  t.has_native_ns = 1;
  t.native_ns = native_ns;
  return t;
}

static int setup(void **state) {
  (void)state;
  measured_forget_for_tests();
  gs_opt.compare = 1;
  gs_opt.gate = 1;
  return 0;
}

static void test_slow_site_after_three_compared_calls(void **state) {
  (void)state;
  char why[GS_REASON_MAX];
  gs_gpu_time t = timed(150000, 100000);
  measured_observe(0x11, GS_ROUTE_FP8, &t);
  measured_observe(0x11, GS_ROUTE_FP8, &t);
  assert_int_equal(measured_reason(0x11, "fp8", why, sizeof why), 0);
  t = timed(120000, 100000);
  measured_observe(0x11, GS_ROUTE_FP8, &t);
  assert_int_equal(measured_reason(0x11, "fp8", why, sizeof why), 1);
  /* (150 + 150 + 120) / (3 x 100) = 1.4; 140 us and 100 us a call. */
  assert_string_equal(why,
                      "fp8 off for this site: slower than native here, measured 1.4x native's GPU time over 3 compared "
                      "calls (route 140.0 us, native 100.0 us a call); GEMMSHIM_GATE=off routes it anyway");
  /* Later measurements do not change a marked site. */
  t = timed(1000, 100000);
  measured_observe(0x11, GS_ROUTE_FP8, &t);
  assert_int_equal(measured_reason(0x11, "fp8", why, sizeof why), 1);
  assert_non_null(strstr(why, "measured 1.4x native's GPU time over 3 compared calls"));
  /* Only that site. */
  assert_int_equal(measured_reason(0x12, "fp8", why, sizeof why), 0);
  uint64_t sites[4];
  int routes[4];
  char list[4][GS_REASON_MAX];
  assert_int_equal(measured_list(sites, routes, list, 4), 1);
  assert_true(sites[0] == 0x11);
  assert_int_equal(routes[0], GS_ROUTE_FP8);
}

static void test_sums_decide_not_single_calls(void **state) {
  (void)state;
  char why[GS_REASON_MAX];
  /* One slow call among faster ones: the sum is below native's. */
  gs_gpu_time slow = timed(200000, 100000), fast = timed(40000, 100000);
  measured_observe(0x21, GS_ROUTE_FFMA, &slow);
  measured_observe(0x21, GS_ROUTE_FFMA, &fast);
  measured_observe(0x21, GS_ROUTE_FFMA, &fast);
  measured_observe(0x21, GS_ROUTE_FFMA, &fast);
  assert_int_equal(measured_reason(0x21, "ffma", why, sizeof why), 0);
  /* Equal times: not slower. */
  gs_gpu_time same = timed(100000, 100000);
  for (int i = 0; i < 5; i++) measured_observe(0x22, GS_ROUTE_FFMA, &same);
  assert_int_equal(measured_reason(0x22, "ffma", why, sizeof why), 0);
  /* Later calls tip the running sums: 320 + 150 = 470 us against 500 us
   * over 5 calls keeps the route; + 300 = 770 against 600 over 6 does not
   * (1.283x). */
  gs_gpu_time mid = timed(150000, 100000), slower = timed(300000, 100000);
  measured_observe(0x21, GS_ROUTE_FFMA, &mid);
  assert_int_equal(measured_reason(0x21, "ffma", why, sizeof why), 0);
  measured_observe(0x21, GS_ROUTE_FFMA, &slower);
  assert_int_equal(measured_reason(0x21, "ffma", why, sizeof why), 1);
  assert_non_null(strstr(why, "measured 1.28x native's GPU time over 6 compared calls (route 128.3 us, native 100.0 us"));
}

static void test_what_is_not_counted(void **state) {
  (void)state;
  char why[GS_REASON_MAX];
  gs_gpu_time t = timed(500000, 100000);
  /* Native records, records without a native time, site 0. */
  for (int i = 0; i < 3; i++) measured_observe(0x31, GS_ROUTE_NATIVE, &t);
  gs_gpu_time no_native = t;
  no_native.has_native_ns = 0;
  for (int i = 0; i < 3; i++) measured_observe(0x32, GS_ROUTE_FP8, &no_native);
  for (int i = 0; i < 3; i++) measured_observe(0, GS_ROUTE_FP8, &t);
  assert_int_equal(measured_reason(0x31, "fp8", why, sizeof why), 0);
  assert_int_equal(measured_reason(0x32, "fp8", why, sizeof why), 0);
  assert_int_equal(measured_reason(0, "fp8", why, sizeof why), 0);
}

static void test_gate_off_or_no_compare(void **state) {
  (void)state;
  char why[GS_REASON_MAX];
  gs_gpu_time t = timed(500000, 100000);
  for (int i = 0; i < 3; i++) measured_observe(0x41, GS_ROUTE_FP8, &t);
  assert_int_equal(measured_reason(0x41, "fp8", why, sizeof why), 1);
  gs_opt.gate = 0; /* GEMMSHIM_GATE=off routes it anyway */
  assert_int_equal(measured_reason(0x41, "fp8", why, sizeof why), 0);
  for (int i = 0; i < 3; i++) measured_observe(0x42, GS_ROUTE_FP8, &t);
  gs_opt.gate = 1;
  assert_int_equal(measured_reason(0x42, "fp8", why, sizeof why), 0);
  gs_opt.compare = 0;
  assert_int_equal(measured_reason(0x41, "fp8", why, sizeof why), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup(test_slow_site_after_three_compared_calls, setup),
      cmocka_unit_test_setup(test_sums_decide_not_single_calls, setup),
      cmocka_unit_test_setup(test_what_is_not_counted, setup),
      cmocka_unit_test_setup(test_gate_off_or_no_compare, setup),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
