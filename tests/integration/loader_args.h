/* loader_args.h: the --cuda=N argument of the programs that load cuBLAS
 * themselves (client_framework, client_xla): which cuBLAS major version. */
#ifndef GEMMSHIM_TEST_LOADER_ARGS_H
#define GEMMSHIM_TEST_LOADER_ARGS_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* 12 or 13 from --cuda=N; -1 (after a message) when absent or another value. */
static inline int loader_cuda_major(int argc, char **argv) {
  for (int i = 1; i < argc; i++)
    if (!strncmp(argv[i], "--cuda=", 7)) {
      int n = atoi(argv[i] + 7);
      if (n == 12 || n == 13) return n;
      fprintf(stderr, "%s: --cuda must be 12 or 13, not %s\n", argv[0], argv[i] + 7);
      return -1;
    }
  fprintf(stderr, "%s: --cuda=12|13 is required\n", argv[0]);
  return -1;
}

#endif
