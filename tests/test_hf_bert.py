"""Hugging Face BertModel exported by torch.onnx.export(dynamo=True, opset 18), and the
constant GatherElements that export contains (a token-type buffer longer than 64 entries,
which onnx.reference's GatherElements cannot fold)."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from aotc.check.runner import run_check
from aotc.compiler import compile_program
from aotc.ops.reference import evaluate
from aotc.ir.graph import Node
from tests.helpers import assert_parity, graph_model, rand

N = helper.make_node


def _gather_elements_reference(data, idx, axis):
    """GatherElements by its definition, one element at a time."""
    out = np.empty(idx.shape, data.dtype)
    for pos in np.ndindex(*idx.shape):
        src = list(pos)
        j = int(idx[pos])
        src[axis] = j + data.shape[axis] if j < 0 else j
        out[pos] = data[tuple(src)]
    return out


@pytest.mark.parametrize("shape,idx_shape,axis", [((1, 512), (1, 128), 1), ((3, 100), (3, 7), 1),
                                                  ((70, 2), (5, 2), 0), ((4, 80, 3), (4, 9, 2), -2)])
def test_gather_elements_folds_along_long_axes(shape, idx_shape, axis):
    rng = np.random.default_rng(len(shape) + idx_shape[0])
    data = rng.standard_normal(shape).astype(np.float32)
    size = shape[axis]
    idx = rng.integers(-size, size, idx_shape).astype(np.int64)
    n = Node("GatherElements", ["d", "i"], ["y"], {"axis": axis}, "ge")
    (got,) = evaluate(n, [data, idx], [(np.float32, idx_shape)])
    np.testing.assert_array_equal(got, _gather_elements_reference(data, idx, axis % len(shape)))


def test_gather_elements_folding_refuses_an_index_out_of_range():
    n = Node("GatherElements", ["d", "i"], ["y"], {"axis": 1}, "ge")
    with pytest.raises(ValueError, match=r"outside \[-100, 99\]"):
        evaluate(n, [np.zeros((1, 100), np.float32), np.array([[3, 100]], np.int64)], [(np.float32, (1, 2))])


def test_constant_gather_elements_like_the_bert_export(tmp_path):
    """The pattern from the BERT export: an all-zero int64 (1, 512) buffer gathered at
    positions 0..127, then used as Gather indices into an embedding table."""
    ids = np.random.default_rng(3).integers(0, 30, (1, 128)).astype(np.int64)
    buf = np.zeros((1, 512), np.int64)
    buf[0, 5] = 1                                             # not all zero: the right element must be picked
    pos = np.arange(128, dtype=np.int64).reshape(1, 128)
    table = rand(2, 8, seed=4)
    words = rand(30, 8, seed=5)
    m = graph_model([N("GatherElements", ["buf", "pos"], ["tt"], axis=1, name="node_gather"),
                     N("Gather", ["table", "tt"], ["te"], axis=0),
                     N("Gather", ["words", "ids"], ["we"], axis=0),
                     N("Add", ["we", "te"], ["y"])], {"ids": ids}, ["y"],
                    {"buf": buf, "pos": pos, "table": table, "words": words}, opset=18)
    assert_parity(m, tmp_path, {"ids": ids})
    c = compile_program(tmp_path / "model.onnx")
    assert "GatherElements" not in [n.op_type for n in c.graph.nodes]


def test_hf_bert_dynamo_export_compiles_and_matches_onnx_runtime(tmp_path):
    from models.hf_bert import export, sample_feeds
    path, seq, vocab = export("small", tmp_path / "bert.onnx")
    for seed in (11, 12):
        d = tmp_path / f"seed{seed}"
        d.mkdir()
        feeds = sample_feeds(seq, vocab, seed)
        assert feeds["attention_mask"].min() == 0 and feeds["input_ids"].max() > 1
        res = run_check(path, inputs=feeds, output_dir=d / "out")
        assert [o.name for o in res.outputs] and all(o.passed for o in res.outputs), \
            [(o.name, o.max_abs_err, o.max_rel_err) for o in res.outputs]
    # the exporter's attention (MatMul, Mul by the scale, Add of the mask, Softmax, MatMul, with
    # the head Transposes) is one Attention kernel per layer (passes/attention.py)
    c = compile_program(path, shapes={"input_ids": (1, seq), "attention_mask": (1, seq)})
    labels = [st.group.label for st in c.steps]
    assert labels.count("Attention") == 2 and "Softmax" not in labels and "Transpose" not in labels, labels
