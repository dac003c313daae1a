"""Region and position ops on images: RoiAlign, MaxRoiPool, MaxUnpool, Col2Im, AffineGrid.

RoiAlign: for each roi [x1, y1, x2, y2] of image batch_indices[r], each output bin averages
(avg) or takes the maximum (max) of bilinear samples on a grid of sampling_ratio^2 points, or
ceil(roi size / output size) points per axis when sampling_ratio is 0 (counted per roi at run
time). As ONNX Runtime: a sample more than one pixel outside the image counts as 0, the max
mode takes the largest of the four weighted corner terms of each sample, and rois of
output_half_pixel mode are at least 1 x 1. Opset 10 has no coordinate_transformation_mode:
its rois are output_half_pixel (the later default is half_pixel).
MaxRoiPool: rois [batch, x1, y1, x2, y2] rounded to pixels; each bin takes the maximum of
its pixels (0 for an empty bin).
MaxUnpool: zeros of the output shape (inferred from kernel_shape, strides, pads, or the
constant output_shape) with X[i] written at the flat output position I[i] (as ONNX Runtime
does, and as MaxPool's indices mean; ONNX's reference pads the inferred shape instead).
Col2Im: each image pixel sums the column entries of the blocks that cover it.
AffineGrid: theta [N, 2, 3] / [N, 3, 4] applied to the normalized (x, y[, z], 1) of each
position of the constant size; a 1-long axis with aligned corners sits at 1 (ONNX Runtime's
linspace).

Batch indices (RoiAlign's input, MaxRoiPool's first roi column) and MaxUnpool's indices are
read at run time: one outside the tensor fails the run with AOTC_ERR_INDEX_OUT_OF_RANGE."""
from __future__ import annotations

import numpy as np

from ..errors import ShapeError, UnsupportedError
from ..ir import dtypes
from ..kernel.ir import (BOOL, I64, ORDERED, REDUCTION, SPATIAL, Expr, Load, Unary, binop, call, cast,
                         const, maximum, minimum, select)
from .common import const_ints, prod
from .registry import register

_FLOATS = (dtypes.FLOAT32, dtypes.FLOAT64)
# run-time float -> integer conversions are clamped into +-_INT_BOUND first (NaN -> the lower
# bound), so that no cast overflows; only absurd roi values reach it
_INT_BOUND = float(2 ** 30)


def _name(node) -> str:
    return f"{node.op_type} node {node.name!r}"


def _check_dtype(node, x, allowed=_FLOATS) -> None:
    if x.dtype not in allowed:
        raise UnsupportedError([f"{_name(node)} on {x.dtype} (supported: {', '.join(str(d) for d in allowed)})"])


def _c(v, dt) -> Expr:
    return const(v, dt)


def _not(e: Expr) -> Expr:
    return Unary("!", e, BOOL)


def _smax(a: Expr, b: Expr) -> Expr:
    """std::max(a, b) as ONNX Runtime writes it: a < b ? b : a."""
    return select(a < b, b, a)


def _to_int(b, hint: str, v: Expr) -> Expr:
    """An integer local from a float expression (truncated), clamped into +-_INT_BOUND."""
    dt = v.dtype
    lo, hi = _c(-_INT_BOUND, dt), _c(_INT_BOUND, dt)
    f = b.local(hint + "f", v)
    return b.local(hint, cast(select(f > lo, select(f < hi, f, hi), lo), I64))


def _fail_outside(b, ok: Expr, what: str) -> None:
    with b.if_(_not(ok)):
        b.fail("AOTC_ERR_INDEX_OUT_OF_RANGE", what)


# ----------------------------------------------------------------------------- RoiAlign
def _roialign_spec(node, ins):
    x, rois, idx = ins[0], ins[1], ins[2]
    name = _name(node)
    _check_dtype(node, x)
    if rois.dtype != x.dtype:
        raise ShapeError(f"{name}: rois are {rois.dtype} but X is {x.dtype}")
    if idx.dtype != dtypes.INT64:
        raise ShapeError(f"{name}: batch_indices must be int64, not {idx.dtype}")
    if len(x.shape) != 4:
        raise ShapeError(f"{name}: X {tuple(x.shape)} must be 4-D [N, C, H, W]")
    if len(rois.shape) != 2 or rois.shape[1] != 4:
        raise ShapeError(f"{name}: rois {tuple(rois.shape)} must be [num_rois, 4]")
    if tuple(idx.shape) != (rois.shape[0],):
        raise ShapeError(f"{name}: batch_indices {tuple(idx.shape)} must be [num_rois] = ({rois.shape[0]},)")
    mode = node.attr("mode", "avg")
    if mode not in ("avg", "max"):
        raise UnsupportedError([f"{name} with mode {mode!r} (avg and max)"])
    # (before opset 16 there is no attribute and rois are output_half_pixel: normalize.py sets it)
    ctm = node.attr("coordinate_transformation_mode", "half_pixel")
    if ctm not in ("half_pixel", "output_half_pixel"):
        raise UnsupportedError([f"{name} with coordinate_transformation_mode {ctm!r}"])
    oh, ow = int(node.attr("output_height", 1)), int(node.attr("output_width", 1))
    ratio = int(node.attr("sampling_ratio", 0))
    if oh < 1 or ow < 1 or ratio < 0:
        raise ShapeError(f"{name}: output_height {oh} / output_width {ow} must be >= 1 and "
                         f"sampling_ratio {ratio} >= 0")
    return mode, ctm, oh, ow, ratio


def _roialign_infer(node, ins):
    _, _, oh, ow = _roialign_spec(node, ins)[:4]
    return [(ins[0].dtype, (ins[1].shape[0], ins[0].shape[1], oh, ow))]


def _lower_roialign(node, ctx):
    X, ROIS, BI, Y = ctx.ins[0], ctx.ins[1], ctx.ins[2], ctx.outs[0]
    mode, ctm, oh, ow, ratio = _roialign_spec(node, [X, ROIS, BI])
    half = ctm == "half_pixel"
    scale = float(node.attr("spatial_scale", 1.0))
    N, C, H, W = X.shape
    R = ROIS.shape[0]
    dt = X.dtype
    b = ctx.b
    b.comment(f"RoiAlign: {mode} of bilinear samples, {ctm}, "
              + (f"{ratio} x {ratio} samples a bin" if ratio else "samples a bin from each roi's size"))
    with b.loop(R, "r", role=SPATIAL) as r:
        n = b.local("n", Load(BI, r))
        _fail_outside(b, binop("&&", n >= 0, n < N), f"a batch index outside [0, {N})")
        off = _c(0.5 if half else 0.0, dt)
        x0, y0, x1, y1 = (b.local(h, Load(ROIS, r * 4 + k) * _c(scale, dt) - off)
                          for k, h in enumerate(("x0", "y0", "x1", "y1")))
        rw, rh = x1 - x0, y1 - y0
        if not half:                        # malformed rois become 1 x 1
            rw, rh = _smax(rw, _c(1.0, dt)), _smax(rh, _c(1.0, dt))
        rw, rh = b.local("rw", rw), b.local("rh", rh)
        bw, bh = b.local("bw", rw / _c(ow, dt)), b.local("bh", rh / _c(oh, dt))
        if ratio:
            gh = gw = const(ratio)
        else:                               # ceil(roi size / bins) samples, none for an empty roi
            gh = _to_int(b, "gh", maximum(call("ceil", rh / _c(oh, dt)), _c(0.0, dt)))
            gw = _to_int(b, "gw", maximum(call("ceil", rw / _c(ow, dt)), _c(0.0, dt)))
        ghf, gwf = (cast(gh, dt), cast(gw, dt)) if not ratio else (_c(ratio, dt), _c(ratio, dt))
        with b.loops([C, oh, ow], ["c", "ph", "pw"], role=SPATIAL) as (c, ph, pw):
            base = b.local("base", (n * C + c) * (H * W))
            if mode == "avg":
                acc = b.accumulator("acc", _c(0.0, dt))
            else:
                acc = b.local("acc", _c(float("-inf"), dt))
            with b.loop(gh, "iy", role=REDUCTION) as iy:
                y = b.local("y", y0 + cast(ph, dt) * bh + (cast(iy, dt) + _c(0.5, dt)) * bh / ghf)
                ylo, yhi, ly, yin = _axis(b, y, H, "y")
                with b.loop(gw, "ix", role=REDUCTION) as ix:
                    x = b.local("x", x0 + cast(pw, dt) * bw + (cast(ix, dt) + _c(0.5, dt)) * bw / gwf)
                    xlo, xhi, lx, xin = _axis(b, x, W, "x")
                    hy, hx = _c(1.0, dt) - ly, _c(1.0, dt) - lx
                    terms = [hy * hx * Load(X, base + ylo * W + xlo), hy * lx * Load(X, base + ylo * W + xhi),
                             ly * hx * Load(X, base + yhi * W + xlo), ly * lx * Load(X, base + yhi * W + xhi)]
                    inside = binop("&&", yin, xin)
                    if mode == "avg":
                        v = terms[0] + terms[1] + terms[2] + terms[3]
                        b.assign(acc, acc + select(inside, v, _c(0.0, dt)))
                    else:
                        v = _smax(_smax(_smax(terms[0], terms[1]), terms[2]), terms[3])
                        b.assign(acc, _smax(acc, select(inside, v, _c(0.0, dt))))
            at = ((r * C + c) * oh + ph) * ow + pw
            if mode == "avg":
                count = maximum(gh * gw, const(1)) if not ratio else const(ratio * ratio)
                b.store(Y, at, acc / cast(count, dt))
            else:
                b.store(Y, at, acc if ratio else select(binop("&&", gh > 0, gw > 0), acc, _c(0.0, dt)))


def _axis(b, v: Expr, d: int, hint: str):
    """(low index, high index, fraction, inside?) of a sample at v on an axis of d pixels, as
    ONNX Runtime's RoiAlign: outside [-1, d] it counts as 0; below 0 it is 0; from d - 1 on
    both taps are the last pixel."""
    dt = v.dtype
    inside = b.local(hint + "in", binop("&&", v >= _c(-1.0, dt), v <= _c(float(d), dt)))
    v = b.local(hint + "c", select(binop("&&", inside, v > _c(0.0, dt)), v, _c(0.0, dt)))
    lo = b.local(hint + "lo", cast(v, I64))
    last = b.local(hint + "last", lo >= d - 1)
    b.assign(lo, select(last, const(d - 1), lo))
    hi = b.local(hint + "hi", select(last, const(d - 1), lo + 1))
    frac = b.local("l" + hint, select(last, _c(0.0, dt), v - cast(lo, dt)))
    return lo, hi, frac, inside


register("RoiAlign", lower=_lower_roialign)(_roialign_infer)


# ----------------------------------------------------------------------------- MaxRoiPool
def _roipool_spec(node, ins):
    x, rois = ins[0], ins[1]
    name = _name(node)
    _check_dtype(node, x, (dtypes.FLOAT32,))
    if rois.dtype != x.dtype:
        raise ShapeError(f"{name}: rois are {rois.dtype} but X is {x.dtype}")
    if len(x.shape) != 4:
        raise ShapeError(f"{name}: X {tuple(x.shape)} must be 4-D [N, C, H, W]")
    if len(rois.shape) != 2 or rois.shape[1] != 5:
        raise ShapeError(f"{name}: rois {tuple(rois.shape)} must be [num_rois, 5]")
    pooled = node.attr("pooled_shape", None)
    if pooled is None or len(pooled) != 2 or min(int(p) for p in pooled) < 1:
        raise ShapeError(f"{name}: pooled_shape {pooled} must be two sizes >= 1")
    return int(pooled[0]), int(pooled[1])


def _roipool_infer(node, ins):
    ph, pw = _roipool_spec(node, ins)
    return [(ins[0].dtype, (ins[1].shape[0], ins[0].shape[1], ph, pw))]


def _lower_roipool(node, ctx):
    X, ROIS, Y = ctx.ins[0], ctx.ins[1], ctx.outs[0]
    PH, PW = _roipool_spec(node, [X, ROIS])
    scale = float(node.attr("spatial_scale", 1.0))
    N, C, H, W = X.shape
    R = ROIS.shape[0]
    dt = X.dtype
    b = ctx.b
    b.comment(f"MaxRoiPool: {PH} x {PW} bins, the maximum of each")
    with b.loop(R, "r", role=SPATIAL) as r:
        nf = b.local("nf", Load(ROIS, r * 5))
        _fail_outside(b, binop("&&", nf > _c(-1.0, dt), nf < _c(float(N), dt)), f"a batch index outside [0, {N})")
        n = b.local("n", cast(nf, I64))
        x0, y0, x1, y1 = (_to_int(b, h, call("round", Load(ROIS, r * 5 + k) * _c(scale, dt)))
                          for k, h in ((1, "x0"), (2, "y0"), (3, "x1"), (4, "y1")))
        bh = b.local("bh", cast(maximum(y1 - y0 + 1, const(1)), dt) / _c(PH, dt))
        bw = b.local("bw", cast(maximum(x1 - x0 + 1, const(1)), dt) / _c(PW, dt))
        with b.loops([C, PH, PW], ["c", "ph", "pw"], role=SPATIAL) as (c, ph, pw):
            def edge(hint, fn, p, size, start, d):
                """start + fn(p * size), clamped into [0, d]"""
                v = b.local(hint + "_raw", cast(call(fn, cast(p, dt) * size), I64) + start)
                return b.local(hint, minimum(maximum(v, const(0)), const(d)))

            h0, h1 = edge("h0", "floor", ph, bh, y0, H), edge("h1", "ceil", ph + 1, bh, y0, H)
            w0, w1 = edge("w0", "floor", pw, bw, x0, W), edge("w1", "ceil", pw + 1, bw, x0, W)
            empty = binop("||", h1 <= h0, w1 <= w0)
            acc = b.local("acc", select(empty, _c(0.0, dt), _c(float(np.finfo(dt).min), dt)))
            base = b.local("base", (n * C + c) * (H * W))
            with b.loop(h1, "h", role=REDUCTION, start=h0) as h:
                with b.loop(w1, "w", role=REDUCTION, start=w0) as w:
                    v = b.local("v", Load(X, base + h * W + w))
                    b.assign(acc, select(v > acc, v, acc))
            b.store(Y, ((r * C + c) * PH + ph) * PW + pw, acc)


register("MaxRoiPool", lower=_lower_roipool)(_roipool_infer)


# ----------------------------------------------------------------------------- MaxUnpool
def _unpool_shape(node, ins) -> tuple:
    x, idx = ins[0], ins[1]
    name = _name(node)
    _check_dtype(node, x, (dtypes.FLOAT32,))
    if idx.dtype != dtypes.INT64:
        raise ShapeError(f"{name}: indices must be int64, not {idx.dtype}")
    if len(x.shape) < 3 or tuple(idx.shape) != tuple(x.shape):
        raise ShapeError(f"{name}: X {tuple(x.shape)} must be [N, C, spatial...] and the indices "
                         f"{tuple(idx.shape)} of its shape")
    nd = len(x.shape) - 2
    kernel = [int(k) for k in node.attr("kernel_shape", [])]
    strides = [int(s) for s in node.attr("strides", [1] * nd)]
    pads = [int(p) for p in node.attr("pads", [0] * (2 * nd))]
    if len(kernel) != nd or len(strides) != nd or len(pads) != 2 * nd or min(kernel + strides) < 1 or min(pads) < 0:
        raise ShapeError(f"{name}: kernel_shape {kernel}, strides {strides}, pads {pads} do not fit "
                         f"{nd} spatial dims")
    inferred = tuple(x.shape[:2]) + tuple((x.shape[2 + k] - 1) * strides[k] - pads[k] - pads[nd + k] + kernel[k]
                                          for k in range(nd))
    given = const_ints(node, ins, 2, "output_shape")
    if given is None:
        shape = inferred
    else:
        shape = tuple(given)
        if len(shape) != len(x.shape) or shape[:2] != tuple(x.shape[:2]) or min(shape) < 1:
            raise ShapeError(f"{name}: output_shape {list(shape)} must be [{x.shape[0]}, {x.shape[1]}, "
                             f"spatial...] with {nd} spatial sizes >= 1")
    if min(shape) < 1:
        raise ShapeError(f"{name}: the inferred output shape {list(shape)} is empty")
    return shape


def _unpool_infer(node, ins):
    return [(ins[0].dtype, _unpool_shape(node, ins))]


def _lower_unpool(node, ctx):
    X, I, Y = ctx.ins[0], ctx.ins[1], ctx.outs[0]
    total = Y.size
    b = ctx.b
    b.comment(f"MaxUnpool: zeros, then X written at its flat indices into {list(Y.shape)}")
    with b.loop(total, "i", role=SPATIAL) as i:
        b.store(Y, i, _c(0.0, Y.dtype))
    with b.loop(X.size, "t", role=ORDERED) as t:        # two indices may name one element: the last wins
        j = b.local("j", Load(I, t))
        _fail_outside(b, binop("&&", j >= 0, j < total), f"an index outside [0, {total})")
        b.store(Y, j, Load(X, t))


# (not folded by ONNX's reference: given an output_shape larger than the inferred one, it pads the
# unpooled tensor, where ONNX Runtime reads the indices as flat positions in output_shape, as
# MaxPool makes them)
register("MaxUnpool", lower=_lower_unpool, reference_fold=False)(_unpool_infer)


# ----------------------------------------------------------------------------- Col2Im
def _col2im_spec(node, ins):
    x = ins[0]
    name = _name(node)
    _check_dtype(node, x, (dtypes.FLOAT32,))
    image = const_ints(node, ins, 1, "image_shape")
    block = const_ints(node, ins, 2, "block_shape")
    nd = len(image)
    if len(x.shape) != 3 or nd < 1 or len(block) != nd or min(image + block) < 1:
        raise ShapeError(f"{name}: input {tuple(x.shape)} must be [N, C * prod(block), L] and image_shape "
                         f"{image} / block_shape {block} sizes >= 1 of one length")
    dil = [int(v) for v in node.attr("dilations", [1] * nd)]
    strides = [int(v) for v in node.attr("strides", [1] * nd)]
    pads = [int(v) for v in node.attr("pads", [0] * (2 * nd))]
    if len(dil) != nd or len(strides) != nd or len(pads) != 2 * nd or min(dil + strides) < 1 or min(pads) < 0:
        raise ShapeError(f"{name}: dilations {dil}, strides {strides}, pads {pads} do not fit {nd} image dims")
    blocks = [(image[k] + pads[k] + pads[nd + k] - dil[k] * (block[k] - 1) - 1) // strides[k] + 1 for k in range(nd)]
    K = prod(block)
    if x.shape[1] % K or min(blocks) < 1 or x.shape[2] != prod(blocks):
        raise ShapeError(f"{name}: input {tuple(x.shape)} must be [N, C * {K}, {prod(blocks)}] for image_shape "
                         f"{image}, block_shape {block} (blocks {blocks})")
    return image, block, dil, strides, pads[:nd], blocks


def _col2im_infer(node, ins):
    image = _col2im_spec(node, ins)[0]
    x = ins[0]
    return [(x.dtype, (x.shape[0], x.shape[1] // prod(const_ints(node, ins, 2, "block_shape"))) + tuple(image))]


def _lower_col2im(node, ctx):
    X, Y = ctx.ins[0], ctx.outs[0]
    image, block, dil, strides, pb, blocks = _col2im_spec(node, [ctx.value(0), ctx.value(1), ctx.value(2)])
    nd = len(image)
    N, CK, L = X.shape
    K = prod(block)
    C = CK // K
    dt = X.dtype
    b = ctx.b
    b.comment(f"Col2Im: each pixel of {image} sums the columns of the blocks {block} covering it")
    with b.loops([N, C] + image, ["n", "c"] + [f"p{k}" for k in range(nd)], role=SPATIAL) as idx:
        n, c, ps = idx[0], idx[1], idx[2:]
        acc = b.accumulator("acc", _c(0.0, dt))
        _col2im_taps(b, X, acc, (n * C + c) * K, 0, const(0), ps, block, dil, strides, pb, blocks, L, 0)
        b.store(Y, Y.flat(idx), acc)


def _col2im_taps(b, X, acc, row, kflat, lflat, ps, block, dil, strides, pb, blocks, L, k):
    """acc += X[n, row + tap, block] over the taps of dims k.. whose block position is whole
    and inside: block position (p + pad - tap * dilation) / stride along each dim."""
    if k == len(block):
        b.assign(acc, acc + Load(X, (row + kflat) * L + lflat))
        return
    with b.loop(block[k], f"k{k}", role=REDUCTION) as t:
        q = b.local(f"q{k}", ps[k] + pb[k] - t * dil[k])
        ok = binop("&&", q >= 0, q < blocks[k] * strides[k])
        if strides[k] > 1:
            ok = binop("&&", ok, (q % strides[k]).eq(0))
        with b.if_(ok):
            at = q / strides[k] if strides[k] > 1 else q
            _col2im_taps(b, X, acc, row, kflat * block[k] + t, lflat * blocks[k] + at, ps, block, dil, strides,
                         pb, blocks, L, k + 1)


register("Col2Im", lower=_lower_col2im)(_col2im_infer)


# ----------------------------------------------------------------------------- AffineGrid
def _affine_spec(node, ins):
    theta = ins[0]
    name = _name(node)
    _check_dtype(node, theta)
    size = const_ints(node, ins, 1, "size")
    nd = len(size) - 2
    if nd not in (2, 3) or min(size) < 1:
        raise ShapeError(f"{name}: size {size} must be [N, C, H, W] or [N, C, D, H, W]")
    want = (size[0], nd, nd + 1)
    if tuple(theta.shape) != want:
        raise ShapeError(f"{name}: theta {tuple(theta.shape)} must be {want} for size {size}")
    return size[2:], bool(int(node.attr("align_corners", 0)))


def _affine_infer(node, ins):
    spatial, _ = _affine_spec(node, ins)
    return [(ins[0].dtype, (ins[0].shape[0], *spatial, len(spatial)))]


def _lower_affine(node, ctx):
    T, G = ctx.ins[0], ctx.outs[0]
    spatial, aligned = _affine_spec(node, [ctx.value(0), ctx.value(1)])
    nd = len(spatial)
    N = T.shape[0]
    dt = T.dtype
    b = ctx.b
    b.comment(f"AffineGrid: theta . (x, y{', z' if nd == 3 else ''}, 1) over {spatial}, "
              f"corners {'aligned' if aligned else 'not aligned'}")

    def pos(i, d) -> Expr:
        if aligned:
            if d == 1:
                return _c(1.0, dt)
            return _c(-1.0, dt) + cast(i, dt) * _c(2.0 / (d - 1), dt)
        return (cast(i, dt) * _c(2.0, dt) + _c(1.0, dt)) / _c(float(d), dt) - _c(1.0, dt)

    with b.loops([N] + list(spatial), ["n"] + ["d", "h", "w"][3 - nd:], role=SPATIAL) as idx:
        n, ps = idx[0], idx[1:]
        coords = [b.local(a, pos(i, d)) for a, i, d in zip("xyz", reversed(ps), reversed(spatial))]
        at = G.flat(list(idx) + [0])
        for row in range(nd):
            tb = (n * nd + row) * (nd + 1)
            v = Load(T, tb) * coords[0]
            for k in range(1, nd):
                v = v + Load(T, tb + k) * coords[k]
            b.store(G, at + row, v + Load(T, tb + nd))


register("AffineGrid", lower=_lower_affine)(_affine_infer)
