"""Layout and scan operators: DepthToSpace, SpaceToDepth (index permutations, one strided
copy each), CumSum and CumProd (running sums / products along an axis), EyeLike,
ReverseSequence, CenterCropPad."""
from __future__ import annotations

import numpy as np

from ..errors import ShapeError, UnsupportedError
from ..ir import dtypes
from ..kernel.ir import ORDERED, SPATIAL, Load, binop, cast, const, select
from .common import norm_axis, prod
from .registry import register
from .tensor import strided_copy


# ----------------------------------------------------------------------------- DepthToSpace / SpaceToDepth
def _blocks(node, x, to_space: bool) -> tuple[int, int, int, int, int]:
    """(N, C, H, W, blocksize) of a 4-D input, checked."""
    name = f"{node.op_type} node {node.name!r}"
    if len(x.shape) != 4:
        raise ShapeError(f"{name}: input {tuple(x.shape)} must be 4-D [N, C, H, W]")
    bs = int(node.attr("blocksize", 0))
    if bs < 1:
        raise ShapeError(f"{name}: blocksize {bs} must be at least 1")
    n, c, h, w = x.shape
    if to_space and c % (bs * bs):
        raise ShapeError(f"{name}: {c} channels are not a multiple of blocksize^2 = {bs * bs}")
    if not to_space and (h % bs or w % bs):
        raise ShapeError(f"{name}: height {h} and width {w} must be multiples of blocksize {bs}")
    return n, c, h, w, bs


def _check_mode(node) -> None:
    mode = node.attr("mode", "DCR")
    if mode not in ("DCR", "CRD"):
        raise UnsupportedError([f"{node.op_type} node {node.name!r} with mode {mode!r} (DCR and CRD only)"])


def _d2s_infer(node, ins):
    n, c, h, w, bs = _blocks(node, ins[0], True)
    _check_mode(node)
    return [(ins[0].dtype, (n, c // (bs * bs), h * bs, w * bs))]


def _lower_d2s(node, ctx):
    X, Y = ctx.ins[0], ctx.outs[0]
    n, c, h, w, bs = _blocks(node, X, True)
    oc = c // (bs * bs)
    mode = node.attr("mode", "DCR")
    # the output walked as [N, C', H, bs, W, bs] (its own layout); y[n, c', h*bs + i, w*bs + j] is
    # x[n, (i*bs + j)*C' + c', h, w] in DCR mode, x[n, c'*bs*bs + i*bs + j, h, w] in CRD mode
    hw = h * w
    if mode == "DCR":
        src = (c * hw, hw, w, bs * oc * hw, 1, oc * hw)
    else:
        src = (c * hw, bs * bs * hw, w, bs * hw, 1, hw)
    shape = (n, oc, h, bs, w, bs)
    dst = [prod(shape[k + 1:]) for k in range(6)]
    ctx.b.comment(f"DepthToSpace ({mode}), blocks of {bs} x {bs}")
    strided_copy(ctx.b, Y, X, shape, dst, src)


def _s2d_infer(node, ins):
    n, c, h, w, bs = _blocks(node, ins[0], False)
    _check_mode(node)
    return [(ins[0].dtype, (n, c * bs * bs, h // bs, w // bs))]


def _lower_s2d(node, ctx):
    X, Y = ctx.ins[0], ctx.outs[0]
    n, c, h, w, bs = _blocks(node, X, False)
    mode = node.attr("mode", "DCR")          # (an attribute since opset 28; DCR before)
    # the output walked as [N, bs, bs, C, H', W'] in DCR mode: y[n, (i*bs + j)*C + c, h, w] =
    # x[n, c, h*bs + i, w*bs + j]; as [N, C, bs, bs, H', W'] in CRD mode: y[n, c*bs*bs + i*bs + j, h, w]
    oh, ow = h // bs, w // bs
    if mode == "DCR":
        shape, src = (n, bs, bs, c, oh, ow), (c * h * w, w, 1, h * w, bs * w, bs)
    else:
        shape, src = (n, c, bs, bs, oh, ow), (c * h * w, h * w, w, 1, bs * w, bs)
    dst = [prod(shape[k + 1:]) for k in range(6)]
    ctx.b.comment(f"SpaceToDepth ({mode}), blocks of {bs} x {bs}")
    strided_copy(ctx.b, Y, X, shape, dst, src)


register("DepthToSpace", lower=_lower_d2s, run_time_dims=True)(_d2s_infer)
register("SpaceToDepth", lower=_lower_s2d)(_s2d_infer)


# ----------------------------------------------------------------------------- CumSum / CumProd
def _scan_axis(node, ins) -> int:
    x, a = ins[0], ins[1]
    if a is None or a.const is None:
        raise ShapeError(f"{node.op_type} node {node.name!r}: axis must be known at compile time",
                         "bind the input that feeds it with --const")
    arr = np.asarray(a.const).reshape(-1)
    if arr.size != 1:
        raise ShapeError(f"{node.op_type} node {node.name!r}: axis must be one value, not {arr.size}")
    return norm_axis(int(arr[0]), len(x.shape), node)


def _scan_infer(node, ins):
    x = ins[0]
    if len(x.shape) == 0:
        raise ShapeError(f"{node.op_type} node {node.name!r}: the input must have at least one dim")
    if x.dtype.kind not in "fiu":
        raise UnsupportedError([f"{node.op_type} node {node.name!r} on element type {x.dtype}"])
    _scan_axis(node, ins)
    return [(x.dtype, tuple(x.shape))]


def _lower_scan(node, ctx):
    """y[k] = y[k - 1] (op) x[k] along the axis (x[k - 1] when exclusive; from the end when
    reverse), row after row so that the innermost loop runs along the contiguous dims. The
    running value is the output's previous row, in the input's type, one step after the other
    as ONNX Runtime computes it."""
    X, Y = ctx.ins[0], ctx.outs[0]
    axis = _scan_axis(node, [ctx.value(0), ctx.value(1)])
    pre, n, post = prod(X.shape[:axis]), X.shape[axis], prod(X.shape[axis + 1:])
    exclusive, reverse = bool(int(node.attr("exclusive", 0))), bool(int(node.attr("reverse", 0)))
    product = node.op_type == "CumProd"
    identity = const(1 if product else 0, X.dtype)
    b = ctx.b
    b.comment(f"{node.op_type} along axis {axis} ({n} steps)" + (", exclusive" if exclusive else "")
              + (", reversed" if reverse else ""))
    def row(p, k):                          # offset of row k (along the axis) in block p
        return p * n + k

    first = n - 1 if reverse else 0
    with b.loop(pre, "p", role=SPATIAL) as p:
        with b.loop(post, "q", role=SPATIAL) as q:
            b.store(Y, row(p, first) * post + q, identity if exclusive else Load(X, row(p, first) * post + q))
        with b.loop(n - 1, "s", role=ORDERED) as s:         # the steps after the first
            k = (const(n - 2) - s) if reverse else s + 1
            prev = k + 1 if reverse else k - 1
            with b.loop(post, "q", role=SPATIAL) as q:
                before = Load(Y, row(p, prev) * post + q)
                step = Load(X, row(p, prev if exclusive else k) * post + q)
                b.store(Y, row(p, k) * post + q, before * step if product else before + step)


register(["CumSum", "CumProd"], lower=_lower_scan, accepts_epilogue=False, run_time_dims=True)(_scan_infer)


# ----------------------------------------------------------------------------- EyeLike
def _eye_infer(node, ins):
    x = ins[0]
    if len(x.shape) != 2:
        raise ShapeError(f"EyeLike node {node.name!r}: input {tuple(x.shape)} must be 2-D")
    dt = node.attr("dtype", None)
    try:
        out = dtypes.from_onnx(int(dt)) if dt is not None else x.dtype
    except dtypes.UnsupportedDtype as e:
        raise UnsupportedError([f"EyeLike node {node.name!r} with dtype {int(dt)}: {e}"]) from None
    return [(out, tuple(x.shape))]


def _lower_eye(node, ctx):
    Y = ctx.outs[0]
    rows, cols = Y.shape
    k = int(node.attr("k", 0))
    b = ctx.b
    b.comment(f"ones on diagonal {k}")
    with b.loops([rows, cols], ["i", "j"], role=SPATIAL) as (i, j):
        b.store(Y, i * cols + j, select((j - i).eq(const(k)), const(1, Y.dtype), const(0, Y.dtype)))


register("EyeLike", lower=_lower_eye)(_eye_infer)


# ----------------------------------------------------------------------------- ReverseSequence
def _rs_axes(node, x, lens):
    name = f"ReverseSequence node {node.name!r}"
    t, bt = int(node.attr("time_axis", 0)), int(node.attr("batch_axis", 1))
    if {t, bt} != {0, 1}:
        raise ShapeError(f"{name}: time_axis {t} and batch_axis {bt} must be 0 and 1, one each")
    if len(x.shape) < 2:
        raise ShapeError(f"{name}: input {tuple(x.shape)} needs at least 2 dims")
    if tuple(lens.shape) != (x.shape[bt],):
        raise ShapeError(f"{name}: sequence_lens {tuple(lens.shape)} must hold one length per batch ({x.shape[bt]})")
    return t, bt


def _rs_infer(node, ins):
    _rs_axes(node, ins[0], ins[1])
    return [(ins[0].dtype, tuple(ins[0].shape))]


def _lower_rs(node, ctx):
    """Batch b's first sequence_lens[b] steps in reverse order, the rest as they are; a length
    outside [0, time steps] fails the run (AOTC_ERR_INDEX_OUT_OF_RANGE)."""
    X, L, Y = ctx.ins[0], ctx.ins[1], ctx.outs[0]
    t_axis, b_axis = _rs_axes(node, X, L)
    T, B, post = X.shape[t_axis], X.shape[b_axis], prod(X.shape[2:])
    b = ctx.b
    b.comment(f"reverse the first sequence_lens[b] of {T} steps (axis {t_axis}) of each of {B} batches")

    def at(t, n, q):                  # element (time t, batch n, rest q)
        return ((t * B + n) if t_axis == 0 else (n * T + t)) * post + q

    with b.loop(B, "n", role=SPATIAL) as n:
        length = b.local("len", cast(Load(L, n), "int64"))
        with b.if_(binop("||", length < 0, length > T)):
            b.fail("AOTC_ERR_INDEX_OUT_OF_RANGE", f"a sequence length outside [0, {T}]")
        with b.loop(T, "t", role=SPATIAL) as t:
            src = b.local("src", select(t < length, length - 1 - t, t))
            with b.loop(post, "q", role=SPATIAL) as q:
                b.store(Y, at(t, n, q), Load(X, at(src, n, q)))


register("ReverseSequence", lower=_lower_rs)(_rs_infer)


# ----------------------------------------------------------------------------- CenterCropPad
def _ccp_shape(node, ins) -> list[int]:
    x, s = ins[0], ins[1]
    name = f"CenterCropPad node {node.name!r}"
    if s is None or s.const is None:
        raise ShapeError(f"{name}: shape must be known at compile time", "bind the input that feeds it with --const")
    sizes = [int(v) for v in np.asarray(s.const).reshape(-1)]
    axes = node.attr("axes", None)
    axes = list(range(len(x.shape))) if axes is None else [norm_axis(int(a), len(x.shape), node) for a in axes]
    if len(sizes) != len(axes):
        raise ShapeError(f"{name}: {len(sizes)} sizes for {len(axes)} axes")
    out = list(x.shape)
    for a, n in zip(axes, sizes):
        if n < 0:
            raise ShapeError(f"{name}: size {n} is negative")
        out[a] = n
    return out


def _ccp_infer(node, ins):
    return [(ins[0].dtype, tuple(_ccp_shape(node, ins)))]


def _lower_ccp(node, ctx):
    """Each axis centered: cropped by (dim - size) // 2 in front, or padded with zeros by
    (size - dim) // 2 in front (the rest at the back)."""
    X, Y = ctx.ins[0], ctx.outs[0]
    out = _ccp_shape(node, [ctx.value(0), ctx.value(1)])
    shift = [(d - o) // 2 if o <= d else -((o - d) // 2) for d, o in zip(X.shape, out)]
    b = ctx.b
    b.comment(f"center {tuple(X.shape)} in {tuple(out)} (input index = output index + {shift})")
    xs = [prod(X.shape[k + 1:]) for k in range(len(X.shape))]
    with b.loops(out, [f"i{k}" for k in range(len(out))], role=SPATIAL) as idx:
        inside, off = None, const(0)
        for k, (i, s, d) in enumerate(zip(idx, shift, X.shape)):
            src = i + s
            if s < 0 or out[k] + s > d:            # this axis pads: the index may fall outside
                ok = binop("&&", src >= 0, src < d)
                inside = ok if inside is None else binop("&&", inside, ok)
                src = select(src < 0, const(0), select(src >= d, const(d - 1), src))
            off = off + src * xs[k]
        v = Load(X, off)
        b.store(Y, _flat(idx, out), v if inside is None else select(inside, v, const(0, Y.dtype)))


def _flat(idx, shape):
    at = const(0)
    for i, n in zip(idx, shape):
        at = at * n + i
    return at


register("CenterCropPad", lower=_lower_ccp)(_ccp_infer)
