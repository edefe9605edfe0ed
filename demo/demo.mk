# demo/demo.mk: `make demo`, included by the top Makefile.
#
#   $(BUILD)/demo/train_demo   a bf16 training loop that calls cuBLAS as
#                              PyTorch does (demo/train_demo.c), linked
#                              against cuBLAS 13 like any program; at run
#                              time LD_LIBRARY_PATH picks the stand-in or
#                              the real libraries
#   demo (target)              demo/run_demo.py: that loop under the shim
#                              over the stand-in, as a GTX 1080 and an H100,
#                              in native, auto and fp8 modes; routing logs in
#                              $(BUILD)/demo/
# tests/integration/test_demo.py runs the same driver with fewer steps.
DEMO_DIR := $(BUILD)/demo
DEMO_BIN := $(DEMO_DIR)/train_demo
DEMO_STEPS ?= 40

$(DEMO_BIN): demo/train_demo.c $(STANDIN_LIBS_CU13)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -o $@ $< $(LDFLAGS_SAN) -L$(STANDIN_DIR_CU13) -Wl,-rpath-link,$(STANDIN_DIR_CU13) \
	  -lcublas -lcublasLt -lcuda -lm -lpthread

DEMO_DEPS := $(SHIM_SO) $(DEMO_BIN) $(STANDIN_LIBS_CU13) $(KERNELS_HOST_SO)
TEST_DEPS += $(DEMO_DEPS)
# The integration step's prerequisites were read with integration.mk.
integration: $(DEMO_DEPS)

# Set-up first (scripts/setup.sh installs the compilers), then the build, in
# a second make.
.PHONY: demo demo-run
demo: setup
	@$(MAKE) --no-print-directory demo-run

# `all` too: the README's next step is the launcher that `make` builds.
demo-run: all $(DEMO_DEPS)
	$(PYTHON) demo/run_demo.py --build $(BUILD) --steps $(DEMO_STEPS)
