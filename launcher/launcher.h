/* launcher.h: the gemmshim command (build/gemmshim, installed as
 * bin/gemmshim). It is linked with the shim's own objects (not the hooks),
 * so it checks options and policy files with the code the preloaded library
 * runs, and says the same things about them:
 *
 *   main.c        command line, the run: check, set the environment, exec
 *   policy_cmd.c  `gemmshim policy check|explain`
 *   locate.c      where the launcher, its library and its Python package are
 */
#ifndef GEMMSHIM_LAUNCHER_H
#define GEMMSHIM_LAUNCHER_H

#include <stddef.h>

/* Exit statuses of the launcher itself (a command it runs exits with its
 * own). 126/127 as the shell uses them. */
#define LAUNCH_EXIT_BAD_CHECK 1  /* a policy file or setting was refused */
#define LAUNCH_EXIT_USAGE 2      /* the command line was wrong */
#define LAUNCH_EXIT_CANNOT_EXEC 126
#define LAUNCH_EXIT_NOT_FOUND 127

/* "locate.c". Each returns 0 and fills out, or -1 with a message in err. */
int locate_self_dir(char *out, size_t len, char *err, size_t errlen);
int locate_library(char *out, size_t len, char *err, size_t errlen);
/* The folder holding the gemmshim Python package (for `gemmshim report`). */
int locate_python_dir(char *out, size_t len, char *err, size_t errlen);

/* "policy_cmd.c": argv[0] is "policy". Returns the exit status. */
int policy_command(int argc, char **argv);

#endif
