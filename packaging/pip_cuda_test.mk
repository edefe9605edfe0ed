# pip_cuda_test.mk: pip-cuda-test (a test step) builds the shim and the
# launcher without the toolkit, for CUDA 12 and 13, each in a venv under
# $(BUILD)/pip-cuda that holds only the NVIDIA packages carrying the
# headers and ptxas (tests/packaging/test_pip_cuda.py; downloads and venvs
# are kept there, so a rerun neither downloads nor installs again).
ifeq ($(SAN),)
TEST_STEPS += pip-cuda-test
endif
.PHONY: pip-cuda-test
pip-cuda-test: $(LAUNCHER) $(SHIM_SO) $(INTEG_BIN) $(FP8_CLIENT) $(STANDIN_LIBS_CU12) $(STANDIN_LIBS_CU13) $(KERNELS_HOST_SO)
	$(INTEG_ENV) $(PYTHON) -m pytest -q tests/packaging/test_pip_cuda.py
