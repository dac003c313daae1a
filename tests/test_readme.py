"""The README's examples run as written: the quickstart's commands, the Python API example, and
the complete C program, built against a real artifact by each of the README's ways (cc,
pkg-config, CMake; shared and static), printing ONNX Runtime's answer."""
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from models.zoo import ZOO

ROOT = Path(__file__).resolve().parent.parent


def _run_c_program(exe: Path) -> np.ndarray:
    printed = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout.split()
    return np.array([float(v) for v in printed], dtype=np.float32)


def _needs_libmlp_so(exe: Path) -> bool:
    dynamic = subprocess.run(["readelf", "-d", str(exe)], check=True, capture_output=True, text=True).stdout
    return "[libmlp.so]" in dynamic


class CExample:
    """The README's C API section: its program, its build commands and CMake project, and the
    artifact its `aotc compile` line makes, in a directory of their own."""

    def __init__(self, where: Path):
        section = _section((ROOT / "README.md").read_text(), "C API")
        self.program = next(b for b in re.findall(r"```c\n(.*?)```", section, re.S) if "int main" in b)
        self.commands = [ln for ln in re.findall(r"```sh\n(.*?)```", section, re.S)[0].splitlines() if ln.strip()]
        self.cmakelists = re.findall(r"```cmake\n(.*?)```", section, re.S)[0]
        self.dir = where
        model = where / "mlp.onnx"
        onnx.save(ZOO["mlp"].build("small"), str(model))
        (where / "app.c").write_text(self.program)
        self.sh(re.search(r"`(aotc compile [^`]*)`", section).group(1))
        x = (np.arange(64, dtype=np.float32) / 64.0).reshape(1, 64)
        self.expected = ort.InferenceSession(str(model)).run(None, {"x": x})[0].reshape(-1)

    def sh(self, line: str, cwd: Path | None = None) -> None:
        env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
               "PYTHONPATH": str(ROOT), "NO_COLOR": "1"}
        p = subprocess.run(["bash", "-c", line], cwd=cwd or self.dir, env=env, capture_output=True, text=True,
                           timeout=300)
        assert p.returncode == 0, f"{line}\n{p.stdout}\n{p.stderr}"

    def check(self, exe: Path, static: bool) -> None:
        """The program prints ONNX Runtime's logits; a static build does not load libmlp.so."""
        printed = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout.split()
        np.testing.assert_allclose(np.array([float(v) for v in printed], np.float32), self.expected,
                                   rtol=1e-4, atol=1e-5)
        dynamic = subprocess.run(["readelf", "-d", str(exe)], check=True, capture_output=True, text=True).stdout
        assert ("[libmlp.so]" in dynamic) != static, dynamic


@pytest.fixture(scope="module")
def c_example(tmp_path_factory):
    return CExample(tmp_path_factory.mktemp("readme_c"))


def test_readme_c_example_with_cc(c_example):
    """The program and the plain cc command: it prints ONNX Runtime's answer."""
    line, = [ln for ln in c_example.commands if "pkg-config" not in ln]
    c_example.sh(line + " -Wall -Werror")
    c_example.check(c_example.dir / "app", static=False)


@pytest.mark.skipif(shutil.which("pkg-config") is None, reason="pkg-config is not installed (.ci/run installs it)")
def test_readme_c_example_with_pkg_config(c_example):
    """Both pkg-config lines: out/mlp.pc links libmlp.so, out/mlp-static.pc libmlp.a."""
    lines = [ln for ln in c_example.commands if "pkg-config" in ln]
    assert len(lines) == 2 and "mlp-static" in lines[1]
    for line in lines:
        exe = c_example.dir / "app"
        exe.unlink(missing_ok=True)
        c_example.sh(line + " -Wall -Werror")
        c_example.check(exe, static="mlp-static" in line)


@pytest.mark.skipif(shutil.which("cmake") is None, reason="cmake is not installed (.ci/run installs it)")
@pytest.mark.parametrize("lib", ["mlp::mlp", "mlp::mlp_static"])
def test_readme_c_example_with_cmake(c_example, lib, tmp_path):
    """The CMake project as written (find_package(mlp) from out/mlpConfig.cmake), linking the
    shared library and, as its comment says, the static one."""
    assert "target_link_libraries(app PRIVATE mlp::mlp)" in c_example.cmakelists
    (tmp_path / "app.c").write_text(c_example.program)
    (tmp_path / "CMakeLists.txt").write_text(c_example.cmakelists.replace("PRIVATE mlp::mlp)", f"PRIVATE {lib})"))
    c_example.sh(f"cmake -S . -B build -Dmlp_DIR={c_example.dir / 'out'} > /dev/null && cmake --build build > /dev/null",
                 cwd=tmp_path)
    c_example.check(tmp_path / "build" / "app", static=lib.endswith("_static"))


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


def test_readme_run_time_sizes_example(tmp_path):
    """The section on sizes chosen at run time: its compile lines make artifacts of the model's
    batch range, its C program runs three sizes from one library, each output of the run's
    shape and ONNX Runtime's value; its check line passes."""
    section = _section((ROOT / "README.md").read_text(), "Sizes chosen at run time")
    lines = [ln.split("#")[0].strip() for ln in re.findall(r"```sh\n(.*?)```", section, re.S)[0].splitlines()
             if ln.strip()]
    program = re.findall(r"```c\n(.*?)```", section, re.S)[0]
    model = ZOO["mlp"].build("small")
    onnx.save(model, str(tmp_path / "mlp.onnx"))
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           "PYTHONPATH": str(ROOT), "NO_COLOR": "1"}
    for line in lines:
        p = subprocess.run(["bash", "-c", line + " --no-cache" * line.startswith("aotc compile")], cwd=tmp_path,
                           env=env, capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, f"{line}\n{p.stdout}\n{p.stderr}"
        if line.startswith("aotc check"):
            assert "PASS" in p.stdout and "[batch=32]" in p.stdout
    out = tmp_path / "out"
    (tmp_path / "app.c").write_text(program)
    subprocess.run(["cc", "-std=c99", f"-I{out}", "app.c", f"-L{out}", "-lmlp", f"-Wl,-rpath,{out}", "-o", "app"],
                   cwd=tmp_path, check=True)
    printed = subprocess.run([str(tmp_path / "app")], check=True, capture_output=True, text=True).stdout.split("\n")
    x = (np.arange(32 * 64) % 64 / 64.0).astype(np.float32).reshape(32, 64)
    sess = ort.InferenceSession(str(tmp_path / "mlp.onnx"))
    for batch, line in zip((1, 2, 3), printed):
        rows, cols, first = line.split()
        want = sess.run(None, {"x": x[:batch]})[0]
        assert (int(rows), int(cols)) == want.shape
        np.testing.assert_allclose(float(first), want[0, 0], rtol=1e-4, atol=1e-5)
