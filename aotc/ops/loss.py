"""Loss operators: NegativeLogLikelihoodLoss, and SoftmaxCrossEntropyLoss (a log-softmax over
the class axis, then the same loss).

Both take scores / log-probabilities x [N, C, d1..dk] and integer targets [N, d1..dk]. The
loss of one element is -x[n, t, d] * weight[t] (weight 1 without the weight input), 0 where t
equals ignore_index. A target t outside [0, C) reads class t + C when t >= -C, as ONNX
Runtime does (its definition gathers with GatherElements); below -C or at C and above the run
fails with AOTC_ERR_INDEX_OUT_OF_RANGE. reduction 'none' stores every element's loss, 'sum'
their sum, 'mean' the sum over the summed weights of the elements not ignored (0 / 0, NaN,
when every element is ignored, as in ONNX Runtime)."""
from __future__ import annotations

from ..errors import ModelError, ShapeError, UnsupportedError
from ..kernel.ir import REDUCTION, SPATIAL, Builder, Expr, Load, binop, call, cast, const, select
from .common import prod
from .reduce import NEG_INF
from .registry import register
from .tensor import _index

_REDUCTIONS = ("none", "sum", "mean")


def _dims(node, x, t) -> tuple[int, int, int]:
    """(N, C, D): D the product of the dims after the class axis."""
    if len(x.shape) < 2:
        raise ShapeError(f"{node.op_type} node {node.name!r}: input {tuple(x.shape)} needs a batch and a class axis")
    want = (x.shape[0],) + tuple(x.shape[2:])
    if tuple(t.shape) != want:
        raise ShapeError(f"{node.op_type} node {node.name!r}: target {tuple(t.shape)} must have shape {want} "
                         f"(input {tuple(x.shape)} without its class axis)")
    if t.dtype.kind not in "iu":
        raise ShapeError(f"{node.op_type} node {node.name!r}: target must be an integer tensor, not {t.dtype}")
    return x.shape[0], x.shape[1], prod(x.shape[2:])


def _reduction(node) -> str:
    r = node.attr("reduction", "mean")
    if r not in _REDUCTIONS:
        raise ModelError(f"{node.op_type} node {node.name!r}: reduction {r!r} is none of {', '.join(_REDUCTIONS)}")
    return r


def _infer(node, ins):
    x, t = ins[0], ins[1]
    if x.dtype.kind != "f":
        raise UnsupportedError([f"{node.op_type} node {node.name!r}: element type {x.dtype} (floating point only)"])
    n, c, _ = _dims(node, x, t)
    w = ins[2] if len(ins) > 2 else None
    if w is not None and tuple(w.shape) != (c,):
        raise ShapeError(f"{node.op_type} node {node.name!r}: weight {tuple(w.shape)} must have shape ({c},)")
    shape = tuple(t.shape) if _reduction(node) == "none" else ()
    outs = [(x.dtype, shape)]
    if node.op_type == "SoftmaxCrossEntropyLoss" and len(node.outputs) > 1:
        outs.append((x.dtype, tuple(x.shape)))          # log_prob
    return outs


def _loss(b: Builder, node, ctx, N: int, C: int, D: int, log_prob) -> None:
    """The loss from log_prob(n, c, d) (an expression, evaluated in the loop over n, d)."""
    T, W, Y = ctx.ins[1], ctx.ins[2] if len(ctx.ins) > 2 else None, ctx.outs[0]
    dt = Y.dtype
    reduction = _reduction(node)
    ignore = node.attr("ignore_index", None)
    b.comment(f"{node.op_type}: {N} x {D} targets over {C} classes, reduction {reduction}"
              + (f", ignore_index {int(ignore)}" if ignore is not None else ""))

    def element(n, d):
        """(loss, weight) of target (n, d)"""
        raw = b.local("t", cast(Load(T, n * D + d), "int64"))
        if ignore is None:
            cls = _index(b, raw, C, "cls")
            w = Load(W, cls) if W is not None else const(1.0, dt)
            return b.local("loss", -log_prob(n, cls, d) * w), w
        kept = b.local("kept", binop("!=", raw, const(int(ignore), "int64")))
        cls = _index(b, select(kept, raw, const(0, "int64")), C, "cls")
        w = b.local("w", select(kept, Load(W, cls) if W is not None else const(1.0, dt), const(0.0, dt)))
        return b.local("loss", select(kept, -log_prob(n, cls, d) * w, const(0.0, dt))), w

    if reduction == "none":
        with b.loops([N, D], ["n", "d"], role=SPATIAL) as (n, d):
            loss, _ = element(n, d)
            b.store(Y, n * D + d, loss)
        return
    total = b.accumulator("total", const(0.0, dt))
    weights = b.accumulator("weights", const(0.0, dt))
    with b.loops([N, D], ["n", "d"], role=REDUCTION) as (n, d):
        loss, w = element(n, d)
        b.assign(total, total + loss)
        b.assign(weights, weights + w)
    b.store(Y, 0, cast(total / weights if reduction == "mean" else total, dt))


def _lower_nll(node, ctx):
    X = ctx.ins[0]
    N, C, D = _dims(node, X, ctx.ins[1])
    _loss(ctx.b, node, ctx, N, C, D, lambda n, c, d: Load(X, (n * C + c) * D + d))


def _lower_sce(node, ctx):
    X = ctx.ins[0]
    LP = ctx.outs[1] if len(ctx.outs) > 1 else None
    N, C, D = _dims(node, X, ctx.ins[1])
    b = ctx.b

    def log_prob(n, c, d) -> Expr:
        # log-softmax over the classes of (n, d): x - (max + log(sum(exp(x - max))))
        def at(k):
            return (n * C + k) * D + d
        mx = b.local("mx", const(NEG_INF, X.dtype))
        with b.loop(C, "k", role=REDUCTION) as k:
            v = b.local("v", Load(X, at(k)))
            b.assign(mx, select(v > mx, v, mx))
        s = b.accumulator("sum", const(0.0, X.dtype))
        with b.loop(C, "k", role=REDUCTION) as k:
            b.assign(s, s + call("exp", Load(X, at(k)) - mx))
        shift = b.local("shift", mx + cast(call("log", s), X.dtype))
        if LP is not None:
            with b.loop(C, "k", role=SPATIAL) as k:
                b.store(LP, at(k), Load(X, at(k)) - shift)
        return Load(X, at(c)) - shift

    _loss(b, node, ctx, N, C, D, log_prob)


register("NegativeLogLikelihoodLoss", lower=_lower_nll, accepts_epilogue=False)(_infer)
register("SoftmaxCrossEntropyLoss", lower=_lower_sce, accepts_epilogue=False)(_infer)
