/* log_summary.h: the exit summary's counters (log_summary.c). */
#ifndef GEMMSHIM_LOG_SUMMARY_H
#define GEMMSHIM_LOG_SUMMARY_H

#include "shim.h"

/* All three run under the log's lock (log.c), which is what keeps a late
 * record from changing the counters while they are printed. */
void log_summary_reset(void);              /* no call counted */
void log_summary_count(const gs_call *c);  /* one call: its api, route, reason and site */
void log_summary_print(void);              /* the INFO lines: calls per api and route, top reasons and sites */

#endif
