/* A private scratch folder for one unit program: made with mkdtemp, and
 * removed with everything in it (nftw, depth first, links not followed, so
 * nothing outside the folder is touched and no shell sees the path). */
#ifndef GEMMSHIM_TEST_TMPDIR_H
#define GEMMSHIM_TEST_TMPDIR_H

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>

/* dir (size n) becomes /tmp/gemmshim_test_<name>.XXXXXX, made; 0 or -1. */
static inline int tmpdir_make(char *dir, size_t n, const char *name) {
  if ((size_t)snprintf(dir, n, "/tmp/gemmshim_test_%s.XXXXXX", name) >= n) return -1;
  return mkdtemp(dir) ? 0 : -1;
}

static inline int tmpdir_remove_one(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
  (void)st;
  (void)flag;
  (void)ftw;
  return remove(path) == 0 ? 0 : -1;
}

/* Removes dir and all it holds; 0, or -1 at the first entry that could
 * not be removed. */
static inline int tmpdir_remove(const char *dir) {
  return nftw(dir, tmpdir_remove_one, 16, FTW_DEPTH | FTW_PHYS);
}

#endif
