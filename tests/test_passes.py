"""Unit tests for the graph passes (aotc/passes/simplify.py, normalize.py).

Every test checks what the graph looks like after the pass (node counts, op types) AND that
it still computes the same function: the graph before and after are both evaluated with
onnx.reference (or ONNX Runtime, or compiled with aotc) on fresh random inputs.
Passes that only move ops aotc may not define yet (Conv, BatchNormalization, Transpose,
Dropout) run on graphs typed by ONNX's own shape inference (tests/ir_eval.py).
"""
from __future__ import annotations

import json
import signal
from contextlib import contextmanager

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from aotc.frontend import import_model
from aotc.ir.verify import verify
from aotc.passes import simplify
from aotc.passes.infer import infer_shapes
from aotc.passes.manager import PassContext, PassManager, pipeline
from aotc.passes.normalize import normalize_opset
from tests.helpers import assert_parity, graph_model, rand
from tests.ir_eval import assert_same_function, evaluate, ops, to_model, typed_graph

N = helper.make_node


def run_in_pipeline_order(g, *names):
    """Run the named passes of the default pipeline, in the pipeline's own order."""
    order = [p for p in pipeline() if p.name in names]
    assert {p.name for p in order} == set(names), "unknown pass name"
    ctx = PassContext()
    for p in order:
        g = p.run(g, ctx)
        verify(g, p.name, typed=p.typed)
    return g


def full_pipeline(model):
    return PassManager().run(import_model(model, "t"))


@contextmanager
def time_limit(seconds: int):
    """A pass that loops forever must fail the test, not hang the suite."""
    def boom(*_):
        raise TimeoutError(f"pass did not finish in {seconds}s")
    old = signal.signal(signal.SIGALRM, boom)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def ort_run(model, feeds):
    so = ort.SessionOptions()
    so.log_severity_level = 3
    s = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return s.run(None, feeds)


# ------------------------------------------------------------------------------------------ folding
def test_fold_constants_folds_constant_only_nodes():
    x, c1, c2 = rand(3, 4, seed=1), rand(4, seed=2), rand(4, seed=3)
    m = graph_model([N("Mul", ["c1", "c2"], ["k"]), N("Exp", ["k"], ["e"]), N("Add", ["x", "e"], ["y"])],
                    {"x": x}, ["y"], {"c1": c1, "c2": c2})
    g = infer_shapes(normalize_opset(import_model(m, "t")), fold=False)
    assert ops(g) == ["Mul", "Exp", "Add"]
    g = simplify.fold_constants(g)
    verify(g)
    assert ops(g) == ["Add"]
    folded = g.const(g.nodes[0].inputs[1])
    np.testing.assert_allclose(folded, np.exp(c1 * c2), rtol=1e-6)
    assert_same_function(m, g, {"x": x})


def test_fold_constants_keeps_large_constant_of_shape_as_a_kernel():
    """A small ConstantOfShape folds; one over the fold limit stays a (fill) node."""
    x = rand(2, 3, seed=4)
    big = rand(600, 600, seed=5)
    val = helper.make_tensor("v", TensorProto.FLOAT, [1], [1.5])
    nodes = [N("ConstantOfShape", ["small_shape"], ["s"], value=val), N("Add", ["x", "s"], ["y"]),
             N("ConstantOfShape", ["big_shape"], ["b"], value=val), N("Mul", ["big", "b"], ["z"])]
    m = graph_model(nodes, {"x": x, "big": big}, ["y", "z"],
                    {"small_shape": np.array([2, 3]), "big_shape": np.array([600, 600])})
    g = full_pipeline(m)
    assert ops(g).count("ConstantOfShape") == 1
    cos = next(n for n in g.nodes if n.op_type == "ConstantOfShape")
    assert g.values[cos.outputs[0]].shape == (600, 600)
    assert_same_function(m, g, {"x": x, "big": big})


def test_shape_arithmetic_feeding_reshape_folds_away(tmp_path):
    """Shape(start, end) -> Mul -> Add -> Reshape: static shapes make the whole shape
    computation constant; only Relu, one Reshape and Exp remain."""
    x = rand(2, 3, 4, seed=6)
    nodes = [N("Relu", ["x"], ["r"]), N("Shape", ["x"], ["sh"], start=0, end=2),
             N("Mul", ["sh", "keep_first"], ["m"]), N("Add", ["m", "minus_one_last"], ["target"]),
             N("Reshape", ["r", "target"], ["rs"]), N("Exp", ["rs"], ["y"])]
    m = graph_model(nodes, {"x": x}, ["y"], {"keep_first": np.array([1, 0]), "minus_one_last": np.array([0, -1])})
    g = full_pipeline(m)
    assert ops(g) == ["Relu", "Reshape", "Exp"]
    rs = g.nodes[1]
    assert list(g.const(rs.inputs[1])) == [2, 12]
    assert_same_function(m, g, {"x": x})
    assert_parity(m, tmp_path, {"x": x})


def test_shape_gather_unsqueeze_concat_reshape_folds_away(tmp_path):
    """The exporters' idiom: Shape -> Gather -> Unsqueeze -> Concat -> Reshape(x, [N, -1])."""
    x = rand(2, 3, 4, seed=7)
    nodes = [N("Shape", ["x"], ["sh"]), N("Gather", ["sh", "zero"], ["n"], axis=0),
             N("Unsqueeze", ["n", "axes0"], ["n1"]), N("Concat", ["n1", "minus_one"], ["target"], axis=0),
             N("Sigmoid", ["x"], ["s"]), N("Reshape", ["s", "target"], ["rs"]), N("Neg", ["rs"], ["y"])]
    m = graph_model(nodes, {"x": x}, ["y"], {"zero": np.array(0), "axes0": np.array([0]),
                                             "minus_one": np.array([-1])})
    g = full_pipeline(m)
    assert ops(g) == ["Sigmoid", "Reshape", "Neg"]
    assert list(g.const(g.nodes[1].inputs[1])) == [2, 12]
    assert_same_function(m, g, {"x": x})
    assert_parity(m, tmp_path, {"x": x})


# ------------------------------------------------------------------------------------------ DCE
def test_dead_code_elimination_removes_unused_chains_and_values():
    x = rand(3, 5, seed=8)
    nodes = [N("Relu", ["x"], ["r"]), N("Exp", ["r"], ["dead1"]), N("Neg", ["dead1"], ["dead2"]),
             N("Mul", ["dead2", "unused_w"], ["dead3"]), N("Sigmoid", ["x"], ["s"]), N("Add", ["r", "s"], ["y"])]
    m = graph_model(nodes, {"x": x}, ["y"], {"unused_w": rand(5, seed=9)})
    g = typed_graph(m)
    g = simplify.eliminate_dead_code(g)
    verify(g)
    assert ops(g) == ["Relu", "Sigmoid", "Add"]
    for v in ("dead1", "dead2", "dead3", "unused_w"):
        assert v not in g.values
    assert_same_function(m, g, {"x": x})


# ------------------------------------------------------------------------------------------ CSE
def test_cse_merges_equal_nodes_and_equal_small_constants():
    x = rand(4, 6, seed=10)
    c = rand(6, seed=11)
    nodes = [N("Relu", ["x"], ["a"]), N("Relu", ["x"], ["b"]), N("Add", ["a", "b"], ["ab"]),
             N("Mul", ["ab", "c1"], ["m1"]), N("Mul", ["ab", "c2"], ["m2"]),   # c1, c2: same contents
             N("LeakyRelu", ["m1"], ["l1"], alpha=0.1), N("LeakyRelu", ["m2"], ["l2"], alpha=0.2),
             N("Sub", ["l1", "l2"], ["y"])]
    m = graph_model(nodes, {"x": x}, ["y"], {"c1": c, "c2": c.copy()})
    g = typed_graph(m)
    g = simplify.eliminate_common_subexpressions(g)
    g = simplify.eliminate_dead_code(g)
    verify(g)
    assert ops(g).count("Relu") == 1
    assert ops(g).count("Mul") == 1
    assert ops(g).count("LeakyRelu") == 2, "different attributes: not the same computation"
    assert_same_function(m, g, {"x": x})


def test_cse_keeps_two_graph_outputs_distinct(tmp_path):
    x = rand(3, 4, seed=12)
    m = graph_model([N("Tanh", ["x"], ["a"]), N("Tanh", ["x"], ["b"])], {"x": x}, ["a", "b"])
    g = simplify.eliminate_common_subexpressions(typed_graph(m))
    verify(g)
    assert g.outputs == ["a", "b"]
    assert_same_function(m, g, {"x": x})
    assert_parity(m, tmp_path, {"x": x})


# ------------------------------------------------------------------------------------------ identities
def test_identity_dropout_and_noop_cast_are_removed():
    x = rand(3, 4, seed=13)
    nodes = [N("Identity", ["x"], ["i1"]), N("Dropout", ["i1", "ratio"], ["d"]),
             N("Relu", ["d"], ["r"]), N("Cast", ["r"], ["c"], to=TensorProto.FLOAT),
             N("Identity", ["c"], ["y"]),
             # a Dropout whose mask is used is not an identity
             N("Dropout", ["r"], ["d2", "mask"]), N("Cast", ["mask"], ["maskf"], to=TensorProto.FLOAT),
             N("Mul", ["d2", "maskf"], ["z"])]
    m = graph_model(nodes, {"x": x}, ["y", "z"], {"ratio": np.float32(0.3)})
    g = simplify.remove_identities(typed_graph(m))
    verify(g)
    assert ops(g) == ["Relu", "Dropout", "Cast", "Mul"]
    assert g.nodes[0].inputs == ["x"] and g.nodes[0].outputs == ["y"], "the output keeps its name"
    assert_same_function(m, g, {"x": x})


def test_expand_and_tile_to_the_shape_they_have_are_removed(tmp_path):
    x = rand(2, 1, 5, seed=15)
    nodes = [N("Expand", ["x", "same"], ["e"]), N("Tile", ["e", "ones"], ["t"]), N("Relu", ["t"], ["r"]),
             # one that broadcasts stays
             N("Expand", ["r", "wider"], ["y"])]
    m = graph_model(nodes, {"x": x}, ["y"], {"same": np.array([2, 1, 5], np.int64),
                                              "ones": np.array([1, 1, 1], np.int64),
                                              "wider": np.array([2, 3, 5], np.int64)})
    g = simplify.remove_identities(typed_graph(m))
    verify(g)
    assert ops(g) == ["Relu", "Expand"]
    assert_same_function(m, g, {"x": x})
    assert_parity(m, tmp_path, {"x": x})


def test_identity_from_input_to_output_is_kept(tmp_path):
    x = rand(2, 5, seed=14)
    m = graph_model([N("Identity", ["x"], ["y"]), N("Exp", ["x"], ["z"])], {"x": x}, ["y", "z"])
    g = simplify.remove_identities(typed_graph(m))
    verify(g)
    assert ops(g) == ["Identity", "Exp"]
    assert_same_function(m, g, {"x": x})
    assert_parity(m, tmp_path, {"x": x})


# ------------------------------------------------------------------------------------------ BatchNorm
def _bn_params(c, seed):
    rng = np.random.default_rng(seed)
    return {"gamma": (1 + 0.3 * rng.standard_normal(c)).astype(np.float32),
            "beta": (0.2 * rng.standard_normal(c)).astype(np.float32),
            "mean": (0.3 * rng.standard_normal(c)).astype(np.float32),
            "var": rng.uniform(0.3, 2.0, c).astype(np.float32)}


BN_IN = ["gamma", "beta", "mean", "var"]


def test_batchnorm_alone_decomposes_into_mul_add():
    x = rand(2, 3, 5, 5, seed=15)
    m = graph_model([N("BatchNormalization", ["x"] + BN_IN, ["y"], epsilon=1e-3)], {"x": x}, ["y"],
                    _bn_params(3, 16))
    g = run_in_pipeline_order(typed_graph(m), "decompose_batchnorm", "fold_scale_shift", "canonicalize_gemm")
    assert ops(g) == ["Mul", "Add"]
    assert g.const(g.nodes[0].inputs[1]).shape == (3, 1, 1)
    assert_same_function(m, g, {"x": x})


@pytest.mark.parametrize("conv_bias", [True, False])
def test_batchnorm_folds_into_conv(conv_bias, tmp_path):
    x = rand(1, 3, 8, 8, seed=17)
    w = rand(4, 3, 3, 3, seed=18) * 0.3
    inits = {"w": w, **_bn_params(4, 19)}
    conv_in = ["x", "w"]
    if conv_bias:
        inits["cb"] = rand(4, seed=20)
        conv_in.append("cb")
    nodes = [N("Conv", conv_in, ["c"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             N("BatchNormalization", ["c"] + BN_IN, ["bn"]), N("Relu", ["bn"], ["y"])]
    m = graph_model(nodes, {"x": x}, ["y"], inits)
    g = run_in_pipeline_order(typed_graph(m), "decompose_batchnorm", "fold_scale_shift", "canonicalize_gemm")
    assert ops(g) == ["Conv", "Relu"]
    conv = g.nodes[0]
    assert len(conv.inputs) == 3 and g.const(conv.inputs[2]) is not None, "BN shift became the conv bias"
    assert g.nodes[1].inputs == [conv.outputs[0]]
    assert_same_function(m, g, {"x": x}, rtol=1e-5, atol=1e-5)
    assert ops(full_pipeline(m)) == ["Conv", "Relu"]
    assert_parity(m, tmp_path, {"x": x}, atol=1e-4)


def test_batchnorm_not_folded_into_conv_whose_output_is_used_elsewhere():
    x = rand(1, 2, 6, 6, seed=21)
    nodes = [N("Conv", ["x", "w"], ["c"], kernel_shape=[1, 1]),
             N("BatchNormalization", ["c"] + BN_IN, ["bn"]), N("Add", ["bn", "c"], ["y"])]
    m = graph_model(nodes, {"x": x}, ["y"], {"w": rand(2, 2, 1, 1, seed=22), **_bn_params(2, 23)})
    g = run_in_pipeline_order(typed_graph(m), "decompose_batchnorm", "fold_scale_shift", "canonicalize_gemm")
    assert ops(g) == ["Conv", "Mul", "Add", "Add"]
    assert_same_function(m, g, {"x": x}, atol=1e-5)


@pytest.mark.parametrize("trans_b", [0, 1])
def test_batchnorm_folds_into_gemm(trans_b, tmp_path):
    x = rand(4, 6, seed=24)
    w = rand(*((5, 6) if trans_b else (6, 5)), seed=25)
    nodes = [N("Gemm", ["x", "w", "b"], ["h"], transB=trans_b, alpha=0.7, beta=1.3),
             N("BatchNormalization", ["h"] + BN_IN, ["y"])]
    m = graph_model(nodes, {"x": x}, ["y"], {"w": w, "b": rand(5, seed=26), **_bn_params(5, 27)})
    g = run_in_pipeline_order(typed_graph(m), "decompose_batchnorm", "fold_scale_shift", "canonicalize_gemm")
    assert ops(g) == ["Gemm"], f"BN left behind after Gemm(transB={trans_b}): {ops(g)}"
    assert int(g.nodes[0].attr("transB", 0)) == 0
    assert g.outputs == ["y"] and g.nodes[0].outputs == ["y"]
    assert_same_function(m, g, {"x": x}, atol=1e-5)
    assert ops(full_pipeline(m)) == ["Gemm"]
    assert_parity(m, tmp_path, {"x": x}, atol=1e-4)


def test_batchnorm_folds_scale_into_matmul_weights():
    x = rand(3, 7, seed=28)
    nodes = [N("MatMul", ["x", "w"], ["h"]), N("BatchNormalization", ["h"] + BN_IN, ["bn"]),
             N("Tanh", ["bn"], ["y"])]
    m = graph_model(nodes, {"x": x}, ["y"], {"w": rand(7, 4, seed=29), **_bn_params(4, 30)})
    g = run_in_pipeline_order(typed_graph(m), "decompose_batchnorm", "fold_scale_shift", "canonicalize_gemm")
    # the scale goes into the weights; MatMul has no bias, so the shift stays an Add (an epilogue)
    assert ops(g) == ["MatMul", "Add", "Tanh"]
    assert_same_function(m, g, {"x": x}, atol=1e-5)


def test_canonicalize_gemm_transposes_constant_operands_once():
    x = rand(3, 4, seed=31)
    m = graph_model([N("Gemm", ["x", "w", "c"], ["y"], transB=1)], {"x": x}, ["y"],
                    {"w": rand(5, 4, seed=32), "c": rand(5, seed=33)})
    g = simplify.canonicalize_gemm(typed_graph(m))
    verify(g)
    gemm = g.nodes[0]
    assert int(gemm.attr("transB")) == 0 and g.values[gemm.inputs[1]].shape == (4, 5)
    assert_same_function(m, g, {"x": x})


# ------------------------------------------------------------------------------------------ views
def test_reshape_chain_collapses_to_one_reshape(tmp_path):
    x = rand(2, 3, 4, seed=34)
    nodes = [N("Relu", ["x"], ["r"]), N("Reshape", ["r", "s64"], ["a"]), N("Flatten", ["a"], ["b"], axis=1),
             N("Unsqueeze", ["b", "ax0"], ["c"]), N("Squeeze", ["c", "ax0"], ["d"]),
             N("Reshape", ["d", "s46"], ["e"]), N("Exp", ["e"], ["y"])]
    m = graph_model(nodes, {"x": x}, ["y"], {"s64": np.array([6, 4]), "ax0": np.array([0]),
                                             "s46": np.array([4, 6])})
    g = full_pipeline(m)
    assert ops(g) == ["Relu", "Reshape", "Exp"]
    rs = g.nodes[1]
    assert rs.inputs[0] == g.nodes[0].outputs[0], "the one Reshape reads the chain's source"
    assert list(g.const(rs.inputs[1])) == [4, 6]
    assert_same_function(m, g, {"x": x})
    assert_parity(m, tmp_path, {"x": x})


def test_reshape_chain_back_to_the_source_shape_vanishes():
    x = rand(2, 3, 4, seed=35)
    nodes = [N("Sigmoid", ["x"], ["r"]), N("Reshape", ["r", "s"], ["a"]), N("Flatten", ["a"], ["b"], axis=0),
             N("Reshape", ["b", "back"], ["c"]), N("Neg", ["c"], ["y"])]
    m = graph_model(nodes, {"x": x}, ["y"], {"s": np.array([6, -1]), "back": np.array([2, 3, 4])})
    g = full_pipeline(m)
    assert ops(g) == ["Sigmoid", "Neg"]
    assert_same_function(m, g, {"x": x})


def test_identity_reshape_to_a_graph_output_that_is_reshaped_again(tmp_path):
    """Regression: a same-shape Reshape whose output is a graph output renames its source;
    a later view of that output made canonicalize_views loop forever."""
    x = rand(2, 6, seed=36)
    nodes = [N("Relu", ["x"], ["r"]), N("Reshape", ["r", "same"], ["y"]),
             N("Reshape", ["y", "other"], ["z"]), N("Exp", ["z"], ["w"])]
    m = graph_model(nodes, {"x": x}, ["y", "w"], {"same": np.array([2, 6]), "other": np.array([3, 4])})
    with time_limit(20):
        g = full_pipeline(m)
    assert [o for o in ops(g) if o != "aotc.Copy"] == ["Relu", "Reshape", "Exp"]
    assert_same_function(m, g, {"x": x})
    assert_parity(m, tmp_path, {"x": x})


# ------------------------------------------------------------------------------------------ transposes
def test_inverse_transposes_cancel():
    x = rand(2, 3, 4, seed=37)
    nodes = [N("Relu", ["x"], ["r"]), N("Transpose", ["r"], ["t1"], perm=[2, 0, 1]),
             N("Transpose", ["t1"], ["t2"], perm=[1, 2, 0]), N("Exp", ["t2"], ["y"])]
    m = graph_model(nodes, {"x": x}, ["y"])
    g = simplify.cancel_transposes(typed_graph(m))
    verify(g)
    assert ops(g) == ["Relu", "Exp"]
    assert_same_function(m, g, {"x": x})


def test_transpose_pair_composes_into_one():
    x = rand(2, 3, 4, 5, seed=38)
    nodes = [N("Transpose", ["x"], ["t1"], perm=[0, 2, 3, 1]), N("Transpose", ["t1"], ["t2"], perm=[3, 1, 0, 2]),
             N("Transpose", ["t2"], ["y"])]                   # no perm: reverse the axes
    m = graph_model(nodes, {"x": x}, ["y"])
    g = simplify.cancel_transposes(typed_graph(m))
    verify(g)
    assert ops(g) == ["Transpose"]
    assert g.nodes[0].inputs == ["x"]
    expect = np.transpose(np.transpose(np.transpose(x, [0, 2, 3, 1]), [3, 1, 0, 2]))
    perm = g.nodes[0].attr("perm")
    np.testing.assert_array_equal(np.transpose(x, perm), expect)
    assert_same_function(m, g, {"x": x})


def test_cancelled_transposes_into_a_graph_output_then_transposed_again():
    """Regression: the identity pair renames its source to the graph output's name; a later
    Transpose of that output must read the renamed value, not the stale one."""
    x = rand(3, 4, seed=39)
    nodes = [N("Relu", ["x"], ["r"]), N("Transpose", ["r"], ["t1"], perm=[1, 0]),
             N("Transpose", ["t1"], ["y"], perm=[1, 0]), N("Transpose", ["y"], ["t3"], perm=[1, 0]),
             N("Exp", ["t3"], ["z"])]
    m = graph_model(nodes, {"x": x}, ["y", "z"])
    g = simplify.cancel_transposes(typed_graph(m))
    verify(g)
    assert ops(g) == ["Relu", "Transpose", "Exp"]
    assert_same_function(m, g, {"x": x})


# ------------------------------------------------------------------------------------------ outputs
OUTPUT_CASES = {
    # name: (nodes, outputs, initializers, expected Copy nodes)
    "input_is_output": ([N("Relu", ["x"], ["r"])], ["x", "r"], {}, 1),
    "constant_output": ([N("Relu", ["x"], ["r"])], ["r", "c"], {"c": np.arange(1, 4, dtype=np.float32)}, 1),
    "same_value_twice": ([N("Relu", ["x"], ["r"])], ["r", "r"], {}, 1),
    "view_of_input": ([N("Reshape", ["x", "s"], ["y"])], ["y"], {"s": np.array([3, 4])}, 1),
    "view_of_another_output": ([N("Tanh", ["x"], ["r"]), N("Reshape", ["r", "s"], ["y"])], ["y", "r"],
                               {"s": np.array([3, 4])}, 1),
    "plain": ([N("Tanh", ["x"], ["r"]), N("Exp", ["x"], ["e"])], ["r", "e"], {}, 0),
    # regression: moving r (claimed by y1's view) to a new name must keep it claimed for y2
    "two_views_and_their_source": ([N("Tanh", ["x"], ["r"]), N("Reshape", ["r", "s"], ["y1"]),
                                    N("Flatten", ["r"], ["y2"], axis=0)], ["y1", "r", "y2"],
                                   {"s": np.array([3, 4])}, 2),
}


@pytest.mark.parametrize("case", sorted(OUTPUT_CASES))
def test_materialize_outputs(case, tmp_path):
    nodes, outs, inits, copies = OUTPUT_CASES[case]
    x = rand(2, 6, seed=40)
    m = graph_model(nodes, {"x": x}, outs, inits)
    g = full_pipeline(m)
    assert ops(g).count("aotc.Copy") == copies
    assert len(g.outputs) == len(outs)
    # each output has its own storage: no output is an input, a constant or another output
    assert len(set(g.outputs)) == len(outs)
    for o in g.outputs:
        assert o not in g.inputs and g.values[o].const is None
    assert_same_function(m, g, {"x": x})
    assert_parity(m, tmp_path, {"x": x})
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert [p["name"] for p in manifest["outputs"]] == outs, "outputs keep their ONNX names"
    assert len({p["c_name"] for p in manifest["outputs"]}) == len(outs)


# ------------------------------------------------------------------------------------------ normalize
def _normalized(m):
    g = normalize_opset(typed_graph(m))
    verify(g)
    return g


def _same_as_ort(m, g, feeds, **tol):
    want = ort_run(m, feeds)
    got = evaluate(to_model(g), feeds)
    for a, b in zip(got, want):
        assert np.any(b != 0)
        np.testing.assert_allclose(a, b, **{"rtol": 1e-5, "atol": 1e-6, **tol})


NORMALIZE_CASES = {
    # name: (opset, node, inits, input shape, moved attributes)
    "squeeze11": (11, N("Squeeze", ["x"], ["y"], axes=[1]), {}, (3, 1, 4), ["axes"]),
    "unsqueeze11": (11, N("Unsqueeze", ["x"], ["y"], axes=[0, 3]), {}, (3, 4), ["axes"]),
    "clip10": (10, N("Clip", ["x"], ["y"], min=-0.5, max=0.7), {}, (4, 5), ["min", "max"]),
    "slice9": (9, N("Slice", ["x"], ["y"], starts=[1, 0], ends=[3, -1], axes=[0, 2]), {}, (4, 3, 5),
               ["starts", "ends", "axes"]),
    "pad10": (10, N("Pad", ["x"], ["y"], pads=[0, 1, 2, 0], value=1.5), {}, (3, 4), ["pads", "value"]),
    "reducesum12": (12, N("ReduceSum", ["x"], ["y"], axes=[1], keepdims=0), {}, (3, 4, 5), ["axes"]),
    "reducemean17": (17, N("ReduceMean", ["x"], ["y"], axes=[0, 2]), {}, (3, 4, 5), ["axes"]),
    "split12": (12, N("Split", ["x"], ["y", "z"], axis=1, split=[1, 3]), {}, (2, 4), ["split"]),
    "split13_even": (13, N("Split", ["x"], ["y", "z"], axis=1), {}, (2, 4), []),
    "dropout10": (10, N("Dropout", ["x"], ["y"], ratio=0.4), {}, (3, 4), ["ratio"]),
    "topk9": (9, N("TopK", ["x"], ["y", "z"], k=2, axis=1), {}, (3, 5), ["k"]),
    "upsample7_nearest": (7, N("Upsample", ["x"], ["y"], scales=[1.0, 1.0, 2.0, 3.0], mode="nearest"), {},
                          (1, 2, 3, 4), ["scales"]),
    "upsample9_linear": (9, N("Upsample", ["x", "sc"], ["y"], mode="linear"),
                         {"sc": np.array([1, 1, 2, 2], np.float32)}, (1, 2, 3, 4), []),
    "resize10": (10, N("Resize", ["x", "sc"], ["y"], mode="nearest"),
                 {"sc": np.array([1, 1, 2, 1.5], np.float32)}, (1, 2, 3, 4), []),
    "scatter10": (10, N("Scatter", ["x", "idx", "upd"], ["y"], axis=1),
                  {"idx": np.array([[1, 0], [2, 1]]), "upd": np.array([[5, 6], [7, 8]], np.float32)},
                  (2, 3), []),
}


@pytest.mark.parametrize("case", sorted(NORMALIZE_CASES))
def test_normalize_opset(case):
    opset, node, inits, shape, moved = NORMALIZE_CASES[case]
    x = rand(*shape, seed=41)
    m = graph_model([node], {"x": x}, list(node.output), inits, opset=opset)
    g = _normalized(m)
    assert g.opset == 21 and len(g.nodes) == 1
    n = g.nodes[0]
    for a in moved:
        assert a not in n.attrs, f"attribute {a} should have become an input"
    if case.startswith("upsample"):
        assert n.op_type == "Resize"
    if case == "scatter10":
        assert n.op_type == "ScatterElements"
    _same_as_ort(m, g, {"x": x})


@pytest.mark.parametrize("case", ["upsample7_nearest", "upsample9_linear", "scatter10"])
def test_rewritten_ops_compile_end_to_end(case, tmp_path):
    """The deprecated ops the normalization rewrites (Upsample, Scatter) pass the compiler's
    support check and match ONNX Runtime through the whole pipeline."""
    from tests.helpers import assert_parity
    opset, node, inits, shape, _ = NORMALIZE_CASES[case]
    x = rand(*shape, seed=43)
    m = graph_model([node], {"x": x}, list(node.output), inits, opset=opset)
    assert_parity(m, tmp_path, {"x": x})


def test_normalize_batchnorm_drops_legacy_attributes():
    x = rand(2, 3, 4, 4, seed=42)
    m = graph_model([N("BatchNormalization", ["x"] + BN_IN, ["y"], spatial=1, epsilon=1e-4)], {"x": x}, ["y"],
                    _bn_params(3, 43), opset=7)
    g = _normalized(m)
    assert "spatial" not in g.nodes[0].attrs
    _same_as_ort(m, g, {"x": x}, atol=1e-5)


def test_normalize_softmax12_marks_the_2d_coercion(tmp_path):
    """Before opset 13 Softmax flattened the input at `axis`: the node says so (for the op's
    lowering, checked here against ORT); the attribute is aotc's own (underscore) and never
    reaches ONNX."""
    x = rand(2, 3, 4, seed=44)
    m = graph_model([N("Softmax", ["x"], ["y"], axis=1)], {"x": x}, ["y"], opset=12)
    g = _normalized(m)
    n = g.nodes[0]
    assert n.attrs.get("_coerce_2d") == 1 and n.attrs["axis"] == 1
    assert "_coerce_2d" not in [a.name for a in to_model(g).graph.node[0].attribute]
    assert_parity(m, tmp_path, {"x": x})


def test_zero_pads_fold_into_the_convolution_after_them(tmp_path):
    """torch.onnx's Pad before a Conv (F.pad, as TensorFlow's converters write "SAME" padding
    of a strided convolution; the TorchScript exporter keeps the Pads, the dynamo one's
    optimizer folds the zero ones itself): a Pad of zeros over the spatial axes becomes the
    Conv's own padding, grown by it where the Conv pads too; a Pad of another value and a
    reflecting one stay, and one that a Slice reads too stays for it. ONNX Runtime's results
    on fresh inputs."""
    torch = pytest.importorskip("torch")
    import onnx
    nn, F = torch.nn, torch.nn.functional

    class PaddedConvs(nn.Module):
        def __init__(self):
            super().__init__()
            self.dw = nn.Conv2d(8, 8, 3, stride=2, groups=8)
            self.c = nn.Conv2d(8, 6, 3, padding=1)
            self.v = nn.Conv2d(6, 6, 3)
            self.r = nn.Conv2d(6, 4, 3)

        def forward(self, x):
            y = torch.relu(self.dw(F.pad(x, (0, 1, 0, 1))))          # folds: the TF "SAME" form
            y = self.c(F.pad(y, (2, 0, 1, 1)))                       # folds into pads 1 + these
            shared = F.pad(y, (1, 1, 1, 1))
            y = self.v(shared) + shared[:, :, 1:-1, 1:-1]            # folds; the Pad stays for the Slice
            y = self.v(F.pad(y, (1, 1, 1, 1), value=0.5))            # stays: not zeros
            return self.r(F.pad(y, (1, 1, 1, 1), mode="reflect"))    # stays: reflect

    torch.manual_seed(3)
    path = tmp_path / "padded.onnx"
    x = torch.randn(1, 8, 15, 15)
    with torch.no_grad():
        torch.onnx.export(PaddedConvs().eval(), (x,), str(path), input_names=["x"], dynamo=False, opset_version=13)
    model = onnx.load(str(path))
    assert [n.op_type for n in model.graph.node].count("Pad") == 5
    g = full_pipeline(model)
    pads = [n for n in g.nodes if n.op_type == "Pad"]
    assert len(pads) == 3, pads
    convs = [n for n in g.nodes if n.op_type == "Conv"]
    assert sorted(list(n.attr("pads", [0] * 4)) for n in convs) == \
        [[0, 0, 0, 0], [0, 0, 0, 0], [0, 0, 1, 1], [1, 1, 1, 1], [2, 3, 2, 1]]
    assert_parity(model, tmp_path, {"x": rand(1, 8, 15, 15, seed=4)})


def test_pads_fold_only_where_the_convolution_can_take_them(tmp_path):
    """Hand-built cases the exporters above do not write: an opset-18 Pad over named axes
    before a Conv whose auto_pad is VALID (folds: the pads become the Conv's), and Pads that
    must stay: one over the channels, one that crops (negative pads), one before a Conv that
    pads itself SAME_UPPER (whose padding depends on its input's size)."""
    x = rand(1, 4, 9, 9, seed=30)
    w = rand(4, 4, 3, 3, seed=31) * 0.3
    inits = {"w": w, "p_hw": np.array([1, 2, 0, 1], np.int64), "axes": np.array([2, 3], np.int64),
             "p_c": np.array([0, 1, 0, 0, 0, 0, 0, 0], np.int64), "p_crop": np.array([0, 0, -1, 0, 0, 0, 1, 1], np.int64),
             "p_all": np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64), "w5": rand(4, 5, 3, 3, seed=32) * 0.3}
    nodes = [N("Pad", ["x", "p_hw", "", "axes"], ["a"]), N("Conv", ["a", "w"], ["y1"], auto_pad="VALID"),
             N("Pad", ["x", "p_c"], ["b"]), N("Conv", ["b", "w5"], ["y2"]),
             N("Pad", ["x", "p_crop"], ["c"]), N("Conv", ["c", "w"], ["y3"]),
             N("Pad", ["x", "p_all"], ["d"]), N("Conv", ["d", "w"], ["y4"], auto_pad="SAME_UPPER")]
    m = graph_model(nodes, {"x": x}, ["y1", "y2", "y3", "y4"], inits, opset=18)
    g = full_pipeline(m)
    assert ops(g).count("Pad") == 3
    folded = [n for n in g.nodes if n.op_type == "Conv" and n.inputs[0] == g.inputs[0]]
    assert len(folded) == 1 and list(folded[0].attr("pads")) == [1, 2, 0, 1] and folded[0].attr("auto_pad") is None
    assert_parity(m, tmp_path, {"x": x})
