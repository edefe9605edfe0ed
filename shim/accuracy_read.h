/* accuracy_read.h: the accuracy measure's page-locked slots
 * (accuracy_read.c), shared by the measure (accuracy.c). */
#ifndef GEMMSHIM_ACCURACY_READ_H
#define GEMMSHIM_ACCURACY_READ_H

#include "../kernels/accuracy_kernels.h"

/* A slot of the context's pool, or NULL with *why set (static text). */
/* ctx: the call's context, by which a pool of a gone context is told. */
gs_acc_stats *accuracy_slot_take(void *ctx, unsigned long long ctx_id, const char **why);
void accuracy_slot_give(unsigned long long ctx_id, void *slot);

#endif
