# tests/integration/ffma.mk: the ffma route's test wiring, included by the top
# Makefile after tests/integration/integration.mk (it uses that file's
# variables and compile rule).
#
#   ffma_client_cu13   GEMMs described on its command line, checked against
#                      float64, linked against cuBLAS 13; test_ffma_route.py
#                      runs it under the shim over the stand-in (device 6.1)
#                      with and without memory pools, in graph capture, with
#                      injected faults, threads and a context reset
#   ffma_client_cu12   the same linked against cuBLAS 12 (test_arguments.py:
#                      descriptor attributes only cuBLAS 12 has)
FFMA_CLIENT := $(INTEG_DIR)/ffma_client_cu13
FFMA_CLIENT_CU12 := $(INTEG_DIR)/ffma_client_cu12

define FFMA_CLIENT_RULE
$(INTEG_DIR)/ffma_client_cu$(1): $(INTEG_DIR)/obj/ffma_client.o $(INTEG_DIR)/obj/client_log.o $(call integ_cublas_deps,$(1))
	$$(CC) $$(LDFLAGS_SAN) -pthread -o $$@ $(INTEG_DIR)/obj/ffma_client.o $(INTEG_DIR)/obj/client_log.o \
	  $(call integ_cublas_link,$(1)) $$(INTEG_LIBS)
endef
$(foreach v,12 13,$(eval $(call FFMA_CLIENT_RULE,$(v))))

TEST_DEPS += $(FFMA_CLIENT) $(FFMA_CLIENT_CU12)
# The integration step's prerequisites were read with integration.mk.
integration: $(FFMA_CLIENT) $(FFMA_CLIENT_CU12)
