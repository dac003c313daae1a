"""A convolution's GEMM packing its B (the im2col matrix), or its A when the product is computed
transposed (the matrix transposed), straight from the input (runtime/aotc_gemm_packed.h
`aotc_sgemm_pack_im2col`, chosen by the CPU schedule from the lowering's `Matrix.direct`), against the same model built with the im2col buffer
(`[gemm] im2col_packing = false`: the loops that fill it, then the GEMM packs from it) and
against ONNX Runtime. The packed values and their order are the same, so the two artifacts
agree bit for bit."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import onnx
import pytest

from aotc.api import compile as aotc_compile
from aotc.kernel import ir
from aotc.schedule.gemm_cpu import GemmTiles
from aotc.targets import load_target, native_target
from tests.helpers import convs_model, eager_threads_target, target_with_switch_off

# (x shape, w shape, attrs): output rows wider and narrower than a panel, strides, dilations,
# asymmetric pads, pads wider than the kernel (whole runs of zeros), a kernel as wide as the
# padded input, groups, batch 2, 1-D, K over one K block, N over one column block, and ones
# whose GEMM is computed transposed (so that the matrix is packed as A)
CONVS = [
    ((2, 9, 13, 40), (7, 9, 3, 3), dict(pads=[1, 1, 1, 1])),
    ((1, 8, 17, 19), (6, 8, 5, 4), dict(strides=[2, 3], pads=[2, 1, 0, 3])),
    ((1, 8, 12, 12), (5, 8, 3, 3), dict(dilations=[2, 3], pads=[3, 3, 1, 0])),
    ((1, 8, 5, 6), (4, 8, 2, 2), dict(pads=[3, 3, 3, 3])),
    ((2, 16, 9, 70), (8, 8, 1, 7), dict(group=2, pads=[0, 3, 0, 3], strides=[1, 2])),
    ((2, 8, 50), (6, 8, 5), dict(pads=[2, 1], strides=[2], dilations=[2])),
    ((1, 8, 3, 4), (3, 8, 3, 6), dict(pads=[1, 1, 1, 1])),
    ((1, 48, 10, 10), (16, 48, 3, 3), dict(pads=[1, 1, 1, 1])),
    ((1, 8, 50, 50), (4, 8, 3, 3), dict(pads=[1, 1, 1, 1])),
    ((1, 3, 23, 31), (6, 3, 3, 3), dict(strides=[3, 2])),          # 3 channels, 6 rows: the buffer
    ((1, 3, 330, 300), (8, 3, 3, 3), dict(strides=[2, 2])),        # ... but a 2.5 MiB buffer
    ((1, 3, 20, 36), (64, 3, 7, 7), dict(strides=[2, 2], pads=[3, 3, 3, 3])),   # 3 channels, 64 rows
    ((1, 128, 7, 7), (64, 128, 3, 3), dict(pads=[1, 1, 1, 1])),      # computed transposed
    ((1, 64, 35, 35), (256, 64, 3, 3), dict(strides=[2, 2], pads=[1, 1, 1, 1])),   # ... at stride 2
    ((1, 24, 9, 75), (96, 24, 3, 3), dict(strides=[1, 3], pads=[1, 1, 1, 1])),     # ... and 3
    # column strides 2 and 3
    ((1, 8, 15, 29), (32, 8, 3, 3), dict(strides=[2, 2], pads=[1, 1, 1, 1])),
    ((1, 10, 11, 40), (36, 10, 2, 4), dict(strides=[1, 3], pads=[1, 2, 0, 1])),
    # patches side by side (stride = kernel, no padding), packed as B and as A (transposed)
    ((1, 3, 64, 80), (24, 3, 8, 8), dict(strides=[8, 8])),
    ((1, 2, 112, 112), (96, 2, 16, 16), dict(strides=[16, 16])),
]


def _model(tmp_path: Path):
    path = tmp_path / "convs.onnx"
    return path, convs_model(path, CONVS)


def _gemm_shape(xs, ws, attrs):
    """(M, N, K) of one group's GEMM."""
    r = len(xs) - 2
    s = attrs.get("strides", [1] * r)
    d = attrs.get("dilations", [1] * r)
    p = attrs.get("pads", [0] * 2 * r)
    out = [(xs[2 + i] + p[i] + p[r + i] - d[i] * (ws[2 + i] - 1) - 1) // s[i] + 1 for i in range(r)]
    g = attrs.get("group", 1)
    return ws[0] // g, int(np.prod(out)), int(np.prod(ws[1:]))


def _with_buffer(target: str, directory: Path) -> str:
    """The target (a name or a .toml) with im2col_packing off."""
    return target_with_switch_off(target, directory, "im2col_packing", "buffer")


@pytest.mark.parametrize("target,threads", [("native", 1), ("c", 1), ("eager", 2)])
def test_im2col_packing_matches_the_im2col_buffer_and_ort(target, threads, tmp_path, monkeypatch):
    import onnxruntime as ort
    # every convolution through the im2col GEMM: none by Winograd (tests/test_winograd.py)
    monkeypatch.setattr("aotc.passes.winograd.allowed_tiles", lambda target: ())
    if target == "eager":
        target = eager_threads_target(tmp_path)      # every GEMM split between the threads
    elif target == "native":
        target = native_target()
    path, feeds = _model(tmp_path)
    direct = aotc_compile(path, target=target, output_dir=tmp_path / "direct", threads=threads)
    buffered = aotc_compile(path, target=_with_buffer(target, tmp_path), output_dir=tmp_path / "buffer",
                            threads=threads)

    # the schedule read the input directly for every convolution that has the target's [gemm]
    # im2col_min_channels input channels per group, im2col_min_rows output channels or a buffer
    # over im2col_max_buffer bytes: as B, or as A where the product is computed transposed;
    # its im2col loops are gone
    t = load_target(target)
    tiles = GemmTiles.of(t)
    direct_ones = [c for c in CONVS if c[1][1] >= t.gemm.im2col_min_channels or _gemm_shape(*c)[0] >= t.gemm.im2col_min_rows
                   or _gemm_shape(*c)[1] * _gemm_shape(*c)[2] * 4 > t.gemm.im2col_max_buffer]
    transposed = sum(tiles.prefers_transposed(*_gemm_shape(*c)) for c in direct_ones)
    # (most of them, so that the comparison below covers the direct forms, and both)
    assert len(direct_ones) >= 2 * len(CONVS) // 3 and transposed >= 1
    src = (tmp_path / "direct" / "convs.c").read_text()
    assert len(re.findall(r"const aotc_im2col im2col = ", src)) == len(direct_ones)
    assert (src.count(".bim2col = &im2col"), src.count(".aim2col = &im2col")) == \
        (len(direct_ones) - transposed, transposed)
    assert "im2col = &im2col" not in (tmp_path / "buffer" / "convs.c").read_text()
    # the GEMM header's im2col fields and packers exist in the source that calls them only
    # (without AOTC_GEMM_IM2COL a call that set them would not compile)
    assert "#define AOTC_GEMM_IM2COL 1" in src
    assert "AOTC_GEMM_IM2COL" not in (tmp_path / "buffer" / "convs.c").read_text()

    got, want = direct.run(feeds), buffered.run(feeds)
    ref = ort.InferenceSession(onnx.load(str(path)).SerializeToString()).run(None, feeds)
    for name, a, b, r in zip(direct.output_names, got, want, ref):
        np.testing.assert_array_equal(a, b, err_msg=name)
        np.testing.assert_allclose(a, r, rtol=1e-4, atol=1e-4, err_msg=name)


@pytest.mark.parametrize("target,isa", [("c", None), ("c-avx2", "avx2"), ("c-avx512", None), ("c-avx512", "avx512f")])
def test_packer_matches_the_definition_under_sanitizers(target, isa, tmp_path):
    """The packer alone (tests/im2col_pack_check.c): every value of 3,014 geometries (3,000 random)
    against the im2col definition, built with AddressSanitizer and UBSan, with the target's
    micro-tile, on the portable path and (where the CPU has them) the AVX2 copies and the
    AVX-512 expanding loads."""
    import subprocess
    from aotc.paths import RUNTIME_DIR
    from aotc.targets import cpu_flags
    if isa and isa not in cpu_flags():
        pytest.skip(f"this CPU has no {isa}")
    tiles = GemmTiles.of(load_target(target))
    exe = tmp_path / "check"
    flags = {None: ["-mno-avx2", "-mno-avx512f"], "avx2": ["-mavx2", "-mfma", "-mno-avx512f"],
             "avx512f": ["-mavx512f", "-mavx512bw", "-mavx512dq", "-mavx512vl"]}[isa]
    cmd = ["cc", "-std=c99", "-O1", "-g", "-fsanitize=address,undefined", "-fno-sanitize-recover=all",
           *flags, *[f"-D{k}={v}" for k, v in tiles.macros().items()], f"-I{RUNTIME_DIR}",
           str(Path(__file__).with_name("im2col_pack_check.c")), "-o", str(exe)]
    built = subprocess.run(cmd, capture_output=True, text=True)
    assert built.returncode == 0, built.stderr
    r = subprocess.run([str(exe)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "3014 geometries, 0 with wrong values" in r.stdout


@pytest.mark.parametrize("kind", ["opencl", "opencl-int64", "opencl-eager", "cuda-emulated", "cuda-emulated-tf32"])
def test_gpu_gemm_stages_im2col_from_the_input(kind, tmp_path, monkeypatch):
    """GPU schedules stage a convolution's B tiles straight from its input (`Matrix.element`
    on the 'im2col' form): against the same model with im2col buffers (bit for bit: the same
    values summed in the same order) and ONNX Runtime, on PoCL (the default tiles, and the
    eager ones: small tiles, K split, a work-group per iteration) and in the CUDA emulation
    (FFMA tiles and TF32 tensor cores). The convolutions include 4-row ones, which run a
    work-item per result (`gemv_rows`), and batch 2, whose images share one launch.
    opencl-int64: the 64-bit index arithmetic of inputs of 2^31 elements or more."""
    import json
    import onnxruntime as ort
    from aotc.compiler import compile_model
    from tests.helpers import eager_cuda_target, eager_gpu_target
    if kind == "opencl-int64":
        monkeypatch.setattr(ir, "IM2COL_U32_LIMIT", 0)
    if kind.startswith("opencl"):
        from tests.test_opencl import _opencl_missing
        if _opencl_missing():
            pytest.skip(_opencl_missing())
        target, build = (eager_gpu_target(tmp_path) if kind == "opencl-eager" else "opencl"), None
    else:
        from tests.test_cuda_emulated import CXX, emulated_build
        if CXX is None:
            pytest.skip("g++ is not installed")
        target, build = eager_cuda_target(tmp_path), emulated_build
        if kind.endswith("tf32"):
            p = Path(target)
            p.write_text(p.read_text().replace("tf32 = false", "tf32 = true"))
    path, feeds = _model(tmp_path)
    out = {}
    for how, t in (("direct", target), ("buffer", _with_buffer(target, tmp_path))):
        out[how] = compile_model(path, target=t, output_dir=tmp_path / how, build=build)
    # every convolution reads its input: no im2col launch; with the default tiles (no split
    # K, whose partial sums take workspace) no workspace at all, the outputs being the user's
    # buffers; with buffers, each convolution's im2col fills one first
    ws = {h: json.loads((out[h] / "manifest.json").read_text())["workspace_bytes"] for h in out}
    assert ws["direct"] < ws["buffer"]
    if kind in ("opencl", "opencl-int64"):
        direct, buffered = ((out[h] / "convs.cl").read_text() for h in ("direct", "buffer"))
        assert ws["direct"] == 0 and ("uint ih" in direct) == (kind == "opencl")
        assert direct.count("__kernel ") == len(CONVS) and buffered.count("__kernel ") == 2 * len(CONVS)

    from aotc.api import load
    got, want = (load(out[h]).run(feeds) for h in ("direct", "buffer"))
    ref = ort.InferenceSession(onnx.load(str(path)).SerializeToString()).run(None, feeds)
    tol = 1e-2 if kind.endswith("tf32") else 1e-4
    for name, a, b, r in zip(load(out["direct"]).output_names, got, want, ref):
        np.testing.assert_array_equal(a, b, err_msg=name)
        np.testing.assert_allclose(a, r, rtol=tol, atol=tol, err_msg=name)


def test_im2col_fields_exist_only_where_the_source_asks(tmp_path):
    """aotc_sgemm_call's im2col fields (and conv_broadcast) are compiled in only with
    AOTC_GEMM_IM2COL (AOTC_GEMM_CONV_BROADCAST), which the emitter defines for a source that
    calls them: a call that sets them without it is a compile error, not a product that
    silently ignores its im2col operand."""
    import subprocess
    from aotc.paths import RUNTIME_DIR
    tiles = GemmTiles.of(load_target("c-avx512"))
    src = tmp_path / "call.c"
    src.write_text('#define _POSIX_C_SOURCE 200809L\n#include "aotc_gemm_packed.h"\n'
                   "int f(const aotc_im2col *v) { aotc_sgemm_call g = { .M = 1, .bim2col = v }; return (int)g.M; }\n"
                   "int h(void) { aotc_sgemm_call g = { .M = 1, .conv_broadcast = 1 }; return (int)g.M; }\n")
    avx512 = ["-mavx512f", "-mavx512bw", "-mavx512dq", "-mavx512vl", "-mfma"]

    def syntax(*defines, flags=avx512):
        cmd = ["cc", "-std=c99", "-fsyntax-only", *flags, *[f"-D{k}={v}" for k, v in tiles.macros().items()],
               *[f"-D{d}" for d in defines], f"-I{RUNTIME_DIR}", str(src)]
        return subprocess.run(cmd, capture_output=True, text=True)
    bare = syntax()
    assert bare.returncode != 0 and "bim2col" in bare.stderr and "conv_broadcast" in bare.stderr
    both = syntax("AOTC_GEMM_IM2COL", "AOTC_GEMM_CONV_BROADCAST")
    assert both.returncode == 0, both.stderr
    assert "needs AOTC_GEMM_IM2COL" in syntax("AOTC_GEMM_CONV_BROADCAST").stderr
    assert "needs AVX-512" in syntax("AOTC_GEMM_IM2COL", "AOTC_GEMM_CONV_BROADCAST", flags=[]).stderr
