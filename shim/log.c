/* log.c: the routing log's queue (GEMMSHIM_LOG=path): how a call's record
 * gets from the calling thread to the file, and what happens to it when the
 * file, the reader or the process does something unexpected. The record
 * and its JSON are log_format.c's, the exit summary's counters
 * log_summary.c's; the contract all three keep is docs/log-format.md.
 *
 * The program's threads pay as little as possible: a record is copied in
 * binary form into one of two buffers under a mutex, and a flusher thread
 * formats and writes a whole buffer at a time (when it is full, once a
 * second, at exit), in one write(). No thread ever waits on the GPU for a
 * record's GPU time: a record whose work is not finished is held back by
 * the writer and goes out later. A call waits for a slow reader at most
 * LOG_WAIT_MS, then its record is lost, counted and said so in the log,
 * and the exit's writes are bounded likewise: the log never holds up the
 * program for long. The first failed write turns the log off, with one
 * warning. A forked child writes its own records, never its parent's, and
 * an exec writes what is buffered first (exec.c).
 *
 * Structure, for whoever adds a field: a field goes into gs_call (shim.h),
 * one line of GS_LOG_FIELDS (log_format.h) and docs/log-format.md;
 * LOG_TEXT_FIXED bounds the text. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "log_header.h"
#include "log_format.h"
#include "log_summary.h"
#include "shim.h"
#include "base/sys.h"

/* Each of the two record buffers: ~500 records of the usual ~260 bytes, a
 * write every few hundred calls. */
#define LOG_BIN_BYTES (128u * 1024)
/* The text of one buffer's records, written in one go. Room is reserved
 * per record for the longest text it could become (rec_text_bound), well
 * above the usual ~600 bytes, so the record buffer fills first as a rule;
 * pages never reached are never touched. */
#define LOG_TEXT_BYTES (1024u * 1024)
/* The longest record the log writes, text and NUL. A fully escaped reason
 * (6 bytes a character) plus every field at its widest stays under this;
 * only an implausibly long backend name could not. */
#define LOG_RECORD_MAX 4096
#define FLUSH_INTERVAL_NS 1000000000ull
/* A call whose record finds both buffers full waits this long at most for
 * the write in flight, then drops the record (counted); at exit, the last
 * writes wait this long at most for a pipe's reader. GEMMSHIM_LOG_WAIT=1
 * waits without bound instead. */
#define LOG_WAIT_MS 50
#define LOG_EXIT_WAIT_MS 1000
/* Records held for unfinished GPU work, at most (bytes of binary records),
 * and written per write, at most; a record that finds no room is written
 * at once, without its GPU time ("too many records waiting for the GPU").
 * A GPU is rarely that far behind. */
#define LOG_HELD_BYTES (4u * 1024 * 1024)
#define LOG_HELD_PER_WRITE 1024
#define GPU_TIME_EXIT_WAIT_NS 2000000000ull
/* With GPU time on, records are written (their events read) every 10 ms
 * rather than every second: a program may destroy its context, and the
 * events with it, soon after its last GEMM. */
#define GPU_TIME_FLUSH_NS 10000000ull

/* ---- state ---------------------------------------------------------------- */
enum { FLUSHER_NONE = 0, FLUSHER_RUNNING, FLUSHER_STOPPING, FLUSHER_FAILED };

static struct {
  pthread_mutex_t mu;
  pthread_cond_t write_done;   /* on CLOCK_MONOTONIC; the write in flight has ended */
  pthread_cond_t flusher_wake; /* on CLOCK_MONOTONIC; a record, a hand-off, log_shutdown's stop */
  char pattern[sizeof gs_opt.log_path];
  char path[sizeof gs_opt.log_path + 512]; /* expanded; "" until opened */
  int on;           /* GEMMSHIM_LOG was set */
  int counting;     /* the INFO summary is wanted: count every call */
  int disabled;     /* an error turned the log off; atomic for log_record */
  gs_file out;      /* the file; out.fd -1 until the first record */
  int late;         /* after log_shutdown: every record written at once */
  char *buf[2];     /* binary records, LOG_BIN_BYTES each; one allocation at first use */
  char *text;       /* LOG_TEXT_BYTES, the writer's (one write in flight at a time) */
  int cur;          /* the buffer records go into */
  size_t fill;      /* bytes of buf[cur] in use */
  size_t text_fill; /* the sum of rec_text_bound over buf[cur]'s records */
  int writing;      /* the other buffer is being written, outside mu */
  int waiters;      /* threads waiting on write_done for the write to end */
  uint64_t write_gen;   /* counts writes started (swap_locked) */
  uint64_t gave_up_gen; /* a caller stopped waiting for this write: later ones drop at once */
  uint64_t give_up_ns;  /* set at exit: writes stop waiting for a pipe then (0: never) */
  uint64_t last_flush_ns;
  int flusher_state;
  int flusher_stop;
  int flusher_idle; /* waiting for a first record, without a deadline */
  size_t handoff_len; /* >0: a full buffer the flusher is to write */
  int handoff_buf;
  pthread_t flusher;
  /* Records lost because the writer fell behind: in all, and those the
   * next notice in the log (lost_notice_locked) will name. */
  uint64_t lost, lost_pending, lost_first_seq, lost_last_seq;
  /* The unwritten end of a line a pipe took only part of before the
   * deadline: written first next time, so that no line is torn. */
  char carry[LOG_RECORD_MAX];
  size_t carry_len;
  uint64_t dropped; /* records longer than LOG_RECORD_MAX */
  int warned_too_long;
  int warned_reopened;
  int header_done; /* this process's header line is written (the writer's) */
} state = {.mu = PTHREAD_MUTEX_INITIALIZER, .out = GS_FILE_NONE};

/* The per-call test: log on, or counting for the INFO summary. */
static int log_wanted;

static pthread_once_t log_once = PTHREAD_ONCE_INIT;
static void log_setup_once(void);
static pthread_condattr_t monotonic_attr;

static uint64_t monotonic_ns(void) { return gs_monotonic_ns(); }

static int is_disabled(void) { return __atomic_load_n(&state.disabled, __ATOMIC_RELAXED); }

static void init_conds(void) {
  pthread_cond_init(&state.write_done, &monotonic_attr);
  pthread_cond_init(&state.flusher_wake, &monotonic_attr);
}

/* ---- opening and writing -------------------------------------------------- */
static void disable_locked(void) {
  __atomic_store_n(&state.disabled, 1, __ATOMIC_RELAXED);
  state.fill = 0;
  state.text_fill = 0;
  file_close(&state.out);
}

/* Warnings here run under state.mu: rare, and gs_debug never takes it. */
static int open_locked(void) {
  if (is_disabled()) return 0;
  if (path_expand(state.pattern, (long)getpid(), state.path, sizeof state.path, NULL) != 0) {
    char q[GS_QUOTE_BUF];
    disable_locked();
    GS_WARN("GEMMSHIM_LOG='%s': longer than %zu bytes once %%p/%%h/%%r are expanded; the routing log is off",
            gs_quote(state.pattern, q), sizeof state.path - 1);
    return 0;
  }
  char why[256], q[GS_QUOTE_BUF];
  if (file_open_append(state.path, 0, &state.out, why, sizeof why) != 0) {
    disable_locked();
    GS_WARN("GEMMSHIM_LOG: cannot open '%s' (%s); the routing log is off for the rest of this process",
            gs_quote(state.path, q), why);
    return 0;
  }
  state.last_flush_ns = monotonic_ns();
  return 1;
}

/* The writer found its descriptor is no longer the log (the program closed
 * it, and may have opened a file of its own under the number): open the
 * log again by its name. A log named by a descriptor (/dev/fd/N,
 * /dev/stdout) is not: that number may be the program's own file by now,
 * so the log is off instead. 0 when the log is off. */
static int reopen_locked(void) {
  int old_fd = state.out.fd;
  int named = state.out.named;
  state.out.fd = -1; /* the program's now: never closed or written by us */
  char q[GS_QUOTE_BUF];
  if (named) {
    disable_locked();
    GS_WARN("GEMMSHIM_LOG: descriptor %d, the shim's copy of '%s', was closed by the program; the routing log is "
            "off for the rest of this process (a descriptor named by number is not opened again: the number may be "
            "another file by now)",
            old_fd, gs_quote(state.path, q));
    return 0;
  }
  if (!open_locked()) return 0;
  if (!state.warned_reopened++)
    GS_WARN("GEMMSHIM_LOG: descriptor %d no longer is '%s' (the program closed it); reopened", old_fd,
            gs_quote(state.path, q));
  return 1;
}

#define LOG_ALLOC_BYTES (2 * (size_t)LOG_BIN_BYTES + LOG_TEXT_BYTES)

static int alloc_locked(void) {
  char *mem = GS_CALL(malloc, LOG_ALLOC_BYTES);
  if (!mem) {
    disable_locked();
    GS_WARN("GEMMSHIM_LOG: cannot allocate %zu bytes of log buffers; the routing log is off", LOG_ALLOC_BYTES);
    return 0;
  }
  state.buf[0] = mem;
  state.buf[1] = mem + LOG_BIN_BYTES;
  state.text = mem + 2 * (size_t)LOG_BIN_BYTES;
  return 1;
}

/* Hand the current buffer to the caller for writing outside the lock. */
static int swap_locked(size_t *len) {
  int full = state.cur;
  *len = state.fill;
  state.cur ^= 1;
  state.fill = 0;
  state.text_fill = 0;
  state.write_gen++;
  __atomic_store_n(&state.writing, 1, __ATOMIC_SEQ_CST);
  state.last_flush_ns = monotonic_ns();
  return full;
}

static int write_in_flight(void) { return __atomic_load_n(&state.writing, __ATOMIC_SEQ_CST); }

/* The common end of a write takes no lock: under contention the writer
 * would queue behind every recording thread, which then wait for it.
 * Waiters announce themselves before
 * testing write_in_flight(), so one side always sees the other. */
static void end_write(void) {
  __atomic_store_n(&state.writing, 0, __ATOMIC_SEQ_CST);
  if (__atomic_load_n(&state.waiters, __ATOMIC_SEQ_CST) == 0) return;
  pthread_mutex_lock(&state.mu);
  pthread_cond_broadcast(&state.write_done);
  pthread_mutex_unlock(&state.mu);
}

static void wait_write_locked(void) {
  __atomic_add_fetch(&state.waiters, 1, __ATOMIC_SEQ_CST);
  while (write_in_flight()) pthread_cond_wait(&state.write_done, &state.mu);
  __atomic_sub_fetch(&state.waiters, 1, __ATOMIC_SEQ_CST);
}

/* Waits for the write in flight until the monotonic deadline; 0 when it
 * was still in flight then. */
static int wait_write_until_locked(uint64_t deadline) {
  struct timespec ts = {(time_t)(deadline / 1000000000u), (long)(deadline % 1000000000u)};
  __atomic_add_fetch(&state.waiters, 1, __ATOMIC_SEQ_CST);
  while (write_in_flight() && pthread_cond_timedwait(&state.write_done, &state.mu, &ts) != ETIMEDOUT) {}
  __atomic_sub_fetch(&state.waiters, 1, __ATOMIC_SEQ_CST);
  return !write_in_flight();
}

static void count_lost_locked(uint64_t seq) {
  if (!state.lost_pending || seq < state.lost_first_seq) state.lost_first_seq = seq;
  if (!state.lost_pending || seq > state.lost_last_seq) state.lost_last_seq = seq;
  state.lost_pending++;
  state.lost++;
}

/* ---- records waiting for their GPU work ------------------------------------ */
/* Binary records whose events had not completed when their buffer was
 * written. Owned by whoever writes (one write in flight at a time), so it
 * needs no lock; held_count is read by the flusher, which comes back for
 * them even when no new record arrives. */
static struct {
  char *buf;
  size_t len, cap;
} held;
static size_t held_count; /* atomic */
/* Of state.lost, the records that could neither be written nor held: no
 * room in the text after held ones, and none to hold them (the exit
 * summary says so apart). Under state.mu. */
static uint64_t lost_held;
/* Until when the last flushes poll unfinished GPU work: set by the first
 * of them, so that all of them together wait that long at most. */
static uint64_t gpu_exit_deadline;

/* The record each line of state.text is, after a carried line end (seq;
 * LINE_NOT_A_RECORD for a ready line such as a loss notice), so a write
 * cut short counts the right records lost (lost_after_locked) although
 * held records change the order. Writer-owned, like state.text. */
#define LINE_NOT_A_RECORD UINT64_MAX
#define LINES_MAX (LOG_BIN_BYTES / sizeof(log_rec) + LOG_HELD_PER_WRITE + 1)
static uint64_t line_seq[LINES_MAX];
static size_t line_count;

static int hold(const log_rec *r) {
  if (held.len + r->size > LOG_HELD_BYTES) return 0;
  if (held.len + r->size > held.cap) {
    size_t cap = held.cap ? held.cap * 2 : 64 * 1024;
    while (cap < held.len + r->size) cap *= 2;
    char *grown = GS_CALL(malloc, cap);
    if (!grown) return 0;
    if (held.len) memcpy(grown, held.buf, held.len);
    free(held.buf);
    held.buf = grown;
    held.cap = cap;
  }
  memcpy(held.buf + held.len, r, r->size);
  held.len += r->size;
  __atomic_add_fetch(&held_count, 1, __ATOMIC_RELAXED);
  return 1;
}

/* Whether r's GPU work is done (or it has none). At the last flush
 * (deadline set) it is given until the deadline, polled, never waited on
 * through the driver. */
static int gpu_done(log_rec *r, uint64_t deadline) {
  gs_gpu_time *gpu = rec_gpu(r);
  if (!gpu || !gpu->on) return 1;
  for (;;) {
    if (gpu_time_resolve(gpu)) return 1;
    if (!deadline || monotonic_ns() >= deadline) return 0;
    struct timespec pause = {0, 200000}; /* 0.2 ms */
    nanosleep(&pause, NULL);
  }
}

/* r's line at state.text + *out. Its GPU work must be done, or it is
 * written without: its events go back and it says it was not finished
 * (final: when the log closed; else there was no room to hold it).
 * checked: r's room was not reserved in state.text (a held record, or
 * after one); returns 0, nothing written, when it does not fit now. */
static int format_one(log_rec *r, size_t *out, int checked, int final) {
  const char *strings = rec_strings(r);
  size_t room = LOG_TEXT_BYTES - *out;
  if (r->kind == LOG_REC_TEXT) {
    if (room < r->reason_len) return 0;
    memcpy(state.text + *out, strings, r->reason_len);
    *out += r->reason_len;
    line_seq[line_count++] = LINE_NOT_A_RECORD;
    return 1;
  }
  gs_gpu_time *gpu = rec_gpu(r);
  if (checked && room < rec_text_bound(r->reason_len, r->backend_len)) return 0;
  if (gpu && gpu->has_acc) guard_observe(r->site, r->route, gpu);
  if (gpu && gpu->has_native_ns && gpu->gated) measured_observe(r->site, r->route, gpu);
  if (gpu && gpu->on) {
    gpu_time_discard(gpu);
    gpu->skip = final ? GS_GPU_SKIP_UNFINISHED : GS_GPU_SKIP_HELD_FULL;
  }
  *out += log_rec_format(r, gpu, strings, strings + r->backend_len, state.text + *out, room);
  line_seq[line_count++] = r->seq;
  return 1;
}

/* The held records that are done now, written first (they are older), at
 * most LOG_HELD_PER_WRITE; the others stay, in order. */
static size_t format_held(size_t out, uint64_t deadline) {
  size_t keep = 0, kept = 0, written = 0;
  for (size_t at = 0; at < held.len;) {
    log_rec *r = (log_rec *)(void *)(held.buf + at);
    size_t size = r->size;
    int ready = written < LOG_HELD_PER_WRITE && (gpu_done(r, deadline) || deadline);
    if (ready && format_one(r, &out, 1, deadline != 0)) {
      written++;
    } else {
      if (keep != at) memmove(held.buf + keep, r, size);
      keep += size;
      kept++;
    }
    at += size;
  }
  held.len = keep;
  __atomic_store_n(&held_count, kept, __ATOMIC_RELAXED);
  return out;
}

/* The text of len bytes of records into state.text: the carried end of a
 * torn line, the held records now done, then these, each formatted unless
 * its GPU work is still running (then held, when there is room). Each of
 * these had room for its longest text reserved (text_fill) and is
 * formatted unchecked when nothing held went first; checked otherwise.
 * final: the last flush, which gives unfinished GPU work a bounded wait. */
static size_t format_records(char *recs, size_t len, int final) {
  if (final && !gpu_exit_deadline) {
    uint64_t now = monotonic_ns(), deadline = now + GPU_TIME_EXIT_WAIT_NS;
    /* Never past half of what is left of the exit's own write budget: the
     * write that follows must still have time to go out. */
    uint64_t give_up = __atomic_load_n(&state.give_up_ns, __ATOMIC_ACQUIRE);
    if (give_up && deadline > now + (give_up > now ? (give_up - now) / 2 : 0))
      deadline = give_up > now ? now + (give_up - now) / 2 : now;
    gpu_exit_deadline = deadline ? deadline : 1;
  }
  uint64_t deadline = final ? gpu_exit_deadline : 0;
  size_t out = state.carry_len;
  memcpy(state.text, state.carry, state.carry_len);
  line_count = 0;
  if (held.len) out = format_held(out, deadline);
  int checked = line_count > 0;
  for (size_t at = 0; at < len;) {
    log_rec *r = (log_rec *)(void *)(recs + at);
    at += r->size;
    if (!gpu_done(r, deadline) && !final && hold(r)) continue;
    if (!format_one(r, &out, checked, final) && !hold(r)) {
      /* No room and nowhere to wait: lost, counted as any lost record
       * (the next records_lost notice names it). */
      gs_gpu_time *gpu = rec_gpu(r);
      if (gpu && gpu->on) gpu_time_discard(gpu);
      pthread_mutex_lock(&state.mu);
      count_lost_locked(r->seq);
      lost_held++;
      pthread_mutex_unlock(&state.mu);
    }
  }
  return out;
}

/* A write that ran out of time on a pipe (files.c) took `written` bytes of
 * the text, whose first `carried` bytes were the end of an earlier torn
 * line. Lines are that end (if any), then one per record (line_seq). A line the write
 * stopped in is finished first next time (state.carry); the records after
 * it count as lost. Pipes take whole lines of up to PIPE_BUF bytes or
 * nothing, so a line is torn only on a terminal or socket. */
static void lost_after_locked(size_t text_len, size_t written, size_t carried) {
  const char *text = state.text;
  size_t lines = 0;
  for (size_t i = 0; i < written; i++) lines += text[i] == '\n';
  if (written > 0 && text[written - 1] != '\n') {
    const char *nl = memchr(text + written, '\n', text_len - written);
    size_t end = nl ? (size_t)(nl - text) + 1 : text_len;
    state.carry_len = end - written;
    memmove(state.carry, text + written, state.carry_len);
    lines++;
  } else if (written == 0 && carried) {
    state.carry_len = carried; /* still in state.carry: not a byte of it went */
    lines++;
  }
  size_t line = carried ? 1 : 0;
  for (size_t i = 0; i < line_count; i++, line++)
    if (line >= lines && line_seq[i] != LINE_NOT_A_RECORD) count_lost_locked(line_seq[i]);
}

/* Formats buffer b and writes it; never under state.mu. Only one write is
 * ever in flight (state.writing): it owns buffer b, state.text and the
 * file, and lines reach the file in the order recorded. The write waits
 * for room in a pipe until *deadline (monotonic ns; 0 no bound). */
static void write_buffer(int b, size_t len, const volatile uint64_t *deadline) {
  if (!file_is_ours(&state.out)) {
    pthread_mutex_lock(&state.mu);
    int ok = !is_disabled() && reopen_locked();
    if (!ok) {
      __atomic_store_n(&state.writing, 0, __ATOMIC_SEQ_CST);
      pthread_cond_broadcast(&state.write_done);
    }
    pthread_mutex_unlock(&state.mu);
    if (!ok) return;
  }
  if (!state.header_done) { /* best effort: the records' write says what fails */
    char header[LOG_HEADER_MAX];
    size_t header_len = log_header_format(header, sizeof header);
    state.header_done = 1;
    if (header_len) file_write(&state.out, header, header_len, deadline);
  }
  size_t carried = state.carry_len;
  size_t text_len = format_records(state.buf[b], len, __atomic_load_n(&state.late, __ATOMIC_RELAXED));
  state.carry_len = 0;
  if (text_len == 0) { /* only held records, none done yet */
    end_write();
    return;
  }
  size_t n = file_write(&state.out, state.text, text_len, deadline);
  if (n == 0 && errno == EBADF && !file_is_ours(&state.out)) {
    /* Closed by the program since the check above: open it again, once.
     * (Still ours, EBADF is a description not open for writing, such as
     * /dev/stdin named as the log: a write error like any.) */
    pthread_mutex_lock(&state.mu);
    int ok = !is_disabled() && reopen_locked();
    pthread_mutex_unlock(&state.mu);
    if (ok) n = file_write(&state.out, state.text, text_len, deadline);
    else errno = EBADF;
  }
  if (n == text_len) {
    end_write();
    return;
  }
  int err = errno;
  if (err == ETIMEDOUT) {
    /* A reader too slow for the deadline (exit, or a caller's own write):
     * what did not fit is lost, counted, and the log stays on. */
    pthread_mutex_lock(&state.mu);
    lost_after_locked(text_len, n, carried);
    __atomic_store_n(&state.writing, 0, __ATOMIC_SEQ_CST);
    pthread_cond_broadcast(&state.write_done);
    pthread_mutex_unlock(&state.mu);
    return;
  }
  char ebuf[128], why[160];
  if (err == EFBIG) snprintf(why, sizeof why, "%s: the process's file size limit, ulimit -f", strerror_r(err, ebuf, sizeof ebuf));
  else if (err != 0) snprintf(why, sizeof why, "%s", strerror_r(err, ebuf, sizeof ebuf));
  else snprintf(why, sizeof why, "short write: %zu of %zu bytes", n, text_len);
  pthread_mutex_lock(&state.mu);
  int first = !is_disabled();
  if (first) disable_locked();
  __atomic_store_n(&state.writing, 0, __ATOMIC_SEQ_CST);
  pthread_cond_broadcast(&state.write_done);
  pthread_mutex_unlock(&state.mu);
  char q[GS_QUOTE_BUF];
  if (first)
    GS_WARN("GEMMSHIM_LOG: cannot write '%s' (%s); the routing log is off for the rest of this process",
            gs_quote(state.path, q), why);
}

/* ---- flusher thread ------------------------------------------------------- */
/* Writes the full buffers recording threads hand it, and the records
 * pending a second after it saw the first of them. Sleeps without a
 * deadline while nothing is pending: an idle process is never woken. */
static void flush_pending(void);
static void flush_pending_until(const volatile uint64_t *deadline, uint64_t wait_until);

static void *flusher_main(void *arg) {
  (void)arg;
  uint64_t due = 0; /* when the pending records are to be written; 0 none seen */
  /* This thread reads the calls' events: never as a call that another
   * thread's graph capture prohibits (gpu_time.c). */
  if (gpu_time_wanted()) gpu_time_reader_thread();
  pthread_mutex_lock(&state.mu);
  for (;;) {
    /* A hand-off first, even when told to stop: its write is in flight
     * (state.writing) and everyone else waits for it. */
    if (state.handoff_len) {
      int b = state.handoff_buf;
      size_t len = state.handoff_len;
      state.handoff_len = 0;
      pthread_mutex_unlock(&state.mu);
      write_buffer(b, len, &state.give_up_ns);
      pthread_mutex_lock(&state.mu);
      continue;
    }
    if (state.flusher_stop) {
      /* At exit (log_shutdown) the last records are written here, not on
       * the exiting thread: a write that blocks (a terminal that stopped
       * reading) then holds up this thread, which the exit waits for at
       * most its budget, never the program's. */
      if (state.late) {
        pthread_mutex_unlock(&state.mu);
        flush_pending();
        pthread_mutex_lock(&state.mu);
      }
      break;
    }
    if ((state.fill == 0 && !__atomic_load_n(&held_count, __ATOMIC_RELAXED)) || state.out.fd < 0) {
      due = 0;
      state.flusher_idle = 1;
      pthread_cond_wait(&state.flusher_wake, &state.mu);
      state.flusher_idle = 0;
      continue;
    }
    uint64_t now = monotonic_ns();
    if (!due) due = now + (gpu_time_wanted() ? GPU_TIME_FLUSH_NS : FLUSH_INTERVAL_NS);
    if (now < due) {
      struct timespec deadline = {(time_t)(due / 1000000000u), (long)(due % 1000000000u)};
      pthread_cond_timedwait(&state.flusher_wake, &state.mu, &deadline);
      continue;
    }
    if (write_in_flight()) {
      /* Someone else's (log_flush); once it ends, a recording thread may
       * start another and hand it here: stop waiting then. */
      __atomic_add_fetch(&state.waiters, 1, __ATOMIC_SEQ_CST);
      while (write_in_flight() && !state.handoff_len) pthread_cond_wait(&state.write_done, &state.mu);
      __atomic_sub_fetch(&state.waiters, 1, __ATOMIC_SEQ_CST);
      continue;
    }
    due = 0;
    size_t len;
    int b = swap_locked(&len);
    pthread_mutex_unlock(&state.mu);
    write_buffer(b, len, &state.give_up_ns);
    pthread_mutex_lock(&state.mu);
  }
  pthread_mutex_unlock(&state.mu);
  return NULL;
}

/* The flusher must not take the application's signals (a Python SIGINT, a
 * sigwait thread's SIGUSR1): it starts with all of them blocked. */
static void start_flusher_locked(void) {
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  int rc = GS_CALL(pthread_create, &state.flusher, NULL, flusher_main, NULL);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  state.flusher_state = rc == 0 ? FLUSHER_RUNNING : FLUSHER_FAILED;
  char ebuf[128];
  if (rc != 0)
    GS_INFO("GEMMSHIM_LOG: no flusher thread (%s); records are flushed by the calls themselves",
            strerror_r(rc, ebuf, sizeof ebuf));
}

/* Once stopping, nothing more is handed to the flusher; what was is
 * written before it ends. At exit the wait for it ends LOG_JOIN_SLACK_MS
 * after the exit's deadline (state.give_up_ns), when every write that
 * waits for room has given up: a thread still not done then is blocked in
 * a write (a description shared with the program, files.c) and is left to
 * the process's end. Returns 0 then, 1 once it has ended. */
#define LOG_JOIN_SLACK_MS 100

static int stop_flusher(void) {
  pthread_mutex_lock(&state.mu);
  int running = state.flusher_state == FLUSHER_RUNNING;
  if (running) {
    state.flusher_state = FLUSHER_STOPPING;
    state.flusher_stop = 1;
    pthread_cond_signal(&state.flusher_wake);
  }
  pthread_t t = running ? state.flusher : (pthread_t)0;
  uint64_t until = state.give_up_ns ? state.give_up_ns + LOG_JOIN_SLACK_MS * 1000000ull : 0;
  pthread_mutex_unlock(&state.mu);
  if (!running) return 1;
  if (until) {
    /* pthread_timedjoin_np takes CLOCK_REALTIME: the monotonic time left. */
    uint64_t now = monotonic_ns(), left = until > now ? until - now : 0;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t ns = (uint64_t)ts.tv_nsec + left % 1000000000u;
    ts.tv_sec += (time_t)(left / 1000000000u + ns / 1000000000u);
    ts.tv_nsec = (long)(ns % 1000000000u);
    if (pthread_timedjoin_np(t, NULL, &ts) != 0) return 0;
  } else {
    pthread_join(t, NULL);
  }
  pthread_mutex_lock(&state.mu);
  state.flusher_state = FLUSHER_NONE;
  state.flusher_stop = 0;
  state.flusher_idle = 0;
  pthread_mutex_unlock(&state.mu);
  return 1;
}

/* ---- recording ------------------------------------------------------------ */
/* Whether the caller must flush now: after log_shutdown every record, and
 * without a flusher thread once a second. */
static int flush_due_locked(void) {
  if (write_in_flight()) return 0;
  if (state.late) return 1;
  return state.flusher_state == FLUSHER_FAILED && monotonic_ns() - state.last_flush_ns >= FLUSH_INTERVAL_NS;
}

/* A full buffer goes to the flusher thread when there is one running:
 * formatting it is the flusher's work, not the recording thread's. */
static int hand_off_locked(int b, size_t len) {
  if (state.flusher_state != FLUSHER_RUNNING) return 0;
  state.handoff_buf = b;
  state.handoff_len = len;
  state.flusher_idle = 0;
  pthread_cond_signal(&state.flusher_wake);
  return 1;
}

static int fits_locked(size_t size, size_t text) {
  return state.fill + size <= LOG_BIN_BYTES && state.text_fill + text <= LOG_TEXT_BYTES;
}

/* Both buffers are busy: 1 once the write in flight has ended, 0 when the
 * record is to be dropped. A call waits at most LOG_WAIT_MS for one write;
 * once a call has waited that long, later ones drop at once until that
 * write ends, so a stalled reader costs the program one wait, not one per
 * call. GEMMSHIM_LOG_WAIT=1 waits however long it takes. */
static int wait_for_room_locked(void) {
  if (gs_opt.log_wait || state.late) {
    wait_write_locked();
    return 1;
  }
  if (state.gave_up_gen == state.write_gen) return 0;
  if (wait_write_until_locked(monotonic_ns() + LOG_WAIT_MS * 1000000ull)) return 1;
  state.gave_up_gen = state.write_gen;
  return 0;
}

/* A line saying which records were lost, ready-made (LOG_REC_TEXT), put
 * where they were lost: before the next record that is kept. It waits for
 * a buffer with room for it and the next record (room_after, text_after). */
static void lost_notice_locked(size_t room_after, size_t text_after) {
  char line[320];
  int n = snprintf(line, sizeof line,
                   "{\"event\":\"records_lost\",\"lost\":%" PRIu64 ",\"first_seq\":%" PRIu64
                   ",\"last_seq\":%" PRIu64
                   ",\"why\":\"the log writer fell behind; a call waits at most %d ms for it\"}\n",
                   state.lost_pending, state.lost_first_seq, state.lost_last_seq, LOG_WAIT_MS);
  if (n <= 0 || (size_t)n >= sizeof line) return;
  size_t size = rec_size((size_t)n, 0);
  if (!fits_locked(size + room_after, (size_t)n + text_after)) return;
  log_rec *r = (log_rec *)(void *)(state.buf[state.cur] + state.fill);
  memset(r, 0, sizeof *r);
  r->kind = LOG_REC_TEXT;
  r->size = (uint32_t)size;
  r->reason_len = (uint32_t)n;
  memcpy(r + 1, line, (size_t)n);
  state.fill += size;
  state.text_fill += (size_t)n;
  state.lost_pending = 0;
}

/* Copy one record into the current buffer; returns the buffer the caller
 * must write, or -1. */
static int append_locked(gs_call *c, size_t reason_len, size_t backend_len, size_t *len) {
  if (state.out.fd < 0 && !open_locked()) return -1;
  if (!state.buf[0] && !alloc_locked()) return -1;
  if (state.late) wait_write_locked();
  if (is_disabled()) return -1; /* the write waited for failed */
  int has_gpu = gpu_time_wanted();
  size_t size = rec_size_gpu(reason_len, backend_len, has_gpu);
  size_t text = rec_text_bound(reason_len, backend_len);
  if (text > LOG_RECORD_MAX) text = LOG_RECORD_MAX; /* log_record checked its text fits */
  int b = -1;
  while (!fits_locked(size, text)) {
    if (write_in_flight()) {
      /* Meanwhile the flusher may have written this buffer too: test
       * again, never swapping out an empty one. */
      if (!wait_for_room_locked()) {
        count_lost_locked(c->seq);
        return b;
      }
      if (is_disabled()) return -1;
      continue;
    }
    b = swap_locked(len); /* the record fits the empty buffer: once */
  }
  if (state.lost_pending) lost_notice_locked(size, text);
  log_rec *r = (log_rec *)(void *)(state.buf[state.cur] + state.fill);
  log_rec_fill(r, c, reason_len, backend_len);
  r->size = (uint32_t)size;
  r->has_gpu = (uint8_t)has_gpu;
  if (has_gpu) log_rec_fill_gpu(rec_gpu(r), c);
  if (c->work_begun) c->gpu.on = 0; /* the record owns the events now */
  char *strings = (char *)rec_strings(r);
  if (backend_len) memcpy(strings, c->backend, backend_len);
  memcpy(strings + backend_len, c->reason, reason_len);
  state.fill += size;
  state.text_fill += text;
  if (b < 0 && flush_due_locked()) b = swap_locked(len);
  if (b >= 0 && hand_off_locked(b, *len)) b = -1;
  if (state.flusher_state == FLUSHER_NONE && !state.late) {
    start_flusher_locked();
  } else if (state.flusher_idle) { /* the first record since the flusher went idle */
    state.flusher_idle = 0;
    pthread_cond_signal(&state.flusher_wake);
  }
  return b;
}

/* How long a calling thread's own write may wait for a pipe's reader. */
static uint64_t caller_deadline(void) {
  uint64_t exit_deadline = __atomic_load_n(&state.give_up_ns, __ATOMIC_ACQUIRE);
  if (gs_opt.log_wait) return exit_deadline;
  uint64_t mine = monotonic_ns() + LOG_WAIT_MS * 1000000ull;
  return exit_deadline && exit_deadline < mine ? exit_deadline : mine;
}

/* Whether c's text fits LOG_RECORD_MAX. Only asked when the bound says it
 * might not: a backend name of many tens of bytes. */
static __attribute__((noinline)) int text_fits(const gs_call *c) {
  char rec[LOG_RECORD_MAX];
  return log_format(c, rec, sizeof rec) != 0;
}

void log_record(gs_call *c) {
  if (__builtin_expect(!__atomic_load_n(&log_wanted, __ATOMIC_RELAXED), 1)) {
    if (c->work_begun && c->gpu.on) gpu_time_discard(&c->gpu);
    return;
  }
  int to_file = __atomic_load_n(&state.on, __ATOMIC_RELAXED) && !is_disabled();
  size_t reason_len = 0, backend_len = 0;
  int fits = 1;
  if (to_file) {
    reason_len = strnlen(c->reason, sizeof c->reason);
    backend_len = c->backend ? strlen(c->backend) : 0;
    if (rec_text_bound(reason_len, backend_len) > LOG_RECORD_MAX) fits = text_fits(c);
  }
  pthread_mutex_lock(&state.mu);
  if (state.counting) log_summary_count(c);
  int b = -1;
  size_t len = 0;
  if (to_file && !fits) {
    state.dropped++;
    if (!state.warned_too_long++)
      GS_WARN("GEMMSHIM_LOG: record %" PRIu64 " is longer than %d bytes and was dropped; later ones too, counted at exit",
              c->seq, LOG_RECORD_MAX);
  } else if (to_file && !is_disabled()) {
    b = append_locked(c, reason_len, backend_len, &len);
  }
  pthread_mutex_unlock(&state.mu);
  /* Not recorded (append_locked takes them when it copies the record):
   * the events go back unread. */
  if (c->work_begun && c->gpu.on) gpu_time_discard(&c->gpu);
  if (b >= 0) {
    uint64_t deadline = caller_deadline();
    write_buffer(b, len, &deadline);
  }
}

/* What is buffered and what is held for its GPU work, then the notice of
 * records lost after it, which a full buffer had no room for. After
 * log_shutdown (state.late) every held record is written, done or not:
 * each write takes at most LOG_HELD_PER_WRITE of them and at least one
 * record, so the rounds end. */
static void flush_pending(void) { flush_pending_until(&state.give_up_ns, 0); }

/* flush_pending, its writes waiting for a pipe's reader until *deadline
 * (0: no bound); wait_until (monotonic ns), when not 0, bounds the wait for
 * a write already in flight too: nothing is written if it has not ended by
 * then. */
static void flush_pending_until(const volatile uint64_t *deadline, uint64_t wait_until) {
  for (int notice_again = 0;;) {
    pthread_mutex_lock(&state.mu);
    if (!wait_until) {
      wait_write_locked();
    } else if (!wait_write_until_locked(wait_until)) {
      pthread_mutex_unlock(&state.mu);
      return;
    }
    int b = -1;
    size_t len = 0;
    int open = state.out.fd >= 0 && state.buf[0] && !is_disabled();
    if (open && state.lost_pending) lost_notice_locked(0, 0);
    if (open && (state.fill > 0 || __atomic_load_n(&held_count, __ATOMIC_RELAXED))) b = swap_locked(&len);
    int again = open && state.lost_pending, final = state.late;
    pthread_mutex_unlock(&state.mu);
    if (b >= 0) write_buffer(b, len, deadline);
    if (final && b >= 0 && __atomic_load_n(&held_count, __ATOMIC_RELAXED)) continue;
    if (!again || notice_again++) break;
  }
}

void log_flush(void) {
  pthread_once(&log_once, log_setup_once);
  flush_pending();
}

/* Before the process image is replaced (exec.c), which runs no exit
 * handler: what is buffered is written now. The wait for a write in flight
 * and for a pipe's reader is bounded as at exit (LOG_EXIT_WAIT_MS; none
 * with GEMMSHIM_LOG_WAIT=1), so an exec is never held up for good by a
 * reader that stopped: what does not go out then is lost with the image,
 * as without this. Records held for unfinished GPU work stay held (the
 * exec may fail, and the process go on). */
void log_flush_before_exec(void) {
  if (!__atomic_load_n(&state.on, __ATOMIC_RELAXED) || is_disabled()) return;
  pthread_once(&log_once, log_setup_once);
  uint64_t deadline = gs_opt.log_wait ? 0 : monotonic_ns() + LOG_EXIT_WAIT_MS * 1000000ull;
  flush_pending_until(&deadline, deadline);
}

/* ---- fork ----------------------------------------------------------------- */
/* state.mu is never held across a write or a wait on one, so taking it
 * here delays a fork by a memcpy at most; the child then gets it in a
 * known state. From here to the parent's or the child's handler the
 * forking thread holds it, through the other libraries' prepare handlers
 * and the child's close below, with cancellation off (cancel.c): a
 * cancellation point there must not unwind the thread with state.mu held. */
static void atfork_prepare(void) {
  cancel_enter();
  pthread_mutex_lock(&state.mu);
}

static void atfork_parent(void) {
  pthread_mutex_unlock(&state.mu);
  cancel_leave();
}

/* The child's only thread runs this holding state.mu (from prepare). The
 * parent's buffered records stay the parent's to write; its flusher thread,
 * a buffer handed to it and any write in flight do not exist here. The
 * child opens its own path at its first record, appending like anyone
 * (a shared name is shared, %p gives it its own file). */
static void atfork_child(void) {
  /* A log named by a descriptor was resolved once, in the parent: the child
   * keeps its copy of the parent's duplicate (or the log off), since the
   * number may name another file by now. */
  if (!state.path[0] || file_names_descriptor(state.path) < 0) {
    file_close(&state.out);
    state.path[0] = '\0';
    __atomic_store_n(&state.disabled, 0, __ATOMIC_RELAXED);
  }
  state.late = 0;
  state.fill = 0;
  state.text_fill = 0;
  state.writing = 0;
  state.waiters = 0;
  state.gave_up_gen = 0;
  state.give_up_ns = 0;
  state.flusher_state = FLUSHER_NONE;
  state.flusher_stop = 0;
  state.flusher_idle = 0;
  state.handoff_len = 0;
  state.lost = state.lost_pending = 0;
  state.carry_len = 0;
  state.dropped = 0;
  state.warned_too_long = 0;
  state.warned_reopened = 0;
  state.header_done = 0;
  state.last_flush_ns = monotonic_ns();
  held.len = 0; /* the parent's records, as the buffers above; their events are the parent's */
  __atomic_store_n(&held_count, 0, __ATOMIC_RELAXED);
  lost_held = 0;
  gpu_exit_deadline = 0;
  log_summary_reset();
  init_conds();
  pthread_mutex_unlock(&state.mu);
  cancel_leave(); /* atfork_prepare's, on this thread's copy */
}

static void log_setup_once(void) {
  pthread_condattr_init(&monotonic_attr);
  pthread_condattr_setclock(&monotonic_attr, CLOCK_MONOTONIC);
  init_conds();
  pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
}

/* ---- init and exit -------------------------------------------------------- */
/* Also resets a previous run's state, so tests can start over. */
void log_init(void) {
  pthread_once(&log_once, log_setup_once);
  __atomic_store_n(&state.give_up_ns, 0, __ATOMIC_RELEASE); /* a previous run's exit deadline */
  stop_flusher();
  pthread_mutex_lock(&state.mu);
  wait_write_locked();
  file_close(&state.out);
  snprintf(state.pattern, sizeof state.pattern, "%s", gs_opt.log_path);
  __atomic_store_n(&state.on, state.pattern[0] != '\0', __ATOMIC_RELAXED);
  state.counting = gs_debug_level >= GS_LEVEL_INFO;
  state.path[0] = '\0';
  __atomic_store_n(&state.disabled, 0, __ATOMIC_RELAXED);
  state.late = 0;
  state.cur = 0;
  state.fill = 0;
  state.text_fill = 0;
  state.gave_up_gen = 0;
  __atomic_store_n(&state.give_up_ns, 0, __ATOMIC_RELEASE);
  state.lost = state.lost_pending = 0;
  state.carry_len = 0;
  state.dropped = 0;
  state.warned_too_long = 0;
  state.warned_reopened = 0;
  state.flusher_state = FLUSHER_NONE; /* a failed start is retried */
  for (size_t at = 0; at < held.len; at += ((log_rec *)(void *)(held.buf + at))->size) {
    gs_gpu_time *gpu = rec_gpu((log_rec *)(void *)(held.buf + at));
    if (gpu && gpu->on) gpu_time_discard(gpu);
  }
  held.len = 0;
  __atomic_store_n(&held_count, 0, __ATOMIC_RELAXED);
  lost_held = 0;
  gpu_exit_deadline = 0;
  log_summary_reset();
  __atomic_store_n(&log_wanted, state.on || state.counting, __ATOMIC_RELAXED);
  pthread_mutex_unlock(&state.mu);
}

/* Printed under state.mu (gs_debug never takes it): a late record cannot
 * change the counters halfway through. */
static void print_summary(void) {
  char q[GS_QUOTE_BUF];
  pthread_mutex_lock(&state.mu);
  gs_quote(state.path, q);
  if (gs_debug_level >= GS_LEVEL_INFO) log_summary_print();
  if (state.dropped)
    GS_WARN("GEMMSHIM_LOG: %" PRIu64 " records dropped (longer than a record may be); '%s' misses them",
            state.dropped, q);
  if (state.lost)
    GS_WARN("GEMMSHIM_LOG: %" PRIu64 " records lost because the log writer fell behind (a call waits at most %d ms, "
            "exit at most %d ms; GEMMSHIM_LOG_WAIT=1 waits instead); '%s' misses them",
            state.lost, LOG_WAIT_MS, LOG_EXIT_WAIT_MS, q);
  if (lost_held)
    GS_WARN("GEMMSHIM_LOG: of those, %" PRIu64 " found more than %u bytes of records waiting for their GPU work",
            lost_held, LOG_HELD_BYTES);
  pthread_mutex_unlock(&state.mu);
}

void log_shutdown(void) {
  pthread_once(&log_once, log_setup_once);
  pthread_mutex_lock(&state.mu);
  __atomic_store_n(&state.late, 1, __ATOMIC_RELAXED); /* calls from later destructors are still written */
  if (!gs_opt.log_wait)
    __atomic_store_n(&state.give_up_ns, monotonic_ns() + LOG_EXIT_WAIT_MS * 1000000ull, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&state.mu);
  if (!stop_flusher()) {
    /* Its write never ended: the log is off, and what it still held is
     * lost (the buffer in its hands, and what came after). The descriptor
     * and buffers stay as they are: that write still uses them. */
    char q[GS_QUOTE_BUF];
    pthread_mutex_lock(&state.mu);
    __atomic_store_n(&state.disabled, 1, __ATOMIC_RELAXED);
    for (size_t at = 0; at < state.fill;) {
      const log_rec *r = (const log_rec *)(const void *)(state.buf[state.cur] + at);
      if (r->kind != LOG_REC_TEXT) count_lost_locked(r->seq);
      at += r->size;
    }
    gs_quote(state.path, q);
    pthread_mutex_unlock(&state.mu);
    GS_WARN("GEMMSHIM_LOG: a write to '%s' did not end within %d ms of the exit (a terminal or pipe that stopped "
            "reading); the records it held and those after it are lost",
            q, LOG_EXIT_WAIT_MS + LOG_JOIN_SLACK_MS);
  } else {
    log_flush();
  }
  print_summary();
}
