# tests/integration/fp8.mk: the fp8 route's test wiring, included by the top
# Makefile after tests/integration/integration.mk (it uses that file's
# variables and compile rule).
#
#   fp8_client_cu13   a training loop (forward on the main thread, backward
#                     on a thread named pt_autograd_0) linked against
#                     cuBLAS 13; test_fp8_route.py runs it under the shim
#                     over the stand-in, on devices 9.0 and 6.1
#   test_route_fp8    (tests/unit, built by unit.mk) loads the stand-in and
#                     the host kernels when it runs: built after them
FP8_CLIENT := $(INTEG_DIR)/fp8_client_cu13

$(FP8_CLIENT): $(INTEG_DIR)/obj/fp8_client.o $(INTEG_DIR)/obj/client_cuda.o $(INTEG_DIR)/obj/client_log.o \
  $(call integ_cublas_deps,13)
	$(CC) $(LDFLAGS_SAN) -pthread -o $@ $(INTEG_DIR)/obj/fp8_client.o $(INTEG_DIR)/obj/client_cuda.o \
	  $(INTEG_DIR)/obj/client_log.o \
	  $(call integ_cublas_link,13) $(INTEG_LIBS)

$(INTEG_DIR)/obj/fp8_client.o: kernels/convert.h

$(BUILD)/tests/unit/test_route_fp8: $(KERNELS_HOST_SO) $(STANDIN_LIBS_CU13)

# Threads sharing one call site with their own handles, streams and
# buffers (fp8_threads_client.c), for test_fp8_recipes.py.
FP8_THREADS_CLIENT := $(INTEG_DIR)/fp8_threads_client_cu13

$(FP8_THREADS_CLIENT): $(INTEG_DIR)/obj/fp8_threads_client.o $(INTEG_DIR)/obj/client_cuda.o $(call integ_cublas_deps,13)
	$(CC) $(LDFLAGS_SAN) -pthread -o $@ $(INTEG_DIR)/obj/fp8_threads_client.o $(INTEG_DIR)/obj/client_cuda.o \
	  $(call integ_cublas_link,13) $(INTEG_LIBS)

$(INTEG_DIR)/obj/fp8_threads_client.o: kernels/convert.h

# The same against cuBLAS 12.8 (the cu12 stand-in): recipes that need a
# newer cuBLAS fall back there.
FP8_THREADS_CLIENT_CU12 := $(INTEG_DIR)/fp8_threads_client_cu12

$(FP8_THREADS_CLIENT_CU12): $(INTEG_DIR)/obj/fp8_threads_client.o $(INTEG_DIR)/obj/client_cuda.o $(call integ_cublas_deps,12)
	$(CC) $(LDFLAGS_SAN) -pthread -o $@ $(INTEG_DIR)/obj/fp8_threads_client.o $(INTEG_DIR)/obj/client_cuda.o \
	  $(call integ_cublas_link,12) $(INTEG_LIBS)

TEST_DEPS += $(FP8_THREADS_CLIENT) $(FP8_THREADS_CLIENT_CU12)
integration: $(FP8_THREADS_CLIENT) $(FP8_THREADS_CLIENT_CU12)

TEST_DEPS += $(FP8_CLIENT)
# The integration step's prerequisites were read with integration.mk.
integration: $(FP8_CLIENT)

# A GEMM from inside an NVIDIA library: libcusolver.so.12 (fakecusolver.c)
# calls cublasGemmEx as the real one does; library_client_cu13 links it
# (found next to the program) and the stand-in's cuBLAS 13.
LIBRARY_CLIENT := $(INTEG_DIR)/library_client_cu13
FAKE_CUSOLVER := $(INTEG_DIR)/nvlib/libcusolver.so.12

$(INTEG_DIR)/obj/fakecusolver.o: INTEG_CFLAGS += -fvisibility=hidden
$(FAKE_CUSOLVER): $(INTEG_DIR)/obj/fakecusolver.o $(call integ_cublas_deps,13)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS_SAN) -shared -Wl,-soname,libcusolver.so.12 -o $@ $< $(call integ_cublas_link,13)

$(LIBRARY_CLIENT): $(INTEG_DIR)/obj/library_client.o $(INTEG_DIR)/obj/client_cuda.o $(FAKE_CUSOLVER)
	$(CC) $(LDFLAGS_SAN) -pthread -o $@ $(INTEG_DIR)/obj/library_client.o $(INTEG_DIR)/obj/client_cuda.o \
	  -L$(INTEG_DIR)/nvlib -l:libcusolver.so.12 -Wl,-rpath,'$$ORIGIN/nvlib' $(call integ_cublas_link,13) $(INTEG_LIBS)

$(INTEG_DIR)/obj/library_client.o: kernels/convert.h

TEST_DEPS += $(LIBRARY_CLIENT)
integration: $(LIBRARY_CLIENT)

# CUDA graphs as PyTorch and XLA use them, around one layer's GEMM
# (graph_client.c), over the stand-in's cuBLAS 13.
GRAPH_CLIENT := $(INTEG_DIR)/graph_client_cu13

$(GRAPH_CLIENT): $(INTEG_DIR)/obj/graph_client.o $(INTEG_DIR)/obj/client_cuda.o $(call integ_cublas_deps,13)
	$(CC) $(LDFLAGS_SAN) -pthread -o $@ $(INTEG_DIR)/obj/graph_client.o $(INTEG_DIR)/obj/client_cuda.o \
	  $(call integ_cublas_link,13) $(INTEG_LIBS)

$(INTEG_DIR)/obj/graph_client.o: kernels/convert.h

TEST_DEPS += $(GRAPH_CLIENT)
integration: $(GRAPH_CLIENT)
