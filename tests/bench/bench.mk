# Host-cost benchmark (not part of `make test`: timings are measured, never
# asserted). `make bench` prints the table the README quotes.
BENCH_CLIENT := $(BUILD)/tests/bench/bench_client

# The unversioned links (-lcublas) come with the stand-in's full library set;
# without them the linker would find the toolkit's real cuBLAS.
$(BENCH_CLIENT): tests/bench/bench_client.c $(STANDIN_LIBS_CU12)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -o $@ $< -L$(STANDIN_DIR_CU12) -lcublasLt -lcublas -lcuda

bench: all $(BENCH_CLIENT) $(INTEG_DIR)/libnvtx_inject.so
	$(PYTHON) tests/bench/run_bench.py $(BUILD)

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
