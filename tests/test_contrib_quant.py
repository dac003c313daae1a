"""ONNX Runtime's quantized contrib operators (aotc/frontend/contrib_quant.py) against its CPU
kernels, one node at a time on random 8-bit inputs, the QOperator model its quantize_static
writes for a small CNN, and the DynamicQuantizeLSTM its quantize_dynamic writes for a torch LSTM.

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

from tests.test_contrib_ops import check, contrib_model, run_aotc

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


# ------------------------------------------------------------------------------- DynamicQuantizeLSTM
# (its reference is ONNX Runtime on one thread: aotc/check/runner.py says why)
def _qlstm_case(direction, w_dt, per_column, extras, y_out, seed):
    """One DynamicQuantizeLSTM node: X [S=6, B=3, I=10], hidden 8, random 8-bit weights with
    their scales and zero points (per direction, or per column with one value throughout, as ONNX
    Runtime requires), and the optional inputs named in `extras`."""
    rng = np.random.default_rng(seed)
    S, B, I, H = 6, 3, 10, 8
    D = 2 if direction == "bidirectional" else 1
    inputs = {"x": rng.standard_normal((S, B, I)).astype(np.float32)}
    inits = {"w": _q((D, I, 4 * H), w_dt, seed + 1), "r": _q((D, H, 4 * H), w_dt, seed + 2)}
    shape = (D, 4 * H) if per_column else (D,)
    zero = 0 if w_dt == I8 else 128
    for k in ("w", "r"):
        inits[f"{k}_scale"] = rng.uniform(0.002, 0.01, shape).astype(np.float32)
        inits[f"{k}_zp"] = np.full(shape, zero, w_dt) if per_column or w_dt == I8 else \
            rng.integers(120, 136, shape).astype(w_dt)
    if "bias" in extras:
        inits["b"] = (rng.standard_normal((D, 8 * H)) * 0.3).astype(np.float32)
    if "lens" in extras:
        inputs["lens"] = np.array([5, 2, 4], np.int32)
        inputs["x"][-1] *= 3        # (X's last step, past every length, is outside the range ORT quantizes)
    if "initial" in extras:
        inputs["h0"] = rng.standard_normal((D, B, H)).astype(np.float32) * 0.5
        inputs["c0"] = rng.standard_normal((D, B, H)).astype(np.float32) * 0.5
    if "peepholes" in extras:
        inits["p"] = (rng.standard_normal((D, 3 * H)) * 0.3).astype(np.float32)
    names = ["x", "w", "r", "b", "lens", "h0", "c0", "p", "w_scale", "w_zp", "r_scale", "r_zp"]
    order = [n if n in inputs or n in inits else "" for n in names]
    attrs = {"hidden_size": H, "direction": direction}
    if "clip" in extras:
        attrs["clip"] = 0.8
    if "input_forget" in extras:
        attrs["input_forget"] = 1
    outs = ["y" if y_out else "", "y_h", "y_c"]
    return contrib_model("DynamicQuantizeLSTM", inputs, inits, order=order, outs=outs, **attrs), inputs


@pytest.mark.parametrize("direction,w_dt,per_column,extras,y_out", [
    ("forward", I8, False, ("bias",), True),
    ("reverse", U8, True, ("bias", "lens", "peepholes", "clip"), True),
    ("bidirectional", U8, False, ("lens", "initial", "input_forget"), False),
    ("bidirectional", I8, True, ("bias", "lens", "initial", "peepholes"), True),
])
def test_dynamic_quantize_lstm(direction, w_dt, per_column, extras, y_out, tmp_path):
    """X and each step's H quantized to uint8 as ONNX Runtime does (the range of the steps up to
    the longest sequence; at a step, the rows whose previous step ran when the node has Y, every
    row when it has not), the integer products exact, their float scaling and the biases in
    its order: its values to a few float32 ulps."""
    m, feeds = _qlstm_case(direction, w_dt, per_column, extras, y_out, seed=len(extras) + 10 * per_column)
    check(m, tmp_path, feeds, rtol=1e-5, atol=1e-6)


def test_dynamic_quantize_lstm_refuses_zero_points_ort_refuses(tmp_path):
    """Per-column int8 weight zero points other than 0: ONNX Runtime refuses the model, and so
    does aotc, by name."""
    from aotc.errors import ModelError
    m, feeds = _qlstm_case("forward", I8, True, ("bias",), True, seed=3)
    init = next(t for t in m.graph.initializer if t.name == "w_zp")
    init.CopyFrom(onnx.numpy_helper.from_array(np.full((1, 32), 2, np.int8), "w_zp"))
    with pytest.raises(ModelError, match="W_zero_point must be zero"):
        run_aotc(m, tmp_path, feeds)


def test_quantize_dynamic_torch_lstm(tmp_path):
    """quantize_dynamic on a torch.onnx export of a two-layer bidirectional LSTM writes
    DynamicQuantizeLSTM nodes, which compile and agree with ONNX Runtime on a fresh input."""
    torch = pytest.importorskip("torch")
    import warnings

    from onnxruntime.quantization import QuantType, quantize_dynamic
    from aotc.check.runner import run_check

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lstm = torch.nn.LSTM(12, 16, num_layers=2, bidirectional=True)

        def forward(self, x):
            y, (h, c) = self.lstm(x)
            return y, h, c

    plain, quant = tmp_path / "lstm.onnx", tmp_path / "lstm_q.onnx"
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(Net().eval(), (torch.randn(7, 3, 12),), str(plain), input_names=["x"],
                          output_names=["y", "h", "c"], opset_version=14, dynamo=False)
        quantize_dynamic(str(plain), str(quant), weight_type=QuantType.QInt8,
                         extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT})
    assert [n.op_type for n in onnx.load(str(quant)).graph.node].count("DynamicQuantizeLSTM") == 2
    x = np.random.default_rng(21).standard_normal((7, 3, 12)).astype(np.float32)
    res = run_check(quant, inputs={"x": x}, output_dir=tmp_path / "out", rtol=1e-5, atol=1e-6)
    assert res.outputs and all(o.passed for o in res.outputs), \
        [(o.name, o.max_abs_err, o.max_rel_err) for o in res.outputs]
