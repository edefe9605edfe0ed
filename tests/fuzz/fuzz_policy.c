/* fuzz_policy.c: libFuzzer harness for the policy file parser
 * (policy/policy.c). The input is a policy file's text.
 *
 * Invariants (beyond "no crash, no sanitizer report"):
 *   - a rejected file gives one message: one line of printable text,
 *     "<path>:<line>: ...; expected ...", and leaves exactly the built-in
 *     table in place;
 *   - an accepted table ends with the built-in rules unless the file says
 *     "builtin off", and every rule's description (policy_rule_describe),
 *     parsed again as a one-line policy file, gives the same rule;
 *   - matching any key on an accepted table returns -1 or a rule index
 *     whose rule, matched on its own, also matches the key. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "policy.h"

#define PATH "fuzz.policy"

static policy_table table, again, builtin;

static void die(const char *what, const char *detail) {
  fprintf(stderr, "fuzz_policy: invariant broken: %s\n  %s\n", what, detail);
  abort();
}

static void check_message(const char *err, size_t errlen) {
  if (!memchr(err, '\0', errlen)) die("message not NUL-terminated", "");
  if (strncmp(err, PATH ":", strlen(PATH) + 1) != 0) die("message does not start with path:line", err);
  for (const char *p = err; *p; p++)
    if ((unsigned char)*p < 0x20 || (unsigned char)*p > 0x7e) die("message has a control or non-ASCII byte", err);
  if (!strstr(err, "; expected ")) die("message does not say what was expected", err);
}

static int same_rule(const policy_rule *a, const policy_rule *b) {
  return a->route == b->route && a->has_sm == b->has_sm && a->sm_lo == b->sm_lo && a->sm_hi == b->sm_hi &&
         a->ab_types == b->ab_types && a->c_types == b->c_types && a->compute_types == b->compute_types &&
         a->apis == b->apis;
}

/* "fuzz.policy:3 (fp8 sm=8.9- ab=fp16,bf16)" -> "fp8 sm=8.9- ab=fp16,bf16". */
static void check_describe_reparse(const policy_table *t, int i) {
  char desc[1024], err[1024];
  int n = policy_rule_describe(t, i, desc, sizeof desc);
  if (n <= 0 || (size_t)n >= sizeof desc) die("description empty or cut", desc);
  char *open = strchr(desc, '('), *close = strrchr(desc, ')');
  if (!open || !close || close < open || close[1] != '\0') die("description not 'where (rule)'", desc);
  *close = '\0';
  char text[1100];
  int len = snprintf(text, sizeof text, "%s\nbuiltin off\n", open + 1);
  if (policy_parse(&again, text, (size_t)len, "describe", err, sizeof err) != 0) {
    fprintf(stderr, "description: %s\nerror: %s\n", open + 1, err);
    die("a rule's description does not parse again", open + 1);
  }
  if (again.n != 1 || !same_rule(&again.rules[0], &t->rules[i])) die("description parses to another rule", open + 1);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char err[1024];
  memset(err, 'x', sizeof err);
  policy_builtin(&builtin);
  int rc = policy_parse(&table, (const char *)data, size, PATH, err, sizeof err);
  if (rc != 0) {
    if (rc != -1) die("policy_parse returned neither 0 nor -1", "");
    check_message(err, sizeof err);
    if (table.n != builtin.n || memcmp(table.rules, builtin.rules, sizeof(policy_rule) * (size_t)builtin.n) != 0)
      die("a rejected file did not leave the built-in table", err);
    return 0;
  }
  if (err[0] != '\0') die("an accepted file left a message", err);
  if (table.n < 0 || table.n > POLICY_MAX_RULES) die("rule count out of range", "");
  if (strcmp(table.source, PATH) != 0) die("source is not the path", table.source);
  /* Built-ins, when present, are the last rules and unchanged. */
  int file_rules = 0;
  while (file_rules < table.n && table.rules[file_rules].line > 0) file_rules++;
  int tail = table.n - file_rules;
  if (tail != 0 && tail != builtin.n) die("built-in rules missing or partial", "");
  for (int i = 0; i < tail; i++)
    if (!same_rule(&table.rules[file_rules + i], &builtin.rules[i]) || table.rules[file_rules + i].line != 0)
      die("built-in rules changed", "");
  for (int i = 0; i < table.n; i++) check_describe_reparse(&table, i);
  /* Matching: keys drawn from the input's own bytes. */
  for (size_t off = 0; off + 6 <= size && off < 64; off += 6) {
    policy_key k = {.sm = data[off] % 2 ? POLICY_SM_UNKNOWN : data[off + 1] % 130,
                    .a_type = data[off + 2] % 70, .b_type = data[off + 3] % 70, .c_type = data[off + 4] % 70,
                    .compute_type = 60 + data[off + 5] % 80, .api = (gs_api)(data[off] % GS_API_COUNT)};
    int m = policy_match(&table, &k);
    if (m < -1 || m >= table.n) die("policy_match out of range", "");
    if (m >= 0) {
      again.n = 1;
      again.rules[0] = table.rules[m];
      if (policy_match(&again, &k) != 0) die("matched rule does not match alone", "");
      for (int j = 0; j < m; j++) {
        again.rules[0] = table.rules[j];
        if (policy_match(&again, &k) == 0) die("an earlier rule matches too", "");
      }
    }
    int w = policy_route_without_sm(&table, &k);
    if (w != -1 && m >= 0 && w != (int)table.rules[m].route)
      die("policy_route_without_sm disagrees with policy_match", "");
  }
  return 0;
}
