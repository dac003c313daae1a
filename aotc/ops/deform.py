"""DeformConv (opsets 19 and 22) on 2-D inputs: a convolution whose every tap reads the input
at its position moved by a learned offset, by bilinear interpolation, optionally scaled by a
mask.

For output (n, m, oh, ow) and tap (kh, kw), the offset group of input channel c is
c / (C / offset_group); the tap reads X[n, c] at
  y = oh * stride_h - pad_top + kh * dilation_h + offset[n, og, kh, kw, 0, oh, ow]
  x = ow * stride_w - pad_left + kw * dilation_w + offset[n, og, kh, kw, 1, oh, ow]
(offset is [N, offset_group * KH * KW * 2, OH, OW] in that order), bilinearly from its four
neighbouring pixels, a pixel outside the image counting as 0, times
mask[n, og, kh, kw, oh, ow] (mask is [N, offset_group * KH * KW, OH, OW]; 1 without it).
The output is the bias plus the sum over the group's input channels and the taps of the
weight times that.

Lowering, per (batch entry, group): the samples go into an im2col-shaped scratch
[(channel, tap), output position], each tap's position, corner indices and weights computed
once per offset group for all the group's channels in it; then a GEMM with the weights
(float32, the bias as its epilogue) or a loop nest (float64)."""
from __future__ import annotations

from ..errors import ShapeError, UnsupportedError
from ..ir import dtypes
from ..kernel.ir import (I64, REDUCTION, SPATIAL, GemmDest, Load, binop, call, cast, const, matrix, maximum,
                         minimum, select)
from .registry import register
from .window import conv_parts

_FLOATS = (dtypes.FLOAT32, dtypes.FLOAT64)


def _spec(node, ins):
    x, w, off = ins[0], ins[1], ins[2]
    bias = ins[3] if len(ins) > 3 else None
    mask = ins[4] if len(ins) > 4 else None
    name = f"DeformConv node {node.name!r}"
    if x.dtype not in _FLOATS:
        raise UnsupportedError([f"{name} on element type {x.dtype} (float32 and float64)"])
    if len(x.shape) != 4:
        raise UnsupportedError([f"{name} on a {len(x.shape) - 2}-D input (2-D only)"])
    for v, what in ((w, "W"), (off, "offset"), (bias, "B"), (mask, "mask")):
        if v is not None and v.dtype != x.dtype:
            raise ShapeError(f"{name}: {what} is {v.dtype}, X is {x.dtype}")
    group, win = conv_parts(node, x.shape, w.shape)
    N, C = int(x.shape[0]), int(x.shape[1])
    M = int(w.shape[0])
    og = int(node.attr("offset_group", 1))
    if og < 1 or C % og:
        raise ShapeError(f"{name}: offset_group {og} must divide the {C} input channels")
    KH, KW = win.kernel
    OH, OW = win.out
    want = (N, og * KH * KW * 2, OH, OW)
    if tuple(off.shape) != want:
        raise ShapeError(f"{name}: offset {tuple(off.shape)} must be {want} (N, offset_group * kH * kW * 2, "
                         "output height, output width)")
    if mask is not None and tuple(mask.shape) != (N, og * KH * KW, OH, OW):
        raise ShapeError(f"{name}: mask {tuple(mask.shape)} must be {(N, og * KH * KW, OH, OW)}")
    if bias is not None and tuple(bias.shape) != (M,):
        raise ShapeError(f"{name}: B {tuple(bias.shape)} must be ({M},)")
    return group, win, og


def _infer(node, ins):
    _, win, _ = _spec(node, ins)
    return [(ins[0].dtype, (ins[0].shape[0], ins[1].shape[0], *win.out))]


def _lower(node, ctx):
    X, W, OFF = ctx.ins[0], ctx.ins[1], ctx.ins[2]
    B = ctx.ins[3] if len(ctx.ins) > 3 else None
    MASK = ctx.ins[4] if len(ctx.ins) > 4 else None
    Y = ctx.outs[0]
    group, win, og = _spec(node, [X, W, OFF, B, MASK])
    N, C, M = X.shape[0], X.shape[1], W.shape[0]
    Cg, Mg = C // group, M // group
    KK, OL = win.kernel[0] * win.kernel[1], win.out[0] * win.out[1]
    K = Cg * KK
    dt = X.dtype
    b = ctx.b
    b.comment(f"DeformConv: {group} group(s), {og} offset group(s), {win.kernel[0]} x {win.kernel[1]} taps "
              f"sampled bilinearly at their offset positions into a ({K} x {OL}) matrix, then "
              + ("a GEMM" if dt == dtypes.FLOAT32 else "a product with the weights"))
    col = ctx.scratch((K, OL), dt, "col")
    with b.loops([N, group], ["n", "g"], role=SPATIAL, private=(col,)) as (n, g):
        _sample(b, X, OFF, MASK, col, n, g * Cg, Cg, og, win)
        if dt == dtypes.FLOAT32:
            # C(i, j): output channel g*Mg + i at output position j
            b.gemm(Mg, OL, K, matrix(W, g * (Mg * K), K, 1), matrix(col, 0, OL, 1),
                   GemmDest(Y, (n, g * Mg, 0, 0), (1,), (2, 3)),
                   result=(lambda v, i, j: v + B[g * Mg + i]) if B is not None else None)
        else:
            with b.loops([Mg, OL], ["i", "j"], role=SPATIAL) as (i, j):
                m = g * Mg + i
                acc = b.accumulator("acc", Load(B, m) if B is not None else const(0.0, dt))
                with b.loop(K, "k", role=REDUCTION) as k:
                    b.assign(acc, acc + Load(W, m * K + k) * Load(col, k * OL + j))
                b.store(Y, (n * M + m) * OL + j, acc)


def _sample(b, X, OFF, MASK, col, n, c0, Cg, og, win) -> None:
    """col[(c, kh, kw), (oh, ow)] = mask * bilinear sample of X[n, c0 + c] at the tap's offset
    position, for the Cg channels from c0; the offset groups they fall in are walked outside
    the taps and output positions, the channels of one offset group inside."""
    C, H, Wd = X.shape[1], X.shape[2], X.shape[3]
    Cog = C // og
    args = (b, X, OFF, MASK, col, n, c0, og, win, H, Wd)
    if Cog % Cg == 0:                 # the channels lie in one offset group
        _sample_group(*args, c0 / Cog, const(0), const(Cg))
    elif Cg % Cog == 0:               # they span Cg / Cog whole offset groups
        with b.loop(Cg // Cog, "o", role=SPATIAL) as o:
            _sample_group(*args, c0 / Cog + o, o * Cog, o * Cog + Cog)
    else:                             # an offset group may straddle two groups
        with b.loop((c0 + Cg - 1) / Cog + 1, "o", role=SPATIAL, start=c0 / Cog) as o:
            lo = b.local("clo", maximum(c0, o * Cog) - c0)
            hi = b.local("chi", minimum(c0 + Cg, (o + 1) * Cog) - c0)
            _sample_group(*args, o, lo, hi)


def _sample_group(b, X, OFF, MASK, col, n, c0, og, win, H, Wd, o, lo, hi) -> None:
    """The samples of offset group o for the channels c0 + [lo, hi)."""
    KH, KW = win.kernel
    OH, OW = win.out
    KK, OL = KH * KW, OH * OW
    C = X.shape[1]
    dt = X.dtype

    def f(v):
        return const(float(v), dt)

    with b.loops([KH, KW, OH, OW], ["kh", "kw", "oh", "ow"], role=SPATIAL) as (kh, kw, oh, ow):
        tap = (n * og + o) * KK + kh * KW + kw
        pix = oh * OW + ow
        at = tap * (2 * OL) + pix
        y = _clamped(b, "sy", cast(oh * win.strides[0] - win.pads_begin[0] + kh * win.dilations[0], dt)
                     + Load(OFF, at), H)
        x = _clamped(b, "sx", cast(ow * win.strides[1] - win.pads_begin[1] + kw * win.dilations[1], dt)
                     + Load(OFF, at + OL), Wd)
        yf, xf = b.local("yf", call("floor", y)), b.local("xf", call("floor", x))
        ly, lx = b.local("ly", y - yf), b.local("lx", x - xf)
        y0, x0 = b.local("y0", cast(yf, I64)), b.local("x0", cast(xf, I64))
        scale = b.local("mk", Load(MASK, tap * OL + pix)) if MASK is not None else None
        ys = _taps(b, "y", y0, ly, H)
        xs = _taps(b, "x", x0, lx, Wd)
        corners = []
        for yi, yin, wy in ys:
            for xi, xin, wx in xs:
                wgt = wy * wx if scale is None else wy * wx * scale
                corners.append((b.local("at", yi * Wd + xi), b.local("cw", select(binop("&&", yin, xin), wgt, f(0)))))
        row = (kh * KW + kw) * OL + pix
        with b.loop(hi, "c", role=SPATIAL, start=lo) as c:
            plane = (n * C + c0 + c) * (H * Wd)
            v = None
            for a, cw in corners:
                t = cw * Load(X, plane + a)
                v = t if v is None else v + t
            b.store(col, c * (KK * OL) + row, v)


def _taps(b, hint, lo, frac, size: int):
    """The two pixels (index clamped into the image, inside?, weight) an axis position between
    lo and lo + 1 reads."""
    out = []
    for k, (v, w) in enumerate(((lo, const(1.0, frac.dtype) - frac), (lo + 1, frac))):
        inside = b.local(f"{hint}in{k}", binop("&&", v >= 0, v < size))
        out.append((b.local(f"{hint}{k}c", minimum(maximum(v, const(0)), const(size - 1))), inside, w))
    return out


def _clamped(b, hint, v, size: int):
    """v clamped into [-2, size + 1] (NaN to -2): a sample there reads only pixels outside the
    image, as it would unclamped, and the integer conversion of its floor cannot overflow."""
    dt = v.dtype
    lo, hi = const(-2.0, dt), const(float(size + 1), dt)
    raw = b.local(hint + "_raw", v)
    return b.local(hint, select(raw > lo, select(raw < hi, raw, hi), lo))


register("DeformConv", lower=_lower)(_infer)
