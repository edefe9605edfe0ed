# fp16.mk: the fp16 route's build and test wiring, included by the top
# Makefile after kernels.mk.
#
# kernels.mk builds every kernels/*.cu, so fp16.cu becomes the PTX image
# gs_ptx_fp16 (sm_70, PTX ISA 6.0: KERNELS_PTX_TARGET_fp16 there; checked by
# kernels-ptx-check) and part of the host kernel library the stand-in libcuda
# runs. What is left here:
#
#   test_fp16_kernels   runs the fp16 kernels through that library, so it
#                       needs the library and the stand-in driver built
# (standin.mk comes later: its variables are not set yet, so the driver's
# path is spelled out.)
$(BUILD)/tests/unit/test_fp16_kernels: $(KERNELS_HOST_SO) $(BUILD)/standin/cu13/libcuda.so.1
