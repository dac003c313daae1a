"""Resize (and its older Upsample spelling, normalized into it): nearest, linear and cubic
modes, every coordinate transformation mode, antialiasing (ops/resize_filters.py)."""
from __future__ import annotations

import itertools

import numpy as np

from ..errors import ShapeError, UnsupportedError
from ..ir.internal import LERP_ROWS
from ..ir.dims import RunTimeDim, decide, is_dim
from ..kernel.ir import (F32, I32, I64, REDUCTION, SPATIAL, BufPtr, Expr, binop, call, cast, const, maximum, minimum,
                         select, wrap)
from .common import shape_error
from .registry import register
from .resize_filters import antialias_filter, filtered_axes
from .window import Nest, dot, row_major_strides


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
        if pos == 3 and len(ins) > pos and ins[pos] is not None and ins[pos].sym is not None:
            return ins[pos].sym.reshape(-1)          # sizes of run-time dims (passes/symbolic.py)
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
            raise shape_error(node, f"{len(sizes_in)} sizes for {len(axes)} axes")
        if policy == "stretch":
            for a, s in zip(axes, sizes_in):
                if is_dim(s) or is_dim(x.shape[a]):
                    out[a], scales[a] = s, _ratio(node, s, x.shape[a])
                    continue
                out[a] = int(s)
                scales[a] = np.float32(int(s)) / np.float32(x.shape[a])
        elif any(is_dim(v) for v in list(sizes_in) + [x.shape[a] for a in axes]):
            raise RunTimeDim(f"Resize node {node.name!r}: keep_aspect_ratio_policy {policy!r} over run-time "
                             "dimensions", "fix the input sizes with --shape")
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
            raise shape_error(node, f"{len(scales_in)} scales for {len(axes)} axes")
        for a, s in zip(axes, scales_in):
            scales[a] = np.float32(s)
            # (with tf_crop_and_resize too, as ONNX Runtime and the reference implementation do,
            # though the spec multiplies by the crop's extent)
            out[a] = _scaled(x.shape[a], s) if is_dim(x.shape[a]) else int(np.floor(np.float32(x.shape[a]) * np.float32(s)))
    else:
        raise shape_error(node, "needs scales or sizes")
    if any(o <= 0 for o in out):
        raise shape_error(node, f"output shape {out} is empty")
    return out, scales, mode, ct, roi


def _ratio(node, size, d) -> np.float32:
    """The scale of an output size over an input size where either is a run-time dim: a constant
    for every size in range (the output an exact multiple of the input, or the input of the
    output), as the float32 ONNX Runtime computes from the two at run time; else refused."""
    up = size.divide(d) if is_dim(size) else None
    down = d.divide(size) if is_dim(d) else None
    if isinstance(up, int) and up > 0:
        return np.float32(up)
    if isinstance(down, int) and down > 0:
        return np.float32(1.0 / down)
    raise RunTimeDim(f"Resize node {node.name!r}: output size {size} over input size {d} is not one ratio for "
                     "every size in range", "fix the input sizes with --shape")


def _scaled(d, s):
    """floor(d * s) of a run-time dim d and a float32 scale s, exactly (s is p / 2^k)."""
    from fractions import Fraction
    q = Fraction(float(np.float32(s)))
    return (d * q.numerator) // q.denominator


def _resize_infer(node, ins):
    out = _resize_spec(node, ins)[0]
    return [(ins[0].dtype, tuple(out))]


def _f(v) -> Expr:
    """A float32 constant, or a run-time size (ir/dims.py) as a float32."""
    return cast(wrap(v), F32) if is_dim(v) else const(float(np.float32(v)), F32)


def _original_coord(o: Expr, ct: str, scale, in_len: int, out_len: int, roi=(0.0, 1.0)) -> Expr:
    """The source coordinate of output index o, computed in float32 like ONNX Runtime."""
    of = cast(o, F32)
    if is_dim(out_len) and decide(out_len, "==", 1) is not False and ct in ("tf_crop_and_resize", "align_corners",
                                                                             "pytorch_half_pixel"):
        raise RunTimeDim(f"Resize with {ct}: an output size of 1 takes another formula, and {out_len} may be 1")
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
    return maximum(const(0), minimum(wrap(in_len - 1), i))


def _coords(ct: str, scale, in_len: int, out_len: int) -> np.ndarray:
    """The source coordinate of every output index (not tf_crop_and_resize), computed by numpy
    in float32 as the generated C (and ONNX Runtime) compute it."""
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
    return x


def _nearest_table(ct: str, nearest_mode: str, scale, in_len: int, out_len: int) -> np.ndarray:
    """The source index of every output index, computed by numpy in float32 exactly as the
    generated C (and ONNX Runtime) compute it."""
    f = np.float32
    x = _coords(ct, scale, in_len, out_len)
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
    xst = row_major_strides(X.shape)
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
        if _by_planes(X.shape, out, scales):
            _resize_linear_by_planes(ctx, X, Y, out, scales, ct)
        else:
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
    # nearest, the last axis enlarged by a whole factor q (each element repeated q times): the
    # loop walks the input's elements and stores each q times (contiguous loads and interleaved
    # stores, not a gather per output)
    repeat = 1 if linear or crop else _repeat_factor(ct, nearest_mode, scales[-1], X.shape[-1], out[-1])
    nest = Nest(b, SPATIAL)
    oo = []
    idx_terms = []            # per axis: [(index expr, weight expr or None), ...] (1 to 4 entries)
    outside = None            # tf_crop_and_resize: a source coordinate outside the input
    for i in range(r):
        L = X.shape[i]
        if i == r - 1 and repeat > 1:
            k = nest.loop(L, f"i{i}")
            b.comment(f"axis {i}: each source element repeated {repeat} times")
            oo.append(k * repeat)
            idx_terms.append([(k, None)])
            continue
        o = nest.loop(out[i], f"i{i}")
        oo.append(o)
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
        if not linear and (is_dim(L) or is_dim(out[i])):     # run-time sizes: each index computed
            idx_terms.append([(b.local(f"s{i}", _nearest_index(b, x, nearest_mode, L, f"r{i}")), None)])
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
    at = dot(oo, row_major_strides(out))
    if filters:
        acc = b.accumulator("acc", const(0.0, X.dtype))
        taps = Nest(b, REDUCTION)
        for i, f in filters.items():
            idx_terms[i] = [f.tap(b, oo[i], windows[i][0], taps.loop(windows[i][1], f"k{i}"))]
    if not linear:
        total = X[dot([t[0][0] for t in idx_terms], xst)]
    else:
        total = None
        for combo in itertools.product(*idx_terms):
            w = None
            for _, wt in combo:
                if wt is not None:
                    w = wt if w is None else w * wt
            term = X[dot([ix for ix, _ in combo], xst)]
            term = term if w is None else cast(w, X.dtype) * term
            total = term if total is None else total + term
    if filters:
        b.assign(acc, acc + total)
        taps.close()
        total = acc
    if outside is not None:
        total = select(outside, const(float(node.attr("extrapolation_value", 0.0)), X.dtype), total)
    if repeat > 1:
        v = b.local("v", total)
        for k in range(repeat):
            b.store(Y, at + k, v)
    else:
        b.store(Y, at, total)
    nest.close()


def _repeat_factor(ct: str, nearest_mode: str, scale, L, O) -> int:
    """q where a nearest Resize's axis of L elements becomes O = q * L, every source element
    repeated q times (its index table is o // q), else 1."""
    if is_dim(L) or is_dim(O) or O <= L or O % L:
        return 1
    q = O // L
    table = _nearest_table(ct, nearest_mode, scale, L, O)
    return q if np.array_equal(table, np.arange(O) // q) else 1


# linear Resize whose last axis changes: axis after axis (_resize_linear_by_rows, or by planes
# where that gathers less); False: the element-wise form (tests compare the forms)
RESIZE_BY_ROWS = True
RESIZE_BY_PLANES = True
# ... and their gathering axis by runtime/aotc_lerp.h where the node may call it (LERP_ROWS, a
# CPU target) and its taps fit; False: kernel loops (tests compare the two)
RESIZE_LERP_ROWS = True


def _by_planes(shape, out, scales) -> bool:
    """Whether a linear Resize goes by planes: only its last two axes change, the rows'
    count grows, and the sizes are known at compile time (the plane scratch)."""
    r = len(shape)
    return RESIZE_BY_PLANES and r >= 2 and not any(is_dim(d) for d in (*shape[-2:], *out[-2:])) \
        and out[-2] > shape[-2] \
        and all(out[i] == shape[i] and float(scales[i]) == 1.0 for i in range(r - 2))


def _linear_taps(b, x: Expr, L: int, i: int) -> list:
    """The two taps [(index, weight), (index, weight)] of source coordinate x on an axis of
    length L (clamped to it; at the edge both taps are the same index, weighted 1/2 each)."""
    xc = b.local(f"x{i}", maximum(_f(0.0), minimum(_f(L - 1), x)))
    i0 = b.local(f"a{i}", minimum(wrap(L - 1), cast(xc, I64)))
    i1 = b.local(f"b{i}", minimum(wrap(L - 1), i0 + 1))
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
        taps.append((maximum(const(0), minimum(wrap(L - 1), ix)), w))
    if exclude_outside:
        total = b.local(f"wsum{i}", taps[0][1] + taps[1][1] + taps[2][1] + taps[3][1])
        taps = [(ix, w / total) for ix, w in taps]
    return taps


def _axis_taps(ctx, X, out, scales, ct, i: int = -1):
    """Axis i's two taps per output index as tables computed once per kernel: (indices [2, O],
    weights [2, O]), tap k of output o at k * O + o."""
    b = ctx.b
    i = i % len(X.shape)
    L, O = X.shape[i], out[i]
    taps = ctx.scratch((2, O), I64, "tap")
    weights = ctx.scratch((2, O), F32, "weight")
    with b.loop(O, "o", role=SPATIAL) as o:
        for k, (ix, w) in enumerate(_linear_taps(b, _original_coord(o, ct, scales[i], L, O), L, i)):
            b.store(taps, k * O + o, ix)
            b.store(weights, k * O + o, w)
    return taps, weights


def _lerp_fits(ct, scale, L, O) -> bool:
    """Whether the taps of every 16 consecutive outputs of an axis of L -> O elements lie in a
    window of 32 source elements (runtime/aotc_lerp.h), from the taps numpy computes as the
    kernel does (float32, the same operations in the same order), with one element to spare."""
    if is_dim(L) or is_dim(O):
        return False
    x = np.clip(_coords(ct, scale, L, O), np.float32(0), np.float32(L - 1))
    first = np.minimum(L - 1, x.astype(np.int64))
    last = np.minimum(L - 1, first + 1)
    ends = np.minimum(np.arange(0, O, 16) + 15, O - 1)
    return int((last[ends] - first[::16]).max()) <= 30


def _lerp_tables(ctx, taps, O: int):
    """The tables of runtime/aotc_lerp.h from an axis' taps (_axis_taps): per group of 16
    outputs, where its window starts (its first output's first tap: the taps never decrease),
    and per output its two taps as lanes of that window."""
    b = ctx.b
    groups = -(-O // 16)
    first = ctx.scratch((groups,), I64, "first")
    lanes = ctx.scratch((2, groups * 16), I32, "lanes")
    with b.loop(groups, "g", role=SPATIAL) as g:
        b.store(first, g, taps[g * 16])
    with b.loop(groups * 16, "o", role=SPATIAL) as o:
        at = minimum(o, wrap(O - 1))             # (the last group's lanes past the row: any tap)
        for k in range(2):
            b.store(lanes, k * groups * 16 + o, cast(taps[k * O + at] - taps[o / 16 * 16], I32))
    return first, lanes


def _lerp_rows(ctx, X, out, scales, ct, taps):
    """(first, lanes) where the last axis' rows go through runtime/aotc_lerp.h, else None."""
    if not (RESIZE_LERP_ROWS and ctx.node.attr(LERP_ROWS, 0) and X.dtype == F32
            and _lerp_fits(ct, scales[-1], X.shape[-1], out[-1])):
        return None
    return _lerp_tables(ctx, taps, out[-1])


def _row(ctx, lerp, dst: BufPtr, src: BufPtr, L, OW, taps, weights, dtype) -> None:
    """One row of L source elements (src) resized to OW (dst) along the last axis: by
    runtime/aotc_lerp.h with the tables `lerp`, or each output's two taps gathered in a loop."""
    b = ctx.b
    if lerp is not None:
        b.comment("each output's two taps picked from a window of 32 source elements (runtime/aotc_lerp.h)")
        b.call("aotc_lerp_row", dst, const(OW), src, const(L), BufPtr(lerp[0]), BufPtr(lerp[1]), BufPtr(weights),
               work=OW)
        return
    with b.loop(OW, "o", role=SPATIAL) as o:
        b.store(dst.buf, dst.offset + o, _horizontal(taps, weights, OW, src.buf, src.offset, o, dtype))


def _horizontal(taps, weights, OW, src, at, o, dtype):
    """Output element o of a row resized along the last axis: its two taps of the source row
    that starts at src[at], weighted."""
    return cast(weights[o], dtype) * src[at + taps[o]] + cast(weights[OW + o], dtype) * src[at + taps[OW + o]]


def _resize_linear_by_planes(ctx, X, Y, out, scales, ct) -> None:
    """Linear Resize of the last two axes only, growing the rows' count (an upsampling, the
    common case): per plane, the input's rows are first resized along the last axis into a
    plane scratch (taps gathered from a table: the scalar part, done once per input row), then
    each output row is two of the scratch's rows weighted and summed (contiguous, vectorized).
    The by-rows form gathers for every output row, so this one gathers H / OH of that."""
    b = ctx.b
    r = len(X.shape)
    H, L = X.shape[-2:]
    OH, OW = out[-2:]
    xst, yst = row_major_strides(X.shape), row_major_strides(out)
    taps, weights = _axis_taps(ctx, X, out, scales, ct)
    lerp = _lerp_rows(ctx, X, out, scales, ct, taps)
    rows, row_weights = _axis_taps(ctx, X, out, scales, ct, r - 2)     # (the same for every plane)
    plane = ctx.scratch((H, OW), X.dtype, "plane")
    walked = [i for i in range(r - 2) if out[i] > 1]
    with b.loops([out[i] for i in walked], [f"i{i}" for i in walked], role=SPATIAL, private=(plane,)) as idx:
        oo = [const(0)] * (r - 2)
        for i, v in zip(walked, idx):
            oo[i] = v
        src, dst = dot(oo, xst[:-2]), dot(oo, yst[:-2])
        with b.loop(H, "h", role=SPATIAL) as h:
            _row(ctx, lerp, BufPtr(plane, h * OW), BufPtr(X, src + h * L), L, OW, taps, weights, X.dtype)
        with b.loop(OH, "v", role=SPATIAL) as v:
            ia, ib = b.local("ia", rows[v]), b.local("ib", rows[OH + v])
            wa, wb = b.local("wa", cast(row_weights[v], X.dtype)), b.local("wb", cast(row_weights[OH + v], X.dtype))
            with b.loop(OW, "o", role=SPATIAL) as o:
                b.store(Y, dst + v * OW + o, wa * plane[ia * OW + o] + wb * plane[ib * OW + o])


def _resize_linear_by_rows(ctx, X, Y, out, scales, ct) -> None:
    """Linear Resize whose last axis changes, one axis after the other: each output row is
    first the input rows its outer coordinates reach, weighted and summed into a row scratch
    (contiguous, vectorizable), then read at the last axis' two taps per output element, whose
    indices and weights are computed once per kernel into a table (the element-wise form
    recomputed them for every element and gathered four values for each)."""
    b = ctx.b
    r, L, OW = len(X.shape), X.shape[-1], out[-1]
    xst = row_major_strides(X.shape)
    taps, weights = _axis_taps(ctx, X, out, scales, ct)
    lerp = _lerp_rows(ctx, X, out, scales, ct, taps)
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
                term = X[dot([ix for ix, _ in combo], xst[:-1]) + j]
                term = term if w is None else cast(w, X.dtype) * term
                total = term if total is None else total + term
            b.store(row, j, total)
        _row(ctx, lerp, BufPtr(Y, dot(oo, row_major_strides(out)[:-1])), BufPtr(row), L, OW, taps, weights, X.dtype)


register("Resize", lower=_lower_resize, run_time_dims=True, shape_inputs=frozenset({3}))(_resize_infer)


