"""The README's complete C example compiles against a real artifact and prints ORT's answer."""
import re
import subprocess
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

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
