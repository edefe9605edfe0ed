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
#include <sys/stat.h>
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
          "       " PROG " check [options]\n"
          "       " PROG " jupyter install [--name NAME] [--display-name TEXT] [--prefix DIR] [options]\n"
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
    char flag[OPTION_MAX], shown[OPTION_MAX + 8];
    option_flag(var, flag, sizeof flag);
    /* A 1/0 option is a flag: --compare, or --compare=0. */
    snprintf(shown, sizeof shown, "%s%s", flag, options_is_bool(i) ? "[=0]" : " X");
    printf("  --%-17s %s, default '%s'\n  %-19s %s\n", shown, var, def, "", meaning);
  }
  printf("  --%-17s print the library's path (for LD_PRELOAD=$(" PROG " --print-lib))\n", "print-lib");
  printf("  --%-17s print the version and the library's path\n", "version");
  printf("\nSubcommands:\n"
         "  policy check FILE    parse a policy file as the shim does; list its rules in match order\n"
         "  policy explain ...   which rule a GEMM matches and why the rules before it do not\n"
         "  report [args...]     summarize routing logs (Python module gemmshim.report)\n"
         "  check [options]      check these options and the environment's GEMMSHIM_* settings and files\n"
         "                       as the shim will read them (exit 0: none wrong, 1: problems listed)\n"
         "  jupyter install ...  a Jupyter kernel whose Python runs under the shim with these options\n"
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

static void print_warning(const char *message, void *arg) {
  (void)arg;
  fprintf(stderr, PROG ": warning: %s\n", message);
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
    /* A flag never takes the next argument: `--compare -- cmd` must not
     * read '--' as its value. */
    int flag_only = options_is_bool(o) && !eq;
    const char *value = eq ? eq + 1 : flag_only ? "1" : (i + 1 < argc ? argv[i + 1] : NULL);
    if (!value) {
      usage_error("--%s needs a value; expected --%s VALUE or --%s=VALUE", flag, flag, flag);
      return -1;
    }
    char abs[PATH_MAX + 1024];
    if (is_path && value[0] && value[0] != '/') {
      char cwd[PATH_MAX];
      if (!getcwd(cwd, sizeof cwd)) {
        char q[GS_QUOTE_BUF];
        fprintf(stderr, PROG ": --%s '%s': cannot make it absolute: %s\n", flag, gs_quote(value, q), strerror(errno));
        return -1;
      }
      snprintf(abs, sizeof abs, "%s/%s", cwd, value);
      value = abs;
    }
    setenv(var, value, 1);
    return eq || flag_only ? 1 : 2;
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

/* The name a file option gives, checked as the shim will open it: an
 * existing folder, and no directory, link, socket or device the shim
 * refuses, nor a file it may not write. The shim would say so only at its
 * first line, after the program ran for a while. */
static int check_file_option(const char *var, const char *pattern, char *path, size_t len) {
  char q[GS_QUOTE_BUF], qp[GS_QUOTE_BUF], why[512];
  if (path_expand_here(pattern, path, len) != 0) {
    fprintf(stderr, PROG ": %s='%s': too long once %%p, %%h and %%r are filled in\n", var, gs_quote(pattern, q));
    return -1;
  }
  gs_quote(path, qp);
  if (file_names_descriptor(path) >= 0) return 0; /* /dev/stderr and the like: the program's own */
  if (file_name_refused(path, why, sizeof why) != 0) {
    fprintf(stderr, PROG ": %s='%s': '%s' is %s\n", var, gs_quote(pattern, q), qp, why);
    return -1;
  }
  struct stat st;
  if (lstat(path, &st) == 0) {
    if (S_ISREG(st.st_mode) && access(path, W_OK) != 0) {
      fprintf(stderr, PROG ": %s='%s': '%s' is not writable (%s); expected a file the program may append to\n", var,
              gs_quote(pattern, q), qp, strerror(errno));
      return -1;
    }
    return 0;
  }
  char dir[PATH_MAX + 1024];
  snprintf(dir, sizeof dir, "%s", path);
  char *slash = strrchr(dir, '/');
  if (slash) *slash = '\0';
  const char *folder = slash ? (dir[0] ? dir : "/") : ".";
  if (access(folder, W_OK | X_OK) != 0) {
    fprintf(stderr, PROG ": %s='%s': folder '%s' is not writable (%s); expected an existing folder\n", var,
            gs_quote(pattern, q), gs_quote(folder, qp), strerror(errno));
    return -1;
  }
  return 0;
}

/* %r in a file name takes RANK, else LOCAL_RANK, else 0, each only when it
 * is a plain number (shim/base/path.c): a launcher that sets it to
 * something else gives every rank the same name. */
static void warn_rank(void) {
  if (!strstr(gs_opt.log_path, "%r") && !strstr(gs_debug_file, "%r")) return;
  const char *names[] = {"RANK", "LOCAL_RANK"};
  for (int i = 0; i < 2; i++) {
    const char *v = getenv(names[i]);
    if (!v) continue;
    int digits = *v != '\0';
    for (const char *c = v; *c; c++) digits &= *c >= '0' && *c <= '9';
    if (digits) return; /* this one is used */
    char q[GS_QUOTE_BUF];
    fprintf(stderr, PROG ": warning: %s='%s' is not a number; %%r in file names ignores it (expected digits)\n",
            names[i], gs_quote(v, q));
  }
}

/* One line on stderr: where this process's routing log goes. The pid is
 * the command's (exec keeps it); other processes expand the pattern
 * themselves. */
static int announce_log(void) {
  char path[sizeof gs_opt.log_path + 512], q[GS_QUOTE_BUF], qp[GS_QUOTE_BUF];
  if (gs_debug_file[0] && check_file_option("GEMMSHIM_DEBUG_FILE", gs_debug_file, path, sizeof path) != 0) return -1;
  if (!gs_opt.log_path[0]) {
    fprintf(stderr, PROG ": routing log: none (--log PATH writes one; %%p pid, %%h host, %%r rank)\n");
    return 0;
  }
  if (check_file_option("GEMMSHIM_LOG", gs_opt.log_path, path, sizeof path) != 0) return -1;
  gs_quote(gs_opt.log_path, q);
  if (strcmp(path, gs_opt.log_path) == 0)
    fprintf(stderr, PROG ": routing log: %s\n", q);
  else
    fprintf(stderr, PROG ": routing log: %s (this process: %s; each process fills in %%p, %%h and %%r itself)\n", q,
            gs_quote(path, qp));
  return 0;
}

/* `gemmshim report|jupyter ...`: the Python package's entry for it, with
 * this launcher's package first on the path. */
static int python_command(int argc, char **argv) {
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
  char **args = calloc((size_t)argc + 6, sizeof *args);
  if (!args) return LAUNCH_EXIT_CANNOT_EXEC;
  int n = 0;
  args[n++] = (char *)python;
  args[n++] = "-c";
  args[n++] = "import sys; from gemmshim.cli import main; sys.exit(main(sys.argv[1:]))";
  for (int i = 0; i < argc; i++) {
    args[n++] = argv[i];
    /* A kernel spec names this launcher, wherever the package lies. */
    static char self[PATH_MAX];
    ssize_t len;
    if (i == 1 && strcmp(argv[0], "jupyter") == 0 && strcmp(argv[1], "install") == 0 &&
        (len = readlink("/proc/self/exe", self, sizeof self - 1)) > 0) {
      self[len] = '\0';
      args[n++] = "--launcher";
      args[n++] = self;
    }
  }
  execvp(python, args);
  fprintf(stderr, PROG " report: cannot run %s: %s\n", python, strerror(errno));
  return errno == ENOENT ? LAUNCH_EXIT_NOT_FOUND : LAUNCH_EXIT_CANNOT_EXEC;
}

/* `gemmshim check`: what the launcher checks before a run, for a program
 * that loads the shim itself (gemmshim.enable() in Python). */
static int check_command(int argc, char **argv) {
  /* Options given here count as for a run, over the environment's. */
  for (int i = 1; i < argc; i++) {
    int used = strncmp(argv[i], "--", 2) == 0 ? take_option(argc, argv, i) : 0;
    if (used < 0) return LAUNCH_EXIT_USAGE;
    char q[GS_QUOTE_BUF];
    if (used == 0)
      return usage_error("check: unknown argument '%s'; expected options from " PROG " --help", gs_quote(argv[i], q));
    i += used - 1;
  }
  options_unknown(print_warning, NULL);
  int problems = options_check(print_problem, NULL);
  char path[sizeof gs_opt.log_path + 512];
  if (gs_debug_file[0]) problems += check_file_option("GEMMSHIM_DEBUG_FILE", gs_debug_file, path, sizeof path) != 0;
  if (gs_opt.log_path[0]) problems += check_file_option("GEMMSHIM_LOG", gs_opt.log_path, path, sizeof path) != 0;
  warn_rank();
  return problems ? LAUNCH_EXIT_BAD_CHECK : 0;
}

int main(int argc, char **argv) {
  char lib[PATH_MAX], err[PATH_MAX * 4];
  if (argc > 1 && strcmp(argv[1], "policy") == 0) return policy_command(argc - 1, argv + 1);
  if (argc > 1 && (strcmp(argv[1], "report") == 0 || strcmp(argv[1], "jupyter") == 0))
    return python_command(argc - 1, argv + 1);
  if (argc > 1 && strcmp(argv[1], "check") == 0) return check_command(argc - 1, argv + 1);

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
    char q[GS_QUOTE_BUF];
    if (used == 0)
      return usage_error("unknown option '%s'; expected an option from " PROG " --help, or -- before a command "
                         "whose name starts with -", gs_quote(a, q));
    i += used - 1;
  }
  if (i >= argc) return usage_error("no command to run; expected " PROG " [options] [--] command [args...]");

  /* The shim's own check of everything it will read: options given here and
   * GEMMSHIM_* variables inherited alike. */
  char q[GS_QUOTE_BUF];
  options_unknown(print_warning, NULL);
  int problems = options_check(print_problem, NULL);
  if (problems) {
    fprintf(stderr, PROG ": not running '%s': %d problem%s above; the shim would run every GEMM native\n",
            gs_quote(argv[i], q), problems, problems == 1 ? "" : "s");
    return LAUNCH_EXIT_BAD_CHECK;
  }
  if (locate_library(lib, sizeof lib, err, sizeof err) != 0) {
    fprintf(stderr, PROG ": %s\n", err);
    return LAUNCH_EXIT_BAD_CHECK;
  }
  warn_rank();
  if (announce_log() != 0 || set_preload(lib) != 0) return LAUNCH_EXIT_BAD_CHECK;
  execvp(argv[i], argv + i);
  int e = errno;
  fprintf(stderr, PROG ": cannot run '%s': %s\n", gs_quote(argv[i], q), strerror(e));
  return e == ENOENT ? LAUNCH_EXIT_NOT_FOUND : LAUNCH_EXIT_CANNOT_EXEC;
}
