# tests/faults/faults.mk: systematic fault injection (tests/faults/fault_loop.py),
# included by the top Makefile after the integration rules.
#
#   make faults      every call-table entry x every route, transient and
#                    persistent, N = 1, 2, ...; rewrites the generated
#                    table in docs/reliability.md (fourteen routes: about 23,000 runs,
#                    about 6 min wall with FAULT_JOBS=1 on two busy cores)
#   fault-check      (test step) the same runs, compared with the committed
#                    table; in sanitizer builds the native route only,
#                    under the sanitizer
FAULT_JOBS   ?= 2
FAULT_DIR    := $(BUILD)/faults
FAULT_ROUTES_CHECK ?= $(if $(SAN),native,native;ffma;ffma graph;ffma no-pools;fp8 own;fp8 cublaslt;fp8 block;fp8 mxfp8;fp8 delayed;fp8 delayed per-thread;fp8 padded;fp16;ffma invariant;ffma gpu-time)
FAULT_DEPS   := $(SHIM_SO) $(FFMA_CLIENT) $(STANDIN_LIBS_CU13) $(KERNELS_HOST_SO)

.PHONY: faults fault-check
faults: $(FAULT_DEPS)
	$(INTEG_ENV) $(PYTHON) tests/faults/fault_loop.py --jobs $(FAULT_JOBS) --table $(FAULT_DIR)/table.md \
	  --json $(FAULT_DIR)/runs.json --doc docs/reliability.md --update

fault-check: $(FAULT_DEPS)
	$(INTEG_ENV) $(PYTHON) tests/faults/fault_loop.py --jobs $(FAULT_JOBS) --routes '$(FAULT_ROUTES_CHECK)' \
	  --table $(FAULT_DIR)/table-check.md --doc docs/reliability.md --check

TEST_STEPS += fault-check
