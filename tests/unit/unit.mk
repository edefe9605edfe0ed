# Unit tests: cmocka programs, one per tests/unit/test_*.c, each linked with
# the shim's objects minus the hooks (so the test binary does not interpose
# cuBLAS, dlsym or the exec family on itself).
UNIT_SRC  := $(sort $(wildcard tests/unit/test_*.c))
UNIT_BIN  := $(patsubst tests/unit/%.c,$(BUILD)/tests/unit/%,$(UNIT_SRC))
SHIM_HOOK_OBJ := $(BUILD)/obj/shim/hooks.o $(BUILD)/obj/shim/exec.o $(patsubst %.S,$(BUILD)/obj/%.o,$(SHIM_ASM))
SHIM_CORE_OBJ := $(filter-out $(SHIM_HOOK_OBJ),$(SHIM_OBJ))

$(BUILD)/tests/unit/%: tests/unit/%.c $(SHIM_CORE_OBJ) $(wildcard tests/unit/*.h) | $(STANDIN_LIBS_CU12) $(STANDIN_LIBS_CU13)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -Ishim -Ishim/base -Ishim/routes -Ipolicy -o $@ $< $(SHIM_CORE_OBJ) $(LDFLAGS_SAN) $(UNIT_LIBS_$*) -lcmocka -ldl -lpthread -lm

# Descriptor decoding is checked against the toolkit's real cuBLASLt, whose
# descriptors work without a GPU.
UNIT_LIBS_test_decode := -L$(CUDA)/lib64 -Wl,-rpath,$(CUDA)/lib64 -lcublasLt
# The caller cache's test counts the shim's dladdr calls.
UNIT_LIBS_test_site := -Wl,--wrap=dladdr
# The exec wrappers' test links them in: its own exec calls go through them.
UNIT_LIBS_test_exec := $(BUILD)/obj/shim/exec.o
$(BUILD)/tests/unit/test_exec: $(BUILD)/obj/shim/exec.o

TEST_DEPS  += $(UNIT_BIN)
TEST_STEPS += unit

# Each unit program runs on its own; cmocka prints a summary per program.
# Under TSan without its strstr check, as the integration tests
# (integration.mk: the stand-in's scans of the kernels' PTX).
UNIT_ENV = $(if $(filter tsan,$(SAN)),TSAN_OPTIONS=intercept_strstr=0)
unit: $(UNIT_BIN)
	@set -e; for t in $(UNIT_BIN); do echo "== $$t"; $(UNIT_ENV) $$t; done
