/* client_log.h: the integration clients' wait for the shim's routing log. */
#ifndef GEMMSHIM_TEST_CLIENT_LOG_H
#define GEMMSHIM_TEST_CLIENT_LOG_H

/* Polls (every 1 ms, 60 s at most) until the file at path holds `records`
 * record lines: every line but the shim's header line (one per process,
 * docs/log-format.md). 1 when it does, 0 when the time ran out. */
int client_log_wait(const char *path, int records);

#endif
