# The GPU check programs, built on their own (scripts/gpu-check.sh runs
#     make -f tests/gpu/gpu.mk BUILD=build CUDA=/usr/local/cuda
# ) so they need only gcc and the toolkit's headers and cuBLAS: no clang, no
# stand-in, nothing from the main build.
#
# cuBLAS 13 is linked by soname, so a shim preloaded into the program
# interposes on its calls (loading pattern 1); which libcublas.so.13 runs is
# LD_LIBRARY_PATH's choice. The driver and CUPTI are dlopen()ed.
CUDA    ?= /usr/local/cuda
BUILD   ?= build
CC      ?= gcc

GPU_OUT    := $(BUILD)/tests/gpu
# Added to compiling and linking alike, e.g.
#   GPU_EXTRA="-O1 -fsanitize=address,undefined -fno-omit-frame-pointer"
GPU_EXTRA  ?=
GPU_CFLAGS := -O2 -g -Wall -Wextra -Wno-unused-parameter -Wshadow -Wstrict-prototypes -std=gnu11 -pthread \
              -isystem $(CUDA)/include $(GPU_EXTRA)
GPU_CUBLAS := -L$(CUDA)/lib64 -Wl,--no-as-needed -l:libcublas.so.13 -l:libcublasLt.so.13 -Wl,--as-needed
GPU_LIBS   := -ldl -lm -lpthread
GPU_HDRS   := $(wildcard tests/gpu/*.h) kernels/cast.h kernels/fp8_kernels.h

GPU_BIN := $(GPU_OUT)/route_check $(GPU_OUT)/gemm_bench $(GPU_OUT)/cast_bench $(GPU_OUT)/lt_scale_probe

.PHONY: gpu-programs
gpu-programs: $(GPU_BIN)

$(GPU_OUT)/%.o: tests/gpu/%.c $(GPU_HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(GPU_CFLAGS) -c $< -o $@

$(GPU_OUT)/route_check: $(GPU_OUT)/route_check.o $(GPU_OUT)/gpu_common.o
	$(CC) -pthread $(GPU_EXTRA) -o $@ $^ $(GPU_CUBLAS) $(GPU_LIBS)

$(GPU_OUT)/gemm_bench: $(GPU_OUT)/gemm_bench.o $(GPU_OUT)/gpu_common.o $(GPU_OUT)/kernel_trace.o
	$(CC) -pthread $(GPU_EXTRA) -o $@ $^ $(GPU_CUBLAS) $(GPU_LIBS)

$(GPU_OUT)/lt_scale_probe: $(GPU_OUT)/lt_scale_probe.o $(GPU_OUT)/gpu_common.o
	$(CC) -pthread $(GPU_EXTRA) -o $@ $^ $(GPU_CUBLAS) $(GPU_LIBS)

# No cuBLAS: the cast kernels and the driver only.
$(GPU_OUT)/cast_bench: $(GPU_OUT)/cast_bench.o $(GPU_OUT)/gpu_common.o
	$(CC) -pthread $(GPU_EXTRA) -o $@ $^ $(GPU_LIBS)
