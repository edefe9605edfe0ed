/* accuracy_read.h: the accuracy measure's page-locked slots
 * (accuracy_read.c), shared by the measure (accuracy.c). */
#ifndef GEMMSHIM_ACCURACY_READ_H
#define GEMMSHIM_ACCURACY_READ_H

#include "../kernels/accuracy_kernels.h"
#include "../kernels/fp8_stats.h"

/* A slot holds either what a compared call copies back: the accuracy
 * measure's statistics or the fp8 route's counters (routes/fp8_stats.c). */
typedef union gs_compare_slot {
  gs_acc_stats acc;
  gs_fp8_stats fp8;
} gs_compare_slot;

/* A slot of the context's pool, or NULL with *why set (static text). */
/* ctx: the call's context, by which a pool of a gone context is told. */
gs_compare_slot *accuracy_slot_take(void *ctx, unsigned long long ctx_id, const char **why);
void accuracy_slot_give(unsigned long long ctx_id, void *slot);

#endif
