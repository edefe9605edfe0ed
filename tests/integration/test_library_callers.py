"""GEMMs that NVIDIA libraries make inside themselves, and the input types
GEMMSHIM_MODE=fp8 takes.

library_client_cu13 runs four GEMMs: the program's own bf16 and fp32
cublasGemmEx, then the same two from inside libcusolver.so.12
(fakecusolver.c). The real libcusolver.so.12 imports cublasGemmEx
(`nm -D /usr/local/cuda/lib64/libcusolver.so.12`: `U cublasGemmEx@libcublas.so.13`),
and libcublas.so.13 imports cublasLtMatmul, so such calls reach a preloaded
shim as top-level calls. They are steps of the library's own algorithm
(a factorisation's trailing update), which the program did not ask to
quantize: they run native unless a policy rule names their caller.

GEMMSHIM_MODE=fp8 takes bf16 and fp16 GEMMs only. torchao's quantized
training docs (docs.pytorch.org/ao, "Quantized Training") write the fp8
Linear as `output_bf16 = to_fp8(input_bf16) @ to_fp8(weight_bf16.t())`, and
convert_to_float8_training's own example swaps the nn.Linear layers of a
model made `.bfloat16()`; TransformerEngine's fp8_autocast quantizes the
te.Linear modules the user put in the model (in mixed precision, bf16 or
fp16 ones). Neither turns an fp32 GEMM the user did not mark into fp8."""

import pytest

from harness import CLIENT_DIR, read_log, require_built, run_ok

NATIVE_RULE = "policy: built-in rule 3 (native)"
FROM_CUSOLVER = "called from libcusolver.so.12: GEMMs inside NVIDIA libraries run native"
FP32_NOT_TAKEN = "GEMMSHIM_MODE=fp8 takes bf16 and fp16 GEMMs, not fp32 x fp32 ones"
FP8_FIRST = "GEMMSHIM_MODE=fp8; fp8 e4m3 x e4m3"
# TransformerEngine's fp8 GEMM tests compare E4M3 results with rtol 0.125.
E4M3_RTOL = 0.125


@pytest.fixture(scope="module")
def library_client(shim):
    path = CLIENT_DIR / "library_client_cu13"
    require_built([path, CLIENT_DIR / "nvlib" / "libcusolver.so.12"])
    return path


def gemm_lines(r):
    out = []
    for words in r.lines("gemm"):
        d = dict(w.split("=", 1) for w in words[1:])
        d["status"] = int(d["status"])
        d["err"] = float(d["err"])
        out.append(d)
    assert [(g["from"], g["type"]) for g in out] == [
        ("app", "bf16"), ("app", "fp32"), ("cusolver", "bf16"), ("cusolver", "fp32")], r.describe()
    return out


def run_client(client, standin, tmp_path, env, log=True):
    full = dict(env)
    logf = tmp_path / "gemms.jsonl"
    if log:
        full["GEMMSHIM_LOG"] = str(logf)
    r = run_ok([client], standin[13], shim=True, env=full, cwd=tmp_path)
    gemms = gemm_lines(r)
    recs = read_log(logf) if log else None
    if log:
        assert len(recs) == 4, r.describe()
    return gemms, recs


@pytest.fixture(scope="module")
def native_runs(library_client, standin):
    """Without the shim: what every native call must reproduce bit for bit."""
    out = {}
    for cc in ("9.0", "6.1"):
        r = run_ok([library_client], standin[13], env={"STANDIN_CC": cc})
        out[cc] = gemm_lines(r)
    return out


@pytest.mark.parametrize("log", [True, False])
def test_fp8_mode_leaves_library_and_fp32_gemms_native(library_client, standin, tmp_path, native_runs, log):
    gemms, recs = run_client(library_client, standin, tmp_path, {"STANDIN_CC": "9.0", "GEMMSHIM_MODE": "fp8", "GEMMSHIM_GATE": "off"}, log)
    native = native_runs["9.0"]
    # The program's bf16 GEMM runs fp8; everything else is cuBLAS's own result.
    assert gemms[0]["hash"] != native[0]["hash"]
    assert gemms[0]["err"] <= E4M3_RTOL, gemms[0]
    for i in (1, 2, 3):
        assert gemms[i] == native[i], (gemms[i], native[i])
    if not log:
        return
    want = [
        ("fp8", "fp8", FP8_FIRST),
        ("native", "native", f"{FP32_NOT_TAKEN}; {NATIVE_RULE}"),
        ("native", "native", FROM_CUSOLVER),
        ("native", "native", FROM_CUSOLVER),
    ]
    assert [(x["decided"], x["route"], x["reason"]) for x in recs] == want, recs
    assert all(x["status"] == 0 for x in recs)


def test_policy_routes_library_and_fp32_gemms_on_purpose(library_client, standin, tmp_path, native_runs):
    (tmp_path / "p.txt").write_text("fp8 caller=cusolver\nfp8 ab=fp32\n")
    gemms, recs = run_client(library_client, standin, tmp_path,
                             {"STANDIN_CC": "9.0", "GEMMSHIM_MODE": "fp8", "GEMMSHIM_GATE": "off", "GEMMSHIM_POLICY": "p.txt"})
    want = [
        ("fp8", FP8_FIRST),
        # The file's rules decide before the mode (which replaces the
        # built-in rules only): the fp32 GEMM is the file's rule's.
        ("fp8", "policy: p.txt:2 (fp8 ab=fp32); fp8 e4m3 x e4m3"),
        ("fp8", "called from libcusolver.so.12; policy: p.txt:1 (fp8 caller=cusolver); fp8 e4m3 x e4m3"),
        ("fp8", "called from libcusolver.so.12; policy: p.txt:1 (fp8 caller=cusolver); fp8 e4m3 x e4m3"),
    ]
    assert [(x["route"], x["reason"]) for x in recs] == want, recs
    for g, n in zip(gemms, native_runs["9.0"]):
        assert g["status"] == 0 and g["hash"] != n["hash"], (g, n)
        assert g["err"] <= E4M3_RTOL, g


@pytest.mark.parametrize("mode", ["auto", "ffma"])
def test_ffma_leaves_library_gemms_native(library_client, standin, tmp_path, native_runs, mode):
    """On sm 6.1 the built-in rule sends bf16 GEMMs to ffma, and so does
    GEMMSHIM_MODE=ffma; cuSOLVER's bf16 GEMM stays cuBLAS's."""
    gemms, recs = run_client(library_client, standin, tmp_path,
                             {"STANDIN_CC": "6.1", "GEMMSHIM_MODE": mode, "GEMMSHIM_GATE": "off"})
    first = "policy: built-in rule 2 (ffma sm=6.0-6.9 ab=bf16 compute=32f)" if mode == "auto" else "GEMMSHIM_MODE=ffma"
    assert (recs[0]["route"], recs[0]["reason"]) == ("ffma", first), recs[0]
    assert (recs[2]["decided"], recs[2]["route"], recs[2]["reason"]) == ("native", "native", FROM_CUSOLVER), recs[2]
    assert (recs[3]["route"], recs[3]["reason"]) == ("native", FROM_CUSOLVER), recs[3]
    assert gemms[2] == native_runs["6.1"][2] and gemms[3] == native_runs["6.1"][3]
