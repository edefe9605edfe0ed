#!/usr/bin/env bash
# tests/valgrind/run.sh [--subset]: valgrind memcheck over the integration
# clients under the preloaded shim, on every route, over the CPU stand-in.
# Each run must exit as it does without valgrind, with no memcheck error
# (invalid reads/writes, uninitialised values used, bad frees, fd leaks
# of the shim's) and no definite leak. tests/valgrind/gemmshim.supp lists
# what is suppressed and why (nothing in the shim).
#   --subset  the ffma and fp8 routes only (CI runs them all)
# Needs BUILD, and the stand-in and kernel paths (valgrind.mk sets them).
set -euo pipefail
: "${BUILD:?}" "${STANDIN13:?}" "${STANDIN12:?}" "${KERNELS_HOST:?}"
here=$(cd "$(dirname "$0")" && pwd)
out=$BUILD/valgrind
rm -rf "$out"; mkdir -p "$out"
shim=$BUILD/libgemmshim.so
cli=$BUILD/tests/integration
subset=${1:-}

# --max-stackframe: the stand-in runs the shim's kernels under CPU emulation,
# every GPU thread a fiber on its own 256 KiB stack, the stacks
# side by side (kernels/fp8_block.h, kernels/emu.h). memcheck takes a stack
# pointer move smaller than this bound for a frame, not a switch, and would
# then see the fibers' memory as uninitialised; below 256 KiB every fiber
# switch is recognised as one.
vg=(valgrind --tool=memcheck --error-exitcode=99 --leak-check=full --show-leak-kinds=definite
    --errors-for-leak-kinds=definite --track-origins=yes --num-callers=30 --max-stackframe=131072
    --suppressions="$here/gemmshim.supp" --gen-suppressions=all)

failed=0 n=0
# run NAME EXPECTED_EXIT ENV... -- ARGV...
run() {
  local name=$1 want=$2; shift 2
  local envs=()
  while [ "$1" != -- ]; do envs+=("$1"); shift; done
  shift
  n=$((n + 1))
  local log=$out/$name.log
  set +e
  env -i PATH="$PATH" HOME="${HOME:-/tmp}" LD_LIBRARY_PATH="$STANDIN13" STANDIN_KERNELS="$KERNELS_HOST" \
    LD_PRELOAD="$shim" GEMMSHIM_LOG="$out/$name.jsonl" "${envs[@]}" \
    "${vg[@]}" --log-file="$log" "$@" > "$out/$name.out" 2>&1
  local rc=$?
  set -e
  if [ "$rc" != "$want" ]; then
    echo "valgrind: $name: FAILED (exit $rc, expected $want); see $log"
    grep -E "^==[0-9]+== (Invalid|Conditional|Use of|Syscall|Mismatched|.*definitely lost|Open file)" "$log" | head -5 || true
    failed=$((failed + 1))
  else
    echo "valgrind: $name: clean"
  fi
}

G="--gemm=api=ex,pad=0,spad=0 --gemm=api=ex64,pad=0,spad=0 --gemm=api=strided,batch=2,pad=0,spad=0
   --gemm=api=strided64,batch=2,pad=0,spad=0 --gemm=api=batched,batch=2,pad=0,spad=0
   --gemm=api=batched64,batch=2,pad=0,spad=0 --gemm=api=lt,epi=bias,pad=0,spad=0
   --gemm=api=lt,epi=gelu_bias,oop=1,pad=0,spad=0"
# shellcheck disable=SC2086
{
if [ "$subset" != --subset ]; then
  run native 0 STANDIN_CC=8.0 GEMMSHIM_MODE=native -- "$cli/ffma_client_cu13" $G
  run suite-linked 0 STANDIN_CC=9.0 -- "$cli/client_linked_cu13"
  run suite-framework 0 STANDIN_CC=9.0 LD_LIBRARY_PATH="$STANDIN13" -- "$cli/client_framework" --cuda=13
  run suite-xla 0 STANDIN_CC=6.1 -- "$cli/client_xla" --cuda=13
  run ffma-nopools 0 STANDIN_CC=6.1 GEMMSHIM_MODE=ffma GEMMSHIM_GATE=off STANDIN_NO_POOLS=1 -- "$cli/ffma_client_cu13" $G
  run ffma-threads 0 STANDIN_CC=6.1 GEMMSHIM_MODE=ffma GEMMSHIM_GATE=off -- "$cli/ffma_client_cu13" --threads=3 --iters=2 $G
fi
run ffma 0 STANDIN_CC=6.1 GEMMSHIM_MODE=ffma GEMMSHIM_GATE=off -- "$cli/ffma_client_cu13" $G
run fp8-own 0 STANDIN_CC=6.1 GEMMSHIM_MODE=fp8 -- "$cli/ffma_client_cu13" --fp8 $G
run fp8-cublaslt 0 STANDIN_CC=9.0 GEMMSHIM_MODE=fp8 GEMMSHIM_GATE=off GEMMSHIM_FP8_BACKEND=cublaslt -- "$cli/ffma_client_cu13" --fp8 $G
run fp8-training 0 STANDIN_CC=9.0 GEMMSHIM_MODE=fp8 GEMMSHIM_GATE=off GEMMSHIM_FP8_FORMAT=hybrid -- "$cli/fp8_client_cu13" --layers=2 --steps=2
}
if [ "$failed" != 0 ]; then
  echo "valgrind: $failed of $n runs FAILED (logs in $out)"
  exit 1
fi
echo "valgrind: all $n runs clean (logs in $out)"
