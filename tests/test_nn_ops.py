"""CNN operators (aotc/ops/conv.py, conv_direct.py, pool.py, pad.py, resize.py, normalization.py) against
ONNX Runtime on random inputs."""
import numpy as np
import pytest
from onnx import helper

from tests.helpers import assert_parity, eager_threads_target, graph_model, rand, single_op_model


def _conv_case(tmp_path, x_shape, w_shape, bias=True, op="Conv", **attrs):
    x = rand(*x_shape, seed=1)
    inits = {"w": rand(*w_shape, seed=2) * 0.5}
    if bias:
        inits["b"] = rand(w_shape[0] if op == "Conv" else w_shape[1] * attrs.get("group", 1), seed=3)
    return assert_parity(single_op_model(op, {"x": x}, inits=inits, **attrs), tmp_path, {"x": x})


# --------------------------------------------------------------------------- Conv
@pytest.mark.parametrize("attrs", [
    dict(),
    dict(pads=[1, 1, 1, 1]),
    dict(strides=[2, 2], pads=[1, 1, 1, 1]),
    dict(strides=[2, 1], pads=[0, 2, 1, 0], dilations=[2, 1]),
    dict(dilations=[2, 2], pads=[2, 2, 2, 2]),
    dict(auto_pad="SAME_UPPER", strides=[2, 2]),
    dict(auto_pad="SAME_LOWER", strides=[2, 2]),
    dict(auto_pad="VALID", strides=[3, 2]),
], ids=lambda a: "-".join(f"{k}{v}" for k, v in a.items()) or "plain")
def test_conv2d_geometry(attrs, tmp_path):
    _conv_case(tmp_path, (1, 4, 9, 10), (6, 4, 3, 3), **attrs)


@pytest.mark.parametrize("case", [
    ("pointwise", (2, 8, 5, 6), (12, 8, 1, 1), {}),
    ("pointwise_grouped", (1, 8, 5, 6), (12, 4, 1, 1), dict(group=2)),
    ("pointwise_stride2", (1, 8, 7, 7), (4, 8, 1, 1), dict(strides=[2, 2])),
    ("grouped", (2, 6, 7, 7), (9, 2, 3, 3), dict(group=3, pads=[1, 1, 1, 1])),
    ("depthwise", (2, 5, 8, 8), (5, 1, 3, 3), dict(group=5, pads=[1, 1, 1, 1])),
    ("depthwise_s2", (1, 4, 9, 9), (4, 1, 3, 3), dict(group=4, pads=[1, 1, 1, 1], strides=[2, 2])),
    ("depthwise_mult", (1, 3, 6, 7), (6, 1, 5, 5), dict(group=3, pads=[2, 2, 2, 2])),
    ("depthwise_dil", (1, 4, 9, 9), (4, 1, 3, 3), dict(group=4, pads=[2, 2, 2, 2], dilations=[2, 2])),
    # a row no position of which every tap reaches (kernel wider than the padded span), and
    # asymmetric pads with a stride: the taps' common range and the edges tap by tap
    ("depthwise_wide_kernel", (1, 2, 4, 3), (2, 1, 3, 5), dict(group=2, pads=[0, 2, 1, 1])),
    ("depthwise_1x7_s3", (1, 3, 5, 20), (3, 1, 1, 7), dict(group=3, pads=[0, 3, 0, 1], strides=[1, 3])),
    ("big_kernel_stride", (1, 3, 16, 16), (8, 3, 7, 7), dict(strides=[2, 2], pads=[3, 3, 3, 3])),
    ("one_in_channel", (1, 1, 12, 12), (6, 1, 5, 5), {}),
    ("no_bias", (1, 4, 6, 6), (5, 4, 3, 3), dict(pads=[1, 1, 1, 1], _nobias=True)),
], ids=lambda c: c[0])
def test_conv2d_variants(case, tmp_path):
    _, xs, ws, attrs = case
    attrs = dict(attrs)
    bias = not attrs.pop("_nobias", False)
    _conv_case(tmp_path, xs, ws, bias=bias, **attrs)


@pytest.mark.parametrize("case", [
    ((2, 6, 9, 40), (6, 1, 3, 3), dict(group=6, pads=[1, 1, 1, 1])),
    ((1, 4, 13, 17), (8, 1, 5, 5), dict(group=4, pads=[2, 1, 0, 3], strides=[2, 1])),
    ((1, 3, 12, 30), (3, 1, 3, 7), dict(group=3, pads=[2, 3, 2, 3], dilations=[2, 1], strides=[1, 2])),
], ids=["3x3", "5x5_asym_s2_mult2", "3x7_dil"])
def test_depthwise_one_pass_matches_the_row_by_row_nest(case, tmp_path, monkeypatch):
    """The depthwise fast path (rows every kernel row reaches summed in one pass,
    ops/conv_direct.py _depthwise_one_pass) against ONNX Runtime, and against the same model built with
    it off (DEPTHWISE_ONE_PASS_TAPS = 0: every row as the other direct convolutions). (Small
    planes at stride 1 take the padded plane instead: off here, tested below.)"""
    import re
    from aotc.api import compile as aotc_compile
    from aotc.ops import conv_direct
    monkeypatch.setattr(conv_direct, "PADDED_PLANE_MAX", 0)
    monkeypatch.setattr(conv_direct, "STRIDED_PLANE_MAX", 0)
    xs, ws, attrs = case
    x = rand(*xs, seed=5)
    m = single_op_model("Conv", {"x": x}, inits={"w": rand(*ws, seed=6), "b": rand(ws[0], seed=7)}, **attrs)
    (tmp_path / "fast").mkdir()
    assert_parity(m, tmp_path / "fast", {"x": x})
    fast = aotc_compile(tmp_path / "fast" / "model.onnx", output_dir=tmp_path / "fast" / "again", threads=1)
    monkeypatch.setattr(conv_direct, "DEPTHWISE_ONE_PASS_TAPS", 0)
    slow = aotc_compile(tmp_path / "fast" / "model.onnx", output_dir=tmp_path / "slow", threads=1)
    src_fast = (tmp_path / "fast" / "again" / "model.c").read_text()
    src_slow = (tmp_path / "slow" / "model.c").read_text()
    # the fast path sums all taps from the bias: one statement with KH*KW products
    products = ws[2] * ws[3]
    pattern = r"= \w+\[m\]" + r"( \+ w\d+ \* x\[[^\]]*\])" * products + ";"
    assert re.search(pattern, src_fast) and not re.search(pattern, src_slow)
    np.testing.assert_allclose(fast.run({"x": x})[0], slow.run({"x": x})[0], rtol=1e-5, atol=1e-5)


def _conv_at_parity(case, folder, seed: int):
    """A one-Conv model of `case` (input shape, weight shape, attributes; random input, weights
    and bias from `seed`) checked against ONNX Runtime in `folder`: (its input, its path)."""
    xs, ws, attrs = case
    x = rand(*xs, seed=seed)
    m = single_op_model("Conv", {"x": x}, inits={"w": rand(*ws, seed=seed + 1), "b": rand(ws[0], seed=seed + 2)},
                        **attrs)
    folder.mkdir()
    assert_parity(m, folder, {"x": x})
    return x, folder / "model.onnx"


@pytest.mark.parametrize("case", [
    ((2, 6, 14, 14), (6, 1, 5, 5), dict(group=6, pads=[2, 2, 2, 2])),
    ((1, 4, 7, 9), (8, 1, 3, 3), dict(group=4, pads=[1, 0, 2, 1])),
    ((1, 3, 12, 11), (3, 1, 3, 5), dict(group=3, pads=[2, 3, 2, 1], dilations=[2, 1])),
    ((1, 2, 6, 6), (2, 1, 7, 7), dict(group=2, pads=[3, 3, 3, 3])),
    ((1, 5, 9, 8), (5, 1, 3, 3), dict(group=5, pads=[0, 1, 0, 1])),
    # strided: phase planes
    ((1, 6, 28, 28), (6, 1, 5, 5), dict(group=6, pads=[2, 2, 2, 2], strides=[2, 2])),
    ((2, 4, 15, 13), (4, 1, 5, 5), dict(group=4, pads=[1, 2, 1, 3], strides=[2, 2])),
    ((1, 4, 13, 17), (8, 1, 5, 5), dict(group=4, pads=[2, 1, 0, 3], strides=[2, 1])),
    ((1, 3, 12, 30), (3, 1, 3, 7), dict(group=3, pads=[2, 3, 2, 3], dilations=[2, 1], strides=[1, 2])),
    ((1, 2, 23, 22), (2, 1, 4, 4), dict(group=2, strides=[3, 2], dilations=[1, 2])),
    ((1, 3, 11, 11), (3, 1, 5, 5), dict(group=3, pads=[0, 0, 1, 1], strides=[2, 2])),
], ids=["5x5_mobile", "asym_mult2", "dil_wide", "kernel_wider_than_plane", "pads_columns_only",
        "5x5_s2", "5x5_s2_odd_asym_batch2", "5x5_s2x1_asym_mult2", "3x7_dil_s1x2", "4x4_s3x2_dil_no_pads", "s2_pads_end_only"])
def test_depthwise_padded_plane_matches_the_other_paths(case, tmp_path, monkeypatch):
    """Small depthwise planes go through a zero-padded copy (split by phase when strided) and
    one flat stencil loop (ops/conv_direct.py _depthwise_padded): against ONNX Runtime at 1 and 2 threads (the planes
    are per-thread scratch), and against the same model built without it (the one-pass and
    row-by-row paths)."""
    from aotc.api import compile as aotc_compile
    from aotc.ops import conv_direct
    x, path = _conv_at_parity(case, tmp_path / "padded", seed=8)
    padded = aotc_compile(path, output_dir=tmp_path / "p2", target=eager_threads_target(tmp_path), threads=2)
    src = (tmp_path / "p2" / "model.c").read_text()
    assert "padded" in src and "wide" in src, "the padded plane was not taken"
    monkeypatch.setattr(conv_direct, "PADDED_PLANE_MAX", 0)
    monkeypatch.setattr(conv_direct, "STRIDED_PLANE_MAX", 0)
    other = aotc_compile(path, output_dir=tmp_path / "other", threads=1)
    assert "wide" not in (tmp_path / "other" / "model.c").read_text()
    np.testing.assert_allclose(padded.run({"x": x})[0], other.run({"x": x})[0], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("case", [
    ((1, 5, 14, 14), (5, 1, 5, 5), dict(group=5, pads=[2, 2, 2, 2])),
    ((2, 3, 17, 13), (6, 1, 5, 5), dict(group=3, pads=[1, 2, 3, 2])),
    ((1, 4, 14, 14), (4, 1, 7, 7), dict(group=4, pads=[3, 3, 3, 3])),
    ((1, 2, 28, 28), (2, 1, 5, 5), dict(group=2, pads=[2, 2, 2, 2])),
    ((1, 3, 16, 13), (3, 1, 5, 4), dict(group=3, pads=[4, 2, 4, 1], dilations=[2, 1])),
], ids=["5x5_14", "17_rows_two_groups_mult2_batch2", "7x7", "28_rows_pitch_32", "5x4_dil_asym"])
def test_depthwise_stencil_by_rows_matches_the_flat_one(case, tmp_path, monkeypatch):
    """At stride 1 with 16 taps or more, the padded plane's stencil goes by groups of output rows
    over whole lines (ops/conv_direct.py _stencil_rows; a group moved back to end at the last
    row where the rows do not divide evenly): against ONNX Runtime at 1 and 2 threads, and the
    same sums, bit for bit, as the flat stencil (ROW_MIN_TAPS out of reach)."""
    import re
    from aotc.api import compile as aotc_compile
    from aotc.ops import conv_direct
    x, path = _conv_at_parity(case, tmp_path / "rows", seed=11)
    two = aotc_compile(path, output_dir=tmp_path / "r2", target=eager_threads_target(tmp_path), threads=2)
    rows = aotc_compile(path, output_dir=tmp_path / "r1", threads=1)
    by_rows = r"for \(int64_t t = 0; t < (16|32); \+\+t\)"
    assert re.search(by_rows, (tmp_path / "r2" / "model.c").read_text())
    assert re.search(by_rows, (tmp_path / "r1" / "model.c").read_text())
    np.testing.assert_allclose(two.run({"x": x})[0], rows.run({"x": x})[0], rtol=1e-5, atol=1e-5)
    monkeypatch.setattr(conv_direct, "ROW_MIN_TAPS", 10 ** 9)
    flat = aotc_compile(path, output_dir=tmp_path / "flat", threads=1)
    assert not re.search(r"int64_t t = 0; t <", (tmp_path / "flat" / "model.c").read_text())
    np.testing.assert_array_equal(rows.run({"x": x})[0], flat.run({"x": x})[0])


def test_conv1d(tmp_path):
    _conv_case(tmp_path, (2, 4, 17), (6, 4, 3), pads=[1, 2], strides=[2], dilations=[2])


def test_conv1d_depthwise(tmp_path):
    _conv_case(tmp_path, (1, 4, 11), (4, 1, 3), group=4, pads=[1, 1])


def test_conv3d(tmp_path):
    _conv_case(tmp_path, (1, 2, 5, 6, 5), (3, 2, 3, 3, 3), pads=[1, 0, 1, 1, 1, 0], strides=[1, 2, 1])


def test_conv_double(tmp_path):
    """float64 takes the direct loop nest; ORT has no double Conv, so the ONNX reference is the oracle."""
    import onnx
    from onnx.reference import ReferenceEvaluator

    import aotc
    x = rand(1, 3, 6, 6, seed=1).astype(np.float64)
    w = rand(4, 3, 3, 3, seed=2).astype(np.float64)
    m = single_op_model("Conv", {"x": x}, inits={"w": w}, pads=[1, 1, 1, 1], strides=[2, 1])
    onnx.save(m, str(tmp_path / "m.onnx"))
    got = aotc.compile(tmp_path / "m.onnx", output_dir=tmp_path / "out").run({"x": x})[0]
    want = ReferenceEvaluator(m).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_conv_runtime_weights(tmp_path):
    """Weights that are a graph input, not an initializer."""
    x, w = rand(1, 3, 6, 6, seed=1), rand(4, 3, 3, 3, seed=2)
    assert_parity(single_op_model("Conv", {"x": x, "w": w}, strides=[2, 2]), tmp_path, {"x": x, "w": w})


def test_conv_bn_relu_residual_fused(tmp_path):
    """Conv -> BatchNorm (folded) -> Add(residual) -> Relu, and Conv -> Clip (Relu6)."""
    x = rand(1, 4, 8, 8, seed=1)
    rng = np.random.default_rng(0)
    inits = {"w": rand(4, 4, 3, 3, seed=2) * 0.3, "w2": rand(4, 4, 1, 1, seed=3) * 0.3,
             "g": (1 + 0.2 * rng.standard_normal(4)).astype(np.float32),
             "be": (0.1 * rng.standard_normal(4)).astype(np.float32),
             "mu": (0.2 * rng.standard_normal(4)).astype(np.float32),
             "var": rng.uniform(0.5, 1.5, 4).astype(np.float32),
             "lo": np.float32(0), "hi": np.float32(6)}
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c", "g", "be", "mu", "var"], ["bn"]),
             helper.make_node("Add", ["bn", "x"], ["s"]),
             helper.make_node("Relu", ["s"], ["y"]),
             helper.make_node("Conv", ["y", "w2"], ["c2"]),
             helper.make_node("Clip", ["c2", "lo", "hi"], ["y2"])]
    assert_parity(graph_model(nodes, {"x": x}, ["y", "y2"], inits), tmp_path, {"x": x})


# --------------------------------------------------------------------------- ConvTranspose
@pytest.mark.parametrize("case", [
    ("plain", (1, 3, 5, 5), (3, 4, 3, 3), {}),
    ("stride2_pad", (2, 4, 4, 5), (4, 3, 3, 3), dict(strides=[2, 2], pads=[1, 1, 1, 1])),
    ("output_padding", (1, 4, 4, 4), (4, 2, 3, 3), dict(strides=[2, 2], pads=[1, 1, 1, 1],
                                                       output_padding=[1, 1])),
    ("grouped_dilated", (1, 4, 5, 5), (4, 2, 3, 3), dict(group=2, dilations=[2, 1], strides=[1, 2])),
    ("k4s2", (1, 2, 4, 4), (2, 3, 4, 4), dict(strides=[2, 2], pads=[1, 1, 1, 1])),
    ("output_shape", (1, 2, 4, 4), (2, 3, 3, 3), dict(strides=[2, 2], output_shape=[8, 8])),
    ("1d", (1, 3, 7), (3, 2, 3), dict(strides=[2], pads=[1, 0])),
], ids=lambda c: c[0])
def test_conv_transpose(case, tmp_path):
    _, xs, ws, attrs = case
    _conv_case(tmp_path, xs, ws, op="ConvTranspose", **attrs)


# --------------------------------------------------------------------------- pooling
@pytest.mark.parametrize("attrs", [
    dict(kernel_shape=[2, 2], strides=[2, 2]),
    dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
    dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1),
    dict(kernel_shape=[3, 2], strides=[2, 2], pads=[1, 0, 1, 1], ceil_mode=1),
    dict(kernel_shape=[3, 3], dilations=[2, 2], pads=[1, 1, 1, 1]),
    dict(kernel_shape=[5, 5], strides=[1, 1], pads=[2, 2, 2, 2]),
    dict(kernel_shape=[3, 3], strides=[2, 2], auto_pad="SAME_UPPER"),
], ids=lambda a: "-".join(f"{k}{v}" for k, v in a.items()))
def test_maxpool(attrs, tmp_path):
    x = rand(2, 3, 9, 10, seed=4)
    assert_parity(single_op_model("MaxPool", {"x": x}, **attrs), tmp_path, {"x": x})


def test_maxpool_indices_and_1d(tmp_path):
    x = rand(2, 3, 7, 8, seed=5)
    x1 = rand(1, 2, 11, seed=6)
    nodes = [helper.make_node("MaxPool", ["x"], ["y", "i"], kernel_shape=[3, 3], strides=[2, 2],
                              pads=[1, 1, 1, 1]),
             helper.make_node("MaxPool", ["x1"], ["y1"], kernel_shape=[3], strides=[2], ceil_mode=1)]
    assert_parity(graph_model(nodes, {"x": x, "x1": x1}, ["y", "i", "y1"]), tmp_path, {"x": x, "x1": x1})


@pytest.mark.parametrize("xs,attrs", [
    ((2, 3, 30, 41), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
    ((1, 4, 20, 20), dict(kernel_shape=[5, 5], pads=[2, 2, 2, 2])),
    ((1, 2, 17, 23), dict(kernel_shape=[3, 4], strides=[1, 3], dilations=[2, 1], pads=[2, 0, 1, 3], ceil_mode=1)),
    ((1, 3, 40), dict(kernel_shape=[3], strides=[2], pads=[1, 1])),
    ((1, 2, 5, 6, 19), dict(kernel_shape=[2, 3, 3], strides=[1, 2, 1], pads=[1, 0, 1, 0, 1, 1])),
], ids=["resnet_stem", "yolo_sppf", "mixed_ceil", "1d", "3d"])
def test_maxpool_by_rows_matches_position_by_position(xs, attrs, tmp_path, monkeypatch):
    """MaxPool's interior columns a row at a time (ops/pool.py POOL_BY_ROWS) against ONNX
    Runtime, and bit for bit against the position-by-position nest on inputs with NaNs,
    infinities and ties, at 1 and 2 threads."""
    import re
    from aotc.api import compile as aotc_compile
    from aotc.ops import pool
    x = rand(*xs, seed=11)
    (tmp_path / "rows").mkdir()
    assert_parity(single_op_model("MaxPool", {"x": x}, **attrs), tmp_path / "rows", {"x": x})
    path = tmp_path / "rows" / "model.onnx"
    odd = x.copy().reshape(-1)
    rng = np.random.default_rng(12)
    for value in (np.nan, np.inf, -np.inf, 0.5):
        odd[rng.choice(odd.size, size=max(1, odd.size // 50), replace=False)] = value
    odd = odd.reshape(xs)
    rows = aotc_compile(path, output_dir=tmp_path / "r2", target=eager_threads_target(tmp_path), threads=2)
    # the interior rows start from the lowest value stored into the output row
    assert re.search(r"\w+\[[^\]]*\bp\] = \(-INFINITY\);", (tmp_path / "r2" / "model.c").read_text())
    monkeypatch.setattr(pool, "POOL_BY_ROWS", False)
    each = aotc_compile(path, output_dir=tmp_path / "each", threads=1)
    a, b = rows.run({"x": odd})[0], each.run({"x": odd})[0]
    np.testing.assert_array_equal(np.isnan(a), np.isnan(b))
    np.testing.assert_array_equal(np.nan_to_num(a), np.nan_to_num(b))


@pytest.mark.parametrize("attrs", [
    dict(kernel_shape=[2, 2], strides=[2, 2]),
    dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
    dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], count_include_pad=1),
    dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1),
    dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 0, 0], ceil_mode=1, count_include_pad=1),
    dict(kernel_shape=[2, 3], strides=[1, 2], auto_pad="SAME_LOWER"),
], ids=lambda a: "-".join(f"{k}{v}" for k, v in a.items()))
def test_averagepool(attrs, tmp_path):
    x = rand(1, 3, 9, 10, seed=7)
    assert_parity(single_op_model("AveragePool", {"x": x}, **attrs), tmp_path, {"x": x})


@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool"])
def test_global_pool(op, tmp_path):
    x = rand(2, 5, 7, 6, seed=8)
    x1 = rand(1, 3, 9, seed=9)
    nodes = [helper.make_node(op, ["x"], ["y"]), helper.make_node(op, ["x1"], ["y1"])]
    assert_parity(graph_model(nodes, {"x": x, "x1": x1}, ["y", "y1"]), tmp_path, {"x": x, "x1": x1})


# --------------------------------------------------------------------------- Pad
@pytest.mark.parametrize("mode,pads", [
    ("constant", [0, 0, 1, 2, 0, 0, 2, 1]),
    ("constant", [0, 1, -1, 2, 0, 0, 1, -2]),
    ("reflect", [0, 0, 2, 1, 0, 0, 1, 3]),
    ("edge", [0, 0, 3, 1, 0, 0, 1, 2]),
    ("wrap", [0, 0, 2, 1, 0, 0, 1, 3]),
])
def test_pad(mode, pads, tmp_path):
    x = rand(1, 2, 5, 6, seed=10)
    inits = {"pads": np.array(pads, np.int64)}
    if mode == "constant":
        inits["value"] = np.float32(1.5)
    opset = 19 if mode == "wrap" else 17
    assert_parity(single_op_model("Pad", {"x": x}, inits=inits, mode=mode, opset=opset), tmp_path, {"x": x})


def test_pad_of_a_scalar_is_the_scalar(tmp_path):
    """A rank-0 input with no pads (ONNX Runtime refuses it, data_rank > 0, and numpy's np.pad
    too): nothing to pad, so the output is the input's random value."""
    from aotc.api import compile as aotc_compile
    x = rand(seed=14)
    m = single_op_model("Pad", {"x": x}, inits={"pads": np.zeros(0, np.int64)})
    import onnx
    path = tmp_path / "model.onnx"
    onnx.save(m, path)
    got = aotc_compile(path, output_dir=tmp_path / "out", target="c").run({"x": x})[0]
    assert got.shape == () and got == x


def test_pad_axes_and_runtime_value(tmp_path):
    x, v = rand(2, 3, 4, seed=11), np.array(-2.0, np.float32)
    node = helper.make_node("Pad", ["x", "pads", "v", "axes"], ["y"], mode="constant")
    m = graph_model([node], {"x": x, "v": v}, ["y"],
                    {"pads": np.array([1, 2, 0, 1], np.int64), "axes": np.array([-1, 1], np.int64)}, opset=18)
    assert_parity(m, tmp_path, {"x": x, "v": v})


def test_pad_int64(tmp_path):
    x = np.arange(12, dtype=np.int64).reshape(3, 4)
    m = single_op_model("Pad", {"x": x}, inits={"pads": np.array([1, 1, 0, 2], np.int64)}, mode="edge")
    assert_parity(m, tmp_path, {"x": x})


# --------------------------------------------------------------------------- Resize
_CT = ["half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel"]
_NM = ["floor", "round_prefer_floor", "round_prefer_ceil", "ceil"]


@pytest.mark.parametrize("ct", _CT)
def test_resize_nearest_modes(ct, tmp_path):
    """Every nearest_mode under one coordinate transformation, up- and down-sampling, by
    integer ratios (index arithmetic) and others (float coordinates)."""
    x = rand(1, 2, 6, 7, seed=12)
    inits = {"up": np.array([1, 1, 2, 1.5], np.float32), "down": np.array([1, 1, 0.5, 0.45], np.float32)}
    nodes, outs = [], []
    for nm in _NM:
        for s in ("up", "down"):
            outs.append(f"{nm}_{s}")
            nodes.append(helper.make_node("Resize", ["x", "", s], [outs[-1]], mode="nearest",
                                          coordinate_transformation_mode=ct, nearest_mode=nm))
    assert_parity(graph_model(nodes, {"x": x}, outs, inits, opset=13), tmp_path, {"x": x})


@pytest.mark.parametrize("ct,nm,scales,repeated", [
    ("asymmetric", "floor", [1, 1, 2, 2], True),
    ("half_pixel", "round_prefer_floor", [1, 1, 1, 3], True),
    ("pytorch_half_pixel", "round_prefer_ceil", [1, 2, 3, 2], True),
    ("half_pixel", "ceil", [1, 1, 2, 2], False),            # (indices 0, 1, 1, 2, ...: not o // 2)
    ("align_corners", "floor", [1, 1, 2, 2], False),
])
def test_resize_nearest_repeats_the_source_elements(ct, nm, scales, repeated, tmp_path):
    """Nearest Resize whose last axis grows by a whole factor q with indices o // q (a feature
    pyramid's upsampling) stores each source element q times from one load, instead of
    gathering every output: ONNX Runtime's values exactly, and the form taken only where the
    indices are those."""
    from aotc.api import compile as aotc_compile
    x = rand(2, 3, 5, 7, seed=22)
    m = graph_model([helper.make_node("Resize", ["x", "", "s"], ["y"], mode="nearest",
                                      coordinate_transformation_mode=ct, nearest_mode=nm)],
                    {"x": x}, ["y"], {"s": np.array(scales, np.float32)}, opset=13)
    assert_parity(m, tmp_path, {"x": x}, rtol=0, atol=0)
    aotc_compile(tmp_path / "model.onnx", output_dir=tmp_path / "repeat")
    code = (tmp_path / "repeat" / "model.c").read_text()
    assert ("source element repeated" in code) == repeated


@pytest.mark.parametrize("ct", _CT)
def test_resize_linear(ct, tmp_path):
    x = rand(2, 3, 5, 6, seed=13)
    inits = {"up": np.array([1, 1, 2, 1.7], np.float32), "sizes": np.array([2, 3, 3, 11], np.int64)}
    nodes = [helper.make_node("Resize", ["x", "", "up"], ["y_up"], mode="linear",
                              coordinate_transformation_mode=ct),
             helper.make_node("Resize", ["x", "", "", "sizes"], ["y_sz"], mode="linear",
                              coordinate_transformation_mode=ct)]
    assert_parity(graph_model(nodes, {"x": x}, ["y_up", "y_sz"], inits, opset=13), tmp_path, {"x": x})


@pytest.mark.parametrize("ct", _CT)
@pytest.mark.parametrize("a, exclude", [(-0.75, 0), (-0.5, 1)])
def test_resize_cubic(ct, a, exclude, tmp_path):
    """Cubic convolution (coefficient a, exclude_outside), up- and down-sampling by scales and
    by sizes: four taps per axis, clamped at the edges or renormalized inside them."""
    x = rand(2, 3, 6, 7, seed=14)
    inits = {"up": np.array([1, 1, 2, 1.6], np.float32), "down": np.array([1, 1, 0.6, 0.5], np.float32),
             "sizes": np.array([2, 3, 9, 4], np.int64)}
    nodes = [helper.make_node("Resize", ["x", "", s], [f"y_{s}"], mode="cubic", coordinate_transformation_mode=ct,
                              cubic_coeff_a=a, exclude_outside=exclude) for s in ("up", "down")]
    nodes.append(helper.make_node("Resize", ["x", "", "", "sizes"], ["y_sizes"], mode="cubic",
                                  coordinate_transformation_mode=ct, cubic_coeff_a=a, exclude_outside=exclude))
    assert_parity(graph_model(nodes, {"x": x}, ["y_up", "y_down", "y_sizes"], inits, opset=13), tmp_path, {"x": x})


@pytest.mark.parametrize("case", [
    ((1, 4, 28, 28), [1, 1, 1.25, 1.25], "half_pixel", "plane"),
    ((2, 5, 14, 14), [1, 1, 2.5, 2.5], "pytorch_half_pixel", "plane"),
    ((1, 3, 6, 9), [1, 1, 2, 0.5], "align_corners", "plane"),
    ((2, 3, 5, 6), [1, 1, 1, 2.5], "align_corners", "row"),
    ((3, 7), [2, 0.6], "asymmetric", "plane"),
    ((2, 3, 8, 8), [1, 1, 0.5, 0.75], "half_pixel", "row"),
    ((2, 3, 4, 5, 6), [1, 1, 1.5, 1.3, 0.5], "pytorch_half_pixel", "row"),
    ((1, 2, 20, 60), [1, 1, 1.5, 1.25], "half_pixel", "plane"),
    ((2, 3, 4, 100), [1, 1, 1, 0.3], "asymmetric", "row"),
], ids=["2d_up", "2d_up_uneven", "rows_up_columns_down", "last_axis_only", "rank2", "2d_down", "3d", "long_rows",
        "shrunk_3x"])
def test_resize_linear_by_rows_matches_the_elementwise_form(case, tmp_path, monkeypatch):
    """Linear Resize axis after axis (ops/resize.py: by planes, the last axis first into a
    plane scratch, where only the last two axes change and the rows grow; else by rows, a row
    scratch per output row, the last axis from a tap table) against ONNX Runtime, and against
    the forms below it: the last axis' taps gathered by kernel loops rather than picked from
    windows by runtime/aotc_lerp.h (RESIZE_LERP_ROWS = False; bit-equal: the same arithmetic),
    by rows (RESIZE_BY_PLANES = False) and element-wise (RESIZE_BY_ROWS = False), built with 2
    threads (the scratch per thread). Every case's rows fit aotc_lerp.h's windows but the last,
    whose 16 outputs span 53 source elements; long_rows' windows run past its rows' ends."""
    from aotc.api import compile as aotc_compile
    from aotc.ops import resize
    shape, scales, ct, form = case
    x = rand(*shape, seed=21)
    m = graph_model([helper.make_node("Resize", ["x", "", "s"], ["y"], mode="linear",
                                      coordinate_transformation_mode=ct)],
                    {"x": x}, ["y"], {"s": np.array(scales, np.float32)}, opset=13)
    (tmp_path / "ort").mkdir()
    assert_parity(m, tmp_path / "ort", {"x": x})
    onnx_path = tmp_path / "ort" / "model.onnx"
    markers = {"plane": "plane[ia * ", "row": "row[j] = ", "lerp": "aotc_lerp_row("}

    def built(name):
        out = aotc_compile(onnx_path, output_dir=tmp_path / name, threads=2)
        code = (tmp_path / name / "model.c").read_text()
        return out.run({"x": x})[0], {k for k, v in markers.items() if v in code}

    y, forms = built("default")
    fits = case[0][-1] != 100
    assert forms == {form} | ({"lerp"} if fits else set())
    monkeypatch.setattr(resize, "RESIZE_LERP_ROWS", False)
    if fits:
        gathered, forms = built("gathered")
        assert forms == {form}
        np.testing.assert_array_equal(y, gathered)
    if form == "plane":
        monkeypatch.setattr(resize, "RESIZE_BY_PLANES", False)
        by_rows, forms = built("rows")
        assert forms == {"row"}
        np.testing.assert_allclose(y, by_rows, rtol=1e-5, atol=1e-6)
    monkeypatch.setattr(resize, "RESIZE_BY_ROWS", False)
    elementwise, forms = built("elementwise")
    assert forms == set()
    np.testing.assert_allclose(y, elementwise, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("target", ["c", "c-avx2"])
def test_resize_lerp_rows_plain_c(target, tmp_path, monkeypatch):
    """runtime/aotc_lerp.h's plain C (targets built without AVX-512) against the kernel loops
    that gather the taps (bit-equal) and ONNX Runtime, rows by planes and by rows."""
    from aotc.api import compile as aotc_compile
    from aotc.ops import resize
    x = rand(2, 3, 9, 40, seed=22)
    nodes = [helper.make_node("Resize", ["x", "", s], [f"y_{s}"], mode="linear",
                              coordinate_transformation_mode="half_pixel") for s in ("up", "wide")]
    m = graph_model(nodes, {"x": x}, ["y_up", "y_wide"],
                    {"up": np.array([1, 1, 2, 1.7], np.float32), "wide": np.array([1, 1, 1, 0.8], np.float32)},
                    opset=13)
    (tmp_path / "ort").mkdir()
    assert_parity(m, tmp_path / "ort", {"x": x}, target=target)
    onnx_path = tmp_path / "ort" / "model.onnx"

    def built(name):
        out = aotc_compile(onnx_path, output_dir=tmp_path / name, target=target)
        return out.run({"x": x}), (tmp_path / name / "model.c").read_text().count("aotc_lerp_row(")

    lerp, calls = built("lerp")
    assert calls == 2
    monkeypatch.setattr(resize, "RESIZE_LERP_ROWS", False)
    gathered, calls = built("gathered")
    assert calls == 0
    for a, b in zip(lerp, gathered):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
def test_resize_tf_crop_and_resize(mode, tmp_path):
    """A crop box (roi) per axis, partly outside the input (those outputs take
    extrapolation_value), by scales and by sizes; all axes and a subset of them (opset 18)."""
    x = rand(2, 3, 7, 8, seed=15)
    inits = {"roi": np.array([0, 0, 0.2, -0.1, 1, 1, 0.9, 1.2], np.float32), "sc": np.array([1, 1, 1.5, 0.8], np.float32),
             "roi2": np.array([0.1, 0.3, 0.7, 1.4], np.float32), "sizes": np.array([5, 6], np.int64)}
    nodes = [helper.make_node("Resize", ["x", "roi", "sc"], ["y_sc"], mode=mode,
                              coordinate_transformation_mode="tf_crop_and_resize", extrapolation_value=-2.5),
             helper.make_node("Resize", ["x", "roi2", "", "sizes"], ["y_sz"], mode=mode, axes=[2, 3],
                              coordinate_transformation_mode="tf_crop_and_resize")]
    assert_parity(graph_model(nodes, {"x": x}, ["y_sc", "y_sz"], inits, opset=18), tmp_path, {"x": x})


@pytest.mark.parametrize("policy", ["not_larger", "not_smaller"])
@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_resize_keep_aspect_ratio_policy(policy, mode, tmp_path):
    """sizes as a bound: one scale for all the axes, the smallest or largest ratio (opset 18)."""
    x = rand(1, 2, 6, 9, seed=16)
    inits = {"sizes": np.array([4, 8], np.int64), "sizes_all": np.array([1, 2, 13, 10], np.int64)}
    nodes = [helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], mode=mode, axes=[2, 3],
                              keep_aspect_ratio_policy=policy)]
    outs = ["y"]
    if mode == "nearest":            # (ONNX Runtime's linear mode refuses to scale the outer axes)
        nodes.append(helper.make_node("Resize", ["x", "", "", "sizes_all"], ["y_all"], mode=mode,
                                      keep_aspect_ratio_policy=policy))
        outs.append("y_all")
    assert_parity(graph_model(nodes, {"x": x}, outs, inits, opset=18), tmp_path, {"x": x})


def test_resize_opset11_upsample_sizes(tmp_path):
    """The opset-11 form (roi + scales, or empty scales + sizes) and a 2x nearest upsample."""
    x = rand(1, 3, 4, 5, seed=14)
    inits = {"roi": np.array([], np.float32), "sc": np.array([1, 1, 2, 2], np.float32),
             "empty": np.array([], np.float32), "sizes": np.array([1, 3, 7, 9], np.int64)}
    nodes = [helper.make_node("Resize", ["x", "roi", "sc"], ["y2"], mode="nearest",
                              coordinate_transformation_mode="asymmetric", nearest_mode="floor"),
             helper.make_node("Resize", ["x", "roi", "empty", "sizes"], ["ys"], mode="nearest")]
    assert_parity(graph_model(nodes, {"x": x}, ["y2", "ys"], inits, opset=11), tmp_path, {"x": x})


# --------------------------------------------------------------------------- normalizations
def test_batchnorm_runtime_stats(tmp_path):
    """Statistics that are graph inputs: BatchNormalization is computed, not folded."""
    x = rand(2, 4, 3, 5, seed=15)
    feeds = {"x": x, "s": rand(4, seed=16), "b": rand(4, seed=17), "m": rand(4, seed=18),
             "v": rand(4, seed=19, low=0.5, high=2.0)}
    m = single_op_model("BatchNormalization", feeds, epsilon=1e-3)
    assert_parity(m, tmp_path, feeds)


def test_batchnorm_2d_input_const_stats(tmp_path):
    x = rand(3, 4, seed=20)
    inits = {"s": rand(4, seed=16), "b": rand(4, seed=17), "m": rand(4, seed=18),
             "v": rand(4, seed=19, low=0.5, high=2.0)}
    assert_parity(single_op_model("BatchNormalization", {"x": x}, inits=inits), tmp_path, {"x": x})


def test_instance_norm(tmp_path):
    x = rand(2, 3, 6, 5, seed=21) * 2 + 1
    inits = {"s": rand(3, seed=22), "b": rand(3, seed=23)}
    assert_parity(single_op_model("InstanceNormalization", {"x": x}, inits=inits, epsilon=1e-4), tmp_path,
                  {"x": x})


@pytest.mark.parametrize("size", [3, 5])
def test_lrn(size, tmp_path):
    x = rand(1, 7, 4, 5, seed=24)
    m = single_op_model("LRN", {"x": x}, size=size, alpha=1e-3, beta=0.75, bias=2.0)
    assert_parity(m, tmp_path, {"x": x})


def test_pad_with_runtime_fill_value_and_nothing_to_pad(tmp_path):
    """A run-time fill value that is never needed (all pads 0) must not leave an unused local."""
    from onnx import helper as h
    from tests.helpers import assert_parity, graph_model
    x = np.random.default_rng(21).standard_normal((2, 3)).astype(np.float32)
    v = np.array(1.5, np.float32)
    m = graph_model([h.make_node("Pad", ["x", "pads", "v"], ["y"], mode="constant")], {"x": x, "v": v}, ["y"],
                    {"pads": np.zeros(4, np.int64)})
    assert_parity(m, tmp_path, {"x": x, "v": v})


@pytest.mark.parametrize("name", ["test_resize_tf_crop_and_resize", "test_resize_tf_crop_and_resize_extrapolation_value",
                                  "test_resize_tf_crop_and_resize_axes_2_3", "test_resize_tf_crop_and_resize_axes_3_2",
                                  "test_resize_downsample_sizes_nearest_not_larger",
                                  "test_resize_downsample_sizes_nearest_not_smaller",
                                  "test_resize_upsample_sizes_nearest_not_larger",
                                  "test_resize_upsample_sizes_nearest_not_smaller"])
def test_resize_onnx_cases_with_roi_and_sizes_bound(name, tmp_path):
    from tests.helpers import run_onnx_node_case
    run_onnx_node_case(name, tmp_path, {"roi", "sizes", "scales"})
