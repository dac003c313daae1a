"""Random operators: RandomNormal, RandomUniform, RandomNormalLike, RandomUniformLike,
Bernoulli and Multinomial; Dropout in training mode (at the end) draws through `Stream` too.

The generator is counter-based, so that every element is a function of its own index and the
values never depend on how a schedule splits the loops among threads or work-items. It is
SplitMix64 (Steele, Lea and Flood, "Fast splittable pseudorandom number generators", OOPSLA
2014, with Stafford's "Mix13" finalizer, as in its published form): the n-th output of the
generator seeded with s is mix(s + n * GAMMA), where

    GAMMA = 0x9e3779b97f4a7c15         (the odd integer nearest 2^64 / golden ratio)
    mix(z):  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
             z = (z ^ (z >> 27)) * 0x94d049bb133111eb
             z =  z ^ (z >> 31)

all in uint64 arithmetic (multiplications modulo 2^64), which the kernel IR says as such. For one
node in one run:

    key      the seed attribute: its float32 bits (the random ops' seed is a float), the integer
             itself (Dropout's); without a seed, mix(FNV-1a (64 bits) of the node's first
             output name): a fixed key per node, different between nodes
    stream   output draw + 1 of the generator seeded with key, where draw is the run's draw
             number (kernel/context.py DRAW: 0 for a stateless run, the instance's count of
             earlier invokes for an invoke)
    word(n)  output n + 1 of the generator seeded with stream: 64 random bits

So the same seed gives the same values (two nodes with one seed and one shape draw alike, as
ONNX says), two unseeded nodes draw independent streams, every invoke of an instance draws
afresh, and two instances (or a compile at another thread count) repeat each other's sequence.

Element i (flat, row-major) of an output takes word(i); a float64 normal takes word(2i) and
word(2i + 1). From a word's bits:

    uniform in [0, 1)   float32: its top 24 bits * 2^-24; float64: its top 53 bits * 2^-53
    uniform in (0, 1]   the same plus one step (a logarithm's argument)
    normal              Box-Muller, its cosine half: sqrt(-2 log u1) cos(2 pi u2), with u1 in
                        (0, 1] and u2 in [0, 1); float32 takes u1 from the top 24 bits and u2
                        from the next 24 (|values| stay below 5.8, the largest float32 u1
                        allows), float64 one word each (below 8.6)

RandomUniform is low + (high - low) u, kept below high (rounding could reach it); RandomNormal
mean + scale n; Bernoulli 1 where u < p; Multinomial, per row of unnormalized
log-probabilities x, the category k where cdf(k - 1) <= u * total < cdf(k), cdf being the
running sum of exp(x - max(x)) and total its last value; Dropout keeps an element where
u >= ratio and scales it by 1 / (1 - ratio). Uniform words are exact: on every target they are
the same bits; what a target's compiler contracts into a fused multiply-add (low + (high - low)
u, the normal's mean + scale n) and its math library's log and cos may differ in the last bits.

float16 outputs compute in float32 (frontend/narrow.py), stored as float16 at a graph's edges.
"""
from __future__ import annotations

import math
from typing import Optional

import numpy as np

from ..errors import ShapeError, UnsupportedError
from ..ir import dtypes
from ..kernel.ir import (F32, F64, I32, I64, ORDERED, REDUCTION, SPATIAL, U32, U64, Builder, Const, Expr, Load,
                         Var, binop, call, cast, const, select)
from .registry import register

GAMMA = 0x9E3779B97F4A7C15
MIX = ((30, 0xBF58476D1CE4E5B9), (27, 0x94D049BB133111EB))
LAST_SHIFT = 31
_MASK = (1 << 64) - 1
FNV_OFFSET, FNV_PRIME = 0xCBF29CE484222325, 0x100000001B3
FLOATS = (F32, F64)


def _u64(v: int) -> Expr:
    return const(v & _MASK, U64)


def mix(b: Builder, x: Expr, name: str = "z") -> Var:
    """SplitMix64's finalizer of x, emitted as locals; the last one holds the result."""
    z = b.local(name, x)
    for shift, multiplier in MIX:
        z = b.local(name, binop("^", z, binop(">>", z, const(shift, I32))) * _u64(multiplier))
    return b.local(name, binop("^", z, binop(">>", z, const(LAST_SHIFT, I32))))


# ----------------------------------------------------------------------------- keys
def seed_of(node) -> Optional[float | int]:
    """The seed attribute: a float (the random ops') or an integer (Dropout's), or None."""
    seed = node.attr("seed")
    if seed is None or isinstance(seed, (int, np.integer)):
        return None if seed is None else int(seed)
    try:
        return float(seed)
    except (TypeError, ValueError):
        raise ShapeError(f"{node.op_type} node {node.name!r}: seed {seed!r} is not a number") from None


def node_key(node) -> tuple[int, str]:
    """(the node's key, what it comes from): an integer seed itself, a float seed's float32
    bits, else mix(FNV-1a of the name of its first output)."""
    seed = seed_of(node)
    if isinstance(seed, int):
        return seed & _MASK, f"seed {seed}"
    if seed is not None:
        return int(np.float32(seed).view(np.uint32)), f"seed {seed:g}"
    name = next((o for o in node.outputs if o), node.name)
    h = FNV_OFFSET
    for byte in name.encode():
        h = ((h ^ byte) * FNV_PRIME) & _MASK
    return mix_int(h), f"no seed: a hash of the output name {name!r}"


def mix_int(z: int) -> int:
    """`mix` on a Python integer (compile-time keys)."""
    for shift, multiplier in MIX:
        z = ((z ^ (z >> shift)) * multiplier) & _MASK
    return z ^ (z >> LAST_SHIFT)


class Stream:
    """A node's stream in this run (emitted into ctx.b where the object is made: a few
    integer operations before the loops); `word(b, n)` emits element n's 64 bits."""

    def __init__(self, ctx, node):
        b = ctx.b
        key, why = node_key(node)
        b.comment(f"random stream (SplitMix64, ops/random.py): key 0x{key:016x} ({why}); this run's stream is "
                  "the key's output number draw + 1, element n's bits that stream's output number n + 1")
        # output draw + 1 of the generator at key: mix(key + (draw + 1) * GAMMA)
        stream = mix(b, _u64(key + GAMMA) + ctx.draw() * _u64(GAMMA), "stream")
        self.base = b.local("base", stream + _u64(GAMMA))        # the stream's output 1 is mix(base)

    def word(self, b: Builder, n: Expr) -> Var:
        n = cast(n, U64)
        if isinstance(n, Const):
            at = _u64(n.value * GAMMA) + self.base
        else:
            at = self.base + n * _u64(GAMMA)
        return mix(b, at, "z")


def unit(b: Builder, bits: Expr, dt, open_low: bool = False) -> Expr:
    """A uniform value of dtype dt from a word's top bits: in [0, 1), or in (0, 1] when
    `open_low` (one step up)."""
    width = 24 if dt == F32 else 53
    top = cast(cast(binop(">>", bits, const(64 - width, I32)), I32 if dt == F32 else I64), dt)
    if open_low:
        top = top + const(1.0, dt)
    return top * const(2.0 ** -width, dt)


def normal(b: Builder, stream: Stream, n: Expr, dt) -> Var:
    """A standard normal value for element n (Box-Muller's cosine half)."""
    if dt == F32:
        bits = stream.word(b, n)
        u1 = unit(b, bits, F32, open_low=True)
        u2 = cast(cast(binop(">>", cast(bits, U32), const(8, I32)), I32), F32) * const(2.0 ** -24, F32)
    else:
        u1 = unit(b, stream.word(b, n * 2), F64, open_low=True)
        u2 = unit(b, stream.word(b, n * 2 + 1), F64)
    radius = b.local("radius", call("sqrt", const(-2.0, dt) * call("log", u1)))
    return b.local("normal", radius * call("cos", const(2 * math.pi, dt) * u2))


# ----------------------------------------------------------------------------- attributes
def _where(node) -> str:
    return f"{node.op_type} node {node.name!r}"


def _float_dtype(node, default) -> np.dtype:
    """The dtype attribute of a generator (float32 or float64), else `default`."""
    code = node.attr("dtype")
    if code is None:
        if default is None or np.dtype(default) not in FLOATS:
            raise ShapeError(f"{_where(node)}: the input is {dtypes.name(default)}, so a float dtype attribute must "
                             "say the output's type")
        return np.dtype(default)
    try:
        dt = dtypes.from_onnx(int(code))
    except dtypes.UnsupportedDtype as e:
        raise UnsupportedError([f"{_where(node)} with dtype {code}: {e}"]) from None
    if dt not in FLOATS:
        raise UnsupportedError([f"{_where(node)} with dtype {dtypes.name(dt)} (float32 and float64; float16 "
                                "computes in float32)"])
    return dt


def _shape(node) -> tuple:
    shape = node.attr("shape")
    if shape is None:
        raise ShapeError(f"{_where(node)}: the shape attribute is required")
    shape = tuple(int(d) for d in shape)
    if any(d < 0 for d in shape):
        raise ShapeError(f"{_where(node)}: shape {list(shape)} has a negative dim")
    return shape


def _number(node, key: str, default: float) -> float:
    v = float(node.attr(key, default))
    if not math.isfinite(v):
        raise ShapeError(f"{_where(node)}: {key} {v} must be finite")
    return v


def _bounds(node) -> tuple[float, float]:
    low, high = _number(node, "low", 0.0), _number(node, "high", 1.0)
    if high < low:
        raise ShapeError(f"{_where(node)}: high {high:g} is below low {low:g}")
    return low, high


def _draws(node, ins) -> bool:
    return True


# ----------------------------------------------------------------------------- RandomNormal / RandomUniform
def _generated(node, ins):
    """(dtype, shape) of RandomNormal / RandomUniform (shape attribute) and their Like forms
    (the input's shape, its dtype unless the dtype attribute says another)."""
    like = node.op_type.endswith("Like")
    if like:
        x = ins[0] if ins else None
        if x is None:
            raise ShapeError(f"{_where(node)}: the input is required")
        if node.attr("shape") is not None:
            raise ShapeError(f"{_where(node)}: a Like op takes its shape from the input, not a shape attribute")
        return _float_dtype(node, x.dtype), tuple(x.shape)
    if ins and any(v is not None for v in ins):
        raise ShapeError(f"{_where(node)} takes no inputs")
    return _float_dtype(node, F32), _shape(node)


def _infer_normal(node, ins):
    dt, shape = _generated(node, ins)
    _number(node, "mean", 0.0), _number(node, "scale", 1.0)
    seed_of(node)
    return [(dt, shape)]


def _infer_uniform(node, ins):
    dt, shape = _generated(node, ins)
    _bounds(node)
    seed_of(node)
    return [(dt, shape)]


def _each_element(ctx, value):
    """Store value(b, n) (n: the flat index) at every element of the output, each store with its
    position (so that a fused elementwise chain runs right there)."""
    Y, b = ctx.outs[0], ctx.b
    with b.loops(Y.shape, [f"i{d}" for d in range(len(Y.shape))], role=SPATIAL) as idx:
        b.store_at(Y, idx, value(b, Y.flat(idx)))


def _lower_normal(node, ctx):
    dt = ctx.outs[0].value_dtype
    mean, scale = _number(node, "mean", 0.0), _number(node, "scale", 1.0)
    stream = Stream(ctx, node)
    ctx.b.comment(f"normal values: mean {mean:g}, scale {scale:g}")
    _each_element(ctx, lambda b, n: const(mean, dt) + const(scale, dt) * normal(b, stream, n, dt))


def _lower_uniform(node, ctx):
    dt = ctx.outs[0].value_dtype
    low, high = _bounds(node)
    if high == low:
        _each_element(ctx, lambda b, n: const(low, dt))
        return
    stream = Stream(ctx, node)
    below = float(np.nextafter(np.array(high, dt), np.array(-np.inf, dt)))     # the largest value below high
    ctx.b.comment(f"uniform values in [{low:g}, {high:g})")

    def value(b, n):
        y = b.local("y", const(low, dt) + const(high - low, dt) * unit(b, stream.word(b, n), dt))
        return select(y < const(high, dt), y, const(below, dt))

    _each_element(ctx, value)


_HOW = "kernel: counter-based SplitMix64 stream of (seed or node, draw number, element); a fresh draw per invoke"
register(["RandomNormal", "RandomNormalLike"], lower=_lower_normal, random=_draws, how=_HOW)(_infer_normal)
register(["RandomUniform", "RandomUniformLike"], lower=_lower_uniform, random=_draws, how=_HOW)(_infer_uniform)


# ----------------------------------------------------------------------------- Bernoulli
def _bernoulli_dtype(node, x) -> np.dtype:
    code = node.attr("dtype")
    if code is None:
        return np.dtype(x.dtype)
    try:
        return dtypes.from_onnx(int(code))
    except dtypes.UnsupportedDtype as e:
        raise UnsupportedError([f"{_where(node)} with dtype {code}: {e}"]) from None


def _infer_bernoulli(node, ins):
    x = ins[0]
    if x.dtype not in FLOATS:
        raise ShapeError(f"{_where(node)}: the probabilities are {dtypes.name(x.dtype)}, not a float type")
    seed_of(node)
    return [(_bernoulli_dtype(node, x), tuple(x.shape))]


def _lower_bernoulli(node, ctx):
    X, Y = ctx.ins[0], ctx.outs[0]
    dt = X.value_dtype
    stream = Stream(ctx, node)
    ctx.b.comment("1 where a uniform value in [0, 1) is below the input's probability, else 0")
    _each_element(ctx, lambda b, n: cast(unit(b, stream.word(b, n), dt) < Load(X, n), Y.value_dtype))


register("Bernoulli", lower=_lower_bernoulli, random=_draws, how=_HOW)(_infer_bernoulli)


# ----------------------------------------------------------------------------- Multinomial
def _multinomial(node, x) -> tuple[int, np.dtype]:
    """(sample_size, output dtype), checked."""
    size = int(node.attr("sample_size", 1))
    if size < 1:
        raise ShapeError(f"{_where(node)}: sample_size {size} must be >= 1")
    code = int(node.attr("dtype", 6))
    if code not in (6, 7):
        raise ShapeError(f"{_where(node)}: dtype {code} must be int32 (6) or int64 (7)")
    if x.dtype not in FLOATS:
        raise ShapeError(f"{_where(node)}: the input is {dtypes.name(x.dtype)}, not a float type")
    if len(x.shape) != 2 or x.shape[1] < 1:
        raise ShapeError(f"{_where(node)}: the input {list(x.shape)} must be [batch_size, class_size] with "
                         "class_size >= 1")
    return size, dtypes.INT32 if code == 6 else dtypes.INT64


def _infer_multinomial(node, ins):
    x = ins[0]
    size, dt = _multinomial(node, x)
    seed_of(node)
    return [(dt, (x.shape[0], size))]


def _lower_multinomial(node, ctx):
    X, Y, b = ctx.ins[0], ctx.outs[0], ctx.b
    B, C = X.shape
    S = Y.shape[1]
    dt = X.value_dtype
    cdf = ctx.scratch((B, C), dt, "cdf")
    stream = Stream(ctx, node)
    b.comment(f"per row: cdf = the running sum of exp(x - max x); each of the {S} samples is the number of "
              "categories k < C - 1 with cdf[k] <= u * total (u uniform in [0, 1), total = cdf[C - 1])")
    with b.loop(B, "r", role=SPATIAL) as r:
        top = b.local("top", const(-math.inf, dt))
        with b.loop(C, "k", role=REDUCTION) as k:
            v = b.local("v", Load(X, r * C + k))
            b.assign(top, select(v > top, v, top))
        total = b.local("total", const(0.0, dt), dtype=dt)
        with b.loop(C, "k", role=ORDERED) as k:
            b.assign(total, total + call("exp", Load(X, r * C + k) - top))
            b.store(cdf, r * C + k, total)
        with b.loop(S, "s", role=SPATIAL) as s:
            n = r * S + s
            target = b.local("target", unit(b, stream.word(b, n), dt) * total)
            count = b.accumulator("category", const(0, I64))
            with b.loop(C - 1, "k", role=REDUCTION) as k:
                b.assign(count, count + cast(Load(cdf, r * C + k) <= target, I64))
            b.store(Y, n, count)


register("Multinomial", lower=_lower_multinomial, random=_draws,
         how="kernel: inverse CDF of exp(x - max) per row, from the random ops' stream")(_infer_multinomial)


# ----------------------------------------------------------------------------- Dropout
def _dropout_training(node, ins) -> bool:
    """Is the Dropout in training mode (its training_mode input, a constant, true)?"""
    t = ins[2] if len(ins) > 2 else None
    if t is None:
        return False
    if t.const is None:
        raise UnsupportedError([f"Dropout node {node.name!r} with training_mode known only at run time (bind it "
                                "with --const)"])
    return bool(np.asarray(t.const).reshape(-1)[0])


def _dropout_ratio(node, ins) -> Optional[float]:
    """The ratio when it is known at compile time (0.5 without the input), checked; None when
    it is a run-time input."""
    r = ins[1] if len(ins) > 1 else None
    if r is None:
        return 0.5
    if r.dtype.kind != "f" or r.size != 1:
        raise ShapeError(f"Dropout node {node.name!r}: ratio must be a float scalar, not "
                         f"{dtypes.name(r.dtype)}{list(r.shape)}")
    if r.const is None:
        return None
    ratio = float(np.asarray(r.const).reshape(-1)[0])
    if not 0.0 <= ratio < 1.0:
        raise ShapeError(f"Dropout node {node.name!r}: ratio {ratio:g} must be in [0, 1)")
    return ratio


def _dropout_infer(node, ins):
    x = ins[0]
    if _dropout_training(node, ins):
        if x.dtype.kind != "f":
            raise ShapeError(f"Dropout node {node.name!r}: data is {dtypes.name(x.dtype)}, not a float type")
        _dropout_ratio(node, ins)
        seed_of(node)
    return [(x.dtype, x.shape), (dtypes.BOOL, x.shape)]


def _dropout_draws(node, ins) -> bool:
    """Training mode with a ratio that is not a constant 0 draws random numbers."""
    try:
        return _dropout_training(node, ins) and _dropout_ratio(node, ins) != 0.0
    except UnsupportedError:
        return True          # (the node is refused by inference anyway)


def _lower_dropout(node, ctx):
    """Inference Dropout is the identity (the remove_identities pass drops it unless its mask
    is used): copy the input, mask = all true. Training mode (ops/random.py's stream) keeps an
    element where a uniform value in [0, 1) is >= ratio and scales it by 1 / (1 - ratio):
    x * (kept ? scale : 0), so that a dropped NaN stays NaN as in ONNX's x * mask * scale;
    a ratio of 0 keeps everything (no draw)."""
    X, Y = ctx.ins[0], ctx.outs[0]
    mask = ctx.outs[1] if len(ctx.outs) > 1 else None
    b = ctx.b
    ins = [ctx.value(i) for i in range(len(node.inputs))]
    if _dropout_training(node, ins) and _dropout_ratio(node, ins) != 0.0:
        dt = X.value_dtype
        ratio = _dropout_ratio(node, ins)
        stream = Stream(ctx, node)
        if ratio is None:
            r = b.local("ratio", cast(Load(ctx.ins[1], const(0)), dt))
            scale = b.local("scale", const(1.0, dt) / (const(1.0, dt) - r))
            b.comment("training: keep an element where u >= ratio (a run-time input, unchecked), scaled by "
                      "1 / (1 - ratio)")
        else:
            r, scale = const(ratio, dt), const(1.0 / (1.0 - ratio), dt)
            b.comment(f"training: keep an element where u >= {ratio:g}, scaled by 1 / (1 - {ratio:g})")
        with b.loop(X.size, "p", role=SPATIAL) as p:
            keep = b.local("keep", unit(b, stream.word(b, p), dt) >= r)
            if Y is not None:
                b.store(Y, p, X[p] * select(keep, scale, const(0.0, dt)))
            if mask is not None:
                b.store(mask, p, keep)
        return
    with b.loop(X.size, "p", role=SPATIAL) as p:
        if Y is not None:
            b.store(Y, p, X[p])
        if mask is not None:
            b.store(mask, p, const(True))


register("Dropout", lower=_lower_dropout, random=_dropout_draws,
         how="kernel; in training mode (a constant training_mode) ops/random.py's stream")(_dropout_infer)
