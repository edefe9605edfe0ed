# gemmshim build. `make` builds build/libgemmshim.so; `make test` builds and
# runs every test on the CPU (no GPU needed); `make demo` runs a training loop
# under the shim over the CPU stand-in; `make asan` / `make tsan` run the
# same suite under AddressSanitizer+UBSan / ThreadSanitizer. `make test` and
# `make demo` first install what is missing (scripts/setup.sh).
#
# Variants build into their own folder: BUILD=build/asan SAN=asan ...

CUDA     ?= /usr/local/cuda
include packaging/pip_cuda.mk
# The CUDA headers the shim is built with (cuda.h, library_types.h,
# cublas_api.h, cublasLt.h): the toolkit's, or the folders that PyPI's NVIDIA
# packages install (docs/build-from-pip.md).
CUDA_INCLUDE ?= $(CUDA)/include
CC       ?= gcc
# Debian's interpreter, whose pytest is python3-pytest (scripts/setup.sh
# installs it): never whichever python3 comes first on PATH (pyenv, conda,
# a venv), which may lack it.
PYTHON   ?= /usr/bin/python3
BUILD    ?= build
# The long pytest steps (integration, lifecycle) run their tests this many at
# a time (pytest-xdist, python3-pytest-xdist); 1 runs them in one process.
PYTEST_JOBS ?= 2
PYTEST_PAR  := $(if $(filter-out 0 1,$(PYTEST_JOBS)),-n $(PYTEST_JOBS))
SAN      ?=

SAN_FLAGS_asan := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
SAN_FLAGS_tsan := -fsanitize=thread
SAN_FLAGS := $(SAN_FLAGS_$(SAN))

WARN     := -Wall -Wextra -Wno-unused-parameter -Wshadow -Wstrict-prototypes
CFLAGS   ?= -O2 -g
ALL_CFLAGS := $(CFLAGS) $(WARN) -std=gnu11 -fPIC -pthread $(addprefix -isystem ,$(CUDA_INCLUDE)) $(SAN_FLAGS)
LDFLAGS_SAN := $(SAN_FLAGS)

# --- the shim -------------------------------------------------------------
# Everything the preloaded library is made of. Its only run-time dependency
# is libc: cuBLAS and the driver are found with dlopen/dlsym at run time.
SHIM_SRC   := $(sort $(wildcard shim/*.c shim/base/*.c shim/routes/*.c) $(wildcard policy/*.c) $(wildcard kernels/*_launch.c))
SHIM_ASM   := $(sort $(wildcard shim/*.S))
SHIM_OBJ   := $(patsubst %.c,$(BUILD)/obj/%.o,$(SHIM_SRC)) $(patsubst %.S,$(BUILD)/obj/%.o,$(SHIM_ASM))
SHIM_SO    := $(BUILD)/libgemmshim.so

.PHONY: all setup test test-steps unit integration asan tsan bench clean
all: $(SHIM_SO)

# Installs what the build and tests need (Debian packages, checks the CUDA
# toolkit and $(PYTHON)); once, then a stamp in $(BUILD) makes it instant.
setup:
	@BUILD=$(BUILD) CUDA=$(CUDA) PYTHON=$(PYTHON) scripts/setup.sh

SHIM_HDR   := $(wildcard shim/*.h shim/base/*.h shim/routes/*.h policy/*.h kernels/*.h)

$(BUILD)/obj/%.o: %.c $(SHIM_HDR)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -fvisibility=hidden -c $< -o $@

# The dlsym entry runs before a sanitizer runtime has initialised (the
# runtime itself calls dlsym): never instrument it.
$(BUILD)/obj/shim/dlsym_entry.o: shim/dlsym_entry.c $(SHIM_HDR)
	@mkdir -p $(dir $@)
	$(CC) $(filter-out $(SAN_FLAGS),$(ALL_CFLAGS)) -fvisibility=hidden -c $< -o $@

$(BUILD)/obj/%.o: %.S
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -c $< -o $@

$(SHIM_SO): $(SHIM_OBJ) shim/exports.map
	$(CC) -shared -Wl,--version-script=shim/exports.map -Wl,-z,defs -Wl,-z,nodelete \
	  $(LDFLAGS_SAN) -o $@ $(SHIM_OBJ) -ldl -lpthread

# --- tests ----------------------------------------------------------------
# Each area adds its own rules and appends its runnable checks to TEST_STEPS.
TEST_STEPS :=
-include kernels/kernels.mk
-include kernels/fp8.mk
-include kernels/fp16.mk
include tests/standin/standin.mk
include tests/unit/unit.mk
include tests/integration/integration.mk
include tests/integration/fp8.mk
include tests/integration/ffma.mk
include tests/integration/proc.mk
include tests/fuzz/fuzz.mk
include tests/faults/faults.mk
include tests/valgrind/valgrind.mk
include tests/lifecycle/lifecycle.mk
include tests/layout/layout.mk
include launcher/launcher.mk
include packaging/install.mk
include packaging/wheel.mk
include packaging/pip_cuda_test.mk
-include tests/bench/bench.mk
include demo/demo.mk

# The GPU check's own logic (its programs, route checks, routing-log
# expectations, report) runs over the stand-in too; only its timings mean
# nothing here. Once, in the plain build: its programs are not sanitized.
ifeq ($(SAN),)
TEST_STEPS += gpu-check-standin
endif
.PHONY: gpu-check-standin
gpu-check-standin: all
	BUILD=$(BUILD) CUDA=$(CUDA) PYTHON=$(PYTHON) scripts/gpu-check.sh --standin

# Set-up first, then everything else in a second make, so that nothing is
# compiled before the compilers are installed.
test: setup
	@$(MAKE) --no-print-directory test-steps

# Everything the test steps need, built but not run.
test-deps: all $(TEST_DEPS)

test-steps: all $(TEST_DEPS)
	@set -e; for step in $(TEST_STEPS); do t0=$$(date +%s); \
	  $(MAKE) --no-print-directory $$step; \
	  echo "gemmshim: step $$step took $$(( $$(date +%s) - t0 )) s (BUILD=$(BUILD))"; done
	@echo "gemmshim: all test steps passed ($(words $(TEST_STEPS)) steps, BUILD=$(BUILD))"

asan:
	$(MAKE) BUILD=build/asan SAN=asan CFLAGS="-O1 -g" test

tsan:
	$(MAKE) BUILD=build/tsan SAN=tsan CFLAGS="-O1 -g" test

clean:
	rm -rf build
