"""Integer Gemms (kernel/ir.py: 8-bit operands, int32 sums) end to end, against ONNX Runtime,
exactly: MatMulInteger and QLinearMatMul, and ConvInteger and QLinearConv whose outputs sum
more products than float32 holds exactly (aotc.ConvInteger). Where one operand is a uint8
tensor and the other an int8 constant without a zero point (a quantized model's weights) the
CPU schedule runs the 8-bit GEMM of runtime/aotc_igemm.h (the test checks the generated C
calls it) and takes the uint8 operand's zero point off in the epilogue; other operand kinds
run as loops. On this CPU's native target (AVX-512 VNNI where it has it), the portable c
target (the plain C tile), 2 threads with every GEMM split, and OpenCL (loops)."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper

from aotc.api import compile as aotc_compile
from aotc.targets import native_target
from tests.helpers import eager_gpu_target, eager_threads_target, graph_model


def _ints(dtype, shape, seed):
    info = np.iinfo(dtype)
    return np.random.default_rng(seed).integers(info.min, info.max, size=shape, dtype=dtype, endpoint=True)


def _model(kind: str):
    """(model, feeds, how many of its GEMMs the 8-bit GEMM runs)"""
    N = helper.make_node
    u8, s8 = np.uint8, np.int8
    if kind == "matmul":
        # A [2, 3, 37, 900] x a constant B: one taller GEMM of 222 rows, K over several blocks,
        # A's zero point off in the epilogue; and the same A times a batch of constant Bs
        a = _ints(u8, (2, 3, 37, 900), 1)
        inits = {"w": _ints(s8, (900, 70), 2), "wb": _ints(s8, (3, 900, 40), 3),
                 "az": np.array(131, u8), "bz": np.array(0, s8)}
        nodes = [N("MatMulInteger", ["a", "w", "az", "bz"], ["y"]), N("MatMulInteger", ["a", "wb", "az"], ["yb"])]
        return graph_model(nodes, {"a": a}, ["y", "yb"], inits, opset=10), {"a": a}, 2
    if kind == "weights_first":
        # an int8 constant A times a uint8 B (the other operand order), no zero points
        b = _ints(u8, (300, 45), 4)
        inits = {"w": _ints(s8, (19, 300), 5)}
        return graph_model([N("MatMulInteger", ["w", "b"], ["y"])], {"b": b}, ["y"], inits, opset=10), {"b": b}, 1
    if kind == "qlinear_matmul":
        a = _ints(u8, (50, 513), 6)
        inits = {"as": np.array(0.02, np.float32), "az": np.array(100, u8), "w": _ints(s8, (513, 33), 7),
                 "bs": np.random.default_rng(8).uniform(0.0005, 0.002, 33).astype(np.float32),
                 "bz": np.array(0, s8), "ys": np.array(0.3, np.float32), "yz": np.array(90, u8)}
        node = N("QLinearMatMul", ["a", "as", "az", "w", "bs", "bz", "ys", "yz"], ["y"])
        return graph_model([node], {"a": a}, ["y"], inits, opset=21), {"a": a}, 1
    if kind == "conv":
        # 32 input channels x 3 x 3 taps = 288 products per output (aotc.ConvInteger): padded
        # (the padding reads the zero point), strided, grouped, and a 1x1 of 300 channels
        x = _ints(u8, (2, 64, 9, 11), 9)
        x3 = _ints(u8, (1, 300, 5, 6), 10)
        inits = {"w": _ints(s8, (24, 32, 3, 3), 11), "w1": _ints(s8, (40, 300, 1, 1), 12),
                 "xz": np.array(77, u8), "wz": np.array(0, s8), "xz3": np.array(3, u8)}
        nodes = [N("ConvInteger", ["x", "w", "xz", "wz"], ["y"], group=2, pads=[1, 2, 0, 1], strides=[1, 2]),
                 N("ConvInteger", ["x3", "w1", "xz3"], ["y1"])]
        return graph_model(nodes, {"x": x, "x3": x3}, ["y", "y1"], inits, opset=10), {"x": x, "x3": x3}, 2
    if kind == "qlinear_conv":
        x = _ints(u8, (1, 48, 10, 10), 13)
        inits = {"xs": np.array(0.02, np.float32), "xz": np.array(128, u8), "w": _ints(s8, (20, 48, 3, 3), 14),
                 "ws": np.random.default_rng(15).uniform(0.001, 0.01, 20).astype(np.float32),
                 "wz": np.zeros(20, s8), "ys": np.array(0.5, np.float32), "yz": np.array(100, u8),
                 "b": _ints(np.int16, (20,), 16).astype(np.int32)}
        node = N("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"], ["y"], pads=[1, 1, 1, 1])
        return graph_model([node], {"x": x}, ["y"], inits, opset=13), {"x": x}, 1
    if kind == "per_column_zeros":
        # B's zero points per column in form only (all 0: quantizers write per-channel weights'
        # so): the 8-bit GEMM still, with the constant zero point as a scalar
        a = _ints(u8, (9, 260), 20)
        inits = {"w": _ints(s8, (260, 30), 21), "bz": np.zeros(30, s8), "az": np.array(7, u8)}
        nodes = [N("MatMulInteger", ["a", "w", "az", "bz"], ["y"])]
        return graph_model(nodes, {"a": a}, ["y"], inits, opset=10), {"a": a}, 1
    if kind == "loops":
        # two run-time operands, and an int8 zero point on the int8 constant: not the 8-bit GEMM
        a, b = _ints(u8, (21, 260), 17), _ints(s8, (260, 9), 18)
        inits = {"w": _ints(s8, (260, 7), 19), "bz": np.array(5, np.int8), "az": np.array(9, u8)}
        nodes = [N("MatMulInteger", ["a", "b", "az"], ["y"]), N("MatMulInteger", ["a", "w", "az", "bz"], ["y2"])]
        return graph_model(nodes, {"a": a, "b": b}, ["y", "y2"], inits, opset=10), {"a": a, "b": b}, 0
    raise ValueError(kind)


KINDS = ["matmul", "weights_first", "qlinear_matmul", "conv", "qlinear_conv", "per_column_zeros", "loops"]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("target,threads", [("native", 1), ("c", 1), ("eager", 2)])
def test_integer_gemms_against_ort(kind, target, threads, tmp_path):
    import onnxruntime as ort
    if target == "eager":
        target = eager_threads_target(tmp_path)      # every GEMM split between the threads
    elif target == "native":
        target = native_target()
    model, feeds, eight_bit = _model(kind)
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    m = aotc_compile(path, target=target, output_dir=tmp_path / "out", threads=threads)
    src = (tmp_path / "out" / "m.c").read_text()
    assert src.count("aotc_igemm(") == eight_bit, src.count("aotc_igemm(")
    got = m.run(feeds)
    want = ort.InferenceSession(model.SerializeToString()).run(None, feeds)
    for name, a, b in zip(m.output_names, got, want):
        assert a.dtype == b.dtype and np.array_equal(a, b), name


@pytest.mark.parametrize("kind", ["matmul", "qlinear_conv"])
@pytest.mark.parametrize("eager", [False, True])
def test_integer_gemms_on_opencl(kind, eager, tmp_path):
    """GPU schedules run integer Gemms as loops (eager: every spatial loop given a work-group)."""
    import onnxruntime as ort
    from tests.test_opencl import _opencl_missing
    if _opencl_missing():
        pytest.skip(_opencl_missing())
    model, feeds, _ = _model(kind)
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    m = aotc_compile(path, target=eager_gpu_target(tmp_path) if eager else "opencl", output_dir=tmp_path / "out")
    want = ort.InferenceSession(model.SerializeToString()).run(None, feeds)
    for name, a, b in zip(m.output_names, m.run(feeds), want):
        assert np.array_equal(a, b), name


@pytest.mark.parametrize("kind", ["matmul", "qlinear_conv"])
def test_integer_gemms_on_emulated_cuda(kind, tmp_path):
    """The cuda target's code (loops for the integer Gemms) on the CPU emulation of CUDA."""
    import shutil
    import onnxruntime as ort
    if shutil.which("g++") is None:
        pytest.skip("g++ is not installed")
    from tests.test_cuda_emulated import emulated_build
    model, feeds, _ = _model(kind)
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    from aotc.api import load
    from aotc.compiler import compile_model
    m = load(compile_model(path, target="cuda:sm_90", output_dir=tmp_path / "out", build=emulated_build))
    want = ort.InferenceSession(model.SerializeToString()).run(None, feeds)
    for name, a, b in zip(m.output_names, m.run(feeds), want):
        assert np.array_equal(a, b), name
