"""GridSample on 2-D inputs: X [N, C, H, W] read at the normalized (x, y) positions of a grid
[N, Ho, Wo, 2], by nearest, (bi)linear or (bi)cubic interpolation, with zeros, border or
reflection padding, corners aligned or not.

As the operator's definition has it: a position is denormalized to pixels ((g + 1) / 2 (d - 1)
with aligned corners, ((g + 1) d - 1) / 2 without), rounded half to even for nearest; outside
the borders ([0, d - 1] aligned, [-0.5, d - 0.5] not) it is clamped into [0, d - 1] (border)
or reflected back in (reflection), except for cubic interpolation, whose position stays where
it is (as in ONNX Runtime); each tap then reads its pixel: 0 outside the input (zeros), the
clamped (border) or reflected (reflection) index. The cubic kernel is Keys' with
A = -0.75. Positions are computed once per output pixel, for all its channels."""
from __future__ import annotations

from ..errors import ShapeError, UnsupportedError
from ..ir import dtypes
from ..kernel.ir import F32, I64, SPATIAL, Expr, Load, binop, call, cast, const, select
from .registry import register

_MODES = {"bilinear": "linear", "linear": "linear", "nearest": "nearest", "bicubic": "cubic", "cubic": "cubic"}
_PADDING = ("zeros", "border", "reflection")


def _spec(node, x, grid):
    name = f"GridSample node {node.name!r}"
    mode = _MODES.get(node.attr("mode", "linear"))          # (bilinear by default before opset 20)
    if mode is None:
        raise UnsupportedError([f"{name} with mode {node.attr('mode')!r}"])
    pad = node.attr("padding_mode", "zeros")
    if pad not in _PADDING:
        raise UnsupportedError([f"{name} with padding_mode {pad!r}"])
    if x.dtype != dtypes.FLOAT32 or grid.dtype != dtypes.FLOAT32:
        raise UnsupportedError([f"{name} on {x.dtype} / {grid.dtype} (float32 only)"])
    if len(x.shape) != 4:
        raise UnsupportedError([f"{name} on a {len(x.shape) - 2}-D input (2-D only)"])
    if len(grid.shape) != 4 or grid.shape[0] != x.shape[0] or grid.shape[3] != 2:
        raise ShapeError(f"{name}: grid {tuple(grid.shape)} must be [N, H_out, W_out, 2] with N = {x.shape[0]}")
    return mode, pad, bool(int(node.attr("align_corners", 0)))


def _infer(node, ins):
    x, grid = ins[0], ins[1]
    _spec(node, x, grid)
    return [(x.dtype, (x.shape[0], x.shape[1], grid.shape[1], grid.shape[2]))]


def _f(v) -> Expr:
    return const(float(v), F32)


def _reflect(b, v: Expr, lo: float, hi: float, hint: str) -> Expr:
    """v reflected at lo and hi until inside [lo, hi] (v inside: unchanged)."""
    rng = hi - lo
    if rng <= 0:
        return _f(lo)
    below = b.local(hint + "_below", v < _f(lo))
    dx = b.local(hint + "_dx", select(below, _f(lo) - v, v - _f(hi)))
    n = b.local(hint + "_n", call("floor", dx / _f(rng)))
    r = b.local(hint + "_r", dx - n * _f(rng))
    odd = binop("!=", n - _f(2.0) * call("floor", n * _f(0.5)), _f(0.0))
    back = select(below, select(odd, _f(hi) - r, _f(lo) + r), select(odd, _f(lo) + r, _f(hi) - r))
    return select(binop("||", v < _f(lo), v > _f(hi)), back, v)


def _clamp(e: Expr, lo, hi) -> Expr:
    return select(e < lo, lo, select(e > hi, hi, e))


def _lower(node, ctx):
    X, G, Y = ctx.ins[0], ctx.ins[1], ctx.outs[0]
    mode, pad, aligned = _spec(node, X, G)
    N, C, H, W = X.shape
    Ho, Wo = G.shape[1], G.shape[2]
    b = ctx.b
    b.comment(f"GridSample: {mode}, padding {pad}, corners {'aligned' if aligned else 'not aligned'}")
    lo = {"x": 0.0 if aligned else -0.5, "y": 0.0 if aligned else -0.5}
    hi = {"x": (W - 1.0) if aligned else W - 0.5, "y": (H - 1.0) if aligned else H - 0.5}
    size = {"x": W, "y": H}

    def coord(g: Expr, axis: str) -> Expr:
        d = size[axis]
        v = (g + _f(1)) / _f(2) * _f(d - 1) if aligned else ((g + _f(1)) * _f(d) - _f(1)) / _f(2)
        v = b.local(axis, v)
        if mode == "nearest":
            v = b.local(axis + "r", call("rint", v))
        if mode == "cubic":
            return v                    # (its taps are padded one by one, as ONNX Runtime does)
        if pad == "border":
            v = b.local(axis + "c", _clamp(v, _f(0), _f(d - 1)))
        elif pad == "reflection":
            v = b.local(axis + "c", _reflect(b, v, lo[axis], hi[axis], axis))
        return v

    def tap(i: Expr, axis: str, hint: str):
        """(index to read, inside?) of integer index i on an axis, by the padding mode"""
        d = size[axis]
        if pad == "reflection":
            i = cast(_reflect(b, cast(i, F32), lo[axis], hi[axis], hint + "t"), I64)
        i = b.local(hint + "i", i)
        inside = binop("&&", i >= 0, i < d) if pad == "zeros" else None
        return b.local(hint + "k", _clamp(i, const(0), const(d - 1))), inside

    def weights(t: Expr, axis: str) -> list:
        """the taps' weights at fraction t past the first (linear) or second (cubic) tap"""
        if mode == "linear":
            return [b.local(axis + "w0", _f(1) - t), b.local(axis + "w1", t)]
        a = _f(-0.75)

        def far(d):
            return ((a * d - _f(5) * a) * d + _f(8) * a) * d - _f(4) * a

        def near(d):
            return ((a + _f(2)) * d - (a + _f(3))) * d * d + _f(1)

        return [b.local(f"{axis}w{k}", w) for k, w in enumerate([far(t + _f(1)), near(t), near(_f(1) - t),
                                                                 far(_f(2) - t)])]

    with b.loops([N, Ho, Wo], ["n", "h", "w"], role=SPATIAL) as (n, h, w):
        at = ((n * Ho + h) * Wo + w) * 2
        x, y = coord(Load(G, at), "x"), coord(Load(G, at + 1), "y")
        taps = []          # (y index, x index, weight, inside or None)
        if mode == "nearest":
            (yi, yin), (xi, xin) = tap(cast(y, I64), "y", "y"), tap(cast(x, I64), "x", "x")
            taps.append((yi, xi, None, _and(yin, xin)))
        else:
            first = -1 if mode == "cubic" else 0
            x0, y0 = b.local("x0", call("floor", x)), b.local("y0", call("floor", y))
            wx, wy = weights(x - x0, "x"), weights(y - y0, "y")
            xs = [tap(cast(x0, I64) + (first + k), "x", f"x{k}") for k in range(len(wx))]
            ys = [tap(cast(y0, I64) + (first + k), "y", f"y{k}") for k in range(len(wy))]
            for (yi, yin), wyk in zip(ys, wy):
                for (xi, xin), wxk in zip(xs, wx):
                    taps.append((yi, xi, wyk * wxk, _and(yin, xin)))
        with b.loop(C, "c", role=SPATIAL) as c:
            base = (n * C + c) * (H * W)
            total = None
            for yi, xi, wt, inside in taps:
                v = Load(X, base + yi * W + xi)
                if inside is not None:
                    v = select(inside, v, _f(0))
                term = v if wt is None else wt * v
                total = term if total is None else total + term
            b.store(Y, ((n * C + c) * Ho + h) * Wo + w, total)


def _and(a, b_):
    if a is None:
        return b_
    if b_ is None:
        return a
    return binop("&&", a, b_)


register("GridSample", lower=_lower)(_infer)
