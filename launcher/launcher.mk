# launcher.mk: the gemmshim command, included by the top Makefile after
# unit.mk (it links the same shim objects the unit tests do: everything but
# the hooks and the exec wrappers, so the launcher interposes nothing on
# itself).
#
#   $(BUILD)/gemmshim     the launcher (part of `make`)
#   launcher-test         tests/launcher over the stand-in (a test step)
LAUNCHER_SRC := $(sort $(wildcard launcher/*.c))
LAUNCHER_OBJ := $(patsubst %.c,$(BUILD)/obj/%.o,$(LAUNCHER_SRC))
LAUNCHER     := $(BUILD)/gemmshim

$(BUILD)/obj/launcher/%.o: launcher/%.c launcher/launcher.h $(SHIM_HDR)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -c $< -o $@

# Where a launcher run from the build tree finds the Python package.
$(BUILD)/obj/launcher/locate.o: ALL_CFLAGS += -DGEMMSHIM_SOURCE_PYTHON='"$(CURDIR)/python"'

$(LAUNCHER): $(LAUNCHER_OBJ) $(SHIM_CORE_OBJ)
	$(CC) $(LDFLAGS_SAN) -pthread -o $@ $(LAUNCHER_OBJ) $(SHIM_CORE_OBJ) -ldl -lm

all: $(LAUNCHER)

# The launcher's tests exec programs under the preloaded shim; in a
# sanitizer build that needs the sanitizer runtime preloaded ahead of it in
# every child, which the launcher (rightly) does not do. Plain build only.
ifeq ($(SAN),)
TEST_STEPS += launcher-test
endif
.PHONY: launcher-test
launcher-test: $(LAUNCHER) $(SHIM_SO) $(INTEG_BIN) $(FP8_CLIENT) $(STANDIN_LIBS_CU13) $(KERNELS_HOST_SO)
	$(INTEG_ENV) $(PYTHON) -m pytest -q tests/launcher
