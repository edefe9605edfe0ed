# Host-cost benchmark (not part of `make test`: timings are measured, never
# asserted). `make bench` prints the table the README quotes.
BENCH_CLIENT := $(BUILD)/tests/bench/bench_client

$(BENCH_CLIENT): tests/bench/bench_client.c $(STANDIN_DIR_CU12)/libcublas.so.12
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -o $@ $< -L$(STANDIN_DIR_CU12) -lcublasLt -lcublas -lcuda

bench: all $(BENCH_CLIENT) $(INTEG_DIR)/libnvtx_inject.so
	$(PYTHON) tests/bench/run_bench.py $(BUILD)
