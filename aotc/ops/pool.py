"""Pooling: MaxPool (with its indices), AveragePool, LpPool and their global forms, over any
number of spatial dims (NC[D]HW), their windows by ops/window.py."""
from __future__ import annotations


import numpy as np

from ..errors import UnsupportedError
from ..ir import dtypes
from ..ir.dims import RunTimeDim, decide, is_dim
from ..kernel.ir import REDUCTION, SPATIAL, Expr, call, cast, const, maximum, minimum, select, wrap
from .common import count, prod, shape_error
from .registry import register
from .window import (UNROLL_TAPS, Nest, ceil_div, dot, pick_all, plus, row_major_strides, sliding_window, tap_bounds,
                     tap_range)


def _pool_window(node, x):
    if len(x.shape) < 3:
        raise shape_error(node, f"input {x.shape} must be N-C-spatial")
    ks = node.attr("kernel_shape", None)
    if ks is None:
        raise shape_error(node, "kernel_shape is required")
    return sliding_window(node, x.shape[2:], ks, ceil_mode=bool(int(node.attr("ceil_mode", 0))))


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
    xst, ost = row_major_strides(S), row_major_strides(O)
    is_max = node.op_type == "MaxPool"
    lp = int(node.attr("p", 2)) if node.op_type == "LpPool" else None
    include_pad = bool(int(node.attr("count_include_pad", 0)))
    if is_max and int(node.attr("storage_order", 0)):
        ist = row_major_strides(S[::-1])[::-1]       # column-major spatial index
    else:
        ist = xst
    b = ctx.b
    # the interior columns of the last dim: [left, right), every tap inside
    left, right = 0, 0
    if POOL_BY_ROWS and is_max and I is None and win.kernel[-1] <= UNROLL_TAPS:
        ranges = [tap_range(k, win.strides[-1], win.dilations[-1], win.pads_begin[-1], S[-1], O[-1])
                  for k in range(win.kernel[-1])]
        try:          # (run-time sizes: where the ranges decide the interior columns)
            if not all(isinstance(x, int) or is_dim(x) for r in ranges for x in r):
                raise RunTimeDim("tap ranges computed by the run")
            left, right = pick_all(max, [lo for lo, _ in ranges]), pick_all(min, [hi for _, hi in ranges])
            if decide(right - left, "<", 2) is not False:
                left, right = 0, 0
        except RunTimeDim:
            left, right = 0, 0

    def count(oo, bounds):
        """the number of taps a mean divides by"""
        if include_pad:
            counts = [minimum(const(win.kernel[i]),
                              ceil_div(S[i] + win.pads_begin[i] + win.pads_end[i] - o * win.strides[i],
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
        lo, hi = tap_bounds(oo[-1], S[-1], win, r - 1)
        bounds = outer_bounds + [(b.local(f"lo{r - 1}", lo), b.local(f"hi{r - 1}", hi))]
        out_at = (n * C + c) * OL + dot(oo, ost)
        if is_max:
            acc = b.local("acc", _lowest(X.dtype))
            arg = b.local("arg", const(0)) if I is not None else None
        else:
            acc = b.accumulator("acc", const(0, X.dtype))
        inner = Nest(b, REDUCTION)
        ks = [inner.loop(bounds[i][1], f"k{i}", start=bounds[i][0]) for i in range(r)]
        pos = [o * win.strides[i] - win.pads_begin[i] + k * win.dilations[i]
               for i, (o, k) in enumerate(zip(oo, ks))]
        v = b.local("v", X[base + dot(pos, xst)])
        if is_max:
            if arg is not None:
                better = b.local("better", v > acc)
                b.assign(arg, select(better, (n * C + c) * SL + dot(pos, ist), arg))
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
        row = (n * C + c) * OL + dot(oo, ost[:-1])
        s_l, d_l, pb_l = win.strides[-1], win.dilations[-1], win.pads_begin[-1]
        with b.loop(wrap(right), "p", role=SPATIAL, start=wrap(left)) as q:
            b.store(Y, row + q, _lowest(X.dtype))
        inner = Nest(b, REDUCTION)
        ks = [inner.loop(outer_bounds[i][1], f"k{i}", start=outer_bounds[i][0]) for i in range(r - 1)]
        src = (n * C + c) * SL + dot([o * win.strides[i] - win.pads_begin[i] + k * win.dilations[i]
                                        for i, (o, k) in enumerate(zip(oo, ks))], xst[:-1])
        with b.loop(wrap(right), "p", role=SPATIAL, start=wrap(left)) as q:
            acc = b.local("acc", Y[row + q])
            for k in range(win.kernel[-1]):
                v = b.local("v", X[plus(src, const(k * d_l - pb_l)) + q * s_l])
                b.assign(acc, select(v > acc, v, acc))
            b.store(Y, row + q, acc)
        inner.close()

    with b.loops([N, C], ["n", "c"], role=SPATIAL) as (n, c):
        outer_bounds, oo = [], []
        outer = Nest(b, SPATIAL)
        for i in range(r - 1):      # one loop per outer output dim, its tap range hoisted to its level
            o = outer.loop(O[i], f"o{i}")
            lo, hi = tap_bounds(o, S[i], win, i)
            outer_bounds.append((b.local(f"lo{i}", lo), b.local(f"hi{i}", hi)))
            oo.append(o)
        for start, end in ((0, left), (right, O[-1])) if right else ((0, O[-1]),):
            if end - start == 1:
                point(n, c, oo + [wrap(start)], outer_bounds)
            elif decide(end, ">", start) is not False:        # (a run-time range may be empty: no iteration)
                with b.loop(wrap(end), f"o{r - 1}", role=SPATIAL, start=wrap(start)) as o:
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
        raise shape_error(node, f"p = {node.attr('p')} must be at least 1")
    return (_avgpool_infer if node.op_type == "LpPool" else _global_infer)(node, ins)


register("MaxPool", lower=_lower_pool, run_time_dims=True)(_maxpool_infer)
register("AveragePool", lower=_lower_pool, run_time_dims=True)(_avgpool_infer)
register("LpPool", lower=_lower_pool)(_lp_infer)       # taps outside (the padding) add |0|^p = 0


def _global_infer(node, ins):
    x = ins[0]
    if len(x.shape) < 3:
        raise shape_error(node, f"input {x.shape} must be N-C-spatial")
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
            b.store(Y, nc, acc if is_max else acc / count(SL, X.dtype))


register("GlobalAveragePool", lower=_lower_global, run_time_dims=True)(_global_infer)
register("GlobalMaxPool", lower=_lower_global, run_time_dims=True)(_global_infer)
register("GlobalLpPool", lower=_lower_global)(_lp_infer)


