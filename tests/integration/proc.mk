# tests/integration/proc.mk: the process-lifecycle client, included by the
# top Makefile after tests/integration/integration.mk (it uses that file's
# variables and compile rule).
#
#   proc_client_cu13   bf16 GEMMs on threads while the program forks or
#                      closes every descriptor (test_processes.py)
PROC_CLIENT := $(INTEG_DIR)/proc_client_cu13

$(PROC_CLIENT): $(INTEG_DIR)/obj/proc_client.o $(call integ_cublas_deps,13)
	$(CC) $(LDFLAGS_SAN) -pthread -o $@ $(INTEG_DIR)/obj/proc_client.o \
	  $(call integ_cublas_link,13) $(INTEG_LIBS)

TEST_DEPS += $(PROC_CLIENT)
integration: $(PROC_CLIENT)
