"""aotc.RoundFloat and aotc.WrapInt: a value made one of a narrower type, kept in the type that
type computes in.

Inside a graph every float narrower than float32 is computed in float32, and every 4- or 2-bit
integer in int8 / uint8 (aotc/frontend/narrow.py). A Cast to such a type there becomes one of
these ops, whose result holds a value of the narrow type exactly:

aotc.RoundFloat (attributes `to`, `saturate`): float32 in and out, the value rounded to the
nearest value of `to` (ties to even), as ONNX's Cast says and ONNX Runtime computes.
  * bfloat16 is float32's upper 16 bits, so the rounding is a few integer operations on the
    float's bits (add 0x7fff plus the lowest kept bit, clear the 16 low bits), which every
    printer spells with the kernel IR's BITCAST. Infinities stay infinite, a finite value past
    bfloat16's largest rounds to infinity, a NaN stays the same NaN (the bit arithmetic would
    carry some NaNs into infinity or zero, so NaN is selected apart).
  * The 8-bit floats (E4M3FN, E4M3FNUZ, E5M2, E5M2FNUZ) and the 4-bit E2M1: the value's
    quantum q is 2^(e - m) for its exponent e (the format's least normal exponent at least)
    and the format's m mantissa bits, and rint(x / q) * q rounds to nearest even in the
    default rounding mode (x / q and the product are exact: q is a power of two). A value
    past the format's largest finite one then saturates to it (`saturate` = 1, ONNX's default;
    E2M1 always), or becomes infinity (E5M2) or NaN (the formats without infinities). The
    FNUZ formats have no negative zero. A NaN stays NaN (E2M1, which has none: -0, as
    ml_dtypes and so ONNX's reference implementation make it).
  * E8M0 (a power of two 2^(c - 127) for codes c of 0 .. 254, 255 the NaN): the float32's
    exponent field, rounded by the attribute `round_mode` ("up", ONNX's default: one more
    when any mantissa bit is set; "down"; "nearest": by the mantissa's guard, round and sticky
    bits, as ONNX's reference to_float8e8m0) and, with `saturate`, kept at 254 (else 255,
    NaN); infinity and NaN give NaN; the sign is ignored (ONNX leaves negative values
    undefined).
A float64 or integer input is cast to float32 first, so a value that only rounds to a tie in
float32 may round once more than a direct conversion.

aotc.WrapInt (attribute `to`: INT4, UINT4, INT2, UINT2): the value cast to an integer (a float
truncated toward zero), then wrapped into the type's range (its low 4 or 2 bits, two's
complement), as ONNX's reference implementation casts; int8 or uint8 out. A float at or beyond
2^31 in magnitude, an infinity or NaN gives 0 (the low bits of such a float are 0), the same on
every target.

A Cast to float16 inside a graph does not come here: it computes in float32 without rounding,
as ONNX Runtime's CPU provider does there (it drops the Casts around float16 ops it runs in
float32), which docs/DESIGN.md records.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from onnx import TensorProto

from ..errors import UnsupportedError
from ..ir import dtypes
from ..ir.internal import ROUND_FLOAT, WRAP_INT
from ..kernel.ir import BITCAST, F32, I32, U32, Builder, Expr, binop, call, cast, const, select
from .registry import register



def round_to_bfloat16(x: Expr, bld: Builder | None = None) -> Expr:
    """x (float32) rounded to the nearest bfloat16, ties to even, as a float32 (with a
    builder, x's bits go into a local first, which reads better than three bitcasts)."""
    u = call(BITCAST, x, dtype=U32)
    if bld is not None:
        u = bld.local("bits", u)
    lowest_kept = binop("&", binop(">>", u, 16), 1)
    rounded = binop("<<", binop(">>", u + 0x7FFF + lowest_kept, 16), 16)
    return select(binop("!=", x, x), x, call(BITCAST, rounded, dtype=F32))


@dataclass(frozen=True)
class SmallFloat:
    """An 8- or 4-bit float format: mantissa bits, least normal exponent (unbiased), largest
    finite value, and how it spells the values float32 has beyond those."""
    mantissa: int
    min_exp: int
    largest: float
    infinities: bool       # E5M2: overflow without saturation gives +-inf (else NaN)
    negative_zero: bool    # has -0 (False for FNUZ, whose 0x80 is the NaN)
    nans: bool = True      # E2M1 has no NaN


FORMATS = {
    TensorProto.FLOAT8E4M3FN: SmallFloat(3, -6, 448.0, False, True),
    TensorProto.FLOAT8E4M3FNUZ: SmallFloat(3, -7, 240.0, False, False),
    TensorProto.FLOAT8E5M2: SmallFloat(2, -14, 57344.0, True, True),
    TensorProto.FLOAT8E5M2FNUZ: SmallFloat(2, -15, 57344.0, False, False),
    TensorProto.FLOAT4E2M1: SmallFloat(1, 0, 6.0, False, True, nans=False),
}


def round_to_small_float(x: Expr, fmt: SmallFloat, saturate: bool, bld: Builder) -> Expr:
    """x (float32) rounded to the nearest value of `fmt`, ties to even, as a float32."""
    f = lambda v: const(float(v), F32)                              # noqa: E731
    saturate = saturate or not fmt.nans
    if saturate:              # (a NaN passes both comparisons)
        x = select(x > f(fmt.largest), f(fmt.largest), select(x < f(-fmt.largest), f(-fmt.largest), x))
    x = bld.local("x", x)
    a = bld.local("a", call("abs", x))
    # the quantum: 2^(max(exponent of a, least normal exponent) - mantissa bits), from the bits
    biased = binop(">>", call(BITCAST, a, dtype=U32), 23)
    least = const(fmt.min_exp + 127, U32)
    e = select(biased < least, least, biased)
    q = bld.local("quantum", call(BITCAST, binop("<<", e - fmt.mantissa, 23), dtype=F32))
    r = bld.local("r", call("rint", a / q) * q)
    if not saturate:          # past the largest finite value (infinity included)
        r = select(r > f(fmt.largest), f(np.inf) if fmt.infinities else f(np.nan), r)
    if fmt.negative_zero:     # x's sign bit onto r's (a -0 stays -0)
        signed = call(BITCAST, binop("|", call(BITCAST, r, dtype=U32),
                                     binop("&", call(BITCAST, x, dtype=U32), const(0x80000000, U32))), dtype=F32)
    else:                     # FNUZ: no -0, so a negative value that rounds to 0 is +0
        signed = select(x < f(0.0), f(0.0) - r, r)
    if not fmt.nans:          # E2M1: a NaN becomes -0
        return select(binop("!=", x, x), f(-0.0), signed)
    return select(binop("!=", x, x), x, signed)


def round_to_e8m0(x: Expr, saturate: bool, mode: str, bld: Builder) -> Expr:
    """x (float32) as the E8M0 value it casts to (see the module's doc), as a float32."""
    u = bld.local("bits", call(BITCAST, x, dtype=U32))
    e = bld.local("e", binop("&", binop(">>", u, 23), const(0xFF, U32)))
    mantissa = binop("&", u, const(0x7FFFFF, U32))
    special = binop("==", e, const(0xFF, U32))
    if mode == "up":
        up = binop("!=", mantissa, const(0, U32))
    elif mode == "nearest":
        guard = binop("!=", binop("&", u, const(0x400000, U32)), const(0, U32))
        rest = binop("||", binop("!=", binop("&", u, const(0x3FFFFF, U32)), const(0, U32)),
                     binop(">", e, const(0, U32)))
        up = binop("&&", guard, rest)
    elif mode == "down":
        up = None
    else:
        raise UnsupportedError([f"Cast to FLOAT8E8M0 with round_mode {mode!r} (up, down, nearest)"])
    if up is not None and saturate:
        up = binop("&&", up, binop("!=", e, const(0xFE, U32)))
    code = e if up is None else bld.local("code", e + cast(up, U32))
    value = select(binop("==", code, const(0, U32)), const(2.0 ** -127, F32),
                   call(BITCAST, binop("<<", code, 23), dtype=F32))
    return select(binop("||", special, binop("==", code, const(0xFF, U32))), const(np.nan, F32), value)


def _round(node, args, bld):
    to = int(node.attr("to"))
    x = cast(args[0], F32)
    if to == TensorProto.BFLOAT16:
        return round_to_bfloat16(x, bld)
    if to == TensorProto.FLOAT8E8M0:
        return round_to_e8m0(x, bool(int(node.attr("saturate", 1))), str(node.attr("round_mode", "up")), bld)
    return round_to_small_float(x, FORMATS[to], bool(int(node.attr("saturate", 1))), bld)


_round.checked = True      # (the chain lowering hands it the builder; it adds locals, no check)


def _fold(node, ins):
    """The op on a constant, in numpy: ml_dtypes rounds to nearest even too (the ONNX reference
    implementation has no aotc op to run)."""
    x = ins[0].const
    if x is None:
        return None
    to = int(node.attr("to"))
    x = np.asarray(x).astype(np.float32)
    if to == TensorProto.FLOAT8E8M0:
        from onnx.numpy_helper import to_float8e8m0
        return [to_float8e8m0(x, bool(int(node.attr("saturate", 1))), str(node.attr("round_mode", "up")))
                .astype(np.float32)]
    return [rounded(x, to, bool(int(node.attr("saturate", 1))))]


def rounded(x: np.ndarray, to: int, saturate: bool) -> np.ndarray:
    """float32 x rounded to bfloat16 or one of FORMATS (ONNX code `to`) as round_to_small_float
    rounds it, in numpy (ml_dtypes rounds to nearest even; saturation clips first)."""
    if to in FORMATS and saturate:
        big = FORMATS[to].largest
        x = np.clip(x, -big, big)
    return x.astype(dtypes.from_onnx(to)).astype(np.float32)


@register(ROUND_FLOAT, pointwise=_round, fold=_fold)
def _round_infer(node, ins):
    to = int(node.attr("to"))
    if to not in (TensorProto.BFLOAT16, TensorProto.FLOAT8E8M0) and to not in FORMATS:
        raise UnsupportedError([f"{ROUND_FLOAT} node {node.name!r} to {TensorProto.DataType.Name(to)}"])
    return [(dtypes.FLOAT32, ins[0].shape)]


# ----------------------------------------------------------------------------- WrapInt
def _wrap(node, x: Expr) -> Expr:
    narrow = dtypes.from_onnx(int(node.attr("to")))
    out = dtypes.compute_dtype(narrow)
    lo, hi = dtypes.int_range(narrow)
    span = hi - lo + 1
    whole = cast(x, I32)
    if dtypes.is_float(x.dtype):
        # a float outside int32's range (or NaN) has no defined conversion in C and its kin (x86 gives
        # INT_MIN, a GPU saturates to INT_MAX): every float from 2^31 up is a multiple of 2^8, so
        # its low bits are 0, as they are for infinities and NaN here on every target
        inside = binop("&&", x > const(-2147483648.0, x.dtype), x < const(2147483648.0, x.dtype))
        whole = select(inside, whole, const(0, I32))
    v = binop("&", whole, const(span - 1, I32))              # the low bits, 0 .. span - 1
    if lo < 0:                                                       # two's complement
        v = binop("-", binop("^", v, const(span // 2, I32)), const(span // 2, I32))
    return cast(v, out)


def _wrap_fold(node, ins):
    x = ins[0].const
    if x is None:
        return None
    narrow = dtypes.from_onnx(int(node.attr("to")))
    return [np.asarray(x).astype(narrow).astype(dtypes.compute_dtype(narrow))]


@register(WRAP_INT, pointwise=lambda n, a: _wrap(n, a[0]), fold=_wrap_fold)
def _wrap_infer(node, ins):
    to = int(node.attr("to"))
    try:
        narrow = dtypes.from_onnx(to)
    except dtypes.UnsupportedDtype:
        narrow = None
    if narrow is None or not dtypes.is_small_int(narrow):
        raise UnsupportedError([f"{WRAP_INT} node {node.name!r} to {TensorProto.DataType.Name(to)}"])
    return [(dtypes.compute_dtype(narrow), ins[0].shape)]
