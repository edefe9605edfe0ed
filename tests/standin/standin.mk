# tests/standin/standin.mk: the CPU stand-ins for libcuda.so.1,
# libcublas.so.N and libcublasLt.so.N that every test runs over, and their
# self-test. See tests/standin/README.md.
#
# Outputs, for N = 12 and 13 (same sources; the soname, the symbol version
# node and the reported versions differ):
#   $(STANDIN_DIR_CUN)/libcuda.so.1, libcublas.so.N, libcublasLt.so.N and
#   the dev links libcuda.so, libcublas.so, libcublasLt.so (-lcublas ...).
# For other areas:
#   STANDIN_DIR_CU12 / STANDIN_DIR_CU13   the library folders
#   STANDIN_LIBS_CU12 / STANDIN_LIBS_CU13 every file in them (prerequisites)
#   STANDIN_LDFLAGS_CU12 / _CU13          link a test program against them,
#                                         with an RPATH that wins over
#                                         LD_LIBRARY_PATH
#   STANDIN_INCLUDE                       -I for standin_kernel.h, numerics.h

STANDIN_SRC_DIR  := tests/standin
STANDIN_DIR_CU12 := $(BUILD)/standin/cu12
STANDIN_DIR_CU13 := $(BUILD)/standin/cu13
STANDIN_INCLUDE  := -I$(STANDIN_SRC_DIR)
STANDIN_HDR      := $(wildcard $(STANDIN_SRC_DIR)/*.h)

STANDIN_CUDA_SRC := driver_init.c driver_ctx.c driver_stream.c driver_graph.c driver_userobj.c driver_mem.c driver_pool.c \
                    driver_module.c driver_errors.c common.c
STANDIN_LT_SRC   := cublaslt_desc.c cublaslt_matmul.c gemm_ref.c scale_modes.c runtime.c common.c
STANDIN_BLAS_SRC := cublas.c gemm_ref.c scale_modes.c runtime.c common.c

# The libraries of one major version: $(1) = 12 or 13.
define STANDIN_LIBS_template
STANDIN_OBJ_CU$(1) := $(BUILD)/standin/obj/cu$(1)

$$(STANDIN_OBJ_CU$(1))/%.o: $(STANDIN_SRC_DIR)/%.c $$(STANDIN_HDR)
	@mkdir -p $$(dir $$@)
	$$(CC) $$(ALL_CFLAGS) -DSTANDIN_CUDA_MAJOR=$(1) -c $$< -o $$@

$$(STANDIN_DIR_CU$(1))/%.map: $(STANDIN_SRC_DIR)/%.map.in
	@mkdir -p $$(dir $$@)
	sed 's/@NODE@/lib$$*.so.$(1)/' $$< > $$@

# Exported symbols bind inside each library (-Bsymbolic, as the real ones
# are linked), except what a library imports from another: libcublas's
# calls into libcublasLt go through the PLT, so an interposer sees them.
# -z nodelete: a dlclose never unloads a stand-in, so each runs its
# constructor once and its exit report covers the whole process.
$$(STANDIN_DIR_CU$(1))/libcuda.so.1: $$(addprefix $$(STANDIN_OBJ_CU$(1))/,$$(STANDIN_CUDA_SRC:.c=.o)) $(STANDIN_SRC_DIR)/cuda.map $(STANDIN_SRC_DIR)/standin.mk
	@mkdir -p $$(dir $$@)
	$$(CC) -shared -Wl,-soname,libcuda.so.1 -Wl,--version-script=$(STANDIN_SRC_DIR)/cuda.map \
	  -Wl,-z,defs -Wl,-z,nodelete -Wl,-Bsymbolic $$(LDFLAGS_SAN) -o $$@ $$(filter %.o,$$^) -ldl -lpthread

$$(STANDIN_DIR_CU$(1))/libcublasLt.so.$(1): $$(addprefix $$(STANDIN_OBJ_CU$(1))/,$$(STANDIN_LT_SRC:.c=.o)) $$(STANDIN_DIR_CU$(1))/cublasLt.map $$(STANDIN_DIR_CU$(1))/libcuda.so.1 $(STANDIN_SRC_DIR)/standin.mk
	$$(CC) -shared -Wl,-soname,libcublasLt.so.$(1) \
	  -Wl,--version-script=$$(STANDIN_DIR_CU$(1))/cublasLt.map -Wl,-z,defs -Wl,-z,nodelete -Wl,-Bsymbolic \
	  -Wl,-rpath,'$$$$ORIGIN' $$(LDFLAGS_SAN) -o $$@ $$(filter %.o,$$^) \
	  $$(STANDIN_DIR_CU$(1))/libcuda.so.1 -lm -lpthread

$$(STANDIN_DIR_CU$(1))/libcublas.so.$(1): $$(addprefix $$(STANDIN_OBJ_CU$(1))/,$$(STANDIN_BLAS_SRC:.c=.o)) $$(STANDIN_DIR_CU$(1))/cublas.map $$(STANDIN_DIR_CU$(1))/libcublasLt.so.$(1) $$(STANDIN_DIR_CU$(1))/libcuda.so.1 $(STANDIN_SRC_DIR)/standin.mk
	$$(CC) -shared -Wl,-soname,libcublas.so.$(1) \
	  -Wl,--version-script=$$(STANDIN_DIR_CU$(1))/cublas.map -Wl,-z,defs -Wl,-z,nodelete -Wl,-Bsymbolic \
	  -Wl,-rpath,'$$$$ORIGIN' $$(LDFLAGS_SAN) -o $$@ $$(filter %.o,$$^) \
	  $$(STANDIN_DIR_CU$(1))/libcublasLt.so.$(1) $$(STANDIN_DIR_CU$(1))/libcuda.so.1 -lm -lpthread

$$(STANDIN_DIR_CU$(1))/libcuda.so: $$(STANDIN_DIR_CU$(1))/libcuda.so.1
	ln -sf libcuda.so.1 $$@
$$(STANDIN_DIR_CU$(1))/libcublasLt.so: $$(STANDIN_DIR_CU$(1))/libcublasLt.so.$(1)
	ln -sf libcublasLt.so.$(1) $$@
$$(STANDIN_DIR_CU$(1))/libcublas.so: $$(STANDIN_DIR_CU$(1))/libcublas.so.$(1)
	ln -sf libcublas.so.$(1) $$@

STANDIN_LIBS_CU$(1) := $$(addprefix $$(STANDIN_DIR_CU$(1))/,libcuda.so.1 libcublasLt.so.$(1) \
  libcublas.so.$(1) libcuda.so libcublasLt.so libcublas.so)
STANDIN_LDFLAGS_CU$(1) := -L$$(abspath $$(STANDIN_DIR_CU$(1))) \
  -Wl,--disable-new-dtags -Wl,-rpath,$$(abspath $$(STANDIN_DIR_CU$(1))) -lcublas -lcublasLt -lcuda

# The self-test, linked against this version's libraries.
$(BUILD)/standin/test_standin_cu$(1): $(STANDIN_SRC_DIR)/test_standin.c $$(STANDIN_HDR) $$(STANDIN_LIBS_CU$(1))
	$$(CC) $$(ALL_CFLAGS) -DSTANDIN_CUDA_MAJOR=$(1) $(STANDIN_INCLUDE) -o $$@ $$< \
	  $$(LDFLAGS_SAN) $$(STANDIN_LDFLAGS_CU$(1)) -lcmocka -ldl -lm -lpthread
endef

$(eval $(call STANDIN_LIBS_template,12))
$(eval $(call STANDIN_LIBS_template,13))
# The GEMM arithmetic (gemm_ref.c: reads operands, writes D; no locks, no
# shared state) is not instrumented by TSan and is optimised as in the plain
# build: it runs synchronously on the calling thread, so TSan's only use
# there would be two host threads' GEMMs on one buffer. Instrumented at -O1
# it took test_gate_off_keeps_the_route (seven 384^3 GEMMs, each compared)
# from 2.3 s plain to 43 s under TSan; 25-30 s without (the rest is the
# client's own float64 check). ASan/UBSan keep it instrumented (an
# out-of-bounds operand read there is the caller's bug).
ifeq ($(SAN),tsan)
$(BUILD)/standin/obj/cu12/gemm_ref.o $(BUILD)/standin/obj/cu13/gemm_ref.o: ALL_CFLAGS := $(filter-out $(SAN_FLAGS) -O1,$(ALL_CFLAGS)) -O2
endif

# Host build of the self-test's kernels (the STANDIN_KERNELS library).
STANDIN_TEST_KERNELS := $(BUILD)/standin/test_kernels.so
$(STANDIN_TEST_KERNELS): $(STANDIN_SRC_DIR)/test_kernels.c $(STANDIN_SRC_DIR)/standin_kernel.h
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -shared $(LDFLAGS_SAN) -o $@ $<

STANDIN_TEST_BIN := $(BUILD)/standin/test_standin_cu12 $(BUILD)/standin/test_standin_cu13

TEST_DEPS  += $(STANDIN_LIBS_CU12) $(STANDIN_LIBS_CU13) $(STANDIN_TEST_BIN) $(STANDIN_TEST_KERNELS)
TEST_STEPS += standin-selftest

.PHONY: standin standin-selftest
standin: $(STANDIN_LIBS_CU12) $(STANDIN_LIBS_CU13)

# Each binary re-runs itself under the environment it needs (devices
# 8.0, 9.0 and 6.1, the test kernels); see main() in test_standin.c.
standin-selftest: $(STANDIN_TEST_BIN) $(STANDIN_TEST_KERNELS)
	@set -e; for t in $(STANDIN_TEST_BIN); do echo "== $$t"; \
	  STANDIN_KERNELS=$(abspath $(STANDIN_TEST_KERNELS)) $$t; done
