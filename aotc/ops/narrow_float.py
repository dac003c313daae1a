"""aotc.RoundFloat: a value rounded to a narrower float type, kept in float32.

Inside a graph every 16-bit float is computed in float32 (aotc/frontend/half.py). A Cast to
bfloat16 there becomes this op (attribute `to` = BFLOAT16): the value, cast to float32 as for
any Cast, is rounded to the nearest bfloat16 (ties to even) and stays a float32 holding that
bfloat16 exactly, as ONNX's Cast asks and ONNX Runtime computes. bfloat16 is float32's upper
16 bits, so the rounding is a few integer operations on the float's bits, which every printer
spells with the kernel IR's BITCAST: add 0x7fff plus the lowest kept bit, clear the 16 low
bits. Infinities stay infinite, a finite value past bfloat16's largest rounds to infinity, a
NaN stays the same NaN (the bit arithmetic would carry some NaNs into infinity or zero, so
NaN is selected apart). A float64 or integer input is cast to float32 first, so a value
that only rounds to a bfloat16 tie in float32 may round once more than a direct conversion.

A Cast to float16 inside a graph does not come here: it computes in float32 without rounding,
as ONNX Runtime's CPU provider does there (it drops the Casts around float16 ops it runs in
float32), which docs/DESIGN.md records.
"""
from __future__ import annotations

import numpy as np
from onnx import TensorProto

from ..errors import UnsupportedError
from ..ir import dtypes
from ..kernel.ir import BITCAST, F32, U32, Builder, Expr, binop, call, cast, select
from .registry import register

ROUND_FLOAT = "aotc.RoundFloat"


def round_to_bfloat16(x: Expr, bld: Builder | None = None) -> Expr:
    """x (float32) rounded to the nearest bfloat16, ties to even, as a float32 (with a
    builder, x's bits go into a local first, which reads better than three bitcasts)."""
    u = call(BITCAST, x, dtype=U32)
    if bld is not None:
        u = bld.local("bits", u)
    lowest_kept = binop("&", binop(">>", u, 16), 1)
    rounded = binop("<<", binop(">>", u + 0x7FFF + lowest_kept, 16), 16)
    return select(binop("!=", x, x), x, call(BITCAST, rounded, dtype=F32))


_ROUNDINGS = {TensorProto.BFLOAT16: round_to_bfloat16}


def _round(node, args, bld):
    return _ROUNDINGS[int(node.attr("to"))](cast(args[0], F32), bld)


_round.checked = True      # (the chain lowering hands it the builder; it adds a local, no check)


def _fold(node, ins):
    """The op on a constant, in numpy: ml_dtypes' bfloat16 rounds to nearest even too (the ONNX
    reference implementation has no aotc op to run)."""
    x = ins[0].const
    if x is None:
        return None
    narrow = dtypes.from_onnx(int(node.attr("to")))
    return [np.asarray(x).astype(np.float32).astype(narrow).astype(np.float32)]


@register(ROUND_FLOAT, pointwise=_round, fold=_fold)
def _round_infer(node, ins):
    to = int(node.attr("to"))
    if to not in _ROUNDINGS:
        raise UnsupportedError([f"{ROUND_FLOAT} node {node.name!r} to {TensorProto.DataType.Name(to)}"])
    return [(dtypes.FLOAT32, ins[0].shape)]
