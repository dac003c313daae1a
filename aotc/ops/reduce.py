"""Reductions and the normalizations built on them: ReduceSum/Mean/Max/Min/Prod/L1/L2/
SumSquare/LogSum/LogSumExp, Softmax/LogSoftmax/Hardmax, LayerNormalization.

A reduction is a loop nest over the kept dims (spatial) with the reduced dims innermost
(reduction), summing into an accumulator declared in the value's dtype: the schedule picks
the precision it is summed in (float32 sums in float64 on CPU targets, kernel/retype.py). All
of them accept elementwise epilogues: they write their whole output first, and the chain
then runs over it.

NaN, as the ONNX reference implementation (numpy) has it: ReduceMax / ReduceMin over a slice
holding a NaN give NaN (ONNX Runtime skips it), Hardmax marks the first NaN (numpy's argmax
takes a NaN for the largest value); sums and products propagate it by themselves.
"""
from __future__ import annotations

import numpy as np

from ..errors import ShapeError
from ..ir import dtypes
from ..ir.dims import upper
from ..ir.internal import COERCE_2D, SOFTMAX_ROWS
from ..kernel.ir import (CALL_COST, F32, I32, ORDERED, REDUCTION, SPATIAL, Buffer, Builder, BufPtr, Expr, Load, Store, binop,
                         call, cast, const, extent, maximum, select, wrap)
from .common import count, ints, norm_axis, prod
from .registry import register
from .tensor import _bstrides, contiguous_strides, strided_copy

F64 = dtypes.FLOAT64
NEG_INF = float("-inf")


def _lowest(dt, sign: int) -> Expr:
    """-inf (sign=-1) or +inf (sign=+1) in dt, or the integer extreme."""
    dt = np.dtype(dt)
    if dt.kind == "f":
        return const(sign * float("inf"), dt)
    if dt.kind == "b":
        return const(sign > 0, dt)
    info = np.iinfo(dt)
    return const(info.max if sign > 0 else info.min, dt)


# ----------------------------------------------------------------------------- Reduce*
def _reduce_axes(node, ins) -> list[int] | None:
    """Sorted reduced axes; None means 'no reduction' (noop_with_empty_axes)."""
    x = ins[0]
    rank = len(x.shape)
    axes = None
    if len(ins) > 1 and ins[1] is not None:
        if ins[1].const is None:
            raise ShapeError(f"{node.op_type} node {node.name!r}: axes must be known at compile time",
                             "bind the input that feeds it with --const")
        axes = ints(ins[1].const)
    elif node.attr("axes") is not None:          # an older form normalize.py did not rewrite
        axes = [int(a) for a in node.attr("axes")]
    if not axes:
        if int(node.attr("noop_with_empty_axes", 0)):
            return None
        return list(range(rank))
    return sorted({norm_axis(a, rank, node) for a in axes})


def _reduce_shape(node, x, axes):
    if axes is None:
        return tuple(x.shape)
    keep = int(node.attr("keepdims", 1))
    return tuple(1 if k in axes else d for k, d in enumerate(x.shape) if keep or k not in axes)


# op -> (initial value, accumulate(acc, x), finalize(acc, count), is a sum (an accumulator))
def _sum_like(term, final=lambda s, n: s):
    return (lambda dt: const(0, dt), lambda acc, x: acc + term(x), final, True)


_REDUCERS = {
    "ReduceSum": _sum_like(lambda x: x),
    "ReduceMean": _sum_like(lambda x: x, lambda s, n: s / count(n, s.dtype)),
    "ReduceSumSquare": _sum_like(lambda x: x * x),
    "ReduceL1": _sum_like(lambda x: call("abs", x)),
    "ReduceL2": _sum_like(lambda x: x * x, lambda s, n: call("sqrt", s) if s.dtype.kind == "f"
                          else cast(call("sqrt", cast(s, F64)), s.dtype)),
    "ReduceLogSum": _sum_like(lambda x: x, lambda s, n: call("log", s)),
    "ReduceProd": (lambda dt: const(1, dt), lambda acc, x: acc * x, lambda s, n: s, True),
    "ReduceMax": (lambda dt: _lowest(dt, -1), lambda acc, x: select(x > acc, x, acc), lambda s, n: s, False),
    "ReduceMin": (lambda dt: _lowest(dt, +1), lambda acc, x: select(x < acc, x, acc), lambda s, n: s, False),
}


def _reduce_dims(shape, axes):
    """Merge adjacent dims of the same kind. Returns (kept, reduced): lists of
    (extent, input stride[, output stride])."""
    xs = contiguous_strides(shape)
    groups: list[list] = []          # [is_reduced, extent, in_stride]
    for k, (d, s) in enumerate(zip(shape, xs)):
        if d == 1:
            continue
        red = k in axes
        if groups and groups[-1][0] == red and groups[-1][2] == s * d:
            groups[-1][1] *= d
            groups[-1][2] = s
            continue
        groups.append([red, d, s])
    kept = [(d, s) for r, d, s in groups if not r]
    ost = contiguous_strides([d for d, _ in kept])
    return [(d, s, o) for (d, s), o in zip(kept, ost)], [(d, s) for r, d, s in groups if r]


def _lower_reduce(node, ctx):
    X, Y = ctx.ins[0], ctx.outs[0]
    axes = _reduce_axes(node, [ctx.value(0)] + [ctx.value(i) for i in range(1, len(node.inputs))])
    b = ctx.b
    if axes is None:
        b.comment("no axes: identity")
        strided_copy(b, Y, X, (X.size,), (1,), (1,))
        return
    kept, red = _reduce_dims(X.shape, axes)
    count = prod(X.shape[a] for a in axes)
    b.comment(f"{node.op_type} over axes {axes} ({count} elements each)")
    if node.op_type == "ReduceLogSumExp":
        _lower_logsumexp(b, X, Y, kept, red)
        return
    init, step, final, is_sum = _REDUCERS[node.op_type]
    if is_sum and red and kept and kept[-1][1] == 1 and kept[-1][0] >= COLUMN_LANES:
        _reduce_columns(b, X, Y, kept, red, init, step, lambda acc: final(acc, count))
        return
    # ReduceMax / ReduceMin over floats: the comparison skips a NaN, so a second accumulator
    # flags one (1 when seen) and the result is NaN then. Two plain `acc = acc OP e` updates,
    # which the GPU schedule still splits across a work-group (schedule/gpu_group.py).
    flag_nan = not is_sum and X.dtype.kind == "f"
    with b.loops([d for d, _, _ in kept], [f"o{k}" for k in range(len(kept))], role=SPATIAL) as oidx:
        base = sum((i * s for i, (_, s, _) in zip(oidx, kept)), const(0))
        acc = b.accumulator("acc", init(X.dtype)) if is_sum else b.local("acc", init(X.dtype))
        nan = b.local("nan", const(0, I32)) if flag_nan else None
        with b.loops([d for d, _ in red], [f"r{k}" for k in range(len(red))], role=REDUCTION) as ridx:
            off = base + sum((i * s for i, (_, s) in zip(ridx, red)), const(0))
            x = b.local("x", Load(X, off)) if flag_nan else Load(X, off)
            b.assign(acc, step(acc, x))
            if flag_nan:
                b.assign(nan, maximum(nan, cast(binop("!=", x, x), I32)))
        result = final(acc, count)
        if flag_nan:
            result = select(nan > const(0, I32), const(float("nan"), X.dtype), result)
        b.store(Y, sum((i * o for i, (_, _, o) in zip(oidx, kept)), const(0)), result)


# the outputs a reduction over outer axes sums side by side (_reduce_columns)
COLUMN_LANES = 8


def _reduce_columns(b: Builder, X: Buffer, Y: Buffer, kept, red, init, step, final) -> None:
    """A sum over axes before the innermost, which is kept (a mean over the planes of a
    channels-last tensor: N, H, W, C over H and W): COLUMN_LANES adjacent outputs at a time,
    each its own accumulator over the reduced elements in order, so that a compiler loads the
    adjacent inputs of a step as one vector (one element at a time with a stride, the other
    way: 4-6x slower on 784 x 72). The reduced loop runs in order (ORDERED), not as a vector
    reduction along it."""
    (inner, _, _), outer = kept[-1], kept[:-1]
    blocks, tail = divmod(inner, COLUMN_LANES)
    b.comment(f"{COLUMN_LANES} adjacent outputs side by side")
    with b.loops([d for d, _, _ in outer], [f"o{k}" for k in range(len(outer))], role=SPATIAL) as oidx:
        base = sum((i * s for i, (_, s, _) in zip(oidx, outer)), const(0))
        obase = sum((i * o for i, (_, _, o) in zip(oidx, outer)), const(0))

        def columns(q0, n: int):
            accs = [b.accumulator("acc", init(X.dtype)) for _ in range(n)]
            with b.loops([d for d, _ in red], [f"r{k}" for k in range(len(red))], role=ORDERED) as ridx:
                off = base + q0 + sum((i * s for i, (_, s) in zip(ridx, red)), const(0))
                for lane, acc in enumerate(accs):
                    b.assign(acc, step(acc, Load(X, off + lane)))
            for lane, acc in enumerate(accs):
                b.store(Y, obase + q0 + lane, final(acc))

        if blocks:
            with b.loop(blocks, "q", role=SPATIAL) as q:
                columns(q * COLUMN_LANES, COLUMN_LANES)
        if tail:
            columns(const(blocks * COLUMN_LANES), tail)


def _lower_logsumexp(b: Builder, X: Buffer, Y: Buffer, kept, red):
    with b.loops([d for d, _, _ in kept], [f"o{k}" for k in range(len(kept))], role=SPATIAL) as oidx:
        base = sum((i * s for i, (_, s, _) in zip(oidx, kept)), const(0))
        mx = b.local("mx", _lowest(X.dtype, -1))
        with b.loops([d for d, _ in red], [f"r{k}" for k in range(len(red))], role=REDUCTION) as ridx:
            off = base + sum((i * s for i, (_, s) in zip(ridx, red)), const(0))
            v = b.local("v", Load(X, off))
            b.assign(mx, select(v > mx, v, mx))
        # an infinite maximum shifts by 0: exp(inf - inf) would make a NaN of log(inf) = inf,
        # and all -inf gives log(0) = -inf
        inf = const(float("inf"), X.dtype)
        b.assign(mx, select(binop("||", mx.eq(inf), mx.eq(-inf)), const(0, X.dtype), mx))
        acc = b.accumulator("acc", const(0, X.dtype))
        with b.loops([d for d, _ in red], [f"r{k}" for k in range(len(red))], role=REDUCTION) as ridx:
            off = base + sum((i * s for i, (_, s) in zip(ridx, red)), const(0))
            b.assign(acc, acc + call("exp", Load(X, off) - mx))
        b.store(Y, sum((i * o for i, (_, _, o) in zip(oidx, kept)), const(0)),
                cast(call("log", acc), X.dtype) + mx)


def _reduce_infer(node, ins):
    x = ins[0]
    return [(x.dtype, _reduce_shape(node, x, _reduce_axes(node, ins)))]


# sums: zeros added to what they reduce change nothing (OpDef.zero_blind)
_ZERO_BLIND = ("ReduceSum", "ReduceSumSquare", "ReduceL1", "ReduceL2", "ReduceLogSum")
for _op in list(_REDUCERS) + ["ReduceLogSumExp"]:
    register(_op, lower=_lower_reduce, bounded_rule="reduce", zero_blind=_op in _ZERO_BLIND,
             run_time_dims=True)(_reduce_infer)


# ----------------------------------------------------------------------------- Softmax family
def _softmax_dims(node, shape):
    """(outer, n, inner): the reduced axis has n elements at stride `inner`."""
    rank = len(shape)
    if rank == 0:
        return 1, 1, 1
    axis = norm_axis(int(node.attr("axis", -1)), rank, node)
    if int(node.attr(COERCE_2D, 0)):       # opset < 13: softmax over the flattened axis..end
        return prod(shape[:axis]), prod(shape[axis:]), 1
    return prod(shape[:axis]), shape[axis], prod(shape[axis + 1:])


def _lower_softmax(node, ctx):
    X, Y = ctx.ins[0], ctx.outs[0]
    outer, n, inner = _softmax_dims(node, X.shape)
    op = node.op_type
    b = ctx.b
    b.comment(f"{op} over {n} elements, stride {inner}")
    with b.loops([outer, inner], ["p", "q"], role=SPATIAL) as (p, q):
        def at(k):
            return (p * n + k) * inner + q

        if op == "Softmax":
            row = (BufPtr(Y, at(0)), BufPtr(X, at(0))) if node.attr(SOFTMAX_ROWS, 0) and inner == 1 else None
            softmax_row(b, lambda k: Load(X, at(k)), lambda k, v: Store(Y, at(k), v), n, X.dtype,
                        load_stored=lambda k: Load(Y, at(k)), row=row)
            return
        # the maximum from -inf (a start the vector lanes can share: schedule/cpu.py); the
        # select inlines, unlike fmaxf. LogSoftmax skips a NaN here: it reaches every output
        # through exp(x - mx) and the sum anyway (and the GPU schedule splits this form);
        # Hardmax keeps it, as numpy's argmax takes a NaN for the largest value
        mx = b.local("mx", _lowest(X.dtype, -1))
        with b.loop(n, "k", role=REDUCTION) as k:
            v = b.local("v", Load(X, at(k)))
            if op == "Hardmax" and X.dtype.kind == "f":
                b.assign(mx, select(binop("||", v > mx, binop("!=", v, v)), v, mx))
            else:
                b.assign(mx, select(v > mx, v, mx))
        if op == "Hardmax":
            arg = b.local("arg", const(-1))
            with b.loop(n, "k", role=ORDERED) as k:
                v = b.local("v", Load(X, at(k)))
                hit = v.eq(mx)
                if X.dtype.kind == "f":      # mx is NaN: the first NaN
                    hit = binop("||", hit, binop("!=", v, v))
                with b.if_(binop("&&", arg < 0, hit)):
                    b.assign(arg, k)
            with b.loop(n, "k", role=SPATIAL) as k:
                b.store(Y, at(k), select(k.eq(arg), const(1, Y.dtype), const(0, Y.dtype)))
            return
        s = b.accumulator("sum", const(0.0, X.dtype))
        with b.loop(n, "k", role=REDUCTION) as k:
            b.assign(s, s + call("exp", Load(X, at(k)) - mx))
        shift = b.local("shift", mx + cast(call("log", s), X.dtype))
        with b.loop(n, "k", role=SPATIAL) as k:
            b.store(Y, at(k), Load(X, at(k)) - shift)


# whether rows marked SOFTMAX_ROWS call runtime/aotc_softmax.h (False: the loops below; a
# switch for the tests that compare the two)
SOFTMAX_RUNTIME = True


def softmax_row(b: Builder, load, store, n: int, dtype, load_stored=None, guarded: bool = False,
                dead: Expr | None = None, on_prob=None, row: tuple[BufPtr, BufPtr] | None = None) -> None:
    """softmax over n values: load(k) reads value k, store(k, v) -> the Store statement writing
    result k, load_stored(k) reads what store wrote (default: load, for a row done in place).
    The maximum skips a NaN (it reaches every output anyway, through exp(x - max) and the sum).
    `guarded`: attention's rule for a row of -inf (and, with `dead`, a row whose bias masks
    every key): zeros, not NaN. on_prob(builder, k, p): more to do with each probability.
    `row` (destination, source), given where the caller's node is marked SOFTMAX_ROWS (the pass
    runtime_kernels decides for which targets), the row is contiguous and on_prob does nothing:
    a float32 row calls runtime/aotc_softmax.h instead, the same computation in masked vectors."""
    if row is not None and SOFTMAX_RUNTIME and dtype == F32:
        b.comment("the row's softmax in 16-lane vectors, its end masked (runtime/aotc_softmax.h)")
        # its cost as the loops would count it: three statements an element and an exp
        b.call("aotc_softmax_row", row[0], row[1], wrap(extent(n)), const(int(guarded)),
               const(0) if dead is None else cast(dead, I32), work=upper(n) * (3 + CALL_COST))
        return
    load_stored = load_stored or load
    # the maximum from -inf, not from value 0: the row may be what the group writes (in place),
    # which a GPU work-group cannot read before its split loops (schedule/gpu_group.py), and a
    # constant start lets the CPU's vector lanes share the loop (schedule/cpu.py); the result
    # is the same, NaN rows included (they give NaN through exp and the sum either way)
    mx = b.local("mx", const(NEG_INF, dtype))
    with b.loop(n, "k", role=REDUCTION) as k:
        v = b.local("v", load(k))
        b.assign(mx, select(v > mx, v, mx))
    if guarded:
        mx = b.local("shift", select(mx.eq(const(NEG_INF, dtype)), const(0.0, dtype), mx))
    s = b.accumulator("sum", const(0.0, dtype))
    with b.loop(n, "k", role=REDUCTION) as k:
        e = b.local("e", call("exp", load(k) - mx))
        b.emit(store(k, e))
        b.assign(s, s + e)
    if guarded:
        s = b.local("total", select(s.eq(const(0.0, s.dtype)), const(1.0, s.dtype), s))
    inv = b.local("inv", const(1.0, dtype) / s, dtype=dtype)
    with b.loop(n, "k", role=SPATIAL) as k:
        p = load_stored(k) * inv
        if dead is not None:
            p = select(dead, const(0.0, dtype), p)
        if on_prob is not None:
            p = b.local("p", p)
            on_prob(b, k, p)
        b.emit(store(k, p))


def _softmax_infer(node, ins):
    return [(ins[0].dtype, tuple(ins[0].shape))]


def _fold_coerced(node, ins):
    """Constant inputs under opset < 13 semantics (the reference evaluator only knows opset 21)."""
    if not int(node.attr(COERCE_2D, 0)) or ins[0].const is None:
        return None
    x = ins[0].const
    outer, n, _ = _softmax_dims(node, x.shape)
    x2 = x.reshape(outer, n).astype(np.float64)
    x2 = x2 - x2.max(axis=1, keepdims=True)
    if node.op_type == "Softmax":
        y = np.exp(x2) / np.exp(x2).sum(axis=1, keepdims=True)
    elif node.op_type == "LogSoftmax":
        y = x2 - np.log(np.exp(x2).sum(axis=1, keepdims=True))
    else:
        y = np.zeros_like(x2)
        y[np.arange(outer), x2.argmax(axis=1)] = 1
    return [y.reshape(x.shape).astype(x.dtype)]


register(["Softmax", "LogSoftmax", "Hardmax"], lower=_lower_softmax, fold=_fold_coerced,
         bounded_rule="along_axis", run_time_dims=True)(_softmax_infer)


# ----------------------------------------------------------------------------- LayerNormalization
def _ln_dims(node, shape):
    axis = norm_axis(int(node.attr("axis", -1)), len(shape), node)
    return axis, prod(shape[:axis]), tuple(shape[axis:])


def _stat_dtype(node, x_dtype):
    return dtypes.FLOAT32 if int(node.attr("stash_type", 1)) == 1 else np.dtype(x_dtype)


def _lower_layernorm(node, ctx):
    X, S = ctx.ins[0], ctx.ins[1]
    B = ctx.ins[2] if len(ctx.ins) > 2 else None
    Y = ctx.outs[0]
    Mean = ctx.outs[1] if len(ctx.outs) > 1 else None
    Inv = ctx.outs[2] if len(ctx.outs) > 2 else None
    axis, outer, norm = _ln_dims(node, X.shape)
    n = prod(norm)
    eps = float(node.attr("epsilon", 1e-5))
    dt = X.dtype
    b = ctx.b
    b.comment(f"normalize over the last {len(norm)} dim(s), {n} elements; epsilon {eps:g}")
    s_st = _bstrides(S.shape, norm)
    b_st = _bstrides(B.shape, norm) if B is not None else None
    with b.loops([outer], ["p"], role=SPATIAL) as (p,):
        row = p * n
        s = b.accumulator("sum", const(0.0, dt))
        with b.loop(n, "j", role=REDUCTION) as j:
            b.assign(s, s + Load(X, row + j))
        mean = b.local("mean", s / count(n, dt))
        v = b.accumulator("var", const(0.0, dt))
        with b.loop(n, "j", role=REDUCTION) as j:
            d = b.local("d", Load(X, row + j) - mean)
            b.assign(v, v + d * d)
        rstd = b.local("rstd", const(1.0, dt) / call("sqrt", v / count(n, dt) + const(eps, dt)))
        with b.loops(norm, [f"j{k}" for k in range(len(norm))], role=SPATIAL) as idx:
            xo = row + sum((i * st for i, st in zip(idx, contiguous_strides(norm))), const(0))
            y = cast((Load(X, xo) - mean) * rstd, X.dtype)
            y = y * Load(S, sum((i * st for i, st in zip(idx, s_st)), const(0)))
            if B is not None:
                y = y + Load(B, sum((i * st for i, st in zip(idx, b_st)), const(0)))
            b.store(Y, xo, y)
        if Mean is not None:
            b.store(Mean, p, mean)
        if Inv is not None:
            b.store(Inv, p, rstd)


@register("LayerNormalization", lower=_lower_layernorm, run_time_dims=True)
def _layernorm(node, ins):
    x = ins[0]
    axis, _, norm = _ln_dims(node, x.shape)
    for v, what in ((ins[1], "Scale"), (ins[2] if len(ins) > 2 else None, "B")):
        if v is not None and len(v.shape) > len(norm):
            raise ShapeError(f"LayerNormalization node {node.name!r}: {what} {v.shape} does not broadcast "
                             f"to the normalized shape {norm}")
    stat_shape = tuple(x.shape[:axis]) + (1,) * len(norm)
    st = _stat_dtype(node, x.dtype)
    return [(x.dtype, tuple(x.shape)), (st, stat_shape), (st, stat_shape)][:len(node.outputs)]
