"""QDQ models (passes/qdq.py): DequantizeLinear -> Conv / MatMul / Gemm -> QuantizeLinear islands
compile as the integer operators they stand for on c-avx512 (`[gemm] int8_tile`), and then
agree with ONNX Runtime, which fuses the same islands, exactly. Islands the pass must leave as
written (a bias whose scale is not x_scale * w_scale, a float result read by another node, a
run-time weight) stay float and still agree with ONNX Runtime to within a step of the output's
scale; `,qdq_float` and the targets without the fast 8-bit GEMM keep every island float.
Inputs are fresh random floats, quantized by the model's own first QuantizeLinear."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper

from aotc.api import compile as aotc_compile
from aotc.compiler import compile_program
from aotc.targets import cpu_flags, load_target
from tests.helpers import graph_model

N = helper.make_node
_AVX512 = not (set(load_target("c-avx512").requires) - cpu_flags())
needs_avx512 = pytest.mark.skipif(not _AVX512, reason="this CPU has no AVX-512 (c-avx512 holds the pass)")


def _f32(x):
    return np.asarray(x, np.float32)


class _Builder:
    """A QDQ graph as quantize_static writes one: float input, QuantizeLinear, then islands."""

    def __init__(self, seed: int, signed: bool = False):
        self.rng = np.random.default_rng(seed)
        self.signed = signed          # int8 activations (uint8 by default)
        self.nodes, self.inits, self.n = [], {}, 0

    def name(self, hint):
        self.n += 1
        return f"{hint}{self.n}"

    def init(self, hint, arr):
        k = self.name(hint)
        self.inits[k] = np.asarray(arr)
        return k

    def quantize(self, x, scale, zp):
        """x (float) quantized to uint8 (int8 when signed), and that dequantized: (q, dq) names"""
        s, z = self.init("s", _f32(scale)), self.init("z", np.int8(zp - 128) if self.signed else np.uint8(zp))
        q, dq = self.name("q"), self.name("dq")
        self.nodes += [N("QuantizeLinear", [x, s, z], [q]), N("DequantizeLinear", [q, s, z], [dq])]
        return q, dq, float(scale)

    def weight(self, w_shape, axis, per_channel=True):
        """a constant int8 weight, dequantized per channel along axis (zero points 0): (dq, scales)"""
        w = self.rng.integers(-127, 128, size=w_shape).astype(np.int8)
        n = w_shape[axis]
        scales = _f32(self.rng.uniform(0.002, 0.01, n)) if per_channel else _f32(0.005)
        zps = np.zeros(n if per_channel else (), np.int8)
        out = self.name("wdq")
        self.nodes.append(N("DequantizeLinear", [self.init("w", w), self.init("ws", scales), self.init("wz", zps)],
                            [out], axis=axis))
        return out, scales

    def bias(self, n, scale):
        b = self.rng.integers(-3000, 3000, n).astype(np.int32)
        out = self.name("bdq")
        self.nodes.append(N("DequantizeLinear", [self.init("b", b), self.init("bs", _f32(scale)),
                                                 self.init("bz", np.zeros(np.shape(scale), np.int32))], [out],
                            axis=0))
        return out

    def island(self, op, ins, y_scale, y_zp, **attrs):
        """op's float output quantized by its own QuantizeLinear: (float out, q, dq)"""
        f = self.name(op.lower())
        self.nodes.append(N(op, ins, [f], **attrs))
        q, dq, _ = self.quantize(f, y_scale, y_zp)
        return f, q, dq


def _conv_model(seed, k=3, c=48, bias_scale=1.0, extra_reader=False, signed=False):
    """x [1, c, 11, 13] -> Q -> DQ -> Conv k x k (c -> 20, pad, per-channel weights, bias) -> Q -> DQ"""
    b = _Builder(seed, signed)
    _, xdq, sx = b.quantize("x", 0.03, 121)
    wdq, ws = b.weight((20, c, k, k), 0)
    bdq = b.bias(20, _f32(sx * ws * bias_scale))
    f, _, ydq = b.island("Conv", [xdq, wdq, bdq], 0.4, 97, pads=[k // 2] * 4)
    outs = [ydq]
    if extra_reader:
        b.nodes.append(N("Relu", [f], ["r"]))
        outs.append("r")
    x = _f32(b.rng.standard_normal((1, c, 11, 13)) * 2)
    return graph_model(b.nodes, {"x": x}, outs, b.inits, opset=13), {"x": x}


def _matmul_model(seed):
    """a [2, 5, 70] -> Q -> DQ -> MatMul by [70, 33] per column -> Q -> DQ"""
    b = _Builder(seed)
    _, adq, _ = b.quantize("a", 0.02, 130)
    wdq, _ = b.weight((70, 33), 1)
    _, _, ydq = b.island("MatMul", [adq, wdq], 0.3, 90)
    a = _f32(b.rng.standard_normal((2, 5, 70)))
    return graph_model(b.nodes, {"a": a}, [ydq], b.inits, opset=13), {"a": a}


def _gemm_model(seed, trans_b=1):
    """a [3, 300] -> Q -> DQ -> Gemm by [40, 300]ᵀ (per row of w) plus a bias -> Q -> DQ"""
    b = _Builder(seed)
    _, adq, sa = b.quantize("a", 0.02, 128)
    wdq, ws = b.weight((40, 300) if trans_b else (300, 40), 0 if trans_b else 1)
    bdq = b.bias(40, _f32(sa * ws))
    _, _, ydq = b.island("Gemm", [adq, wdq, bdq], 0.25, 110, transB=trans_b)
    a = _f32(b.rng.standard_normal((3, 300)))
    return graph_model(b.nodes, {"a": a}, [ydq], b.inits, opset=13), {"a": a}


MODELS = {
    "conv3x3": lambda: _conv_model(1),                       # 432 products an output
    "conv1x1": lambda: _conv_model(2, k=1, c=40),            # 40: summed in float32 without the target's 8-bit GEMM
    "matmul": lambda: _matmul_model(3),
    "gemm": lambda: _gemm_model(4),
    "gemm_plain_b": lambda: _gemm_model(5, trans_b=0),
}


def _ops(path, target):
    return {n.op_type for n in compile_program(path, target=target).graph.nodes}


def _run(model, feeds, tmp_path, target):
    import onnxruntime as ort
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    got = aotc_compile(path, target=target, output_dir=tmp_path / "out", threads=1).run(feeds)
    want = ort.InferenceSession(model.SerializeToString()).run(None, feeds)
    return path, got, want


@needs_avx512
@pytest.mark.parametrize("kind", list(MODELS))
def test_qdq_islands_are_integer_and_equal_onnx_runtime(kind, tmp_path):
    model, feeds = MODELS[kind]()
    path, got, want = _run(model, feeds, tmp_path, "c-avx512")
    ops = _ops(path, "c-avx512")
    assert not ops & {"Conv", "MatMul", "Gemm", "aotc.WinogradConv"}, ops
    assert ops & {"aotc.ConvInteger", "MatMulInteger", "QLinearMatMul"}, ops
    for a, b in zip(got, want):
        assert np.array_equal(a, b), np.abs(a - b).max()


def _within_a_step(got, want, step):
    """float islands round differently from ONNX Runtime's fused integer ones at rounding
    boundaries: at most one output step apart, and few values at all"""
    diff = np.abs(got - want)
    assert diff.max() <= step * 1.001, diff.max()
    assert np.count_nonzero(diff) <= max(2, diff.size // 50), np.count_nonzero(diff)


@needs_avx512
@pytest.mark.parametrize("case", ["bias_scale", "extra_reader", "int8_activations"])
def test_islands_the_pass_must_leave_stay_float(case, tmp_path):
    """A bias whose scale is not x_scale * w_scale (the integer bias would be read at the wrong
    scale), a float result another node reads (it must stay float for it), int8 activations
    (the 8-bit GEMM multiplies uint8 by int8: int8 x int8 would run as loops)."""
    model, feeds = {"bias_scale": lambda: _conv_model(6, bias_scale=1.5),
                    "extra_reader": lambda: _conv_model(7, extra_reader=True),
                    "int8_activations": lambda: _conv_model(12, signed=True)}[case]()
    path, got, want = _run(model, feeds, tmp_path, "c-avx512")
    assert "Conv" in _ops(path, "c-avx512") or "aotc.WinogradConv" in _ops(path, "c-avx512")
    _within_a_step(got[0], want[0], 0.4)
    if case == "extra_reader":
        np.testing.assert_allclose(got[1], want[1], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("target", ["c-avx512,qdq_float", "c"])
def test_float_reading_where_asked_or_where_it_is_faster(target, tmp_path):
    if target.startswith("c-avx512") and not _AVX512:
        pytest.skip("this CPU has no AVX-512")
    model, feeds = _conv_model(8)
    path, got, want = _run(model, feeds, tmp_path, target)
    ops = _ops(path, target)
    assert "QLinearConv" not in ops and "aotc.ConvInteger" not in ops and ops & {"Conv", "aotc.WinogradConv"}
    _within_a_step(got[0], want[0], 0.4)


def test_one_scale_beside_a_one_element_zero_point(tmp_path):
    """quantize_static writes an int32 bias's scale as [1] and its zero point as a scalar: one
    value each, read as per-tensor parameters (the spec asks for equal shapes; ONNX Runtime takes it)"""
    import onnxruntime as ort
    b = np.random.default_rng(9).integers(-1000, 1000, 7).astype(np.int32)
    model = graph_model([N("DequantizeLinear", ["b", "s", "z"], ["y"])], {"b": b}, ["y"],
                        {"s": _f32([0.01]), "z": np.array(0, np.int32)}, opset=13)
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    got = aotc_compile(path, target="c", output_dir=tmp_path / "out").run({"b": b})[0]
    want = ort.InferenceSession(model.SerializeToString()).run(None, {"b": b})[0]
    assert np.array_equal(got, want)


def test_check_notes_mismatches_of_one_quantization_step():
    """`aotc check` keeps a mismatch a mismatch, but says when every one is at most one step of
    the output's DequantizeLinear scale (a quantized value next to a rounding boundary), and
    which --atol accepts it; two steps get no such note."""
    from aotc.check.parity import compare, quantization_steps
    model, _ = _conv_model(10)
    steps = quantization_steps(model)
    (out, step), = steps.items()
    assert out == model.graph.output[0].name and step == pytest.approx(0.4)
    ref = _f32(np.random.default_rng(11).integers(0, 255, 50) * step)
    one = ref.copy()
    one[[3, 17]] += _f32(step)
    report = compare(out, one, ref, 1e-4, 1e-5, (), step)
    assert not report.passed and "one step of the output's quantization scale" in report.note
    assert compare(out, one, ref, 1e-4, step * 1.001, (), step).passed
    two = ref.copy()
    two[5] += _f32(2 * step)
    assert compare(out, two, ref, 1e-4, 1e-5, (), step).note == ""


@needs_avx512
@pytest.mark.parametrize("x_type", [np.uint8, np.int8])
def test_small_quantized_convolutions_take_the_8bit_gemm_for_its_operand_kinds(x_type, tmp_path):
    """On c-avx512 a QLinearConv of 64 products an output (float32-exact) is an integer GEMM
    where x is uint8 (w int8: the 8-bit GEMM's kinds), else the float32 GEMM of the cast
    operands, not the loops an int8 x int8 Gemm would run as; both equal ONNX Runtime."""
    import onnxruntime as ort
    rng = np.random.default_rng(13)
    info = np.iinfo(x_type)
    x = rng.integers(info.min, info.max, (1, 64, 9, 10), endpoint=True).astype(x_type)
    inits = {"xs": _f32(0.02), "xz": np.array(3, x_type), "w": rng.integers(-127, 128, (24, 64, 1, 1)).astype(np.int8),
             "ws": _f32(rng.uniform(0.001, 0.01, 24)), "wz": np.zeros(24, np.int8), "ys": _f32(0.3),
             "yz": np.array(7, x_type)}
    model = graph_model([N("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"], ["y"])], {"x": x}, ["y"],
                        inits, opset=13)
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    ops = _ops(path, "c-avx512")
    assert ("aotc.ConvInteger" in ops) == (x_type == np.uint8) and ("Conv" in ops) == (x_type == np.int8), ops
    got = aotc_compile(path, target="c-avx512", output_dir=tmp_path / "out", threads=1).run({"x": x})[0]
    assert np.array_equal(got, ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})[0])


@needs_avx512
@pytest.mark.parametrize("read", ["input", "result"])
def test_values_a_branch_reads_stay(read, tmp_path):
    """The island's input DequantizeLinear (input), or the Conv's float result (result), is
    also read inside an If's branches (a name from the enclosing scope, not a node input). The
    pass keeps what they read: it rewrites the Conv but keeps the DequantizeLinear, or leaves
    the island float."""
    model, feeds = _conv_model(14)
    g = model.graph
    if read == "input":
        xdq = next(n for n in g.node if n.op_type == "DequantizeLinear" and n.input[0].startswith("q")).output[0]
    else:
        xdq = next(n for n in g.node if n.op_type == "Conv").output[0]

    def branch(name, scale):
        s = helper.make_tensor(f"{name}_s", onnx.TensorProto.FLOAT, [], [scale])
        return helper.make_graph([N("Mul", [xdq, f"{name}_s"], [f"{name}_out"])], name, [],
                                 [helper.make_tensor_value_info(f"{name}_out", onnx.TensorProto.FLOAT, None)], [s])
    g.initializer.append(onnx.numpy_helper.from_array(np.array(True), "cond"))
    g.node.append(N("If", ["cond"], ["r"], then_branch=branch("then", 2.0), else_branch=branch("else", 3.0)))
    g.output.append(helper.make_empty_tensor_value_info("r"))
    path, got, want = _run(model, feeds, tmp_path, "c-avx512")
    assert ("aotc.ConvInteger" in _ops(path, "c-avx512")) == (read == "input")
    if read == "input":
        for a, b in zip(got, want):
            assert np.array_equal(a, b), np.abs(a - b).max()
    else:
        _within_a_step(got[0], want[0], 0.4)
        np.testing.assert_allclose(got[1], want[1], rtol=1e-4, atol=1e-4)
