"""Recurrent classifiers, shaped like PyTorch exports of nn.LSTM / nn.GRU stacks.

Two recurrent layers (the second bidirectional) read a sequence x [seq, 1, features];
the final hidden states of both directions feed a small Gemm classifier. Only the
recurrent ops, views (Squeeze/Reshape), Gemm and Relu are used.
"""
from __future__ import annotations

import numpy as np

from .builder import ModelBuilder

_GATES = {"LSTM": 4, "GRU": 3}


def _sizes(size: str):
    # features, hidden of layer 1, hidden of layer 2, classifier width, classes
    return (16, 32, 24, 32, 10) if size == "small" else (64, 128, 128, 128, 10)


def _recurrent_layer(b: ModelBuilder, op: str, x: str, d_in: int, hidden: int, bidirectional: bool,
                     outputs: tuple[bool, ...], **attrs) -> list[str]:
    """One LSTM/GRU node with PyTorch-like weights; returns its (Y, Y_h[, Y_c]) names ('' = absent)."""
    g, d = _GATES[op], 2 if bidirectional else 1
    w = b.weight((d, g * hidden, d_in), hidden, gain=1.0, hint="w_ih")
    r = b.weight((d, g * hidden, hidden), hidden, gain=1.0, hint="w_hh")
    bias = b.const((b.rng.standard_normal((d, 2 * g * hidden)) / np.sqrt(hidden)).astype(np.float32), "b")
    name = b.fresh(op.lower())
    outs = [f"{name}_{k}" if keep else "" for k, keep in zip(("y", "y_h", "y_c"), outputs)]
    b.op(op, [x, w, r, bias], name=name, outputs=outs, hidden_size=hidden,
         direction="bidirectional" if bidirectional else "forward", **attrs)
    return outs


def _classifier(b: ModelBuilder, h_final: str, width: int, d_hidden: int, n_classes: int) -> None:
    # Y_h [2, 1, H] -> [1, 2H]: forward and backward final states side by side
    feat = b.op("Reshape", [h_final, b.const(np.array([1, width], np.int64), "shape")])
    h = b.op("Relu", [b.linear(feat, width, d_hidden, use_gemm=True)])
    b.op("Gemm", [h, b.weight((n_classes, d_hidden), d_hidden, gain=1.0), b.bias(n_classes)], transB=1,
         outputs=["logits"])
    b.output("logits", [1, n_classes])


def _stack(op: str, size: str, seed: int, **attrs):
    f, h1, h2, d_hidden, n_classes = _sizes(size)
    b = ModelBuilder(op.lower(), opset=17, seed=seed)
    x = b.input("x", ["seq", 1, f])
    n_out = 3 if op == "LSTM" else 2
    y1 = _recurrent_layer(b, op, x, f, h1, False, (True,) + (False,) * (n_out - 1), **attrs)[0]
    y1 = b.op("Squeeze", [y1, b.const(np.array([1], np.int64), "axes")])      # [seq, 1, H1]
    outs = _recurrent_layer(b, op, y1, h1, h2, True, (False, True) + (True,) * (n_out - 2), **attrs)
    _classifier(b, outs[1], 2 * h2, d_hidden, n_classes)
    return b.build()


def lstm(size: str = "small"):
    """2-layer LSTM (forward, then bidirectional) + 2-layer Gemm classifier on the final states."""
    return _stack("LSTM", size, seed=21)


def gru(size: str = "small"):
    """2-layer GRU as PyTorch exports it (linear_before_reset=1) + Gemm classifier."""
    return _stack("GRU", size, seed=22, linear_before_reset=1)
