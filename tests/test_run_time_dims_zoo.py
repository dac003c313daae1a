"""The zoo over run-time dimensions (issue 28's parity list): ResNet-50 and MobileNetV2 (small) over
batch, height and width, ViT over batch, BERT and GPT-2 over batch and sequence, one artifact
each, against ONNX Runtime at both ends of every range and two sizes between, on fresh random
inputs. The transformers name their dims (dim_param) as exporters write them; the CNNs are built
with fixed input sizes, so their inputs are renamed to symbolic dims first, as an exporter with
dynamic axes writes them (models/build.py `symbolic_input`).

The zoo's YOLO is built with its head's Reshape targets read from Shape (models/cnn.py yolo's
`dynamic`), as a dynamic export writes them; its hand-built default has them constant. Not
here: legacy_opset11, whose Resize takes constant output sizes (a scale that depends on the
run's size is refused by name)."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from aotc.api import load
from aotc.compiler import compile_model
from models.build import symbolic_input
from models.cnn import yolo
from models.zoo import ZOO


# model -> (symbolic names of its input's dims or None, compile kwargs, the sizes tried: {input: shape})
CASES = {
    "resnet50": (["batch", None, "h", "w"], {"dims": {"batch": (1, 2), "h": (32, 96, 32), "w": (32, 96, 32)}},
                 [{"x": s} for s in ((1, 3, 32, 32), (2, 3, 64, 96), (1, 3, 96, 64), (2, 3, 96, 96))]),
    "mobilenetv2": (["batch", None, "h", "w"], {"dims": {"batch": (1, 2), "h": (32, 96, 32), "w": (32, 96, 32)}},
                    [{"x": s} for s in ((1, 3, 32, 32), (2, 3, 64, 32), (1, 3, 32, 96), (2, 3, 96, 96))]),
    "yolo": (["batch", None, "h", "w"], {"dims": {"batch": (1, 2), "h": (32, 128, 32), "w": (32, 128, 32)}},
             [{"x": s} for s in ((1, 3, 32, 32), (2, 3, 64, 96), (1, 3, 128, 32), (2, 3, 128, 128))]),
    "vit": (None, {"dims": {"batch": (1, 8)}},
            [{"pixel_values": (n, 3, 32, 32)} for n in (1, 3, 5, 8)]),
    "bert": (None, {"dims": {"batch": (1, 2), "sequence": (1, 32)}},
             [{"input_ids": s, "attention_mask": s} for s in ((1, 1), (2, 7), (1, 20), (2, 32))]),
    "gpt2": (None, {"dims": {"batch": (1, 2), "sequence": (1, 32)}},
             [{"input_ids": s} for s in ((1, 1), (2, 9), (1, 24), (2, 32))]),
}


def _feeds(shapes: dict, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    out = {}
    for name, shape in shapes.items():
        if name == "attention_mask":
            m = (rng.random(shape) > 0.3).astype(np.int64)
            m[:, 0] = 1
            out[name] = m
        elif name == "input_ids":
            out[name] = rng.integers(0, 50, shape).astype(np.int64)
        else:
            out[name] = rng.standard_normal(shape).astype(np.float32)
    return out


@pytest.mark.parametrize("name", sorted(CASES))
def test_zoo_model_over_run_time_dims(name, tmp_path):
    names, kw, sizes = CASES[name]
    model = yolo("small", dynamic=True) if name == "yolo" else ZOO[name].build("small")
    if names:
        model = symbolic_input(model, names)
    path = Path(tmp_path) / f"{name}.onnx"
    onnx.save(model, str(path))
    out = compile_model(path, target="native", output_dir=tmp_path / "out", threads=2, **kw)
    if name == "resnet50":      # (its last 3 x 3 convolution: Winograd, one block of the run's whole plane)
        assert re.search(r"Winograd F\(2x2, 3x3\): h/32 x w/32 tiles .* in blocks of h/32 row", (out / f"{name}.c").read_text())
    m = load(out, threads=2)
    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    for k, shapes in enumerate(sizes):
        feeds = _feeds(shapes, k)
        got, want = m.run(feeds), sess.run(None, feeds)
        for g, w in zip(got, want):
            assert g.shape == w.shape
            np.testing.assert_allclose(g, w, rtol=ZOO[name].rtol, atol=ZOO[name].atol)
