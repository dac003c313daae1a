"""HannWindow, HammingWindow and BlackmanWindow against ONNX Runtime: periodic and symmetric,
output types, a window feeding a computation (the window is a constant of the artifact)."""
import numpy as np
import pytest
from onnx import TensorProto, helper

from aotc.compiler import compile_model
from aotc.errors import ShapeError
from tests.helpers import assert_parity, graph_model, rand


@pytest.mark.parametrize("op", ["HannWindow", "HammingWindow", "BlackmanWindow"])
@pytest.mark.parametrize("periodic", [0, 1])
@pytest.mark.parametrize("size", [1, 10, 33])
def test_window_times_signal(op, periodic, size, tmp_path):
    x = rand(size, seed=size)
    nodes = [helper.make_node(op, ["n"], ["w"], periodic=periodic), helper.make_node("Mul", ["x", "w"], ["y"])]
    m = graph_model(nodes, {"x": x}, ["y", "w"], {"n": np.array(size, np.int64)}, opset=17)
    assert_parity(m, tmp_path, {"x": x}, rtol=1e-5, atol=1e-6)


def test_double_output(tmp_path):
    x = rand(16, seed=1).astype(np.float64)
    nodes = [helper.make_node("HannWindow", ["n"], ["w"], output_datatype=TensorProto.DOUBLE),
             helper.make_node("Mul", ["x", "w"], ["y"])]
    assert_parity(graph_model(nodes, {"x": x}, ["y"], {"n": np.array(16, np.int64)}, opset=17), tmp_path, {"x": x})


def test_size_must_be_constant(tmp_path):
    n = np.array(8, np.int64)
    m = graph_model([helper.make_node("HannWindow", ["n"], ["w"])], {"n": n}, ["w"], opset=17)
    path = tmp_path / "m.onnx"
    path.write_bytes(m.SerializeToString())
    with pytest.raises(ShapeError, match="size must be known at compile time"):
        compile_model(path, output_dir=tmp_path / "out")
