# pip_cuda.mk: building without the CUDA toolkit, from the headers and the
# ptxas that PyPI's NVIDIA packages install (docs/build-from-pip.md).
# Included at the top of the Makefile, before the include path is set:
#
#   make CUDA_FROM_PIP=/path/to/venv/bin/python [CUDA_FROM_PIP_VERSION=12|13]
#
# takes CUDA_INCLUDE and PTXAS from packaging/pip_cuda.py run by that
# interpreter. The test (pip-cuda-test) is in pip_cuda_test.mk.
ifneq ($(CUDA_FROM_PIP),)
PIP_CUDA_ARGS := $(if $(CUDA_FROM_PIP_VERSION),--cuda $(CUDA_FROM_PIP_VERSION))
CUDA_INCLUDE := $(shell $(CUDA_FROM_PIP) packaging/pip_cuda.py include $(PIP_CUDA_ARGS))
ifeq ($(CUDA_INCLUDE),)
$(error CUDA_FROM_PIP=$(CUDA_FROM_PIP): no CUDA headers found (see the line above))
endif
PIP_PTXAS := $(shell $(CUDA_FROM_PIP) packaging/pip_cuda.py ptxas $(PIP_CUDA_ARGS) 2>/dev/null)
ifneq ($(PIP_PTXAS),)
PTXAS := $(PIP_PTXAS)
endif
endif
