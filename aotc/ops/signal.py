"""Window functions (HannWindow, HammingWindow, BlackmanWindow): generalized cosine windows
whose length is a compile-time constant, so that the whole window is one: it is computed here
(in float64, then cast) and becomes a weight of the artifact.

w[n] = a0 - a1 cos(2 pi n / N) + a2 cos(4 pi n / N), n < size, N = size when periodic (the
default) else size - 1 (a symmetric window of 1 is then NaN, as in ONNX Runtime and the
reference)."""
from __future__ import annotations

import numpy as np

from ..errors import ShapeError, UnsupportedError
from ..ir import dtypes
from .registry import register

_COEFFS = {"HannWindow": (0.5, 0.5, 0.0), "HammingWindow": (25 / 46, 21 / 46, 0.0),
           "BlackmanWindow": (0.42, 0.5, 0.08)}


def _size(node, ins) -> int:
    v = ins[0]
    if v is None or v.const is None:
        raise ShapeError(f"{node.op_type} node {node.name!r}: size must be known at compile time "
                         "(the output's length)", "bind the input that feeds it with --const")
    arr = np.asarray(v.const).reshape(-1)
    if arr.size != 1 or int(arr[0]) < 0:
        raise ShapeError(f"{node.op_type} node {node.name!r}: size {arr.tolist()} must be one value >= 0")
    return int(arr[0])


def _dtype(node) -> np.dtype:
    code = int(node.attr("output_datatype", 1))
    try:
        dt = dtypes.from_onnx(code)
    except dtypes.UnsupportedDtype:
        raise UnsupportedError([f"{node.op_type} node {node.name!r} with output_datatype {code}"]) from None
    return dt


def _fold(node, ins):
    size = _size(node, ins)
    a0, a1, a2 = _COEFFS[node.op_type]
    span = size if int(node.attr("periodic", 1)) else size - 1
    n = np.arange(size, dtype=np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        x = 2.0 * np.pi * n / np.float64(span)         # size 1, symmetric: 0 / 0, NaN as in ONNX Runtime
    w = a0 - a1 * np.cos(x) + a2 * np.cos(2.0 * x)
    return [w.astype(_dtype(node))]


def _infer(node, ins):
    return [(_dtype(node), (_size(node, ins),))]


register(list(_COEFFS), fold=_fold, const_inputs=(0,))(_infer)
