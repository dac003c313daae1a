"""A multi-layer perceptron: MatMul+Add, Gemm, Relu, Tanh, Softmax-free logits."""
from __future__ import annotations

from .builder import ModelBuilder


def mlp(size: str = "small"):
    d_in, hidden, d_out = (64, 128, 10) if size == "small" else (784, 512, 10)
    b = ModelBuilder("mlp", opset=17, seed=1)
    x = b.input("x", ["batch", d_in])
    h = b.op("Relu", [b.linear(x, d_in, hidden)])
    h = b.op("Tanh", [b.linear(h, hidden, hidden, gain=1.0, use_gemm=True)])
    b.op("Add", [b.linear(h, hidden, d_out), b.const(__import__("numpy").float32([0.5]), "offset")],
         outputs=["logits"])
    b.output("logits", ["batch", d_out])
    return b.build()
