"""Frontend validation: each malformed model in tests/malformed.py is refused with its own
one-line message (exit code 2 at the command line, never "internal error" or a traceback),
and models that are fine still compile and match ONNX Runtime."""
from __future__ import annotations

import builtins
import re

import numpy as np
import onnx
import pytest
from onnx import helper
from typer.testing import CliRunner

from aotc import cli
from aotc.compiler import compile_program
from aotc.errors import AotcError, ShapeError
from aotc.frontend import import_model, load_onnx
from models.zoo import ZOO
from tests.helpers import assert_parity, graph_model, rand
from tests.malformed import CASES, VALID

runner = CliRunner()


def run_cli(*args):
    return runner.invoke(cli.app, [str(a) for a in args], env={"COLUMNS": "400", "NO_COLOR": "1"})


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_malformed_model_is_refused_with_its_message(case, tmp_path):
    path = case.build(tmp_path / "m")
    with pytest.raises(AotcError) as info:
        compile_program(path)
    assert type(info.value).__name__ == case.error
    assert case.message in info.value.message, info.value.message
    assert "\n" not in info.value.message


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_malformed_model_at_the_command_line(case, tmp_path):
    path = case.build(tmp_path / "m")
    res = run_cli("compile", path, "-o", tmp_path / "out")
    assert res.exit_code == 2, res.output
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert lines[0].startswith("error: ") and case.message in lines[0], res.stderr
    assert all(ln.startswith(("error: ", "hint: ")) for ln in lines) and len(lines) <= 2, res.stderr
    assert "internal error" not in res.stderr and "Traceback" not in res.output
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("name,build", VALID, ids=[v[0] for v in VALID])
def test_models_the_rules_must_not_refuse(name, build, tmp_path):
    path = build(tmp_path / "m")
    x = rand(2, 3, seed=41)
    assert_parity(onnx.load(str(path)), tmp_path, {"x": x})


def test_every_small_zoo_model_passes_validation():
    from aotc.frontend.validate import validate_model
    for name, entry in ZOO.items():
        validate_model(entry.build("small"))


def test_hint_says_what_to_do(tmp_path):
    case = {c.id: c for c in CASES}["opset_1000"]
    with pytest.raises(AotcError) as info:
        compile_program(case.build(tmp_path))
    assert re.fullmatch(r"re-export the model with opset \d+ or older", info.value.hint)
    case = {c.id: c for c in CASES}["short_raw_data"]
    with pytest.raises(AotcError) as info:
        compile_program(case.build(tmp_path / "b"))
    assert "truncated" in info.value.hint


def test_external_data_length_is_checked_before_reading(tmp_path, monkeypatch):
    """A length that does not match the dims is refused without reading the file."""
    case = {c.id: c for c in CASES}["external_length_mismatch"]
    path = case.build(tmp_path)
    opened = []
    real_open = builtins.open
    monkeypatch.setattr(builtins, "open", lambda f, *a, **k: (opened.append(str(f)), real_open(f, *a, **k))[1])
    with pytest.raises(AotcError):
        load_onnx(path)
    monkeypatch.undo()
    assert not any(p.endswith("w.bin") for p in opened)


def test_api_shapes_and_consts_that_make_no_sense():
    m = graph_model([helper.make_node("Relu", ["x"], ["y"])], {"x": rand(2, 3)}, ["y"])
    with pytest.raises(ShapeError, match=r"--shape x: dims \[2, -3\] must not be negative"):
        import_model(m, shapes={"x": (2, -3)})
    with pytest.raises(ShapeError, match="shapes must map input names to sequences of integers"):
        import_model(m, shapes={"x": ("a", 3)})
    with pytest.raises(ShapeError, match="--const x: cannot use the array as float32"):
        import_model(m, consts={"x": np.array(["a", "b"])})


@pytest.mark.parametrize("op", ["Relu", "Add", "MatMul", "Softmax"])
def test_zero_size_dimensions_compile_or_are_refused_cleanly(op, tmp_path):
    """A dimension of 0 is a valid size. The fuzzer's function-model pass found the rewritten
    kernel layer raising ValueError ("shapes [(0, 8)] do not nest") on x: (0, 8)."""
    x = helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [0, 8])
    w = onnx.numpy_helper.from_array(rand(8, 8, seed=3), "w")
    inputs = {"Relu": ["x"], "Add": ["x", "x"], "MatMul": ["x", "w"], "Softmax": ["x"]}[op]
    g = helper.make_graph([helper.make_node(op, inputs, ["y"])], "g", [x],
                          [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)], [w])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, str(tmp_path / "m.onnx"))
    try:
        c = compile_program(tmp_path / "m.onnx")
    except AotcError:
        return
    assert c.graph.values[c.graph.outputs[0]].shape == (0, 8)
