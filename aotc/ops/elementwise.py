"""Elementwise ops: each is a scalar function of its (broadcast) inputs.

The fusion pass chains any number of these into one loop nest, or runs them as the
epilogue of a Conv/Gemm/MatMul; so an op here only says what one element is.

NaN and infinities behave as the ONNX reference implementation (numpy) has them: Max, Min,
Relu, Clip, HardSigmoid, Celu... propagate a NaN (numpy's maximum / minimum), comparisons with
a NaN are false. So the ops here do not use the kernel IR's `maximum` / `minimum`, which print
as C's fmax / fmin and drop a NaN (what the index clamps of other ops want), but selects whose
condition is false on a NaN operand (`_nan_max` / `_nan_min`): they vectorize as fmax does.
"""
from __future__ import annotations

import math

import numpy as np

from ..errors import ShapeError, UnsupportedError
from ..ir import dtypes
from ..ir.internal import COPY
from ..kernel.ir import BITCAST, SPATIAL, Const, Expr, Load, Var, binop, call, cast, const, select
from .common import broadcast
from .registry import register


def _num(node, name, default):
    return float(node.attr(name, default))


def _c(v: float, like: Expr) -> Const:
    return const(v, like.dtype)


def _is_const(e: Expr, v: float) -> bool:
    return isinstance(e, Const) and e.value == v


def _may_be_nan(e: Expr) -> bool:
    """Can e hold a NaN (a float that is not a non-NaN constant)?"""
    return e.dtype.kind == "f" and not (isinstance(e, Const) and not math.isnan(e.value))


def _isnan(e: Expr) -> Expr:
    return binop("!=", e, e)


def _nan_max(a: Expr, b: Expr) -> Expr:
    """max(a, b) that is NaN when either is (numpy's maximum); a on a tie."""
    cond = a >= b
    if _may_be_nan(a):
        cond = binop("||", cond, _isnan(a))
    return select(cond, a, b)


def _nan_min(a: Expr, b: Expr) -> Expr:
    cond = a <= b
    if _may_be_nan(a):
        cond = binop("||", cond, _isnan(a))
    return select(cond, a, b)


def _clamp01(v: Expr) -> Expr:
    """min(max(v, 0), 1), NaN staying NaN (both comparisons are false on it); as Clip writes
    it, each select a maximum or minimum (the C printer's hidden bounds: one instruction each)."""
    t = select(v < _c(0, v), _c(0, v), v)
    return select(t > _c(1, t), _c(1, t), t)


# --------------------------------------------------------------------------- unary
_UNARY = {
    "Relu": lambda n, x: select(x < _c(0, x), _c(0, x), x),           # NaN stays NaN
    "Neg": lambda n, x: -x,
    "Abs": lambda n, x: call("abs", x),
    "Exp": lambda n, x: call("exp", x),
    "Log": lambda n, x: call("log", x),
    "Sqrt": lambda n, x: call("sqrt", x),
    "Reciprocal": lambda n, x: _c(1, x) / x,
    "Sigmoid": lambda n, x: call("sigmoid", x),
    "Tanh": lambda n, x: call("tanh", x),
    "Erf": lambda n, x: call("erf", x),
    "Floor": lambda n, x: call("floor", x),
    "Ceil": lambda n, x: call("ceil", x),
    "Round": lambda n, x: call("rint", x),          # half to even, as ONNX asks
    "Sin": lambda n, x: call("sin", x),
    "Cos": lambda n, x: call("cos", x),
    "Tan": lambda n, x: call("tan", x),
    "Atan": lambda n, x: call("atan", x),
    "Asin": lambda n, x: call("asin", x),
    "Acos": lambda n, x: call("acos", x),
    "Sinh": lambda n, x: call("sinh", x),
    "Cosh": lambda n, x: call("cosh", x),
    "Softplus": lambda n, x: call("log1p", call("exp", x)),
    "Softsign": lambda n, x: x / (_c(1, x) + call("abs", x)),
    # 0, -0 and NaN are their own sign
    "Sign": lambda n, x: select(x > _c(0, x), _c(1, x), select(x < _c(0, x), _c(-1, x),
                                                               x if x.dtype.kind == "f" else _c(0, x))),
    "LeakyRelu": lambda n, x: select(x >= _c(0, x), x, x * _c(_num(n, "alpha", 0.01), x)),
    "Elu": lambda n, x: select(x >= _c(0, x), x,
                               _c(_num(n, "alpha", 1.0), x) * (call("exp", x) - _c(1, x))),
    "Selu": lambda n, x: _c(_num(n, "gamma", 1.0507009873554805), x) * select(
        x > _c(0, x), x, _c(_num(n, "alpha", 1.6732632423543772), x) * (call("exp", x) - _c(1, x))),
    # max(0, x) + min(0, alpha * (exp(x / alpha) - 1)): the second term is 0 for x > 0
    "Celu": lambda n, x: select(x > _c(0, x), x, _c(_num(n, "alpha", 1.0), x) * (
        call("exp", x / _c(_num(n, "alpha", 1.0), x)) - _c(1, x))),
    "ThresholdedRelu": lambda n, x: select(x > _c(_num(n, "alpha", 1.0), x), x, _c(0, x)),
    "HardSigmoid": lambda n, x: _clamp01(_c(_num(n, "alpha", 0.2), x) * x + _c(_num(n, "beta", 0.5), x)),
    "HardSwish": lambda n, x: x * _clamp01(x * _c(1 / 6, x) + _c(0.5, x)),
    "Mish": lambda n, x: x * call("tanh", call("log1p", call("exp", x))),
    "Asinh": lambda n, x: call("asinh", x),
    "Acosh": lambda n, x: call("acosh", x),
    "Atanh": lambda n, x: call("atanh", x),
    "Swish": lambda n, x: x * call("sigmoid", _c(_num(n, "alpha", 1.0), x) * x),
    "Shrink": lambda n, x: _shrink(n, x),
    "BitwiseNot": lambda n, x: binop("^", x, _all_ones(x.dtype)),
    "Gelu": lambda n, x: _gelu(n, x),
    "Not": lambda n, x: binop("==", x, const(0, x.dtype)),
    "IsNaN": lambda n, x: binop("!=", x, x),
    "Identity": lambda n, x: x,
    COPY: lambda n, x: x,
}


def _shrink(n, x):
    """x + bias below -lambd, x - bias above lambd, 0 between (NaN: 0, both tests false)"""
    lambd, bias = _num(n, "lambd", 0.5), _num(n, "bias", 0.0)
    return select(x < _c(-lambd, x), x + _c(bias, x), select(x > _c(lambd, x), x - _c(bias, x), _c(0, x)))


def _all_ones(dt) -> Const:
    """The value of dt with every bit set (x ^ it is ~x without C's promotion to int making a
    uint8's complement negative)."""
    return const(-1 if dt.kind == "i" else (1 << (8 * dt.itemsize)) - 1, dt)


def _gelu(n, x):
    if n.attr("approximate", "none") == "tanh":
        inner = _c(math.sqrt(2 / math.pi), x) * (x + _c(0.044715, x) * x * x * x)
        return _c(0.5, x) * x * (_c(1, x) + call("tanh", inner))
    return _c(0.5, x) * x * (_c(1, x) + call("erf", x * _c(1 / math.sqrt(2), x)))


# ops defined on some element kinds only: f float, i/u signed/unsigned integers
_KINDS = {"Asinh": "f", "Acosh": "f", "Atanh": "f", "Swish": "f", "Shrink": "f", "BitwiseNot": "iu"}


def _unary_infer(node, ins):
    kinds = _KINDS.get(node.op_type)
    if kinds is not None and ins[0].dtype.kind not in kinds:
        raise UnsupportedError([f"{node.op_type} node {node.name!r} on element type {ins[0].dtype}"])
    dt = dtypes.BOOL if node.op_type in ("Not", "IsNaN", "IsInf") else ins[0].dtype
    return [(dt, ins[0].shape)]


# unary ops whose output is 0 where the input is 0 (OpDef.keeps_zero)
_KEEPS_ZERO = ("Identity", COPY, "Relu", "Neg", "Abs", "Sign", "Floor", "Ceil", "Round")
for _name, _fn in _UNARY.items():
    register(_name, pointwise=(lambda f: lambda node, args: f(node, args[0]))(_fn),
             keeps_zero=_name in _KEEPS_ZERO)(_unary_infer)


@register("IsInf", pointwise=lambda n, a: _isinf(n, a[0]))
def _isinf_infer(node, ins):
    return [(dtypes.BOOL, ins[0].shape)]


def _isinf(n, x):
    inf = const(float("inf"), x.dtype)
    pos = binop("==", x, inf)
    neg = binop("==", x, -inf)
    detect_pos, detect_neg = int(n.attr("detect_positive", 1)), int(n.attr("detect_negative", 1))
    if detect_pos and detect_neg:
        return binop("||", pos, neg)
    if detect_pos:
        return pos
    if detect_neg:
        return neg
    return const(False, dtypes.BOOL)


# --------------------------------------------------------------------------- binary & n-ary
def _pow(n, a, b):
    if isinstance(b, Const):
        if b.value == 1: return a
        if b.value == 2: return a * a
        if b.value == 3: return a * a * a
        if b.value == 0.5 and a.dtype.kind == "f": return call("sqrt", a)
    if b.dtype != a.dtype:
        b = cast(b, a.dtype)
    if a.dtype.kind == "f":
        return call("pow", a, b)
    return cast(call("pow", cast(a, dtypes.FLOAT64), cast(b, dtypes.FLOAT64)), a.dtype)


# Integer Div / Mod: a zero divisor stops the run with AOTC_ERR_DIVIDE_BY_ZERO (C's `/` traps
# there, and ONNX gives no value); MIN / -1 (which traps too) is MIN, and MIN % -1 is 0, as in
# the reference implementation (numpy wraps). These functions are `checked`: the chain lowering
# (lowering/lower.py) hands them the builder to put the check in.
def _int_divisor(bld, b: Expr) -> Expr:
    """b, checked to be non-zero at run time (unless it is a constant)."""
    if isinstance(b, Const):
        if b.value != 0:
            return b
    elif not isinstance(b, Var):
        b = bld.local("d", b)
    with bld.if_(b.eq(const(0, b.dtype))):
        bld.fail("AOTC_ERR_DIVIDE_BY_ZERO", "an integer divisor is 0")
    return b


def _overflows(a: Expr, b: Expr) -> bool:
    """Can a / b be MIN / -1 in a C type of 32 bits or more (narrower ones divide as int)?"""
    return a.dtype.kind == "i" and a.dtype.itemsize >= 4 and not (isinstance(b, Const) and b.value != -1)


def _div(n, a, b, bld=None):
    if a.dtype.kind not in "iu":
        return a / b
    b = _int_divisor(bld, b)
    if not _overflows(a, b):
        return a / b
    u = np.dtype(f"u{a.dtype.itemsize}")
    neg = cast(const(0, u) - cast(a, u), a.dtype)       # -a, wrapping at MIN
    return select(b.eq(const(-1, b.dtype)), neg, a / b)


def _mod(n, a, b, bld=None):
    fmod = int(n.attr("fmod", 0))
    if a.dtype.kind == "f":
        if fmod:
            return call("fmod", a, b)
        # fmod=0 on floats: numpy's mod, the sign of b (-1 mod inf is inf, 4 mod -2 is -0)
        r = bld.local("r", call("fmod", a, b))
        zero = select(b < const(0, b.dtype), const(-0.0, a.dtype), const(0.0, a.dtype))
        wrong_sign = binop("&&", r.ne(const(0, a.dtype)), binop("!=", r < const(0, a.dtype), b < const(0, b.dtype)))
        return select(r.eq(const(0, a.dtype)), zero, select(wrong_sign, r + b, r))
    if fmod:                                # on integers: C's %, the sign of a
        b = _int_divisor(bld, b)
        return select(b.eq(const(-1, b.dtype)), const(0, a.dtype), a % b) if _overflows(a, b) else a % b
    b = _int_divisor(bld, b)
    r = select(b.eq(const(-1, b.dtype)), const(0, a.dtype), a % b) if _overflows(a, b) else a % b
    wrong_sign = binop("&&", r.ne(const(0, a.dtype)), binop("!=", r < const(0, a.dtype), b < const(0, a.dtype)))
    return select(wrong_sign, r + b, r)


_div.checked = True
_mod.checked = True


_BINARY = {
    "Add": lambda n, a, b: a + b,
    "Sub": lambda n, a, b: a - b,
    "Mul": lambda n, a, b: a * b,
    "Div": _div,
    "Pow": _pow,
    "Mod": _mod,
    "Equal": lambda n, a, b: a.eq(b),
    "Less": lambda n, a, b: a < b,
    "LessOrEqual": lambda n, a, b: a <= b,
    "Greater": lambda n, a, b: a > b,
    "GreaterOrEqual": lambda n, a, b: a >= b,
    "And": lambda n, a, b: binop("&&", a, b),
    "Or": lambda n, a, b: binop("||", a, b),
    "Xor": lambda n, a, b: binop("!=", a.ne(const(0, a.dtype)), b.ne(const(0, b.dtype))),
    "PRelu": lambda n, a, b: select(a < _c(0, a), a * b, a),
    "BitShift": lambda n, a, b: _bitshift(n, a, b),
    "BitwiseAnd": lambda n, a, b: binop("&", a, b),
    "BitwiseOr": lambda n, a, b: binop("|", a, b),
    "BitwiseXor": lambda n, a, b: binop("^", a, b),
}


def _bitshift(n, a, b):
    """a shifted by b bits. A shift outside [0, bits) gives 0 (left) or the sign fill (right),
    as the ONNX reference does, and never reaches C's << / >> (undefined there); a left shift
    of a signed value shifts its bits as unsigned (also undefined in C for negative values)."""
    bits = 8 * a.dtype.itemsize
    b = b if b.dtype == a.dtype else cast(b, a.dtype)
    outside = b >= const(bits, b.dtype) if b.dtype.kind == "u" else binop("||", b < const(0, b.dtype),
                                                                           b >= const(bits, b.dtype))
    safe = select(outside, const(0, b.dtype), b)
    if n.attr("direction", "LEFT") == "LEFT":
        if a.dtype.kind == "i":
            u = np.dtype(f"u{a.dtype.itemsize}")
            shifted = cast(binop("<<", cast(a, u), cast(safe, u)), a.dtype)
        else:
            shifted = binop("<<", a, safe)
        return select(outside, const(0, a.dtype), shifted)
    fill = select(a < const(0, a.dtype), const(-1, a.dtype), const(0, a.dtype)) if a.dtype.kind == "i" \
        else const(0, a.dtype)
    return select(outside, fill, binop(">>", a, safe))


_CMP = {"Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual", "And", "Or", "Xor"}


def _binary_infer(node, ins):
    if node.op_type.startswith("Bitwise") and ins[0].dtype.kind not in "iu":
        raise UnsupportedError([f"{node.op_type} node {node.name!r} on element type {ins[0].dtype}"])
    shape = broadcast(*[v.shape for v in ins if v is not None], node=node)
    dt = dtypes.BOOL if node.op_type in _CMP else ins[0].dtype
    return [(dt, shape)]


def _binary_pointwise(f):
    if getattr(f, "checked", False):
        def checked(node, args, bld):
            return f(node, args[0], args[1], bld)
        checked.checked = True
        return checked
    return lambda node, args: f(node, args[0], args[1])


for _name, _fn in _BINARY.items():
    register(_name, pointwise=_binary_pointwise(_fn))(_binary_infer)


def _fold_args(f, args):
    acc = args[0]
    for a in args[1:]:
        acc = f(acc, a)
    return acc


_VARIADIC = {
    "Max": lambda args: _fold_args(_nan_max, args),
    "Min": lambda args: _fold_args(_nan_min, args),
    "Sum": lambda args: _fold_args(lambda a, b: a + b, args),
    "Mean": lambda args: _fold_args(lambda a, b: a + b, args) / const(len(args), args[0].dtype),
}
for _name, _fn in _VARIADIC.items():
    register(_name, pointwise=(lambda f: lambda node, args: f(args))(_fn),
             keeps_zero=lambda node: len(node.inputs) == 1)(_binary_infer)


@register("Where", pointwise=lambda n, a: select(a[0], a[1], a[2]))
def _where_infer(node, ins):
    return [(ins[1].dtype, broadcast(*[v.shape for v in ins], node=node))]


def _clip(n, args):
    x = args[0]
    lo = args[1] if len(args) > 1 and args[1] is not None else None
    hi = args[2] if len(args) > 2 and args[2] is not None else None
    # numpy's clip: a NaN x stays NaN (x < lo is false), and so does a NaN bound
    if lo is not None:
        x = select(binop("||", x < lo, _isnan(lo)) if _may_be_nan(lo) else x < lo, lo, x)
    if hi is not None:
        x = select(binop("||", x > hi, _isnan(hi)) if _may_be_nan(hi) else x > hi, hi, x)
    return x


@register("Clip", pointwise=_clip)
def _clip_infer(node, ins):
    for v, what in zip(ins[1:3], ("min", "max")):
        if v is not None and (len(v.shape) > 1 or (len(v.shape) == 1 and v.shape[0] != 1)):
            raise ShapeError(f"Clip node {node.name!r}: {what} must be a scalar, not a tensor of shape "
                             f"{list(v.shape)}")
    return [(ins[0].dtype, ins[0].shape)]


@register("Cast", pointwise=lambda n, a: _cast(n, a[0]), keeps_zero=True)
def _cast_infer(node, ins):
    try:
        to = dtypes.from_onnx(int(node.attr("to")))
    except dtypes.UnsupportedDtype as e:
        raise UnsupportedError([f"Cast node {node.name!r} to {e}"]) from None
    return [(to, ins[0].shape)]


def _cast(n, x):
    to = dtypes.from_onnx(int(n.attr("to")))
    if to == dtypes.BOOL:
        return x.ne(const(0, x.dtype))
    if dtypes.is_narrow(to):        # (a graph output: its store converts the value computed wider)
        return cast(x, dtypes.compute_dtype(to))
    return cast(x, to)


@register("CastLike", pointwise=lambda n, a: cast(a[0], a[1].dtype) if a[1].dtype != dtypes.BOOL
          else a[0].ne(const(0, a[0].dtype)), keeps_zero=True)
def _castlike_infer(node, ins):
    return [(ins[1].dtype, ins[0].shape)]



def _swiglu(n, a, b):
    """Swish_alpha(a) * b: the gate a through Swish, times the value b."""
    return a * call("sigmoid", _c(_num(n, "alpha", 1.0), a) * a) * b


@register("SwiGLU", pointwise=lambda n, args: _swiglu(n, args[0], args[1]))
def _swiglu_infer(node, ins):
    a, b = ins[0], ins[1]
    if a is None or b is None:
        raise ShapeError(f"SwiGLU node {node.name!r}: both inputs (A, the gate, and B, the value) are required")
    if a.dtype.kind != "f" or b.dtype != a.dtype:
        raise UnsupportedError([f"SwiGLU node {node.name!r} on element types {a.dtype} / {b.dtype} "
                                "(one floating-point type)"])
    if tuple(a.shape) != tuple(b.shape):
        raise ShapeError(f"SwiGLU node {node.name!r}: A {tuple(a.shape)} and B {tuple(b.shape)} must have "
                         "the same shape (SwiGLU does not broadcast)")
    return [(a.dtype, a.shape)]


# --------------------------------------------------------------------------- BitCast
def _bitcast_infer(node, ins):
    x = ins[0]
    try:
        to = dtypes.from_onnx(int(node.attr("to")))
    except dtypes.UnsupportedDtype as e:
        raise UnsupportedError([f"BitCast node {node.name!r} to {node.attr('to')}: {e}"]) from None
    for dt in (x.dtype, to):
        if dt.kind not in "fiu" or dt.itemsize == 2 and dt.kind == "f":
            raise UnsupportedError([f"BitCast node {node.name!r} from {x.dtype} to {to} (integer, float32 "
                                    "and float64 types)"])
    if to.itemsize != x.dtype.itemsize:
        raise ShapeError(f"BitCast node {node.name!r}: {x.dtype} and {to} have different widths")
    return [(to, x.shape)]


def _lower_bitcast(node, ctx):
    X, Y = ctx.ins[0], ctx.outs[0]
    b = ctx.b
    b.comment(f"the bits of each {X.dtype} read as a {Y.dtype}")
    with b.loop(X.size, "i", role=SPATIAL) as i:
        v = Load(X, i)
        b.store(Y, i, v if X.dtype == Y.dtype else call(BITCAST, v, dtype=Y.dtype))


register("BitCast", lower=_lower_bitcast)(_bitcast_infer)
