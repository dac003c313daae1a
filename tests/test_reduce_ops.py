"""Reductions, Softmax family and LayerNormalization (aotc/ops/reduce.py) against ONNX Runtime."""
import numpy as np
import pytest
from onnx import helper

from tests.helpers import assert_parity, graph_model, rand, single_op_model

I64 = np.int64
REDUCE = ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
          "ReduceSumSquare", "ReduceLogSumExp", "ReduceLogSum"]


def _x(op, shape, seed):
    x = rand(*shape, seed=seed)
    if op == "ReduceLogSum":
        x = np.abs(x) + 0.1                    # log of a positive sum
    if op == "ReduceProd":
        x = (0.5 + np.abs(x) * 0.5) * np.sign(x)   # keep the product O(1)
    return x.astype(np.float32)


@pytest.mark.parametrize("op", REDUCE)
@pytest.mark.parametrize("axes,keepdims", [([-1], 1), ([0, 2], 0), (None, 1), (None, 0), ([1], 0)])
def test_reduce(op, axes, keepdims, tmp_path):
    x = _x(op, (3, 4, 5), seed=1)
    opset = 18
    inits = {"axes": np.array(axes, I64)} if axes is not None else None
    m = single_op_model(op, {"x": x}, inits=inits, opset=opset, keepdims=keepdims)
    assert_parity(m, tmp_path, {"x": x})


@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMean", "ReduceProd", "ReduceL2", "ReduceLogSum"])
@pytest.mark.parametrize("shape,axes", [((5, 7, 19), [0, 1]), ((2, 6, 5, 40), [1, 2]), ((9, 8), [0])])
def test_reduce_over_outer_axes(op, shape, axes, tmp_path):
    """Sums over axes before a kept innermost one (a mean over a channels-last tensor's planes)
    take their outputs COLUMN_LANES at a time (ops/reduce.py _reduce_columns): whole blocks, a
    tail (19 = 2 x 8 + 3), batches around them."""
    from aotc.ops.reduce import COLUMN_LANES
    assert shape[-1] >= COLUMN_LANES
    x = _x(op, shape, seed=4)
    m = single_op_model(op, {"x": x}, inits={"axes": np.array(axes, I64)}, opset=18, keepdims=1)
    assert_parity(m, tmp_path, {"x": x})
    assert "adjacent outputs side by side" in "".join(p.read_text() for p in (tmp_path / "out").glob("*.c"))


def test_reduce_over_outer_axes_opencl(tmp_path):
    """The same on OpenCL, each work-item an output block's accumulators."""
    x = _x("ReduceMean", (2, 6, 5, 40), seed=5)
    m = single_op_model("ReduceMean", {"x": x}, inits={"axes": np.array([1, 2], I64)}, opset=18, keepdims=1)
    assert_parity(m, tmp_path, {"x": x}, target="opencl")
    # (the OpenCL printer leaves comments out: the path's eight accumulators, acc .. acc7, say it)
    assert "acc7" in "".join(p.read_text() for p in (tmp_path / "out").glob("*.cl"))


@pytest.mark.parametrize("op", ["ReduceMean", "ReduceMax", "ReduceSum"])
def test_reduce_axes_attribute_opset11(op, tmp_path):
    x = rand(2, 3, 6, seed=2)
    assert_parity(single_op_model(op, {"x": x}, opset=11, axes=[1], keepdims=1), tmp_path, {"x": x})


def test_reduce_noop_with_empty_axes(tmp_path):
    x = rand(2, 3, seed=3)
    m = single_op_model("ReduceSum", {"x": x}, opset=18, noop_with_empty_axes=1)
    assert_parity(m, tmp_path, {"x": x})


def test_reduce_sum_int64(tmp_path):
    x = np.random.default_rng(4).integers(-9, 9, size=(3, 7)).astype(I64)
    m = single_op_model("ReduceSum", {"x": x}, inits={"axes": np.array([1], I64)}, keepdims=0)
    assert_parity(m, tmp_path, {"x": x})


def test_reduce_mean_then_epilogue(tmp_path):
    x = rand(2, 8, 6, seed=5)
    nodes = [helper.make_node("ReduceMean", ["x", "axes"], ["m"], keepdims=1),
             helper.make_node("Sqrt", ["m2"], ["y"]), helper.make_node("Mul", ["m", "m"], ["m2"])]
    nodes = [nodes[0], nodes[2], nodes[1]]
    assert_parity(graph_model(nodes, {"x": x}, ["y"], inits={"axes": np.array([-1], I64)}, opset=18),
                  tmp_path, {"x": x})


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax", "Hardmax"])
@pytest.mark.parametrize("axis", [-1, 1, 0])
def test_softmax(op, axis, tmp_path):
    x = rand(3, 4, 5, seed=6) * 3
    if op == "Hardmax":
        x = np.round(x)                        # ties: the first index wins
    assert_parity(single_op_model(op, {"x": x}, axis=axis), tmp_path, {"x": x})


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("axis", [1, 2])
def test_softmax_opset11_coerces_2d(op, axis, tmp_path):
    x = rand(2, 3, 4, seed=7) * 2
    assert_parity(single_op_model(op, {"x": x}, opset=11, axis=axis), tmp_path, {"x": x})


def test_softmax_opset11_constant_folds(tmp_path):
    c = rand(2, 3, 4, seed=8)
    x = rand(2, 3, 4, seed=9)
    nodes = [helper.make_node("Softmax", ["c"], ["s"], axis=1), helper.make_node("Add", ["s", "x"], ["y"])]
    assert_parity(graph_model(nodes, {"x": x}, ["y"], inits={"c": c}, opset=11), tmp_path, {"x": x})


def test_softmax_large_values_stable(tmp_path):
    x = (rand(2, 64, seed=10) * 200).astype(np.float32)
    x[0, :] = -3.4028235e38          # a fully masked row, as BERT's additive mask makes
    x[1, 3] = 80.0
    assert_parity(single_op_model("Softmax", {"x": x}, axis=-1), tmp_path, {"x": x})


def test_masked_attention_softmax(tmp_path):
    """Scores / sqrt(d) + mask -> Softmax, with the mask as BERT's exporter builds it."""
    s = rand(1, 2, 8, 8, seed=11) * 4
    mask = np.random.default_rng(12).integers(0, 2, size=(1, 8)).astype(I64)
    mask[0, 0] = 1
    nodes = [helper.make_node("Unsqueeze", ["mask", "a1"], ["m1"]),
             helper.make_node("Unsqueeze", ["m1", "a2"], ["m2"]),
             helper.make_node("Cast", ["m2"], ["mf"], to=1),
             helper.make_node("Sub", ["one", "mf"], ["inv"]),
             helper.make_node("Mul", ["inv", "big"], ["add_mask"]),
             helper.make_node("Div", ["s", "sqrt_d"], ["sd"]),
             helper.make_node("Add", ["sd", "add_mask"], ["z"]),
             helper.make_node("Softmax", ["z"], ["y"], axis=-1)]
    inits = {"a1": np.array([1], I64), "a2": np.array([2], I64), "one": np.float32(1.0),
             "big": np.float32(-3.4028235e38), "sqrt_d": np.float32(8.0)}
    assert_parity(graph_model(nodes, {"s": s, "mask": mask}, ["y"], inits=inits), tmp_path, {"s": s, "mask": mask})


@pytest.mark.parametrize("axis,with_bias,outs", [(-1, True, 1), (-1, False, 1), (1, True, 1), (-1, True, 3)])
def test_layernorm(axis, with_bias, outs, tmp_path):
    x = rand(2, 5, 16, seed=13) * 2 + 0.5
    norm = x.shape[axis:] if axis >= 0 else x.shape[axis:]
    inits = {"scale": (1 + 0.1 * rand(*norm, seed=14)).astype(np.float32)}
    if with_bias:
        inits["bias"] = (0.1 * rand(*norm, seed=15)).astype(np.float32)
    m = single_op_model("LayerNormalization", {"x": x}, n_out=outs, inits=inits, axis=axis, epsilon=1e-5)
    assert_parity(m, tmp_path, {"x": x})


def test_layernorm_broadcast_scale_and_epilogue(tmp_path):
    x = rand(2, 3, 4, seed=16)
    nodes = [helper.make_node("LayerNormalization", ["x", "scale", "bias"], ["ln"], axis=1, epsilon=1e-12),
             helper.make_node("Add", ["ln", "x"], ["y"])]
    inits = {"scale": (1 + 0.1 * rand(1, 4, seed=17)).astype(np.float32), "bias": rand(3, 1, seed=18) * 0.1}
    assert_parity(graph_model(nodes, {"x": x}, ["y"], inits=inits), tmp_path, {"x": x})


def test_layernorm_decomposed_opset13(tmp_path):
    """LayerNorm as older exporters write it: ReduceMean, Sub, Pow, ReduceMean, Add, Sqrt, Div, Mul, Add."""
    x = rand(1, 6, 32, seed=19)
    nodes = [helper.make_node("ReduceMean", ["x"], ["mu"], axes=[-1]),
             helper.make_node("Sub", ["x", "mu"], ["d"]),
             helper.make_node("Pow", ["d", "two"], ["d2"]),
             helper.make_node("ReduceMean", ["d2"], ["var"], axes=[-1]),
             helper.make_node("Add", ["var", "eps"], ["ve"]),
             helper.make_node("Sqrt", ["ve"], ["sd"]),
             helper.make_node("Div", ["d", "sd"], ["nrm"]),
             helper.make_node("Mul", ["nrm", "g"], ["sc"]),
             helper.make_node("Add", ["sc", "b"], ["y"])]
    inits = {"two": np.float32(2.0), "eps": np.float32(1e-5), "g": (1 + 0.1 * rand(32, seed=20)).astype(np.float32),
             "b": 0.1 * rand(32, seed=21)}
    assert_parity(graph_model(nodes, {"x": x}, ["y"], inits=inits, opset=13), tmp_path, {"x": x})


@pytest.mark.parametrize("subnormals", ["flushed", "ieee"])
def test_softmax_rows_by_the_runtime(subnormals, tmp_path, monkeypatch):
    """runtime/aotc_softmax.h (an AVX-512 target's float32 rows: masked 16-lane vectors), its
    plain C (the same header built with AOTC_SOFTMAX_PLAIN) and the kernels' own loops, on rows
    of 1 to 197 elements (every tail length of a 16-lane vector among them) with a NaN, +-inf,
    a row of -inf and scores spread far enough for exp to underflow (subnormal results, flushed
    or kept); a Softmax op and an Attention op (whose rule makes a row of -inf zeros). The
    three agree to a rounding of the float64 sum; ONNX Runtime on the finite rows."""
    import onnxruntime as ort

    import aotc
    from aotc.ops import reduce
    from aotc.paths import TARGETS_DIR
    from aotc.targets import load_target, runs_here
    if not runs_here(load_target("c-avx512")):
        pytest.skip("the runtime's softmax rows are for AVX-512 builds, which this CPU does not run")
    rng = np.random.default_rng(31)
    lengths = [1, 5, 16, 17, 31, 33, 197]
    xs = {f"x{n}": (rng.standard_normal((6, n)) * 4).astype(np.float32) for n in lengths}
    for n in lengths:
        x = xs[f"x{n}"]
        x[1] *= 30                             # exp down to subnormals and zero
        x[2, rng.integers(n)] = np.nan
        x[3, rng.integers(n)] = np.inf
        x[4] = -np.inf
    q, k, v = (rng.standard_normal((1, 2, 45, 8)).astype(np.float32) for _ in range(3))
    mask = np.zeros((45, 45), np.float32)
    mask[7] = -np.inf                          # a fully masked query row, its scores NaN: zeros
    q[0, :, 7, 0] = np.nan
    mask[:, 40:] = -np.inf
    nodes = [helper.make_node("Softmax", [name], [f"y{name[1:]}"], axis=-1) for name in xs] + \
        [helper.make_node("Attention", ["q", "k", "v", "mask"], ["att"])]
    feeds = dict(xs, q=q, k=k, v=v, mask=mask)
    m = graph_model(nodes, feeds, [f"y{n}" for n in lengths] + ["att"], opset=23)
    path = tmp_path / "m.onnx"
    import onnx
    onnx.save(m, path)

    text = (TARGETS_DIR / "c-avx512.toml").read_text()
    assert 'cflags = ["-std=c99", ' in text
    (tmp_path / "plain.toml").write_text(text.replace('cflags = ["-std=c99", ', 'cflags = ["-DAOTC_SOFTMAX_PLAIN", "-std=c99", ')
                                         .replace('name = "c-avx512"', 'name = "softmax-plain"'))
    option = "" if subnormals == "flushed" else ",ieee_subnormals"

    def built(name, target):
        out = aotc.compile(path, target=target + option, output_dir=tmp_path / name)
        calls = "".join(p.read_text() for p in (tmp_path / name).glob("*.c")).count("aotc_softmax_row(")
        return out.run(feeds), calls

    vectors, calls = built("vectors", "c-avx512")
    assert calls == len(lengths) + 1
    plain, calls = built("plain", str(tmp_path / "plain.toml"))
    assert calls == len(lengths) + 1
    monkeypatch.setattr(reduce, "SOFTMAX_RUNTIME", False)
    loops, calls = built("loops", "c-avx512")
    assert calls == 0
    for name, a, b, c in zip([f"y{n}" for n in lengths] + ["att"], vectors, plain, loops):
        np.testing.assert_allclose(a, c, rtol=3e-7, atol=0, err_msg=name)
        np.testing.assert_allclose(b, c, rtol=3e-7, atol=0, err_msg=name)
        assert (np.isnan(a) == np.isnan(c)).all() and (name == "att" or (a[np.isfinite(c)] >= 0).all()), name
    assert not vectors[-1][0, :, 7].any()      # the masked row: zeros
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    for name, got, want in zip([f"y{n}" for n in lengths] + ["att"], vectors, sess.run(None, feeds)):
        rows = [0, 1, 5] if name != "att" else slice(None)
        if name == "att":
            got, want = np.delete(got, 7, axis=2), np.delete(want, 7, axis=2)
        np.testing.assert_allclose(got[rows], want[rows], rtol=1e-5, atol=1e-6, err_msg=name)
