/* test_kernels.c: host kernels for the stand-in self-test, written to the
 * standin_kernel.h contract the way the shim's kernels will be: every block
 * and thread of the launch is walked explicitly. */
#include "standin_kernel.h"

#include <stdint.h>
#include <string.h>

/* saxpy(int n, float a, const float *x, float *y): y[i] = a x[i] + y[i],
 * one element per thread of a 1-D launch. */
int standin_kernel_saxpy(const standin_launch *l) {
  int n = *(const int *)l->params[0];
  float a = *(const float *)l->params[1];
  const float *x = *(const float *const *)l->params[2];
  float *y = *(float *const *)l->params[3];
  for (unsigned bx = 0; bx < l->grid.x; bx++)
    for (unsigned tx = 0; tx < l->block.x; tx++) {
      long i = (long)bx * l->block.x + tx;
      if (i < n) y[i] = a * x[i] + y[i];
    }
  return 0;
}

/* shared_probe(unsigned *out): out[0] = dynamic shared bytes seen, out[1] =
 * 1 if they all held the 0xA5 poison, out[2] = blocks run, out[3..5] = the
 * block dimensions, out[6] = the device's capability (major*10+minor). */
int standin_kernel_shared_probe(const standin_launch *l) {
  unsigned *out = *(unsigned *const *)l->params[0];
  const unsigned char *s = l->shared;
  unsigned poisoned = 1;
  for (unsigned i = 0; i < l->shared_bytes; i++) poisoned &= s[i] == 0xA5;
  out[0] = l->shared_bytes;
  out[1] = poisoned;
  out[2] = l->grid.x * l->grid.y * l->grid.z;
  out[3] = l->block.x;
  out[4] = l->block.y;
  out[5] = l->block.z;
  out[6] = (unsigned)(l->cc_major * 10 + l->cc_minor);
  return 0;
}

/* fault(): reports an out-of-bounds access, as a GPU would on a bad
 * address (CUDA_ERROR_ILLEGAL_ADDRESS). */
int standin_kernel_fault(const standin_launch *l) {
  (void)l;
  return 700;
}
