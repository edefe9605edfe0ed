/* test_fp8_convert.c: the fp8 conversions of kernels/fp8_convert.h, bit for
 * bit against golden vectors made with ml_dtypes (tests/fp8/make_golden.py,
 * which documents how saturation and NaN are derived from ml_dtypes' casts):
 *
 *   - all 256 codes of E4M3 and E5M2 decoded (NaN codes: a NaN);
 *   - about 20,000 fp32 inputs (every code value, every tie between
 *     neighbours and one fp32 ulp either side, saturation, infinities,
 *     NaNs, fp32 and fp8 subnormals, random bit patterns and magnitudes)
 *     encoded to both formats with saturation;
 *   - every finite code survives decode -> encode, and the code order is
 *     the value order (what the kernels' amax and clamping rely on). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "../../kernels/fp8_convert.h"
#include "../fp8/golden_codes.h"

/* The random vectors, embedded at build time (make runs from the
 * repository root), so the test reads no file. */
__asm__(".pushsection .rodata\n"
        ".balign 8\n"
        "fp8_golden_random:\n"
        ".incbin \"tests/fp8/golden_random.bin\"\n"
        "fp8_golden_random_end:\n"
        ".popsection\n");
extern const unsigned char fp8_golden_random[], fp8_golden_random_end[];

static uint32_t le32(const unsigned char *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static int is_nan_code(uint8_t c, int fmt) {
  return fmt == 0 ? (c & 0x7F) == 0x7F : (c & 0x7F) > 0x7C;
}

static void check_decode_all(const uint32_t golden[256], int fmt) {
  for (int c = 0; c < 256; c++) {
    float f = gs_fp8_to_f32((uint8_t)c, fmt);
    if (is_nan_code((uint8_t)c, fmt)) {
      if (!isnan(f)) fail_msg("fmt %d code 0x%02x: decoded %g, expected NaN", fmt, c, (double)f);
      if (!isnan(gs_f32_from_bits(golden[c]))) fail_msg("golden disagrees on NaN code 0x%02x", c);
      continue;
    }
    if (gs_f32_bits(f) != golden[c])
      fail_msg("fmt %d code 0x%02x: decoded 0x%08x, golden 0x%08x", fmt, c, gs_f32_bits(f), golden[c]);
  }
}

static void test_decode_e4m3(void **state) {
  (void)state;
  check_decode_all(golden_e4m3_decoded, 0);
  assert_true(gs_e4m3_to_f32(0x7E) == 448.0f);
  assert_true(gs_e4m3_to_f32(0x01) == 0x1p-9f);
  assert_true(gs_e4m3_to_f32(0x08) == 0x1p-6f);
}

static void test_decode_e5m2(void **state) {
  (void)state;
  check_decode_all(golden_e5m2_decoded, 1);
  assert_true(gs_e5m2_to_f32(0x7B) == 57344.0f);
  assert_true(isinf(gs_e5m2_to_f32(0x7C)) && gs_e5m2_to_f32(0xFC) < 0);
  assert_true(gs_e5m2_to_f32(0x01) == 0x1p-16f);
}

static void test_encode_golden(void **state) {
  (void)state;
  const unsigned char *p = fp8_golden_random;
  size_t size = (size_t)(fp8_golden_random_end - fp8_golden_random);
  assert_true(size >= 12);
  assert_memory_equal(p, "GSF8", 4);
  assert_int_equal(le32(p + 4), 1);
  uint32_t count = le32(p + 8);
  assert_int_equal(size, 12 + (size_t)count * 8);
  assert_true(count >= 20000);
  size_t bad = 0, nans = 0, sats = 0, subnormals = 0;
  for (uint32_t i = 0; i < count; i++) {
    const unsigned char *r = p + 12 + (size_t)i * 8;
    uint32_t bits = le32(r);
    float x = gs_f32_from_bits(bits);
    uint8_t want4 = r[4], want5 = r[5];
    uint8_t got4 = gs_f32_to_e4m3_sat(x), got5 = gs_f32_to_e5m2_sat(x);
    if (got4 != want4 || got5 != want5) {
      if (bad++ < 10)
        print_error("0x%08x (%a): e4m3 0x%02x want 0x%02x, e5m2 0x%02x want 0x%02x\n", bits,
                    (double)x, got4, want4, got5, want5);
    }
    nans += isnan(x);
    sats += (want4 & 0x7F) == 0x7E && fabsf(x) > 448.0f;
    subnormals += (want4 & 0x78) == 0 && (want4 & 0x07) != 0;
  }
  if (bad) fail_msg("%zu of %u golden encodings differ", bad, count);
  /* The vectors cover what they claim to. */
  assert_true(nans >= 10);
  assert_true(sats >= 100);
  assert_true(subnormals >= 100);
}

static void check_round_trip(int fmt) {
  float prev = -INFINITY;
  /* Non-negative codes in order, then their negatives. */
  for (int c = 0; c < 128; c++) {
    if (is_nan_code((uint8_t)c, fmt)) continue;
    float v = gs_fp8_to_f32((uint8_t)c, fmt);
    if (!isinf(v)) {
      assert_int_equal(gs_f32_to_fp8_sat(v, fmt), c);
      assert_int_equal(gs_f32_to_fp8_sat(-v, fmt), c | 0x80);
    }
    assert_true(v > prev || (c == 0 && v == 0));
    prev = v;
  }
}

static void test_round_trip_and_order(void **state) {
  (void)state;
  check_round_trip(0);
  check_round_trip(1);
  /* Saturation, not inf/NaN, past the max; NaN keeps its sign. */
  assert_int_equal(gs_f32_to_e4m3_sat(INFINITY), 0x7E);
  assert_int_equal(gs_f32_to_e4m3_sat(-1e30f), 0xFE);
  assert_int_equal(gs_f32_to_e5m2_sat(INFINITY), 0x7B);
  assert_int_equal(gs_f32_to_e5m2_sat(-61440.0f), 0xFB);
  assert_int_equal(gs_f32_to_e4m3_sat(-NAN), 0xFF);
  assert_int_equal(gs_f32_to_e5m2_sat(NAN), 0x7E);
  assert_int_equal(gs_f32_to_e4m3_sat(-0.0f), 0x80);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_decode_e4m3),
      cmocka_unit_test(test_decode_e5m2),
      cmocka_unit_test(test_encode_golden),
      cmocka_unit_test(test_round_trip_and_order),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
