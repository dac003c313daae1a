"""QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear, MatMulInteger, QLinearMatMul,
ConvInteger and QLinearConv against ONNX Runtime on random inputs (integers compared exactly):
per-tensor and per-axis parameters, values on exact .5 rounding boundaries and beyond the output
range; where ONNX Runtime does not take a case the spec allows, against numpy."""
import numpy as np
import pytest
from onnx import helper

from aotc.compiler import compile_model
from aotc.errors import UnsupportedError
from tests.helpers import assert_parity, graph_model, rand, run_onnx_node_case


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


# ----------------------------------------------------------------------------- ConvInteger, QLinearConv
def _run_both(model, tmp_path, feeds, target=None):
    """(aotc's outputs, the reference's outputs) of `model` on `feeds`: ONNX Runtime's, or the
    ONNX reference implementation's where this machine's ONNX Runtime gets uint8 x int8
    products wrong (aotc.check.runner.ort_saturates_u8s8), as `aotc check` does."""
    from aotc.api import load
    from aotc.check.runner import reference_run
    path = tmp_path / "m.onnx"
    path.write_bytes(model.SerializeToString())
    kw = {"target": target} if target else {}
    got = load(compile_model(path, output_dir=tmp_path / "out", **kw)).run(feeds)
    return got, reference_run(path, feeds)[0]


def _assert_exact(model, tmp_path, feeds, target=None):
    got, want = _run_both(model, tmp_path, feeds, target)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape, (g.dtype, g.shape, w.dtype, w.shape)
        np.testing.assert_array_equal(g, w)


def _conv_ref(x, w, xz, wz, group=1, strides=None, dilations=None, pads=None):
    """Integer convolution in int64 numpy: sum of (x - xz) * (w - wz), padding counting 0;
    wz a scalar or one per output channel."""
    r = x.ndim - 2
    strides, dilations = strides or [1] * r, dilations or [1] * r
    pads = pads or [0] * (2 * r)
    xs = np.pad(x.astype(np.int64) - np.int64(xz), [(0, 0), (0, 0)] + [(pads[i], pads[i + r]) for i in range(r)])
    ws = w.astype(np.int64) - np.asarray(wz, np.int64).reshape((-1,) + (1,) * (r + 1))
    N, M, Cg, K = x.shape[0], w.shape[0], w.shape[1], w.shape[2:]
    out = [(xs.shape[2 + i] - (K[i] - 1) * dilations[i] - 1) // strides[i] + 1 for i in range(r)]
    y = np.zeros((N, M, *out), np.int64)
    for m in range(M):
        c0 = (m // (M // group)) * Cg
        for taps in np.ndindex(*K):
            sl = tuple(slice(t * d, t * d + (o - 1) * s + 1, s) for t, d, o, s in zip(taps, dilations, out, strides))
            x_taps = xs[(slice(None), slice(c0, c0 + Cg)) + sl]
            y[:, m] += np.einsum("nc...,c->n...", x_taps, ws[(m, slice(None)) + taps])
    return y


# (x shape, w shape, attributes): 1-D, 2-D and 3-D; groups (depthwise among them), strides,
# dilations, asymmetric pads, auto_pad
_CONV_CASES = {
    "1d": ((2, 3, 11), (4, 3, 3), {"pads": [1, 2]}),
    "1d_stride_dil": ((1, 4, 17), (6, 2, 3), {"group": 2, "strides": [2], "dilations": [3], "pads": [2, 0]}),
    "2d": ((2, 3, 7, 6), (5, 3, 3, 3), {"pads": [1, 0, 1, 2], "strides": [2, 1]}),
    "2d_group": ((1, 6, 8, 9), (9, 2, 2, 3), {"group": 3, "dilations": [2, 1], "pads": [0, 1, 1, 0]}),
    "2d_depthwise": ((2, 5, 9, 8), (5, 1, 3, 3), {"group": 5, "pads": [1, 1, 1, 1]}),
    "2d_depthwise_x2_same_upper": ((1, 4, 9, 10), (8, 1, 3, 4), {"group": 4, "strides": [2, 3],
                                                                  "auto_pad": "SAME_UPPER"}),
    "2d_same_upper": ((1, 3, 6, 7), (4, 3, 2, 2), {"auto_pad": "SAME_UPPER", "strides": [1, 2]}),
    "3d": ((1, 2, 5, 6, 4), (3, 2, 3, 2, 2), {"strides": [1, 2, 1], "pads": [1, 0, 1, 1, 1, 0]}),
    "3d_group_same_upper": ((2, 4, 4, 5, 3), (4, 2, 2, 3, 3), {"group": 2, "auto_pad": "SAME_UPPER"}),
}


def _conv_case(name, x_dt, w_dt, seed):
    xs, ws, attrs = _CONV_CASES[name]
    return _ints(x_dt, xs, seed), _ints(w_dt, ws, seed + 1), attrs


@pytest.mark.parametrize("case", sorted(_CONV_CASES))
@pytest.mark.parametrize("x_dt, w_dt", [(np.uint8, np.uint8), (np.uint8, np.int8), (np.int8, np.int8),
                                        (np.int8, np.uint8)])
def test_conv_integer(case, x_dt, w_dt, tmp_path):
    """Against ONNX Runtime (which takes a scalar w zero point only)."""
    x, w, attrs = _conv_case(case, x_dt, w_dt, seed=30)
    inits = {"w": w, "xz": _ints(x_dt, (), seed=32), "wz": _ints(w_dt, (), seed=33)}
    m = graph_model([helper.make_node("ConvInteger", ["x", "w", "xz", "wz"], ["y"], **attrs)], {"x": x}, ["y"],
                    inits, opset=10)
    _assert_exact(m, tmp_path, {"x": x})


@pytest.mark.parametrize("inputs", [["x", "w"], ["x", "w", "xz"], ["x", "w", "", "wz"]])
def test_conv_integer_optional_zero_points(inputs, tmp_path):
    x, w, attrs = _conv_case("2d_group", np.uint8, np.int8, seed=34)
    inits = {k: v for k, v in {"w": w, "xz": np.uint8(129), "wz": np.int8(-5)}.items() if k in inputs}
    m = graph_model([helper.make_node("ConvInteger", inputs, ["y"], **attrs)], {"x": x}, ["y"], inits, opset=10)
    _assert_exact(m, tmp_path, {"x": x})


@pytest.mark.parametrize("case", ["1d_stride_dil", "2d_depthwise", "3d"])
def test_conv_integer_per_channel_w_zero_point_against_numpy(case, tmp_path):
    """One w zero point per output channel (the spec allows it, ONNX Runtime does not take it),
    weights as a graph input."""
    from aotc.api import load
    x, w, attrs = _conv_case(case, np.uint8, np.int8, seed=35)
    xz, wz = _ints(np.uint8, (), seed=37), _ints(np.int8, (w.shape[0],), seed=38)
    m = graph_model([helper.make_node("ConvInteger", ["x", "w", "xz", "wz"], ["y"], **attrs)], {"x": x, "w": w},
                    ["y"], {"xz": xz, "wz": wz}, opset=10)
    path = tmp_path / "m.onnx"
    path.write_bytes(m.SerializeToString())
    (y,) = load(compile_model(path, output_dir=tmp_path / "out")).run({"x": x, "w": w})
    want = _conv_ref(x, w, xz, wz, attrs.get("group", 1), attrs.get("strides"), attrs.get("dilations"),
                     attrs.get("pads"))
    assert y.dtype == np.int32
    np.testing.assert_array_equal(y, want.astype(np.int32))


def test_conv_integer_dilated_same_upper_against_numpy(tmp_path):
    """SAME_UPPER with dilations (ONNX Runtime refuses the pair): pads from the spec's rule."""
    from aotc.api import load
    x, w = _ints(np.int8, (1, 3, 9, 7), seed=39), _ints(np.int8, (4, 3, 3, 2), seed=40)
    attrs = {"auto_pad": "SAME_UPPER", "dilations": [2, 3], "strides": [2, 1]}
    m = graph_model([helper.make_node("ConvInteger", ["x", "w", "xz"], ["y"], **attrs)], {"x": x}, ["y"],
                    {"w": w, "xz": np.int8(-9)}, opset=10)
    path = tmp_path / "m.onnx"
    path.write_bytes(m.SerializeToString())
    (y,) = load(compile_model(path, output_dir=tmp_path / "out")).run({"x": x})
    total = [max(0, (-(-n // s) - 1) * s + (k - 1) * d + 1 - n)
             for n, k, s, d in zip(x.shape[2:], w.shape[2:], attrs["strides"], attrs["dilations"])]
    pads = [t // 2 for t in total] + [t - t // 2 for t in total]
    want = _conv_ref(x, w, -9, 0, 1, attrs["strides"], attrs["dilations"], pads)
    assert y.shape == (1, 4, 5, 7)
    np.testing.assert_array_equal(y, want.astype(np.int32))


def _qlconv_inits(x_dt, w_dt, M, per_channel, bias, seed):
    rng = np.random.default_rng(seed)
    inits = {"xs": np.float32(rng.uniform(0.005, 0.05)), "xz": _ints(x_dt, (), seed + 1),
             "ws": (rng.uniform(0.002, 0.03, M) if per_channel else np.array(rng.uniform(0.002, 0.03))
                    ).astype(np.float32),
             "wz": _ints(w_dt, (M,) if per_channel else (), seed + 2),
             "ys": np.float32(rng.uniform(0.3, 1.5)), "yz": _ints(x_dt, (), seed + 3)}
    if bias:
        inits["B"] = rng.integers(-5000, 5000, size=M).astype(np.int32)
    return inits


@pytest.mark.parametrize("case", sorted(_CONV_CASES))
@pytest.mark.parametrize("x_dt, w_dt", [(np.uint8, np.uint8), (np.uint8, np.int8), (np.int8, np.int8)])
@pytest.mark.parametrize("per_channel, bias", [(False, False), (True, True)])
def test_qlinear_conv(case, x_dt, w_dt, per_channel, bias, tmp_path):
    """Against ONNX Runtime, bit for bit: per-tensor, or per output channel w scales and zero
    points (different ones) with an int32 bias."""
    x, w, attrs = _conv_case(case, x_dt, w_dt, seed=40)
    inits = _qlconv_inits(x_dt, w_dt, w.shape[0], per_channel, bias, seed=42)
    inits["w"] = w
    names = ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"] + (["B"] if bias else [])
    m = graph_model([helper.make_node("QLinearConv", names, ["y"], **attrs)], {"x": x}, ["y"], inits, opset=10)
    _assert_exact(m, tmp_path, {"x": x})


@pytest.mark.parametrize("scales", [(0.5, 0.25, 8.0), (0.75, 0.5, 0.25)], ids=["m=1/64", "m=1.5"])
@pytest.mark.parametrize("dt", [np.uint8, np.int8])
def test_qlinear_conv_rounds_half_to_even_and_saturates(dt, scales, tmp_path):
    """A multiplier (x_scale * w_scale / y_scale) of exactly 1/64, so that every accumulator
    that is 32 more than a multiple of 64 lands on k + 0.5 (requantized in int32 after the
    rounding: decompose.requantize), or of 1.5, odd accumulators on k + 0.5 (above 1/2: the
    zero point and clamp in float32); the accumulators' range saturates both ends; weights as a
    graph input. Against ONNX Runtime and exact rounding in numpy."""
    from aotc.passes.decompose import _multipliers_below_half
    from aotc.ir.graph import Graph
    g = Graph("scales")
    names = [g.add_const(np.float32(v), k) for k, v in zip(("xs", "ws", "ys"), scales)]
    assert _multipliers_below_half(g, *names) == (scales[0] * scales[1] / scales[2] <= 0.5)
    x, w = _ints(dt, (1, 8, 16, 16), seed=50), _ints(dt, (4, 8, 1, 1), seed=51)
    inits = {"xs": np.float32(scales[0]), "xz": _ints(dt, (), seed=52), "ws": np.float32(scales[1]),
             "wz": _ints(dt, (), seed=53), "ys": np.float32(scales[2]), "yz": _ints(dt, (), seed=54)}
    m = graph_model([helper.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"], ["y"])],
                    {"x": x, "w": w}, ["y"], inits, opset=10)
    got, want = _run_both(m, tmp_path, {"x": x, "w": w})
    np.testing.assert_array_equal(got[0], want[0])
    acc = _conv_ref(x, w, inits["xz"], inits["wz"])
    m = scales[0] * scales[1] / scales[2]
    assert (np.abs(acc * m % 1 - 0.5) < 1e-9).sum() >= 5     # ties to round
    info = np.iinfo(dt)
    exact = np.clip(np.rint(acc * m) + int(inits["yz"]), info.min, info.max)
    np.testing.assert_array_equal(got[0], exact.astype(dt))
    assert (got[0] == info.min).any() and (got[0] == info.max).any()


def test_qlinear_conv_int8_output_from_uint8_input(tmp_path):
    """y's type follows y_zero_point, which the spec lets differ from x's (ONNX Runtime does
    not take that): against numpy, the multiplier in float32 as ONNX Runtime computes it."""
    from aotc.api import load
    x, w, attrs = _conv_case("2d_group", np.uint8, np.int8, seed=55)
    inits = _qlconv_inits(np.uint8, np.int8, w.shape[0], True, True, seed=57)
    inits["yz"] = np.int8(-20)
    inits["w"] = w
    m = graph_model([helper.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "B"], ["y"],
                                      **attrs)], {"x": x}, ["y"], inits, opset=10)
    path = tmp_path / "m.onnx"
    path.write_bytes(m.SerializeToString())
    (y,) = load(compile_model(path, output_dir=tmp_path / "out")).run({"x": x})
    acc = _conv_ref(x, w, inits["xz"], inits["wz"], attrs["group"], attrs.get("strides"), attrs.get("dilations"),
                    attrs.get("pads")) + inits["B"][None, :, None, None]
    mult = (inits["xs"] * inits["ws"] / inits["ys"]).astype(np.float32)
    want = np.clip(np.rint(acc.astype(np.float32) * mult[None, :, None, None]) + np.float32(-20), -128, 127)
    assert y.dtype == np.int8
    np.testing.assert_array_equal(y, want.astype(np.int8))


def test_dynamically_quantized_conv_graph(tmp_path):
    """The graph ONNX Runtime's dynamic quantization makes of a float Conv: DynamicQuantizeLinear,
    ConvInteger, Cast, Mul by the product of the scales (elementwise ops fused after the
    convolution), and a QOperator chain QuantizeLinear -> QLinearConv -> DequantizeLinear."""
    x = rand(1, 4, 9, 9, seed=60) * 3
    w = _ints(np.int8, (6, 4, 3, 3), seed=61)
    nodes = [helper.make_node("DynamicQuantizeLinear", ["x"], ["xq", "xs", "xz"]),
             helper.make_node("ConvInteger", ["xq", "w", "xz", "wz"], ["acc"], pads=[1, 1, 1, 1]),
             helper.make_node("Cast", ["acc"], ["accf"], to=1),
             helper.make_node("Mul", ["xs", "wsc"], ["s"]),
             helper.make_node("Mul", ["accf", "s"], ["y1"]),
             helper.make_node("QuantizeLinear", ["x", "qs", "qz"], ["q"]),
             helper.make_node("QLinearConv", ["q", "qs", "qz", "w", "wsc", "wz", "ys", "yz"], ["yq"], strides=[2, 2]),
             helper.make_node("DequantizeLinear", ["yq", "ys", "yz"], ["y2"])]
    inits = {"w": w, "wz": np.int8(0), "wsc": np.float32(0.01), "qs": np.float32(0.05), "qz": np.uint8(128),
             "ys": np.float32(0.04), "yz": np.uint8(120)}
    m = graph_model(nodes, {"x": x}, ["y1", "y2"], inits, opset=13)
    got, want = _run_both(m, tmp_path, {"x": x})
    np.testing.assert_allclose(got[0], want[0], rtol=1e-6, atol=0)
    np.testing.assert_array_equal(got[1], want[1])


@pytest.mark.parametrize("name", ["test_convinteger_without_padding", "test_convinteger_with_padding",
                                  "test_qlinearconv"])
def test_onnx_node_cases(name, tmp_path):
    """ONNX's own node test cases for ConvInteger and QLinearConv, every input fed at run time."""
    run_onnx_node_case(name, tmp_path, exact=True)


def _compile_error(model, tmp_path, exc, match):
    tmp_path.mkdir()
    path = tmp_path / "m.onnx"
    path.write_bytes(model.SerializeToString())
    with pytest.raises(exc, match=match):
        compile_model(path, output_dir=tmp_path / "out")


def test_conv_integer_errors(tmp_path):
    """A float input breaks the schema (the frontend's ModelError); bad zero-point shapes and
    groups are ShapeErrors; each names the node."""
    from aotc.errors import ModelError, ShapeError
    x, w = _ints(np.uint8, (1, 4, 5, 5), seed=70), _ints(np.uint8, (6, 4, 3, 3), seed=71)
    node = helper.make_node("ConvInteger", ["x", "w"], ["y"], name="ci")
    xf = rand(1, 4, 5, 5, seed=72)
    _compile_error(graph_model([node], {"x": xf}, ["y"], {"w": w}, opset=10), tmp_path / "a", ModelError,
                   "node 'ci' \\(ConvInteger\\): input 0 \\(x\\) is float")
    node = helper.make_node("ConvInteger", ["x", "w", "xz", "wz"], ["y"], name="ci")
    bad_wz = {"w": w, "xz": np.uint8(1), "wz": _ints(np.uint8, (5,), seed=73)}
    _compile_error(graph_model([node], {"x": x}, ["y"], bad_wz, opset=10), tmp_path / "b", ShapeError,
                   "ConvInteger node 'ci': w_zero_point of shape \\(5,\\)")
    bad_xz = {"w": w, "xz": _ints(np.uint8, (4,), seed=74), "wz": np.uint8(1)}
    _compile_error(graph_model([node], {"x": x}, ["y"], bad_xz, opset=10), tmp_path / "c", ShapeError,
                   "ConvInteger node 'ci': x_zero_point of shape \\(4,\\) must be a scalar")
    node = helper.make_node("ConvInteger", ["x", "w"], ["y"], name="ci", group=3)
    _compile_error(graph_model([node], {"x": x}, ["y"], {"w": w}, opset=10), tmp_path / "d", ShapeError,
                   "ConvInteger node 'ci'.*group=3")


def test_qlinear_conv_errors(tmp_path):
    """Bad shapes of scales, zero points and bias are ShapeErrors, bad types ModelErrors (the
    frontend's schema check); each names the node."""
    from aotc.errors import ModelError, ShapeError
    x, w = _ints(np.uint8, (1, 4, 5, 5), seed=75), _ints(np.int8, (6, 4, 3, 3), seed=76)
    names = ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"]
    good = _qlconv_inits(np.uint8, np.int8, 6, True, True, seed=77)
    good["w"] = w

    def model(**change):
        inits = {**good, **change}
        node = helper.make_node("QLinearConv", names + (["B"] if "B" in inits else []), ["y"], name="qc")
        return graph_model([node], {"x": x}, ["y"], inits, opset=10)

    _compile_error(model(wz=_ints(np.int8, (4,), seed=78)), tmp_path / "a", ShapeError,
                   "QLinearConv node 'qc': w_zero_point of shape \\(4,\\)")
    _compile_error(model(ws=np.ones(3, np.float32)), tmp_path / "b", ShapeError,
                   "QLinearConv node 'qc': w_scale of shape \\(3,\\)")
    _compile_error(model(ys=np.ones(6, np.float32)), tmp_path / "c", ShapeError,
                   "QLinearConv node 'qc': y_scale of shape \\(6,\\) must be a scalar")
    _compile_error(model(B=np.zeros(5, np.int32)), tmp_path / "d", ShapeError,
                   "QLinearConv node 'qc': bias of shape \\(5,\\)")
    _compile_error(model(B=np.zeros(6, np.int64)), tmp_path / "e", ModelError, "node 'qc' \\(QLinearConv\\)")
    _compile_error(model(xs=np.float64(0.1)), tmp_path / "f", ModelError, "node 'qc' \\(QLinearConv\\)")
    _compile_error(model(xz=np.int8(3)), tmp_path / "g", ModelError, "node 'qc' \\(QLinearConv\\)")


def test_quantized_conv_type_checks_of_our_own():
    """The ops' own type checks (behind the frontend's schema check, for graphs built in
    memory): UnsupportedError or ShapeError naming the node."""
    from aotc.errors import ShapeError
    from aotc.ir.graph import Node, Value
    from aotc.ops.registry import get

    def v(dt, shape):
        return Value("v", np.dtype(dt), tuple(shape))

    x, w, u8, i8 = v(np.uint8, (1, 4, 5, 5)), v(np.int8, (6, 4, 3, 3)), v(np.uint8, ()), v(np.int8, ())
    f32 = v(np.float32, ())
    ci = Node("ConvInteger", ["x", "w"], ["y"], name="ci")
    assert get("ConvInteger").infer(ci, [x, w]) == [(np.dtype(np.int32), (1, 6, 3, 3))]
    with pytest.raises(UnsupportedError, match="ConvInteger node 'ci' on float32"):
        get("ConvInteger").infer(ci, [v(np.float32, (1, 4, 5, 5)), w])
    with pytest.raises(ShapeError, match="ConvInteger node 'ci': x_zero_point is int8"):
        get("ConvInteger").infer(ci, [x, w, i8])
    qc = Node("QLinearConv", list("abcdefgh"), ["y"], name="qc")
    infer = get("QLinearConv").infer
    assert infer(qc, [x, f32, u8, w, f32, i8, f32, u8]) == [(np.dtype(np.uint8), (1, 6, 3, 3))]
    with pytest.raises(UnsupportedError, match="QLinearConv node 'qc': x_scale of float64"):
        infer(qc, [x, v(np.float64, ()), u8, w, f32, i8, f32, u8])
    with pytest.raises(UnsupportedError, match="QLinearConv node 'qc': bias of int64"):
        infer(qc, [x, f32, u8, w, f32, i8, f32, u8, v(np.int64, (6,))])
    with pytest.raises(UnsupportedError, match="QLinearConv node 'qc' on int32"):
        infer(qc, [x, f32, u8, w, f32, i8, f32, v(np.int32, ())])


@pytest.mark.parametrize("kind", ["opencl", "opencl-eager"])
def test_quantized_convs_on_opencl(kind, tmp_path):
    """ConvInteger and QLinearConv printed as OpenCL C (PoCL here); 'eager': every spatial loop
    given a work-group."""
    from tests.helpers import eager_gpu_target
    from tests.test_opencl import _opencl_missing
    if _opencl_missing():
        pytest.skip(_opencl_missing())
    x, w, attrs = _conv_case("2d_group", np.uint8, np.int8, seed=80)
    x3, w3, attrs3 = _conv_case("3d_group_same_upper", np.uint8, np.int8, seed=82)
    inits = _qlconv_inits(np.uint8, np.int8, w.shape[0], True, True, seed=84)
    inits.update(w=w, w3=w3, wz3=np.int8(-7), xz3=np.uint8(131))
    nodes = [helper.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "B"], ["y"], **attrs),
             helper.make_node("ConvInteger", ["x3", "w3", "xz3", "wz3"], ["y3"], **attrs3)]
    m = graph_model(nodes, {"x": x, "x3": x3}, ["y", "y3"], inits, opset=10)
    _assert_exact(m, tmp_path, {"x": x, "x3": x3}, target="opencl" if kind == "opencl" else eager_gpu_target(tmp_path))


@pytest.mark.parametrize("channels", [258, 259])
def test_conv_integer_at_the_float32_exactness_bound(channels, tmp_path):
    """1x1 ConvInteger over 258 channels (summed in float32, the im2col GEMM: every partial sum
    an integer below 2^24) and 259 (summed in int32): extreme values of one sign, where one
    more term would pass 2^24, and random ones; exact against int64 numpy."""
    import aotc.passes.decompose as decompose
    from aotc.api import load
    rng = np.random.default_rng(40)
    x = np.full((1, channels, 3, 3), 255, np.uint8)
    x[0, :, 1:] = rng.integers(0, 256, size=(channels, 2, 3))
    w = np.full((2, channels, 1, 1), -128, np.int8)
    w[1] = rng.integers(-128, 128, size=(channels, 1, 1))
    wz = np.array(127, np.int8)
    m = graph_model([helper.make_node("ConvInteger", ["x", "w", "xz", "wz"], ["y"])], {"x": x}, ["y"],
                    {"w": w, "xz": np.array(0, np.uint8), "wz": wz}, opset=10)
    path = tmp_path / "m.onnx"
    path.write_bytes(m.SerializeToString())
    got = load(compile_model(path, output_dir=tmp_path / "out")).run({"x": x})[0]
    want = np.einsum("nchw,mc->nmhw", x.astype(np.int64), (w[:, :, 0, 0].astype(np.int64) - 127))
    np.testing.assert_array_equal(got, want)
    assert abs(int(want[0, 0, 0, 0])) == channels * 255 * 255
    assert (channels <= decompose.EXACT_FLOAT_TERMS) == (channels == 258)


@pytest.mark.parametrize("a_dt, b_dt", [(np.uint8, np.int8), (np.int8, np.uint8)])
@pytest.mark.parametrize("zero_points", [False, True])
def test_reference_rewrite_of_mixed_sign_products_is_exact(a_dt, b_dt, zero_points, tmp_path):
    """`aotc check`'s reference for uint8 x int8 products (ONNX Runtime on x86 CPUs without VNNI
    saturates pairs of them to 16 bits): the rewritten model, run by ONNX Runtime, gives the
    exact integer products (numpy in int64), at the extremes where the saturation shows, and
    the source says whether the rewrite was used on this machine."""
    import onnxruntime as ort
    from aotc.check.runner import exact_integer_products, ort_saturates_u8s8, reference_run
    a = np.where(np.arange(2 * 16).reshape(2, 16) % 3 == 0, np.iinfo(a_dt).max, np.iinfo(a_dt).min).astype(a_dt)
    a[1] = _ints(a_dt, (16,), seed=90)
    b = np.where(np.arange(16 * 4).reshape(16, 4) % 2 == 0, np.iinfo(b_dt).min, np.iinfo(b_dt).max).astype(b_dt)
    b[:, 3] = _ints(b_dt, (16,), seed=91)
    names, inits = ["a", "b"], {"b": b}
    az, bz = (_ints(a_dt, (), seed=92), _ints(b_dt, (4,), seed=93)) if zero_points else (0, 0)
    if zero_points:
        names += ["az", "bz"]
        inits.update(az=az, bz=bz)
    m = graph_model([helper.make_node("MatMulInteger", names, ["y"], name="mm")], {"a": a}, ["y"], inits, opset=10)
    want = (a.astype(np.int64) - np.int64(az)) @ (b.astype(np.int64) - np.asarray(bz, np.int64))
    rewritten = graph_model([helper.make_node("MatMulInteger", names, ["y"], name="mm")], {"a": a}, ["y"], inits,
                            opset=10)
    assert exact_integer_products(rewritten) == ["mm"]
    (y,) = ort.InferenceSession(rewritten.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"a": a})
    np.testing.assert_array_equal(y, want.astype(np.int32))
    path = tmp_path / "m.onnx"
    path.write_bytes(m.SerializeToString())
    (ref,), source = reference_run(path, {"a": a})
    np.testing.assert_array_equal(ref, want.astype(np.int32))
    assert ("rewritten" in source) == ort_saturates_u8s8()


def test_same_sign_products_are_not_rewritten():
    from aotc.check.runner import exact_integer_products
    m = graph_model([helper.make_node("MatMulInteger", ["a", "b"], ["y"])], {"a": _ints(np.uint8, (2, 3), 1)}, ["y"],
                    {"b": _ints(np.uint8, (3, 2), 2)}, opset=10)
    before = m.SerializeToString()
    assert exact_integer_products(m) == [] and m.SerializeToString() == before


@pytest.mark.parametrize("dt", [np.uint8, np.int8])
def test_quantize_specials_as_onnx_runtime(dt, tmp_path):
    """NaN to the type's least value, infinities and values far out of range saturated, beside
    ONNX Runtime (whose vector max / min give NaN the least value too)."""
    x = np.concatenate([rand(40, seed=70) * 50, np.float32([np.nan, np.inf, -np.inf, 1e30, -1e30, 0.0, -0.0])])
    m = graph_model([helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"])], {"x": x}, ["y"],
                    {"s": np.float32(0.37), "z": _ints(dt, (), seed=71)}, opset=13)
    got, want = _run_both(m, tmp_path, {"x": x})
    np.testing.assert_array_equal(got[0], want[0])
    assert got[0][40] == np.iinfo(dt).min
