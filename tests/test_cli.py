"""The `aotc` command line, run as a separate process the way users run it."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from models.zoo import ZOO
from tests.helpers import graph_model, rand

ROOT = Path(__file__).resolve().parent.parent
N = helper.make_node


def aotc(*args, cwd=None, check_rc=None) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1", "PYTHONPATH": str(ROOT)}
    p = subprocess.run([sys.executable, "-m", "aotc.cli", *map(str, args)], cwd=cwd or ROOT, env=env,
                       capture_output=True, text=True, timeout=300)
    if check_rc is not None:
        assert p.returncode == check_rc, f"exit {p.returncode}, expected {check_rc}\n{p.stdout}\n{p.stderr}"
    return p


def ort_run(path, feeds):
    so = ort.SessionOptions()
    so.log_severity_level = 3
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"]).run(None, feeds)


def assert_error_lines(p, *fragments):
    """An error is one `error:` line (plus a `hint:` line), never a traceback."""
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert lines and lines[0].startswith("error: "), p.stderr
    assert "Traceback" not in p.stderr and "Traceback" not in p.stdout
    assert all(ln.startswith(("error: ", "hint: ")) for ln in lines), p.stderr
    assert len(lines) <= 2, p.stderr
    for f in fragments:
        assert f in p.stderr, f"{f!r} not in {p.stderr!r}"


@pytest.fixture(scope="module")
def mlp(tmp_path_factory):
    d = tmp_path_factory.mktemp("cli_mlp")
    path = d / "mlp.onnx"
    onnx.save(ZOO["mlp"].build("small"), str(path))
    out = d / "out"
    p = aotc("compile", path, "--target", "c", "-o", out, "--shape", "x=3x64", check_rc=0)
    assert "wrote" in p.stdout and "libmlp.so" in p.stdout
    return path, out


@pytest.fixture
def unsupported_model(tmp_path):
    g = helper.make_graph([N("FancyA", ["x"], ["a"], domain="com.example", name="fancy_a"),
                           N("Relu", ["a"], ["b"], name="relu"),
                           N("FancyB", ["b"], ["c"], domain="com.example", name="fancy_b"),
                           N("NotAnOnnxOp", ["c"], ["y"], name="made_up")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 3)])
    m.ir_version = 8
    path = tmp_path / "unsupported.onnx"
    onnx.save(m, str(path))
    return path


# ------------------------------------------------------------------------------------------ compile / run
def test_compile_writes_the_artifact(mlp):
    _, out = mlp
    for f in ["mlp.h", "mlp.c", "mlp_weights.c", "libmlp.so", "manifest.json", "aotc_runtime.h"]:
        assert (out / f).is_file(), f
    m = json.loads((out / "manifest.json").read_text())
    assert m["inputs"] == [{"name": "x", "c_name": "x", "dtype": "float32", "shape": [3, 64]}]
    assert m["outputs"][0]["name"] == "logits" and m["outputs"][0]["shape"] == [3, 10]


def test_run_with_npy_input_matches_onnx_runtime(mlp, tmp_path):
    path, out = mlp
    x = rand(3, 64, seed=21)
    np.save(tmp_path / "x.npy", x)
    p = aotc("run", out, "--input", f"x={tmp_path / 'x.npy'}", "--output-dir", tmp_path / "res", check_rc=0)
    assert "logits" in p.stdout
    got = np.load(tmp_path / "res" / "logits.npy")
    (want,) = ort_run(path, {"x": x})
    assert got.shape == (3, 10) and np.any(want != 0)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("form", ["bare", "named"])
def test_run_with_npz_input_matches_onnx_runtime(form, mlp, tmp_path):
    path, out = mlp
    x = rand(3, 64, seed=22)
    np.savez(tmp_path / "inputs.npz", x=x)
    arg = str(tmp_path / "inputs.npz") if form == "bare" else f"x={tmp_path / 'inputs.npz'}"
    aotc("run", out, "--input", arg, "--output-dir", tmp_path / "res", check_rc=0)
    got = np.load(tmp_path / "res" / "logits.npy")
    np.testing.assert_allclose(got, ort_run(path, {"x": x})[0], rtol=1e-4, atol=1e-5)


def test_run_with_wrong_inputs(mlp, tmp_path):
    _, out = mlp
    np.save(tmp_path / "x.npy", rand(2, 64, seed=23))
    p = aotc("run", out, "--input", f"x={tmp_path / 'x.npy'}", check_rc=2)
    assert_error_lines(p, "input 'x' has shape (2, 64), the model was compiled for (3, 64)", "--shape")
    np.save(tmp_path / "y.npy", rand(3, 64, seed=24))
    p = aotc("run", out, "--input", f"y={tmp_path / 'y.npy'}", check_rc=2)
    assert_error_lines(p, "unknown input(s) 'y'", "the model's inputs are: x")
    np.save(tmp_path / "xd.npy", rand(3, 64, seed=25).astype(np.float64))
    p = aotc("run", out, "--input", f"x={tmp_path / 'xd.npy'}", check_rc=2)
    assert_error_lines(p, "input 'x' has dtype float64, the model expects float32")
    p = aotc("run", out, "--input", f"x={tmp_path / 'missing.npy'}", check_rc=2)
    assert_error_lines(p, "no such file")
    p = aotc("run", tmp_path, check_rc=2)
    assert_error_lines(p, "has no manifest.json")


# ------------------------------------------------------------------------------------------ check
def test_check_passes_and_writes_reports(mlp, tmp_path):
    path, _ = mlp
    rep, ju = tmp_path / "r.json", tmp_path / "r.xml"
    p = aotc("check", path, "--target", "c", "--shape", "x=3x64", "--report", rep, "--junit", ju, check_rc=0)
    assert "PASS" in p.stdout and "logits" in p.stdout
    assert "expected outputs from ONNX Runtime" in p.stdout
    r = json.loads(rep.read_text())
    assert r["passed"] is True and r["target"] == "c" and r["reference"].startswith("ONNX Runtime ")
    (o,) = r["outputs"]
    assert o["name"] == "logits" and o["shape"] == [3, 10] and o["passed"] is True
    assert 0 <= o["max_abs_err"] < 1e-4
    suite = ET.parse(ju).getroot()
    assert suite.tag == "testsuite" and suite.get("tests") == "1" and suite.get("failures") == "0"
    assert [c.get("name") for c in suite.iter("testcase")] == ["logits"]
    assert not list(suite.iter("failure"))


def test_check_with_user_inputs(mlp, tmp_path):
    path, _ = mlp
    np.save(tmp_path / "x.npy", rand(4, 64, seed=26))
    rep = tmp_path / "r.json"
    aotc("check", path, "--input", f"x={tmp_path / 'x.npy'}", "--report", rep, check_rc=0)
    assert json.loads(rep.read_text())["outputs"][0]["shape"] == [4, 10]


def test_check_with_incomplete_or_unknown_inputs(tmp_path):
    a, b = rand(2, 3, seed=27), rand(2, 3, seed=28)
    m = graph_model([N("Add", ["a", "b"], ["y"])], {"a": a, "b": b}, ["y"])
    path = tmp_path / "two.onnx"
    onnx.save(m, str(path))
    np.save(tmp_path / "a.npy", a)
    np.save(tmp_path / "b.npy", b)
    p = aotc("check", path, "--input", f"a={tmp_path / 'a.npy'}", check_rc=2)
    assert_error_lines(p, "no --input given for 'b'", "or none, to draw seeded random inputs")
    p = aotc("check", path, "--input", f"a={tmp_path / 'a.npy'}", "--input", f"b={tmp_path / 'b.npy'}",
             "--input", f"c={tmp_path / 'a.npy'}", check_rc=2)
    assert_error_lines(p, "--input names 'c', which is not a graph input", "graph inputs are: a, b")
    rep = tmp_path / "r.json"
    aotc("check", path, "--input", f"a={tmp_path / 'a.npy'}", "--input", f"b={tmp_path / 'b.npy'}",
         "--report", rep, check_rc=0)
    assert json.loads(rep.read_text())["outputs"][0]["max_abs_err"] == 0.0


def test_check_exits_1_on_a_real_mismatch(mlp, tmp_path):
    """With zero tolerance, the ordinary float rounding differences between aotc's GEMM and
    ONNX Runtime's (different summation order) are mismatches: exit 1, and the reports say
    which output and by how much."""
    path, _ = mlp
    rep, ju = tmp_path / "r.json", tmp_path / "r.xml"
    p = aotc("check", path, "--shape", "x=16x64", "--rtol", "0", "--atol", "0", "--report", rep, "--junit", ju,
             check_rc=1)
    assert "MISMATCH" in p.stdout and "FAIL" in p.stdout
    (o,) = json.loads(rep.read_text())["outputs"]
    assert o["passed"] is False and o["mismatches"] > 0
    assert 0 < o["max_abs_err"] < 1e-4 and o["max_ulp"] >= 1, "a rounding difference, not garbage"
    suite = ET.parse(ju).getroot()
    assert suite.get("failures") == "1"
    (f,) = list(suite.iter("failure"))
    assert "max_abs_err" in f.get("message")


def test_check_exits_2_when_the_model_cannot_compile(unsupported_model, tmp_path):
    p = aotc("check", unsupported_model, "--keep", tmp_path / "kept", check_rc=2)
    assert "3 unsupported operator(s)" in p.stderr
    assert not (tmp_path / "kept").exists()


# ------------------------------------------------------------------------------------------ unsupported ops
def test_all_unsupported_ops_are_listed_before_code_generation(unsupported_model, tmp_path):
    out = tmp_path / "out"
    p = aotc("compile", unsupported_model, "-o", out, check_rc=2)
    assert "Traceback" not in p.stderr
    assert "3 unsupported operator(s)" in p.stderr
    assert "FancyA (domain com.example, opset 3) in node 'fancy_a'" in p.stderr
    assert "FancyB (domain com.example, opset 3) in node 'fancy_b'" in p.stderr
    assert "NotAnOnnxOp (domain ai.onnx, opset 17) in node 'made_up'" in p.stderr
    assert "'relu'" not in p.stderr
    assert not out.exists(), "nothing may be generated"


def test_inspect_lists_unsupported_ops(unsupported_model):
    p = aotc("inspect", unsupported_model, check_rc=2)
    assert "unsupported operators (3)" in p.stdout
    assert "FancyB (domain com.example, opset 3) in node 'fancy_b'" in p.stdout
    p = aotc("inspect", unsupported_model, "--json", check_rc=0)
    info = json.loads(p.stdout)
    assert [(u["op_type"], u["opset"], u["node"]) for u in info["unsupported"]] == [
        ("FancyA", 3, "fancy_a"), ("FancyB", 3, "fancy_b"), ("NotAnOnnxOp", 17, "made_up")]


# ------------------------------------------------------------------------------------------ inspect
def test_inspect_text_and_json(mlp):
    path, _ = mlp
    p = aotc("inspect", path, "--shape", "x=3x64", check_rc=0)
    for frag in ["op histogram:", "MatMul", "unsupported operators: none", "fusion groups:", "memory plan:",
                 "arena (workspace)", "lower bound (peak live)"]:
        assert frag in p.stdout, frag
    info = json.loads(aotc("inspect", path, "--shape", "x=3x64", "--json", check_rc=0).stdout)
    assert info["op_histogram"] == {"Add": 3, "MatMul": 2, "Gemm": 1, "Relu": 1, "Tanh": 1}
    assert info["kernels"] == len(info["groups"]) >= 1
    mp = info["memory_plan"]
    assert mp["lower_bound_bytes"] <= mp["arena_bytes"] <= mp["intermediates_bytes"]
    assert info["inputs"] == {"x": [3, 64]} and info["outputs"] == {"logits": [3, 10]}


# ------------------------------------------------------------------------------------------ errors
def test_not_an_onnx_file(tmp_path):
    bad = tmp_path / "bad.onnx"
    bad.write_text("not a model\n")
    p = aotc("compile", bad, "-o", tmp_path / "out", check_rc=2)
    assert_error_lines(p, "is not an ONNX model", "hint: is the file truncated, or another format?")
    p = aotc("compile", tmp_path / "nope.onnx", "-o", tmp_path / "out", check_rc=2)
    assert_error_lines(p, "no such file")
    p = aotc("check", bad, check_rc=2)
    assert_error_lines(p, "is not an ONNX model")


def test_verbose_adds_the_traceback(tmp_path):
    bad = tmp_path / "bad.onnx"
    bad.write_text("not a model\n")
    p = aotc("--verbose", "compile", bad, "-o", tmp_path / "out", check_rc=2)
    assert "Traceback" in p.stderr and "error: " in p.stderr


def test_unbound_symbolic_dim_names_the_input_and_the_flag(mlp, tmp_path):
    path, _ = mlp
    p = aotc("compile", path, "-o", tmp_path / "out", check_rc=2)
    assert_error_lines(p, "input 'x' has unbound symbolic dimensions", "--shape x=1x64")
    p = aotc("inspect", path, check_rc=2)
    assert_error_lines(p, "--shape x=")


def test_bad_flags_are_one_line_errors(mlp, tmp_path):
    path, _ = mlp
    for args, frag in [(["--shape", "x=3xq"], "dims must be integers"),
                       (["--shape", "x3x64"], "is not NAME=DIMS"),
                       (["--shape", "x=3x64", "--target", "nosuch"], "unknown target 'nosuch'"),
                       (["--shape", "x=3x64", "--const", "x=nothere.npy"], "no such file"),
                       (["--shape", "y=1x64"], "'y', which is not a graph input")]:
        p = aotc("compile", path, "-o", tmp_path / "out", *args, check_rc=2)
        assert_error_lines(p, frag)


def test_shape_error_exit_code(tmp_path):
    m = graph_model([N("MatMul", ["a", "b"], ["y"], name="mm")], {"a": rand(2, 3), "b": rand(4, 5)}, ["y"])
    path = tmp_path / "m.onnx"
    onnx.save(m, str(path))
    p = aotc("compile", path, "-o", tmp_path / "out", check_rc=2)
    assert_error_lines(p, "MatMul node 'mm': inner dimensions differ")


def test_version():
    p = aotc("--version", check_rc=0)
    assert p.stdout.startswith("aotc ")


def test_inspect_reports_outputs_by_their_onnx_names(tmp_path):
    """An output that is also the graph input is copied under an internal name; inspect (like
    the manifest) still calls it by the model's name."""
    m = graph_model([N("Relu", ["x"], ["r"])], {"x": rand(2, 3)}, ["x", "r"])
    path = tmp_path / "inout.onnx"
    onnx.save(m, str(path))
    info = json.loads(aotc("inspect", path, "--json", check_rc=0).stdout)
    assert info["outputs"] == {"x": [2, 3], "r": [2, 3]}


@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_check_error_measures(dt):
    """What `check` prints: max abs/rel error and max ULP (across zero and for either width),
    NaN equal to NaN, same-signed infinities equal."""
    from aotc.check.parity import compare
    tiny = np.finfo(dt).smallest_subnormal
    one_up = np.nextafter(dt(1), dt(2))
    ref = np.array([tiny, 1.0, -1.0, np.nan, np.inf, 2.0], dt)
    got = np.array([-tiny, one_up, np.nextafter(dt(-1), dt(-2)), np.nan, np.inf, 2.0], dt)
    r = compare("y", got, ref, rtol=0, atol=0)
    assert r.max_ulp == 2.0                           # -tiny .. +tiny is two steps
    assert r.max_abs_err == pytest.approx(float(one_up) - 1.0, rel=1e-6)
    assert r.mismatches == 3 and not r.passed
    assert compare("y", got, ref, rtol=1e-6, atol=1e-40).passed
    for k, wrong in ((4, -np.inf), (4, 1e30), (5, np.inf), (5, np.nan), (3, 0.0)):
        bad = got.copy()
        bad[k] = wrong                                # an infinity or NaN on one side only
        r = compare("y", bad, ref, rtol=1e-3, atol=1e-3)
        assert not r.passed and r.mismatches == 1, (k, wrong)
