"""Asinh, Acosh, Atanh, Swish, Shrink and the Bitwise ops against ONNX Runtime (or numpy where
ONNX Runtime lacks the op) on random inputs, alone and fused into one kernel."""
import numpy as np
import pytest
from onnx import helper

from aotc.compiler import compile_model
from aotc.errors import UnsupportedError
from tests.helpers import assert_parity, graph_model, rand, single_op_model


@pytest.mark.parametrize("op, low, high", [("Asinh", -5, 5), ("Acosh", 1, 6), ("Atanh", -0.99, 0.99)])
def test_inverse_hyperbolic(op, low, high, tmp_path):
    x = rand(3, 17, seed=1, low=low, high=high)
    assert_parity(single_op_model(op, {"x": x}, opset=22), tmp_path, {"x": x})


@pytest.mark.parametrize("lambd, bias", [(0.5, 0.0), (1.2, 0.3), (0.0, -1.5)])
def test_shrink(lambd, bias, tmp_path):
    x = rand(4, 9, seed=2) * 2
    assert_parity(single_op_model("Shrink", {"x": x}, lambd=lambd, bias=bias), tmp_path, {"x": x})


@pytest.mark.parametrize("alpha", [1.0, 1.702])
def test_swish_against_numpy(alpha, tmp_path):
    """Swish is opset 24; checked against x * sigmoid(alpha x) in float64 (the parity run uses
    ONNX Runtime when it has the op, else the ONNX reference implementation)."""
    x = rand(5, 11, seed=3) * 4
    res = assert_parity(single_op_model("Swish", {"x": x}, opset=24, alpha=alpha), tmp_path, {"x": x})
    assert res.outputs


@pytest.mark.parametrize("op", ["BitwiseAnd", "BitwiseOr", "BitwiseXor"])
@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint8, np.int8])
def test_bitwise_binary(op, dtype, tmp_path):
    rng = np.random.default_rng(4)
    info = np.iinfo(dtype)
    a = rng.integers(info.min, info.max, size=(3, 4, 5), dtype=dtype, endpoint=True)
    b = rng.integers(info.min, info.max, size=(4, 1), dtype=dtype, endpoint=True)     # broadcast
    assert_parity(single_op_model(op, {"a": a, "b": b}, opset=18), tmp_path, {"a": a, "b": b})


@pytest.mark.parametrize("dtype", [np.int32, np.uint8, np.int8, np.int64])
def test_bitwise_not_keeps_its_type(dtype, tmp_path):
    """~x of a uint8 is its complement in 8 bits, also when a comparison follows in the same
    kernel (C would promote ~x to a negative int)."""
    rng = np.random.default_rng(5)
    info = np.iinfo(dtype)
    x = rng.integers(info.min, info.max, size=(6, 7), dtype=dtype, endpoint=True)
    c = np.array(info.max // 3, dtype=dtype)
    nodes = [helper.make_node("BitwiseNot", ["x"], ["n"]), helper.make_node("Greater", ["n", "c"], ["g"])]
    m = graph_model(nodes, {"x": x}, ["n", "g"], {"c": c}, opset=18)
    assert_parity(m, tmp_path, {"x": x})


def test_fused_chain(tmp_path):
    x = rand(8, 16, seed=6, low=-0.9, high=0.9)
    nodes = [helper.make_node("Atanh", ["x"], ["a"]), helper.make_node("Shrink", ["a"], ["s"], lambd=0.2, bias=0.1),
             helper.make_node("Asinh", ["s"], ["y"])]
    assert_parity(graph_model(nodes, {"x": x}, ["y"], opset=22), tmp_path, {"x": x})


def test_element_types(tmp_path):
    """BitwiseNot on floats breaks its schema (a model error); Shrink on integers is allowed by
    ONNX and not implemented here (unsupported, named)."""
    from aotc.errors import ModelError
    x = np.arange(6, dtype=np.float32).reshape(2, 3) + 1
    path = tmp_path / "m.onnx"
    path.write_bytes(single_op_model("BitwiseNot", {"x": x}, opset=18).SerializeToString())
    with pytest.raises(ModelError, match="BitwiseNot"):
        compile_model(path, output_dir=tmp_path / "out")
    path.write_bytes(single_op_model("Shrink", {"x": x.astype(np.int32)}).SerializeToString())
    with pytest.raises(UnsupportedError, match="Shrink"):
        compile_model(path, output_dir=tmp_path / "out")


@pytest.mark.parametrize("alpha", [1.0, 1.702])
def test_swiglu_against_numpy(alpha, tmp_path):
    """SwiGLU (opset 28; ONNX Runtime has no kernel): Swish_alpha(A) * B in float64, and the
    parity run's reference (the ONNX reference implementation) agrees."""
    from aotc.api import load
    a, b = rand(4, 6, 10, seed=5) * 4, rand(4, 6, 10, seed=6)
    m = graph_model([helper.make_node("SwiGLU", ["a", "b"], ["y"], alpha=alpha)], {"a": a, "b": b}, ["y"], opset=28)
    res = assert_parity(m, tmp_path, {"a": a, "b": b})
    assert res.reference.startswith("the ONNX reference implementation") and "Swish" in res.reference
    path = tmp_path / "m.onnx"
    path.write_bytes(m.SerializeToString())
    y = load(compile_model(path, output_dir=tmp_path / "np")).run({"a": a, "b": b})[0]
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    np.testing.assert_allclose(y, a64 / (1 + np.exp(-alpha * a64)) * b64, rtol=2e-6, atol=1e-6)


def test_swiglu_fuses_with_its_neighbours(tmp_path):
    """A gate and a value projection's outputs through SwiGLU then an Add: one elementwise kernel."""
    import onnx
    from aotc.compiler import compile_program
    a, b, r = rand(3, 16, seed=7), rand(3, 16, seed=8), rand(3, 16, seed=9)
    nodes = [helper.make_node("Neg", ["a"], ["na"]), helper.make_node("SwiGLU", ["na", "b"], ["s"]),
             helper.make_node("Add", ["s", "r"], ["y"])]
    m = graph_model(nodes, {"a": a, "b": b, "r": r}, ["y"], opset=28)
    assert_parity(m, tmp_path, {"a": a, "b": b, "r": r})
    path = tmp_path / "f.onnx"
    onnx.save(m, str(path))
    assert len(compile_program(path, target="c", threads=1).steps) == 1


@pytest.mark.parametrize("shapes, dtype, err, msg", [
    (((2, 3), (3,)), np.float32, "ShapeError", "same shape"),
    (((2, 3), (2, 3)), np.int32, "ModelError", "SwiGLU-28 schema allows"),
])
def test_swiglu_bad_inputs(shapes, dtype, err, msg, tmp_path):
    import aotc.errors
    feeds = {n: rand(*s, seed=1).astype(dtype) for n, s in zip("ab", shapes)}
    m = graph_model([helper.make_node("SwiGLU", ["a", "b"], ["y"])], feeds, ["y"], opset=28)
    path = tmp_path / "m.onnx"
    path.write_bytes(m.SerializeToString())
    with pytest.raises(getattr(aotc.errors, err), match=msg):
        compile_model(path, output_dir=tmp_path / "out")


_BITCAST_PAIRS = [(np.float32, np.int32), (np.float32, np.uint32), (np.int32, np.float32), (np.float64, np.int64),
                  (np.uint64, np.float64), (np.int8, np.uint8), (np.uint16, np.int16), (np.int64, np.uint64)]


def _bit_patterns(dtype, seed):
    """Random values of dtype, with its extremes (and for floats NaN, infinities, -0 and a
    subnormal) mixed in."""
    rng = np.random.default_rng(seed)
    dt = np.dtype(dtype)
    if dt.kind == "f":
        x = (rng.standard_normal(40) * 1e3).astype(dt)
        x[:6] = [np.nan, np.inf, -np.inf, -0.0, np.finfo(dt).tiny / 4, np.finfo(dt).max]
    else:
        info = np.iinfo(dt)
        x = rng.integers(info.min, info.max, size=40, dtype=dt, endpoint=True)
        x[:2] = [info.min, info.max]
    return x.reshape(5, 8)


@pytest.mark.parametrize("src, dst", _BITCAST_PAIRS, ids=[f"{np.dtype(a).name}-{np.dtype(b).name}"
                                                          for a, b in _BITCAST_PAIRS])
@pytest.mark.parametrize("target", ["c", "opencl"])
def test_bitcast_is_numpy_view(src, dst, target, tmp_path):
    """BitCast (opset 26) keeps the bits: numpy's .view(dst) of the same array."""
    from onnx.helper import np_dtype_to_tensor_dtype
    from aotc.api import load
    if target == "opencl":
        from tests.test_opencl import _opencl_missing
        if _opencl_missing():
            pytest.skip(_opencl_missing())
    x = _bit_patterns(src, seed=len(np.dtype(src).name))
    m = graph_model([helper.make_node("BitCast", ["x"], ["y"], to=np_dtype_to_tensor_dtype(np.dtype(dst)))],
                    {"x": x}, ["y"], opset=26)
    path = tmp_path / "m.onnx"
    path.write_bytes(m.SerializeToString())
    y = load(compile_model(path, output_dir=tmp_path / "out", target=target)).run({"x": x})[0]
    assert y.dtype == np.dtype(dst)
    np.testing.assert_array_equal(y.view(np.uint8), x.view(np.uint8))


def test_bitcast_against_onnxruntime(tmp_path):
    x = _bit_patterns(np.float32, seed=9)
    m = graph_model([helper.make_node("BitCast", ["x"], ["y"], to=6)], {"x": x}, ["y"], opset=26)
    assert_parity(m, tmp_path, {"x": x})


def test_bitcast_of_different_widths_is_an_error(tmp_path):
    import aotc.errors
    x = rand(2, 3, seed=1)
    m = graph_model([helper.make_node("BitCast", ["x"], ["y"], to=7)], {"x": x}, ["y"], opset=26)
    path = tmp_path / "m.onnx"
    path.write_bytes(m.SerializeToString())
    with pytest.raises((aotc.errors.ShapeError, aotc.errors.ModelError), match="width"):
        compile_model(path, output_dir=tmp_path / "out")


@pytest.mark.parametrize("direction", ["LEFT", "RIGHT"])
@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.int64, np.uint8, np.uint32])
def test_bitshift_out_of_range_shifts(direction, dtype, tmp_path):
    """Shifts in [-3, bits + 3]: outside [0, bits) a left shift gives 0 and a right shift the
    sign fill (ONNX's reference; C leaves them undefined), negative values shift as bits."""
    from onnx.reference import ReferenceEvaluator
    from aotc.api import load
    rng = np.random.default_rng(11)
    info, bits = np.iinfo(dtype), 8 * np.dtype(dtype).itemsize
    a = rng.integers(info.min, info.max, size=(4, 16), dtype=dtype, endpoint=True)
    lo = 0 if info.min == 0 else -3
    b = rng.integers(lo, bits + 3, size=(4, 16), endpoint=True).astype(dtype)
    m = single_op_model("BitShift", {"a": a, "b": b}, direction=direction, opset=28)   # (signed from 28)
    path = tmp_path / "m.onnx"
    path.write_bytes(m.SerializeToString())
    got = load(compile_model(path, output_dir=tmp_path / "out")).run({"a": a, "b": b})[0]
    np.testing.assert_array_equal(got, ReferenceEvaluator(m).run(None, {"a": a, "b": b})[0])
