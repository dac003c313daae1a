"""GEMM epilogues run on each whole micro-tile's sums in registers (`Gemm.tile_epilogue`, the
generated `<kernel>_tile<n>` functions: aotc/codegen/c/printer.py, runtime/aotc_gemm_packed.h)
against the same models built with `[gemm] tile_epilogue = false` (the tile stored, then the
epilogue function over it) and against ONNX Runtime. The epilogue computes the same operations
on the same sums either way, so the two artifacts agree bit for bit.

The model's GEMMs take both orientations (an output of 7 x 7 pixels is computed transposed on
8-row tiles, where whole tiles are transposed in registers and the epilogue runs on columns),
K in one block and in several (the last block adds to what the earlier ones stored), edge
tiles, and the epilogues the zoo has: bias, Relu, Clip, a residual Add, SiLU (sigmoid), the
erf GELU, HardSwish, and a Conv whose own output is also a graph output (the epilogue stores
it beside the chain's result). The integer GEMMs' too (runtime/aotc_igemm.h): their epilogues
requantize the int32 sums into another buffer, so that whole tiles store no sums at all; they
agree with ONNX Runtime exactly."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper

from aotc.api import compile as aotc_compile
from aotc.schedule.gemm_cpu import GemmTiles
from aotc.targets import cpu_flags, load_target, native_target
from tests.helpers import eager_threads_target, graph_model, rand, target_with_switch_off


def _model(tmp_path: Path):
    N = helper.make_node
    feeds = {"x": rand(1, 16, 20, 20, seed=1), "s": rand(1, 32, 7, 7, seed=2), "t": rand(96, 200, seed=3),
             "u": rand(37, 900, seed=4)}
    inits = {"w1": rand(40, 16, 1, 1, seed=10) * 0.3, "b1": rand(40, seed=11),
             "w2": rand(64, 32, 1, 1, seed=12) * 0.3, "b2": rand(64, seed=13),
             "w3": rand(32, 32, 3, 3, seed=14) * 0.2, "b3": rand(32, seed=15),
             "m4": rand(200, 80, seed=16) * 0.1, "b4": rand(80, seed=17),
             "w5": rand(48, 900, seed=18) * 0.05, "b5": rand(48, seed=19),
             "w6": rand(32, 16, 3, 3, seed=20) * 0.2, "b6": rand(32, seed=21),
             "w7": rand(40, 40, 1, 1, seed=22) * 0.2, "b7": rand(40, seed=23),
             "sq2": np.array(1.4142135, np.float32), "one": np.array(1.0, np.float32),
             "half": np.array(0.5, np.float32), "lo": np.array(0.0, np.float32), "hi": np.array(6.0, np.float32)}
    nodes = [
        # 1x1 on 20 x 20 (400 columns: whole tiles and an edge), bias + Relu
        N("Conv", ["x", "w1", "b1"], ["c1"]), N("Relu", ["c1"], ["y1"]),
        # 1x1 on 7 x 7 (49 pixels: computed transposed on 8-row tiles), bias + Clip
        N("Conv", ["s", "w2", "b2"], ["c2"]), N("Clip", ["c2", "lo", "hi"], ["y2"]),
        # 3x3 on 7 x 7 + residual Add + Relu
        N("Conv", ["s", "w3", "b3"], ["c3"], pads=[1, 1, 1, 1]), N("Add", ["c3", "s"], ["a3"]),
        N("Relu", ["a3"], ["y3"]),
        # MatMul + bias + erf GELU
        N("MatMul", ["t", "m4"], ["p4"]), N("Add", ["p4", "b4"], ["q4"]), N("Div", ["q4", "sq2"], ["d4"]),
        N("Erf", ["d4"], ["e4"]), N("Add", ["e4", "one"], ["f4"]), N("Mul", ["q4", "f4"], ["g4"]),
        N("Mul", ["g4", "half"], ["y4"]),
        # Gemm with K = 900 (several K blocks) and a transposed B, then SiLU
        N("Gemm", ["u", "w5", "b5"], ["p5"], transB=1), N("Sigmoid", ["p5"], ["s5"]), N("Mul", ["p5", "s5"], ["y5"]),
        # 3x3 on 20 x 20 + HardSwish (HardSigmoid, Mul)
        N("Conv", ["x", "w6", "b6"], ["c6"], pads=[1, 1, 1, 1]), N("HardSigmoid", ["c6"], ["h6"]),
        N("Mul", ["c6", "h6"], ["y6"]),
        # a Conv whose output is a graph output as well as the chain's operand
        N("Conv", ["y1", "w7", "b7"], ["c7"]), N("Relu", ["c7"], ["y7"]),
    ]
    outs = ["y1", "y2", "y3", "y4", "y5", "y6", "c7", "y7"]
    path = tmp_path / "epilogues.onnx"
    onnx.save(graph_model(nodes, feeds, outs, inits), str(path))
    return path, feeds


@pytest.mark.parametrize("target,threads", [("native", 1), ("native", 2), ("c", 1), ("c-avx2", 1), ("eager", 2)])
def test_tile_epilogue_matches_the_stored_tile_and_ort(target, threads, tmp_path):
    import onnxruntime as ort
    if target == "eager":
        target = eager_threads_target(tmp_path)      # every GEMM split between the threads
    elif target == "native":
        target = native_target()
    else:
        missing = set(load_target(target).requires) - cpu_flags()
        if missing:
            pytest.skip(f"this CPU lacks {', '.join(sorted(missing))} for target {target}")
    if load_target(target).gemm.conv_broadcast:
        # (a convolution of few output channels summed by broadcast has no tiles: that path is
        # tests/test_conv_broadcast.py's)
        target = target_with_switch_off(target, tmp_path, "conv_broadcast", "packed")
    path, feeds = _model(tmp_path)
    fused = aotc_compile(path, target=target, output_dir=tmp_path / "fused", threads=threads)
    stored = aotc_compile(path, target=target_with_switch_off(target, tmp_path, "tile_epilogue", "stored"), output_dir=tmp_path / "stored",
                          threads=threads)

    # every GEMM's epilogue runs in the tile (7 GEMMs); those computed transposed on columns
    src = (tmp_path / "fused" / "epilogues.c").read_text()
    rows, cols = src.count(".tile = AOTC_WHOLE_TILE("), src.count(".tile = AOTC_WHOLE_TILE_COLUMNS(")
    assert rows + cols == 7, (rows, cols)
    if GemmTiles.of(load_target(target)).transpose_cost < 64:
        assert cols >= 2                             # the 7 x 7 convolutions
    assert len(re.findall(r"AOTC_NOINLINE static void \w+_tile\d+\(", src)) == 7
    assert ".tile =" not in (tmp_path / "stored" / "epilogues.c").read_text()

    got, want = fused.run(feeds), stored.run(feeds)
    ref = ort.InferenceSession(onnx.load(str(path)).SerializeToString()).run(None, feeds)
    for name, a, b, r in zip(fused.output_names, got, want, ref):
        np.testing.assert_array_equal(a, b, err_msg=name)
        np.testing.assert_allclose(a, r, rtol=1e-4, atol=1e-4, err_msg=name)


def _integer_model(tmp_path: Path):
    """Integer GEMMs (runtime/aotc_igemm.h) whose epilogues run in the tile: requantizing
    QLinearConvs (a 1x1 with edge tiles; a 3x3 of 432 products an output, two K blocks), a
    QLinearMatMul, and a MatMulInteger whose int32 result is the graph's output (its epilogue,
    taking A's zero point off, stores C itself)."""
    N = helper.make_node
    rng = np.random.default_rng(7)
    u8, s8, f32 = np.uint8, np.int8, np.float32

    def ints(dt, *shape):
        info = np.iinfo(dt)
        return rng.integers(info.min, info.max, size=shape, endpoint=True).astype(dt)

    feeds = {"x": ints(u8, 1, 64, 12, 13), "z": ints(u8, 1, 48, 9, 11), "a": ints(u8, 50, 513),
             "m": ints(u8, 37, 300)}
    inits = {"xs": np.array(0.02, f32), "xz": np.array(120, u8), "ys": np.array(0.7, f32),
             "yz": np.array(100, u8), "w1": ints(s8, 40, 64, 1, 1), "ws1": rng.uniform(0.001, 0.01, 40).astype(f32),
             "wz1": np.zeros(40, s8), "b1": rng.integers(-2000, 2000, 40).astype(np.int32),
             "w3": ints(s8, 24, 48, 3, 3), "ws3": np.array(0.004, f32), "wz3": np.array(0, s8),
             "w4": ints(s8, 513, 33), "ws4": rng.uniform(0.0005, 0.002, 33).astype(f32), "wz4": np.array(0, s8),
             "w5": ints(s8, 300, 40), "az": np.array(131, u8)}
    nodes = [N("QLinearConv", ["x", "xs", "xz", "w1", "ws1", "wz1", "ys", "yz", "b1"], ["y1"]),
             N("QLinearConv", ["z", "xs", "xz", "w3", "ws3", "wz3", "ys", "yz"], ["y3"], pads=[1, 1, 1, 1]),
             N("QLinearMatMul", ["a", "xs", "xz", "w4", "ws4", "wz4", "ys", "yz"], ["y4"]),
             N("MatMulInteger", ["m", "w5", "az"], ["y5"])]
    path = tmp_path / "integer.onnx"
    onnx.save(graph_model(nodes, feeds, ["y1", "y3", "y4", "y5"], inits, opset=13), str(path))
    return path, feeds


@pytest.mark.parametrize("target,threads", [("native", 1), ("c", 1), ("eager", 2)])
def test_integer_tile_epilogue_matches_the_stored_tile_and_ort(target, threads, tmp_path):
    import onnxruntime as ort
    target = eager_threads_target(tmp_path) if target == "eager" else native_target() if target == "native" \
        else target
    path, feeds = _integer_model(tmp_path)
    fused = aotc_compile(path, target=target, output_dir=tmp_path / "fused", threads=threads)
    stored = aotc_compile(path, target=target_with_switch_off(target, tmp_path, "tile_epilogue", "stored"),
                          output_dir=tmp_path / "stored", threads=threads)
    src = (tmp_path / "fused" / "integer.c").read_text()
    # (the 1x1 QLinearConv sums 64 products: an integer GEMM where the target's is the faster
    # one, else float32's, exact)
    assert src.count(".tile = AOTC_WHOLE_ITILE(") == (4 if load_target(target).gemm.int8_tile else 3)
    assert ".tile =" not in (tmp_path / "stored" / "integer.c").read_text()
    got, want = fused.run(feeds), stored.run(feeds)
    ref = ort.InferenceSession(onnx.load(str(path)).SerializeToString()).run(None, feeds)
    for name, a, b, r in zip(fused.output_names, got, want, ref):
        np.testing.assert_array_equal(a, b, err_msg=name)
        np.testing.assert_array_equal(a, r, err_msg=name)


def test_integer_gemm_whose_sums_another_kernel_reads_through_a_view(tmp_path):
    """A MatMulInteger's int32 result read by its fused chain (Cast, Mul) and, reshaped, by the
    caller: the sums must be stored whole, tile epilogue or not, and equal ONNX Runtime's."""
    import onnxruntime as ort
    N = helper.make_node
    rng = np.random.default_rng(9)
    a = rng.integers(0, 256, (37, 300)).astype(np.uint8)
    inits = {"w": rng.integers(-128, 128, (300, 40)).astype(np.int8), "az": np.array(77, np.uint8),
             "shape": np.array([37 * 40], np.int64), "half": np.array(0.5, np.float32)}
    nodes = [N("MatMulInteger", ["a", "w", "az"], ["y"]), N("Reshape", ["y", "shape"], ["yv"]),
             N("Cast", ["y"], ["yf"], to=onnx.TensorProto.FLOAT), N("Mul", ["yf", "half"], ["z"])]
    path = tmp_path / "view.onnx"
    onnx.save(graph_model(nodes, {"a": a}, ["yv", "z"], inits, opset=13), str(path))
    got = aotc_compile(path, target=native_target(), output_dir=tmp_path / "out", threads=1).run({"a": a})
    want = ort.InferenceSession(onnx.load(str(path)).SerializeToString()).run(None, {"a": a})
    for x, y in zip(got, want):
        np.testing.assert_array_equal(x, y)
