"""gemmshim report: what a routing log (GEMMSHIM_LOG) says about where GEMM time went.

  gemmshim report LOG [LOG ...] [--trace OUT.json] [--plot OUT.png] [--json OUT]
                  [--top N] [--steps TRAIN_JSON] [--standin] [expectations]

LOG may be a glob ('/tmp/gs-*.jsonl'): one file per process, as `%p` or `%r`
in GEMMSHIM_LOG gives for every rank of a torchrun job. Without options it
prints a verdict (each route's share of the time, and its speedup over
native on the compared calls), then summary tables: calls, host time
(`dur_ns`) and GPU time (`gpu_ns`, with GEMMSHIM_LOG_GPU_TIME=1) by entry
point, route, backend and reason; the top shapes and call sites by GPU time
(host time where the log has no GPU time); and, for logs written with
GEMMSHIM_COMPARE=1, each route's time per shape and GPU next to native's,
over the same calls: those whose record has both the route's GPU time and
the native run's (`native_gpu_ns`); and their accuracy per call site and
shape (the worst and median `sqnr_db`, the worst median element in dB,
-20 log10 `rel_err_p50`, and calls compared, worst first), with the sites
GEMMSHIM_GUARD_SQNR turned native; for the fp8 route, the fp8 statistics
of the compared calls per site, recipe and shape (each operand's largest
amax, smallest scale, the worst call's saturated and flushed fractions,
and for the block recipes the worst scale block of any call with its
index; most saturated first; JSON: `fp8_stats`, with the totals).

  --trace OUT.json   the calls in the Chrome trace event format, for
                     ui.perfetto.dev or chrome://tracing: one track per
                     process and thread (host time), one per device and
                     stream (GPU time; the per-thread stream: per thread)
  --plot OUT.png     time by route and shape, time per call over the run,
                     and each route's measured speedup and accuracy
                     (GEMMSHIM_COMPARE)
  --json OUT         the summary as JSON ('-': on stdout, tables not printed)
  --standin          the logs were written over the CPU stand-in (make demo,
                     the tests), whose "GPU" times are the CPU's time for each
                     call's work: the report says so first, and its tables and
                     plot call them stand-in times, never GPU times. A log
                     whose header line names a stand-in device ("Standin GPU")
                     is treated so without it.

The logs are read one line at a time: without --plot, memory stays bounded
by the number of distinct shapes, sites and reasons, not by the log's size.
A line that is not a routing record (not JSON, not an object, a field of
another type than the shim writes, a number that is not finite or beyond
64 bits, longer than 64 Ki characters) is counted (with the first such
line's number) and skipped. A LOG that does not exist or cannot be read is
named on stderr, and the exit status is 2 (1 when an expectation failed).

Expectations turn the report into a check (exit 1 when one fails):

  --expect API=ROUTE[/BACKEND]       every call of API ran ROUTE (and a
                                     backend naming BACKEND); API may be '*'
  --expect API=ROUTE[/BACKEND]:DB    ... and every compared call of API
                                     (GEMMSHIM_COMPARE) measured sqnr_db of
                                     at least DB; none compared is a failure
  --expect-some API=ROUTE[/BACKEND]  at least one call of API did
  --expect-counts FILE               every {"kind":"calls"} record in FILE (a
                                     bench's JSON lines) gives API -> N: the
                                     logs must hold exactly N calls of API
  --expect-steady-sites ROUTE        with --steps: after the first step, every
                                     step used the same number of ROUTE sites

TRAIN_JSON is a file whose last line holding "step_start_ns" is
scripts/train.py's summary; calls are then also counted per training step.
A backend matches when it equals BACKEND or contains it (case-insensitive).
"""

from .cli import main, run

__all__ = ["main", "run"]
