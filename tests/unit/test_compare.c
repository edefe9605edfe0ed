/* Which routed calls GEMMSHIM_COMPARE runs native as well (compare.c's
 * compare_due): a site's first call and then every Nth (docs/environment.md's options
 * table), and, where sites share a set of the table, no more than the
 * bound compare.c states (2C/N + sets * (ways + 1) over C calls), never
 * every call. Exact counts, with sites chosen to share one set. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "shim.h"

#define WAYS 4 /* compare.c's COMPARE_WAYS: the contract the bound is stated in */

/* n distinct site ids that share one set of the table. */
static void same_set(uint64_t *ids, int n) {
  unsigned want = compare_set_of(0x9e3779b97f4a7c15ull);
  int found = 0;
  for (uint64_t id = 0x9e3779b97f4a7c15ull; found < n; id += 0x100000001b3ull)
    if (compare_set_of(id) == want) ids[found++] = id;
}

static int setup(void **state) {
  compare_forget_for_tests();
  gs_opt.compare_every = 100; /* the option's default */
  return 0;
}

static void test_first_call_then_every_nth(void **state) {
  gs_opt.compare_every = 3;
  int due[10];
  for (int i = 0; i < 10; i++) due[i] = compare_due(0x1234);
  int want[10] = {1, 0, 0, 1, 0, 0, 1, 0, 0, 1};
  assert_memory_equal(due, want, sizeof due);
}

/* A call that asked and then declined (ran native) gives its count back:
 * the site's next call is asked as it was, so the first routed call of
 * the site is still the first compared (compare.c's contract). */
static void test_a_declined_call_does_not_count(void **state) {
  gs_opt.compare_every = 3;
  gs_call c;
  memset(&c, 0, sizeof c);
  c.site = 0x1234;
  assert_true(compare_decide(&c)); /* the first: due */
  compare_forgo(&c);
  assert_int_equal(c.compare_asked, 0);
  int due[7];
  for (int i = 0; i < 7; i++) {
    memset(&c, 0, sizeof c);
    c.site = 0x1234;
    due[i] = compare_decide(&c);
    if (i == 1) compare_forgo(&c); /* a not-due call declined too: no count */
  }
  int want[7] = {1, 0, 0, 0, 1, 0, 0};
  assert_memory_equal(due, want, sizeof due);
}

/* The pattern that found the defect: two sites that share a place of the
 * table, called in turn. Each must keep its own count: calls 1 and 101 of
 * each are compared, 4 of 300 (a direct-mapped table compared all 300). */
static void test_two_sites_sharing_a_set_keep_their_counts(void **state) {
  uint64_t id[2];
  same_set(id, 2);
  int compared = 0, at[8], n = 0;
  for (int i = 0; i < 300; i++)
    if (compare_due(id[i % 2])) {
      compared++;
      if (n < 8) at[n++] = i;
    }
  assert_int_equal(compared, 4);
  int want[4] = {0, 1, 200, 201};
  assert_memory_equal(at, want, sizeof want);
}

/* More busy sites than a set has places, in turn: every call evicts the
 * least recently called site. The four free places give four first calls,
 * then one newcomer in every 100 calls of the set: calls 5, 105, 205. */
static void test_more_sites_than_places_compare_once_per_n(void **state) {
  uint64_t id[WAYS + 1];
  same_set(id, WAYS + 1);
  int at[16], n = 0;
  for (int i = 0; i < 300; i++)
    if (compare_due(id[i % (WAYS + 1)]) && n < 16) at[n++] = i;
  int want[7] = {0, 1, 2, 3, 4, 104, 204};
  assert_int_equal(n, 7);
  assert_memory_equal(at, want, sizeof want);
}

/* Any order of any number of sites in one set stays within compare.c's
 * bound for a set: 2C/N + ways + 1. A fixed-seed mix of 12 sites in runs
 * of 1 to 7 calls, which keeps evicting kept sites too. */
static void test_any_order_stays_within_the_bound(void **state) {
  enum { SITES = 12, CALLS = 200000 };
  uint64_t id[SITES];
  same_set(id, SITES);
  uint64_t x = 0x2545F4914F6CDD1Dull;
  long compared = 0;
  for (int i = 0; i < CALLS;) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17; /* xorshift64 */
    int site = (int)(x % SITES), run = 1 + (int)((x >> 32) % 7);
    for (int r = 0; r < run && i < CALLS; r++, i++) compared += compare_due(id[site]);
  }
  assert_true(compared <= 2L * CALLS / 100 + WAYS + 1);
  assert_true(compared > 0);
}

/* Sites of different sets do not touch each other's counts. */
static void test_other_sets_are_apart(void **state) {
  uint64_t a[WAYS + 1];
  same_set(a, WAYS + 1);
  uint64_t b = a[0] + 1;
  while (compare_set_of(b) == compare_set_of(a[0])) b++;
  assert_true(compare_due(b));
  for (int i = 0; i < 1000; i++) compare_due(a[i % (WAYS + 1)]);
  for (int i = 1; i < 100; i++) assert_false(compare_due(b));
  assert_true(compare_due(b)); /* its 101st call */
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup(test_first_call_then_every_nth, setup),
      cmocka_unit_test_setup(test_a_declined_call_does_not_count, setup),
      cmocka_unit_test_setup(test_two_sites_sharing_a_set_keep_their_counts, setup),
      cmocka_unit_test_setup(test_more_sites_than_places_compare_once_per_n, setup),
      cmocka_unit_test_setup(test_any_order_stays_within_the_bound, setup),
      cmocka_unit_test_setup(test_other_sets_are_apart, setup),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
