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
 *     the value order (what the kernels' amax and clamping rely on);
 *   - the CPU model of sm_89's cvt.rn.satfinite.{e4m3x2,e5m2x2}.f32 on the
 *     same codes and vectors, as the PTX ISA defines it (a NaN of the
 *     format for NaN, sign-preserved MAX_NORM past it, a into the high
 *     byte);
 *   - the reciprocal-and-correction quotient the sm_89 quantize uses
 *     against the correctly rounded division, over the range of steps and
 *     inputs it is used for, at every fp8 rounding tie. */
#include <inttypes.h>
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

/* cvt.rn.satfinite.<fmt>x2.f32 d, a, b (PTX ISA, "Data Movement and
 * Conversion Instructions: cvt"): every code's value and every golden input
 * converts as the saturating encoder does, in its byte of d; NaN inputs give
 * a NaN code of the format (the ISA names no particular one). */
static void check_cvt(float x, uint8_t want, int fmt, size_t *bad) {
  uint16_t hi = gs_cvt_rn_satfinite_x2_model(x, 1.0f, fmt), lo = gs_cvt_rn_satfinite_x2_model(1.0f, x, fmt);
  uint8_t one = fmt ? 0x3C : 0x38;
  uint8_t got_hi = (uint8_t)(hi >> 8), got_lo = (uint8_t)lo;
  int ok = (uint8_t)hi == one && (uint8_t)(lo >> 8) == one && got_hi == got_lo;
  if (isnan(x)) ok = ok && is_nan_code(got_hi, fmt);
  else ok = ok && got_hi == want;
  if (!ok && (*bad)++ < 10)
    print_error("cvt model fmt %d: %a -> d 0x%04x / 0x%04x, want byte 0x%02x\n", fmt, (double)x, hi, lo, want);
}

static void test_cvt_model(void **state) {
  (void)state;
  size_t bad = 0;
  for (int fmt = 0; fmt < 2; fmt++)
    for (int c = 0; c < 256; c++) {
      float v = gs_fp8_to_f32((uint8_t)c, fmt);
      uint8_t want = (uint8_t)c;
      if (isinf(v)) want = (uint8_t)((c & 0x80) | 0x7B); /* E5M2 inf: MAX_NORM, sign kept */
      check_cvt(v, want, fmt, &bad);
    }
  const unsigned char *p = fp8_golden_random;
  uint32_t count = le32(p + 8);
  for (uint32_t i = 0; i < count; i++) {
    const unsigned char *r = p + 12 + (size_t)i * 8;
    float x = gs_f32_from_bits(le32(r));
    check_cvt(x, r[4], 0, &bad);
    check_cvt(x, r[5], 1, &bad);
  }
  if (bad) fail_msg("%zu cvt model results differ", bad);
  /* Past MAX_NORM by any amount, infinities included: MAX_NORM. */
  assert_int_equal(gs_cvt_rn_satfinite_x2_model(449.0f, -INFINITY, 0), 0x7EFE);
  assert_int_equal(gs_cvt_rn_satfinite_x2_model(-57345.0f, INFINITY, 1), 0xFB7B);
  assert_true(is_nan_code((uint8_t)gs_cvt_rn_satfinite_x2_model(0, -NAN, 1), 1));
}

/* splitmix64 with a fixed seed: the same inputs every run. */
static uint64_t q_state = 0x51EDull;
static uint64_t q_next(void) {
  uint64_t z = (q_state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* gs_div_by_rcp against x / s: equal bits wherever |x / s| < 2^64, s is
 * in [2^-60, 2^60] (the kernels' fast range) and |x| >= 2^-100, equal fp8
 * codes below that. Steps: powers of two and their neighbours, and random ones over the
 * whole range; inputs: every tie between neighbouring fp8 codes (and one
 * fp32 ulp either side) times the step, random magnitudes, zeros of both
 * signs, and fp32 subnormals. */
static void check_quotient(float x, float s, size_t *bad, size_t *n) {
  float r = 1.0f / s;
  float want = x / s, got = gs_div_by_rcp(x, s, r);
  (*n)++;
  /* Below 2^-100 the residual underflows and the last bit may differ; such
   * quotients (< 2^-40) are far below the smallest fp8 subnormal's half
   * (2^-17), so the codes, which are all that is kept, still agree. */
  int same = fabsf(x) >= 0x1p-100f ? gs_f32_bits(want) == gs_f32_bits(got)
                                    : gs_f32_to_e4m3_sat(want) == gs_f32_to_e4m3_sat(got) &&
                                          gs_f32_to_e5m2_sat(want) == gs_f32_to_e5m2_sat(got);
  if (!same && (*bad)++ < 10)
    print_error("%a / %a: %a, the division gives %a\n", (double)x, (double)s, (double)got, (double)want);
}

static void test_quotient_by_reciprocal(void **state) {
  (void)state;
  size_t bad = 0, n = 0;
  float steps[2000];
  int ns = 0;
  for (int e = -60; e <= 60; e++) {
    float p2 = ldexpf(1.0f, e);
    steps[ns++] = p2;
    steps[ns++] = nextafterf(p2, 0);
    steps[ns++] = nextafterf(p2, INFINITY);
  }
  while (ns < 2000) {
    int e = (int)(q_next() % 121) - 60;
    steps[ns++] = ldexpf(1.0f + (float)(q_next() >> 40) * 0x1p-24f, e);
  }
  for (int i = 0; i < ns; i++) {
    const float s = steps[i];
    for (int fmt = 0; fmt < 2; fmt++)
      for (int c = 0; c < 0x7E; c++) { /* ties between codes c and c + 1 */
        float lo = gs_fp8_to_f32((uint8_t)c, fmt), hi = gs_fp8_to_f32((uint8_t)(c + 1), fmt);
        if (isnan(hi) || isinf(hi)) continue;
        float x = (lo + hi) / 2 * s;
        if (!isfinite(x) || fabsf(x) < 0x1p-126f) continue;
        for (int d = -1; d <= 1; d++) {
          float xd = gs_f32_from_bits(gs_f32_bits(x) + (uint32_t)d);
          check_quotient(xd, s, &bad, &n);
          check_quotient(-xd, s, &bad, &n);
        }
      }
    for (int k = 0; k < 2000; k++) {
      /* |x| from 2^-149 to just under 2^64 * s */
      float m = 1.0f + (float)(q_next() >> 40) * 0x1p-24f;
      int e = (int)(q_next() % 200) - 150;
      float x = ldexpf(m, e) * s;
      if (!isfinite(x) || fabsf(x) >= 0x1p64f * s) continue;
      check_quotient(q_next() & 1 ? -x : x, s, &bad, &n);
    }
    check_quotient(0.0f, s, &bad, &n);
    check_quotient(-0.0f, s, &bad, &n);
    check_quotient(gs_f32_from_bits(0x80000001u), s, &bad, &n);
  }
  print_message("reciprocal quotient: %zu inputs, %zu differ from the division\n", n, bad);
  if (bad) fail_msg("%zu of %zu quotients differ from the division", bad, n);
  assert_true(n > 1000000);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_decode_e4m3),
      cmocka_unit_test(test_decode_e5m2),
      cmocka_unit_test(test_encode_golden),
      cmocka_unit_test(test_round_trip_and_order),
      cmocka_unit_test(test_cvt_model),
      cmocka_unit_test(test_quotient_by_reciprocal),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
