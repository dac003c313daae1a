"""ONNX Runtime's quantized contrib operators (aotc/frontend/contrib_quant.py) against its CPU
kernels, one node at a time on random 8-bit inputs, and the QOperator model its quantize_static
writes for a small CNN.

Integer outputs are compared exactly, except where ONNX Runtime's own arithmetic takes another
path than the graph aotc compiles, which may change with the CPU (named per case: MLAS's
vectorized formulas and logistic approximation, float sums in another order): there a value
may differ by one unit in at most 1% of the elements. (On the machine these tests were written
on, every case gave ONNX Runtime's values exactly.)"""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from tests.test_contrib_ops import contrib_model, run_aotc

U8, I8 = np.uint8, np.int8


def _q(shape, dt, seed):
    info = np.iinfo(dt)
    return np.random.default_rng(seed).integers(info.min, info.max + 1, shape).astype(dt)


def _scalar(v, dt=np.float32):
    return np.array(v, dt)


def _ort(m, feeds):
    return ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)


def compare(m, tmp_path, feeds, off_by_one: float = 0.0):
    """aotc against ONNX Runtime: equal, or (off_by_one > 0: ORT rounds through another path)
    at most one unit apart in at most that fraction of the elements."""
    want = _ort(m, feeds)
    got = run_aotc(m, tmp_path, feeds)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        if w.dtype.kind == "f":
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
            continue
        diff = np.abs(g.astype(np.int32) - w.astype(np.int32))
        assert diff.max() <= (1 if off_by_one else 0), f"max difference {diff.max()}"
        assert (diff > 0).mean() <= off_by_one, f"{(diff > 0).mean():.3%} of the values differ by one"
        assert len(np.unique(w)) > 3, "a degenerate case: the output hardly varies"


def _scales(dt, seed):
    rng = np.random.default_rng(seed)
    zp = (lambda: _scalar(rng.integers(100, 156), U8)) if dt == U8 else (lambda: _scalar(rng.integers(-20, 20), I8))
    return lambda: _scalar(rng.uniform(0.01, 0.05)), zp


@pytest.mark.parametrize("op", ["QLinearAdd", "QLinearMul"])
@pytest.mark.parametrize("dt", [U8, I8])
def test_qlinear_binary(op, dt, tmp_path):
    sc, zp = _scales(dt, 1)
    a, b = _q((2, 3, 8), dt, 1), _q((3, 8), dt, 2)          # (broadcast)
    inits = {"sa": sc(), "za": zp(), "sb": sc(), "zb": zp(), "sc": _scalar(0.08 if op == "QLinearAdd" else 0.2),
             "zc": zp()}
    m = contrib_model(op, {"a": a, "b": b}, inits, order=["a", "sa", "za", "b", "sb", "zb", "sc", "zc"])
    compare(m, tmp_path, {"a": a, "b": b}, off_by_one=0.01)      # (MLAS's vectorized formula)


@pytest.mark.parametrize("op,attrs,off", [("QLinearSigmoid", {}, 0.01), ("QLinearLeakyRelu", {"alpha": 0.2}, 0.0)])
@pytest.mark.parametrize("dt", [U8, I8])
def test_qlinear_table_ops(op, attrs, off, dt, tmp_path):
    """(Sigmoid: ORT builds its table with MLAS's logistic approximation.)"""
    sc, zp = _scales(dt, 2)
    x = _q((2, 4, 5, 5), dt, 3)
    inits = {"sx": _scalar(0.05), "zx": zp(), "sy": _scalar(1 / 250 if op == "QLinearSigmoid" else 0.04), "zy": zp()}
    m = contrib_model(op, {"x": x}, inits, **attrs)
    compare(m, tmp_path, {"x": x}, off_by_one=off)


@pytest.mark.parametrize("dt", [U8, I8])
def test_qlinear_concat_and_where(dt, tmp_path):
    sc, zp = _scales(dt, 3)
    a, b = _q((2, 3, 4), dt, 4), _q((2, 5, 4), dt, 5)
    inits = {"sy": sc(), "zy": zp(), "sa": sc(), "za": zp(), "sb": sc(), "zb": zp()}
    m = contrib_model("QLinearConcat", {"a": a, "b": b}, inits, order=["sy", "zy", "a", "sa", "za", "b", "sb", "zb"],
                      axis=1)
    compare(m, tmp_path, {"a": a, "b": b})
    cond = np.random.default_rng(6).random((2, 3, 4)) > 0.5
    b = _q((2, 3, 4), dt, 7)
    inits = {"sa": sc(), "za": zp(), "sb": sc(), "zb": zp(), "sz": sc(), "zz": zp()}
    m = contrib_model("QLinearWhere", {"c": cond, "a": a, "b": b}, inits,
                      order=["c", "a", "sa", "za", "b", "sb", "zb", "sz", "zz"])
    (tmp_path / "w").mkdir()
    compare(m, tmp_path / "w", {"c": cond, "a": a, "b": b})


@pytest.mark.parametrize("last", [0, 1])
def test_qlinear_pools(last, tmp_path):
    """AveragePool exactly (ORT's float sum in window order, then its zero-point-first rounding);
    GlobalAveragePool's sum runs in another order than MLAS's."""
    x = _q((2, 6, 6, 4) if last else (2, 4, 6, 6), U8, 8)
    inits = {"sx": _scalar(0.03), "zx": _scalar(120, U8), "sy": _scalar(0.02), "zy": _scalar(125, U8)}
    m = contrib_model("QLinearAveragePool", {"x": x}, inits, kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1],
                      count_include_pad=0, channels_last=last)
    compare(m, tmp_path, {"x": x})
    inits["sy"] = _scalar(0.0015)
    m = contrib_model("QLinearGlobalAveragePool", {"x": x}, inits, channels_last=last)
    (tmp_path / "g").mkdir()
    compare(m, tmp_path / "g", {"x": x}, off_by_one=0.01)


@pytest.mark.parametrize("dt,opset,axis", [(U8, 13, -1), (U8, 12, 1), (I8, 13, 1)])
def test_qlinear_softmax(dt, opset, axis, tmp_path):
    """ORT's own algorithm (its exp table); the row sums run in another order."""
    x = _q((3, 4, 10), dt, 9)
    zy = _scalar(0, U8) if dt == U8 else _scalar(-128, I8)
    inits = {"sx": _scalar(0.05), "zx": _scalar(128, U8) if dt == U8 else _scalar(0, I8),
             "sy": _scalar(1 / 256), "zy": zy}
    m = contrib_model("QLinearSoftmax", {"x": x}, inits, opset=opset, axis=axis)
    compare(m, tmp_path, {"x": x}, off_by_one=0.01)


@pytest.mark.parametrize("a_dt,quantized_out,per_column,trans", [(U8, True, False, 0), (U8, False, True, 1),
                                                                 (I8, True, True, 0)])
def test_qgemm(a_dt, quantized_out, per_column, trans, tmp_path):
    rng = np.random.default_rng(10)
    M, K, N = 5, 16, 6
    a = _q((K, M) if trans else (M, K), a_dt, 11)
    b = _q((N, K), I8, 12)
    inits = {"sa": _scalar(0.02), "za": _scalar(128, U8) if a_dt == U8 else _scalar(3, I8), "b": b,
             "sb": rng.uniform(0.01, 0.03, N).astype(np.float32) if per_column else _scalar(0.02),
             "zb": np.zeros(N, I8) if per_column else _scalar(0, I8), "c": rng.integers(-500, 500, N).astype(np.int32)}
    order = ["a", "sa", "za", "b", "sb", "zb", "c"]
    if quantized_out:
        inits.update(sy=_scalar(0.05), zy=_scalar(100, U8) if a_dt == U8 else _scalar(-5, I8))
        order += ["sy", "zy"]
    m = contrib_model("QGemm", {"a": a}, inits, order=order, transA=trans, transB=1, alpha=0.9)
    compare(m, tmp_path, {"a": a})


class _CNN:
    """A small CNN with every op quantize_static writes a QOperator form of: Conv + Relu, a
    residual Add, Sigmoid, Mul, LeakyRelu, Concat, AveragePool, GlobalAveragePool, Gemm,
    Softmax."""

    @staticmethod
    def export(path):
        import torch
        from torch import nn

        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.c1, self.c2 = nn.Conv2d(3, 8, 3, padding=1), nn.Conv2d(8, 8, 3, padding=1)
                self.c3 = nn.Conv2d(8, 8, 1)
                self.fc = nn.Linear(16, 10)

            def forward(self, x):
                a = torch.relu(self.c1(x))
                b = self.c2(a) + a
                c = torch.sigmoid(self.c3(b)) * b
                d = nn.functional.leaky_relu(c, 0.1)
                e = nn.functional.avg_pool2d(torch.cat([d, b], 1), 2)
                return torch.softmax(self.fc(nn.functional.adaptive_avg_pool2d(e, 1).flatten(1)), -1)

        torch.manual_seed(0)
        torch.onnx.export(Net().eval(), (torch.randn(1, 3, 16, 16),), str(path), input_names=["x"],
                          output_names=["y"], opset_version=13, dynamo=False)


@pytest.mark.parametrize("activations", ["uint8", "int8"])
def test_quantize_static_qoperator_cnn(activations, tmp_path):
    pytest.importorskip("torch")
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static
    from aotc.check.runner import run_check

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.it = iter([{"x": np.random.default_rng(i).standard_normal((1, 3, 16, 16)).astype(np.float32)}
                            for i in range(8)])

        def get_next(self):
            return next(self.it, None)

    plain, quant = tmp_path / "cnn.onnx", tmp_path / "cnn_q.onnx"
    _CNN.export(plain)
    act = QuantType.QUInt8 if activations == "uint8" else QuantType.QInt8
    quantize_static(str(plain), str(quant), Reader(), quant_format=QuantFormat.QOperator, activation_type=act,
                    weight_type=QuantType.QInt8)
    ops = {n.op_type for n in onnx.load(str(quant)).graph.node if n.domain == "com.microsoft"}
    assert {"QLinearAdd", "QLinearMul", "QLinearSigmoid", "QLinearLeakyRelu", "QLinearConcat", "QLinearAveragePool",
            "QLinearGlobalAveragePool", "QGemm", "QLinearSoftmax"} <= ops, ops
    x = np.random.default_rng(20).standard_normal((1, 3, 16, 16)).astype(np.float32)   # (not a calibration input)
    res = run_check(quant, inputs={"x": x}, output_dir=tmp_path / "out", rtol=1e-6, atol=1e-7)
    assert res.outputs and all(o.passed for o in res.outputs), \
        [(o.name, o.max_abs_err, o.max_rel_err) for o in res.outputs]
