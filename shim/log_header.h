/* log_header.h: the routing log's first line of each process (log_header.c). */
#ifndef GEMMSHIM_LOG_HEADER_H
#define GEMMSHIM_LOG_HEADER_H

#include <stddef.h>

/* A header line is at most this long: one write a pipe takes whole
 * (PIPE_BUF, pipe(7)), so processes appending to one pipe never mix lines. */
#define LOG_HEADER_MAX 4096

/* The header line of this process, '\n' included, into buf (len bytes,
 * at least LOG_HEADER_MAX); its length, or 0 when it could not be made. */
size_t log_header_format(char *buf, size_t len);

#endif
