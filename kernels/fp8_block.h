/* fp8_block.h: the block-level CUDA that the fp8 kernels need beyond
 * device.h: __shared__ memory, __syncthreads(), 32-bit atomics,
 * __threadfence() and full-warp shuffles. On the GPU they are the
 * hardware's, through clang's NVPTX builtins (no CUDA headers). In the
 * host build (GS_EMU) a block's threads run as fibers on the calling
 * thread, so a barrier is a real barrier.
 *
 * Why: emu.h (the cast kernels' emulation) runs a block's threads one
 * after another and rejects __syncthreads(); the fp8 kernels need a
 * barrier, so this file adds a fiber launcher next to it and replaces the
 * name. Kernels register with GS_FP8_EMU_ENTRY instead of GS_EMU_ENTRY.
 * Between two barriers the threads run in ascending, then descending
 * order, so a missing barrier is seen from both sides; a barrier that not
 * every live thread reaches fails the launch, as it would hang or
 * misbehave on a GPU.
 *
 * Fibers, shared memory, sanitizers and stacks: docs/fp8.md, "fp8_block.h:
 * the host emulation". */
#ifndef GEMMSHIM_FP8_BLOCK_H
#define GEMMSHIM_FP8_BLOCK_H

#include "device.h"

/* Loops with a fixed trip count that must be unrolled (array indices become
 * constants, so the arrays live in registers). */
#if defined(__clang__)
#define GS_FP8_UNROLL _Pragma("unroll")
#define GS_FP8_UNROLL_8 _Pragma("unroll 8")
#define GS_FP8_NO_UNROLL _Pragma("unroll 1")
#else
#define GS_FP8_UNROLL _Pragma("GCC unroll 16")
#define GS_FP8_UNROLL_8 _Pragma("GCC unroll 8")
#define GS_FP8_NO_UNROLL _Pragma("GCC unroll 1")
#endif

#if !defined(GS_EMU)

#ifndef __shared__
#define __shared__ __attribute__((shared))
#endif

/* __syncthreads() is itself a clang NVPTX builtin (bar.sync 0). */
static __device__ __forceinline__ unsigned gs_fp8_atomic_max(unsigned *p, unsigned v) {
  return __nvvm_atom_max_gen_ui(p, v);
}
static __device__ __forceinline__ unsigned gs_fp8_atomic_add(unsigned *p, unsigned v) {
  return (unsigned)__nvvm_atom_add_gen_i((int *)p, (int)v);
}
static __device__ __forceinline__ unsigned gs_fp8_atomic_exch(unsigned *p, unsigned v) {
  return (unsigned)__nvvm_atom_xchg_gen_i((int *)p, (int)v);
}
/* A scalar that no thread of the kernel writes (alpha, beta, scales):
 * ld.global.nc. An intrinsic, not a plain load, so clang cannot merge
 * `p ? *p : value` into a load through a selected pointer (which would put
 * the by-value argument in local memory). */
static __device__ __forceinline__ float gs_fp8_load_const(const float *p) { return __nvvm_ldg_f(p); }
/* membar.gl: this thread's global writes are seen by every block before its
 * later ones (the threadFenceReduction pattern). */
static __device__ __forceinline__ void gs_fp8_threadfence(void) { __nvvm_membar_gl(); }
/* shfl.sync over the full warp: v of lane src (idx) or of lane ^ mask
 * (bfly). Every thread of the block calls them from uniform control flow
 * (the host build's version below has barriers). */
static __device__ __forceinline__ uint32_t gs_fp8_shfl_idx(uint32_t v, unsigned src) {
  return (uint32_t)__nvvm_shfl_sync_idx_i32(0xFFFFFFFFu, (int)v, (int)src, 0x1F);
}
static __device__ __forceinline__ uint32_t gs_fp8_shfl_xor(uint32_t v, unsigned mask) {
  return (uint32_t)__nvvm_shfl_sync_bfly_i32(0xFFFFFFFFu, (int)v, (int)mask, 0x1F);
}

#else /* GS_EMU */

#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
/* The own switch (below) on x86-64 with 64-bit pointers, without CET
 * shadow stacks (its ret to another stack would fault there): elsewhere
 * swapcontext, which handles them. */
#if defined(__x86_64__) && defined(__LP64__) && !(defined(__CET__) && (__CET__ & 2))
#define GS_FP8_OWN_SWITCH 1
#else
#include <ucontext.h>
#endif

#include <new>
#include <tuple>
#include <utility>

#if defined(__SANITIZE_ADDRESS__)
#define GS_FP8_EMU_ASAN 1
#endif
#if defined(__SANITIZE_THREAD__)
#define GS_FP8_EMU_TSAN 1
#endif
#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define GS_FP8_EMU_ASAN 1
#endif
#if __has_feature(thread_sanitizer)
#define GS_FP8_EMU_TSAN 1
#endif
#endif
#if defined(GS_FP8_EMU_ASAN)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif
#if defined(GS_FP8_EMU_TSAN)
#include <sanitizer/tsan_interface.h>
#endif

/* One copy per host thread, shared by the fibers of the running block. */
#undef __shared__
#define __shared__ static thread_local

inline unsigned gs_fp8_atomic_max(unsigned *p, unsigned v) {
  unsigned old = __atomic_load_n(p, __ATOMIC_RELAXED);
  while (old < v && !__atomic_compare_exchange_n(p, &old, v, 1, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED)) {
  }
  return old;
}
inline unsigned gs_fp8_atomic_add(unsigned *p, unsigned v) {
  return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST);
}
inline unsigned gs_fp8_atomic_exch(unsigned *p, unsigned v) {
  return __atomic_exchange_n(p, v, __ATOMIC_SEQ_CST);
}
/* A block's threads share one host thread, and the atomics above are
 * sequentially consistent already; TSan (which rejects fences) orders
 * every fiber switch itself. */
inline void gs_fp8_threadfence(void) {
#if !defined(GS_FP8_EMU_TSAN)
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
#endif
}
inline float gs_fp8_load_const(const float *p) { return *p; }

/* Kernel frames are small; sanitizers grow them several times over. The
 * stacks are mmap'ed, so only the pages a fiber touches cost memory. */
#define GS_FP8_EMU_STACK (256u * 1024u)

enum { GS_FP8_FIBER_RUNNABLE, GS_FP8_FIBER_AT_BARRIER, GS_FP8_FIBER_DONE };

#if defined(GS_FP8_OWN_SWITCH)
/* Saves the callee-saved registers of the SysV x86-64 ABI (rbx, rbp,
 * r12-r15, MXCSR's and the x87 control word's control bits) on the
 * current stack, stores its pointer in *save, and resumes the context
 * saved at stack pointer to. swapcontext also saves and sets the signal
 * mask, one rt_sigprocmask system call a switch (most of a launch's time
 * here); the fibers never change the mask. Weak: every object that
 * includes this file has a copy (not with GCC's LTO, which merges them:
 * not used). Hidden: another library's copy is not this one's. */
extern "C" __attribute__((visibility("hidden"))) void gs_fp8_ctx_switch(void **save, void *to);
__asm__(".pushsection .text\n"
        ".weak gs_fp8_ctx_switch\n"
        ".hidden gs_fp8_ctx_switch\n"
        ".type gs_fp8_ctx_switch, @function\n"
        "gs_fp8_ctx_switch:\n"
        "  pushq %rbp\n  pushq %rbx\n  pushq %r12\n  pushq %r13\n  pushq %r14\n  pushq %r15\n"
        "  subq $8, %rsp\n  stmxcsr (%rsp)\n  fnstcw 4(%rsp)\n"
        "  movq %rsp, (%rdi)\n  movq %rsi, %rsp\n"
        "  ldmxcsr (%rsp)\n  fldcw 4(%rsp)\n  addq $8, %rsp\n"
        "  popq %r15\n  popq %r14\n  popq %r13\n  popq %r12\n  popq %rbx\n  popq %rbp\n"
        "  ret\n"
        ".size gs_fp8_ctx_switch, .-gs_fp8_ctx_switch\n"
        ".popsection\n");
typedef void *gs_fp8_ctx; /* the saved stack pointer */
#define GS_FP8_SWITCH(save, to) gs_fp8_ctx_switch(&(save), (to))
#else
typedef ucontext_t gs_fp8_ctx;
#define GS_FP8_SWITCH(save, to) swapcontext(&(save), &(to))
#endif

struct gs_fp8_fiber {
  gs_fp8_ctx uc;
  char *stack;
  int state;
  unsigned long long barriers; /* barriers this thread reached */
  void *tsan;
};

struct gs_fp8_block_run {
  gs_fp8_ctx sched;
  gs_fp8_fiber *fibers;
  unsigned nthreads, cur;
  void (*body)(void *);
  void *arg;
  const void *sched_stack; /* the scheduler's stack, for ASan */
  size_t sched_stack_size;
  void *sched_tsan;
};

inline thread_local gs_fp8_block_run *gs_fp8_run;

inline void gs_fp8_asan_start(void **fake, const void *bottom, size_t size) {
#if defined(GS_FP8_EMU_ASAN)
  __sanitizer_start_switch_fiber(fake, bottom, size);
#else
  (void)fake, (void)bottom, (void)size;
#endif
}
inline void gs_fp8_asan_finish(void *fake, const void **bottom, size_t *size) {
#if defined(GS_FP8_EMU_ASAN)
  __sanitizer_finish_switch_fiber(fake, bottom, size);
#else
  (void)fake, (void)bottom, (void)size;
#endif
}
inline void gs_fp8_tsan_switch(void *fiber) {
#if defined(GS_FP8_EMU_TSAN)
  __tsan_switch_to_fiber(fiber, 0);
#else
  (void)fiber;
#endif
}

/* From the running fiber back to the scheduler; returns when resumed. */
inline void gs_fp8_fiber_yield(gs_fp8_block_run *r, gs_fp8_fiber *f, int finished) {
  void *fake = nullptr;
  gs_fp8_asan_start(finished ? nullptr : &fake, r->sched_stack, r->sched_stack_size);
  gs_fp8_tsan_switch(r->sched_tsan);
  GS_FP8_SWITCH(f->uc, r->sched);
  gs_fp8_asan_finish(fake, nullptr, nullptr);
}

inline void gs_fp8_fiber_main(void) {
  gs_fp8_block_run *r = gs_fp8_run;
  gs_fp8_asan_finish(nullptr, &r->sched_stack, &r->sched_stack_size);
  r->body(r->arg);
  gs_fp8_fiber *f = &r->fibers[r->cur];
  f->state = GS_FP8_FIBER_DONE;
  gs_fp8_fiber_yield(r, f, 1); /* never resumed */
}

/* __syncthreads(): wait here until every thread of the block has come. */
inline void gs_fp8_syncthreads(void) {
  gs_fp8_block_run *r = gs_fp8_run;
  gs_fp8_fiber *f = &r->fibers[r->cur];
  f->state = GS_FP8_FIBER_AT_BARRIER;
  f->barriers++;
  __asm__ __volatile__("" ::: "memory");
  gs_fp8_fiber_yield(r, f, 0);
  __asm__ __volatile__("" ::: "memory");
}
#define __syncthreads gs_fp8_syncthreads

/* Warp shuffles (the device's shfl.sync) through a word a thread and one
 * barrier: every thread of the block must call them, as the kernels do
 * (uniform control flow); lanes are threadIdx.x % 32. Two words a thread,
 * picked by the parity of the barriers passed (the same in every thread of
 * the block): a thread writes a word again only past the next barrier,
 * which every thread reaches after reading it. */
inline uint32_t gs_fp8_shfl_idx(uint32_t v, unsigned src) {
  static thread_local uint32_t s[2][1024];
  const unsigned t = threadIdx.x;
  uint32_t *w = s[gs_fp8_run->fibers[gs_fp8_run->cur].barriers & 1u];
  w[t] = v;
  gs_fp8_syncthreads();
  return w[(t & ~31u) | (src & 31u)];
}
inline uint32_t gs_fp8_shfl_xor(uint32_t v, unsigned mask) { return gs_fp8_shfl_idx(v, (threadIdx.x ^ mask) & 31u); }

/* Resume fiber i; returns when it waits at a barrier or has finished. */
inline void gs_fp8_fiber_resume(gs_fp8_block_run *r, unsigned i) {
  const unsigned bx = blockDim.x, by = blockDim.y;
  r->cur = i;
  threadIdx = {i % bx, (i / bx) % by, i / (bx * by)};
  void *fake = nullptr;
  gs_fp8_asan_start(&fake, r->fibers[i].stack, GS_FP8_EMU_STACK);
  gs_fp8_tsan_switch(r->fibers[i].tsan);
  GS_FP8_SWITCH(r->sched, r->fibers[i].uc);
  gs_fp8_asan_finish(fake, nullptr, nullptr);
}

/* A fresh fiber at the kernel's start. Out of line: getcontext counts as
 * returning twice, which would pin its caller's locals to memory. On
 * x86-64 the stack is laid out as gs_fp8_ctx_switch leaves one, returning
 * into gs_fp8_fiber_main as if called (the stack pointer 8 past a multiple
 * of 16 at its entry), with zeroed registers and the caller's MXCSR and
 * x87 control word; gs_fp8_fiber_main never returns. */
__attribute__((noinline)) inline void gs_fp8_fiber_init(gs_fp8_fiber *f) {
#if defined(GS_FP8_OWN_SWITCH)
  uintptr_t top = ((uintptr_t)f->stack + GS_FP8_EMU_STACK) & ~(uintptr_t)15;
  uint64_t *sp = (uint64_t *)top;
  *--sp = 0;                                    /* gs_fp8_fiber_main's return address: none */
  *--sp = (uint64_t)(uintptr_t)gs_fp8_fiber_main; /* where the switch returns */
  for (int i = 0; i < 6; i++) *--sp = 0;        /* rbp rbx r12 r13 r14 r15 */
  uint32_t csr;
  uint16_t cw;
  __asm__ __volatile__("stmxcsr %0\n\tfnstcw %1" : "=m"(csr), "=m"(cw));
  *--sp = (uint64_t)csr | (uint64_t)cw << 32;
  f->uc = sp;
#else
  getcontext(&f->uc);
  f->uc.uc_stack.ss_sp = f->stack;
  f->uc.uc_stack.ss_size = GS_FP8_EMU_STACK;
  f->uc.uc_link = nullptr;
  makecontext(&f->uc, gs_fp8_fiber_main, 0);
#endif
  f->state = GS_FP8_FIBER_RUNNABLE;
  f->barriers = 0;
}

/* One block: 0 when every thread returned, else a CUresult. */
inline int gs_fp8_block(gs_fp8_block_run *r) {
  for (unsigned i = 0; i < r->nthreads; i++) gs_fp8_fiber_init(&r->fibers[i]);
  /* Between barriers the threads run in ascending order, then descending,
   * alternately (odd blocks start descending), so a missing barrier shows
   * as a thread reading shared memory before its writer has run. */
  const unsigned block = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  for (unsigned phase = block & 1u;; phase++) {
    for (unsigned n = 0; n < r->nthreads; n++) {
      const unsigned i = phase & 1u ? r->nthreads - 1 - n : n;
      if (r->fibers[i].state != GS_FP8_FIBER_RUNNABLE) continue;
      gs_fp8_fiber_resume(r, i);
      if (gs_emu_fault != CUDA_SUCCESS) return gs_emu_fault;
    }
    unsigned waiting = 0, done = 0, first_waiting = 0;
    for (unsigned i = 0; i < r->nthreads; i++) {
      if (r->fibers[i].state == GS_FP8_FIBER_DONE) done++;
      else if (waiting++ == 0) first_waiting = i;
    }
    if (done == r->nthreads) return CUDA_SUCCESS;
    unsigned long long n = r->fibers[first_waiting].barriers;
    for (unsigned i = 0; i < r->nthreads; i++) {
      const gs_fp8_fiber *f = &r->fibers[i];
      if (f->state == GS_FP8_FIBER_DONE || f->barriers != n) {
        fprintf(stderr,
                "fp8_block: block (%u,%u,%u): thread %u waits at barrier %llu while thread %u %s %llu: "
                "divergent __syncthreads()\n",
                blockIdx.x, blockIdx.y, blockIdx.z, first_waiting, n, i,
                f->state == GS_FP8_FIBER_DONE ? "returned after barrier" : "waits at barrier",
                f->barriers);
        return CUDA_ERROR_LAUNCH_FAILED;
      }
    }
    for (unsigned i = 0; i < r->nthreads; i++) r->fibers[i].state = GS_FP8_FIBER_RUNNABLE;
  }
}

/* The fiber stacks of this host thread's launches, kept for the next one:
 * mapping and unmapping them per launch costs more than the kernels under
 * the sanitizers. Left mapped when the thread exits. */
struct gs_fp8_stack_cache {
  void *base;
  size_t bytes;
  void **tsan; /* TSan's fiber per stack, made once (each costs mappings) */
  unsigned ntsan;
};
inline thread_local gs_fp8_stack_cache gs_fp8_stacks;

inline void *gs_fp8_stacks_get(size_t bytes) {
  gs_fp8_stack_cache *c = &gs_fp8_stacks;
  if (c->bytes >= bytes) return c->base;
  if (c->base) munmap(c->base, c->bytes);
  c->base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (c->base == MAP_FAILED) {
    c->base = nullptr, c->bytes = 0;
    return nullptr;
  }
  c->bytes = bytes;
  return c->base;
}

/* Run body(arg) as the kernel of launch l, every block, every thread. */
inline int gs_fp8_emu_run(const standin_launch *l, void (*body)(void *), void *arg) {
  gridDim = {l->grid.x, l->grid.y, l->grid.z};
  blockDim = {l->block.x, l->block.y, l->block.z};
  gs_emu_fault = CUDA_SUCCESS;
  gs_fp8_block_run r = {};
  r.nthreads = l->block.x * l->block.y * l->block.z;
  r.body = body;
  r.arg = arg;
  /* A launch from inside a kernel would reuse the running fibers' stacks. */
  if (gs_fp8_run) return CUDA_ERROR_NOT_SUPPORTED;
  r.fibers = new (std::nothrow) gs_fp8_fiber[r.nthreads]();
  void *stacks = r.fibers ? gs_fp8_stacks_get((size_t)r.nthreads * GS_FP8_EMU_STACK) : nullptr;
  if (!stacks) {
    delete[] r.fibers;
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
#if defined(GS_FP8_EMU_TSAN)
  gs_fp8_stack_cache *c = &gs_fp8_stacks;
  if (c->ntsan < r.nthreads) {
    void **grown = (void **)realloc(c->tsan, r.nthreads * sizeof(void *));
    if (!grown) {
      delete[] r.fibers;
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
    c->tsan = grown;
    for (; c->ntsan < r.nthreads; c->ntsan++) c->tsan[c->ntsan] = __tsan_create_fiber(0);
  }
  r.sched_tsan = __tsan_get_current_fiber();
  for (unsigned i = 0; i < r.nthreads; i++) r.fibers[i].tsan = c->tsan[i];
#endif
  for (unsigned i = 0; i < r.nthreads; i++) r.fibers[i].stack = (char *)stacks + (size_t)i * GS_FP8_EMU_STACK;
  gs_fp8_run = &r;
  int rc = CUDA_SUCCESS;
  for (unsigned bz = 0; bz < gridDim.z && rc == CUDA_SUCCESS; bz++)
    for (unsigned by = 0; by < gridDim.y && rc == CUDA_SUCCESS; by++)
      for (unsigned bx = 0; bx < gridDim.x && rc == CUDA_SUCCESS; bx++) {
        blockIdx = {bx, by, bz};
        rc = gs_fp8_block(&r);
      }
  gs_fp8_run = nullptr;
#if defined(GS_FP8_EMU_ASAN)
  /* A launch that ended early left fibers mid-kernel, their frames'
   * redzones poisoned on stacks the next launch reuses (ASan's swapcontext
   * interceptor cleared them; the own switch does not). */
  if (rc != CUDA_SUCCESS) __asan_unpoison_memory_region(stacks, (size_t)r.nthreads * GS_FP8_EMU_STACK);
#endif
  delete[] r.fibers;
  return rc;
}

template <typename... A> struct gs_fp8_closure {
  void (*k)(A...);
  std::tuple<typename std::decay<A>::type...> args;
  static void call(void *p) {
    gs_fp8_closure *c = static_cast<gs_fp8_closure *>(p);
    std::apply(c->k, c->args);
  }
};

template <typename... A> static int gs_fp8_emu_launch(const standin_launch *l, void (*k)(A...)) {
  if (!l || l->abi != STANDIN_KERNEL_ABI) return CUDA_ERROR_NOT_SUPPORTED;
  if (sizeof...(A) > 0 && !l->params) return CUDA_ERROR_INVALID_VALUE;
  gs_fp8_closure<A...> c = {k, gs_emu_args<A...>(l->params, std::index_sequence_for<A...>{})};
  return gs_fp8_emu_run(l, gs_fp8_closure<A...>::call, &c);
}

#define GS_FP8_EMU_ENTRY(name)                                                 \
  extern "C" __attribute__((visibility("default"))) int standin_kernel_##name( \
      const standin_launch *l) {                                               \
    return gs_fp8_emu_launch(l, name);                                         \
  }

#endif /* GS_EMU */
#endif
