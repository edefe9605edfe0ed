# fp8.mk: the fp8 route's build and test wiring, included by the top
# Makefile after kernels.mk.
#
# kernels.mk builds every kernels/*.cu, so fp8_quantize.cu and fp8_gemm.cu
# become the PTX images gs_ptx_fp8_quantize and gs_ptx_fp8_gemm (one module
# each, checked by kernels-ptx-check) and are part of the host kernel
# library that the stand-in libcuda runs. What is left here:
#
#   test_fp8_kernels   runs the fp8 kernels through that library, so it
#                      needs the library and the stand-in driver built
#   test_fp8_convert   embeds the golden vectors (.incbin), so it is
#                      rebuilt when they change
#   fp8-golden         regenerates tests/fp8/ (needs ml_dtypes and numpy;
#                      not a test step: the data is committed)
# (standin.mk comes later: its variables are not set yet, so the driver's
# path is spelled out.)
$(BUILD)/tests/unit/test_fp8_kernels: $(KERNELS_HOST_SO) $(BUILD)/standin/cu13/libcuda.so.1
$(BUILD)/tests/unit/test_fp8_convert: tests/fp8/golden_codes.h tests/fp8/golden_random.bin

.PHONY: fp8-golden
fp8-golden:
	$(PYTHON) tests/fp8/make_golden.py
