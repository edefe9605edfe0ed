# kernels.mk: the shim's device code, included by the top Makefile.
#
#   $(BUILD)/kernels/<file>.ptx      kernels/<file>.cu -> sm_61 PTX (clang-19;
#                                    a file may set another target and ISA)
#   $(BUILD)/kernels/<file>.ptx.o    that PTX, embedded in libgemmshim.so as
#                                    gs_ptx_<file> (one module per file)
#   $(BUILD)/kernels/libgemmshim_kernels_host.so
#                                    the same sources built for the CPU with
#                                    kernels/emu.h: the host kernels the
#                                    stand-in libcuda runs (STANDIN_KERNELS)
#   kernels-ptx-check (test step)    ptxas assembles each PTX for every GPU
#                                    target it knows; fails without ptxas
CLANG_CUDA ?= clang-19
PTXAS      ?= $(CUDA)/bin/ptxas

KERNELS_CU       := $(sort $(wildcard kernels/*.cu))
KERNELS_HDR      := $(wildcard kernels/*.h)
KERNELS_PTX      := $(patsubst kernels/%.cu,$(BUILD)/kernels/%.ptx,$(KERNELS_CU))
KERNELS_PTX_OBJ  := $(patsubst kernels/%.cu,$(BUILD)/kernels/%.ptx.o,$(KERNELS_CU))
KERNELS_HOST_SO  := $(BUILD)/kernels/libgemmshim_kernels_host.so

# The PTX ISA version: clang takes it from the CUDA installation it finds
# (8.5, its newest, with CUDA 13). Pointed at none (--cuda-path=/nonexistent;
# -nocudainc -nocudalib mean nothing is read from it), it emits the lowest
# the target allows: 5.0 for sm_61, which every driver since CUDA 8 can JIT,
# so Pascal users on drivers older than the 580 branch are served too.
# kernels-ptx-check asserts the version.
KERNELS_PTX_ISA := 5.0
KERNELS_PTX_TARGET := sm_61
KERNELS_CUDA_FLAGS := -x cuda --cuda-device-only \
  -nocudainc -nocudalib --cuda-path=/nonexistent -std=c++17 -O3 -Wall -Wextra

# A file may set its own target and ISA (module.h's GS_KERNEL_FILES gives the
# same target, and module_launch.c loads such a file only on devices that
# reach it). fp8_gemm_mma.cu: fp8 mma.sync needs sm_89 and PTX ISA 8.4 (ptxas
# rejects it in 8.3 and below), which clang emits when told (--cuda-feature).
KERNELS_PTX_TARGET_fp8_gemm_mma := sm_89
KERNELS_PTX_ISA_fp8_gemm_mma := 8.4
# fp8_quantize_sm89.cu: cvt.rn.satfinite.e4m3x2.f32 on sm_89 needs PTX ISA
# 8.1 (ptxas: "requires PTX ISA .version 8.1 or later"; 7.8 serves sm_90
# only). It includes fp8_quantize.cu, so it is rebuilt when that changes.
KERNELS_PTX_TARGET_fp8_quantize_sm89 := sm_89
KERNELS_PTX_ISA_fp8_quantize_sm89 := 8.1
$(BUILD)/kernels/fp8_quantize_sm89.ptx: kernels/fp8_quantize.cu
# fp16.cu: the fp16 route's kernels, for devices with fp16 tensor cores
# (sm_70+, where the route runs); sm_70 needs PTX ISA 6.0.
KERNELS_PTX_TARGET_fp16 := sm_70
KERNELS_PTX_ISA_fp16 := 6.0
# fp8_scaled_quantize.cu: the block and mxfp8 recipes' quantize kernels,
# for the devices whose cuBLASLt runs block-scaled fp8 (sm_90 and newer);
# sm_90 needs PTX ISA 7.8.
KERNELS_PTX_TARGET_fp8_scaled_quantize := sm_90
KERNELS_PTX_ISA_fp8_scaled_quantize := 7.8
kernels_target = $(or $(KERNELS_PTX_TARGET_$1),$(KERNELS_PTX_TARGET))
kernels_isa = $(or $(KERNELS_PTX_ISA_$1),$(KERNELS_PTX_ISA))
kernels_isa_flag = $(if $(KERNELS_PTX_ISA_$1),--cuda-feature=+ptx$(subst .,,$(KERNELS_PTX_ISA_$1)))

$(BUILD)/kernels/%.ptx: kernels/%.cu $(KERNELS_HDR)
	@mkdir -p $(dir $@)
	$(CLANG_CUDA) $(KERNELS_CUDA_FLAGS) --cuda-gpu-arch=$(call kernels_target,$*) $(call kernels_isa_flag,$*) -S $< -o $@

# Kept after the build: kernels-ptx-check and people read them.
.SECONDARY: $(KERNELS_PTX)

$(BUILD)/kernels/%.ptx.o: kernels/ptx_blob.S $(BUILD)/kernels/%.ptx
	$(CC) $(ALL_CFLAGS) -DGS_PTX_SYMBOL=gs_ptx_$* -DGS_PTX_FILE='"$(BUILD)/kernels/$*.ptx"' -c $< -o $@

# SHIM_SO's prerequisites were read before this file, so the images are
# added to them here; the link recipe expands SHIM_OBJ when it runs, and
# unit.mk (included after this file) links the unit tests with them too.
SHIM_OBJ += $(KERNELS_PTX_OBJ)
$(SHIM_SO): $(KERNELS_PTX_OBJ)

# Host build: C++ (the kernels use templates), libstdc++ allowed here only,
# one object a source so that make -j compiles them side by side.
# Sanitizers: ASan/UBSan instrument the host kernels (an out-of-bounds
# access there is one on the GPU); TSan does not. The stand-in runs a kernel
# synchronously on the launching thread (tests/standin/standin_kernel.h),
# so TSan's only use there would be two host threads' kernels on one
# buffer, and instrumenting them made the TSan integration tests 3.2x
# slower (test_graph_recipes + test_fp8_recipes: 110 s against 34 s, two
# cores). The shim, the stand-in and the clients stay instrumented; kernel
# memory shared between threads is checked by value (docs/setup-and-tests.md).
KERNELS_HOST_SAN := $(if $(filter tsan,$(SAN)),,$(SAN_FLAGS))
KERNELS_HOST_FLAGS := -x c++ -std=c++17 -O2 -g -fPIC -fvisibility=hidden -Wall -Wextra -Wshadow \
  -DGS_EMU -isystem $(CUDA)/include $(KERNELS_HOST_SAN)
KERNELS_HOST_OBJ := $(patsubst kernels/%.cu,$(BUILD)/kernels/host/%.o,$(KERNELS_CU))

$(BUILD)/kernels/host/%.o: kernels/%.cu tests/standin/standin_kernel.h
	@mkdir -p $(dir $@)
	$(CXX) $(KERNELS_HOST_FLAGS) -MMD -MP -c $< -o $@
-include $(KERNELS_HOST_OBJ:.o=.d)

$(KERNELS_HOST_SO): $(KERNELS_HOST_OBJ)
	@mkdir -p $(dir $@)
	$(CXX) -shared -o $@ $(KERNELS_HOST_OBJ) $(KERNELS_HOST_SAN)

TEST_DEPS += $(KERNELS_HOST_SO)
# test_kernels loads the host kernels and the stand-in driver (dlopen), so
# they are built first. standin.mk is read after this file: its
# STANDIN_DIR_CU13 is not set yet, so the driver's path is spelled out.
$(BUILD)/tests/unit/test_kernels: $(KERNELS_HOST_SO) $(BUILD)/standin/cu13/libcuda.so.1

# Every plain sm_XY that this ptxas lists (CUDA 13: sm_75 and up; it refuses
# sm_61 itself but assembles .target sm_61 PTX for any newer GPU), from the
# file's own target up (an sm_89 file is assembled for sm_89 and newer only).
# KERNELS_PTX_CHECK_ARCHS="sm_61 sm_90" checks only those (each must be one
# this ptxas lists): a quicker second check with another ptxas, without
# check_quantize_ptx.py's counting and spill checks (8 ptxas runs, about
# 30 s of CPU; the full check makes them).
KERNELS_PTX_CHECK_ARCHS ?=
# ptxas runs for one file's targets at once, this many at a time.
KERNELS_PTX_CHECK_JOBS ?= 2
# Whether a target takes the PTX (its ISA version, instructions and state
# spaces) does not depend on the optimisation level, so the sweep runs ptxas
# -O0 (about 60% of -O3's time here: fp8_scaled_quantize.ptx for sm_90 4.4 s
# against 7.4 s); the targets listed here get the -O3 the driver's JIT uses.
KERNELS_PTX_CHECK_O3 ?= sm_75 sm_90 sm_120
.PHONY: kernels-ptx-check
kernels-ptx-check: $(KERNELS_PTX)
	@if [ ! -x "$(PTXAS)" ]; then \
	  echo "kernels-ptx-check: FAILED: no ptxas at $(PTXAS) (the CUDA toolkit's; set CUDA= or PTXAS=)"; exit 1; fi
	@set -e; all=$$($(PTXAS) --help | grep -o "'sm_[0-9]*'" | tr -d "'" | sort -u -V); \
	if [ -z "$$all" ]; then echo "kernels-ptx-check: FAILED: $(PTXAS) --help lists no sm_ targets"; exit 1; fi; \
	if [ -n "$(KERNELS_PTX_CHECK_ARCHS)" ]; then \
	  for a in $(KERNELS_PTX_CHECK_ARCHS); do case " $$(echo $$all) " in *" $$a "*) ;; *) \
	    echo "kernels-ptx-check: FAILED: KERNELS_PTX_CHECK_ARCHS has $$a, which $(PTXAS) does not list"; exit 1;; esac; done; \
	  all="$(KERNELS_PTX_CHECK_ARCHS)"; fi; \
	$(foreach f,$(patsubst kernels/%.cu,%,$(KERNELS_CU)),\
	  ptx=$(BUILD)/kernels/$f.ptx; want_v=".version $(call kernels_isa,$f)"; want_t=".target $(call kernels_target,$f)"; \
	  v=$$(grep -m1 '^\.version' $$ptx); t=$$(grep -m1 '^\.target' $$ptx); \
	  if [ "$$v" != "$$want_v" ] || [ "$$t" != "$$want_t" ]; then \
	    echo "kernels-ptx-check: FAILED: $$ptx has '$$v' '$$t', expected $$want_v $$want_t"; exit 1; fi; \
	  min=$(subst sm_,,$(call kernels_target,$f)); archs=""; \
	  for a in $$all; do if [ $${a#sm_} -ge $$min ]; then archs="$$archs $$a"; fi; done; \
	  if [ -z "$$archs" ]; then echo "kernels-ptx-check: FAILED: $(PTXAS) lists no target for $$ptx"; exit 1; fi; \
	  export ptx; printf '%s\n' $$archs | xargs -P $(KERNELS_PTX_CHECK_JOBS) -I'{}' sh -c \
	    'o=-O0; case " $(KERNELS_PTX_CHECK_O3) " in (*" {} "*) o=-O3;; esac; \
	     $(PTXAS) $$o -arch={} -o "$${ptx%.ptx}.{}.cubin" "$$ptx" || { echo "kernels-ptx-check: FAILED: $(PTXAS) $$o -arch={} $$ptx"; exit 1; }' \
	    || exit 1; \
	  echo "kernels-ptx-check: $$ptx (PTX ISA $(call kernels_isa,$f), .target $(call kernels_target,$f)) assembles for$$archs";)
	@if [ -z "$(KERNELS_PTX_CHECK_ARCHS)" ]; then \
	  $(PYTHON) scripts/check_quantize_ptx.py $(PTXAS) $(BUILD)/kernels/fp8_quantize.ptx $(BUILD)/kernels/fp8_quantize_sm89.ptx; fi
# The PTX does not depend on the sanitizer (KERNELS_CUDA_FLAGS carry none):
# checked once, in the plain build.
ifeq ($(SAN),)
TEST_STEPS += kernels-ptx-check
endif

# ---- perf-report ------------------------------------------------------------
# `make perf-report` writes docs/perf-static.md (scripts/perf_report.py):
# ptxas figures per kernel and target, SASS per element of the sm_89
# quantize, stand-in call counts per routed call, and labelled estimates.
# CUDA 13's ptxas refuses sm_61 and the toolkit has no disassembler, so
# ptxas 12.9 and nvdisasm come from PyPI into a venv under the build.
PERF_VENV      := $(BUILD)/venv-ptxas12
PERF_PIP_PKGS  := nvidia-cuda-nvcc-cu12==12.9.86 nvidia-cuda-nvdisasm==13.5.37
PERF_CLIENT    := $(BUILD)/perf/route_calls

$(PERF_VENV)/.installed:
	$(PYTHON) -m venv $(PERF_VENV)
	$(PERF_VENV)/bin/pip install -q $(PERF_PIP_PKGS)
	@touch $@

$(PERF_CLIENT): scripts/perf/route_calls.c $(BUILD)/standin/cu13/libcuda.so.1 $(BUILD)/standin/cu13/libcublas.so.13
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -o $@ $< -L$(BUILD)/standin/cu13 -l:libcublas.so.13 -l:libcuda.so.1
# tests/integration/test_steady_state.py holds the routes to exact counts with it.
TEST_DEPS += $(PERF_CLIENT)

# The block-scaled fast paths as perf-report counts them: one mode each
# (GS_FP8_BQ_COUNT: 0 VEC128, 3 MX32_CEIL), the other branches compiled out.
PERF_BQ_PTX := $(BUILD)/perf/bq_count0.ptx $(BUILD)/perf/bq_count3.ptx
$(BUILD)/perf/bq_count%.ptx: kernels/fp8_scaled_quantize.cu $(KERNELS_HDR)
	@mkdir -p $(dir $@)
	$(CLANG_CUDA) $(KERNELS_CUDA_FLAGS) --cuda-gpu-arch=sm_90 $(call kernels_isa_flag,fp8_scaled_quantize) -DGS_FP8_BQ_COUNT=$* -S $< -o $@

# The current recipe's fast quantize loops as perf-report counts them: one
# layout each (GS_FP8_CUR_COUNT: 1 k-contiguous, 2 k-strided), E4M3 data
# with the step in range, the other ways compiled out.
PERF_CUR_PTX := $(BUILD)/perf/cur_count1.ptx $(BUILD)/perf/cur_count2.ptx
$(BUILD)/perf/cur_count%.ptx: kernels/fp8_quantize_sm89.cu kernels/fp8_quantize.cu $(KERNELS_HDR)
	@mkdir -p $(dir $@)
	$(CLANG_CUDA) $(KERNELS_CUDA_FLAGS) --cuda-gpu-arch=sm_89 $(call kernels_isa_flag,fp8_quantize_sm89) -DGS_FP8_CUR_COUNT=$* -S $< -o $@

# test_cost --table prints the cost model's table (tests/unit/unit.mk).
.PHONY: perf-report
perf-report: $(PERF_VENV)/.installed $(KERNELS_PTX) $(PERF_BQ_PTX) $(PERF_CUR_PTX) $(SHIM_SO) $(KERNELS_HOST_SO) $(PERF_CLIENT) \
             $(BUILD)/tests/unit/test_cost
	$(PYTHON) scripts/perf_report.py --build $(BUILD) --cuda $(CUDA) --client $(PERF_CLIENT) --out docs/perf-static.md \
	  --ptxas12 "$$(ls $(PERF_VENV)/lib/python3*/site-packages/nvidia/cuda_nvcc/bin/ptxas)" \
	  --nvdisasm "$$(ls $(PERF_VENV)/lib/python3*/site-packages/nvidia/cu13/bin/nvdisasm)"
