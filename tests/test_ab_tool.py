"""tools/ab.py, the A / B of artifacts the performance journal's comparisons use: it times
each, says whether their outputs agree with the first's, and refuses artifacts of different
inputs."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper

from tests.helpers import graph_model, rand


def _model(path, op: str):
    x = rand(1, 4, 12, 12, seed=3)
    nodes = [helper.make_node("Resize", ["x", "", "s"], ["r"], mode="linear"), helper.make_node(op, ["r"], ["y"])]
    onnx.save(graph_model(nodes, {"x": x}, ["y"], {"s": np.array([1, 1, 1.5, 1.5], np.float32)}, opset=13),
              str(path))
    return path


def test_ab_times_and_compares_artifacts(tmp_path, monkeypatch, capsys):
    from aotc.api import compile as aotc_compile
    from aotc.ops import resize
    from tools import ab
    relu, sigmoid = _model(tmp_path / "relu.onnx", "Relu"), _model(tmp_path / "sigmoid.onnx", "Sigmoid")
    aotc_compile(relu, output_dir=tmp_path / "a")
    monkeypatch.setattr(resize, "RESIZE_LERP_ROWS", False)
    aotc_compile(relu, output_dir=tmp_path / "b")                 # the same values, another kernel
    aotc_compile(sigmoid, output_dir=tmp_path / "c")              # other values
    assert ab.main([str(tmp_path / d) for d in "abc"] + ["--rounds", "2", "--runs", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "2 rounds of 2 runs" in lines[0]
    a, b, c = lines[1:4]
    assert "ratio 1.000" in a and "(baseline)" in a
    assert "ratio" in b and b.endswith("bit-equal")
    assert "largest difference" in c


def test_ab_refuses_artifacts_of_other_inputs(tmp_path):
    from aotc.api import compile as aotc_compile
    from tools import ab
    aotc_compile(_model(tmp_path / "m.onnx", "Relu"), output_dir=tmp_path / "a")
    x = rand(1, 4, 10, 12, seed=3)
    onnx.save(graph_model([helper.make_node("Relu", ["x"], ["y"])], {"x": x}, ["y"]), str(tmp_path / "n.onnx"))
    aotc_compile(tmp_path / "n.onnx", output_dir=tmp_path / "b")
    with pytest.raises(SystemExit, match="different inputs"):
        ab.main([str(tmp_path / "a"), str(tmp_path / "b")])
    np.save(tmp_path / "z.npy", x)
    with pytest.raises(SystemExit, match="no such input"):
        ab.main([str(tmp_path / "a"), str(tmp_path / "a"), "--input", f"z={tmp_path / 'z.npy'}"])
