"""Normalizations: RMSNormalization, GroupNormalization, MeanVarianceNormalization,
LpNormalization (LayerNormalization is reduce.py's), and at the end the N-C-spatial ones that
survive the graph passes: BatchNormalization with run-time statistics, InstanceNormalization,
LRN.

Statistics accumulate in the schedule's accumulator type (widened for float32 as the target
says), the variance as the mean of squared deviations from the mean (two passes)."""
from __future__ import annotations

from ..errors import ShapeError, UnsupportedError
from ..kernel.ir import REDUCTION, SPATIAL, Load, binop, call, cast, const, maximum, minimum, select
from .common import count, norm_axis, prod, shape_error
from .registry import register
from .tensor import _bstrides, contiguous_strides


def _float_only(node, x):
    if x.dtype.kind != "f":
        raise UnsupportedError([f"{node.op_type} node {node.name!r} on element type {x.dtype}"])


def _dot(idx, strides):
    return sum((i * s for i, s in zip(idx, strides)), const(0))


# ----------------------------------------------------------------------------- RMSNormalization
def _rms_infer(node, ins):
    x, scale = ins[0], ins[1]
    _float_only(node, x)
    axis = norm_axis(int(node.attr("axis", -1)), len(x.shape), node)
    norm = tuple(x.shape[axis:])
    if len(scale.shape) > len(norm) or any(s not in (1, n) for s, n in zip(scale.shape[::-1], norm[::-1])):
        raise ShapeError(f"RMSNormalization node {node.name!r}: scale {tuple(scale.shape)} does not broadcast "
                         f"to the normalized shape {norm}")
    return [(x.dtype, tuple(x.shape))]


def _lower_rms(node, ctx):
    X, S, Y = ctx.ins[0], ctx.ins[1], ctx.outs[0]
    axis = norm_axis(int(node.attr("axis", -1)), len(X.shape), node)
    norm = tuple(X.shape[axis:])
    outer, n = prod(X.shape[:axis]), prod(norm)
    eps = float(node.attr("epsilon", 1e-5))
    dt = X.dtype
    b = ctx.b
    b.comment(f"x / sqrt(mean(x^2) + {eps:g}) * scale over the last {len(norm)} dim(s), {n} elements")
    s_st = _bstrides(S.shape, norm)
    with b.loop(outer, "p", role=SPATIAL) as p:
        row = p * n
        sq = b.accumulator("sq", const(0.0, dt))
        with b.loop(n, "j", role=REDUCTION) as j:
            v = b.local("v", Load(X, row + j))
            b.assign(sq, sq + v * v)
        rinv = b.local("rinv", const(1.0, dt) / call("sqrt", sq / count(n, dt) + const(eps, dt)))
        with b.loops(norm, [f"j{k}" for k in range(len(norm))], role=SPATIAL) as idx:
            at = row + _dot(idx, contiguous_strides(norm))
            b.store(Y, at, cast(Load(X, at) * rinv, dt) * Load(S, _dot(idx, s_st)))


register("RMSNormalization", lower=_lower_rms, run_time_dims=True)(_rms_infer)


# ----------------------------------------------------------------------------- GroupNormalization
def _groups(node, x, scale) -> tuple[int, bool]:
    """(groups, per_channel): scale and bias per channel (opset 21) or per group (opset 18)."""
    name = f"GroupNormalization node {node.name!r}"
    if len(x.shape) < 3:
        raise ShapeError(f"{name}: input {tuple(x.shape)} must be N-C-spatial")
    g = int(node.attr("num_groups", 0))
    c = x.shape[1]
    if g < 1 or c % g:
        raise ShapeError(f"{name}: num_groups {g} must divide the {c} channels")
    if tuple(scale.shape) not in ((c,), (g,)):
        raise ShapeError(f"{name}: scale {tuple(scale.shape)} must have shape ({c},) (opset 21) or ({g},) (opset 18)")
    return g, tuple(scale.shape) == (c,)


def _gn_infer(node, ins):
    _float_only(node, ins[0])
    _groups(node, ins[0], ins[1])
    if tuple(ins[2].shape) != tuple(ins[1].shape):
        raise ShapeError(f"GroupNormalization node {node.name!r}: bias {tuple(ins[2].shape)} and scale "
                         f"{tuple(ins[1].shape)} differ")
    return [(ins[0].dtype, tuple(ins[0].shape))]


def _lower_gn(node, ctx):
    X, S, B, Y = ctx.ins[0], ctx.ins[1], ctx.ins[2], ctx.outs[0]
    g, per_channel = _groups(node, X, S)
    N, C = X.shape[:2]
    SL = prod(X.shape[2:])
    cg = C // g
    n_el = cg * SL
    eps = float(node.attr("epsilon", 1e-5))
    dt = X.dtype
    b = ctx.b
    b.comment(f"{g} groups of {cg} channels, scale and bias per {'channel' if per_channel else 'group'}")
    with b.loops([N, g], ["n", "q"], role=SPATIAL) as (n, q):
        base = (n * C + q * cg) * SL
        s = b.accumulator("sum", const(0.0, dt))
        with b.loop(n_el, "j", role=REDUCTION) as j:
            b.assign(s, s + Load(X, base + j))
        mean = b.local("mean", s / count(n_el, dt))
        v = b.accumulator("var", const(0.0, dt))
        with b.loop(n_el, "j", role=REDUCTION) as j:
            d = b.local("d", Load(X, base + j) - mean)
            b.assign(v, v + d * d)
        rstd = b.local("rstd", const(1.0, dt) / call("sqrt", v / count(n_el, dt) + const(eps, dt)))
        with b.loop(cg, "c", role=SPATIAL) as c:
            ch = q * cg + c if per_channel else q
            a = b.local("a", rstd * Load(S, ch))
            t = b.local("t", Load(B, ch) - mean * a)
            with b.loop(SL, "j", role=SPATIAL) as j:
                at = base + c * SL + j
                b.store(Y, at, cast(Load(X, at) * a + t, dt))


register("GroupNormalization", lower=_lower_gn, run_time_dims=True)(_gn_infer)


# ----------------------------------------------------------------------------- MVN, LpNormalization
def _axes_split(node, shape, axes):
    """(kept axes, reduced axes), each in order."""
    red = sorted({norm_axis(int(a), len(shape), node) for a in axes})
    return [i for i in range(len(shape)) if i not in red], red


def _mvn_infer(node, ins):
    _float_only(node, ins[0])
    _axes_split(node, ins[0].shape, node.attr("axes", [0, 2, 3]))
    return [(ins[0].dtype, tuple(ins[0].shape))]


def _over(b, X, kept, red, body):
    """For every index of the kept axes: body(offset of the kept part, strides of the reduced axes)."""
    st = contiguous_strides(X.shape)
    with b.loops([X.shape[i] for i in kept], [f"k{i}" for i in kept], role=SPATIAL) as ko:
        body(_dot(ko, [st[i] for i in kept]), [X.shape[i] for i in red], [st[i] for i in red])


def _lower_mvn(node, ctx):
    """(x - mean) / (sqrt(variance) + 1e-9) over the axes, as the operator's definition has it
    (its epsilon is added to the standard deviation)."""
    X, Y = ctx.ins[0], ctx.outs[0]
    kept, red = _axes_split(node, X.shape, node.attr("axes", [0, 2, 3]))
    dt = X.dtype
    b = ctx.b
    n_red = prod(X.shape[i] for i in red)
    b.comment(f"mean-variance normalization over axes {red} ({n_red} elements each)")

    def body(base, shape, strides):
        names = [f"r{i}" for i in red]
        s = b.accumulator("sum", const(0.0, dt))
        with b.loops(shape, names, role=REDUCTION) as ri:
            b.assign(s, s + Load(X, base + _dot(ri, strides)))
        mean = b.local("mean", s / count(n_red, dt))
        v = b.accumulator("var", const(0.0, dt))
        with b.loops(shape, names, role=REDUCTION) as ri:
            d = b.local("d", Load(X, base + _dot(ri, strides)) - mean)
            b.assign(v, v + d * d)
        inv = b.local("inv", const(1.0, dt) / (call("sqrt", v / count(n_red, dt)) + const(1e-9, dt)))
        with b.loops(shape, names, role=SPATIAL) as ri:
            at = base + _dot(ri, strides)
            b.store(Y, at, cast((Load(X, at) - mean) * inv, dt))

    _over(b, X, kept, red, body)


register("MeanVarianceNormalization", lower=_lower_mvn)(_mvn_infer)


def _lpn_infer(node, ins):
    _float_only(node, ins[0])
    norm_axis(int(node.attr("axis", -1)), len(ins[0].shape), node)
    if int(node.attr("p", 2)) not in (1, 2):
        raise UnsupportedError([f"LpNormalization node {node.name!r} with p = {node.attr('p')} (1 and 2 only)"])
    return [(ins[0].dtype, tuple(ins[0].shape))]


def _lower_lpn(node, ctx):
    """x / ||x||_p along the axis (p 1: the sum of |x|; 2: the square root of the sum of x^2);
    0 where the norm is 0, as ONNX Runtime and the reference do."""
    X, Y = ctx.ins[0], ctx.outs[0]
    axis = norm_axis(int(node.attr("axis", -1)), len(X.shape), node)
    p = int(node.attr("p", 2))
    dt = X.dtype
    b = ctx.b
    b.comment(f"L{p} normalization along axis {axis}")

    def body(base, shape, strides):
        acc = b.accumulator("acc", const(0.0, dt))
        with b.loops(shape, ["r"], role=REDUCTION) as (r,):
            v = b.local("v", Load(X, base + r * strides[0]))
            b.assign(acc, acc + (call("abs", v) if p == 1 else v * v))
        norm = b.local("norm", cast(acc if p == 1 else call("sqrt", acc), dt))
        zero = binop("==", norm, const(0.0, dt))
        with b.loops(shape, ["r"], role=SPATIAL) as (r,):
            at = base + r * strides[0]
            b.store(Y, at, select(zero, const(0.0, dt), Load(X, at) / norm))

    _over(b, X, [i for i in range(len(X.shape)) if i != axis], [axis], body)


register("LpNormalization", lower=_lower_lpn)(_lpn_infer)


# ----------------------------------------------------------------------------- N-C-spatial normalizations
def _bn_infer(node, ins):
    if int(node.attr("training_mode", 0)) or len([o for o in node.outputs if o]) > 1:
        raise UnsupportedError([f"BatchNormalization node {node.name!r} in training mode"])
    x = ins[0]
    if len(x.shape) < 2:
        raise shape_error(node, f"input {x.shape} has no channel dim")
    for v in ins[1:5]:
        if v is None or tuple(v.shape) != (x.shape[1],):
            raise shape_error(node, f"scale/bias/mean/var must all be ({x.shape[1]},)")
    return [(x.dtype, x.shape)]


def _lower_bn(node, ctx):
    X, sc, bi, mean, var = ctx.ins[:5]
    Y = ctx.outs[0]
    eps = float(node.attr("epsilon", 1e-5))
    N, C = X.shape[:2]
    SL = prod(X.shape[2:])
    b = ctx.b
    dt = X.dtype
    with b.loops([N, C], ["n", "c"], role=SPATIAL) as (n, c):
        s = b.local("s", sc[c] / call("sqrt", var[c] + const(eps, dt)))
        t = b.local("t", bi[c] - mean[c] * s)
        with b.loop(SL, "p", role=SPATIAL) as p:
            at = (n * C + c) * SL + p
            b.store(Y, at, X[at] * s + t)


register("BatchNormalization", lower=_lower_bn, run_time_dims=True)(_bn_infer)


def _in_infer(node, ins):
    x = ins[0]
    if len(x.shape) < 3:
        raise shape_error(node, f"input {x.shape} must be N-C-spatial")
    return [(x.dtype, x.shape)]


def _lower_instnorm(node, ctx):
    X, sc, bi = ctx.ins[:3]
    Y = ctx.outs[0]
    eps = float(node.attr("epsilon", 1e-5))
    N, C = X.shape[:2]
    SL = prod(X.shape[2:])
    b = ctx.b
    dt = X.dtype
    with b.loops([N, C], ["n", "c"], role=SPATIAL) as (n, c):
        base = (n * C + c) * SL
        acc = b.accumulator("sum", const(0.0, dt))
        with b.loop(SL, "p", role=REDUCTION) as p:
            b.assign(acc, acc + X[base + p])
        mean = b.local("mean", acc / count(SL, dt))
        sq = b.accumulator("sq", const(0.0, dt))
        with b.loop(SL, "p", role=REDUCTION) as p:
            d = b.local("d", X[base + p] - mean)
            b.assign(sq, sq + d * d)
        s = b.local("s", sc[c] / call("sqrt", sq / count(SL, dt) + const(eps, dt)))
        t = b.local("t", bi[c] - mean * s)
        with b.loop(SL, "p", role=SPATIAL) as p:
            b.store(Y, base + p, X[base + p] * s + t)


register("InstanceNormalization", lower=_lower_instnorm, run_time_dims=True)(_in_infer)


def _lower_lrn(node, ctx):
    X, Y = ctx.ins[0], ctx.outs[0]
    size = int(node.attr("size"))
    alpha, beta, bias = (float(node.attr(k, d)) for k, d in (("alpha", 1e-4), ("beta", 0.75), ("bias", 1.0)))
    N, C = X.shape[:2]
    SL = prod(X.shape[2:])
    lo_off, hi_off = (size - 1) // 2, -(-(size - 1) // 2)
    b = ctx.b
    dt = X.dtype
    with b.loops([N, C], ["n", "c"], role=SPATIAL) as (n, c):
        lo = b.local("lo", maximum(const(0), c - lo_off))
        hi = b.local("hi", minimum(const(C), c + (hi_off + 1)))
        with b.loop(SL, "p", role=SPATIAL) as p:
            acc = b.accumulator("acc", const(0, dt))
            with b.loop(hi, "j", role=REDUCTION, start=lo) as j:
                v = X[(n * C + j) * SL + p]
                b.assign(acc, acc + v * v)
            at = (n * C + c) * SL + p
            den = call("pow", const(bias, dt) + const(alpha / size, dt) * acc, const(beta, dt))
            b.store(Y, at, X[at] / den)


register("LRN", lower=_lower_lrn)(_in_infer)


