#!/usr/bin/env bash
# gpu-check.sh: gemmshim on a real NVIDIA GPU, in one run of under 8 minutes.
#
#   1. build    make (or, where clang-19 is missing, the build/ carried over
#               from a machine that has it), and the GPU programs of tests/gpu
#   2. correct  every route against a float64 reference on fresh random data
#               with poisoned outputs, over the real driver and cuBLAS: the
#               integration suite (native, ffma; fp16 linked) under its
#               loading patterns, route_check (native, ffma, fp16, fp8 with
#               each backend, each recipe the device runs), the cast kernels bit for
#               bit; lt_scale_probe: cuBLASLt's fp8 refusals and block
#               scale layouts (sm_90) against the stand-in's rules
#   3. bench    ffma vs native bf16, ffma vs sgemm, the cast kernels vs a
#               device copy, fp8 vs native bf16 per backend and recipe, fp16 vs native
#               bf16, torch._scaled_mm
#   4. train    scripts/train.py native, ffma, fp16, fp8 and fp32; losses
#               compared
#   5. memcheck compute-sanitizer over short ffma, fp16 and fp8 runs (last:
#               the slowest step, and the one a short budget can best do
#               without)
# The fp16 route runs forced (GEMMSHIM_MODE=fp16) on any GPU with fp16 tensor
# cores (compute capability 7.0 and newer; skipped below): its numerics and
# kernels are checked everywhere, its speed means something on sm_70-75
# only (elsewhere native bf16 has tensor cores of its own).
#   6. report   a markdown table (results.md) and a short table, printed last
#
# Every step runs under `timeout`, writes its output to logs/<step>.log in
# the results folder ($OUT if set, else build/gpu-check/), and is recorded
# PASS / FAIL / SKIP. The routing log of every shim run is checked for the
# route each call took. Exit status 1 if any check failed or was cut short.
#
# Usage: scripts/gpu-check.sh [--dry-run | --build-only | --standin] [--quick] [--budget SECONDS]
#   --dry-run     print the steps and check the prerequisites; run nothing
#   --build-only  build everything a GPU run needs into build/, then stop
#                 (run it where clang-19 is, then carry build/ over)
#   --standin     run every step over the CPU stand-in (build/standin/cu13),
#                 small shapes, no PyTorch: proves the script's logic, not
#                 the GPU's numbers
#   --quick       fewer shapes and repetitions, shorter training, memcheck
#                 before the benchmarks: for a GPU lent for minutes
# Environment: BUILD (build), CUDA (/usr/local/cuda), PYTHON (python3), OUT,
# GPU_CHECK_CUBLAS_DIR (a folder holding libcublas.so.13, tried first).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
INVOCATION="scripts/gpu-check.sh${*:+ $*}"
for var in CUDA PYTHON BUILD OUT; do # the overrides that change what runs
  [ -n "${!var:-}" ] && INVOCATION="$var=${!var} $INVOCATION"
done

MODE=gpu
QUICK=0
BUDGET_S=460 # leaves room under 8 minutes for the report and slow exits
while [ $# -gt 0 ]; do
  case "$1" in
    --dry-run) MODE=dry ;;
    --build-only) MODE=build ;;
    --standin) MODE=standin ;;
    --quick) QUICK=1 ;;
    --budget)
      if [ $# -lt 2 ] || ! [[ $2 =~ ^[0-9]+$ ]]; then echo "gpu-check: --budget takes a number of seconds" >&2; exit 2; fi
      BUDGET_S=$2
      shift
      ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "gpu-check: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done

BUILD=${BUILD:-build}
CUDA=${CUDA:-/usr/local/cuda}
PYTHON=${PYTHON:-python3}
if [ "$MODE" = standin ]; then
  RESULTS=${OUT:-$BUILD/gpu-check-standin}
else
  RESULTS=${OUT:-$BUILD/gpu-check}
fi
case "$RESULTS" in /*) ;; *) RESULTS=$ROOT/$RESULTS ;; esac
case "$BUILD" in /*) BUILD_DIR=$BUILD ;; *) BUILD_DIR=$ROOT/$BUILD ;; esac
SHIM=$BUILD_DIR/libgemmshim.so
GPU_BIN=$BUILD_DIR/tests/gpu
INTEG=$BUILD_DIR/tests/integration

# Nothing from the caller's shell may change what the checks do.
unset LD_PRELOAD
while read -r var; do unset "$var"; done < <(compgen -e | grep -E '^(GEMMSHIM_|STANDIN_|CUBLAS_LOG|CUBLASLT_LOG)' || true)

# ---- what runs ------------------------------------------------------------
if [ "$MODE" = standin ]; then
  FFMA_SHAPES=64x64x64,128x96x64
  SGEMM_SHAPES=64x64x64
  FP8_SHAPES=64x64x64,128x96x64
  CAST_SIZES=256x128,100x37
  BENCH_TIMING=(--reps=3 --warmup=1 --target-ms=2 --copy-mib=1)
  CAST_TIMING=(--reps=3 --warmup=1 --target-ms=2)
else
  FFMA_SHAPES=1024x1024x1024,2048x2048x2048,4096x4096x4096,8192x8192x8192,4096x4096x11008,16384x4096x4096
  SGEMM_SHAPES=2048x2048x2048,4096x4096x4096,8192x8192x8192
  FP8_SHAPES=4096x4096x4096,8192x8192x8192,4096x4096x11008,16384x4096x4096
  CAST_SIZES=4096x4096,8192x8192
  BENCH_TIMING=(--reps=7 --warmup=3 --target-ms=20 --copy-mib=512)
  CAST_TIMING=(--reps=7 --warmup=3 --target-ms=20)
  if [ "$QUICK" = 1 ]; then
    FFMA_SHAPES=4096x4096x4096,8192x8192x8192
    SGEMM_SHAPES=4096x4096x4096
    FP8_SHAPES=4096x4096x4096,8192x8192x8192,4096x4096x1024
    CAST_SIZES=8192x8192
    BENCH_TIMING=(--reps=5 --warmup=2 --target-ms=10 --copy-mib=256)
    CAST_TIMING=(--reps=5 --warmup=2 --target-ms=10)
  fi
fi
SCALED_MM_SHAPES=$FP8_SHAPES
TRAIN_STEPS=40
[ "$QUICK" = 1 ] && TRAIN_STEPS=20
TRAIN_ARGS=(--steps $TRAIN_STEPS --warmup 5 --layers 4 --d-model 512 --heads 8 --seq 256 --batch 16 --vocab 1024 --seed 0)
# Entry points the fp8 route must take with each backend (pointer-array
# batches are reported, not required).
FP8_REQUIRED_APIS=(cublasGemmEx cublasGemmEx_64 cublasGemmStridedBatchedEx cublasGemmStridedBatchedEx_64 cublasLtMatmul)
ALL_APIS=(cublasGemmEx cublasGemmEx_64 cublasGemmStridedBatchedEx cublasGemmStridedBatchedEx_64
  cublasGemmBatchedEx cublasGemmBatchedEx_64 cublasLtMatmul)
FP16_ENV=(GEMMSHIM_MODE=fp16 GEMMSHIM_GATE=off GEMMSHIM_FP16_MAX_BYTES=8G)

# ---- bookkeeping ----------------------------------------------------------
FAILED=0
STEPS_TSV=$RESULTS/steps.tsv

note() { printf '%s\n' "$*"; }
elapsed() { printf '%3ds' "$SECONDS"; }

LAST_STATUS=''
record() { # name status seconds note
  printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" >>"$STEPS_TSV"
  LAST_STATUS=$2
  case "$2" in FAIL) FAILED=1 ;; esac
}

# run_step NAME TIMEOUT CMD...: CMD under timeout, output to logs/NAME.log.
run_step() {
  local name=$1 limit=$2 left rc=0 t0
  shift 2
  left=$((BUDGET_S - SECONDS))
  if [ "$MODE" = dry ]; then
    printf '== %s (timeout %ss)\n  ' "$name" "$limit"
    printf '%q ' "$@"
    printf '\n'
    return 0
  fi
  if [ "$left" -lt 10 ]; then
    note "== [$(elapsed)] $name: not run, the ${BUDGET_S}s budget is spent"
    record "$name" FAIL 0 "not run: time budget spent"
    return 0
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  note "== [$(elapsed)] $name (timeout ${limit}s)"
  t0=$SECONDS
  timeout --kill-after=10 "$limit" "$@" >"$RESULTS/logs/$name.log" 2>&1 || rc=$?
  local took=$((SECONDS - t0)) last
  last=$(grep -E '^(summary|FAIL|expectations|calls|check .*ok=0)' "$RESULTS/logs/$name.log" | tail -n 1 || true)
  if [ "$rc" -eq 0 ]; then
    note "   PASS in ${took}s${last:+  ($last)}"
    record "$name" PASS "$took" "$last"
  else
    local why="exit $rc"
    [ "$rc" -eq 124 ] && why="timed out after ${limit}s"
    note "   FAIL ($why) in ${took}s; last lines of logs/$name.log:"
    tail -n 8 "$RESULTS/logs/$name.log" | sed 's/^/     | /'
    record "$name" FAIL "$took" "$why; $last"
  fi
}

skip_step() { # name why
  note "== [$(elapsed)] $1: SKIP ($2)"
  [ "$MODE" = dry ] || record "$1" SKIP 0 "$2"
}

# The routing log of step NAME, checked with the report (gemmshim.report).
routes_step() {
  local name=$1
  shift
  run_step "$name:routes" 30 env PYTHONPATH="$ROOT/python" "$PYTHON" -m gemmshim.report "$RESULTS/routing/$name.jsonl" \
    --json "$RESULTS/routing/$name.summary.json" "$@"
}

# Environment for a program run under the shim; the log is routing/NAME.jsonl.
shim_env() { # name -> words for `env`
  printf '%s\n' "LD_PRELOAD=$SHIM" "GEMMSHIM_LOG=$RESULTS/routing/$1.jsonl"
}

# ---- prerequisites --------------------------------------------------------
have() { command -v "$1" >/dev/null 2>&1; }

# The first GPU's compute capability ("9.0"); empty where nvidia-smi cannot tell.
device_cc() {
  nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n 1 | tr -d ' ' || true
}

# Whether the device has fp16 tensor cores (7.0 and newer): the fp16 route's
# steps run only there. The stand-in's device is a 9.0.
fp16_device() {
  [ "$MODE" != gpu ] && return 0
  local cc
  cc=$(device_cc)
  [ -n "$cc" ] && [ "${cc%%.*}" -ge 7 ] 2>/dev/null
}

# Prints the compute capability when it is 9.0 (the 1x128/128x128 modes').
fp8_block_device() {
  local cc
  cc=$(device_cc)
  [ "$cc" = 9.0 ] && printf '%s\n' "$cc"
  return 0
}

# The fp8 recipes this device runs beyond the default (current): delayed
# everywhere, block on 9.0, mxfp8 on 10.0 and newer (docs/fp8.md, "Which
# GPU runs what"). The stand-in's device is a 9.0.
fp8_more_recipes() {
  local cc
  printf '%s\n' delayed
  if [ "$MODE" != gpu ]; then
    printf '%s\n' block
    return 0
  fi
  cc=$(device_cc)
  [ "$cc" = 9.0 ] && printf '%s\n' block
  [ -n "$cc" ] && [ "${cc%%.*}" -ge 10 ] 2>/dev/null && printf '%s\n' mxfp8
  return 0
}

first_dir_with() { # file dir... -> the first dir holding file
  local f=$1 d
  shift
  for d in "$@"; do
    if [ -n "$d" ] && [ -e "$d/$f" ]; then printf '%s\n' "$d"; return 0; fi
  done
  return 1
}

torch_lib_dirs() { # folders of the pip packages PyTorch loads CUDA libraries from
  "$PYTHON" - <<'EOF' 2>/dev/null || true
import glob, os, site
for root in site.getsitepackages() + [site.getusersitepackages()]:
    for d in sorted(glob.glob(os.path.join(root, "nvidia", "*", "lib"))):
        print(d)
EOF
}

PREREQ_PROBLEMS=0 PREREQ_ABSENT=''
BUILD_SOURCE='' CUBLAS_DIR='' CUPTI_DIR='' SANITIZER='' TORCH_VERSION='' LIB_PATH=''
prereq() { # what ok|absent|missing|n/a detail; missing = a step that needs it will fail
  printf '  %-22s %-8s %s\n' "$1" "$2" "$3"
  [ "$2" = missing ] && PREREQ_PROBLEMS=$((PREREQ_PROBLEMS + 1))
  [ "$2" = absent ] && PREREQ_ABSENT="$PREREQ_ABSENT${PREREQ_ABSENT:+, }$1"
  return 0
}

check_prerequisites() {
  note "prerequisites:"
  if [ "$MODE" = standin ]; then
    prereq "GPU" n/a "stand-in run: the CPU stand-in plays the GPU"
  elif have nvidia-smi && nvidia-smi -L >/dev/null 2>&1; then
    prereq "GPU" ok "$(nvidia-smi -L | head -n 1)"
  else
    prereq "GPU" "$([ "$MODE" = gpu ] && echo missing || echo absent)" "no nvidia-smi or no device"
  fi
  if have clang-19; then
    BUILD_SOURCE="built here with make (clang-19 found)"
    prereq "clang-19" ok "make builds the shim and its PTX here"
  else
    BUILD_SOURCE="carried over in $BUILD/ (no clang-19 here to generate the PTX; make not run)"
    if [ -e "$SHIM" ]; then
      prereq "clang-19" absent "make is not run: the existing $BUILD/ is used as it is"
    else
      prereq "clang-19" missing "and no $BUILD/libgemmshim.so to use instead"
    fi
  fi
  if have "${CC:-gcc}" || have cc; then prereq "C compiler" ok "$(command -v "${CC:-gcc}" || command -v cc)"
  elif [ -x "$GPU_BIN/gemm_bench" ]; then prereq "C compiler" absent "using the prebuilt $BUILD/tests/gpu programs"
  else prereq "C compiler" missing "needed for tests/gpu (or carry $BUILD/tests/gpu over)"; fi
  if [ -e "$CUDA/include/cublas_v2.h" ]; then prereq "CUDA headers" ok "$CUDA/include"
  else prereq "CUDA headers" "$([ -x "$GPU_BIN/gemm_bench" ] && echo absent || echo missing)" "$CUDA/include"; fi

  local torch_dirs
  torch_dirs=$(torch_lib_dirs | tr '\n' ' ')
  # shellcheck disable=SC2086 # torch_dirs is a list of folders
  CUBLAS_DIR=$(first_dir_with libcublas.so.13 "${GPU_CHECK_CUBLAS_DIR:-}" "$CUDA/lib64" "$CUDA/targets/x86_64-linux/lib" "$CUDA/lib" $torch_dirs) || CUBLAS_DIR=
  # shellcheck disable=SC2086
  CUPTI_DIR=$(first_dir_with libcupti.so.13 "$CUDA/extras/CUPTI/lib64" "$CUDA/lib64" "$CUDA/targets/x86_64-linux/lib" $torch_dirs) || CUPTI_DIR=
  if [ "$MODE" = standin ]; then
    STANDIN_DIR=$BUILD_DIR/standin/cu13
    if [ -e "$STANDIN_DIR/libcublas.so.13" ]; then prereq "stand-in" ok "$STANDIN_DIR"
    else prereq "stand-in" missing "$STANDIN_DIR (make builds it)"; fi
    CUBLAS_DIR=$STANDIN_DIR
    CUPTI_DIR=
  elif [ -n "$CUBLAS_DIR" ]; then
    prereq "cuBLAS 13" ok "$CUBLAS_DIR"
  else
    prereq "cuBLAS 13" missing "libcublas.so.13 in neither $CUDA nor PyTorch's nvidia packages"
  fi
  [ "$MODE" = standin ] || prereq "CUPTI 13" "$([ -n "$CUPTI_DIR" ] && echo ok || echo absent)" \
    "${CUPTI_DIR:-kernel traces are skipped without it}"
  if [ "$MODE" != standin ]; then
    if ldconfig -p 2>/dev/null | grep -q 'libcuda\.so\.1 '; then prereq "libcuda.so.1" ok "$(ldconfig -p | awk '/libcuda\.so\.1 /{print $NF; exit}')"
    else prereq "libcuda.so.1" "$([ "$MODE" = gpu ] && echo missing || echo absent)" "not in the loader cache (LD_LIBRARY_PATH may still find it)"; fi
  fi
  SANITIZER=$(command -v compute-sanitizer || true)
  [ -z "$SANITIZER" ] && [ -x "$CUDA/bin/compute-sanitizer" ] && SANITIZER=$CUDA/bin/compute-sanitizer
  prereq "compute-sanitizer" "$([ -n "$SANITIZER" ] && echo ok || echo absent)" "${SANITIZER:-memcheck step skipped}"
  TORCH_VERSION=$("$PYTHON" -c 'import torch; print(torch.__version__, "cuda", torch.version.cuda, "available" if torch.cuda.is_available() else "no-device")' 2>/dev/null || true)
  if [ -n "$TORCH_VERSION" ]; then prereq "PyTorch" ok "$TORCH_VERSION"
  else prereq "PyTorch" "$([ "$MODE" = gpu ] && echo missing || echo absent)" "$PYTHON cannot import torch: training and _scaled_mm steps skipped"; fi
  LIB_PATH=$CUBLAS_DIR
  [ -n "$CUPTI_DIR" ] && [ "$CUPTI_DIR" != "$CUBLAS_DIR" ] && LIB_PATH=$LIB_PATH:$CUPTI_DIR
  # The driver may live on the caller's path (containers): kept, after ours.
  LIB_PATH=$LIB_PATH${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  return 0
}

# ---- the run ----------------------------------------------------------------
write_env() {
  local gpu="" driver="" cc="" mem=""
  if [ "$MODE" = gpu ] && have nvidia-smi; then
    IFS=',' read -r gpu driver mem < <(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | head -n 1) || true
    cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n 1 || true)
    nvidia-smi >"$RESULTS/logs/nvidia-smi.log" 2>&1 || true
  fi
  local shim_sum="" head=""
  [ -e "$SHIM" ] && shim_sum=$(sha256sum "$SHIM" | cut -c1-16)
  head=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)
  # Values travel as arguments, so no quoting of theirs can break the JSON.
  "$PYTHON" - "$RESULTS/env.json" \
    date "$(date -u '+%Y-%m-%d %H:%M UTC')" mode "$MODE" gpu "$gpu" driver "$driver" compute_cap "$cc" \
    memory "$mem" command "cd <repo> && $INVOCATION" results "$RESULTS" commit "$head" build "$BUILD_SOURCE" \
    shim_sha256_16 "$shim_sum" cublas_dir "$CUBLAS_DIR" cupti_dir "$CUPTI_DIR" sanitizer "$SANITIZER" \
    torch "$TORCH_VERSION" budget_s "$BUDGET_S" <<'EOF'
import json, sys
pairs = sys.argv[2:]
json.dump({k: v.strip() for k, v in zip(pairs[::2], pairs[1::2])}, open(sys.argv[1], "w"), indent=1)
EOF
}

policy_file() { # route -> path of a policy file: route on cublasGemmEx, native on _64
  local f=$RESULTS/policy-$1.txt
  [ "$MODE" = dry ] ||
    printf '# gpu-check: the route under test on cublasGemmEx, its baseline on cublasGemmEx_64\n%s api=cublasGemmEx\nnative api=cublasGemmEx_64\n' "$1" >"$f"
  printf '%s\n' "$f"
}

step_build() {
  if [ "$MODE" = dry ]; then
    if have clang-19; then run_step build 300 make -j"$(nproc)" BUILD="$BUILD" CUDA="$CUDA" all \
      "$INTEG/client_linked_cu13" "$INTEG/client_framework" "$INTEG/cu13/libfakeframework.so" "$INTEG/client_xla" \
      "$INTEG/graph_client_cu13"
    else note "== build: not run (no clang-19): $BUILD_SOURCE"; fi
    run_step build-gpu-programs 120 make -f tests/gpu/gpu.mk BUILD="$BUILD" CUDA="$CUDA"
    return 0
  fi
  if have clang-19; then
    local targets=(all "$INTEG/client_linked_cu13" "$INTEG/client_framework" "$INTEG/cu13/libfakeframework.so" "$INTEG/client_xla"
      "$INTEG/graph_client_cu13")
    [ "$MODE" = standin ] && targets+=("$BUILD_DIR/standin/cu13/libcublas.so.13" "$BUILD_DIR/kernels/libgemmshim_kernels_host.so")
    run_step build 300 make -j"$(nproc)" BUILD="$BUILD" CUDA="$CUDA" "${targets[@]}"
    if [ "$LAST_STATUS" = FAIL ]; then
      # What is left in build/ is an older build: its results would mislead.
      note "gpu-check: the build failed; stopping (logs/build.log)"
      return 1
    fi
  else
    note "== build: $BUILD_SOURCE"
    record build SKIP 0 "$BUILD_SOURCE"
  fi
  if have "${CC:-gcc}" || have cc; then
    run_step build-gpu-programs 120 make -f tests/gpu/gpu.mk BUILD="$BUILD" CUDA="$CUDA"
  else
    record build-gpu-programs SKIP 0 "no C compiler: using the prebuilt $BUILD/tests/gpu"
  fi
  local f missing=()
  for f in "$SHIM" "$GPU_BIN/route_check" "$GPU_BIN/gemm_bench" "$GPU_BIN/cast_bench" "$GPU_BIN/lt_scale_probe"; do
    [ -e "$f" ] || missing+=("$f")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    note "gpu-check: cannot go on without ${missing[*]}"
    record build-outputs FAIL 0 "missing ${missing[*]}"
    return 1
  fi
}

# The driver and cuBLAS each program sees; the stand-in adds its knobs.
prog_env() {
  printf '%s\n' "LD_LIBRARY_PATH=$LIB_PATH"
  if [ "$MODE" = standin ]; then
    printf '%s\n' "STANDIN_CC=9.0" "STANDIN_KERNELS=$BUILD_DIR/kernels/libgemmshim_kernels_host.so"
  fi
}

step_correctness() {
  local -a penv
  mapfile -t penv < <(prog_env)
  local suite_ok=1 p
  for p in client_linked_cu13 client_framework client_xla; do [ -e "$INTEG/$p" ] || suite_ok=0; done
  if [ "$suite_ok" = 1 ] || [ "$MODE" = dry ]; then
    # The suite over the real libraries without the shim: if this fails the
    # suite, not the shim, needs looking at.
    run_step suite-noshim 90 env "${penv[@]}" "$INTEG/client_linked_cu13"
    local pattern args mode name
    for mode in native ffma; do
      for pattern in linked framework xla; do
        name=suite-$mode-$pattern
        case $pattern in
          linked) args=("$INTEG/client_linked_cu13") ;;
          *) args=("$INTEG/client_$pattern" --cuda=13) ;;
        esac
        local -a senv
        mapfile -t senv < <(shim_env "$name")
        senv+=("GEMMSHIM_MODE=$mode")
        [ "$mode" = ffma ] && senv+=(GEMMSHIM_GATE=off)
        run_step "$name" 90 env "${penv[@]}" "${senv[@]}" "${args[@]}"
        if [ "$mode" = native ]; then
          routes_step "$name" --expect '*=native'
        else
          local -a exp=()
          for p in "${ALL_APIS[@]}"; do exp+=(--expect-some "$p=ffma"); done
          routes_step "$name" "${exp[@]}"
        fi
      done
    done
  else
    note "== suite: the integration clients are not in $INTEG"
    record suite FAIL 0 "integration clients not built ($INTEG)"
  fi

  # route_check over the real libraries without the shim: the program's own
  # baseline, as suite-noshim is the suite's.
  run_step route-noshim 120 env "${penv[@]}" "$GPU_BIN/route_check" --set=aligned,odd --tol=exact --iters=1
  local -a renv
  mapfile -t renv < <(shim_env route-native)
  run_step route-native 120 env "${penv[@]}" "${renv[@]}" GEMMSHIM_MODE=native "$GPU_BIN/route_check" --set=aligned,odd --tol=exact
  routes_step route-native --expect '*=native'

  mapfile -t renv < <(shim_env route-ffma)
  run_step route-ffma 120 env "${penv[@]}" "${renv[@]}" GEMMSHIM_MODE=ffma GEMMSHIM_GATE=off \
    "$GPU_BIN/route_check" --set=aligned,odd --tol=exact
  routes_step route-ffma --expect '*=ffma'

  if fp16_device; then
    mapfile -t renv < <(shim_env route-fp16)
    run_step route-fp16 120 env "${penv[@]}" "${renv[@]}" "${FP16_ENV[@]}" "$GPU_BIN/route_check" --set=aligned,odd,span \
      --tol=exact
    routes_step route-fp16 --expect '*=fp16'
    if [ "$suite_ok" = 1 ] || [ "$MODE" = dry ]; then
      mapfile -t renv < <(shim_env suite-fp16-linked)
      run_step suite-fp16-linked 90 env "${penv[@]}" "${renv[@]}" "${FP16_ENV[@]}" "$INTEG/client_linked_cu13"
      routes_step suite-fp16-linked --expect-some cublasGemmEx=fp16 --expect-some cublasLtMatmul=fp16
    fi
  else
    skip_step route-fp16 "no fp16 tensor cores (compute capability below 7.0)"
  fi

  local backend sets
  for backend in own own-mma cublaslt; do
    # The own kernels take any shape (own-mma: the tensor-core variant);
    # cuBLASLt's odd set runs below, where a batch with odd m runs native.
    sets=aligned
    [ "$backend" != cublaslt ] && sets=aligned,odd
    mapfile -t renv < <(shim_env "route-fp8-$backend")
    # GEMMSHIM_GATE=off: the check's shapes are below what fp8 pays for
    # (docs/cost-model.md); this step checks the route, not the gate.
    run_step "route-fp8-$backend" 150 env "${penv[@]}" "${renv[@]}" GEMMSHIM_MODE=fp8 GEMMSHIM_GATE=off \
      GEMMSHIM_FP8_BACKEND=$backend \
      "$GPU_BIN/route_check" --set=$sets --tol=fp8
    local -a exp=()
    for p in "${FP8_REQUIRED_APIS[@]}"; do exp+=(--expect "$p=fp8/$backend"); done
    routes_step "route-fp8-$backend" "${exp[@]}"
  done
  # The odd set on cuBLASLt (default recipe): k padded to 16, odd m through
  # the transient fp32 D' (docs/fp8.md); a batch with odd m runs native, by
  # design.
  mapfile -t renv < <(shim_env route-fp8-cublaslt-odd)
  run_step route-fp8-cublaslt-odd 150 env "${penv[@]}" "${renv[@]}" GEMMSHIM_MODE=fp8 GEMMSHIM_GATE=off \
    GEMMSHIM_FP8_BACKEND=cublaslt "$GPU_BIN/route_check" --set=odd --tol=fp8
  routes_step route-fp8-cublaslt-odd --expect cublasGemmEx=fp8/cublaslt --expect cublasLtMatmul=fp8/cublaslt \
    --expect cublasGemmStridedBatchedEx=native
  # The other recipes this device runs (the default is current) on cuBLASLt;
  # where block takes a shape it cannot scale (a batch, m not a multiple of
  # 8), the call runs current, still on cuBLASLt.
  local recipe
  for recipe in $(fp8_more_recipes); do
    mapfile -t renv < <(shim_env "route-fp8-$recipe")
    run_step "route-fp8-$recipe" 150 env "${penv[@]}" "${renv[@]}" GEMMSHIM_MODE=fp8 GEMMSHIM_GATE=off \
      GEMMSHIM_FP8_RECIPE=$recipe \
      "$GPU_BIN/route_check" --set=aligned --tol=fp8
    exp=()
    for p in "${FP8_REQUIRED_APIS[@]}"; do exp+=(--expect "$p=fp8/cublaslt"); done
    routes_step "route-fp8-$recipe" "${exp[@]}" --expect-some-recipe "$recipe"
  done
  # hybrid (E4M3 forward, E5M2 gradients) on cuBLASLt for current and each
  # block-scaled recipe this device runs: fp8_client_cu13's training loop
  # (2 layers, 2 steps; backward on a thread named pt_autograd_0), every
  # GEMM at its floor against float64 and the backward GEMMs given an E5M2
  # B (gpu_report.py hybrid-floors).
  for recipe in current $(fp8_more_recipes | grep -vx delayed); do
    name=route-fp8-hybrid-$recipe
    mapfile -t renv < <(shim_env "$name")
    run_step "$name" 90 env "${penv[@]}" "${renv[@]}" GEMMSHIM_MODE=fp8 GEMMSHIM_GATE=off \
      GEMMSHIM_FP8_RECIPE=$recipe GEMMSHIM_FP8_FORMAT=hybrid "$INTEG/fp8_client_cu13" --layers=2 --steps=2
    run_step "$name:floors" 30 "$PYTHON" scripts/gpu_report.py hybrid-floors "$RESULTS/logs/$name.log" \
      "$RESULTS/routing/$name.jsonl" "$recipe"
    routes_step "$name" --expect cublasGemmEx=fp8/cublaslt --expect-some-recipe "$recipe"
  done

  # cuBLASLt's fp8 rules and block-scale layouts as the loaded cuBLASLt
  # applies them, against the stand-in's and the route's (the shim's
  # 1x128/128x128 quantize kernels feed it).
  if [ "$MODE" = standin ] || { [ -n "$(fp8_block_device)" ] && [ "$MODE" = gpu ]; } || [ "$MODE" = dry ]; then
    run_step lt-scale-probe 120 env "${penv[@]}" "$GPU_BIN/lt_scale_probe" \
      --ptx="$BUILD_DIR/kernels/fp8_scaled_quantize.ptx" --json="$RESULTS/bench/lt-scale-probe.jsonl"
  else
    skip_step lt-scale-probe "cuBLASLt's block scale modes need compute capability 9.0"
  fi
}

# compute-sanitizer last: the slowest check, and the one a short budget can
# best do without.
# CUDA graphs (docs/graphs.md): graph_client's capture patterns with each
# route forced. Every driver call must succeed (the client's exit status),
# every eager and replayed result be within the route's tolerance (its
# "result ... err=E" lines: bf16 output 2^-7, fp8 TransformerEngine's
# 0.125), and the log show every call on the route, the captured one
# included ("captured":1, checked by the report's expectation on all
# records).
step_graphs() {
  local -a penv senv
  mapfile -t penv < <(prog_env)
  if [ ! -e "$INTEG/graph_client_cu13" ] && [ "$MODE" != dry ]; then
    record graphs FAIL 0 "graph_client_cu13 not built ($INTEG)"
    return 0
  fi
  local spec name mode tol recipe
  for spec in ffma:ffma: fp16:fp16: fp8-current:fp8:current fp8-block:fp8:block fp8-mxfp8:fp8:mxfp8; do
    IFS=: read -r name mode recipe <<<"$spec"
    if [ "$mode" = fp16 ] && ! fp16_device; then
      skip_step "graph-$name" "no fp16 tensor cores (compute capability below 7.0)"
      continue
    fi
    tol=0.0078125
    [ "$mode" = fp8 ] && tol=0.125
    for pattern in pytorch xla two-streams; do
      mapfile -t senv < <(shim_env "graph-$name-$pattern")
      senv+=("GEMMSHIM_MODE=$mode" GEMMSHIM_GATE=off)
      [ -n "$recipe" ] && senv+=("GEMMSHIM_FP8_RECIPE=$recipe")
      [ "$mode" = fp16 ] && senv+=("${FP16_ENV[@]}")
      run_step "graph-$name-$pattern" 60 env "${penv[@]}" "${senv[@]}" bash -c \
        'out=$("$0" --recipe="$1") || { printf "%s\n" "$out"; exit 1; }; printf "%s\n" "$out"
         printf "%s\n" "$out" | awk -v tol="$2" '"'"'/^result / { e = $5; sub(/^err=/, "", e)
           if (e !~ /^[0-9.e+-]+$/ || e + 0 > tol + 0) { print "result over tolerance " tol ": " $0; bad = 1 } }
           END { exit bad }'"'"'' "$INTEG/graph_client_cu13" "$pattern" "$tol"
      routes_step "graph-$name-$pattern" --expect "*=$mode"
    done
  done
}

step_memcheck() {
  local -a penv renv
  mapfile -t penv < <(prog_env)
  if [ -n "$SANITIZER" ] || [ "$MODE" = dry ]; then
    local san=("${SANITIZER:-compute-sanitizer}" --tool memcheck --error-exitcode 86)
    # The shim is preloaded into the sanitizer's launcher too (harmless: it
    # makes no GEMM there); the routing log proves it ran in the target.
    mapfile -t renv < <(shim_env memcheck-ffma)
    run_step memcheck-ffma 150 env "${penv[@]}" "${renv[@]}" GEMMSHIM_MODE=ffma GEMMSHIM_GATE=off \
      "${san[@]}" "$INTEG/client_linked_cu13" --invalid=0
    routes_step memcheck-ffma --expect-some cublasGemmEx=ffma --expect-some cublasLtMatmul=ffma
    mapfile -t renv < <(shim_env memcheck-fp8)
    run_step memcheck-fp8 150 env "${penv[@]}" "${renv[@]}" GEMMSHIM_MODE=fp8 GEMMSHIM_FP8_BACKEND=own \
      "${san[@]}" "$GPU_BIN/route_check" --set=small --tol=fp8 --iters=2
    routes_step memcheck-fp8 --expect-some cublasGemmEx=fp8/own --expect-some cublasLtMatmul=fp8/own
    if fp16_device; then
      mapfile -t renv < <(shim_env memcheck-fp16)
      run_step memcheck-fp16 150 env "${penv[@]}" "${renv[@]}" "${FP16_ENV[@]}" \
        "${san[@]}" "$INTEG/client_linked_cu13" --invalid=0
      routes_step memcheck-fp16 --expect-some cublasGemmEx=fp16 --expect-some cublasLtMatmul=fp16
    fi
  else
    skip_step memcheck "compute-sanitizer not found"
  fi
}

step_benchmarks() {
  local -a penv benv
  mapfile -t penv < <(prog_env)
  local ptx=$BUILD_DIR/kernels/cast.ptx
  [ -e "$ptx" ] || ptx=$SHIM
  run_step cast-bench 90 env "${penv[@]}" "$GPU_BIN/cast_bench" --ptx="$ptx" --sizes=$CAST_SIZES "${CAST_TIMING[@]}" \
    --json="$RESULTS/bench/cast-bench.jsonl"

  local pol
  pol=$(policy_file ffma)
  local pair shapes name
  for pair in ffma-bf16 ffma-sgemm; do
    name=bench-$pair
    shapes=$FFMA_SHAPES
    [ "$pair" = ffma-sgemm ] && shapes=$SGEMM_SHAPES
    mapfile -t benv < <(shim_env "$name")
    run_step "$name" 120 env "${penv[@]}" "${benv[@]}" GEMMSHIM_POLICY="$pol" GEMMSHIM_GATE=off GEMMSHIM_FFMA_MAX_BYTES=8G \
      "$GPU_BIN/gemm_bench" --pair=$pair --shapes=$shapes "${BENCH_TIMING[@]}" --trace --max-seconds=100 \
      --json="$RESULTS/bench/$name.jsonl"
    routes_step "$name" --expect cublasGemmEx=ffma --expect cublasGemmEx_64=native \
      --expect-counts "$RESULTS/bench/$name.jsonl"
  done

  pol=$(policy_file fp8)
  local backend
  for backend in own own-mma cublaslt; do
    name=bench-fp8-$backend
    mapfile -t benv < <(shim_env "$name")
    run_step "$name" 120 env "${penv[@]}" "${benv[@]}" GEMMSHIM_POLICY="$pol" GEMMSHIM_GATE=off GEMMSHIM_FP8_BACKEND=$backend \
      GEMMSHIM_FP8_MAX_BYTES=8G "$GPU_BIN/gemm_bench" --pair=fp8-bf16 --shapes=$FP8_SHAPES "${BENCH_TIMING[@]}" \
      --trace --max-seconds=100 --json="$RESULTS/bench/$name.jsonl"
    routes_step "$name" --expect "cublasGemmEx=fp8/$backend" --expect cublasGemmEx_64=native \
      --expect-counts "$RESULTS/bench/$name.jsonl"
  done
  # bench-fp8-cublaslt ran the default recipe (current); the others here.
  local recipe
  for recipe in $(fp8_more_recipes); do
    name=bench-fp8-recipe-$recipe
    mapfile -t benv < <(shim_env "$name")
    run_step "$name" 120 env "${penv[@]}" "${benv[@]}" GEMMSHIM_POLICY="$pol" GEMMSHIM_GATE=off \
      GEMMSHIM_FP8_BACKEND=cublaslt GEMMSHIM_FP8_RECIPE=$recipe GEMMSHIM_FP8_MAX_BYTES=8G \
      "$GPU_BIN/gemm_bench" --pair=fp8-bf16 --shapes=$FP8_SHAPES "${BENCH_TIMING[@]}" \
      --trace --max-seconds=100 --json="$RESULTS/bench/$name.jsonl"
    routes_step "$name" --expect "cublasGemmEx=fp8/cublaslt" --expect cublasGemmEx_64=native \
      --expect-some-recipe "$recipe" --expect-counts "$RESULTS/bench/$name.jsonl"
  done

  if fp16_device; then
    pol=$(policy_file fp16)
    name=bench-fp16-bf16
    mapfile -t benv < <(shim_env "$name")
    run_step "$name" 120 env "${penv[@]}" "${benv[@]}" GEMMSHIM_POLICY="$pol" GEMMSHIM_GATE=off \
      GEMMSHIM_FP16_MAX_BYTES=8G "$GPU_BIN/gemm_bench" --pair=fp16-bf16 --shapes=$FFMA_SHAPES "${BENCH_TIMING[@]}" \
      --trace --max-seconds=100 --json="$RESULTS/bench/$name.jsonl"
    routes_step "$name" --expect cublasGemmEx=fp16 --expect cublasGemmEx_64=native \
      --expect-counts "$RESULTS/bench/$name.jsonl"
  else
    skip_step bench-fp16-bf16 "no fp16 tensor cores (compute capability below 7.0)"
  fi

  if [ -n "$TORCH_VERSION" ] || [ "$MODE" = dry ]; then
    run_step scaled-mm 120 "$PYTHON" scripts/bench_scaled_mm.py --shapes "$SCALED_MM_SHAPES" \
      --json "$RESULTS/bench/scaled-mm.jsonl"
  else
    skip_step scaled-mm "PyTorch not importable"
  fi
}

step_training() {
  if [ -z "$TORCH_VERSION" ] && [ "$MODE" != dry ]; then
    skip_step train "PyTorch not importable"
    return 0
  fi
  local run mode extra
  local runs=(native ffma fp8 fp32)
  fp16_device && runs+=(fp16)
  for run in "${runs[@]}"; do
    local -a tenv
    mapfile -t tenv < <(shim_env "train-$run")
    extra=()
    case $run in
      native) mode=native ;;
      ffma) mode=ffma; tenv+=(GEMMSHIM_GATE=off) ;;
      fp16) mode=fp16; tenv+=(GEMMSHIM_GATE=off) ;;
      # The training shapes are below what fp8 pays for (docs/cost-model.md).
      fp8) mode=fp8; tenv+=(GEMMSHIM_GATE=off) ;;
      fp32) mode=native; extra=(--no-autocast) ;;
    esac
    run_step "train-$run" 120 env "${tenv[@]}" GEMMSHIM_MODE=$mode "$PYTHON" scripts/train.py "${TRAIN_ARGS[@]}" \
      "${extra[@]}" --summary "$RESULTS/train/$run.json"
  done
  routes_step train-native --steps "$RESULTS/train/native.json" --expect '*=native'
  routes_step train-ffma --steps "$RESULTS/train/ffma.json" --expect-some '*=ffma'
  routes_step train-fp8 --steps "$RESULTS/train/fp8.json" --expect-some '*=fp8' --expect-steady-sites fp8
  fp16_device && routes_step train-fp16 --steps "$RESULTS/train/fp16.json" --expect-some '*=fp16'
  run_step train-compare 30 "$PYTHON" scripts/gpu_report.py train-compare "$RESULTS"
}

# Profiling on the GPU: the training loop with GPU time per call and the
# native comparison (GEMMSHIM_LOG_GPU_TIME=1 GEMMSHIM_COMPARE=1), fp8 and
# ffma-forced, then the report's tables, trace and plot of each
# (profile/NAME.{txt,json,trace.json,png}): measured GPU time per shape and
# each route's speedup over native on this GPU.
step_profile() {
  if [ -z "$TORCH_VERSION" ] && [ "$MODE" != dry ]; then
    skip_step profile "PyTorch not importable"
    return 0
  fi
  local run mode runs=(fp8 ffma)
  [ "$QUICK" = 1 ] && runs=(fp8)
  for run in "${runs[@]}"; do
    local -a tenv
    mapfile -t tenv < <(shim_env "profile-$run")
    mode=$run
    tenv+=(GEMMSHIM_GATE=off)
    run_step "profile-$run" 120 env "${tenv[@]}" GEMMSHIM_MODE=$mode GEMMSHIM_LOG_GPU_TIME=1 GEMMSHIM_COMPARE=1 \
      GEMMSHIM_COMPARE_EVERY=10 "$PYTHON" scripts/train.py "${TRAIN_ARGS[@]}" --summary "$RESULTS/profile/$run.train.json"
    run_step "profile-$run:report" 60 env PYTHONPATH="$ROOT/python" "$PYTHON" -m gemmshim.report \
      "$RESULTS/routing/profile-$run.jsonl" --expect-some "*=$run" --json "$RESULTS/profile/$run.json" \
      --trace "$RESULTS/profile/$run.trace.json" --plot "$RESULTS/profile/$run.png"
  done
}

main() {
  if [ "$MODE" = dry ]; then
    note "gpu-check --dry-run: the steps a GPU run takes, with their commands"
  else
    rm -rf "$RESULTS"
    mkdir -p "$RESULTS"/{logs,routing,bench,train,profile}
    : >"$STEPS_TSV"
  fi
  check_prerequisites
  if [ "$MODE" = dry ]; then
    note "results would go to $RESULTS"
  else
    write_env
  fi
  if [ "$MODE" = gpu ] && [ "$PREREQ_PROBLEMS" -gt 0 ]; then
    note "gpu-check: $PREREQ_PROBLEMS prerequisite(s) missing (above); the steps that need them will fail"
  fi

  note "-- build"
  if ! step_build; then
    "$PYTHON" scripts/gpu_report.py report "$RESULTS" || true
    exit 1
  fi
  if [ "$MODE" = build ]; then
    # What a GPU machine without clang-19 needs from this build.
    local carry=("$SHIM" "$BUILD_DIR/kernels" "$INTEG" "$GPU_BIN")
    note "gpu-check --build-only: carry these to the GPU machine (or all of $BUILD/):"
    du -sh "${carry[@]}" 2>/dev/null | sed "s|$ROOT/||; s/^/  /" || true
    [ "$FAILED" = 0 ] && exit 0 || exit 1
  fi
  note "-- correctness"
  step_correctness
  note "-- CUDA graphs"
  step_graphs
  if [ "$QUICK" = 1 ]; then
    note "-- memcheck"
    step_memcheck
  fi
  note "-- benchmarks"
  step_benchmarks
  note "-- training"
  step_training
  step_profile
  if [ "$QUICK" = 0 ]; then
    note "-- memcheck"
    step_memcheck
  fi

  if [ "$MODE" = dry ]; then
    note "== report"
    note "  $PYTHON scripts/gpu_report.py report $RESULTS"
    if [ "$PREREQ_PROBLEMS" -eq 0 ]; then note "dry run: nothing missing${PREREQ_ABSENT:+; absent here: $PREREQ_ABSENT}"
    else note "dry run: $PREREQ_PROBLEMS prerequisite(s) missing${PREREQ_ABSENT:+; absent here: $PREREQ_ABSENT}"; fi
    exit 0
  fi
  note "-- report (${SECONDS}s so far)"
  "$PYTHON" scripts/gpu_report.py report "$RESULTS" || FAILED=1
  [ "$FAILED" = 0 ] && exit 0 || exit 1
}

main
