"""Data-movement ops (aotc/ops/tensor.py) against ONNX Runtime on random inputs, all dtypes."""
import numpy as np
import pytest
from onnx import helper

from tests.helpers import assert_parity, graph_model, rand, run_onnx_node_case, single_op_model

I64 = np.int64


def _ints(*shape, seed=0, lo=-50, hi=50, dtype=I64):
    return np.random.default_rng(seed).integers(lo, hi, size=shape).astype(dtype)


@pytest.mark.parametrize("shape,perm", [((2, 3, 4), None), ((2, 3, 4), [1, 0, 2]), ((1, 5, 4, 8), [0, 2, 1, 3]),
                                        ((1, 5, 4, 8), [0, 2, 3, 1]), ((2, 3, 4, 2, 3, 2), [0, 2, 4, 1, 3, 5])])
def test_transpose(shape, perm, tmp_path):
    x = rand(*shape, seed=1)
    attrs = {} if perm is None else {"perm": perm}
    assert_parity(single_op_model("Transpose", {"x": x}, **attrs), tmp_path, {"x": x})


@pytest.mark.parametrize("dtype", [I64, np.bool_, np.int32])
def test_transpose_dtypes(dtype, tmp_path):
    x = _ints(3, 4, 5, seed=2, lo=0, hi=2).astype(dtype)
    assert_parity(single_op_model("Transpose", {"x": x}, perm=[2, 0, 1]), tmp_path, {"x": x})


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_concat(axis, tmp_path):
    shapes = [[2, 3, 4], [2, 3, 4], [2, 3, 4]]
    for k, s in enumerate(shapes):
        s[axis] = k + 1
    xs = {f"x{k}": rand(*s, seed=k) for k, s in enumerate(shapes)}
    assert_parity(single_op_model("Concat", xs, axis=axis), tmp_path, xs)


def test_concat_int64_with_constant(tmp_path):
    x = _ints(3, seed=3)
    m = single_op_model("Concat", {"x": x}, inits={"c": np.array([7, -1], I64)}, axis=0)
    assert_parity(m, tmp_path, {"x": x})


@pytest.mark.parametrize("split,axis,n_out,opset", [(None, 1, 3, 17), ([2, 4], -1, 2, 17), (None, 2, 3, 18),
                                                    ([1, 1, 4], 2, 3, 13)])
def test_split(split, axis, n_out, opset, tmp_path):
    x = rand(2, 6, 7 if opset == 18 else 6, seed=4)
    attrs = {"axis": axis}
    if opset >= 18 and split is None:
        attrs["num_outputs"] = n_out
    inits = {"split": np.array(split, I64)} if split is not None else None
    assert_parity(single_op_model("Split", {"x": x}, n_out=n_out, inits=inits, opset=opset, **attrs),
                  tmp_path, {"x": x})


@pytest.mark.parametrize("starts,ends,axes,steps", [
    ([1], [3], [0], None),
    ([0, 1], [2, -1], [1, 2], None),
    ([-1], [-1000], [2], [-1]),                       # reverse a whole axis
    ([5, 0], [0, 100], [2, 0], [-2, 2]),              # negative and positive strides
    ([1, 0, 0], [2, 3, 6], None, None),               # axes omitted
    ([0], [1], [-2], [1]),
])
def test_slice(starts, ends, axes, steps, tmp_path):
    x = rand(3, 4, 6, seed=5)
    inits = {"starts": np.array(starts, I64), "ends": np.array(ends, I64)}
    if axes is not None:
        inits["axes"] = np.array(axes, I64)
    if steps is not None:
        if axes is None:
            inits["axes"] = np.arange(len(starts), dtype=I64)
        inits["steps"] = np.array(steps, I64)
    assert_parity(single_op_model("Slice", {"x": x}, inits=inits), tmp_path, {"x": x})


def test_slice_opset9_attrs(tmp_path):
    x = _ints(4, 5, seed=6)
    m = single_op_model("Slice", {"x": x}, opset=9, starts=[1, -3], ends=[3, 100], axes=[0, 1])
    assert_parity(m, tmp_path, {"x": x})


@pytest.mark.parametrize("axis,ishape", [(0, (2, 3)), (1, (4,)), (2, ()), (-1, (2, 2))])
def test_gather(axis, ishape, tmp_path):
    x = rand(5, 4, 6, seed=7)
    n = x.shape[axis]
    idx = np.random.default_rng(8).integers(-n, n, size=ishape).astype(I64)
    assert_parity(single_op_model("Gather", {"x": x, "i": idx}, axis=axis), tmp_path, {"x": x, "i": idx})


def test_gather_constant_index_int32(tmp_path):
    x = _ints(3, 4, seed=9)
    m = single_op_model("Gather", {"x": x}, inits={"i": np.array([2, -1, 0], np.int32)}, axis=1)
    assert_parity(m, tmp_path, {"x": x})
    m = single_op_model("Gather", {"x": x}, inits={"i": np.array(-1, I64)}, axis=0)
    (tmp_path / "scalar").mkdir()
    assert_parity(m, tmp_path / "scalar", {"x": x})


def test_gather_embedding(tmp_path):
    table = rand(50, 16, seed=10)
    ids = np.random.default_rng(11).integers(0, 50, size=(1, 9)).astype(I64)
    m = single_op_model("Gather", {"ids": ids}, inits={"table": table}, axis=0, _order=["table", "ids"])
    assert_parity(m, tmp_path, {"ids": ids})


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_gather_elements(axis, tmp_path):
    x = rand(3, 4, 5, seed=12)
    ishape = [3, 4, 5]
    ishape[axis] = 2
    n = x.shape[axis]
    idx = np.random.default_rng(13).integers(-n, n, size=ishape).astype(I64)
    assert_parity(single_op_model("GatherElements", {"x": x, "i": idx}, axis=axis), tmp_path, {"x": x, "i": idx})


@pytest.mark.parametrize("bd,ishape", [(0, (2, 2)), (0, (3, 1)), (1, (2, 2, 1)), (1, (2, 2)), (0, (2, 3))])
def test_gather_nd(bd, ishape, tmp_path):
    x = rand(2, 3, 4, seed=14)
    rng = np.random.default_rng(15)
    dims = x.shape[bd:bd + ishape[-1]]
    idx = np.stack([rng.integers(-d, d, size=ishape[:-1]) for d in dims], axis=-1).astype(I64)
    m = single_op_model("GatherND", {"x": x, "i": idx}, batch_dims=bd)
    assert_parity(m, tmp_path, {"x": x, "i": idx})


@pytest.mark.parametrize("xshape,shape", [((3, 1), (2, 3, 4)), ((1, 4), (3, 1)), ((5,), (2, 1, 5))])
def test_expand(xshape, shape, tmp_path):
    x = rand(*xshape, seed=16)
    m = single_op_model("Expand", {"x": x}, inits={"s": np.array(shape, I64)})
    assert_parity(m, tmp_path, {"x": x})


def test_expand_bool_then_where(tmp_path):
    c = np.random.default_rng(17).random((1, 4)) < 0.5
    a, b = rand(3, 4, seed=18), rand(3, 4, seed=19)
    nodes = [helper.make_node("Expand", ["c", "s"], ["ce"]), helper.make_node("Where", ["ce", "a", "b"], ["y"])]
    m = graph_model(nodes, {"c": c, "a": a, "b": b}, ["y"], inits={"s": np.array([3, 4], I64)})
    assert_parity(m, tmp_path, {"c": c, "a": a, "b": b})


@pytest.mark.parametrize("reps", [[2, 1, 3], [1, 2, 1]])
def test_tile(reps, tmp_path):
    x = _ints(2, 3, 2, seed=20)
    assert_parity(single_op_model("Tile", {"x": x}, inits={"r": np.array(reps, I64)}), tmp_path, {"x": x})


@pytest.mark.parametrize("args,dtype", [((0, 10, 3), I64), ((2.5, -1.0, -0.5), np.float32)])
def test_range_folds(args, dtype, tmp_path):
    # Range on constants folds at compile time; add a graph input so the model has work to do
    n = len(range(0, 10, 3)) if dtype == I64 else 7
    x = np.ones(n, dtype) * (3 if dtype == I64 else 1.5)
    nodes = [helper.make_node("Range", ["a", "b", "c"], ["r"]), helper.make_node("Add", ["r", "x"], ["y"])]
    inits = {k: np.array(v, dtype) for k, v in zip("abc", args)}
    assert_parity(graph_model(nodes, {"x": x}, ["y"], inits=inits), tmp_path, {"x": x})


@pytest.mark.parametrize("upper,k", [(1, 0), (0, 0), (1, 2), (0, -1)])
def test_trilu(upper, k, tmp_path):
    x = rand(2, 5, 6, seed=21)
    m = single_op_model("Trilu", {"x": x}, inits={"k": np.array(k, I64)}, upper=upper)
    assert_parity(m, tmp_path, {"x": x})


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("axis,keepdims,last", [(0, 1, 0), (1, 0, 0), (-1, 1, 1)])
def test_argmax(op, axis, keepdims, last, tmp_path):
    x = np.round(rand(3, 4, 5, seed=22) * 2).astype(np.float32)     # ties, to check the index rule
    m = single_op_model(op, {"x": x}, axis=axis, keepdims=keepdims, select_last_index=last)
    assert_parity(m, tmp_path, {"x": x})


@pytest.mark.parametrize("axis,largest,k", [(-1, 1, 3), (0, 0, 2), (1, 1, 4)])
def test_topk(axis, largest, k, tmp_path):
    x = np.round(rand(4, 5, 6, seed=23) * 3).astype(np.float32)
    m = single_op_model("TopK", {"x": x}, n_out=2, inits={"k": np.array([k], I64)}, axis=axis, largest=largest)
    assert_parity(m, tmp_path, {"x": x})


@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_onehot(axis, tmp_path):
    idx = np.random.default_rng(24).integers(-5, 5, size=(3, 4)).astype(I64)
    m = single_op_model("OneHot", {"i": idx}, inits={"depth": np.array(5, I64),
                                                     "values": np.array([-0.5, 2.0], np.float32)}, axis=axis)
    assert_parity(m, tmp_path, {"i": idx})


def test_onehot_of_float_indices_truncates(tmp_path):
    """A float index is cast to an integer (toward zero: -2.5 is -2, then depth - 2), as ONNX
    Runtime does; -0.5 is index 0."""
    rng = np.random.default_rng()
    idx = (rng.integers(-5, 5, size=(3, 4)) + rng.choice([-0.5, 0.25, 0.75], size=(3, 4))).astype(np.float32)
    idx[0, 0] = -0.5
    m = single_op_model("OneHot", {"i": idx}, inits={"depth": np.array(5, np.float32),
                                                     "values": np.array([-0.5, 2.0], np.float32)}, axis=1)
    assert_parity(m, tmp_path, {"i": idx})


def test_onehot_folder_matches_the_reference_implementation():
    """aotc's own OneHot folder against onnx.reference (given a scalar depth, which it takes):
    integer indices, negative ones, every axis; its outputs are the values exactly. (Float
    indices: onnx.reference does not truncate them as the spec and ONNX Runtime do, so the test
    above checks those against ONNX Runtime.)"""
    from aotc.ir.graph import Node
    from aotc.ops import reference
    rng = np.random.default_rng()
    for dt in (I64, np.int32):
        for axis in (-1, 0, 1, 2):
            idx = rng.integers(-6, 6, size=(2, 3)).astype(dt)
            n = Node("OneHot", ["i", "d", "v"], ["y"], {"axis": axis}, "oh")
            vals = rng.standard_normal(2).astype(np.float32)
            from onnx.reference import ReferenceEvaluator
            ref = ReferenceEvaluator(helper.make_model(helper.make_graph(
                [helper.make_node("OneHot", ["i", "d", "v"], ["y"], axis=axis)], "g",
                [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
                 for k, a in (("i", idx), ("d", np.array(6, I64)), ("v", vals))],
                [helper.make_empty_tensor_value_info("y")]))).run(None, {"i": idx, "d": np.array(6, I64), "v": vals})[0]
            got = reference.evaluate(n, [idx, np.array([6], I64), vals], [(np.dtype(np.float32), ref.shape)])[0]
            # (the reference computes off + (on - off) * hot, a few ulps of the larger value from the
            # values themselves: relative to a small `on` near a large `off`, that is more than 1e-6)
            np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-6 * float(np.abs(vals).max()),
                                       err_msg=f"{dt.__name__} axis {axis}")
            assert set(np.unique(got)) <= set(vals.tolist())


@pytest.mark.parametrize("index_dtype", [I64])
def test_onehot_folded_with_a_one_element_depth_inside_a_loop(index_dtype, tmp_path):
    """As paddle2onnx writes it (a table-structure recognizer): a Loop whose body holds a OneHot
    of constants with depth a 1-element 1-D tensor, which onnx.reference cannot evaluate; folded
    by aotc's own OneHot, the same as ONNX Runtime."""
    from onnx import TensorProto as T
    rng = np.random.default_rng()
    idx = rng.integers(-6, 6, size=(2, 3)).astype(index_dtype)
    N = helper.make_node
    body = helper.make_graph(
        [N("Constant", [], ["i"], value=helper.make_tensor("i", helper.np_dtype_to_tensor_dtype(idx.dtype),
                                                           idx.shape, idx.reshape(-1).tolist())),
         N("Constant", [], ["depth"], value=helper.make_tensor("depth", T.INT64, [1], [6])),
         N("Constant", [], ["vals"], value=helper.make_tensor("vals", T.FLOAT, [2], [0.25, -1.5])),
         N("OneHot", ["i", "depth", "vals"], ["hot"], axis=1),
         N("Add", ["acc_in", "hot"], ["acc_out"]), N("Identity", ["cond_in"], ["cond_out"])],
        "body", [helper.make_tensor_value_info("it", T.INT64, []), helper.make_tensor_value_info("cond_in", T.BOOL, []),
                 helper.make_tensor_value_info("acc_in", T.FLOAT, [2, 6, 3])],
        [helper.make_tensor_value_info("cond_out", T.BOOL, []), helper.make_tensor_value_info("acc_out", T.FLOAT, [2, 6, 3])])
    x = rng.standard_normal((2, 6, 3)).astype(np.float32)
    m = graph_model([N("Loop", ["trips", "", "x"], ["y"], body=body)], {"x": x}, ["y"],
                    {"trips": np.array(3, I64)}, opset=13)
    assert_parity(m, tmp_path, {"x": x})


@pytest.mark.parametrize("reduction", ["none", "add"])
def test_scatter_nd(reduction, tmp_path):
    x = rand(4, 3, 2, seed=25)
    idx = np.array([[1], [3]], I64) if reduction == "none" else np.array([[1, 0], [3, 2], [1, 0]], I64)
    u = rand(*(idx.shape[:-1] + x.shape[idx.shape[-1]:]), seed=26)
    m = single_op_model("ScatterND", {"x": x, "i": idx, "u": u}, reduction=reduction, opset=18)
    assert_parity(m, tmp_path, {"x": x, "i": idx, "u": u})


def test_scatter_elements(tmp_path):
    x = rand(3, 5, seed=27)
    idx = np.array([[0, 4, -1], [2, 1, 3], [1, 0, 2]], I64)
    u = rand(3, 3, seed=28)
    m = single_op_model("ScatterElements", {"x": x, "i": idx, "u": u}, axis=1)
    assert_parity(m, tmp_path, {"x": x, "i": idx, "u": u})


def test_transpose_then_epilogue(tmp_path):
    x, bias = rand(2, 3, 4, seed=29), rand(2, 4, 3, seed=30)
    nodes = [helper.make_node("Transpose", ["x"], ["t"], perm=[0, 2, 1]), helper.make_node("Add", ["t", "b"], ["s"]),
             helper.make_node("Relu", ["s"], ["y"])]
    assert_parity(graph_model(nodes, {"x": x, "b": bias}, ["y"]), tmp_path, {"x": x, "b": bias})


def test_shape_chain_folds_to_reshape(tmp_path):
    """Shape -> Gather -> Unsqueeze -> Concat -> Reshape, as torch.onnx.export writes view()."""
    x = rand(1, 6, 8, seed=31)
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "i0"], ["d0"], axis=0),
        helper.make_node("Gather", ["s", "i1"], ["d1"], axis=0),
        helper.make_node("Unsqueeze", ["d0", "ax"], ["u0"]),
        helper.make_node("Unsqueeze", ["d1", "ax"], ["u1"]),
        helper.make_node("Concat", ["u0", "u1", "heads", "hd"], ["shape"], axis=0),
        helper.make_node("Reshape", ["x", "shape"], ["r"]),
        helper.make_node("Transpose", ["r"], ["y"], perm=[0, 2, 1, 3]),
    ]
    inits = {"i0": np.array(0, I64), "i1": np.array(1, I64), "ax": np.array([0], I64),
             "heads": np.array([2], I64), "hd": np.array([4], I64)}
    res = assert_parity(graph_model(nodes, {"x": x}, ["y"], inits=inits), tmp_path, {"x": x})
    src = (tmp_path / "out" / "model.c").read_text()
    assert src.count("static void k") == 1, "the shape chain should fold, leaving one transpose kernel"
    assert res.passed


def test_reshape_to_a_zero_size_with_allowzero(tmp_path):
    """Reshape (0, 3, 4) to [3, 4, 0] with allowzero = 1: the 0 is a size, not a copy of the
    input's; the view canonicalization keeps it so (it rewrote the node without allowzero)."""
    run_onnx_node_case("test_reshape_allowzero_reordered", tmp_path, bound=("shape",), exact=True)
