"""Data movement: Transpose, Concat, Split, Slice, Gather(Elements/ND), Expand, Tile, Range,
Trilu, ArgMax/ArgMin, TopK, OneHot, ScatterND/ScatterElements.

Every op here works on any element type (shape tensors are int64, masks bool). Most of them
are one *strided copy*: a loop nest over the output where the input offset is an affine
function of the loop indices (Transpose permutes strides, Slice scales and offsets them,
Expand zeroes them, Concat/Split shift the offset). `strided_copy` merges the dims that both
sides walk contiguously, so the generated code reads like the index math it implements:

    over i0 < 4, i1 < 16, i2 < 8:  y[i0*128 + i1*8 + i2] = x[i1*32 + i0*8 + i2]

Ops whose index comes from data (Gather & co.) read it at run time; a negative index counts
from the end, and an index out of range stops the run with AOTC_ERR_INDEX_OUT_OF_RANGE (the
run function returns it and names the kernel), as the ONNX spec says it is an error: nothing
is read or written outside a buffer, and no clamped value is passed off as a result.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from ..errors import ShapeError
from ..ir import dtypes
from ..ir.dims import RunTimeDim, decide, is_dim
from ..kernel.ir import I64, ORDERED, SPATIAL, Buffer, Builder, Expr, Load, binop, cast, const, select, wrap
from .common import broadcast, const_ints, ints, norm_axis, prod
from .registry import register


# ----------------------------------------------------------------------------- helpers
def contiguous_strides(shape: Sequence[int]) -> list[int]:
    st, acc = [], 1
    for d in reversed(list(shape)):
        st.append(acc)
        acc = acc * _size(d)
    return st[::-1]


def strided_copy(b: Builder, dst: Buffer, src: Buffer, shape: Sequence[int], dst_strides: Sequence[int],
                 src_strides: Sequence[int], dst_off: int = 0, src_off: int = 0) -> None:
    """dst[dst_off + sum(i_k * dst_strides[k])] = src[src_off + sum(i_k * src_strides[k])] over `shape`.
    Size-1 dims vanish; adjacent dims that both sides walk with composable strides merge."""
    if prod(shape) == 0:
        return
    merged: list[list[int]] = []
    for n, ds, ss in zip(shape, dst_strides, src_strides):
        if n == 1:
            continue
        if merged and merged[-1][1] == ds * n and merged[-1][2] == ss * n:
            merged[-1] = [merged[-1][0] * n, ds, ss]
            continue
        merged.append([_size(n), _size(ds), _size(ss)])
    with b.loops([m[0] for m in merged], role=SPATIAL) as idx:
        do: Expr = wrap(dst_off)
        so: Expr = wrap(src_off)
        for i, (_, ds, ss) in zip(idx, merged):
            do = do + i * ds if ds >= 0 else do - i * -ds
            so = so + i * ss if ss >= 0 else so - i * -ss
        b.store(dst, do, Load(src, so))


def _size(x):
    """A size or stride as it is: an int, or a run-time Dim (ir/dims.py)."""
    return x if is_dim(x) else int(x)


def _ctx_ints(ctx, pos) -> list[int] | None:
    c = ctx.const(pos)
    return None if c is None else ints(c)


def _index(b: Builder, raw: Expr, n: int, hint: str = "j") -> Expr:
    """A run-time index into a dim of size n: negative counts from the end; outside [-n, n) the
    kernel fails with AOTC_ERR_INDEX_OUT_OF_RANGE."""
    j = b.local(hint, cast(raw, I64))
    with b.if_(binop("||", j < -n, j >= n)):
        b.fail("AOTC_ERR_INDEX_OUT_OF_RANGE", f"an index outside [-{n}, {n})")
    b.assign(j, select(j < 0, j + n, j))
    return j


# ----------------------------------------------------------------------------- Transpose
def _perm(node, rank) -> list[int]:
    p = node.attr("perm", None)
    perm = list(range(rank))[::-1] if p is None else [int(v) for v in p]
    if sorted(perm) != list(range(rank)):
        raise ShapeError(f"Transpose node {node.name!r}: perm {perm} is not a permutation of {rank} axes")
    return perm


def _lower_transpose(node, ctx):
    X, Y = ctx.ins[0], ctx.outs[0]
    perm = _perm(node, len(X.shape))
    xs = contiguous_strides(X.shape)
    ctx.b.comment(f"transpose {list(X.shape)} -> {list(Y.shape)}, perm {perm}")
    strided_copy(ctx.b, Y, X, Y.shape, contiguous_strides(Y.shape), [xs[p] for p in perm])


@register("Transpose", lower=_lower_transpose, bounded_rule="transpose", run_time_dims=True)
def _transpose(node, ins):
    x = ins[0]
    perm = _perm(node, len(x.shape))
    return [(x.dtype, tuple(x.shape[p] for p in perm))]


# ----------------------------------------------------------------------------- Concat / Split
def _lower_concat(node, ctx):
    Y = ctx.outs[0]
    axis = norm_axis(int(node.attr("axis")), len(Y.shape), node)
    ys = contiguous_strides(Y.shape)
    off = 0
    for k, X in enumerate(ctx.ins):
        if X is None:
            continue
        n = X.shape[axis]
        if is_dim(n) or n:            # (a run-time size may be 0: its loops then run no times)
            ctx.b.comment(f"input {k}: [{off}, {off + n}) along axis {axis}")
            strided_copy(ctx.b, Y, X, X.shape, ys, contiguous_strides(X.shape), dst_off=off * ys[axis])
        off += n


@register("Concat", lower=_lower_concat, bounded_rule="concat", run_time_dims=True)
def _concat(node, ins):
    xs = [v for v in ins if v is not None]
    rank = len(xs[0].shape)
    axis = norm_axis(int(node.attr("axis")), rank, node)
    out = list(xs[0].shape)
    for v in xs[1:]:
        if len(v.shape) != rank or any(a != c for k, (a, c) in enumerate(zip(v.shape, out)) if k != axis):
            raise ShapeError(f"Concat node {node.name!r}: shapes {[tuple(x.shape) for x in xs]} differ "
                             f"outside axis {axis}")
    out[axis] = sum(v.shape[axis] for v in xs)
    dt = {v.dtype for v in xs}
    if len(dt) != 1:
        raise ShapeError(f"Concat node {node.name!r}: inputs of different types {sorted(map(str, dt))}")
    return [(xs[0].dtype, tuple(out))]


def _split_sizes(node, x, split, n_out) -> list[int]:
    axis = norm_axis(int(node.attr("axis", 0)), len(x.shape), node)
    dim = x.shape[axis]
    if split is not None:
        if sum(split) != dim or len(split) != n_out:
            raise ShapeError(f"Split node {node.name!r}: sizes {split} do not split dim {dim} into {n_out}")
        return split
    k = int(node.attr("num_outputs", n_out))
    chunk = -(-dim // k)
    sizes = [min(chunk, max(0, dim - chunk * i)) for i in range(k)]
    if k <= 0 or any(n <= 0 for n in sizes):
        raise ShapeError(f"Split node {node.name!r}: cannot split dim {dim} into {k} outputs")
    return sizes


def _lower_split(node, ctx):
    X = ctx.ins[0]
    axis = norm_axis(int(node.attr("axis", 0)), len(X.shape), node)
    sizes = _split_sizes(node, X, _ctx_ints(ctx, 1) if ctx.has_input(1) else None, len(node.outputs))
    xs = contiguous_strides(X.shape)
    off = 0
    for k, (Y, n) in enumerate(zip(ctx.outs, sizes)):
        if Y is not None and n:
            ctx.b.comment(f"output {k}: [{off}, {off + n}) along axis {axis}")
            strided_copy(ctx.b, Y, X, Y.shape, contiguous_strides(Y.shape), xs, src_off=off * xs[axis])
        off += n


@register("Split", lower=_lower_split, run_time_dims=True)
def _split(node, ins):
    x = ins[0]
    axis = norm_axis(int(node.attr("axis", 0)), len(x.shape), node)
    sizes = _split_sizes(node, x, const_ints(node, ins, 1, "split sizes"), len(node.outputs))
    return [(x.dtype, tuple(s if k == axis else d for k, d in enumerate(x.shape))) for s in sizes]


# ----------------------------------------------------------------------------- Slice
def _slice_plan(node, shape, starts, ends, axes, steps):
    """Per dim of `shape`: (start, step, length), ONNX clamping rules (= Python slices)."""
    rank = len(shape)
    axes = list(range(len(starts))) if axes is None else axes
    steps = [1] * len(starts) if steps is None else steps
    if not (len(starts) == len(ends) == len(axes) == len(steps)):
        raise ShapeError(f"Slice node {node.name!r}: starts/ends/axes/steps have different lengths")
    plan = [(0, 1, d) for d in shape]
    for s, e, a, st in zip(starts, ends, axes, steps):
        a = norm_axis(a, rank, node)
        if st == 0:
            raise ShapeError(f"Slice node {node.name!r}: step 0")
        if any(is_dim(x) for x in (s, e, shape[a])):
            plan[a] = _run_time_slice(s, e, st, shape[a])
            continue
        r = range(*slice(s, e, st).indices(shape[a]))
        plan[a] = (r.start, r.step, len(r))
    return plan


def _run_time_slice(s, e, st, n):
    """(start, step, length) of a slice where the bounds or the dim are run-time sizes: Python's
    clamping, decided for every size in range (RunTimeDim where it is not); step 1 only."""
    if st != 1:
        raise RunTimeDim(f"a slice with step {st} of a run-time dimension")

    def cmp(a, op, b) -> bool:
        return decide(a, op, b) is True

    def clamp(x):
        x = x + n if not is_dim(x) and x < 0 else x
        if cmp(x, "<=", 0):
            return 0
        if cmp(x, ">=", n):
            return n
        if cmp(x, ">=", 0) and cmp(x, "<=", n):
            return x
        raise RunTimeDim(f"whether {x} lies within 0..{n} depends on the run-time sizes")

    s, e = clamp(s), clamp(e)
    if cmp(e, "<=", s):
        return (0, 1, 0)
    if not cmp(e, ">=", s):
        raise RunTimeDim(f"whether the slice {s}:{e} is empty depends on the run-time sizes")
    return (s, 1, e - s)


def _slice_args(node, get):
    starts, ends = get(1, "starts"), get(2, "ends")
    return starts, ends, get(3, "axes"), get(4, "steps")


def _lower_slice(node, ctx):
    X, Y = ctx.ins[0], ctx.outs[0]
    args = _slice_args(node, lambda p, w: _ctx_ints(ctx, p) if ctx.has_input(p) else None)
    plan = _slice_plan(node, X.shape, *args)
    xs = contiguous_strides(X.shape)
    def text(s, st, n, d):
        if (s, st, n) == (0, 1, d):
            return ":"
        end = s + st * n
        return f"{s}:{end if end >= 0 else ''}" + (f":{st}" if st != 1 else "")
    ctx.b.comment("slice [" + ", ".join(text(*p, d) for p, d in zip(plan, X.shape)) + "]")
    strided_copy(ctx.b, Y, X, Y.shape, contiguous_strides(Y.shape), [st * x for (_, st, _), x in zip(plan, xs)],
                 src_off=sum(s * x for (s, _, _), x in zip(plan, xs)))


@register("Slice", lower=_lower_slice, bounded_rule="slice", run_time_dims=True,
          shape_inputs=frozenset({1, 2, 3, 4}))
def _slice(node, ins):
    x = ins[0]
    args = _slice_args(node, lambda p, w: const_ints(node, ins, p, w))
    plan = _slice_plan(node, x.shape, *args)
    return [(x.dtype, tuple(n for _, _, n in plan))]


# ----------------------------------------------------------------------------- Gather family
def _gather_shape(node, data, idx):
    axis = norm_axis(int(node.attr("axis", 0)), len(data.shape), node)
    return axis, tuple(data.shape[:axis]) + tuple(idx.shape) + tuple(data.shape[axis + 1:])


def _gather_indices(node, ins) -> dict:
    """Gather's and GatherElements' indices (input 1) run over the data's axis."""
    data = ins[0] if ins else None
    if data is None or not data.shape:
        return {}
    return {1: data.shape[int(node.attr("axis", 0))]}


def _gather_nd_indices(node, ins) -> dict:
    """GatherND's index tuples: every entry within the smallest data dim, whichever it indexes."""
    data = ins[0] if ins else None
    return {1: min(data.shape)} if data is not None and data.shape else {}


def _lower_gather(node, ctx):
    X, I, Y = ctx.ins[0], ctx.ins[1], ctx.outs[0]
    axis, _ = _gather_shape(node, X, I)
    n = X.shape[axis]
    pre, post, ni = prod(X.shape[:axis]), prod(X.shape[axis + 1:]), prod(I.shape)
    b = ctx.b
    idx_const = ctx.const(1)
    if idx_const is not None and idx_const.size == 1:
        j = int(idx_const.reshape(-1)[0])
        if not -n <= j < n:
            raise ShapeError(f"Gather node {node.name!r}: index {j} is out of range for axis {axis} of size {n}")
        j = j + n if j < 0 else j
        b.comment(f"index {j} along axis {axis}")
        strided_copy(b, Y, X, (pre, post), (post, 1), (n * post, 1), src_off=j * post)
        return
    with b.loops([pre, ni], ["p", "t"], role=SPATIAL) as (p, t):
        j = _index(b, Load(I, t), n)
        with b.loops([post], ["q"], role=SPATIAL) as (q,):
            b.store(Y, (p * ni + t) * post + q, Load(X, (p * n + j) * post + q))


@register("Gather", lower=_lower_gather, bounded_rule="gather", index_inputs=_gather_indices, run_time_dims=True)
def _gather(node, ins):
    _, shape = _gather_shape(node, ins[0], ins[1])
    return [(ins[0].dtype, shape)]


def _lower_gather_elements(node, ctx):
    X, I, Y = ctx.ins[0], ctx.ins[1], ctx.outs[0]
    axis = norm_axis(int(node.attr("axis", 0)), len(X.shape), node)
    xs = contiguous_strides(X.shape)
    b = ctx.b
    with b.loops(I.shape, role=SPATIAL) as idx:
        j = _index(b, Load(I, I.flat(idx)), X.shape[axis])
        off: Expr = const(0)
        for k, (i, s) in enumerate(zip(idx, xs)):
            off = off + (j if k == axis else i) * s
        b.store(Y, tuple(idx), Load(X, off))


def _check_elements_indices(node, data, idx) -> int:
    """GatherElements/ScatterElements: indices of data's rank (>= 1), no larger than data along
    every axis but `axis` (the kernel walks indices' shape and reads/writes data there)."""
    r = len(data.shape)
    if r < 1 or len(idx.shape) != r:
        raise ShapeError(f"{node.op_type} node {node.name!r}: data {tuple(data.shape)} and indices "
                         f"{tuple(idx.shape)} must have the same rank >= 1")
    axis = norm_axis(int(node.attr("axis", 0)), r, node)
    for k, (n, m) in enumerate(zip(idx.shape, data.shape)):
        if k != axis and n > m:
            raise ShapeError(f"{node.op_type} node {node.name!r}: indices {tuple(idx.shape)} larger than data "
                             f"{tuple(data.shape)} on axis {k} (only axis {axis} may differ)")
    return axis


@register("GatherElements", lower=_lower_gather_elements, index_inputs=_gather_indices, run_time_dims=True)
def _gather_elements(node, ins):
    x, i = ins[0], ins[1]
    _check_elements_indices(node, x, i)
    return [(x.dtype, tuple(i.shape))]


def _gather_nd_dims(node, data, idx):
    bd = int(node.attr("batch_dims", 0))
    r, q = len(data.shape), len(idx.shape)
    if r < 1 or q < 1:
        raise ShapeError(f"GatherND node {node.name!r}: data and indices must have rank >= 1")
    if not 0 <= bd < min(r, q):
        raise ShapeError(f"GatherND node {node.name!r}: batch_dims {bd} must be in [0, {min(r, q)}) "
                         f"for data rank {r} and indices rank {q}")
    if tuple(idx.shape[:bd]) != tuple(data.shape[:bd]):
        raise ShapeError(f"GatherND node {node.name!r}: the {bd} batch dims of indices {tuple(idx.shape)} "
                         f"and data {tuple(data.shape)} differ")
    last = idx.shape[-1]
    if bd + last > len(data.shape):
        raise ShapeError(f"GatherND node {node.name!r}: index depth {last} too deep for data {data.shape}")
    return bd, last, tuple(idx.shape[:-1]) + tuple(data.shape[bd + last:])


def _lower_gather_nd(node, ctx):
    X, I, Y = ctx.ins[0], ctx.ins[1], ctx.outs[0]
    bd, last, _ = _gather_nd_dims(node, X, I)
    nb, nt = prod(I.shape[:bd]), prod(I.shape[bd:-1])
    post = prod(X.shape[bd + last:])
    xs = contiguous_strides(X.shape)
    batch_stride = prod(X.shape[bd:])
    b = ctx.b
    with b.loops([nb, nt], ["bb", "t"], role=SPATIAL) as (bb, t):
        row = (bb * nt + t) * last
        off = b.local("off", bb * batch_stride)
        for m in range(last):
            j = _index(b, Load(I, row + m), X.shape[bd + m], f"j{m}")
            b.assign(off, off + j * xs[bd + m])
        with b.loops([post], ["q"], role=SPATIAL) as (q,):
            b.store(Y, (bb * nt + t) * post + q, Load(X, off + q))


@register("GatherND", lower=_lower_gather_nd, bounded_rule="gather_nd", index_inputs=_gather_nd_indices,
          run_time_dims=True)
def _gather_nd(node, ins):
    _, _, shape = _gather_nd_dims(node, ins[0], ins[1])
    return [(ins[0].dtype, shape)]


# ----------------------------------------------------------------------------- Scatter family
_REDUCTIONS = ("none", "add", "mul", "max", "min")


def _reduction(node) -> str:
    red = node.attr("reduction", "none")
    if isinstance(red, bytes):
        red = red.decode(errors="replace")
    if red not in _REDUCTIONS:
        raise ShapeError(f"{node.op_type} node {node.name!r}: reduction {red!r} is not one of "
                         f"{', '.join(_REDUCTIONS)}")
    return red


def _combine(node, old: Expr, new: Expr) -> Expr:
    red = _reduction(node)
    if red == "add":
        return old + new
    if red == "mul":
        return old * new
    if red == "max":
        return select(old >= new, old, new)
    if red == "min":
        return select(old <= new, old, new)
    return new


def _lower_scatter_nd(node, ctx):
    X, I, U, Y = ctx.ins[0], ctx.ins[1], ctx.ins[2], ctx.outs[0]
    last = I.shape[-1]
    nt, post = prod(I.shape[:-1]), prod(X.shape[last:])
    xs = contiguous_strides(X.shape)
    b = ctx.b
    b.comment("copy data, then write the updates")
    strided_copy(b, Y, X, (X.size,), (1,), (1,))
    # updates in order: two of them may name the same element
    with b.loops([nt], ["t"], role=ORDERED) as (t,):
        off = b.local("off", const(0))
        for m in range(last):
            j = _index(b, Load(I, t * last + m), X.shape[m], f"j{m}")
            b.assign(off, off + j * xs[m])
        with b.loops([post], ["q"], role=SPATIAL) as (q,):
            b.store(Y, off + q, _combine(node, Load(Y, off + q), Load(U, t * post + q)))


@register("ScatterND", lower=_lower_scatter_nd)
def _scatter_nd(node, ins):
    X, I, U = ins[0], ins[1], ins[2]
    _reduction(node)
    where = f"ScatterND node {node.name!r}"
    if len(X.shape) < 1 or len(I.shape) < 1:
        raise ShapeError(f"{where}: data and indices need rank >= 1, got {len(X.shape)} and {len(I.shape)}")
    k = I.shape[-1]
    if not 1 <= k <= len(X.shape):
        raise ShapeError(f"{where}: the last dim of indices ({k}) must be between 1 and the rank of data "
                         f"({len(X.shape)})")
    want = tuple(I.shape[:-1]) + tuple(X.shape[k:])
    if tuple(U.shape) != want:
        raise ShapeError(f"{where}: updates {tuple(U.shape)} must have the shape indices.shape[:-1] + "
                         f"data.shape[{k}:] = {want}")
    return [(X.dtype, tuple(X.shape))]


def _lower_scatter_elements(node, ctx):
    X, I, U, Y = ctx.ins[0], ctx.ins[1], ctx.ins[2], ctx.outs[0]
    axis = norm_axis(int(node.attr("axis", 0)), len(X.shape), node)
    xs = contiguous_strides(X.shape)
    b = ctx.b
    b.comment("copy data, then write the updates")
    strided_copy(b, Y, X, (X.size,), (1,), (1,))
    with b.loops(I.shape, role=ORDERED) as idx:      # updates may name the same element
        j = _index(b, Load(I, I.flat(idx)), X.shape[axis])
        off: Expr = const(0)
        for k, (i, s) in enumerate(zip(idx, xs)):
            off = off + (j if k == axis else i) * s
        o = b.local("off", off)
        b.store(Y, o, _combine(node, Load(Y, o), Load(U, U.flat(idx))))


@register("ScatterElements", lower=_lower_scatter_elements)
def _scatter_elements(node, ins):
    _reduction(node)
    _check_elements_indices(node, ins[0], ins[1])
    if tuple(ins[2].shape) != tuple(ins[1].shape):
        raise ShapeError(f"ScatterElements node {node.name!r}: updates {tuple(ins[2].shape)} must have the "
                         f"shape of indices {tuple(ins[1].shape)}")
    return [(ins[0].dtype, tuple(ins[0].shape))]


# ----------------------------------------------------------------------------- Expand / Tile
def _bstrides(in_shape, out_shape) -> list[int]:
    """Strides reading `in_shape` broadcast to `out_shape` (0 along broadcast dims)."""
    r = len(out_shape)
    full = (1,) * (r - len(in_shape)) + tuple(in_shape)
    st = contiguous_strides(full)
    return [0 if d == 1 and o != 1 else s for d, o, s in zip(full, out_shape, st)]


def _lower_expand(node, ctx):
    X, Y = ctx.ins[0], ctx.outs[0]
    ctx.b.comment(f"broadcast {list(X.shape)} -> {list(Y.shape)}")
    strided_copy(ctx.b, Y, X, Y.shape, contiguous_strides(Y.shape), _bstrides(X.shape, Y.shape))


@register("Expand", lower=_lower_expand, large_output=True, bounded_rule="expand", run_time_dims=True,
          shape_inputs=frozenset({1}))
def _expand(node, ins):
    shape = const_ints(node, ins, 1, "the target shape")
    return [(ins[0].dtype, broadcast(ins[0].shape, shape, node=node))]


def _lower_tile(node, ctx):
    X, Y = ctx.ins[0], ctx.outs[0]
    reps = _ctx_ints(ctx, 1)
    ys, xs = contiguous_strides(Y.shape), contiguous_strides(X.shape)
    shape, dst, src = [], [], []
    for r, d, y_st, x_st in zip(reps, X.shape, ys, xs):
        # output dim = (repeat, position inside the copy)
        shape += [r, d]
        dst += [d * y_st, y_st]
        src += [0, x_st]
    ctx.b.comment(f"tile {list(X.shape)} by {reps}")
    strided_copy(ctx.b, Y, X, shape, dst, src)


@register("Tile", lower=_lower_tile, large_output=True, run_time_dims=True)
def _tile(node, ins):
    reps = const_ints(node, ins, 1, "repeats")
    if len(reps) != len(ins[0].shape) or any(r < 0 for r in reps):
        raise ShapeError(f"Tile node {node.name!r}: repeats {reps} do not fit shape {ins[0].shape}")
    return [(ins[0].dtype, tuple(d * r for d, r in zip(ins[0].shape, reps)))]


# ----------------------------------------------------------------------------- Range
def _range_args(node, get):
    vals = []
    for pos, what in ((0, "start"), (1, "limit"), (2, "delta")):
        x = np.asarray(get(pos, what)).reshape(-1)[0]
        vals.append(x.item() if isinstance(x, np.generic) else x)     # (a Dim, in sizes of run-time dims)
    return vals


def _lower_range(node, ctx):
    Y = ctx.outs[0]
    start, _, delta = _range_args(node, lambda p, w: ctx.const(p))
    with ctx.b.loop(Y.size, "i", role=SPATIAL) as i:
        ctx.b.store(Y, i, const(start, Y.dtype) + cast(i, Y.dtype) * const(delta, Y.dtype))


@register("Range", lower=_lower_range, large_output=True, run_time_dims=True, shape_inputs=frozenset({0, 1, 2}))
def _range(node, ins):
    def get(pos, what):
        if ins[pos] is not None and ins[pos].sym is not None:     # a size of run-time dims
            return ins[pos].sym
        if ins[pos] is None or ins[pos].const is None:
            raise ShapeError(f"Range node {node.name!r}: {what} must be known at compile time (the output "
                             "length depends on it)", "bind it with --const, or fix input shapes with --shape")
        return ins[pos].const
    start, limit, delta = _range_args(node, get)
    if delta == 0:
        raise ShapeError(f"Range node {node.name!r}: delta is 0")
    if is_dim(start) or is_dim(delta):
        raise RunTimeDim("a Range whose start or delta is a run-time size")
    if is_dim(limit):
        n = (limit - start) if delta == 1 else (limit - start) // delta      # exact, or RunTimeDim
        if decide(n, ">=", 0) is not True:
            raise RunTimeDim(f"whether Range({start}, {limit}, {delta}) is empty depends on the run-time sizes")
        return [(ins[0].dtype, (n,))]
    n = max(int(np.ceil((limit - start) / delta)), 0)
    return [(ins[0].dtype, (n,))]


# ----------------------------------------------------------------------------- Trilu
def _lower_trilu(node, ctx):
    X, Y = ctx.ins[0], ctx.outs[0]
    k = _ctx_ints(ctx, 1)[0] if ctx.has_input(1) else 0
    upper = int(node.attr("upper", 1))
    *batch, n, m = X.shape
    b = ctx.b
    b.comment(f"keep the {'upper' if upper else 'lower'} triangle, diagonal {k}")
    with b.loops([prod(batch), n, m], ["p", "r", "c"], role=SPATIAL) as (p, r, c):
        keep = (c - r >= k) if upper else (c - r <= k)
        off = (p * n + r) * m + c
        b.store(Y, off, select(keep, Load(X, off), const(0, X.dtype)))


@register("Trilu", lower=_lower_trilu, run_time_dims=True)
def _trilu(node, ins):
    if len(ins[0].shape) < 2:
        raise ShapeError(f"Trilu node {node.name!r}: input rank must be at least 2")
    const_ints(node, ins, 1, "k")
    return [(ins[0].dtype, tuple(ins[0].shape))]


# ----------------------------------------------------------------------------- ArgMax / ArgMin
def _arg_dims(node, x):
    axis = norm_axis(int(node.attr("axis", 0)), len(x.shape), node)
    keep = int(node.attr("keepdims", 1))
    out = tuple((1 if keep else None) if k == axis else d for k, d in enumerate(x.shape))
    return axis, tuple(d for d in out if d is not None)


def _lower_arg(node, ctx):
    X, Y = ctx.ins[0], ctx.outs[0]
    axis, _ = _arg_dims(node, X)
    pre, n, post = prod(X.shape[:axis]), X.shape[axis], prod(X.shape[axis + 1:])
    last = int(node.attr("select_last_index", 0))
    better = {("ArgMax", 0): ">", ("ArgMax", 1): ">=", ("ArgMin", 0): "<", ("ArgMin", 1): "<="}[
        (node.op_type, last)]
    b = ctx.b
    with b.loops([pre, post], ["p", "q"], role=SPATIAL) as (p, q):
        best = b.local("best", Load(X, p * n * post + q))
        arg = b.local("arg", const(0))
        with b.loop(n, "k", role=ORDERED, start=1) as k:       # the first of equal values wins
            v = b.local("v", Load(X, (p * n + k) * post + q))
            take = binop(better, v, best)
            if dtypes.is_float(X.dtype):
                # NaN wins, as in onnx.reference: the first one, or the last with select_last_index
                v_nan, best_ok = binop("!=", v, v), binop("==", best, best)
                take = (binop("||", v_nan, binop("&&", best_ok, take)) if last else
                        binop("&&", best_ok, binop("||", v_nan, take)))
            with b.if_(take):
                b.assign(best, v)
                b.assign(arg, k)
        b.store(Y, p * post + q, arg)


@register(["ArgMax", "ArgMin"], lower=_lower_arg, bounded_rule="along_axis", run_time_dims=True)
def _arg(node, ins):
    _, shape = _arg_dims(node, ins[0])
    return [(dtypes.INT64, shape)]


# ----------------------------------------------------------------------------- TopK
def _topk_dims(node, x, k):
    axis = norm_axis(int(node.attr("axis", -1)), len(x.shape), node)
    if not 0 <= k <= x.shape[axis]:
        raise ShapeError(f"TopK node {node.name!r}: k={k} but the axis has {x.shape[axis]} elements")
    return axis, tuple(k if a == axis else d for a, d in enumerate(x.shape))


def _lower_topk(node, ctx):
    """Selection by a strict total order, (value, index) with the lower index first on ties:
    output slot r takes the best element that comes after slot r-1's. O(n * k)."""
    X, V, I = ctx.ins[0], ctx.outs[0], ctx.outs[1]
    k = _ctx_ints(ctx, 1)[0]
    axis, _ = _topk_dims(node, X, k)
    pre, n, post = prod(X.shape[:axis]), X.shape[axis], prod(X.shape[axis + 1:])
    gt = ">" if int(node.attr("largest", 1)) else "<"
    b = ctx.b

    def before(va, ia, vb, ib):
        return binop("||", binop(gt, va, vb), binop("&&", va.eq(vb), ia < ib))

    with b.loops([pre, post], ["p", "q"], role=SPATIAL) as (p, q):
        pv = b.local("pv", const(0, X.dtype))
        pi = b.local("pi", const(-1))
        with b.loop(k, "r") as r:
            bv = b.local("bv", const(0, X.dtype))
            bi = b.local("bi", const(-1))
            with b.loop(n, "t") as t:
                v = b.local("v", Load(X, (p * n + t) * post + q))
                after_prev = binop("||", pi < 0, before(pv, pi, v, t))
                with b.if_(binop("&&", after_prev, binop("||", bi < 0, before(v, t, bv, bi)))):
                    b.assign(bv, v)
                    b.assign(bi, t)
            out = (p * k + r) * post + q
            if V is not None:
                b.store(V, out, bv)
            if I is not None:
                b.store(I, out, bi)
            b.assign(pv, bv)
            b.assign(pi, bi)


@register("TopK", lower=_lower_topk, accepts_epilogue=False, bounded_rule="along_axis", run_time_dims=True)
def _topk(node, ins):
    k = const_ints(node, ins, 1, "k")[0]
    _, shape = _topk_dims(node, ins[0], k)
    return [(ins[0].dtype, shape), (dtypes.INT64, shape)]


# ----------------------------------------------------------------------------- OneHot
def _onehot_dims(node, idx, depth):
    r = len(idx.shape) + 1
    axis = norm_axis(int(node.attr("axis", -1)), r, node)
    return axis, tuple(idx.shape[:axis]) + (depth,) + tuple(idx.shape[axis:])


def _lower_onehot(node, ctx):
    I, Vals, Y = ctx.ins[0], ctx.ins[2], ctx.outs[0]
    depth = int(np.asarray(ctx.const(1)).reshape(-1)[0])
    axis, _ = _onehot_dims(node, I, depth)
    pre, post = prod(I.shape[:axis]), prod(I.shape[axis:])
    b = ctx.b
    off_v, on_v = b.local("off_value", Load(Vals, const(0))), b.local("on_value", Load(Vals, const(1)))
    with b.loops([pre, post], ["p", "q"], role=SPATIAL) as (p, q):
        raw = Load(I, p * post + q)
        j = b.local("j", cast(raw, I64))          # a float index truncates, as the spec's cast (and ORT)
        b.assign(j, select(j < 0, j + depth, j))
        with b.loop(depth, "d", role=SPATIAL) as d:
            b.store(Y, (p * depth + d) * post + q, select(j.eq(d), on_v, off_v))


@register("OneHot", lower=_lower_onehot)
def _onehot(node, ins):
    if ins[1].const is None:
        raise ShapeError(f"OneHot node {node.name!r}: depth must be known at compile time",
                         "bind it with --const")
    depth = int(np.asarray(ins[1].const).reshape(-1)[0])
    _, shape = _onehot_dims(node, ins[0], depth)
    return [(ins[2].dtype, shape)]
