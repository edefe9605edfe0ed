/* test_log_keys.c: the keys the routing log's format page
 * (docs/log-format.md) lists are the log's own, GS_LOG_FIELDS
 * (log_format.h), in its order, and those docs/log.md explains are some of
 * them, in the same order: the code holds the one list, and a key added,
 * removed or moved there without the pages fails here.
 * Each page is read from the source tree (the test runs from its root);
 * the keys are the backquoted names in the first column of the table's
 * rows, in the order they stand. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "log_format.h"

static const char *const log_keys[] = {GS_LOG_FIELDS(LOG_KEY_NAME)};
#define WHEN_NAME(key, type, kind, when, from) #when,
static const char *const log_whens[] = {GS_LOG_FIELDS(WHEN_NAME)};
#define N_KEYS (sizeof log_keys / sizeof log_keys[0])

static char *read_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) fail_msg("cannot open %s (run from the source tree's root)", path);
  static char text[256 * 1024];
  size_t n = fread(text, 1, sizeof text - 1, f);
  fclose(f);
  text[n] = '\0';
  return text;
}

/* The keys of the table that follows the first line starting with
 * `heading`: each row's first cell, its `name`s in order. */
static size_t table_keys(const char *path, const char *heading, char keys[][32], size_t max) {
  char *text = read_file(path);
  char *at = strstr(text, heading);
  if (!at || (at != text && at[-1] != '\n')) fail_msg("%s: no line starting '%s'", path, heading);
  char *line = strchr(at, '\n');
  size_t n = 0;
  int in_table = 0;
  while (line && *++line) {
    char *end = strchr(line, '\n');
    if (end) *end = '\0';
    if (line[0] != '|') {
      if (in_table) break;
    } else {
      in_table = 1;
      char *cell_end = strchr(line + 1, '|');
      for (char *p = line + 1; cell_end && p < cell_end; p++) {
        char *close = *p == '`' ? strchr(p + 1, '`') : NULL;
        if (!close || close > cell_end) continue;
        size_t len = (size_t)(close - p - 1);
        if (n < max && len < sizeof keys[0]) memcpy(keys[n], p + 1, len), keys[n][len] = '\0';
        n++;
        p = close;
      }
    }
    line = end;
  }
  return n;
}

static void check_page(const char *path, const char *heading) {
  char keys[96][32];
  size_t n = table_keys(path, heading, keys, 96);
  for (size_t i = 0; i < n && i < N_KEYS; i++)
    if (strcmp(keys[i], log_keys[i]) != 0)
      fail_msg("%s: key %zu is '%s'; the log writes '%s' there (GS_LOG_FIELDS)", path, i + 1, keys[i], log_keys[i]);
  if (n != N_KEYS) fail_msg("%s: %zu keys listed, the log has %zu", path, n, N_KEYS);
}

static void test_format_page_lists_every_key_in_order(void **state) {
  (void)state;
  check_page("docs/log-format.md", "## Keys");
}

/* docs/log.md explains some keys and links the format page for all of
 * them: each key it names is one the log writes, in the log's order. */
static void test_log_page_names_log_keys_in_order(void **state) {
  (void)state;
  char keys[64][32];
  size_t n = table_keys("docs/log.md", "## Fields", keys, 64), at = 0;
  if (n == 0 || n > 64) fail_msg("docs/log.md: %zu keys in the table under '## Fields'; expected 1 to 64", n);
  for (size_t i = 0; i < n; i++) {
    while (at < N_KEYS && strcmp(log_keys[at], keys[i]) != 0) at++;
    if (at == N_KEYS)
      fail_msg("docs/log.md: key %zu '%s' is not a key the log writes, or stands out of its order (GS_LOG_FIELDS)",
               i + 1, keys[i]);
    at++;
  }
}

/* The list itself: 69 keys, the first one always written (format_body
 * turns its comma into the opening brace), none twice. */
static void test_key_list(void **state) {
  (void)state;
  assert_int_equal(N_KEYS, 69);
  assert_string_equal(log_keys[0], "seq");
  assert_string_equal(log_whens[0], "ALWAYS");
  for (size_t i = 0; i < N_KEYS; i++)
    for (size_t j = i + 1; j < N_KEYS; j++) assert_string_not_equal(log_keys[i], log_keys[j]);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_key_list),
      cmocka_unit_test(test_format_page_lists_every_key_in_order),
      cmocka_unit_test(test_log_page_names_log_keys_in_order),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
