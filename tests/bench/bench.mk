# Host-cost benchmark (not part of `make test`: timings are measured, never
# asserted). `make bench` prints the tables docs/overhead.md quotes.
BENCH_CLIENT := $(BUILD)/tests/bench/bench_client

# The unversioned links (-lcublas) come with the stand-in's full library set;
# without them the linker would find the toolkit's real cuBLAS.
$(BENCH_CLIENT): tests/bench/bench_client.c $(STANDIN_LIBS_CU12)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -o $@ $< -L$(STANDIN_DIR_CU12) -lcublasLt -lcublas -lcuda

# Then the routed calls (tests/bench/routed_bench.py): the shim's own
# instructions per ffma / fp8 call and the library calls each makes, with
# the client and routes of `make perf-report` (scripts/perf/route_calls.c).
bench: all $(BENCH_CLIENT) $(INTEG_DIR)/libnvtx_inject.so $(PERF_CLIENT) $(KERNELS_HOST_SO)
	$(PYTHON) tests/bench/run_bench.py $(BUILD)
	@echo
	$(PYTHON) tests/bench/routed_bench.py $(BUILD)

# The one cost that is asserted: instructions per call (callgrind, exact)
# must not grow with what the process did before (destroyed handles).
# Plain build only: valgrind does not run sanitized code.
ifeq ($(SAN),)
TEST_DEPS  += $(BENCH_CLIENT)
TEST_STEPS += bench-check
endif
.PHONY: bench-check
bench-check: all $(BENCH_CLIENT)
	$(PYTHON) tests/bench/check_costs.py $(BUILD)
