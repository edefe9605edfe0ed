/* client_log.c: the integration clients' wait for the shim's routing log
 * (client_log.h): a client that needs the shim's log writer to have read
 * a call (its measurement, its events) waits for the call's record. */
#define _GNU_SOURCE
#include <stdio.h>
#include <time.h>

#include "client_log.h"

int client_log_wait(const char *path, int records) {
  static const char header[] = "{\"header\":";
  for (int tries = 0; tries < 60000; tries++) {
    FILE *f = fopen(path, "r");
    int n = 0, ch, at = 0, is_header = 1;
    if (f) {
      while ((ch = fgetc(f)) != EOF) {
        if (at < (int)sizeof header - 1 && ch != header[at]) is_header = 0;
        at++;
        if (ch == '\n') n += !(is_header && at > (int)sizeof header - 1), at = 0, is_header = 1;
      }
      fclose(f);
    }
    if (n >= records) return 1;
    struct timespec ms = {0, 1000000};
    nanosleep(&ms, NULL);
  }
  return 0;
}
