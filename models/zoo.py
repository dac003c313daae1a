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
