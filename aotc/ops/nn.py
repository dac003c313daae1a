"""CNN operators: Conv, ConvTranspose, pooling, Pad, Resize, and the normalizations that
survive graph passes (BatchNormalization with runtime statistics, InstanceNormalization, LRN).

All of them take any number of spatial dims (1-D, 2-D, 3-D) in NC[D]HW layout.

Conv lowering, float32:
  * 1x1, stride 1, no padding: one GEMM per (batch, group) straight on the input.
  * depthwise (one input channel per group) on a small plane: the plane copied into a
    zero-padded scratch (split by row and column phase when strided, so that every tap reads
    contiguous elements), then every output as one flat stencil over it (full vectors, no
    edge cases), its valid columns copied out.
  * other depthwise ones: a direct loop nest, one output row at a time,
    the innermost loop over output columns with start/end computed so that no index is
    ever out of range (no padded copy, no branch in the inner loop); the columns every tap of
    a kernel row reaches take all those taps in one pass, the edge columns tap by tap. In
    2-D, with a small kernel, the rows every kernel row reaches are one pass summing all taps
    from the bias (each output element written once).
  * everything else: im2col of one (batch, group) into ctx.scratch, then a GEMM. The GEMM's B
    also says what the im2col matrix is in terms of the input (Matrix.direct), so a schedule
    whose GEMM can read that (the CPU's packer, the GPU's tile staging) drops the scratch and
    its loops.
The weights are the GEMM's A operand, the output positions its columns; the bias is what the
GEMM makes of each element (its epilogue, applied to each tile as it is finished), and the
activations and residual adds that fusion puts after the Conv follow there too. The schedule
decides the rest (weights packed into panels, the product computed transposed when that
fits the tiles better, threads). Other dtypes use the direct loop nest.

Window bounds: for output position o, the taps k with 0 <= o*s - pb + k*d < S are
k in [ceil((pb - o*s)/d), ceil((S + pb - o*s)/d)), clamped to [0, K). `_ceil_div` does that
with non-negative operands only, so C's truncating division is never asked to round a
negative number.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, replace
from typing import Optional

import numpy as np

from ..errors import ShapeError, UnsupportedError
from ..ir import dtypes
from ..kernel.ir import (F32, I64, ORDERED, REDUCTION, SPATIAL, Const, ConvWindow, Expr, GemmDest, If, Load, Matrix,
                         binop, call, cast, const, matrix, maximum, minimum, select)
from . import random as random_ops
from .common import ints, prod
from .registry import register
from .resize_filters import antialias_filter, filtered_axes


# ----------------------------------------------------------------------------- helpers
def _err(node, msg) -> ShapeError:
    return ShapeError(f"{node.op_type} node {node.name!r}: {msg}")


def _ceil_div(a: Expr, d: int) -> Expr:
    """ceil(max(a, 0) / d) for a positive int d."""
    a = maximum(a, const(0))
    return a if d == 1 else (a + (d - 1)) / d


def _plus(e: Expr, k: Expr) -> Expr:
    """e + k, printed as e - |k| when k is a negative constant."""
    if isinstance(k, Const) and k.value < 0:
        return e - (-k.value)
    return e + k


def _all(conds):
    out = None
    for c in conds:
        out = c if out is None else binop("&&", out, c)
    return out


def _strides(shape) -> list[int]:
    st, acc = [], 1
    for d in reversed(shape):
        st.append(acc)
        acc *= d
    return st[::-1]


def _dot(idx, strides) -> Expr:
    off: Expr = const(0)
    for i, s in zip(idx, strides):
        off = off + i * s
    return off


class _IfElse:
    """`with _IfElse(b, cond) as (then, orelse):` then `with then:` / `with orelse:`."""

    def __init__(self, b, cond):
        self.b, self.node = b, If(cond)

    def __enter__(self):
        self.b.emit(self.node)
        return _Branch(self.b, self.node.then), _Branch(self.b, self.node.orelse)

    def __exit__(self, *exc):
        pass


class _Branch:
    def __init__(self, b, body):
        self.b, self.body = b, body

    def __enter__(self):
        self.b._stack.append(self.body)

    def __exit__(self, *exc):
        self.b._stack.pop()


class _Nest:
    """Loops of one role opened one at a time, so that each level can hoist its own locals; a
    loop of extent 1 opens nothing and its index is the constant 0."""

    def __init__(self, b, role: str):
        self.b, self.role, self._open = b, role, []

    def loop(self, extent, name: str, start=0) -> Expr:
        if isinstance(extent, int) and extent == 1 and isinstance(start, int) and start == 0:
            return const(0)
        lp = self.b.loop(extent, name, role=self.role, start=start)
        var = lp.__enter__()
        self._open.append(lp)
        return var

    def close(self) -> None:
        for lp in reversed(self._open):
            lp.__exit__(None, None, None)
        self._open = []


@dataclass
class _Window:
    kernel: list[int]
    strides: list[int]
    dilations: list[int]
    pads_begin: list[int]
    pads_end: list[int]
    out: list[int]


def _window(node, spatial, kernel, ceil_mode: bool = False) -> _Window:
    """Output size and padding of a sliding window (Conv, pooling), ONNX rules."""
    r = len(spatial)
    kernel = [int(k) for k in kernel]
    if len(kernel) != r:
        raise _err(node, f"kernel_shape {kernel} does not match {r} spatial dims")
    strides = [int(s) for s in node.attr("strides", [1] * r)]
    dil = [int(d) for d in node.attr("dilations", [1] * r)]
    if len(strides) != r or len(dil) != r:
        raise _err(node, f"strides {strides} / dilations {dil} do not match {r} spatial dims")
    if any(s < 1 for s in strides) or any(d < 1 for d in dil):
        raise _err(node, "strides and dilations must be positive")
    if any(k < 1 for k in kernel):
        raise _err(node, f"kernel_shape {kernel} must be positive")
    auto_pad = node.attr("auto_pad", "NOTSET")
    ext = [(k - 1) * d + 1 for k, d in zip(kernel, dil)]
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        out = [-(-s // st) for s, st in zip(spatial, strides)]
        total = [max(0, (o - 1) * st + e - s) for o, st, e, s in zip(out, strides, ext, spatial)]
        if auto_pad == "SAME_UPPER":
            pb = [t // 2 for t in total]
        else:
            pb = [t - t // 2 for t in total]
        pe = [t - b for t, b in zip(total, pb)]
        return _Window(kernel, strides, dil, pb, pe, out)
    if auto_pad == "VALID":
        pb, pe = [0] * r, [0] * r
    elif auto_pad == "NOTSET":
        pads = [int(p) for p in node.attr("pads", [0] * (2 * r))]
        if len(pads) != 2 * r:
            raise _err(node, f"pads {pads} do not match {r} spatial dims")
        pb, pe = pads[:r], pads[r:]
    else:
        raise _err(node, f"unknown auto_pad {auto_pad!r}")
    out = []
    for s, k, st, b, e in zip(spatial, ext, strides, pb, pe):
        span = s + b + e - k
        if span < 0:
            raise _err(node, f"window {k} larger than the padded input {s + b + e}")
        if ceil_mode:
            o = -(-span // st) + 1
            if (o - 1) * st >= s + b:        # the last window must start inside the input
                o -= 1
        else:
            o = span // st + 1
        out.append(o)
    return _Window(kernel, strides, dil, pb, pe, out)


def _may_leave(w: _Window, i: int, size: int) -> bool:
    """Can a tap of spatial dim i fall outside the input?"""
    last = (w.out[i] - 1) * w.strides[i] - w.pads_begin[i] + (w.kernel[i] - 1) * w.dilations[i]
    return w.pads_begin[i] > 0 or last >= size


def _inside(pos, S, w: _Window):
    """Condition that every (outer) position is inside the input, None when always true."""
    return _all(binop("&&", q >= 0, q < S[i]) for i, q in enumerate(pos) if _may_leave(w, i, S[i]))


def _bounds(o: Expr, size: int, w: _Window, i: int):
    """Valid tap range [lo, hi) of spatial dim i at output position o (see module doc)."""
    s, d, pb, k = w.strides[i], w.dilations[i], w.pads_begin[i], w.kernel[i]
    lo = _ceil_div(pb - o * s, d)
    hi = minimum(const(k), _ceil_div(size + pb - o * s, d))
    return lo, hi


# ----------------------------------------------------------------------------- Conv
def _conv_parts(node, xs, ws):
    if len(xs) < 3 or len(ws) != len(xs):
        raise _err(node, f"input {tuple(xs)} and weight {tuple(ws)} must be N-C-spatial of equal rank")
    group = int(node.attr("group", 1))
    C, M = xs[1], ws[0]
    if group < 1 or C % group or M % group or ws[1] * group != C:
        raise _err(node, f"{C} input channels, weight {tuple(ws)} and group={group} do not fit")
    ks = node.attr("kernel_shape", None)
    kernel = list(ws[2:]) if ks is None else [int(k) for k in ks]
    if list(kernel) != list(ws[2:]):
        raise _err(node, f"kernel_shape {kernel} differs from the weight's {tuple(ws[2:])}")
    if any(int(p) < 0 for p in node.attr("pads", [])):
        raise _err(node, f"pads {list(node.attr('pads'))} must be >= 0")
    return group, _window(node, xs[2:], kernel)


def _conv_infer(node, ins):
    x, w = ins[0], ins[1]
    _, win = _conv_parts(node, x.shape, w.shape)
    if len(ins) > 2 and ins[2] is not None and tuple(ins[2].shape) != (w.shape[0],):
        raise _err(node, f"bias shape {ins[2].shape} is not ({w.shape[0]},)")
    return [(x.dtype, (x.shape[0], w.shape[0], *win.out))]


def _lower_conv(node, ctx):
    X, W = ctx.ins[0], ctx.ins[1]
    Bias = ctx.ins[2] if len(ctx.ins) > 2 else None
    Y = ctx.outs[0]
    group, win = _conv_parts(node, X.shape, W.shape)
    Cg = X.shape[1] // group
    if X.dtype != dtypes.FLOAT32 or (Cg == 1 and group > 1):
        ctx.b.comment(f"direct convolution: {group} group(s) of {Cg} input channel(s)")
        _conv_direct(ctx, X, W, Bias, Y, win, group)
        return
    _conv_gemms(ctx, X, W, Bias, Y, group, win)


def _conv_gemms(ctx, X, W, Bias, Y, group: int, win: _Window, x_zero: Expr | None = None) -> None:
    """The convolution as a GEMM per (batch entry, group): output channels x output positions
    = weights x the im2col matrix of the input (the input itself for a 1x1 convolution).
    x_zero: 8-bit X and W (aotc.ConvInteger), an integer Gemm of (X - x_zero) . W, whose
    padding reads x_zero (so that it adds nothing)."""
    b = ctx.b
    N, C, S = X.shape[0], X.shape[1], list(X.shape[2:])
    M, O = W.shape[0], list(Y.shape[2:])
    Cg, Mg = C // group, M // group
    KK, SL, OL = prod(win.kernel), prod(S), prod(O)
    pointwise = all(k == 1 for k in win.kernel) and all(s == 1 for s in win.strides) \
        and not any(win.pads_begin) and not any(win.pads_end)
    integer = X.dtype != dtypes.FLOAT32
    if pointwise:
        b.comment("1x1 convolution: one GEMM per group on the input itself")
    else:
        b.comment(f"im2col ({Cg * KK} x {OL}) + GEMM per group")
        col = ctx.scratch((Cg * KK, OL), X.dtype, "col")
    K = Cg * KK
    r = len(S)
    # batch entries and groups are independent but for the im2col scratch, which each fills and
    # then reads: a schedule runs them one at a time, or gives each its own copy
    with b.loops([N, group], ["n", "g"], role=SPATIAL, private=() if pointwise else (col,)) as (n, g):
        if pointwise:
            src = matrix(X, (n * C + g * Cg) * SL, SL, 1)
        elif integer:
            _im2col(b, X, col, n, g * Cg, Cg, S, O, win, pad=cast(x_zero, X.dtype))
            src = matrix(col, 0, OL, 1)
        else:
            _im2col(b, X, col, n, g * Cg, Cg, S, O, win)
            src = replace(matrix(col, 0, OL, 1), direct=_im2col_direct(X, n, g * Cg, S, O, win))
        # C(i, j): output channel g*Mg + i at output position j
        dest = GemmDest(Y, (n, g * Mg) + (0,) * r, (1,), tuple(range(2, 2 + r)))
        b.gemm(Mg, OL, K, matrix(W, g * (Mg * K), K, 1), src, dest,
               result=(lambda v, i, j: v + Bias[g * Mg + i]) if Bias is not None else None, b_zero=x_zero)


UNROLL_TAPS = 11      # kernels at most this wide get one copy of the row loop per tap


def _tap_range(k, stride: int, dil: int, pad: int, size: int, n_out: int):
    """Output positions [lo, hi) whose input position o*stride - pad + k*dil is inside [0, size).
    Python ints when k is an int (the bounds are then constants), expressions otherwise."""
    if isinstance(k, int):
        lo = min(n_out, -(-max(pad - k * dil, 0) // stride))
        hi = max(lo, min(n_out, -(-max(size + pad - k * dil, 0) // stride)))
        return lo, hi
    lo = minimum(const(n_out), _ceil_div(pad - k * dil, stride))
    hi = maximum(lo, minimum(const(n_out), _ceil_div(size + pad - k * dil, stride)))
    return lo, hi


def _each_tap(b, win: _Window, size: int, n_out: int, body) -> None:
    """body(k, lo, hi) for every tap k of the last kernel dim, with its valid output range:
    unrolled with constant bounds for small kernels, a loop with computed bounds otherwise."""
    K, s, d, pb = win.kernel[-1], win.strides[-1], win.dilations[-1], win.pads_begin[-1]
    if K <= UNROLL_TAPS:
        for k in range(K):
            lo, hi = _tap_range(k, s, d, pb, size, n_out)
            body(const(k), const(lo), const(hi))
        return
    with b.loop(K, f"k{len(win.kernel) - 1}") as k:
        lo, hi = _tap_range(k, s, d, pb, size, n_out)
        lo = b.local("lo", lo)
        body(k, lo, b.local("hi", hi))


def _span(b, start: Expr, end: Expr, name: str = "p"):
    """A loop over output positions [start, end) of a row (each writes its own element), or
    None when constant bounds make it empty."""
    if isinstance(start, Const) and isinstance(end, Const) and start.value >= end.value:
        return None
    return b.loop(end, name, role=SPATIAL, start=start)


def _im2col(b, X, col, n, c0, Cg, S, O, win: _Window, pad: Expr | None = None):
    """col[(c, k...), (o...)] = X[n, c0 + c, o*s - pb + k*d] (`pad`, default 0, outside the
    input)."""
    r = len(S)
    C = X.shape[1]
    SL, OL, OLast = prod(S), prod(O), O[-1]
    xst, ost, kst = _strides(S), _strides(O), _strides(win.kernel)
    s_l, d_l, pb_l = win.strides[-1], win.dilations[-1], win.pads_begin[-1]
    zero = const(0, col.dtype) if pad is None else pad
    with b.loops([Cg, *win.kernel[:-1]], ["c"] + [f"k{i}" for i in range(r - 1)], role=SPATIAL) as idx:
        c, ko = idx[0], idx[1:]

        def tap(k_l, lo, hi):
            row = (c * prod(win.kernel) + _dot(list(ko) + [k_l], kst)) * OL
            with b.loops(O[:-1], [f"o{i}" for i in range(r - 1)], role=SPATIAL) as oo:
                pos = [o * win.strides[i] - win.pads_begin[i] + ko[i] * win.dilations[i] for i, o in enumerate(oo)]
                dst = row + _dot(oo, ost[:-1])
                src = _plus((n * C + c0 + c) * SL + _dot(pos, xst[:-1]), k_l * d_l - pb_l)

                def fill(start, end, value=None):
                    lp = _span(b, start, end)
                    if lp is not None:
                        with lp as p:
                            b.store(col, dst + p, zero if value is None else value(p))

                def copy_row():
                    fill(const(0), lo)
                    fill(lo, hi, lambda p: X[src + p * s_l])
                    fill(hi, const(OLast))

                inside = _inside(pos, S, win)
                if inside is None:
                    copy_row()
                else:
                    with _IfElse(b, inside) as (then, orelse):
                        with then:
                            copy_row()
                        with orelse:
                            fill(const(0), const(OLast))

        _each_tap(b, win, S[-1], OLast, tap)


def _im2col_direct(X, n, c0, S, O, win: _Window) -> Matrix | None:
    """The im2col matrix of a 1-D or 2-D convolution as its input holds it (Matrix.direct),
    for a GEMM that packs B from the input itself; None for more spatial dims."""
    if len(S) > 2:
        return None
    pad = [1] * (2 - len(S))              # a 1-D convolution is a 2-D one of height 1
    w = ConvWindow(size=(*pad, *S), kernel=(*pad, *win.kernel), strides=(*pad, *win.strides),
                   dilations=(*pad, *win.dilations), pads=(*[0] * len(pad), *win.pads_begin),
                   out=(*pad, *O))
    return Matrix(X, (n * X.shape[1] + c0) * prod(S), 0, 0, "im2col", window=w)


# a depthwise 2-D kernel with at most this many taps computes its interior output rows in one
# pass (every tap of every kernel row into a register), the rows and columns at the padding as
# the other direct convolutions do
DEPTHWISE_ONE_PASS_TAPS = 49


def _conv_direct(ctx, X, W, Bias, Y, win: _Window, group: int):
    """Loop nest: for each output row, accumulate every (input channel, tap) into it; a
    depthwise 2-D convolution on a small plane goes through a zero-padded copy of it
    (`_depthwise_padded`), on a larger one computes the rows every kernel row reaches in one
    pass (`_depthwise_one_pass`)."""
    b = ctx.b
    M, O = W.shape[0], list(Y.shape[2:])
    planes = _padded_planes(ctx, X, win, group)
    with b.loops([X.shape[0], M], ["n", "m"], role=SPATIAL, private=planes or ()) as (n, m):
        if planes:
            _depthwise_padded(ctx, X, W, Bias, Y, win, group, n, m, *planes)
        elif not _depthwise_one_pass(ctx, X, W, Bias, Y, win, group, n, m):
            with b.loops(O[:-1], [f"o{i}" for i in range(len(O) - 1)], role=SPATIAL) as oo:
                _direct_row(ctx, X, W, Bias, Y, win, group, n, m, oo)


# a depthwise 2-D convolution whose zero-padded input plane and wide output take at most this
# many elements together goes through them (`_depthwise_padded`). Measured (1 thread, the
# native CPU target), at stride 1: 14 x 14 planes with 5 x 5 kernels 2.2x faster, 28 x 28
# with 3 x 3 1.15x; 56 x 56 with 3 x 3 (6,614 elements; a 4% edge) 1.27x slower, as the copy
# costs more than the edges it saves
PADDED_PLANE_MAX = 2048
# ... and at stride 2 or more, where the other paths load every tap with a stride and the
# phase planes load each input element so once, in the copy: that pays for itself from
# STRIDED_MIN_TAPS taps on. Measured (1 thread, native CPU target, one Conv + Relu):
# 5 x 5 at stride 2 1.5-2.1x faster on 14 x 14 to 112 x 112 planes, 7 x 7 1.9-2.5x; 3 x 3
# 0.62-0.89x (the one-pass nest's three strided loads a row cost less than the copy)
STRIDED_PLANE_MAX = 1 << 16
STRIDED_MIN_TAPS = 16


def _plane_geometry(X, win: _Window):
    """(Hp, Wp, Hq, Wq, tail) of `_depthwise_padded`: the zero-padded plane, one phase plane of
    it, and the elements the last taps read past the last phase plane."""
    (H, Wd), (sh, sw), (_, KW), (_, dw) = list(X.shape[2:]), win.strides, win.kernel, win.dilations
    Hp, Wp = H + win.pads_begin[0] + win.pads_end[0], Wd + win.pads_begin[1] + win.pads_end[1]
    return Hp, Wp, -(-Hp // sh), -(-Wp // sw), (KW - 1) * dw // sw


def _padded_planes(ctx, X, win: _Window, group: int):
    """(padded input planes, wide output plane) scratch for `_depthwise_padded`, or None where
    that does not apply: not a 2-D depthwise convolution with at most DEPTHWISE_ONE_PASS_TAPS
    taps, at stride 1 without padding (nothing to gain), strided with fewer than
    STRIDED_MIN_TAPS taps, or planes over PADDED_PLANE_MAX (STRIDED_PLANE_MAX when strided)
    elements."""
    S = list(X.shape[2:])
    strided = any(s != 1 for s in win.strides)
    if len(S) != 2 or X.shape[1] // group != 1 or prod(win.kernel) > DEPTHWISE_ONE_PASS_TAPS \
            or not (strided or any(win.pads_begin + win.pads_end)):
        return None
    Hp, Wp, Hq, Wq, tail = _plane_geometry(X, win)
    padded, wide = prod(win.strides) * Hq * Wq + tail, win.out[0] * Wq
    if padded + wide > (STRIDED_PLANE_MAX if strided else PADDED_PLANE_MAX) \
            or (strided and prod(win.kernel) < STRIDED_MIN_TAPS):
        return None
    return ctx.scratch((padded,), X.dtype, "padded"), ctx.scratch((wide,), X.dtype, "wide")


def _depthwise_padded(ctx, X, W, Bias, Y, win: _Window, group: int, n, m, padded, wide) -> None:
    """Plane (n, m) of a depthwise 2-D convolution through a zero-padded copy of its input, in
    which every tap is one shift.

    At stride 1 the copy is the plane Hp x Wp, and output (oh, ow) is the sum over taps of
    padded[(oh + kh*dh) * Wp + ow + kw*dw]: as a function of j = oh * Wp + ow, a 1-D stencil
    padded[j + kh*dh*Wp + kw*dw], computed over every j < OH * Wp in one flat loop (full
    vectors, no edge cases: the j with ow >= OW are wasted, and read at most (KW-1)*dw zeros
    past the plane), then the OW valid columns of each row copied out.

    At stride (sh, sw) the copy is split by row and column phase: phase plane (a, c), of
    Hq x Wq = ceil(Hp/sh) x ceil(Wp/sw), holds padded rows a, a + sh, ... and columns c, c + sw,
    ...; tap (kh, kw) of output (oh, ow) reads padded row oh*sh + kh*dh, which is row
    oh + (kh*dh) // sh of phase (kh*dh) % sh (columns alike), so with j = oh * Wq + ow the
    stencil is again 1-D over contiguous elements: phase[(kh*dh) % sh][(kw*dw) % sw]
    [j + ((kh*dh) // sh) * Wq + (kw*dw) // sw]. The input is read with a stride once, in the
    copy, instead of once per tap. Stride 1 is the one-phase case."""
    b = ctx.b
    C, (H, Wd), (OH, OW) = X.shape[1], list(X.shape[2:]), list(Y.shape[2:])
    (KH, KW), (dh, dw), (ph, pw), (sh, sw) = win.kernel, win.dilations, win.pads_begin, win.strides
    Hp, Wp, Hq, Wq, _ = _plane_geometry(X, win)
    M = W.shape[0]
    x_plane = (n * C + m / (M // group)) * (H * Wd)
    zero = const(0, X.dtype)
    unit = sh == sw == 1
    if unit:
        # the padding only: rows above and below the input (and the tail the last taps read);
        # the columns right of each row (and left of the next) are zeroed as the row is copied
        for start, end in ((0, ph * Wp + pw), ((ph + H) * Wp - win.pads_end[1], padded.size)):
            if end > start:
                with b.loop(const(end), "e", role=SPATIAL, start=const(start)) as e:
                    b.store(padded, e, zero)
    else:
        with b.loop(const(padded.size), "e", role=SPATIAL) as e:
            b.store(padded, e, zero)
    def plane(a: int, c: int) -> int:
        return (a * sw + c) * (Hq * Wq)

    # input row r is padded row r + ph: row (r + ph) // sh of the phase planes (r + ph) % sh;
    # phase plane (a, c) holds the input rows r0, r0 + sh, ... from its row i0 on, and the
    # input columns q0, q0 + sw, ... from its column t0 on
    for a in range(sh):
        i0 = -(-(ph - a) // sh)
        r0, rows = i0 * sh + a - ph, -(-(H + ph - a) // sh) - i0
        for c in range(sw):
            t0 = -(-(pw - c) // sw)
            q0, cols = t0 * sw + c - pw, -(-(Wd + pw - c) // sw) - t0
            if rows <= 0 or cols <= 0:
                continue
            base = plane(a, c) + i0 * Wq + t0
            with b.loop(const(rows), "r", role=SPATIAL) as r:
                with b.loop(const(cols), "p", role=SPATIAL) as q:
                    b.store(padded, base + r * Wq + q, X[x_plane + (r * sh + r0) * Wd + q * sw + q0])
                if unit and (pw or win.pads_end[1]):
                    with b.loop(const(pw + win.pads_end[1]), "e", role=SPATIAL) as e:
                        b.store(padded, base + r * Wq + Wd + e, zero)
    ws = [[b.local("w", W[m * (KH * KW) + k0 * KW + k1]) for k1 in range(KW)] for k0 in range(KH)]
    # (an iteration writes only its own element, from values the loop does not write: a
    # schedule may run one twice, so that OH * Wq outputs take whole vectors: Loop.rerun)
    with b.loop(const(OH * Wq), "j", role=SPATIAL, rerun=True) as j:
        acc: Expr = Bias[m] if Bias is not None else zero
        for k0 in range(KH):
            for k1 in range(KW):
                (qh, ah), (qw, aw) = divmod(k0 * dh, sh), divmod(k1 * dw, sw)
                acc = acc + ws[k0][k1] * padded[j + (plane(ah, aw) + qh * Wq + qw)]
        b.store(wide, j, acc)
    y_plane = (n * M + m) * (OH * OW)
    with b.loop(OH, "o0", role=SPATIAL) as o:
        with b.loop(OW, "p", role=SPATIAL) as q:
            b.store(Y, y_plane + o * OW + q, wide[o * Wq + q])


def _direct_row(ctx, X, W, Bias, Y, win: _Window, group: int, n, m, oo):
    """Output row (n, m, oo...): the bias, then every (input channel, outer taps) added to it,
    the row test hoisted above the last dim."""
    b = ctx.b
    C, S = X.shape[1], list(X.shape[2:])
    M, O = W.shape[0], list(Y.shape[2:])
    Cg, Mg = C // group, M // group
    r = len(S)
    SL, OL, OLast = prod(S), prod(O), O[-1]
    xst, ost, kst = _strides(S), _strides(O), _strides(win.kernel)
    s_l, d_l, pb_l = win.strides[-1], win.dilations[-1], win.pads_begin[-1]
    cin0 = (m / Mg) * Cg if group > 1 else const(0)
    dst = (n * M + m) * OL + _dot(oo, ost[:-1])
    with b.loop(OLast, "p", role=SPATIAL) as p:
        b.store(Y, dst + p, Bias[m] if Bias is not None else const(0, Y.dtype))
    with b.loops([Cg, *win.kernel[:-1]], ["c"] + [f"k{i}" for i in range(r - 1)], role=REDUCTION) as idx:
        c, ko = idx[0], idx[1:]
        pos = [o * win.strides[i] - win.pads_begin[i] + ko[i] * win.dilations[i] for i, o in enumerate(oo)]
        inside = _inside(pos, S, win)
        src_row = (n * C + cin0 + c) * SL + _dot(pos, xst[:-1])

        def weight(k_l):
            return b.local("w", W[(m * Cg + c) * prod(win.kernel) + _dot(list(ko) + [k_l], kst)])

        def tap(k_l, lo, hi, w=None):
            lp = _span(b, lo, hi)
            if lp is None:
                return
            w = w if w is not None else weight(k_l)
            with lp as q:
                b.store(Y, dst + q, Y[dst + q] + w * X[_plus(src_row, k_l * d_l - pb_l) + q * s_l])

        def taps():
            if win.kernel[-1] > UNROLL_TAPS:
                _each_tap(b, win, S[-1], OLast, tap)
                return
            # the positions every tap reaches take them all in one pass over the row
            # (in tap order, as the per-tap passes add them); the edges tap by tap
            ranges = [_tap_range(k, s_l, d_l, pb_l, S[-1], OLast) for k in range(win.kernel[-1])]
            lo_all, hi_all = max(lo for lo, _ in ranges), min(hi for _, hi in ranges)
            if hi_all - lo_all < 2 or len(ranges) == 1:
                _each_tap(b, win, S[-1], OLast, tap)
                return
            ws = [weight(const(k)) for k in range(len(ranges))]
            with b.loop(const(hi_all), "p", role=SPATIAL, start=const(lo_all)) as q:
                acc: Expr = Y[dst + q]
                for k, w in enumerate(ws):
                    acc = acc + w * X[_plus(src_row, const(k * d_l - pb_l)) + q * s_l]
                b.store(Y, dst + q, acc)
            for k, (lo, hi) in enumerate(ranges):
                tap(const(k), const(lo), const(min(hi, lo_all)), ws[k])
                tap(const(k), const(max(lo, hi_all)), const(hi), ws[k])

        if inside is None:
            taps()
        else:
            with b.if_(inside):
                taps()


def _depthwise_one_pass(ctx, X, W, Bias, Y, win: _Window, group: int, n, m) -> bool:
    """Plane (n, m) of a 2-D convolution with one input channel per group and a small kernel:
    the output rows every kernel row reaches, and in them the columns every tap reaches, are
    each one sum of all taps from the bias, written once (the per-row way reads and writes an
    output row once per kernel row); the other rows as _direct_row, the other columns tap by
    tap. False (nothing emitted) for any other convolution."""
    C, S, O = X.shape[1], list(X.shape[2:]), list(Y.shape[2:])
    if len(S) != 2 or C // group != 1 or prod(win.kernel) > DEPTHWISE_ONE_PASS_TAPS \
            or max(win.kernel) > UNROLL_TAPS:
        return False
    (H, Wd), (OH, OW), (KH, KW) = S, O, win.kernel
    (sh, sw), (dh, dw), (ph, pw) = win.strides, win.dilations, win.pads_begin
    rows = [_tap_range(k, sh, dh, ph, H, OH) for k in range(KH)]
    cols = [_tap_range(k, sw, dw, pw, Wd, OW) for k in range(KW)]
    top, bottom = max(lo for lo, _ in rows), min(hi for _, hi in rows)
    left, right = max(lo for lo, _ in cols), min(hi for _, hi in cols)
    if bottom - top < 1 or right - left < 2:
        return False
    b = ctx.b
    M = W.shape[0]
    x_plane = (n * C + m / (M // group)) * (H * Wd)
    y_plane = (n * M + m) * (OH * OW)
    bias = Bias[m] if Bias is not None else const(0, Y.dtype)

    def edge_rows(start: int, end: int):
        lp = _span(b, const(start), const(end), "o0")
        if lp is not None:
            with lp as o:
                _direct_row(ctx, X, W, Bias, Y, win, group, n, m, [o])

    edge_rows(0, top)
    ws = [[b.local("w", W[m * (KH * KW) + k0 * KW + k1]) for k1 in range(KW)] for k0 in range(KH)]
    with b.loop(const(bottom), "o0", role=SPATIAL, start=const(top)) as o:
        dst = y_plane + o * OW
        src = [x_plane + _plus(o * sh, const(k0 * dh - ph)) * Wd for k0 in range(KH)]
        with b.loop(const(right), "p", role=SPATIAL, start=const(left)) as q:
            acc: Expr = bias
            for k0 in range(KH):
                for k1 in range(KW):
                    acc = acc + ws[k0][k1] * X[_plus(src[k0], const(k1 * dw - pw)) + q * sw]
            b.store(Y, dst + q, acc)
        # the columns some tap misses: the bias, then each tap where it reaches
        for start, end in ((0, left), (right, OW)):
            lp = _span(b, const(start), const(end))
            if lp is None:
                continue
            with lp as q:
                b.store(Y, dst + q, bias)
            for k0 in range(KH):
                for k1, (lo, hi) in enumerate(cols):
                    lp = _span(b, const(max(lo, start)), const(min(hi, end)))
                    if lp is not None:
                        with lp as q:
                            b.store(Y, dst + q, Y[dst + q] + ws[k0][k1] * X[_plus(src[k0], const(k1 * dw - pw)) + q * sw])
    edge_rows(bottom, OH)
    return True


register("Conv", lower=_lower_conv)(_conv_infer)


# ----------------------------------------------------------------------------- ConvTranspose
def _convt_parts(node, xs, ws):
    if len(xs) < 3 or len(ws) != len(xs):
        raise _err(node, f"input {tuple(xs)} and weight {tuple(ws)} must be N-C-spatial of equal rank")
    group = int(node.attr("group", 1))
    C = xs[1]
    if group < 1 or C % group or ws[0] != C:
        raise _err(node, f"{C} input channels, weight {tuple(ws)} and group={group} do not fit")
    M = ws[1] * group
    r = len(xs) - 2
    S = list(xs[2:])
    ks = node.attr("kernel_shape", None)
    kernel = list(ws[2:]) if ks is None else [int(k) for k in ks]
    if kernel != list(ws[2:]):
        raise _err(node, f"kernel_shape {kernel} differs from the weight's {tuple(ws[2:])}")
    strides = [int(s) for s in node.attr("strides", [1] * r)]
    dil = [int(d) for d in node.attr("dilations", [1] * r)]
    opad = [int(p) for p in node.attr("output_padding", [0] * r)]
    if len(strides) != r or len(dil) != r or len(opad) != r:
        raise _err(node, f"strides {strides} / dilations {dil} / output_padding {opad} must have "
                         f"one value per spatial dim ({r})")
    if any(s < 1 for s in strides) or any(d < 1 for d in dil):
        raise _err(node, "strides and dilations must be positive")
    if any(k < 1 for k in kernel):
        raise _err(node, f"kernel_shape {kernel} must be positive")
    if any(not 0 <= op < max(st, d) for op, st, d in zip(opad, strides, dil)):
        raise _err(node, f"output_padding {opad} must be >= 0 and less than max(stride, dilation)")
    full = [st * (s - 1) + op + (k - 1) * d + 1 for s, st, op, k, d in zip(S, strides, opad, kernel, dil)]
    auto_pad = node.attr("auto_pad", "NOTSET")
    if auto_pad not in ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"):
        raise _err(node, f"unknown auto_pad {auto_pad!r}")
    out_shape = node.attr("output_shape", None)
    if out_shape is not None:
        if len(out_shape) not in (r, r + 2):
            raise _err(node, f"output_shape {list(out_shape)} must give the {r} spatial dims")
        out_shape = [int(v) for v in out_shape][-r:]
    elif auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        out_shape = [s * st for s, st in zip(S, strides)]
    if out_shape is not None:
        total = [f - o for f, o in zip(full, out_shape)]
        if any(t < 0 for t in total):
            raise UnsupportedError([f"ConvTranspose node {node.name!r}: output_shape {out_shape} needs "
                                    f"negative padding"])
        if auto_pad == "SAME_UPPER":
            pb = [t // 2 for t in total]
        else:
            pb = [t - t // 2 for t in total]
        pe = [t - p for t, p in zip(total, pb)]
    elif auto_pad == "VALID":
        pb, pe = [0] * r, [0] * r
    else:
        pads = [int(p) for p in node.attr("pads", [0] * (2 * r))]
        if len(pads) != 2 * r or any(p < 0 for p in pads):
            raise _err(node, f"pads {pads} must be {2 * r} values >= 0 (begin and end of each spatial dim)")
        pb, pe = pads[:r], pads[r:]
    out = [f - b_ - e for f, b_, e in zip(full, pb, pe)]
    if any(o <= 0 for o in out):
        raise _err(node, f"output spatial shape {out} is empty")
    return group, M, _Window(kernel, strides, dil, pb, pe, out)


def _convt_infer(node, ins):
    x, w = ins[0], ins[1]
    _, M, win = _convt_parts(node, x.shape, w.shape)
    if len(ins) > 2 and ins[2] is not None and tuple(ins[2].shape) != (M,):
        raise _err(node, f"bias shape {ins[2].shape} is not ({M},)")
    return [(x.dtype, (x.shape[0], M, *win.out))]


def _lower_convt(node, ctx):
    X, W = ctx.ins[0], ctx.ins[1]
    Bias = ctx.ins[2] if len(ctx.ins) > 2 else None
    Y = ctx.outs[0]
    if X.dtype != dtypes.FLOAT32:
        raise UnsupportedError([f"ConvTranspose node {node.name!r} on {X.dtype} (float32 only)"])
    group, M, win = _convt_parts(node, X.shape, W.shape)
    N, C, S = X.shape[0], X.shape[1], list(X.shape[2:])
    O = list(Y.shape[2:])
    Cg, Mg = C // group, M // group
    r = len(S)
    KK, SL, OL, SLast = prod(win.kernel), prod(S), prod(O), S[-1]
    b = ctx.b
    b.comment(f"GEMM (weights^T x input) into columns, then col2im; {group} group(s)")
    col = ctx.scratch((Mg * KK, SL), X.dtype, "col")
    ost, sst, kst = _strides(O), _strides(S), _strides(win.kernel)
    with b.loops([N], ["n"], role=ORDERED) as (n,):
        with b.loops([M, OL], ["m", "p"], role=SPATIAL) as (m, p):
            b.store(Y, (n * M + m) * OL + p, Bias[m] if Bias is not None else const(0, Y.dtype))
        with b.loops([group], ["g"], role=ORDERED) as (g,):
            # A = W^T of the group: element ((m, k...), c) at W[g*Cg + c, m, k...]
            b.gemm(Mg * KK, SL, Cg, matrix(W, g * (Cg * Mg * KK), 1, Mg * KK),
                   matrix(X, (n * C + g * Cg) * SL, SL, 1), GemmDest(col, (0, 0), (0,), (1,)))
            # col2im: Y[n, g*Mg + m, i*s - pb + k*d] += col[(m, k), i]; taps of one m overlap
            with b.loops([Mg], ["m"], role=SPATIAL) as (m,), \
                    b.loops(win.kernel[:-1], [f"k{i}" for i in range(r - 1)], role=ORDERED) as ko:
                s_l, d_l, pb_l = win.strides[-1], win.dilations[-1], win.pads_begin[-1]

                def tap(k_l, lo, hi):
                    row = (m * KK + _dot(list(ko) + [k_l], kst)) * SL
                    with b.loops(S[:-1], [f"i{q}" for q in range(r - 1)], role=SPATIAL) as ii:
                        pos = [i * win.strides[q] - win.pads_begin[q] + ko[q] * win.dilations[q]
                               for q, i in enumerate(ii)]
                        dst = _plus((n * M + g * Mg + m) * OL + _dot(pos, ost[:-1]), k_l * d_l - pb_l)
                        src = row + _dot(ii, sst[:-1])
                        inside = _all(binop("&&", q >= 0, q < O[k]) for k, q in enumerate(pos))
                        lp = _span(b, lo, hi)
                        if lp is None:
                            return
                        if inside is not None:
                            with b.if_(inside):
                                with lp as p:
                                    b.store(Y, dst + p * s_l, Y[dst + p * s_l] + col[src + p])
                        else:
                            with lp as p:
                                b.store(Y, dst + p * s_l, Y[dst + p * s_l] + col[src + p])

                _each_tap(b, win, O[-1], SLast, tap)


register("ConvTranspose", lower=_lower_convt)(_convt_infer)


# ----------------------------------------------------------------------------- pooling
def _pool_window(node, x):
    if len(x.shape) < 3:
        raise _err(node, f"input {x.shape} must be N-C-spatial")
    ks = node.attr("kernel_shape", None)
    if ks is None:
        raise _err(node, "kernel_shape is required")
    return _window(node, x.shape[2:], ks, ceil_mode=bool(int(node.attr("ceil_mode", 0))))


def _maxpool_infer(node, ins):
    x = ins[0]
    win = _pool_window(node, x)
    shape = (x.shape[0], x.shape[1], *win.out)
    return [(x.dtype, shape), (dtypes.INT64, shape)]


def _avgpool_infer(node, ins):
    x = ins[0]
    win = _pool_window(node, x)
    return [(x.dtype, (x.shape[0], x.shape[1], *win.out))]


def _lowest(dt):
    dt = np.dtype(dt)
    if dt.kind == "f":
        return const(float("-inf"), dt)
    return const(int(np.iinfo(dt).min), dt)


POOL_BY_ROWS = True     # MaxPool's interior columns a row at a time (False: every position alone)


def _lower_pool(node, ctx):
    """For each output position, the maximum or mean of the window's taps inside the input.
    A MaxPool without an Indices output computes each output row's columns whose every
    last-dim tap is inside (the interior) together: the row set to the lowest value, then one
    pass per outer tap taking that tap row's last-dim taps (unrolled) into every interior
    column, the same taps in the same order as position by position (so NaNs and ties come
    out alike), but a vectorizable loop; the edge columns position by position. (A mean keeps
    the position-by-position sum, whose accumulator the schedule may widen.)"""
    X, Y = ctx.ins[0], ctx.outs[0]
    I = ctx.outs[1] if len(ctx.outs) > 1 else None
    win = _pool_window(node, X)
    N, C, S = X.shape[0], X.shape[1], list(X.shape[2:])
    O = list(Y.shape[2:])
    r = len(S)
    SL, OL = prod(S), prod(O)
    xst, ost = _strides(S), _strides(O)
    is_max = node.op_type == "MaxPool"
    lp = int(node.attr("p", 2)) if node.op_type == "LpPool" else None
    include_pad = bool(int(node.attr("count_include_pad", 0)))
    if is_max and int(node.attr("storage_order", 0)):
        ist = _strides(S[::-1])[::-1]       # column-major spatial index
    else:
        ist = xst
    b = ctx.b
    # the interior columns of the last dim: [left, right), every tap inside
    left, right = 0, 0
    if POOL_BY_ROWS and is_max and I is None and win.kernel[-1] <= UNROLL_TAPS:
        ranges = [_tap_range(k, win.strides[-1], win.dilations[-1], win.pads_begin[-1], S[-1], O[-1])
                  for k in range(win.kernel[-1])]
        left, right = max(lo for lo, _ in ranges), min(hi for _, hi in ranges)
        if right - left < 2:
            left, right = 0, 0

    def count(oo, bounds):
        """the number of taps a mean divides by"""
        if include_pad:
            counts = [minimum(const(win.kernel[i]),
                              _ceil_div(S[i] + win.pads_begin[i] + win.pads_end[i] - o * win.strides[i],
                                        win.dilations[i])) for i, o in enumerate(oo)]
        else:
            counts = [maximum(hi - lo, const(0)) for lo, hi in bounds]
        cnt = counts[0]
        for k in counts[1:]:
            cnt = cnt * k
        return cnt

    def point(n, c, oo, outer_bounds):
        """Output (n, c, oo...) alone: its last dim's tap range, then every tap in range."""
        base = (n * C + c) * SL
        lo, hi = _bounds(oo[-1], S[-1], win, r - 1)
        bounds = outer_bounds + [(b.local(f"lo{r - 1}", lo), b.local(f"hi{r - 1}", hi))]
        out_at = (n * C + c) * OL + _dot(oo, ost)
        if is_max:
            acc = b.local("acc", _lowest(X.dtype))
            arg = b.local("arg", const(0)) if I is not None else None
        else:
            acc = b.accumulator("acc", const(0, X.dtype))
        inner = _Nest(b, REDUCTION)
        ks = [inner.loop(bounds[i][1], f"k{i}", start=bounds[i][0]) for i in range(r)]
        pos = [o * win.strides[i] - win.pads_begin[i] + k * win.dilations[i]
               for i, (o, k) in enumerate(zip(oo, ks))]
        v = b.local("v", X[base + _dot(pos, xst)])
        if is_max:
            if arg is not None:
                better = b.local("better", v > acc)
                b.assign(arg, select(better, (n * C + c) * SL + _dot(pos, ist), arg))
                b.assign(acc, select(better, v, acc))
            else:
                b.assign(acc, select(v > acc, v, acc))
        else:
            b.assign(acc, acc + (_lp_term(v, lp) if lp is not None else v))
        inner.close()
        if is_max:
            b.store(Y, out_at, acc)
            if I is not None:
                b.store(I, out_at, arg)
        elif lp is not None:
            b.store(Y, out_at, cast(_lp_root(acc, lp), X.dtype))
        else:
            b.store(Y, out_at, acc / cast(count(oo, bounds), X.dtype))

    def interior(n, c, oo, outer_bounds):
        """Columns [left, right) of output row (n, c, oo...), tap row by tap row."""
        row = (n * C + c) * OL + _dot(oo, ost[:-1])
        s_l, d_l, pb_l = win.strides[-1], win.dilations[-1], win.pads_begin[-1]
        with b.loop(const(right), "p", role=SPATIAL, start=const(left)) as q:
            b.store(Y, row + q, _lowest(X.dtype))
        inner = _Nest(b, REDUCTION)
        ks = [inner.loop(outer_bounds[i][1], f"k{i}", start=outer_bounds[i][0]) for i in range(r - 1)]
        src = (n * C + c) * SL + _dot([o * win.strides[i] - win.pads_begin[i] + k * win.dilations[i]
                                        for i, (o, k) in enumerate(zip(oo, ks))], xst[:-1])
        with b.loop(const(right), "p", role=SPATIAL, start=const(left)) as q:
            acc = b.local("acc", Y[row + q])
            for k in range(win.kernel[-1]):
                v = b.local("v", X[_plus(src, const(k * d_l - pb_l)) + q * s_l])
                b.assign(acc, select(v > acc, v, acc))
            b.store(Y, row + q, acc)
        inner.close()

    with b.loops([N, C], ["n", "c"], role=SPATIAL) as (n, c):
        outer_bounds, oo = [], []
        outer = _Nest(b, SPATIAL)
        for i in range(r - 1):      # one loop per outer output dim, its tap range hoisted to its level
            o = outer.loop(O[i], f"o{i}")
            lo, hi = _bounds(o, S[i], win, i)
            outer_bounds.append((b.local(f"lo{i}", lo), b.local(f"hi{i}", hi)))
            oo.append(o)
        for start, end in ((0, left), (right, O[-1])) if right else ((0, O[-1]),):
            if end - start == 1:
                point(n, c, oo + [const(start)], outer_bounds)
            elif end > start:
                with b.loop(const(end), f"o{r - 1}", role=SPATIAL, start=const(start)) as o:
                    point(n, c, oo + [o], outer_bounds)
        if right:
            interior(n, c, oo, outer_bounds)
        outer.close()


def _lp_term(v: Expr, p: int) -> Expr:
    """|v|^p, a tap's share of an Lp norm"""
    return call("abs", v) if p == 1 else v * v if p == 2 else call("pow", call("abs", v), const(float(p), v.dtype))


def _lp_root(acc: Expr, p: int) -> Expr:
    """the p-th root of a sum of |v|^p"""
    return acc if p == 1 else call("sqrt", acc) if p == 2 else call("pow", acc, const(1.0 / p, acc.dtype))


def _lp_infer(node, ins):
    if ins[0].dtype.kind != "f":
        raise UnsupportedError([f"{node.op_type} node {node.name!r} on element type {ins[0].dtype}"])
    if int(node.attr("p", 2)) < 1:
        raise _err(node, f"p = {node.attr('p')} must be at least 1")
    return (_avgpool_infer if node.op_type == "LpPool" else _global_infer)(node, ins)


register("MaxPool", lower=_lower_pool)(_maxpool_infer)
register("AveragePool", lower=_lower_pool)(_avgpool_infer)
register("LpPool", lower=_lower_pool)(_lp_infer)       # taps outside (the padding) add |0|^p = 0


def _global_infer(node, ins):
    x = ins[0]
    if len(x.shape) < 3:
        raise _err(node, f"input {x.shape} must be N-C-spatial")
    return [(x.dtype, (x.shape[0], x.shape[1]) + (1,) * (len(x.shape) - 2))]


def _lower_global(node, ctx):
    X, Y = ctx.ins[0], ctx.outs[0]
    N, C = X.shape[:2]
    SL = prod(X.shape[2:])
    is_max = node.op_type == "GlobalMaxPool"
    lp = int(node.attr("p", 2)) if node.op_type == "GlobalLpPool" else None
    b = ctx.b
    with b.loops([N * C], ["nc"], role=SPATIAL) as (nc,):
        acc = b.local("acc", _lowest(X.dtype)) if is_max else b.accumulator("acc", const(0, X.dtype))
        with b.loop(SL, "p", role=REDUCTION) as p:
            v = X[nc * SL + p]
            b.assign(acc, select(v > acc, v, acc) if is_max else acc + (_lp_term(v, lp) if lp is not None else v))
        if lp is not None:
            b.store(Y, nc, cast(_lp_root(acc, lp), X.dtype))
        else:
            b.store(Y, nc, acc if is_max else acc / const(SL, X.dtype))


register("GlobalAveragePool", lower=_lower_global)(_global_infer)
register("GlobalMaxPool", lower=_lower_global)(_global_infer)
register("GlobalLpPool", lower=_lower_global)(_lp_infer)


# ----------------------------------------------------------------------------- Pad
def _pad_spec(node, ins):
    x = ins[0]
    r = len(x.shape)
    if len(ins) < 2 or ins[1] is None:
        raise _err(node, "pads input is required")
    if ins[1].const is None:
        raise ShapeError(f"Pad node {node.name!r}: pads must be known at compile time",
                         "bind the input that feeds it with --const")
    pads = ints(ins[1].const)
    axes = list(range(r))
    if len(ins) > 3 and ins[3] is not None:
        if ins[3].const is None:
            raise ShapeError(f"Pad node {node.name!r}: axes must be known at compile time")
        axes = [a + r if a < 0 else a for a in ints(ins[3].const)]
    if len(pads) != 2 * len(axes):
        raise _err(node, f"{len(pads)} pads for {len(axes)} axes")
    pb, pe = [0] * r, [0] * r
    for k, a in enumerate(axes):
        pb[a], pe[a] = pads[k], pads[k + len(axes)]
    mode = node.attr("mode", "constant")
    if mode not in ("constant", "reflect", "edge", "wrap"):
        raise UnsupportedError([f"Pad node {node.name!r} with mode {mode!r}"])
    out = [d + b_ + e for d, b_, e in zip(x.shape, pb, pe)]
    if any(o < 0 for o in out):
        raise _err(node, f"pads {pads} remove more than the input {x.shape}")
    if mode != "constant" and any(d == 0 for d in x.shape):
        raise _err(node, f"mode {mode} needs a non-empty input")
    if mode == "reflect" and any((b_ > d - 1 or e > d - 1) and (b_ > 0 or e > 0)
                                  for d, b_, e in zip(x.shape, pb, pe)):
        raise UnsupportedError([f"Pad node {node.name!r}: reflect padding wider than the input"])
    return pb, pe, out, mode


def _pad_infer(node, ins):
    _, _, out, _ = _pad_spec(node, [ins[0]] + list(ins[1:]))
    return [(ins[0].dtype, tuple(out))]


def _lower_pad(node, ctx):
    X, Y = ctx.ins[0], ctx.outs[0]
    ins = [ctx.value(i) for i in range(len(node.inputs))]
    pb, pe, out, mode = _pad_spec(node, ins)
    b = ctx.b
    r = len(X.shape)
    if mode == "constant":
        cv = ctx.const(2) if ctx.has_input(2) else None
        if cv is not None:
            fill = const(np.asarray(cv).reshape(-1)[0].item() if np.asarray(cv).size else 0, X.dtype)
        elif ctx.has_input(2):
            fill = ctx.ins[2][const(0)]        # read where it is used: no padding, no read
        else:
            fill = const(0, X.dtype)
    xst = _strides(X.shape)
    srcs, valid, oo = [], [], []
    nest = _Nest(b, SPATIAL)
    for i in range(r):
        o = nest.loop(out[i], f"i{i}")
        oo.append(o)
        d = X.shape[i]
        if pb[i] == 0 and pe[i] == 0:
            srcs.append(o)
            continue
        s = o - pb[i]
        if mode == "constant":
            valid.append(binop("&&", s >= 0, s < d))
        elif mode == "edge":
            s = maximum(const(0), minimum(const(d - 1), s))
        elif mode == "reflect":
            if d > 1:
                t = b.local(f"t{i}", select(s < 0, -s, s))
                s = select(t >= d, (2 * (d - 1)) - t, t)
            else:
                s = const(0)
        elif mode == "wrap":
            s = ((s % d) + d) % d
        srcs.append(b.local(f"s{i}", s) if i < r - 1 else s)
    idx = _dot(srcs, xst)
    ok = _all(valid)
    at = _dot(oo, _strides(out))
    b.store(Y, at, X[idx] if ok is None else select(ok, X[idx], fill))
    nest.close()


register("Pad", lower=_lower_pad)(_pad_infer)


# ----------------------------------------------------------------------------- Resize
_CT_MODES = ("half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel", "tf_half_pixel_for_nn",
             "half_pixel_symmetric", "tf_crop_and_resize")
_NEAREST = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")


def _resize_spec(node, ins):
    """Output shape and the float32 scale ONNX Runtime uses on every axis."""
    x = ins[0]
    r = len(x.shape)
    mode = node.attr("mode", "nearest")
    ct = node.attr("coordinate_transformation_mode", "half_pixel")
    if mode not in ("nearest", "linear", "cubic"):
        raise UnsupportedError([f"Resize node {node.name!r} with mode {mode!r} (nearest, linear and cubic only)"])
    if ct not in _CT_MODES:
        raise UnsupportedError([f"Resize node {node.name!r} with coordinate_transformation_mode {ct!r}"])
    if mode == "nearest" and node.attr("nearest_mode", "round_prefer_floor") not in _NEAREST:
        raise UnsupportedError([f"Resize node {node.name!r} with nearest_mode {node.attr('nearest_mode')!r}"])
    policy = node.attr("keep_aspect_ratio_policy", "stretch")
    if policy not in ("stretch", "not_larger", "not_smaller"):
        raise UnsupportedError([f"Resize node {node.name!r} with keep_aspect_ratio_policy {policy!r}"])
    axes = node.attr("axes", None)
    axes = list(range(r)) if axes is None else [a + r if a < 0 else int(a) for a in axes]

    def given(pos):
        if len(ins) > pos and ins[pos] is not None:
            if ins[pos].const is None:
                raise ShapeError(f"Resize node {node.name!r}: {'scales' if pos == 2 else 'sizes'} must be "
                                 f"known at compile time", "bind the input that feeds it with --const")
            arr = np.asarray(ins[pos].const).reshape(-1)
            return arr if arr.size else None
        return None

    scales_in, sizes_in = given(2), given(3)
    scales = [np.float32(1.0)] * r
    out = list(x.shape)
    roi = [(np.float32(0), np.float32(1))] * r       # (start, end) per axis: tf_crop_and_resize's crop
    if ct == "tf_crop_and_resize":
        if len(ins) < 2 or ins[1] is None or ins[1].const is None or np.asarray(ins[1].const).size != 2 * len(axes):
            raise ShapeError(f"Resize node {node.name!r}: tf_crop_and_resize needs roi as a constant of "
                             f"{2 * len(axes)} values (the starts, then the ends, of the axes)",
                             "bind the input that feeds it with --const")
        vals = np.asarray(ins[1].const).astype(np.float32).reshape(-1)
        for k, a in enumerate(axes):
            roi[a] = (vals[k], vals[k + len(axes)])
    if sizes_in is not None:
        if len(sizes_in) != len(axes):
            raise _err(node, f"{len(sizes_in)} sizes for {len(axes)} axes")
        if policy == "stretch":
            for a, s in zip(axes, sizes_in):
                out[a] = int(s)
                scales[a] = np.float32(int(s)) / np.float32(x.shape[a])
        else:
            # one scale for every axis: the smallest (not_larger) or largest (not_smaller) of
            # sizes / input sizes, the output sizes rounded from it (halves up)
            ratios = [np.float32(int(s)) / np.float32(x.shape[a]) for a, s in zip(axes, sizes_in)]
            scale = min(ratios) if policy == "not_larger" else max(ratios)
            for a in axes:
                scales[a] = np.float32(scale)
                out[a] = int(np.floor(np.float32(scale) * np.float32(x.shape[a]) + np.float32(0.5)))
    elif scales_in is not None:
        if len(scales_in) != len(axes):
            raise _err(node, f"{len(scales_in)} scales for {len(axes)} axes")
        for a, s in zip(axes, scales_in):
            scales[a] = np.float32(s)
            # (with tf_crop_and_resize too, as ONNX Runtime and the reference implementation do,
            # though the spec multiplies by the crop's extent)
            out[a] = int(np.floor(np.float32(x.shape[a]) * np.float32(s)))
    else:
        raise _err(node, "needs scales or sizes")
    if any(o <= 0 for o in out):
        raise _err(node, f"output shape {out} is empty")
    return out, scales, mode, ct, roi


def _resize_infer(node, ins):
    out = _resize_spec(node, ins)[0]
    return [(ins[0].dtype, tuple(out))]


def _f(v) -> Expr:
    return const(float(np.float32(v)), F32)


def _original_coord(o: Expr, ct: str, scale, in_len: int, out_len: int, roi=(0.0, 1.0)) -> Expr:
    """The source coordinate of output index o, computed in float32 like ONNX Runtime."""
    of = cast(o, F32)
    if ct == "tf_crop_and_resize":
        start, end = np.float32(roi[0]), np.float32(roi[1])
        if out_len == 1:
            return _f(np.float32(0.5) * (start + end) * np.float32(in_len - 1))
        return _f(start * np.float32(in_len - 1)) + of * _f(end - start) * _f(in_len - 1) / _f(out_len - 1)
    if ct == "asymmetric":
        return of / _f(scale)
    if ct == "half_pixel":
        return (of + _f(0.5)) / _f(scale) - _f(0.5)
    if ct == "pytorch_half_pixel":
        return (of + _f(0.5)) / _f(scale) - _f(0.5) if out_len > 1 else _f(0.0)
    if ct == "tf_half_pixel_for_nn":
        return (of + _f(0.5)) / _f(scale)
    if ct == "align_corners":
        return _f(0.0) if out_len == 1 else of * _f(in_len - 1) / _f(out_len - 1)
    if ct == "half_pixel_symmetric":
        adj = np.float32(out_len) / (np.float32(scale) * np.float32(in_len))
        center = np.float32(in_len) / np.float32(2)
        offset = center * (np.float32(1) - adj)
        return _f(offset) + (of + _f(0.5)) / _f(scale) - _f(0.5)
    raise AssertionError(ct)


def _nearest_index(b, x: Expr, nearest_mode: str, in_len: int, hint: str) -> Expr:
    """Round the source coordinate x as nearest_mode says, then clamp into [0, in_len)."""
    if nearest_mode == "floor":
        i = cast(call("floor", x), I64)
    elif nearest_mode == "ceil":
        i = cast(call("ceil", x), I64)
    else:
        xv = b.local(hint, x)
        half = binop("==", xv, cast(cast(xv, I64), F32) + _f(0.5))
        tie = call("floor" if nearest_mode == "round_prefer_floor" else "ceil", xv)
        i = cast(select(half, tie, call("round", xv)), I64)
    i = b.local(hint + "i", i)
    return maximum(const(0), minimum(const(in_len - 1), i))


def _nearest_table(ct: str, nearest_mode: str, scale, in_len: int, out_len: int) -> np.ndarray:
    """The source index of every output index, computed by numpy in float32 exactly as the
    generated C (and ONNX Runtime) compute it."""
    f = np.float32
    of = np.arange(out_len).astype(f)
    sc = f(scale)
    if ct == "asymmetric":
        x = of / sc
    elif ct in ("half_pixel", "pytorch_half_pixel"):
        x = (of + f(0.5)) / sc - f(0.5) if (ct == "half_pixel" or out_len > 1) else np.zeros_like(of)
    elif ct == "tf_half_pixel_for_nn":
        x = (of + f(0.5)) / sc
    elif ct == "align_corners":
        x = np.zeros_like(of) if out_len == 1 else of * f(in_len - 1) / f(out_len - 1)
    else:
        adj = f(out_len) / (sc * f(in_len))
        offset = f(in_len) / f(2) * (f(1) - adj)
        x = f(offset) + (of + f(0.5)) / sc - f(0.5)
    if nearest_mode == "floor":
        i = np.floor(x)
    elif nearest_mode == "ceil":
        i = np.ceil(x)
    else:
        tie = x == x.astype(np.int64).astype(f) + f(0.5)
        i = np.where(tie, np.floor(x) if nearest_mode == "round_prefer_floor" else np.ceil(x), np.round(x))
    return np.clip(i.astype(np.int64), 0, in_len - 1)


def _lower_resize(node, ctx):
    X, Y = ctx.ins[0], ctx.outs[0]
    ins = [ctx.value(i) for i in range(len(node.inputs))]
    out, scales, mode, ct, roi = _resize_spec(node, ins)
    crop = ct == "tf_crop_and_resize"
    nearest_mode = node.attr("nearest_mode", "round_prefer_floor")
    b = ctx.b
    r = len(X.shape)
    xst = _strides(X.shape)
    linear = mode in ("linear", "cubic") and X.dtype.kind == "f"      # (taps weighted and summed)
    if mode != "nearest" and not linear:
        raise UnsupportedError([f"Resize node {node.name!r}: {mode} mode on {X.dtype}"])
    # antialias=1: the axes a linear or cubic Resize shrinks are low-passed by the stretched
    # kernel, whose taps and weights per output index are tables (ops/resize_filters.py); an
    # axis whose length stays is copied whatever its scale, as ONNX Runtime does
    antialias = linear and bool(int(node.attr("antialias", 0)))
    filtered = filtered_axes(mode, antialias, scales, X.shape, out)
    if RESIZE_BY_ROWS and mode == "linear" and r >= 2 and not crop and not filtered \
            and not (out[-1] == X.shape[-1] and float(scales[-1]) == 1.0):
        _resize_linear_by_rows(ctx, X, Y, out, scales, ct)
        return
    filters = {}              # per filtered axis: its taps and weights by output index (a table)
    for i in filtered:
        def coord(o, i=i):
            return _original_coord(o, ct, scales[i], X.shape[i], out[i], roi[i])
        filters[i] = antialias_filter(ctx, i, mode, coord, scales[i], X.shape[i], out[i],
                                      float(node.attr("cubic_coeff_a", -0.75)),
                                      bool(int(node.attr("exclude_outside", 0))))
    windows = {}              # per filtered axis: the output's (first tap, tap count)
    nest = _Nest(b, SPATIAL)
    oo = []
    idx_terms = []            # per axis: [(index expr, weight expr or None), ...] (1 to 4 entries)
    outside = None            # tf_crop_and_resize: a source coordinate outside the input
    for i in range(r):
        o = nest.loop(out[i], f"i{i}")
        oo.append(o)
        L = X.shape[i]
        if out[i] == L and (float(scales[i]) == 1.0 or antialias) and not (crop and tuple(roi[i]) != (0.0, 1.0)):
            idx_terms.append([(o, None)])
            continue
        x = _original_coord(o, ct, scales[i], L, out[i], roi[i])
        if crop:
            x = b.local(f"x{i}c", x)
            off = binop("||", x < _f(0.0), x > _f(L - 1))
            outside = off if outside is None else binop("||", outside, off)
        if not linear and crop:
            idx_terms.append([(b.local(f"s{i}", _nearest_index(b, x, nearest_mode, L, f"r{i}")), None)])
            continue
        if i in filters:
            windows[i] = filters[i].window(b, o)
            idx_terms.append(None)            # (a loop over the taps, opened inside every output loop)
            continue
        if not linear:
            table = _nearest_table(ct, nearest_mode, scales[i], L, out[i])
            g = int(np.gcd(L, out[i]))
            p_, q_ = L // g, out[i] // g
            if np.array_equal(table, np.arange(out[i]) * p_ // q_):
                # an integer ratio: the same indices without float arithmetic
                b.comment(f"axis {i}: nearest source index = o * {p_} / {q_}")
                idx_terms.append([(o * p_ / q_, None)])
            else:
                idx_terms.append([(b.local(f"s{i}", _nearest_index(b, x, nearest_mode, L, f"r{i}")), None)])
            continue
        if mode == "cubic":
            idx_terms.append(_cubic_taps(b, x, L, i, float(node.attr("cubic_coeff_a", -0.75)),
                                         bool(int(node.attr("exclude_outside", 0)))))
        else:
            idx_terms.append(_linear_taps(b, x, L, i))
    at = _dot(oo, _strides(out))
    if filters:
        acc = b.accumulator("acc", const(0.0, X.dtype))
        taps = _Nest(b, REDUCTION)
        for i, f in filters.items():
            idx_terms[i] = [f.tap(b, oo[i], windows[i][0], taps.loop(windows[i][1], f"k{i}"))]
    if not linear:
        total = X[_dot([t[0][0] for t in idx_terms], xst)]
    else:
        total = None
        for combo in itertools.product(*idx_terms):
            w = None
            for _, wt in combo:
                if wt is not None:
                    w = wt if w is None else w * wt
            term = X[_dot([ix for ix, _ in combo], xst)]
            term = term if w is None else cast(w, X.dtype) * term
            total = term if total is None else total + term
    if filters:
        b.assign(acc, acc + total)
        taps.close()
        total = acc
    if outside is not None:
        total = select(outside, const(float(node.attr("extrapolation_value", 0.0)), X.dtype), total)
    b.store(Y, at, total)
    nest.close()


# linear Resize whose last axis changes: axis after axis (_resize_linear_by_rows); False: the
# element-wise form (tests compare the two)
RESIZE_BY_ROWS = True


def _linear_taps(b, x: Expr, L: int, i: int) -> list:
    """The two taps [(index, weight), (index, weight)] of source coordinate x on an axis of
    length L (clamped to it; at the edge both taps are the same index, weighted 1/2 each)."""
    xc = b.local(f"x{i}", maximum(_f(0.0), minimum(_f(L - 1), x)))
    i0 = b.local(f"a{i}", minimum(const(L - 1), cast(xc, I64)))
    i1 = b.local(f"b{i}", minimum(const(L - 1), i0 + 1))
    eq = binop("==", i0, i1)
    d0 = b.local(f"da{i}", select(eq, _f(0.5), call("abs", xc - cast(i0, F32))))
    d1 = b.local(f"db{i}", select(eq, _f(0.5), call("abs", xc - cast(i1, F32))))
    # the tap at i0 is weighted by the distance to i1 and vice versa
    return [(i0, d1), (i1, d0)]


def _cubic_taps(b, x: Expr, L: int, i: int, A: float, exclude_outside: bool) -> list:
    """The four taps [(index, weight)] of source coordinate x on an axis of length L: indices
    floor(x) - 1 ... floor(x) + 2, clamped into the axis, weighted by the cubic convolution
    kernel with coefficient A at their distances from x (Keys' kernel, A = -0.75 by default as
    in ONNX). exclude_outside: taps outside the axis weigh 0 and the others are renormalized."""
    f0 = b.local(f"f{i}", call("floor", x))
    t = b.local(f"t{i}", x - f0)                       # in [0, 1): distance past the second tap
    i0 = b.local(f"c{i}", cast(f0, I64))
    a = _f(A)

    def far(d):      # the kernel at a distance d in [1, 2]
        return ((a * d - _f(5.0) * a) * d + _f(8.0) * a) * d - _f(4.0) * a

    def near(d):     # ... and at a distance d in [0, 1]
        return ((a + _f(2.0)) * d - (a + _f(3.0))) * d * d + _f(1.0)

    weights = [far(t + _f(1.0)), near(t), near(_f(1.0) - t), far(_f(2.0) - t)]
    taps = []
    for k, w in zip(range(-1, 3), weights):
        ix = b.local(f"k{i}_{k + 1}", i0 + k)
        w = b.local(f"w{i}_{k + 1}", w)
        if exclude_outside:
            w = b.local(f"w{i}_{k + 1}", select(binop("&&", ix >= 0, ix < L), w, _f(0.0)))
        taps.append((maximum(const(0), minimum(const(L - 1), ix)), w))
    if exclude_outside:
        total = b.local(f"wsum{i}", taps[0][1] + taps[1][1] + taps[2][1] + taps[3][1])
        taps = [(ix, w / total) for ix, w in taps]
    return taps


def _resize_linear_by_rows(ctx, X, Y, out, scales, ct) -> None:
    """Linear Resize whose last axis changes, one axis after the other: each output row is
    first the input rows its outer coordinates reach, weighted and summed into a row scratch
    (contiguous, vectorizable), then read at the last axis' two taps per output element, whose
    indices and weights are computed once per kernel into a table (the element-wise form
    recomputed them for every element and gathered four values for each)."""
    b = ctx.b
    r, L, OW = len(X.shape), X.shape[-1], out[-1]
    xst = _strides(X.shape)
    taps = ctx.scratch((2, OW), I64, "tap")           # the last axis' taps: indices ...
    weights = ctx.scratch((2, OW), F32, "weight")     # ... and weights
    with b.loop(OW, "o", role=SPATIAL) as o:
        for k, (ix, w) in enumerate(_linear_taps(b, _original_coord(o, ct, scales[-1], L, OW), L, r - 1)):
            b.store(taps, k * OW + o, ix)
            b.store(weights, k * OW + o, w)
    row = ctx.scratch((L,), X.dtype, "row")
    walked = [i for i in range(r - 1) if out[i] > 1]        # (an axis of 1 opens no loop)
    with b.loops([out[i] for i in walked], [f"i{i}" for i in walked], role=SPATIAL, private=(row,)) as idx:
        oo = [const(0)] * (r - 1)
        for i, v in zip(walked, idx):
            oo[i] = v
        idx_terms = []
        for i, o in enumerate(oo):
            if out[i] == X.shape[i] and float(scales[i]) == 1.0:
                idx_terms.append([(o, None)])
            else:
                idx_terms.append(_linear_taps(b, _original_coord(o, ct, scales[i], X.shape[i], out[i]),
                                              X.shape[i], i))
        with b.loop(L, "j", role=SPATIAL) as j:
            total = None
            for combo in itertools.product(*idx_terms):
                w = None
                for _, wt in combo:
                    if wt is not None:
                        w = wt if w is None else w * wt
                term = X[_dot([ix for ix, _ in combo], xst[:-1]) + j]
                term = term if w is None else cast(w, X.dtype) * term
                total = term if total is None else total + term
            b.store(row, j, total)
        at = _dot(oo, _strides(out)[:-1])
        with b.loop(OW, "o", role=SPATIAL) as o:
            b.store(Y, at + o, cast(weights[o], X.dtype) * row[taps[o]] +
                    cast(weights[OW + o], X.dtype) * row[taps[OW + o]])


register("Resize", lower=_lower_resize)(_resize_infer)


# ----------------------------------------------------------------------------- normalizations
def _bn_infer(node, ins):
    if int(node.attr("training_mode", 0)) or len([o for o in node.outputs if o]) > 1:
        raise UnsupportedError([f"BatchNormalization node {node.name!r} in training mode"])
    x = ins[0]
    if len(x.shape) < 2:
        raise _err(node, f"input {x.shape} has no channel dim")
    for v in ins[1:5]:
        if v is None or tuple(v.shape) != (x.shape[1],):
            raise _err(node, f"scale/bias/mean/var must all be ({x.shape[1]},)")
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


register("BatchNormalization", lower=_lower_bn)(_bn_infer)


def _in_infer(node, ins):
    x = ins[0]
    if len(x.shape) < 3:
        raise _err(node, f"input {x.shape} must be N-C-spatial")
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
        mean = b.local("mean", acc / const(float(SL), dt))
        sq = b.accumulator("sq", const(0.0, dt))
        with b.loop(SL, "p", role=REDUCTION) as p:
            d = b.local("d", X[base + p] - mean)
            b.assign(sq, sq + d * d)
        s = b.local("s", sc[c] / call("sqrt", sq / const(float(SL), dt) + const(eps, dt)))
        t = b.local("t", bi[c] - mean * s)
        with b.loop(SL, "p", role=SPATIAL) as p:
            b.store(Y, base + p, X[base + p] * s + t)


register("InstanceNormalization", lower=_lower_instnorm)(_in_infer)


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
        random_ops.seed_of(node)
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
        stream = random_ops.Stream(ctx, node)
        if ratio is None:
            r = b.local("ratio", cast(Load(ctx.ins[1], const(0)), dt))
            scale = b.local("scale", const(1.0, dt) / (const(1.0, dt) - r))
            b.comment("training: keep an element where u >= ratio (a run-time input, unchecked), scaled by "
                      "1 / (1 - ratio)")
        else:
            r, scale = const(ratio, dt), const(1.0 / (1.0 - ratio), dt)
            b.comment(f"training: keep an element where u >= {ratio:g}, scaled by 1 / (1 - {ratio:g})")
        with b.loop(X.size, "p", role=SPATIAL) as p:
            keep = b.local("keep", random_ops.unit(b, stream.word(b, p), dt) >= r)
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
