"""The model zoo: name -> builder(size) -> onnx.ModelProto, plus the shapes to compile with.

`size="small"` variants keep `make test` fast; `size="full"` are the real architectures
(ResNet-50, BERT-base, GPT-2 small, ...) checked by `make zoo-full`.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field


@dataclass
class ZooEntry:
    name: str
    builder: str                  # "module:function" inside this package
    shapes: dict = field(default_factory=dict)         # input -> shape, for --shape
    full_shapes: dict | None = None
    rtol: float = 1e-4
    atol: float = 1e-5
    note: str = ""

    def build(self, size: str = "small"):
        mod, fn = self.builder.split(":")
        return getattr(importlib.import_module(f"models.{mod}"), fn)(size)

    def shapes_for(self, size: str) -> dict:
        return self.full_shapes if (size == "full" and self.full_shapes is not None) else self.shapes


ZOO: dict[str, ZooEntry] = {}


def entry(name: str, builder: str, shapes: dict, full_shapes: dict | None = None, **kw) -> None:
    ZOO[name] = ZooEntry(name, builder, shapes, full_shapes, **kw)


entry("mlp", "mlp:mlp", {"x": (1, 64)}, {"x": (8, 784)})

# CNNs (models/cnn.py)
entry("lenet5", "cnn:lenet5", {"x": (1, 1, 32, 32)}, {"x": (1, 1, 32, 32)})
entry("resnet50", "cnn:resnet50", {"x": (1, 3, 64, 64)}, {"x": (1, 3, 224, 224)})
entry("mobilenetv2", "cnn:mobilenetv2", {"x": (1, 3, 64, 64)}, {"x": (1, 3, 224, 224)})
# PP-LCNet and MobileNetV3-Large as torch.onnx exports them, trained-looking weights (models/mobile.py)
entry("pplcnet", "mobile:pplcnet", {"x": (1, 3, 64, 64)}, {"x": (1, 3, 224, 224)})
entry("mobilenetv3", "mobile:mobilenetv3", {"x": (1, 3, 64, 64)}, {"x": (1, 3, 224, 224)})
# (models/cnn.py)
entry("yolo", "cnn:yolo", {"x": (1, 3, 64, 64)}, {"x": (1, 3, 320, 320)})
# as older exporters write them (models/legacy.py)
entry("legacy_opset11", "legacy:legacy_opset11", {"x": (1, 3, 32, 32)}, {"x": (1, 3, 224, 224)})
entry("legacy_opset13", "legacy:legacy_opset13", {"x": (1, 3, 32, 32)}, {"x": (1, 3, 224, 224)})
# transformers (models/transformers.py)
entry("bert", "transformers:bert", {"input_ids": (1, 16), "attention_mask": (1, 16)},
      {"input_ids": (1, 128), "attention_mask": (1, 128)})
entry("gpt2", "transformers:gpt2", {"input_ids": (1, 16)}, {"input_ids": (1, 64)})
entry("vit", "transformers:vit", {"pixel_values": (1, 3, 32, 32)}, {"pixel_values": (1, 3, 224, 224)})
# recurrent (models/recurrent.py)
entry("lstm", "recurrent:lstm", {"x": (8, 1, 16)}, {"x": (32, 1, 64)})
entry("gru", "recurrent:gru", {"x": (8, 1, 16)}, {"x": (32, 1, 64)})
