# tests/valgrind/valgrind.mk: `make valgrind`, memcheck over the integration
# clients under the preloaded shim on every route (tests/valgrind/run.sh),
# included by the top Makefile after the integration rules. Plain build
# only: valgrind does not run sanitized programs.
.PHONY: valgrind valgrind-subset
VALGRIND_DEPS := $(SHIM_SO) $(INTEG_BIN) $(FFMA_CLIENT) $(FP8_CLIENT) $(STANDIN_LIBS_CU13) $(KERNELS_HOST_SO)
VALGRIND_ENV  := BUILD=$(BUILD) STANDIN13=$(abspath $(STANDIN_DIR_CU13)) STANDIN12=$(abspath $(STANDIN_DIR_CU12)) \
  KERNELS_HOST=$(abspath $(KERNELS_HOST_SO))

valgrind: $(VALGRIND_DEPS)
	$(VALGRIND_ENV) tests/valgrind/run.sh

valgrind-subset: $(VALGRIND_DEPS)
	$(VALGRIND_ENV) tests/valgrind/run.sh --subset
