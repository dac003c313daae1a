"""Attribute and shape rules of Conv/ConvTranspose, pooling, GatherElements/ScatterElements and GatherND
that the operators' inference enforces (the fuzzer found models breaking them that crashed aotc
or compiled into kernels reading outside a buffer; see tests/test_known_op_bugs.py): each broken
rule is a one-line ShapeError naming the node, at compile time. The valid edge cases next to
each rule keep compiling and match ONNX Runtime."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from aotc.compiler import compile_program
from aotc.errors import ShapeError
from tests.helpers import assert_parity, rand, single_op_model

I64 = np.int64
F, I = TensorProto.FLOAT, TensorProto.INT64


def _vi(name, dims, elem=F):
    return helper.make_tensor_value_info(name, elem, dims)


X2, W2 = _vi("x", [1, 2, 3, 3]), _vi("w", [2, 1, 2, 2])
REFUSED = [
    # op, inputs, attrs, words the message must hold
    ("ConvTranspose", [X2, W2], dict(strides=[0, 1]), "positive"),
    ("ConvTranspose", [X2, W2], dict(dilations=[1, 1, 1]), "spatial dim"),
    ("ConvTranspose", [X2, W2], dict(output_padding=[1]), "spatial dim"),
    ("ConvTranspose", [X2, W2], dict(pads=[-1, 0, 0, 0]), ">= 0"),
    ("ConvTranspose", [X2, W2], dict(strides=[2, 2], output_padding=[2, 0]), "output_padding"),
    ("ConvTranspose", [X2, W2], dict(output_padding=[-1, 0]), "output_padding"),
    ("ConvTranspose", [X2, W2], dict(output_shape=[5]), "output_shape"),
    ("ConvTranspose", [X2, W2], dict(kernel_shape=[3, 3]), "kernel_shape"),
    ("ConvTranspose", [X2, W2], dict(auto_pad="SAME"), "auto_pad"),
    ("ConvTranspose", [X2, W2, _vi("b", [3])], dict(group=2), "bias"),
    ("Conv", [X2, _vi("w", [4, 2, 2, 2])], dict(pads=[0, -1, 0, 0]), ">= 0"),
    # (a fuzzer mutant: kernel_shape [3, -2^63] crashed the MaxPool lowering)
    ("MaxPool", [X2], dict(kernel_shape=[3, -(2 ** 63)]), "positive"),
    ("AveragePool", [X2], dict(kernel_shape=[0, 1]), "positive"),
    ("GatherElements", [_vi("d", [2, 5]), _vi("i", [2, 2, 1], I)], dict(axis=1), "rank"),
    ("GatherElements", [_vi("d", [2, 5]), _vi("i", [2, 2], I)], dict(axis=2), "axis"),
    ("GatherElements", [_vi("d", [2, 5]), _vi("i", [2, 6], I)], dict(axis=0), "axis 1"),
    ("ScatterElements", [_vi("d", [2, 5]), _vi("i", [3, 2], I), _vi("u", [3, 2])], dict(axis=1), "axis 0"),
    ("ScatterElements", [_vi("d", [2, 5]), _vi("i", [2, 2], I), _vi("u", [2, 2, 1])], dict(axis=1), "updates"),
    ("GatherND", [_vi("d", [2, 2, 2]), _vi("i", [3, 1], I)], dict(batch_dims=1), "batch dims"),
    ("GatherND", [_vi("d", [2]), _vi("i", [2, 1], I)], dict(batch_dims=1), "batch_dims"),
    ("GatherND", [_vi("d", [2, 2]), _vi("i", [2, 3], I)], dict(), "too deep"),
    ("ScatterND", [_vi("d", [4, 3]), _vi("i", [2, 1], I), _vi("u", [2, 2])], dict(), "updates"),
    ("ScatterND", [_vi("d", [4, 3]), _vi("i", [2, 3], I), _vi("u", [2])], dict(), "last dim of indices"),
    ("ScatterND", [_vi("d", [4, 3]), _vi("i", [2, 1], I), _vi("u", [2, 3])], dict(reduction="sum"), "reduction"),
    ("ScatterElements", [_vi("d", [2, 5]), _vi("i", [2, 2], I), _vi("u", [2, 2])], dict(reduction="avg"),
     "reduction"),
]


@pytest.mark.parametrize("case", REFUSED, ids=lambda c: f"{c[0]}-{'-'.join(map(str, c[2].items()))}")
def test_broken_rule_is_a_one_line_shape_error(case, tmp_path):
    op, inputs, attrs, words = case
    node = helper.make_node(op, [v.name for v in inputs], ["y"], name="n0", **attrs)
    m = helper.make_model(helper.make_graph([node], "g", inputs, [_vi("y", None)]),
                          opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, str(tmp_path / "m.onnx"))
    with pytest.raises(ShapeError) as e:
        compile_program(tmp_path / "m.onnx")
    msg = str(e.value)
    assert "\n" not in msg and op in msg and "'n0'" in msg and words in msg, msg


# ------------------------------------------------------------------ valid edge cases, against ONNX Runtime
def test_conv_transpose_no_strides_with_dilations_pads_and_bias(tmp_path):
    x = rand(1, 2, 4, 5, seed=1)
    inits = {"w": rand(2, 3, 3, 2, seed=2), "b": rand(3, seed=3)}
    m = single_op_model("ConvTranspose", {"x": x}, inits=inits, dilations=[2, 1], pads=[1, 0, 0, 1])
    assert_parity(m, tmp_path, {"x": x})


def test_conv_transpose_output_padding_just_below_stride(tmp_path):
    x = rand(1, 1, 3, 3, seed=4)
    inits = {"w": rand(1, 2, 2, 2, seed=5)}
    m = single_op_model("ConvTranspose", {"x": x}, inits=inits, strides=[3, 2], output_padding=[2, 1])
    assert_parity(m, tmp_path, {"x": x})


def test_gather_elements_indices_smaller_than_data_off_the_axis(tmp_path):
    x = rand(4, 5, 3, seed=6)
    idx = np.random.default_rng(7).integers(-5, 5, size=(2, 7, 1)).astype(I64)
    m = single_op_model("GatherElements", {"x": x, "i": idx}, axis=1)
    assert_parity(m, tmp_path, {"x": x, "i": idx})


def test_scatter_elements_indices_smaller_than_data_off_the_axis(tmp_path):
    x = rand(4, 5, seed=8)
    idx = np.array([[2], [-1]], I64)           # rows 0 and 1 only, one update each
    u = rand(2, 1, seed=9)
    m = single_op_model("ScatterElements", {"x": x, "i": idx, "u": u}, axis=1)
    assert_parity(m, tmp_path, {"x": x, "i": idx, "u": u})


def test_gather_nd_largest_batch_dims(tmp_path):
    """batch_dims = min(rank(data), rank(indices)) - 1 = 2: one index per (batch, batch) pair."""
    x = rand(2, 3, 4, seed=10)
    idx = np.random.default_rng(11).integers(-4, 4, size=(2, 3, 1)).astype(I64)
    m = single_op_model("GatherND", {"x": x, "i": idx}, batch_dims=2)
    assert_parity(m, tmp_path, {"x": x, "i": idx})
