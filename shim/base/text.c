/* text.c: user-set values made fit to print: one line of valid UTF-8,
 * bounded, whatever bytes the user gave (a message or a JSON string must
 * not be forged or broken by a value it quotes). */
#include <stdio.h>
#include <string.h>

#include "base.h"

size_t gs_utf8_seq(const char *str, size_t n) {
  const unsigned char *s = (const unsigned char *)str;
  if (n == 0) return 0;
  if (s[0] < 0x80) return 1;
  /* RFC 3629 section 4: the second byte's range depends on the first (no
   * overlong forms, no surrogates, nothing past U+10FFFF); later bytes
   * are 80..BF. */
  size_t len;
  unsigned char lo = 0x80, hi = 0xbf;
  if (s[0] >= 0xc2 && s[0] <= 0xdf) len = 2;
  else if (s[0] >= 0xe0 && s[0] <= 0xef) len = 3, lo = s[0] == 0xe0 ? 0xa0 : 0x80, hi = s[0] == 0xed ? 0x9f : 0xbf;
  else if (s[0] >= 0xf0 && s[0] <= 0xf4) len = 4, lo = s[0] == 0xf0 ? 0x90 : 0x80, hi = s[0] == 0xf4 ? 0x8f : 0xbf;
  else return 0;
  if (n < len || s[1] < lo || s[1] > hi) return 0;
  for (size_t i = 2; i < len; i++)
    if (s[i] < 0x80 || s[i] > 0xbf) return 0;
  return len;
}

/* Control characters and bytes that are not UTF-8 as \xNN, so that the
 * text stays one line of valid UTF-8 wherever it goes (a terminal, a JSON
 * string: RFC 8259 section 8.1 wants UTF-8); cut only between characters. */
const char *gs_quote_n(const char *s, size_t n, char *out) {
  static const char hex[] = "0123456789abcdef";
  char *o = out;
  size_t i = 0;
  while (i < n) {
    unsigned char ch = (unsigned char)s[i];
    size_t seq = ch >= 0x80 ? gs_utf8_seq(s + i, n - i) : 1;
    if (i + (seq ? seq : 1) > GS_QUOTE_MAX) break; /* a character that does not fit whole is left out */
    if (ch == '\n') *o++ = '\\', *o++ = 'n';
    else if (ch == '\t') *o++ = '\\', *o++ = 't';
    else if (ch == '\r') *o++ = '\\', *o++ = 'r';
    else if (ch == '\\') *o++ = '\\', *o++ = '\\';
    else if (ch < 0x20 || ch == 0x7f || seq == 0) *o++ = '\\', *o++ = 'x', *o++ = hex[ch >> 4], *o++ = hex[ch & 15];
    else memcpy(o, s + i, seq), o += seq;
    i += seq ? seq : 1;
  }
  if (i < n) snprintf(o, 32, "...(%zu bytes)", n);
  else *o = '\0';
  return out;
}

const char *gs_quote(const char *s, char *out) { return gs_quote_n(s ? s : "", s ? strlen(s) : 0, out); }
