"""The README's examples run as written: the quickstart's commands, the Python API example, and
the complete C program, which compiles against a real artifact and prints ORT's answer."""
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from aotc.compiler import compile_model
from models.zoo import ZOO

ROOT = Path(__file__).resolve().parent.parent


def test_readme_c_example(tmp_path):
    text = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```c\n(.*?)```", text, re.S)
    program = next(b for b in blocks if "int main" in b)
    model = tmp_path / "mlp.onnx"
    onnx.save(ZOO["mlp"].build("small"), str(model))
    out = compile_model(model, output_dir=tmp_path / "out", name="mlp", shapes={"x": (1, 64)})
    (tmp_path / "app.c").write_text(program)
    exe = tmp_path / "app"
    subprocess.run(["cc", "-std=c99", "-Wall", "-Werror", f"-I{out}", str(tmp_path / "app.c"), f"-L{out}", "-lmlp",
                    f"-Wl,-rpath,{out}", "-o", str(exe)], check=True)
    printed = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout.split()
    got = np.array([float(v) for v in printed], dtype=np.float32)
    x = (np.arange(64, dtype=np.float32) / 64.0).reshape(1, 64)
    ref = ort.InferenceSession(str(model)).run(None, {"x": x})[0].reshape(-1)
    assert got.shape == ref.shape
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-5)


def _section(text: str, heading: str) -> str:
    """The README's text under `## heading`, up to the next `## `."""
    return re.search(rf"^## {re.escape(heading)}\n(.*?)(?=^## |\Z)", text, re.S | re.M).group(1)


def _image_model(path: Path, rng) -> None:
    """A small model with the quickstart's input: x[1, 3, 224, 224] -> pooled -> Gemm -> y[1, 5]."""
    w = numpy_helper.from_array(rng.standard_normal((5, 3)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(5).astype(np.float32), "b")
    g = helper.make_graph([helper.make_node("GlobalAveragePool", ["x"], ["p"]),
                           helper.make_node("Flatten", ["p"], ["f"]),
                           helper.make_node("Gemm", ["f", "w", "b"], ["y"], transB=1)], "image",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3, 224, 224])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 5])], [w, b])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))


def test_readme_quickstart_runs(tmp_path):
    """Every line of the quickstart, as written, on a model with its input; the outputs it writes
    are ONNX Runtime's on the input it drew, and check passes."""
    block, = re.findall(r"```sh\n(.*?)```", _section((ROOT / "README.md").read_text(), "Quickstart"), re.S)
    lines = [ln for ln in block.splitlines() if ln.strip()]
    assert len(lines) <= 5 and [ln.split()[:2] for ln in lines if ln.startswith("aotc")][:3] == \
        [["aotc", "compile"], ["aotc", "run"], ["aotc", "check"]]
    _image_model(tmp_path / "model.onnx", np.random.default_rng(31))
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           "PYTHONPATH": str(ROOT), "NO_COLOR": "1"}
    printed = {}
    for line in lines:
        p = subprocess.run(["bash", "-c", line], cwd=tmp_path, env=env, capture_output=True, text=True,
                           timeout=300)
        assert p.returncode == 0, f"{line}\n{p.stdout}\n{p.stderr}"
        printed[line.split()[1] if line.startswith("aotc") else "python"] = p.stdout
    assert (tmp_path / "out" / "libmodel.so").is_file() and (tmp_path / "out" / "model.h").is_file()
    x = np.load(tmp_path / "x.npy")
    assert x.shape == (1, 3, 224, 224) and x.std() > 0.1
    ref = ort.InferenceSession(str(tmp_path / "model.onnx")).run(None, {"x": x})[0]
    np.testing.assert_allclose(np.load(tmp_path / "results" / "y.npy"), ref, rtol=1e-4, atol=1e-5)
    assert "PASS" in printed["check"]
    assert "kernel" in printed["inspect"]


def test_readme_python_example_runs(tmp_path, monkeypatch):
    """The Python API example, run as written next to a model with its input: y is ONNX
    Runtime's answer, and the artifact loaded alone gives the same."""
    block, = re.findall(r"```python\n(.*?)```", _section((ROOT / "README.md").read_text(), "Python API"), re.S)
    _image_model(tmp_path / "model.onnx", np.random.default_rng(32))
    monkeypatch.chdir(tmp_path)
    scope: dict = {}
    exec(compile(block, "README.md", "exec"), scope)
    x, y, m2 = scope["x"], scope["y"], scope["m2"]
    ref = ort.InferenceSession(str(tmp_path / "model.onnx")).run(None, {"x": x})[0]
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-5)
    assert m2.threads == 1
    np.testing.assert_array_equal(m2.run([x])[0], y)
