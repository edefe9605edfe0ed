/* fp8_quantize_sm89.cu: fp8_quantize.cu's quantize kernels for sm_89 and
 * newer, built from the same source as sm_89 PTX (ISA 8.1: ptxas takes
 * cvt.rn.satfinite.e4m3x2/e5m2x2.f32 for sm_89 from that version on, for
 * sm_90 from 7.8) with GS_FP8_Q_SM89 set: each pair of
 * elements is encoded by that instruction, and the division by the step
 * becomes a multiply by its reciprocal with one fused correction, which
 * gives the division's bits (fp8_convert.h's gs_div_by_rcp). A group with a
 * NaN, an infinity or a value too large for the correction goes through the
 * sm_61 encoder instead, so the codes and the rings are the sm_61 kernels'
 * bit for bit (test_fp8_kernels' golden outputs on a 9.0 device). Its
 * module is loaded only on devices of compute capability 8.9 and up
 * (module.h); elsewhere, or if the driver refuses it, the launcher runs the
 * sm_61 kernels. The ring's amax kernels have no conversion and stay there;
 * the current recipe's fast amax pass lives here with its quantize pass. */
#define GS_FP8_Q_SM89 1
#include "fp8_quantize.cu"
/* and the current recipe's fast kernels, on the same conversion */
#include "fp8_current_fast.h"
