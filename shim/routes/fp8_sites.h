/* fp8_sites.h: fp8 call sites and their delayed-scaling state (fp8_sites.c).
 *
 * The fp8 route asks for the site of a call, gets it held (other threads
 * calling the same site wait; the table never evicts a held site), runs
 * its kernels with the site's rings, then releases it saying what ran.
 * Design and limits: docs/fp8-sites.md and the top of fp8_sites.c. */
#ifndef GEMMSHIM_FP8_SITES_H
#define GEMMSHIM_FP8_SITES_H

#include <stddef.h>
#include <stdint.h>

#include "../../kernels/fp8.h"
#include "../shim.h"

/* Operand roles a site records pointers for. */
enum { FP8_ROLE_A = 0, FP8_ROLE_B, FP8_ROLE_D, FP8_ROLES };

typedef struct fp8_site fp8_site;

/* One call's hold on its site. */
typedef struct fp8_use {
  fp8_site *site;
  uint64_t id;              /* also written to c->site */
  gs_fp8_ring *ring[2];     /* device memory: A's ring, B's ring */
  int fmt[2];               /* GS_FP8_E4M3 / GS_FP8_E5M2, fixed when the site was made */
  int gradient[2];          /* hybrid detection took this operand for a gradient */
  int parity;               /* quantize with scale[parity]; the kernel publishes parity ^ 1 */
  int needs_amax_init;      /* no call of this site has measured its operands yet */
  int capturing;            /* the stream is being captured (as given to acquire) */
} fp8_use;

/* What the route did with a held site, for fp8_site_release. */
#define FP8_RAN_AMAX_INIT 0x1u /* fp8_amax_init ran for both operands */
#define FP8_RAN_QUANTIZE 0x2u  /* both operands were quantized (the rings moved on) */

/* Find or make the site of call c (c->ctx, c->device, c->caller, c->g)
 * and hold it. capturing: the call's stream is being captured (no
 * allocation, no waits on other streams). Sets c->site, c->site_flags and
 * c->evicted_site as soon as the site is known. Returns NULL with *u
 * filled, or why the call cannot use fp8 (static or thread-local string;
 * nothing held then). */
const char *fp8_site_acquire(gs_call *c, int capturing, fp8_use *u);

/* End the hold: record `ran` (FP8_RAN_*), flip the parity after a
 * quantization outside capture, let other threads in. */
void fp8_site_release(fp8_use *u, unsigned ran);

/* 1 when the calling thread is known to run forward passes: the process
 * has shown PyTorch's autograd threads ("pt_autograd_<device>", which run
 * every backward GEMM) and this thread is not one of them. 0 when that
 * cannot be told (no autograd thread seen yet, or a program without one). */
int fp8_thread_forward(void);
/* Whether this thread is PyTorch's autograd thread: its GEMMs are backward
 * ones (dgrad, wgrad). */
int fp8_thread_backward(void);
/* Whether the process has shown an autograd thread (this one included):
 * before, backward GEMMs cannot be told from forward ones. */
int fp8_autograd_seen(void);

/* ---- for tests -------------------------------------------------------------- */
/* Live sites of context ctx (0 when it has none); of the newest context at
 * that address. */
size_t fp8_sites_live(void *ctx);
/* Ring memory allocated for context ctx, in bytes (never shrinks: evicted
 * sites' rings are reused, see fp8_sites.c). */
uint64_t fp8_sites_ring_bytes(void *ctx);
/* The current step number ("epoch") of context ctx, as the site table
 * detected it (fp8_sites.c). */
uint64_t fp8_sites_epoch(void *ctx);
/* Tables retired since the process started (each keeps a few hundred
 * bytes for the process), and slabs of slot records retired tables still
 * keep (while a call holds one of their sites). */
void fp8_sites_retired(uint64_t *tables, uint64_t *slabs_kept);

#endif
