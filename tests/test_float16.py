"""float16 models: float16 inputs, outputs and weights, computed in float32 inside
(aotc/frontend/narrow.py), against ONNX Runtime on random inputs, on C, OpenCL and emulated CUDA;
the documented difference (no rounding at a float16 Cast inside the graph) against numpy."""
import numpy as np
import onnx
import pytest
from onnx import TensorProto as TP
from onnx import helper

from aotc.api import load
from aotc.compiler import compile_model
from tests.helpers import assert_parity, eager_gpu_target, run_onnx_node_case, typed_model

N = helper.make_node


def _model(nodes, inputs, outputs, inits=(), opset=17):
    return typed_model(nodes, inputs, outputs, inits, opset)


def _vi(name, shape, dt=TP.FLOAT16):
    return helper.make_tensor_value_info(name, dt, shape)


def _half(*shape, seed):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float16)


def _mlp():
    """float16 weights and activations: Gemm, bias, GELU-ish Tanh, Softmax, as exported .half()"""
    nodes = [N("MatMul", ["x", "w1"], ["h"]), N("Add", ["h", "b1"], ["hb"]), N("Tanh", ["hb"], ["t"]),
             N("MatMul", ["t", "w2"], ["z"]), N("Softmax", ["z"], ["y"], axis=-1),
             N("Cast", ["z"], ["z32"], to=TP.FLOAT)]
    inits = [("w1", _half(16, 32, seed=1) * np.float16(0.3)), ("b1", _half(32, seed=2)),
             ("w2", _half(32, 8, seed=3) * np.float16(0.3))]
    return _model(nodes, [_vi("x", [4, 16])], [_vi("y", [4, 8]), _vi("z32", [4, 8], TP.FLOAT)], inits)


@pytest.mark.parametrize("target", ["c", "opencl", "eager"])
def test_float16_mlp(target, tmp_path):
    if target != "c":
        from tests.test_opencl import _opencl_missing
        if _opencl_missing():
            pytest.skip(_opencl_missing())
    tgt = eager_gpu_target(tmp_path) if target == "eager" else target
    res = assert_parity(_mlp(), tmp_path, {"x": _half(4, 16, seed=4)}, rtol=2e-3, atol=2e-3, target=tgt)
    assert [o.name for o in res.outputs] == ["y", "z32"]


def test_float16_artifact_takes_and_gives_float16(tmp_path):
    path = tmp_path / "m.onnx"
    onnx.save(_mlp(), str(path))
    m = load(compile_model(path, output_dir=tmp_path / "out"))
    x = _half(4, 16, seed=5)
    y, z32 = m.run({"x": x})
    assert y.dtype == np.float16 and z32.dtype == np.float32
    header = (tmp_path / "out" / "m.h").read_text()
    assert "uint16_t" in header            # IEEE half bits in the C interface
    # the float32 computation, rounded once at the output
    h = np.tanh(x.astype(np.float32) @ (_half(16, 32, seed=1) * np.float16(0.3)).astype(np.float32)
                + _half(32, seed=2).astype(np.float32))
    z = h @ (_half(32, 8, seed=3) * np.float16(0.3)).astype(np.float32)
    np.testing.assert_allclose(z32, z, rtol=1e-5, atol=1e-5)
    e = np.exp(z - z.max(-1, keepdims=True))
    np.testing.assert_array_equal(y, (e / e.sum(-1, keepdims=True)).astype(np.float16))


def test_float16_input_straight_to_output_and_casts(tmp_path):
    """An input that is also an output; Casts between float16, float32 and int32."""
    nodes = [N("Cast", ["x"], ["xi"], to=TP.INT32), N("Cast", ["f"], ["fh"], to=TP.FLOAT16)]
    m = _model(nodes, [_vi("x", [3, 5]), _vi("f", [3, 5], TP.FLOAT)],
               [_vi("x", [3, 5]), _vi("xi", [3, 5], TP.INT32), _vi("fh", [3, 5])])
    f = (np.random.default_rng(6).standard_normal((3, 5)) * 100).astype(np.float32)
    f[0, :3] = [65520.0, -1e-8, 3.1e-5]           # overflow to inf, underflow, a subnormal half
    assert_parity(m, tmp_path, {"x": _half(3, 5, seed=7) * np.float16(50), "f": f}, rtol=0, atol=0)


def test_float16_cast_inside_does_not_round(tmp_path):
    """x (float32) -> Cast float16 -> Add -> Cast float32: computed in float32 throughout (the
    float16 Cast inside the graph does not round; the module docstring says so)."""
    nodes = [N("Cast", ["x"], ["xh"], to=TP.FLOAT16), N("Add", ["xh", "xh"], ["s"]),
             N("Cast", ["s"], ["y"], to=TP.FLOAT)]
    m = _model(nodes, [_vi("x", [8], TP.FLOAT)], [_vi("y", [8], TP.FLOAT)])
    path = tmp_path / "m.onnx"
    onnx.save(m, str(path))
    x = np.random.default_rng(8).standard_normal(8).astype(np.float32)
    y = load(compile_model(path, output_dir=tmp_path / "out")).run({"x": x})[0]
    np.testing.assert_array_equal(y, x + x)


@pytest.mark.parametrize("name", ["test_attention_4d_fp16", "test_cast_FLOAT16_to_FLOAT", "test_cast_FLOAT_to_FLOAT16",
                                  "test_cast_FLOAT16_to_DOUBLE", "test_castlike_FLOAT_to_FLOAT16"])
def test_onnx_float16_cases(name, tmp_path):
    run_onnx_node_case(name, tmp_path)


def test_float16_on_emulated_cuda(tmp_path):
    from tests.test_cuda_emulated import _parity
    src = _parity(_mlp(), tmp_path, "cuda:sm_90", rtol=2e-3, atol=2e-3)
    assert "__half" in src


def test_untyped_float16_output_comes_out_float16(tmp_path):
    """An output the model leaves untyped, which ONNX's type inference finds float16."""
    m = _model([N("Relu", ["x"], ["y"]), N("EyeLike", ["x"], ["e"], dtype=TP.FLOAT16)], [_vi("x", [3, 3])],
               [helper.make_empty_tensor_value_info("y"), helper.make_empty_tensor_value_info("e")])
    res = assert_parity(m, tmp_path, {"x": _half(3, 3, seed=9)})
    assert [o.dtype for o in res.outputs] == ["float16", "float16"]
