#!/usr/bin/env bash
# tests/fuzz/run.sh check|fuzz SECONDS NAME...: run the libFuzzer harnesses
# built under $FUZZ_DIR (see fuzz.mk).
#   check  every input of tests/fuzz/corpus/NAME once, then SECONDS of
#          fuzzing from it; new inputs go to a scratch folder, never into
#          the committed corpus
#   fuzz   SECONDS of fuzzing each, new inputs kept in $FUZZ_DIR/found/NAME;
#          the figures (executions, coverage) are written to
#          $FUZZ_DIR/figures.txt, one line per harness
# A crash or broken invariant leaves the input in $FUZZ_DIR/crashes/NAME/
# and fails the run.
set -euo pipefail
mode=$1 seconds=$2
shift 2
here=$(cd "$(dirname "$0")" && pwd)
: "${FUZZ_DIR:?}"
mkdir -p "$FUZZ_DIR"
[ "$mode" = fuzz ] && : > "$FUZZ_DIR/figures.txt"
for name in "$@"; do
  bin=$FUZZ_DIR/fuzz_$name corpus=$here/corpus/$name
  crashes=$FUZZ_DIR/crashes/$name
  mkdir -p "$crashes"
  out=$FUZZ_DIR/$name.$mode.log
  if [ "$mode" = check ]; then
    # Each corpus input once, as a plain list of files (no fuzzing).
    if ! "$bin" "$corpus"/* > "$out" 2>&1; then
      echo "fuzz-check: $name: a corpus input fails; see $out"; tail -30 "$out"; exit 1
    fi
    runs=$(ls "$corpus" | wc -l)
    scratch=$FUZZ_DIR/scratch/$name
    rm -rf "$scratch"; mkdir -p "$scratch"
    found=$scratch
  else
    found=$FUZZ_DIR/found/$name
    mkdir -p "$found"
  fi
  if ! "$bin" -max_total_time="$seconds" -print_final_stats=1 -artifact_prefix="$crashes/" \
       -close_fd_mask=1 "$found" "$corpus" > "$out" 2>&1; then
    echo "fuzz: $name: FAILED; input kept in $crashes/; see $out"; tail -40 "$out"; exit 1
  fi
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$out" | tail -1)
  cov=$(grep -o 'cov: [0-9]*' "$out" | tail -1 | cut -d' ' -f2)
  ft=$(grep -o 'ft: [0-9]*' "$out" | tail -1 | cut -d' ' -f2)
  if [ "$mode" = check ]; then
    echo "fuzz-check: $name: $runs corpus inputs passed; ${seconds}s of fuzzing: $execs executions, coverage $cov edges, $ft features"
  else
    echo "fuzz: $name: ${seconds}s: $execs executions, coverage $cov edges, $ft features"
    echo "$name $seconds $execs $cov $ft $(ls "$corpus" | wc -l) $(ls "$found" | wc -l)" >> "$FUZZ_DIR/figures.txt"
  fi
done
