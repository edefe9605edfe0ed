# tests/lifecycle/lifecycle.mk: the process lifecycles the preloaded shim is
# put through (tests/lifecycle/test_lifecycle.py), included by the top
# Makefile after the integration rules (it uses their variables).
#
#   lifecycle_client_cu13   exit() under 16 busy threads, a GEMM loop to be
#                           signalled, a program that closes every fd
#   lifecycle (test step)   the pytest file; strace -f for the preload cases
LIFECYCLE_CLIENT := $(INTEG_DIR)/lifecycle_client_cu13

$(INTEG_DIR)/obj/lifecycle_client.o: tests/lifecycle/lifecycle_client.c $(INTEG_HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(INTEG_CFLAGS) -c $< -o $@

$(LIFECYCLE_CLIENT): $(INTEG_DIR)/obj/lifecycle_client.o $(INTEG_DIR)/obj/client_cuda.o $(call integ_cublas_deps,13)
	$(CC) $(LDFLAGS_SAN) -pthread -o $@ $(INTEG_DIR)/obj/lifecycle_client.o $(INTEG_DIR)/obj/client_cuda.o \
	  $(call integ_cublas_link,13) $(INTEG_LIBS)

.PHONY: lifecycle
lifecycle: $(SHIM_SO) $(LIFECYCLE_CLIENT) $(STANDIN_LIBS_CU13) $(KERNELS_HOST_SO)
	$(INTEG_ENV) $(PYTHON) -m pytest -q $(PYTEST_PAR) tests/lifecycle

TEST_DEPS  += $(LIFECYCLE_CLIENT)
TEST_STEPS += lifecycle
