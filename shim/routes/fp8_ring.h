/* fp8_ring.h: putting a new gs_fp8_ring (kernels/fp8.h) on a stream
 * (fp8_ring.c), for the recipes that keep rings: a delayed-scaling site's
 * pair (fp8_sites.c) and a current-scaling call's transient pair
 * (fp8_current.c). */
#ifndef GEMMSHIM_FP8_RING_H
#define GEMMSHIM_FP8_RING_H

#include <cuda.h>
#include <stdint.h>

/* A ring as fp8.h wants it new: zero, scale[0] = scale[1] = 1, `history`
 * entries, format fmt and 2^margin (margin <= 64). Memsets on stream only:
 * legal during capture, ordered before the ring's first use, no host
 * wait. The caller has the ring's context current. On failure *failed
 * names the driver call that failed, for the call's reason. */
CUresult fp8_ring_init(CUdeviceptr ring, int fmt, unsigned history, unsigned margin, CUstream stream,
                       const char **failed);

#endif
