"""Convolutions with few output channels summed by broadcast (runtime/aotc_gemm_packed.h
`aotc_conv_broadcast`, chosen by the CPU schedule: schedule/gemm_cpu.py sums_by_broadcast)
against the same model built with the packed im2col GEMM (`[gemm] conv_broadcast = false`) and
against ONNX Runtime. The products and their order are the GEMM's, so the two artifacts agree
bit for bit. The geometries reach every path of the kernel: 16-column blocks at strides 1, 2
(the constant ones) and 3, the last block moved back, columns whose taps reach the padding
(one at a time), rows whose taps do, planes narrower than a block, rows of output channels
under 16 and over 16, groups, a batch, 1-D, and a thread pool that splits rows between its
threads."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import onnx
import pytest

from aotc.api import compile as aotc_compile
from aotc.targets import load_target, native_target
from tests.helpers import convs_model, target_with_switch_off

# (x shape, w shape, attrs)
CONVS = [
    ((1, 3, 64, 70), (16, 3, 3, 3), dict(strides=[2, 2], pads=[1, 1, 1, 1])),       # YOLO's stem
    ((1, 16, 40, 38), (32, 16, 3, 3), dict(strides=[2, 2], pads=[1, 1, 1, 1])),
    ((2, 5, 21, 45), (16, 5, 3, 3), dict(pads=[1, 1, 1, 1])),                        # stride 1, batch 2
    ((1, 6, 30, 61), (28, 6, 5, 3), dict(strides=[1, 3], pads=[2, 0, 1, 2])),       # 28 rows (16 + 12), stride 3
    ((1, 4, 25, 50), (32, 4, 3, 3), dict(dilations=[2, 3], pads=[3, 3, 1, 0])),
    ((1, 3, 9, 40), (12, 3, 3, 3), dict(pads=[4, 4, 4, 4])),                         # 12 rows; rows all in the pads
    ((1, 8, 12, 17), (16, 8, 3, 3), dict(pads=[1, 1, 1, 1])),                        # inside: under a block
    ((1, 8, 12, 18), (16, 8, 3, 3), dict(pads=[1, 1, 1, 1])),                        # 16 inside: one block
    ((2, 8, 11, 36), (32, 4, 3, 3), dict(group=2, pads=[1, 1, 1, 1])),              # 2 groups of 16 rows
    ((1, 3, 100), (16, 3, 7), dict(strides=[2], pads=[3, 3])),                       # 1-D
    ((1, 40, 10, 40), (16, 40, 3, 3), dict(pads=[1, 1, 1, 1])),                      # K 360, one K block
    ((1, 48, 10, 40), (16, 48, 3, 3), dict(pads=[1, 1, 1, 1])),                      # K 432: the GEMM
    ((1, 8, 20, 40), (48, 8, 3, 3), dict(pads=[1, 1, 1, 1])),                        # 48 rows: 32 + 16
    ((1, 3, 30, 40), (64, 3, 7, 7), dict(strides=[2, 2], pads=[3, 3, 3, 3])),        # ResNet's stem
    ((1, 8, 20, 40), (96, 8, 3, 3), dict(pads=[1, 1, 1, 1])),                        # 96 rows: the GEMM
    ((1, 8, 12, 15), (16, 8, 3, 3), dict(pads=[1, 1, 1, 1])),                        # 15 columns: the GEMM
    ((1, 4, 20, 40), (24, 4, 3, 3), dict(pads=[1, 1, 1, 1])),                        # 24 rows (8-row tiles): the GEMM
]


def _model(tmp_path: Path):
    # a fused epilogue (SiLU) after each: it runs on each row's segment after the sums are stored
    path = tmp_path / "convs.onnx"
    return path, convs_model(path, CONVS, silu=True)


def _threaded(target: str, directory: Path) -> str:
    """The target with every GEMM on the thread pool."""
    from aotc.paths import TARGETS_DIR
    text = (TARGETS_DIR / f"{target}.toml").read_text()
    text = text.replace(f'name = "{target}"', f'name = "{target}-eager"', 1)
    text = re.sub(r"min_parallel_gemm_macs = \d+", "min_parallel_gemm_macs = 1", text)
    p = directory / f"{target}-eager.toml"
    p.write_text(text)
    return str(p)


@pytest.mark.parametrize("threads", [1, 2])
def test_broadcast_sums_match_the_packed_gemm_and_ort(threads, tmp_path, monkeypatch):
    import onnxruntime as ort
    target = native_target()
    if not load_target(target).gemm.conv_broadcast:
        pytest.skip(f"the native target here ({target}) has no conv_broadcast (an AVX-512 one has)")
    # every convolution through the im2col GEMM: none by Winograd (tests/test_winograd.py)
    monkeypatch.setattr("aotc.passes.winograd.allowed_tiles", lambda target: ())
    if threads > 1:
        target = _threaded(target, tmp_path)
    path, feeds = _model(tmp_path)
    on = aotc_compile(path, target=target, output_dir=tmp_path / "on", threads=threads)
    off = aotc_compile(path, target=target_with_switch_off(target, tmp_path, "conv_broadcast", "packed"),
                       output_dir=tmp_path / "off", threads=threads)

    # the schedule chose it for every convolution of at most 64 output channels per group that
    # fill their groups of 16 lanes as well as 8-row tiles, K in one K block and output rows of
    # 16 columns or more, and for no other
    src = (tmp_path / "on" / "convs.c").read_text()
    assert src.count(".conv_broadcast = 1") == len(CONVS) - 4
    assert ".conv_broadcast" not in (tmp_path / "off" / "convs.c").read_text()
    if threads > 1:        # (the others are in a loop over batch entries or groups on the threads)
        assert src.count("AOTC_GEMM_SPLIT_COLS, .conv_broadcast = 1") >= len(CONVS) - 6

    got, want = on.run(feeds), off.run(feeds)
    ref = ort.InferenceSession(onnx.load(str(path)).SerializeToString()).run(None, feeds)
    for name, a, b, r in zip(on.output_names, got, want, ref):
        np.testing.assert_array_equal(a, b, err_msg=name)
        np.testing.assert_allclose(a, r, rtol=1e-4, atol=1e-4, err_msg=name)
