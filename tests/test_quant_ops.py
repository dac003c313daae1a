"""QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear, MatMulInteger and QLinearMatMul
against ONNX Runtime on random inputs (integers compared exactly): per-tensor and per-axis
parameters, values on exact .5 rounding boundaries and beyond the output range."""
import numpy as np
import pytest
from onnx import helper

from aotc.compiler import compile_model
from aotc.errors import UnsupportedError
from tests.helpers import assert_parity, graph_model, rand


def _ints(dtype, shape, seed):
    info = np.iinfo(dtype)
    return np.random.default_rng(seed).integers(info.min, info.max, size=shape, dtype=dtype, endpoint=True)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("per_axis", [False, True])
def test_quantize(dtype, per_axis, tmp_path):
    x = rand(2, 3, 4, 5, seed=1) * 200
    # values whose quotient is exactly k + 0.5 (round half to even), and far out of range
    x[0, 0, 0, :] = np.array([0.5, 1.5, 2.5, -0.5, -3.5], np.float32) * 2.0
    x[1, 2, 3, :] = [1e6, -1e6, 3e4, -3e4, 0.0]
    scale = np.array([2.0, 0.5, 1.25], np.float32) if per_axis else np.array(2.0, np.float32)
    zp = _ints(dtype, (3,) if per_axis else (), seed=2)
    m = graph_model([helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"], axis=1)], {"x": x}, ["y"],
                    {"s": scale, "z": zp}, opset=13)
    assert_parity(m, tmp_path, {"x": x})


def test_quantize_without_zero_point_is_uint8(tmp_path):
    x = rand(4, 6, seed=3) * 100 + 50
    m = graph_model([helper.make_node("QuantizeLinear", ["x", "s"], ["y"])], {"x": x}, ["y"],
                    {"s": np.array(0.7, np.float32)}, opset=13)
    assert_parity(m, tmp_path, {"x": x})


@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.int32])
@pytest.mark.parametrize("per_axis", [False, True])
def test_dequantize(dtype, per_axis, tmp_path):
    x = _ints(dtype, (3, 4, 5), seed=4) if dtype != np.int32 else \
        np.random.default_rng(4).integers(-100000, 100000, size=(3, 4, 5)).astype(np.int32)
    n = 5 if per_axis else ()
    scale = rand(*(() if not per_axis else (5,)), seed=5, low=0.01, high=2.0)
    inits = {"s": np.asarray(scale, np.float32)}
    names = ["x", "s"]
    if dtype != np.int32:                      # int32 takes no zero point
        inits["z"] = _ints(dtype, n, seed=6)
        names.append("z")
    m = graph_model([helper.make_node("DequantizeLinear", names, ["y"], axis=-1)], {"x": x}, ["y"], inits, opset=13)
    assert_parity(m, tmp_path, {"x": x})


@pytest.mark.parametrize("shift", [0.0, 3.0, -3.0])
def test_dynamic_quantize(shift, tmp_path):
    """All outputs (y, scale, zero point) against ONNX Runtime; inputs all above or below 0
    (the range then still includes 0) and around it."""
    x = rand(5, 7, seed=7) + shift
    m = graph_model([helper.make_node("DynamicQuantizeLinear", ["x"], ["y", "s", "z"])], {"x": x}, ["y", "s", "z"],
                    opset=11)
    assert_parity(m, tmp_path, {"x": x})


@pytest.mark.parametrize("a_dt, b_dt", [(np.uint8, np.uint8), (np.int8, np.int8), (np.uint8, np.int8)])
@pytest.mark.parametrize("zps", ["none", "scalar", "vector"])
def test_matmul_integer(a_dt, b_dt, zps, tmp_path):
    a, b = _ints(a_dt, (2, 5, 9), seed=8), _ints(b_dt, (9, 6), seed=9)
    inits, names = {}, ["a", "b"]
    if zps != "none":                          # (ONNX Runtime takes a scalar A zero point only)
        inits["az"] = _ints(a_dt, (), seed=10)
        inits["bz"] = _ints(b_dt, (6,) if zps == "vector" else (), seed=11)
        names += ["az", "bz"]
    m = graph_model([helper.make_node("MatMulInteger", names, ["y"])], {"a": a, "b": b}, ["y"], inits, opset=10)
    assert_parity(m, tmp_path, {"a": a, "b": b})


def test_matmul_integer_per_row_a_zero_point_against_numpy(tmp_path):
    """A zero point per row of A (which the spec allows and ONNX Runtime does not take)."""
    from aotc.api import load
    a, b = _ints(np.uint8, (5, 9), seed=22), _ints(np.int8, (9, 4), seed=23)
    az, bz = _ints(np.uint8, (5,), seed=24), _ints(np.int8, (4,), seed=25)
    m = graph_model([helper.make_node("MatMulInteger", ["a", "b", "az", "bz"], ["y"])], {"a": a, "b": b}, ["y"],
                    {"az": az, "bz": bz}, opset=10)
    path = tmp_path / "m.onnx"
    path.write_bytes(m.SerializeToString())
    out = load(compile_model(path, output_dir=tmp_path / "out")).run({"a": a, "b": b})
    y = out["y"] if isinstance(out, dict) else out[0]
    want = (a.astype(np.int64) - az[:, None]) @ (b.astype(np.int64) - bz[None, :])
    np.testing.assert_array_equal(y, want.astype(np.int32))


@pytest.mark.parametrize("dt", [np.uint8, np.int8])
@pytest.mark.parametrize("per_col", [False, True])
def test_qlinear_matmul(dt, per_col, tmp_path):
    a, b = _ints(dt, (4, 16), seed=12), _ints(dt, (16, 5), seed=13)
    inits = {"as": np.array(0.02, np.float32), "az": _ints(dt, (), seed=14),
             "bs": (rand(5, seed=15, low=0.01, high=0.05) if per_col else np.array(0.03, np.float32)),
             "bz": _ints(dt, (), seed=16), "ys": np.array(0.5, np.float32), "yz": _ints(dt, (), seed=17)}
    node = helper.make_node("QLinearMatMul", ["a", "as", "az", "b", "bs", "bz", "ys", "yz"], ["y"])
    m = graph_model([node], {"a": a, "b": b}, ["y"], inits, opset=21)
    assert_parity(m, tmp_path, {"a": a, "b": b})


def test_quant_dequant_round_trip_in_one_graph(tmp_path):
    x = rand(3, 8, seed=18) * 10
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]),
             helper.make_node("DequantizeLinear", ["q", "s", "z"], ["d"]),
             helper.make_node("Relu", ["d"], ["y"])]
    m = graph_model(nodes, {"x": x}, ["q", "y"], {"s": np.array(0.1, np.float32), "z": np.array(3, np.int8)},
                    opset=13)
    assert_parity(m, tmp_path, {"x": x})


def test_blocked_quantization_is_unsupported(tmp_path):
    x = rand(4, 8, seed=19)
    m = graph_model([helper.make_node("DequantizeLinear", ["x", "s"], ["y"], axis=1, block_size=4)],
                    {"x": _ints(np.int8, (4, 8), seed=20)}, ["y"], {"s": rand(4, 2, seed=21, low=0.1, high=1)},
                    opset=21)
    path = tmp_path / "m.onnx"
    path.write_bytes(m.SerializeToString())
    with pytest.raises(UnsupportedError, match="block_size"):
        compile_model(path, output_dir=tmp_path / "out")
