/* base.h: the shim's bottom layer. Everything here works on its own, at
 * any time (before the options are read, in a forked child, from any
 * thread, with cancellation pending), and calls nothing above it: no
 * option, call, route or log. Upper layers pass in what it needs.
 *
 *   sys.c         the one table of fallible calls, and fault injection
 *   fault_spec.c  GEMMSHIM_FAULT: arming faults from the environment
 *   cancel.c      cancellation off while the shim's code runs
 *   files.c       opening and writing files safely; the monotonic clock
 *   text.c        quoting user-set values for messages (UTF-8, bounded)
 *   path.c        %p %h %r placeholders in file names
 *   debug.c       WARN/INFO/TRACE messages to stderr or a file
 *   ctx_table.c   per-CUDA-context state, reused when a context is gone
 *   threads.c     thread numbers, never reused; whether a thread has exited
 *
 * The guarantees (what opening a file may and may not do, what a message
 * costs, how a context's slot is reused) are in docs/architecture.md and
 * docs/reliability.md.
 */
#ifndef GEMMSHIM_BASE_H
#define GEMMSHIM_BASE_H

#include <stddef.h>
#include <stdint.h>

/* The longest file name an option may give, before expansion. */
#define GS_PATH_MAX 512

typedef enum gs_level { GS_LEVEL_WARN = 0, GS_LEVEL_INFO, GS_LEVEL_TRACE } gs_level;

/* ------------------------------------------------------------------------ */
/* "debug.c" */
/* The level and file GEMMSHIM_DEBUG and GEMMSHIM_DEBUG_FILE set (the
 * options table writes them); debug_init takes a changed file. Messages
 * work before either is set: WARN, to stderr. */
extern gs_level gs_debug_level;
extern char gs_debug_file[GS_PATH_MAX];
void debug_init(void);
/* A value a user set, fit to show in a message: control characters and
 * '\\' escaped (\n \t \r \\ \xNN), bytes that are not UTF-8 as \xNN,
 * cut after at most GS_QUOTE_MAX bytes, between two characters, as
 * "...(N bytes)", so that no value forges a line, breaks the UTF-8 of a
 * JSON string or pushes what the message says after it out of the line.
 * Returns out (GS_QUOTE_BUF bytes). */
#define GS_QUOTE_MAX 96
#define GS_QUOTE_BUF (4 * GS_QUOTE_MAX + 32)
const char *gs_quote(const char *s, char *out);
const char *gs_quote_n(const char *s, size_t n, char *out);
/* The length of the well-formed UTF-8 character at s (RFC 3629), at most n
 * bytes; 0 when the bytes there are not one. */
size_t gs_utf8_seq(const char *s, size_t n);
void gs_debug(gs_level level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
#define GS_WARN(...) gs_debug(GS_LEVEL_WARN, __VA_ARGS__)
#define GS_INFO(...) do { if (gs_debug_level >= GS_LEVEL_INFO) gs_debug(GS_LEVEL_INFO, __VA_ARGS__); } while (0)
#define GS_TRACE(...) do { if (gs_debug_level >= GS_LEVEL_TRACE) gs_debug(GS_LEVEL_TRACE, __VA_ARGS__); } while (0)

/* ------------------------------------------------------------------------ */
/* "cancel.c": every entry into the shim's code on a thread of the program
 * is bracketed by these: cancellation is disabled from the outermost enter
 * to its matching leave, which gives back the state the thread had (see
 * cancel.c; nested pairs are counted per thread). Both keep errno. */
void cancel_enter(void);
void cancel_leave(void);
unsigned cancel_depth_for_tests(void);
int cancel_inside(void); /* this thread is running the shim's code (a signal handler interrupted it) */

/* ------------------------------------------------------------------------ */
/* "files.c": the files the shim writes. See files.c for what opening and
 * writing guarantee (no symlink followed, no truncation, no blocking open,
 * no write into a descriptor the program reused, no SIGPIPE). */
typedef struct gs_file {
  int fd;          /* -1: none */
  int debug;       /* written through debug_write, not write (sys.h) */
  int checked;     /* dev/ino are known: each write checks them first */
  int stream;      /* a pipe, FIFO, socket or terminal: written in whole lines of PIPE_BUF at most */
  uint64_t dev, ino;
  int named;       /* from /dev/fd/N and the like: never opened by that name again */
  int nonblock;    /* the shim's own description, O_NONBLOCK: a write never blocks */
  int sock;        /* a socket: written with send(MSG_DONTWAIT | MSG_NOSIGNAL) */
  int tail;        /* a regular file opened by name, readable: see files.c on lines cut short */
  int temp;        /* stderr's own description for one message: file_stderr_end closes it */
} gs_file;
#define GS_FILE_NONE {-1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}

uint64_t gs_monotonic_ns(void);
/* Open path for appending (see files.c); 0, or -1 with why set. */
int file_open_append(const char *path, int debug, gs_file *f, char *why, size_t whylen);
/* -1 with why set when path names something file_open_append would
 * refuse unopened (a directory, link, socket, block or other device);
 * 0 when it is absent or of a type it opens. For checking a name early. */
int file_name_refused(const char *path, char *why, size_t whylen);
/* The descriptor a path like /dev/stdout or /dev/fd/N names, or -1. */
int file_names_descriptor(const char *path);
/* The program's stderr as one message writes it: a non-blocking
 * description of the shim's own of a pipe, FIFO or terminal on fd 2 where
 * it can have one (files.c); file_stderr_end closes that after the write. */
gs_file file_stderr_begin(void);
void file_stderr_end(gs_file *f);
/* Whether f->fd still is the file file_open_append opened. */
int file_is_ours(const gs_file *f);
/* If f's regular file ends inside a line (a write cut short by a full disk
 * or the size limit), end that line; 1 when it did. */
int file_end_cut_line(const gs_file *f);
/* Close f->fd if it still is ours (never a descriptor the program reused). */
void file_close(gs_file *f);
/* Wait until fd is ready for events, at most until *deadline_ns
 * (CLOCK_MONOTONIC; 0 or a NULL pointer: no bound), which is read again
 * every 100 ms. 0 ready; -1 with errno (ETIMEDOUT at the deadline). */
int file_wait(int fd, short events, const volatile uint64_t *deadline_ns);
/* Write len bytes to f; returns how many were written, len unless errno
 * says why not (ETIMEDOUT: a pipe found no room before the deadline). */
size_t file_write(const gs_file *f, const char *buf, size_t len, const volatile uint64_t *deadline_ns);

/* ------------------------------------------------------------------------ */
/* "path.c": expand %p (pid), %h (short host name), %r (RANK, else
 * LOCAL_RANK, else 0) and %% in pattern into out; *uses_pid (if not NULL)
 * says whether the result depends on the pid. 0, or -1 (out empty) when it
 * does not fit. path_expand_here: for this process. */
int path_expand(const char *pattern, long pid, char *out, size_t len, int *uses_pid);
int path_expand_here(const char *pattern, char *out, size_t len);
/* What %r becomes: RANK, else LOCAL_RANK, else "0" (each only when digits). */
const char *path_rank(void);

/* ------------------------------------------------------------------------ */
/* "threads.c": the calling thread's number (from 1, never reused) and the
 * slot that follows its exit (-1: not followed). gs_thread_exited is 1 only
 * when t is known to have exited; a thread not followed never reads as
 * exited. */
typedef struct gs_thread {
  uint64_t number;
  int slot;
} gs_thread;
gs_thread gs_thread_self(void);
uint64_t gs_thread_number(void);
int gs_thread_exited(gs_thread t);

#endif
