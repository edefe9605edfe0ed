# Integration tests: client programs that call cuBLAS the three ways
# frameworks load it, run by pytest with and without the shim, over the CPU
# stand-in (tests/integration) and over the real cuBLAS 13 with no GPU
# (tests/real).
#
#   client_linked_cuN          links libcublas/libcublasLt .so.N   (pattern 1)
#   client_framework           dlopen()s cuN/libfakeframework.so   (pattern 2)
#   client_xla                 dlopen()s libcublas(Lt).so.N itself (pattern 3)
#   libnvtx_inject.so          an NVTX tool recording the shim's ranges
#   dlsym_probe                what dlsym answers, from the program and from
#                              libprobe_first.so / libprobe_second.so
#
# The clients link the stand-in's libraries, whose sonames are the real
# ones, so the same binaries run over the real cuBLAS through
# LD_LIBRARY_PATH.
INTEG_DIR    := $(BUILD)/tests/integration
# The toolkit headers as system headers: their own warnings are not ours.
INTEG_CFLAGS := $(ALL_CFLAGS) -isystem $(CUDA)/include
INTEG_LIBS   := -ldl -lm -lpthread
INTEG_HDRS   := $(wildcard tests/integration/*.h)

# The suite calls cuBLAS directly (patterns 1 and 2) or through the table
# client_xla fills (pattern 3).
INTEG_DIRECT := $(INTEG_DIR)/obj/gemm_suite_direct.o $(INTEG_DIR)/obj/client_cuda.o
INTEG_TABLE  := $(INTEG_DIR)/obj/gemm_suite_table.o $(INTEG_DIR)/obj/client_cuda.o

$(INTEG_DIR)/obj/gemm_suite_direct.o: tests/integration/gemm_suite.c $(INTEG_HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(INTEG_CFLAGS) -DCLIENT_BLAS_DIRECT -c $< -o $@

$(INTEG_DIR)/obj/gemm_suite_table.o: tests/integration/gemm_suite.c $(INTEG_HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(INTEG_CFLAGS) -c $< -o $@

$(INTEG_DIR)/obj/%.o: tests/integration/%.c $(INTEG_HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(INTEG_CFLAGS) -c $< -o $@

# Linking against cuBLAS major N (the stand-in's libraries of that soname).
integ_cublas_deps = $(STANDIN_DIR_CU$(1))/libcublas.so.$(1) $(STANDIN_DIR_CU$(1))/libcublasLt.so.$(1)
integ_cublas_link = -Wl,--no-as-needed -L$(STANDIN_DIR_CU$(1)) -Wl,-rpath-link,$(STANDIN_DIR_CU$(1)) \
  -l:libcublas.so.$(1) -l:libcublasLt.so.$(1) -Wl,--as-needed

define INTEG_CUBLAS_RULES
$(INTEG_DIR)/client_linked_cu$(1): $(INTEG_DIR)/obj/client_linked.o $(INTEG_DIRECT) $(call integ_cublas_deps,$(1))
	$$(CC) $$(LDFLAGS_SAN) -pthread -o $$@ $(INTEG_DIR)/obj/client_linked.o $(INTEG_DIRECT) \
	  $(call integ_cublas_link,$(1)) $$(INTEG_LIBS)

# Only fakeframework_main is exported, as a framework exports only its API.
$(INTEG_DIR)/cu$(1)/libfakeframework.so: $(INTEG_DIR)/obj/fakeframework.o $(INTEG_DIRECT) $(call integ_cublas_deps,$(1))
	@mkdir -p $$(dir $$@)
	$$(CC) $$(LDFLAGS_SAN) -shared -pthread -Wl,-soname,libfakeframework.so -o $$@ \
	  $(INTEG_DIR)/obj/fakeframework.o $(INTEG_DIRECT) $(call integ_cublas_link,$(1)) $$(INTEG_LIBS)
endef
$(foreach v,12 13,$(eval $(call INTEG_CUBLAS_RULES,$(v))))

$(INTEG_DIR)/obj/fakeframework.o: INTEG_CFLAGS += -fvisibility=hidden
$(INTEG_DIR)/obj/gemm_suite_direct.o $(INTEG_DIR)/obj/client_cuda.o: INTEG_CFLAGS += -fvisibility=hidden

$(INTEG_DIR)/client_framework: $(INTEG_DIR)/obj/client_framework.o
	$(CC) $(LDFLAGS_SAN) -pthread -o $@ $^ $(INTEG_LIBS)

$(INTEG_DIR)/client_xla: $(INTEG_DIR)/obj/client_xla.o $(INTEG_TABLE)
	$(CC) $(LDFLAGS_SAN) -pthread -o $@ $^ $(INTEG_LIBS)

# The probe libraries come from one source; which one is which is a macro.
$(INTEG_DIR)/libprobe_%.so: tests/integration/dlsym_probe_lib.c
	@mkdir -p $(dir $@)
	$(CC) $(INTEG_CFLAGS) -shared -DPROBE_LIB=$* -Wl,-soname,libprobe_$*.so -o $@ $< $(INTEG_LIBS)

# -rdynamic: the program's own probe_target is in the global scope. The
# probe libraries are found next to the program ($ORIGIN), cuBLAS through
# LD_LIBRARY_PATH (stand-in or real).
$(INTEG_DIR)/dlsym_probe: tests/integration/dlsym_probe.c $(INTEG_DIR)/libprobe_first.so \
                          $(INTEG_DIR)/libprobe_second.so $(call integ_cublas_deps,13)
	$(CC) $(INTEG_CFLAGS) -rdynamic -o $@ $< -Wl,--no-as-needed -L$(INTEG_DIR) \
	  -Wl,-rpath,'$$ORIGIN' -lprobe_first -lprobe_second $(call integ_cublas_link,13) $(INTEG_LIBS)

# An NVTX tool of the project's own (NVTX_INJECTION64_PATH), recording the
# ranges the shim opens.
$(INTEG_DIR)/libnvtx_inject.so: tests/integration/nvtx_inject.c tests/standin/common.c tests/standin/common.h
	@mkdir -p $(dir $@)
	$(CC) $(INTEG_CFLAGS) -Itests/standin -shared -fvisibility=hidden -o $@ $< tests/standin/common.c $(INTEG_LIBS)

INTEG_BIN := $(INTEG_DIR)/libnvtx_inject.so $(INTEG_DIR)/client_linked_cu12 $(INTEG_DIR)/client_linked_cu13 \
             $(INTEG_DIR)/cu12/libfakeframework.so $(INTEG_DIR)/cu13/libfakeframework.so \
             $(INTEG_DIR)/client_framework $(INTEG_DIR)/client_xla $(INTEG_DIR)/dlsym_probe

TEST_DEPS  += $(INTEG_BIN)
TEST_STEPS += integration

# Sanitizer builds: the sanitizer runtime must come first in the process's
# library list, ahead of the preloaded shim, so the pytest helper puts
# GSTEST_PRELOAD_PREFIX in front of every LD_PRELOAD it sets.
# cuBLAS keeps allocations for the process's lifetime: no leak checking.
INTEG_SAN_RUNTIME_asan = $(shell $(CC) -print-file-name=libasan.so)
INTEG_SAN_RUNTIME_tsan = $(shell $(CC) -print-file-name=libtsan.so)
INTEG_SAN_ENV_asan     = ASAN_OPTIONS=detect_leaks=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
# intercept_strstr=0: TSan checks every byte a strstr scans, and the
# stand-in driver scans each module's PTX for its entries (12 MB a context:
# test_context_churn_keeps_stream_workspaces, 600 contexts, took 44 s against
# 15 s without). The shim calls no strstr; the launcher only on option values.
INTEG_SAN_ENV_tsan     = TSAN_OPTIONS=halt_on_error=1:intercept_strstr=0
# The stand-in libcuda runs the shim's kernels from their host build.
INTEG_ENV = GSTEST_BUILD=$(BUILD) \
  GSTEST_STANDIN_CU12=$(STANDIN_DIR_CU12) GSTEST_STANDIN_CU13=$(STANDIN_DIR_CU13) \
  GSTEST_KERNELS=$(KERNELS_HOST_SO) \
  GSTEST_PRELOAD_PREFIX=$(INTEG_SAN_RUNTIME_$(SAN)) $(INTEG_SAN_ENV_$(SAN))

integration: $(SHIM_SO) $(INTEG_BIN) $(STANDIN_LIBS_CU12) $(STANDIN_LIBS_CU13) $(KERNELS_HOST_SO)
	$(INTEG_ENV) $(PYTHON) -m pytest -q $(PYTEST_PAR) tests/integration tests/real
