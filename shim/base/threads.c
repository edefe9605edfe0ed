/* threads.c: the shim's numbers for threads, and whether a numbered thread
 * has exited.
 *
 * Numbers are never reused: glibc hands a joined thread's pthread_t to the
 * next thread, and a finished thread's per-thread stream may still be
 * running its last kernels. Whether a thread has exited tells successive
 * threads (a backward pass on a new thread each step) from concurrent ones
 * (threads of one program calling the same GEMM line): only the former
 * may take over each other's fp8 sites (docs/fp8-sites.md).
 *
 * A thread that asks for its number takes a slot of a fixed table and
 * holds it until a pthread key destructor clears it at the thread's exit
 * (POSIX, pthread_key_create: the destructor runs at thread exit for a
 * non-NULL value). Its gs_thread names the number and the slot, so a
 * check is one load: the slot still holds the number, or the thread is
 * gone. Where the key, the value or a slot cannot be had, the thread is
 * "unknown" and never reads as exited: a live thread's state is not given
 * away on a guess. */
#define _GNU_SOURCE
#include "base.h"
#include "sys.h"

#include <pthread.h>
#include <stdatomic.h>

#define THREAD_SLOTS 4096

static _Atomic uint64_t thread_numbers;
static _Atomic uint64_t slots[THREAD_SLOTS]; /* 0: free */
static __thread gs_thread self __attribute__((tls_model("initial-exec")));

/* 0 not yet; 1 being made; 2 made; 3 failed. Never waited on: a thread
 * that finds it being made goes unfollowed (a wait could hang a forked
 * child whose maker did not come along). */
static _Atomic int key_state;
static pthread_key_t exit_key;

static void thread_exit(void *value) {
  uintptr_t slot = (uintptr_t)value - 1;
  if (slot < THREAD_SLOTS) atomic_store_explicit(&slots[slot], 0, memory_order_release);
}

static int key_ready(void) {
  int st = atomic_load_explicit(&key_state, memory_order_acquire);
  if (st != 0) return st == 2;
  if (!atomic_compare_exchange_strong(&key_state, &st, 1)) return st == 2;
  int e = GS_CALL(pthread_key_create, &exit_key, thread_exit);
  atomic_store_explicit(&key_state, e ? 3 : 2, memory_order_release);
  if (e)
    GS_INFO("pthread_key_create failed (error %d): exited threads are not told from live ones; "
            "fp8 sites stay with the thread that made them", e);
  return !e;
}

/* A free slot for number n, or -1. */
static int slot_claim(uint64_t n) {
  for (unsigned i = 0, h = (unsigned)(n * 2654435761u); i < THREAD_SLOTS; i++) {
    unsigned k = (h + i) % THREAD_SLOTS;
    uint64_t free_slot = 0;
    if (atomic_load_explicit(&slots[k], memory_order_relaxed) == 0 &&
        atomic_compare_exchange_strong(&slots[k], &free_slot, n))
      return (int)k;
  }
  return -1;
}

gs_thread gs_thread_self(void) {
  if (self.number) return self;
  self.number = atomic_fetch_add(&thread_numbers, 1) + 1;
  self.slot = -1;
  if (!key_ready()) return self;
  int k = slot_claim(self.number);
  if (k < 0) {
    GS_INFO("thread %llu: no room to follow its exit (%d threads at once): it never reads as exited",
            (unsigned long long)self.number, THREAD_SLOTS);
    return self;
  }
  int e = GS_CALL(pthread_setspecific, exit_key, (void *)(uintptr_t)(k + 1));
  if (e) {
    atomic_store(&slots[k], 0);
    GS_INFO("pthread_setspecific failed (error %d): thread %llu never reads as exited", e,
            (unsigned long long)self.number);
    return self;
  }
  self.slot = k;
  return self;
}

uint64_t gs_thread_number(void) { return gs_thread_self().number; }

int gs_thread_exited(gs_thread t) {
  if (t.slot < 0 || t.slot >= THREAD_SLOTS || !t.number) return 0;
  return atomic_load_explicit(&slots[t.slot], memory_order_acquire) != t.number;
}

/* A forked child has the forking thread alone; the others will never
 * exit there, so their slots are freed now. */
static void threads_after_fork_child(void) {
  /* an unnumbered thread's self.slot is 0, a slot like any other */
  for (int k = 0; k < THREAD_SLOTS; k++)
    if (!self.number || k != self.slot) atomic_store(&slots[k], 0);
}

/* At load, not at first use: a first use inside another fork handler would
 * call pthread_atfork while fork holds its lock. */
__attribute__((constructor)) static void threads_register_fork(void) {
  pthread_atfork(NULL, NULL, threads_after_fork_child);
}
