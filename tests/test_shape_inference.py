"""aotc's own shape inference against ONNX's shape inference and the shapes ONNX Runtime
actually produces, and the ShapeError a user gets for shapes that cannot work."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper

import aotc
from aotc.errors import ShapeError
from aotc.frontend import import_model
from aotc.passes.infer import infer_shapes
from aotc.passes.normalize import normalize_opset
from tests.helpers import graph_model, rand

N = helper.make_node


def ours(model) -> dict[str, tuple]:
    g = infer_shapes(normalize_opset(import_model(model, "t")))
    return {o: tuple(g.values[o].shape) for o in g.outputs}, g


def onnx_inferred(model) -> dict[str, tuple | None]:
    m = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    out = {}
    for vi in m.graph.output:
        tt = vi.type.tensor_type
        known = tt.HasField("shape") and all(d.HasField("dim_value") for d in tt.shape.dim)
        out[vi.name] = tuple(d.dim_value for d in tt.shape.dim) if known else None
    return out


def ort_outputs(model, feeds) -> dict[str, np.ndarray]:
    so = ort.SessionOptions()
    so.log_severity_level = 3
    s = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    names = [o.name for o in s.get_outputs()]
    return dict(zip(names, s.run(None, feeds)))


def feeds_for(inputs: dict) -> dict:
    out = {}
    for k, (shape, dt) in inputs.items():
        if dt == np.bool_:
            out[k] = np.random.default_rng(1).random(shape) < 0.5
        else:
            out[k] = rand(*shape, seed=len(out) + 1).astype(dt) if shape else np.asarray(rand(1)[0], dt)
    return out


def case(nodes, inputs: dict, outputs, inits=None, opset=17):
    """inputs: name -> (shape, dtype)"""
    feeds = feeds_for(inputs)
    return graph_model(nodes, feeds, outputs, inits or {}, opset=opset), feeds


CASES = {
    # --------------------------------------------------------------- broadcasting
    "add_trailing": ([N("Add", ["a", "b"], ["y"])], {"a": ((2, 3, 4), np.float32), "b": ((4,), np.float32)}),
    "add_both_ways": ([N("Add", ["a", "b"], ["y"])], {"a": ((2, 1, 4), np.float32), "b": ((3, 1), np.float32)}),
    "mul_rank_grow": ([N("Mul", ["a", "b"], ["y"])], {"a": ((1,), np.float32), "b": ((5, 2), np.float32)}),
    "sub_scalar": ([N("Sub", ["a", "b"], ["y"])], {"a": ((), np.float32), "b": ((2, 3), np.float32)}),
    "max_variadic": ([N("Max", ["a", "b", "c"], ["y"])],
                     {"a": ((3, 1, 1), np.float32), "b": ((1, 4, 1), np.float32), "c": ((5,), np.float32)}),
    "where3": ([N("Where", ["c", "a", "b"], ["y"])],
               {"c": ((3, 1), np.bool_), "a": ((1, 4), np.float32), "b": ((2, 3, 4), np.float32)}),
    "greater_bool": ([N("Greater", ["a", "b"], ["y"])], {"a": ((4, 1), np.float32), "b": ((3,), np.float32)}),
    # --------------------------------------------------------------- MatMul
    "matmul_2d": ([N("MatMul", ["a", "b"], ["y"])], {"a": ((3, 4), np.float32), "b": ((4, 5), np.float32)}),
    "matmul_batch_left": ([N("MatMul", ["a", "b"], ["y"])], {"a": ((2, 3, 4), np.float32), "b": ((4, 5), np.float32)}),
    "matmul_batch_right": ([N("MatMul", ["a", "b"], ["y"])], {"a": ((3, 4), np.float32), "b": ((2, 4, 5), np.float32)}),
    "matmul_batch_broadcast": ([N("MatMul", ["a", "b"], ["y"])],
                               {"a": ((1, 2, 3, 4), np.float32), "b": ((5, 1, 4, 6), np.float32)}),
    "matmul_vec_mat": ([N("MatMul", ["a", "b"], ["y"])], {"a": ((4,), np.float32), "b": ((2, 4, 5), np.float32)}),
    "matmul_mat_vec": ([N("MatMul", ["a", "b"], ["y"])], {"a": ((2, 3, 4), np.float32), "b": ((4,), np.float32)}),
    "matmul_vec_vec": ([N("MatMul", ["a", "b"], ["y"])], {"a": ((4,), np.float32), "b": ((4,), np.float32)}),
    # --------------------------------------------------------------- Gemm
    "gemm": ([N("Gemm", ["a", "b"], ["y"])], {"a": ((3, 4), np.float32), "b": ((4, 5), np.float32)}),
    "gemm_transA": ([N("Gemm", ["a", "b", "c"], ["y"], transA=1)],
                    {"a": ((4, 3), np.float32), "b": ((4, 5), np.float32), "c": ((5,), np.float32)}),
    "gemm_transB": ([N("Gemm", ["a", "b", "c"], ["y"], transB=1)],
                    {"a": ((3, 4), np.float32), "b": ((5, 4), np.float32), "c": ((3, 1), np.float32)}),
    "gemm_both": ([N("Gemm", ["a", "b", "c"], ["y"], transA=1, transB=1, alpha=0.5)],
                  {"a": ((4, 3), np.float32), "b": ((5, 4), np.float32), "c": ((), np.float32)}),
    # --------------------------------------------------------------- views
    "flatten_default": ([N("Flatten", ["a"], ["y"])], {"a": ((2, 3, 4, 5), np.float32)}),
    "flatten_axis0": ([N("Flatten", ["a"], ["y"], axis=0)], {"a": ((2, 3, 4), np.float32)}),
    "flatten_axis3": ([N("Flatten", ["a"], ["y"], axis=3)], {"a": ((2, 3, 4, 5), np.float32)}),
    "flatten_axis_neg": ([N("Flatten", ["a"], ["y"], axis=-1)], {"a": ((2, 3, 4), np.float32)}),
    "unsqueeze13": ([N("Unsqueeze", ["a", "ax"], ["y"])], {"a": ((3, 4), np.float32)}, {"ax": np.array([0, 3])}),
    "unsqueeze13_neg": ([N("Unsqueeze", ["a", "ax"], ["y"])], {"a": ((3, 4), np.float32)}, {"ax": np.array([-1, 1])}),
    "squeeze13": ([N("Squeeze", ["a", "ax"], ["y"])], {"a": ((3, 1, 4, 1), np.float32)}, {"ax": np.array([-1])}),
    "squeeze_all": ([N("Squeeze", ["a"], ["y"])], {"a": ((1, 3, 1, 4), np.float32)}),
    "squeeze11_attr": ([N("Squeeze", ["a"], ["y"], axes=[0, 2])], {"a": ((1, 3, 1, 4), np.float32)}, None, 11),
    "unsqueeze11_attr": ([N("Unsqueeze", ["a"], ["y"], axes=[1, -1])], {"a": ((3, 4), np.float32)}, None, 11),
    # --------------------------------------------------------------- other shape-changing ops
    "transpose_default": ([N("Transpose", ["a"], ["y"])], {"a": ((2, 3, 4), np.float32)}),
    "transpose_perm": ([N("Transpose", ["a"], ["y"], perm=[1, 2, 0])], {"a": ((2, 3, 4), np.float32)}),
    "concat_neg_axis": ([N("Concat", ["a", "b"], ["y"], axis=-1)],
                        {"a": ((2, 3), np.float32), "b": ((2, 5), np.float32)}),
    "gather_matrix_indices": ([N("Gather", ["a", "i"], ["y"], axis=1)], {"a": ((3, 5, 2), np.float32)},
                              {"i": np.array([[0, 4], [1, -1]])}),
    "slice_steps": ([N("Slice", ["a", "st", "en", "ax", "sp"], ["y"])], {"a": ((6, 7), np.float32)},
                    {"st": np.array([5, 1]), "en": np.array([-100, 100]), "ax": np.array([0, 1]),
                     "sp": np.array([-2, 3])}),
    "expand": ([N("Expand", ["a", "s"], ["y"])], {"a": ((3, 1), np.float32)}, {"s": np.array([2, 1, 4])}),
    "reducesum_keepdims0": ([N("ReduceSum", ["a", "ax"], ["y"], keepdims=0)], {"a": ((2, 3, 4), np.float32)},
                            {"ax": np.array([0, -1])}),
}

RESHAPES = {
    "zero_and_minus_one": ((2, 3, 4), [0, -1]),
    "minus_one_first": ((2, 3, 4), [-1, 4]),
    "zero_keeps_two": ((2, 3, 4), [0, 0, 2, 2]),
    "flat": ((2, 3, 4), [-1]),
    "split_dim": ((6, 4), [2, 3, -1]),
    "to_scalar_like": ((1, 1), [1]),
}

SHAPE_SLICES = {
    "all": {}, "start1": {"start": 1}, "end_neg1": {"end": -1}, "start_neg2": {"start": -2},
    "empty": {"start": 2, "end": 1}, "clamped": {"start": -10, "end": 10}, "middle": {"start": 1, "end": 3},
}


def _check(model, feeds):
    mine, _ = ours(model)
    theirs = onnx_inferred(model)
    actual = ort_outputs(model, feeds)
    for o, shape in mine.items():
        assert shape == tuple(actual[o].shape), f"{o}: aotc says {shape}, ONNX Runtime computes {actual[o].shape}"
        if theirs.get(o) is not None:
            assert shape == theirs[o], f"{o}: aotc says {shape}, ONNX shape inference {theirs[o]}"
    return mine, actual


@pytest.mark.parametrize("name", sorted(CASES))
def test_inferred_shape_matches_onnx_and_ort(name):
    spec = CASES[name]
    nodes, inputs = spec[0], spec[1]
    inits = spec[2] if len(spec) > 2 else None
    opset = spec[3] if len(spec) > 3 else 17
    model, feeds = case(nodes, inputs, ["y"], inits, opset)
    _check(model, feeds)


@pytest.mark.parametrize("name", sorted(RESHAPES))
def test_reshape_with_zero_and_minus_one(name):
    shape, target = RESHAPES[name]
    model, feeds = case([N("Reshape", ["a", "t"], ["y"])], {"a": (shape, np.float32)}, ["y"], {"t": np.array(target)})
    mine, actual = _check(model, feeds)
    assert int(np.prod(mine["y"])) == int(np.prod(shape))


@pytest.mark.parametrize("name", sorted(SHAPE_SLICES))
def test_shape_with_start_and_end_folds_to_the_right_values(name):
    attrs = SHAPE_SLICES[name]
    model, feeds = case([N("Shape", ["a"], ["y"], **attrs)], {"a": ((2, 3, 5, 7), np.float32)}, ["y"], opset=17)
    mine, actual = _check(model, feeds)
    _, g = ours(model)
    assert g.values["y"].const is not None, "Shape of a static shape is a constant"
    np.testing.assert_array_equal(g.values["y"].const, actual["y"])


def test_shape_size_feed_arithmetic_folds():
    """Size and Shape of a static input are folded even though the input is not constant."""
    nodes = [N("Size", ["a"], ["n"]), N("Shape", ["a"], ["s"], start=-1), N("Mul", ["n", "s"], ["y"])]
    model, feeds = case(nodes, {"a": ((2, 3, 5), np.float32)}, ["y"])
    mine, actual = _check(model, feeds)
    _, g = ours(model)
    np.testing.assert_array_equal(g.values["y"].const, actual["y"])
    assert g.nodes == []


# ------------------------------------------------------------------------------------------ errors
def _compile_error(model, tmp_path, **kw) -> ShapeError:
    path = tmp_path / "bad.onnx"
    onnx.save(model, str(path))
    with pytest.raises(ShapeError) as info:
        aotc.compile(path, output_dir=tmp_path / "out", **kw)
    e = info.value
    assert "\n" not in e.message, "one line"
    assert not (tmp_path / "out").exists(), "nothing is generated for a model that cannot compile"
    return e


BAD = {
    "broadcast": ([N("Add", ["a", "b"], ["y"], name="the_add")], {"a": ((2, 3), np.float32), "b": ((4,), np.float32)},
                  None, r"shapes \[\(2, 3\), \(4,\)\] do not broadcast in Add node 'the_add'"),
    "matmul_inner": ([N("MatMul", ["a", "b"], ["y"], name="mm")], {"a": ((2, 3), np.float32), "b": ((4, 5), np.float32)},
                     None, r"MatMul node 'mm': inner dimensions differ, \(2, 3\) x \(4, 5\)"),
    "gemm_trans": ([N("Gemm", ["a", "b"], ["y"], name="g", transB=1)], {"a": ((2, 3), np.float32), "b": ((3, 4), np.float32)},
                   None, r"Gemm node 'g': inner dimensions differ, \(2, 3\) x \(3, 4\) with transA=0 transB=1"),
    "reshape_count": ([N("Reshape", ["a", "t"], ["y"], name="rs")], {"a": ((2, 3), np.float32)}, {"t": np.array([4, -1])},
                      r"Reshape node 'rs': cannot reshape \(2, 3\) to \[4, -1\]"),
    "reshape_two_minus_one": ([N("Reshape", ["a", "t"], ["y"], name="rs")], {"a": ((2, 3), np.float32)},
                              {"t": np.array([-1, -1])}, r"Reshape node 'rs': more than one -1"),
    "reshape_size": ([N("Reshape", ["a", "t"], ["y"], name="rs")], {"a": ((2, 3), np.float32)}, {"t": np.array([4, 2])},
                     r"Reshape node 'rs': cannot reshape \(2, 3\) \(6 elements\) to \(4, 2\)"),
    "squeeze_not_one": ([N("Squeeze", ["a", "ax"], ["y"], name="sq")], {"a": ((2, 3), np.float32)}, {"ax": np.array([1])},
                        r"Squeeze node 'sq': dim 1 of \(2, 3\) is not 1"),
    "flatten_axis": ([N("Flatten", ["a"], ["y"], name="fl", axis=4)], {"a": ((2, 3), np.float32)}, None,
                     r"Flatten node 'fl': axis 4 out of range for rank 2"),
    "unsqueeze_axis": ([N("Unsqueeze", ["a", "ax"], ["y"], name="us")], {"a": ((2, 3), np.float32)},
                       {"ax": np.array([5])}, r"axis 5 out of range for rank 3 of Unsqueeze node 'us'"),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_bad_shapes_give_a_clear_shape_error(name, tmp_path):
    nodes, inputs, inits, pattern = BAD[name]
    model, feeds = case(nodes, inputs, ["y"], inits)
    e = _compile_error(model, tmp_path)
    assert __import__("re").search(pattern, e.message), e.message
    # ONNX Runtime agrees the model cannot run
    with pytest.raises(Exception):
        ort_outputs(model, feeds)


def test_reshape_to_a_runtime_shape_asks_for_const(tmp_path):
    x = rand(2, 6, seed=5)
    m = graph_model([N("Reshape", ["x", "shape"], ["y"], name="rs")], {"x": x, "shape": np.array([3, 4])}, ["y"])
    e = _compile_error(m, tmp_path)
    assert "Reshape node 'rs': the target shape must be known at compile time" in e.message
    assert "--const" in e.hint
    # and binding it as the hint says compiles, with ORT's answer
    cm = aotc.compile(tmp_path / "bad.onnx", output_dir=tmp_path / "ok", consts={"shape": np.array([3, 4])})
    assert cm.input_names == ["x"]
    (y,) = cm.run({"x": x})
    np.testing.assert_array_equal(y, ort_outputs(m, {"x": x, "shape": np.array([3, 4])})["y"])


def test_shape_flag_with_the_wrong_rank_or_size(tmp_path):
    m = graph_model([N("Relu", ["x"], ["y"])], {"x": rand(2, 3)}, ["y"])
    path = tmp_path / "m.onnx"
    onnx.save(m, str(path))
    with pytest.raises(ShapeError, match=r"--shape x: rank 3 given, the model says 2"):
        aotc.compile(path, output_dir=tmp_path / "o", shapes={"x": (2, 3, 1)})
    with pytest.raises(ShapeError, match=r"--shape x: dim 1 is 3 in the model, 4 given"):
        aotc.compile(path, output_dir=tmp_path / "o", shapes={"x": (2, 4)})
    with pytest.raises(ShapeError, match=r"'nope', which is not a graph input") as info:
        aotc.compile(path, output_dir=tmp_path / "o", shapes={"nope": (1,)})
    assert "graph inputs are: x" in info.value.hint
