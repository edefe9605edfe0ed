# tests/fuzz/fuzz.mk: libFuzzer harnesses (clang-19, -fsanitize=fuzzer with
# AddressSanitizer and UBSan), included by the top Makefile.
#
#   fuzz_policy       the policy file parser (policy/policy.c)
#   fuzz_options      the option parsers and options_init (shim/options.c)
#   fuzz_log_path     %p %h %r %% expansion of the log and debug paths
#   fuzz_lt_decode    the cuBLASLt descriptor decoder, over the stand-in
#
# Each harness states its invariants at its top. The seed corpus of each is
# tests/fuzz/corpus/<name>/ (committed).
#
#   make fuzz           each harness for FUZZ_SECONDS (default 60), new
#                       inputs kept under build/fuzz/found/<name>; prints
#                       executions and coverage (tests/fuzz/run.sh)
#   fuzz-check (test step, plain build only: the harnesses are their own
#                       sanitizer build) every corpus input once, then
#                       FUZZ_CHECK_SECONDS (default 2) of fuzzing each
FUZZ_CC    ?= clang-19
FUZZ_DIR   := $(BUILD)/fuzz
FUZZ_NAMES := policy options log_path lt_decode
FUZZ_BIN   := $(addprefix $(FUZZ_DIR)/fuzz_,$(FUZZ_NAMES))
FUZZ_SECONDS ?= 60
FUZZ_CHECK_SECONDS ?= 2
# make fuzz writes its figures into this file's generated section.
FUZZ_DOC ?= docs/reliability.md

FUZZ_SAN    := -fsanitize=address,undefined -fno-sanitize-recover=undefined
FUZZ_CFLAGS := -O1 -g -std=gnu11 -fPIC -pthread $(WARN) -isystem $(CUDA)/include $(FUZZ_SAN) \
  -fno-omit-frame-pointer
# The shim's objects minus the hooks (as the unit tests link them), built
# again with coverage instrumentation.
FUZZ_SHIM_SRC := $(filter-out shim/hooks.c,$(SHIM_SRC))
FUZZ_SHIM_OBJ := $(patsubst %.c,$(FUZZ_DIR)/obj/%.o,$(FUZZ_SHIM_SRC)) $(KERNELS_PTX_OBJ)

$(FUZZ_DIR)/obj/%.o: %.c $(SHIM_HDR)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link -fvisibility=hidden -c $< -o $@

$(FUZZ_DIR)/fuzz_%: tests/fuzz/fuzz_%.c $(FUZZ_SHIM_OBJ)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer -Ishim -Ishim/base -Ishim/routes -Ipolicy -o $@ $< $(FUZZ_SHIM_OBJ) \
	  $(FUZZ_LIBS_$*) -ldl -lpthread -lm

# The decoder reads descriptors through the stand-in libcublasLt.
FUZZ_LIBS_lt_decode = -L$(STANDIN_DIR_CU13) -Wl,-rpath,$(abspath $(STANDIN_DIR_CU13)) -l:libcublasLt.so.13
$(FUZZ_DIR)/fuzz_lt_decode: $(STANDIN_LIBS_CU13)

# Kept: the harnesses relink from them.
.SECONDARY: $(FUZZ_SHIM_OBJ)

.PHONY: fuzz fuzz-check fuzz-build
fuzz-build: $(FUZZ_BIN)

fuzz: $(FUZZ_BIN)
	FUZZ_DIR=$(FUZZ_DIR) FUZZ_DOC=$(FUZZ_DOC) tests/fuzz/run.sh fuzz $(FUZZ_SECONDS) $(FUZZ_NAMES)

fuzz-check: $(FUZZ_BIN)
	FUZZ_DIR=$(FUZZ_DIR) tests/fuzz/run.sh check $(FUZZ_CHECK_SECONDS) $(FUZZ_NAMES)

ifeq ($(SAN),)
TEST_DEPS  += $(FUZZ_BIN)
TEST_STEPS += fuzz-check
endif
