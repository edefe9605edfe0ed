/* locate.c: the launcher finds its library and Python package relative to
 * its own file, so one binary works wherever it was put:
 *
 *   layout          launcher                    library / Python package
 *   build tree      $(BUILD)/gemmshim           $(BUILD)/libgemmshim.so, the source
 *                                               tree's python/ (its path is built in)
 *   make install    PREFIX/bin/gemmshim         PREFIX/lib/gemmshim/libgemmshim.so,
 *                                               PREFIX/lib/gemmshim/python/
 *   wheel           site-packages/gemmshim/_native/gemmshim
 *                                               ... /_native/libgemmshim.so,
 *                                               site-packages/
 *
 * Symbolic links to the launcher are followed (/proc/self/exe is the real
 * file), so a link in ~/bin finds the real layout. */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "launcher.h"

#ifndef GEMMSHIM_SOURCE_PYTHON
#error "GEMMSHIM_SOURCE_PYTHON: the source tree's python/ folder, set by launcher.mk"
#endif

int locate_self_dir(char *out, size_t len, char *err, size_t errlen) {
  char exe[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) {
    snprintf(err, errlen, "cannot read /proc/self/exe (%s); expected /proc to be mounted", strerror(errno));
    return -1;
  }
  exe[n] = '\0';
  char *slash = strrchr(exe, '/');
  if (!slash || (size_t)(slash - exe) >= len) {
    snprintf(err, errlen, "cannot tell the launcher's folder from '%s'", exe);
    return -1;
  }
  *slash = '\0';
  snprintf(out, len, "%s", exe[0] ? exe : "/");
  return 0;
}

/* The first of candidates (relative to the launcher's folder) for which
 * dir/candidate/probe exists, resolved, into out. */
static int first_existing(const char *const *candidates, const char *probe, const char *what, char *out,
                          size_t len, char *err, size_t errlen) {
  char dir[PATH_MAX];
  if (locate_self_dir(dir, sizeof dir, err, errlen) != 0) return -1;
  char tried[2048] = "";
  size_t used = 0;
  for (int i = 0; candidates[i]; i++) {
    char path[PATH_MAX * 2], real[PATH_MAX];
    /* An absolute candidate stands alone; a relative one is under dir. */
    int absolute = candidates[i][0] == '/';
    snprintf(path, sizeof path, "%s%s%s%s%s", absolute ? "" : dir, absolute ? "" : "/", candidates[i],
             probe[0] ? "/" : "", probe);
    if (realpath(path, real) && access(real, R_OK) == 0) {
      if (!probe[0]) {
        snprintf(out, len, "%s", real);
      } else {
        /* The folder the probe is in, as resolved. */
        size_t cut = strlen(real) - strlen(probe) - 1;
        snprintf(out, len, "%.*s", (int)cut, real);
      }
      return 0;
    }
    used += (size_t)snprintf(tried + used, used < sizeof tried ? sizeof tried - used : 0, "%s%s", i ? ", " : "",
                             path);
    if (used >= sizeof tried) used = sizeof tried - 1;
  }
  snprintf(err, errlen, "cannot find %s; looked for %s", what, tried);
  return -1;
}

int locate_library(char *out, size_t len, char *err, size_t errlen) {
  static const char *const candidates[] = {"libgemmshim.so", "../lib/gemmshim/libgemmshim.so", NULL};
  return first_existing(candidates, "", "libgemmshim.so next to the launcher", out, len, err, errlen);
}

int locate_python_dir(char *out, size_t len, char *err, size_t errlen) {
  /* The source tree's comes last: an installed copy uses its own. */
  static const char *const candidates[] = {"../lib/gemmshim/python", "../..", GEMMSHIM_SOURCE_PYTHON, NULL};
  return first_existing(candidates, "gemmshim/cli.py", "the gemmshim Python package", out, len, err, errlen);
}
