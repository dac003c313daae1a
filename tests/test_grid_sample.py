"""GridSample (2-D) against ONNX Runtime on random inputs and grids that reach past the input
(so that every padding mode matters): each mode, padding and corner alignment."""
import numpy as np
import pytest
from onnx import helper

from aotc.compiler import compile_model
from aotc.errors import UnsupportedError
from tests.helpers import assert_parity, graph_model, rand


@pytest.mark.parametrize("mode", ["linear", "nearest", "cubic"])
@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("aligned", [0, 1])
def test_grid_sample(mode, padding, aligned, tmp_path):
    x = rand(2, 3, 5, 7, seed=1)
    grid = rand(2, 4, 6, 2, seed=2, low=-1.6, high=1.6)
    node = helper.make_node("GridSample", ["x", "g"], ["y"], mode=mode, padding_mode=padding, align_corners=aligned)
    m = graph_model([node], {"x": x, "g": grid}, ["y"], opset=20)
    assert_parity(m, tmp_path, {"x": x, "g": grid}, rtol=1e-4, atol=1e-5)


def test_opset16_bilinear_default(tmp_path):
    x = rand(1, 2, 4, 4, seed=3)
    grid = rand(1, 3, 3, 2, seed=4, low=-1, high=1)
    m = graph_model([helper.make_node("GridSample", ["x", "g"], ["y"])], {"x": x, "g": grid}, ["y"], opset=16)
    assert_parity(m, tmp_path, {"x": x, "g": grid})


def test_volumetric_is_unsupported(tmp_path):
    x, grid = rand(1, 1, 2, 3, 4, seed=5), rand(1, 2, 2, 2, 3, seed=6)
    m = graph_model([helper.make_node("GridSample", ["x", "g"], ["y"])], {"x": x, "g": grid}, ["y"], opset=20)
    path = tmp_path / "m.onnx"
    path.write_bytes(m.SerializeToString())
    with pytest.raises(UnsupportedError, match="2-D only"):
        compile_model(path, output_dir=tmp_path / "out")
