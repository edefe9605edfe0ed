/* main.c: `gemmshim [options] [--] command [args...]`, the way heaptrack or
 * faketime start a program: every option becomes the GEMMSHIM_* variable of
 * the same name (--fp8-format -> GEMMSHIM_FP8_FORMAT, from the shim's one
 * options table), the whole configuration is checked by the shim's own code
 * (shim/options.c, policy/policy.c) before anything runs, the library goes
 * first in LD_PRELOAD, and the launcher execs the command: its pid, exit
 * status and signals are the command's own. Children the command starts
 * (torchrun's or mpirun's ranks, DataLoader workers) inherit the
 * environment, and %r/%p in the log path keep their logs apart.
 *
 * A bad option, setting or policy file stops the launcher with the shim's
 * message and exit status 1 or 2 rather than a program whose GEMMs all run
 * native (what the preloaded library does with a bad configuration). */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../shim/shim.h"
#include "launcher.h"

extern const char gemmshim_version[]; /* shim/resolve.c */

#define PROG "gemmshim"
#define OPTION_MAX 64

static void usage_line(FILE *f) {
  fprintf(f,
          "usage: " PROG " [options] [--] command [args...]\n"
          "       " PROG " policy check FILE\n"
          "       " PROG " policy explain --sm X.Y --ab TYPE --c TYPE --compute TYPE --api NAME [--shape MxNxK] [--policy FILE] ...\n"
          "       " PROG " report [args...]\n"
          "       " PROG " --version | --help | --print-lib\n");
}

/* "GEMMSHIM_FP8_FORMAT" -> "fp8-format". */
static void option_flag(const char *var, char *out, size_t len) {
  const char *s = var + strlen("GEMMSHIM_");
  size_t i = 0;
  for (; s[i] && i + 1 < len; i++) out[i] = s[i] == '_' ? '-' : (char)(s[i] >= 'A' && s[i] <= 'Z' ? s[i] + 32 : s[i]);
  out[i] = '\0';
}

static void print_help(void) {
  usage_line(stdout);
  printf("\nRuns command with libgemmshim.so preloaded. Each option sets the shim's variable of\n"
         "the same name for the command and everything it starts; the settings and the policy\n"
         "file are checked first, and a bad one stops here (exit 1). A relative path given to an\n"
         "option is made absolute, so children that change folder write where you asked.\n"
         "A program called 'policy' or 'report' is run as: " PROG " -- policy ...\n\nOptions (variable, default):\n");
  const char *def, *meaning;
  const char *var;
  for (size_t i = 0; (var = options_describe(i, &def, &meaning, NULL)); i++) {
    char flag[OPTION_MAX];
    option_flag(var, flag, sizeof flag);
    printf("  --%-17s %s, default '%s'\n  %-19s %s\n", flag, var, def, "", meaning);
  }
  printf("  --%-17s print the library's path (for LD_PRELOAD=$(" PROG " --print-lib))\n", "print-lib");
  printf("  --%-17s print the version and the library's path\n", "version");
  printf("\nSubcommands:\n"
         "  policy check FILE    parse a policy file as the shim does; list its rules in match order\n"
         "  policy explain ...   which rule a GEMM matches and why the rules before it do not\n"
         "  report [args...]     summarize routing logs (Python module gemmshim.report)\n"
         "\nExit status: the command's own; 1 bad settings or policy file, 2 bad command line,\n"
         "126 command not runnable, 127 command not found.\n");
}

__attribute__((format(printf, 1, 2)))
static int usage_error(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, PROG ": ");
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
  usage_line(stderr);
  return LAUNCH_EXIT_USAGE;
}

static void print_problem(const char *message, void *arg) {
  (void)arg;
  fprintf(stderr, PROG ": %s\n", message);
}

/* --name=value or --name value, name from the options table. Returns the
 * number of arguments used, 0 when argv[i] is not one, -1 on an error
 * already reported. */
static int take_option(int argc, char **argv, int i) {
  const char *arg = argv[i] + 2;
  const char *eq = strchr(arg, '=');
  size_t name_len = eq ? (size_t)(eq - arg) : strlen(arg);
  const char *var;
  int is_path;
  for (size_t o = 0; (var = options_describe(o, NULL, NULL, &is_path)); o++) {
    char flag[OPTION_MAX];
    option_flag(var, flag, sizeof flag);
    if (strlen(flag) != name_len || strncmp(flag, arg, name_len) != 0) continue;
    const char *value = eq ? eq + 1 : (i + 1 < argc ? argv[i + 1] : NULL);
    if (!value) {
      usage_error("--%s needs a value; expected --%s VALUE or --%s=VALUE", flag, flag, flag);
      return -1;
    }
    char abs[PATH_MAX + 1024];
    if (is_path && value[0] && value[0] != '/') {
      char cwd[PATH_MAX];
      if (!getcwd(cwd, sizeof cwd)) {
        fprintf(stderr, PROG ": --%s '%s': cannot make it absolute: %s\n", flag, value, strerror(errno));
        return -1;
      }
      snprintf(abs, sizeof abs, "%s/%s", cwd, value);
      value = abs;
    }
    setenv(var, value, 1);
    return eq ? 1 : 2;
  }
  return 0;
}

/* LD_PRELOAD with lib first, once; the rest keep their order. ld.so
 * separates entries by colons or spaces (ld.so(8)). */
static int set_preload(const char *lib) {
  if (strpbrk(lib, ": ")) {
    fprintf(stderr, PROG ": the library's path '%s' has a colon or a space, which LD_PRELOAD cannot hold; "
                    "expected it installed under a path without them\n", lib);
    return -1;
  }
  const char *old = getenv("LD_PRELOAD");
  size_t room = strlen(lib) + (old ? strlen(old) : 0) + 2;
  char *list = malloc(room), *copy = old ? strdup(old) : NULL;
  if (!list || (old && !copy)) {
    fprintf(stderr, PROG ": out of memory\n");
    return -1;
  }
  size_t used = (size_t)snprintf(list, room, "%s", lib);
  char *save = NULL;
  for (char *tok = copy ? strtok_r(copy, ": ", &save) : NULL; tok; tok = strtok_r(NULL, ": ", &save))
    if (strcmp(tok, lib) != 0) used += (size_t)snprintf(list + used, room - used, ":%s", tok);
  setenv("LD_PRELOAD", list, 1);
  free(list);
  free(copy);
  return 0;
}

/* One line on stderr: where this process's routing log goes. The pid is
 * the command's (exec keeps it); other processes expand the pattern
 * themselves. Refuses a log whose folder does not exist: the shim would
 * then write nothing. */
static int announce_log(void) {
  if (!gs_opt.log_path[0]) {
    fprintf(stderr, PROG ": routing log: none (--log PATH writes one; %%p pid, %%h host, %%r rank)\n");
    return 0;
  }
  char path[sizeof gs_opt.log_path + 512];
  if (path_expand_here(gs_opt.log_path, path, sizeof path) != 0) {
    fprintf(stderr, PROG ": GEMMSHIM_LOG='%s': too long once %%p, %%h and %%r are filled in\n", gs_opt.log_path);
    return -1;
  }
  char dir[sizeof path];
  snprintf(dir, sizeof dir, "%s", path);
  char *slash = strrchr(dir, '/');
  if (slash) *slash = '\0';
  const char *folder = slash ? (dir[0] ? dir : "/") : ".";
  if (access(folder, W_OK | X_OK) != 0) {
    fprintf(stderr, PROG ": GEMMSHIM_LOG='%s': folder '%s' is not writable (%s); expected an existing folder\n",
            gs_opt.log_path, folder, strerror(errno));
    return -1;
  }
  if (strcmp(path, gs_opt.log_path) == 0)
    fprintf(stderr, PROG ": routing log: %s\n", path);
  else
    fprintf(stderr, PROG ": routing log: %s (this process: %s; each process fills in %%p, %%h and %%r itself)\n",
            gs_opt.log_path, path);
  return 0;
}

/* `gemmshim report ...`: the Python package's report entry, with this
 * launcher's package first on the path. */
static int report_command(int argc, char **argv) {
  char dir[PATH_MAX], err[PATH_MAX * 4];
  if (locate_python_dir(dir, sizeof dir, err, sizeof err) != 0) {
    fprintf(stderr, PROG " report: unavailable: %s\n", err);
    return LAUNCH_EXIT_USAGE;
  }
  const char *old = getenv("PYTHONPATH");
  char path[PATH_MAX * 2];
  snprintf(path, sizeof path, "%s%s%s", dir, old && *old ? ":" : "", old && *old ? old : "");
  setenv("PYTHONPATH", path, 1);
  const char *python = "python3";
  char **args = calloc((size_t)argc + 4, sizeof *args);
  if (!args) return LAUNCH_EXIT_CANNOT_EXEC;
  args[0] = (char *)python;
  args[1] = "-c";
  args[2] = "import sys; from gemmshim.cli import report_main; sys.exit(report_main(sys.argv[1:]))";
  for (int i = 1; i < argc; i++) args[i + 2] = argv[i];
  execvp(python, args);
  fprintf(stderr, PROG " report: cannot run %s: %s\n", python, strerror(errno));
  return errno == ENOENT ? LAUNCH_EXIT_NOT_FOUND : LAUNCH_EXIT_CANNOT_EXEC;
}

int main(int argc, char **argv) {
  char lib[PATH_MAX], err[PATH_MAX * 4];
  if (argc > 1 && strcmp(argv[1], "policy") == 0) return policy_command(argc - 1, argv + 1);
  if (argc > 1 && strcmp(argv[1], "report") == 0) return report_command(argc - 1, argv + 1);

  int i = 1;
  for (; i < argc && argv[i][0] == '-'; i++) {
    const char *a = argv[i];
    if (strcmp(a, "--") == 0) {
      i++;
      break;
    }
    if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      print_help();
      return 0;
    }
    if (strcmp(a, "-V") == 0) a = "--version";
    if (strcmp(a, "--version") == 0 || strcmp(a, "--print-lib") == 0) {
      if (locate_library(lib, sizeof lib, err, sizeof err) != 0) {
        fprintf(stderr, PROG ": %s\n", err);
        return LAUNCH_EXIT_BAD_CHECK;
      }
      if (a[2] == 'v') printf("%s\nlibrary: %s\n", gemmshim_version, lib);
      else printf("%s\n", lib);
      return 0;
    }
    int used = a[1] == '-' ? take_option(argc, argv, i) : 0;
    if (used < 0) return LAUNCH_EXIT_USAGE;
    if (used == 0)
      return usage_error("unknown option '%s'; expected an option from " PROG " --help, or -- before a command "
                         "whose name starts with -", a);
    i += used - 1;
  }
  if (i >= argc) return usage_error("no command to run; expected " PROG " [options] [--] command [args...]");

  /* The shim's own check of everything it will read: options given here and
   * GEMMSHIM_* variables inherited alike. */
  int problems = options_check(print_problem, NULL);
  if (problems) {
    fprintf(stderr, PROG ": not running '%s': %d problem%s above; the shim would run every GEMM native\n", argv[i],
            problems, problems == 1 ? "" : "s");
    return LAUNCH_EXIT_BAD_CHECK;
  }
  if (locate_library(lib, sizeof lib, err, sizeof err) != 0) {
    fprintf(stderr, PROG ": %s\n", err);
    return LAUNCH_EXIT_BAD_CHECK;
  }
  if (announce_log() != 0 || set_preload(lib) != 0) return LAUNCH_EXIT_BAD_CHECK;
  execvp(argv[i], argv + i);
  int e = errno;
  fprintf(stderr, PROG ": cannot run '%s': %s\n", argv[i], strerror(e));
  return e == ENOENT ? LAUNCH_EXIT_NOT_FOUND : LAUNCH_EXIT_CANNOT_EXEC;
}
