/* sys.c: the table of fallible calls (see sys.h) and its fault injection
 * (the GEMMSHIM_FAULT parser is fault_spec.c).
 * libc entries are bound statically; dlsym is the real one (resolve.c fills
 * it, since the shim's own exported dlsym would otherwise answer). */
#define _GNU_SOURCE
#include "sys.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

static int sys_open(const char *path, int flags, mode_t mode) { return open(path, flags, mode); }
static int sys_fcntl(int fd, int cmd, int arg) { return fcntl(fd, cmd, arg); }

gs_sys_table gs_sys = {
    .open = sys_open,
    .read = read,
    .pread = pread,
    .write = write,
    .send = send,
    .debug_write = write,
    .fstat = fstat,
    .lseek = lseek,
    .lstat = lstat,
    .stat = stat,
    .getcwd = getcwd,
    .fcntl = sys_fcntl,
    .poll = poll,
    .close = close,
    .malloc = malloc,
    .calloc = calloc,
    .pthread_create = pthread_create,
    .gethostname = gethostname,
    .pthread_getname_np = pthread_getname_np,
    .pthread_key_create = pthread_key_create,
    .pthread_setspecific = pthread_setspecific,
    .dlopen = dlopen,
    /* .dlsym: set by resolve_init() to libc's dlsym, never to our own. */
    .pthread_setcancelstate = pthread_setcancelstate,
    /* .execve ... .execveat: set by exec_init() to libc's (the names are
     * the shim's own wrappers here). */
};

const char *const gs_sys_names[GS_SYS_COUNT] = {
#define GS_SYS_NAME(name, ret, fail, params, args) #name,
    GS_SYS_ALL(GS_SYS_NAME)
#undef GS_SYS_NAME
};

/* Fault state: per entry, the countdown to the failing call and whether it
 * stays failed. Touched only by tests, so plain atomics are enough. */
volatile int gs_fault_armed;
static _Atomic unsigned fault_countdown[GS_SYS_COUNT];
static _Atomic int fault_persistent[GS_SYS_COUNT];
/* Per entry, the calls made while any fault was armed and how many of them
 * failed: whoever injects a fault must be able to tell whether it was
 * reached (fault_spec.c reports them at exit). */
static _Atomic unsigned long long fault_calls[GS_SYS_COUNT], fault_failed[GS_SYS_COUNT];

void gs_fault_counts(gs_sys_id id, unsigned long long *calls, unsigned long long *failed) {
  *calls = atomic_load(&fault_calls[id]);
  *failed = atomic_load(&fault_failed[id]);
}

void gs_fault_arm(gs_sys_id id, unsigned n, int persistent) {
  if ((unsigned)id >= GS_SYS_COUNT) return;
  atomic_store(&fault_persistent[id], persistent);
  atomic_store(&fault_countdown[id], n);
  if (n) gs_fault_armed = 1;
}

void gs_fault_clear(void) {
  for (int i = 0; i < GS_SYS_COUNT; i++) {
    atomic_store(&fault_countdown[i], 0);
    atomic_store(&fault_persistent[i], 0);
  }
  gs_fault_armed = 0;
}

int gs_fault_hit(gs_sys_id id) {
  atomic_fetch_add_explicit(&fault_calls[id], 1, memory_order_relaxed);
  unsigned c = atomic_load(&fault_countdown[id]);
  while (c > 0) {
    if (c == 1) {
      if (atomic_load(&fault_persistent[id])) break;
      if (atomic_compare_exchange_weak(&fault_countdown[id], &c, 0)) break;
    } else if (atomic_compare_exchange_weak(&fault_countdown[id], &c, c - 1)) {
      return 0;
    }
  }
  if (c != 1) return 0;
  atomic_fetch_add_explicit(&fault_failed[id], 1, memory_order_relaxed);
  errno = EIO;
  return 1;
}

