"""NonZero and Unique on compile-time constants (folded into weights) and Unique on a run-time
input against ONNX Runtime (the other ops of run-time size: tests/test_bounded.py)."""
import numpy as np
import onnx
import pytest
from onnx import helper

from aotc.compiler import compile_model
from aotc.errors import UnsupportedError
from tests.helpers import assert_parity, graph_model, rand


def test_nonzero_of_a_constant_mask(tmp_path):
    """A constant mask's positions gather from a run-time input, as exported boolean indexing
    with a constant mask does."""
    mask = rand(3, 5, seed=1) > 0.3
    x = rand(15, seed=2)
    nodes = [helper.make_node("NonZero", ["mask"], ["nz"]),
             helper.make_node("Flatten", ["nz"], ["nzf"], axis=0),
             helper.make_node("Cast", ["nzf"], ["f"], to=onnx.TensorProto.FLOAT),
             helper.make_node("ReduceSum", ["f"], ["s"], keepdims=0),
             helper.make_node("Mul", ["x", "s"], ["y"])]
    m = graph_model(nodes, {"x": x}, ["y", "nz"], {"mask": mask}, opset=13)
    assert_parity(m, tmp_path, {"x": x})


@pytest.mark.parametrize("attrs", [{}, {"sorted": 0}, {"axis": 0}, {"axis": 1, "sorted": 1}])
def test_unique_of_a_constant(attrs, tmp_path):
    c = np.random.default_rng(3).integers(0, 4, size=(4, 3)).astype(np.float32)
    c[2] = c[0]                       # a repeated row for axis=0
    x = rand(1, seed=4)
    nodes = [helper.make_node("Unique", ["c"], ["u", "idx", "inv", "cnt"], **attrs),
             helper.make_node("ReduceSum", ["u"], ["s"], keepdims=0),
             helper.make_node("Mul", ["x", "s"], ["y"])]
    m = graph_model(nodes, {"x": x}, ["y", "u", "idx", "inv", "cnt"], {"c": c}, opset=11)
    assert_parity(m, tmp_path, {"x": x})


@pytest.mark.parametrize("attrs", [{}, {"sorted": 0}, {"axis": 0}, {"axis": 1, "sorted": 0}, {"axis": -1}])
def test_unique_on_a_run_time_input(attrs, tmp_path):
    """A kernel (merge sort of the slices) with outputs of run-time size (passes/bounded.py);
    small integers as floats, so that values and slices repeat."""
    x = np.random.default_rng(len(attrs) + attrs.get("sorted", 1)).integers(0, 3, size=(6, 2)).astype(np.float32)
    m = graph_model([helper.make_node("Unique", ["x"], ["u", "idx", "inv", "cnt"], **attrs)], {"x": x},
                    ["u", "idx", "inv", "cnt"], opset=11)
    assert_parity(m, tmp_path, {"x": x})


def test_unique_with_an_invalid_sorted_attribute_is_refused(tmp_path):
    """sorted must be 0 or 1 (ONNX Runtime reads -2 as unsorted; a fuzzer mutant found aotc
    reading it as sorted)."""
    from aotc.errors import ModelError
    x = rand(6, seed=7)
    m = graph_model([helper.make_node("Unique", ["x"], ["u"], sorted=-2)], {"x": x}, ["u"], opset=11)
    path = tmp_path / "m.onnx"
    onnx.save(m, str(path))
    with pytest.raises(ModelError, match="sorted must be 0 or 1, not -2"):
        compile_model(path, output_dir=tmp_path / "out")
