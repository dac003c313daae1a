"""Sliding windows, as Conv, the poolings and their quantized and deformable forms (and the
Winograd pass) read them: a node's window geometry by ONNX's rules (`sliding_window`, `Window`),
which taps of it fall inside the input, and the loop helpers those lowerings share. All take
any number of spatial dims (1-D, 2-D, 3-D) in NC[D]HW layout.

Window bounds: for output position o, the taps k with 0 <= o*s - pb + k*d < S are
k in [ceil((pb - o*s)/d), ceil((S + pb - o*s)/d)), clamped to [0, K). `ceil_div` does that
with non-negative operands only, so C's truncating division is never asked to round a
negative number.
"""
from __future__ import annotations

from dataclasses import dataclass


from ..ir.dims import RunTimeDim, decide, is_dim
from ..kernel.ir import SPATIAL, Const, Expr, If, binop, const, maximum, minimum, wrap
from .common import shape_error


def ceil_div(a: Expr, d: int) -> Expr:
    """ceil(max(a, 0) / d) for a positive int d."""
    a = maximum(a, const(0))
    return a if d == 1 else (a + (d - 1)) / d


def plus(e: Expr, k: Expr) -> Expr:
    """e + k, printed as e - |k| when k is a negative constant."""
    if isinstance(k, Const) and k.value < 0:
        return e - (-k.value)
    return e + k


def all_of(conds):
    out = None
    for c in conds:
        out = c if out is None else binop("&&", out, c)
    return out


def row_major_strides(shape) -> list[int]:
    st, acc = [], 1
    for d in reversed(shape):
        st.append(acc)
        acc *= d
    return st[::-1]


def dot(idx, strides) -> Expr:
    off: Expr = const(0)
    for i, s in zip(idx, strides):
        off = off + i * s
    return off


class IfElse:
    """`with IfElse(b, cond) as (then, orelse):` then `with then:` / `with orelse:`."""

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


class Nest:
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
class Window:
    kernel: list[int]
    strides: list[int]
    dilations: list[int]
    pads_begin: list[int]
    pads_end: list[int]
    out: list[int]


def sliding_window(node, spatial, kernel, ceil_mode: bool = False) -> Window:
    """Output size and padding of a sliding window (Conv, pooling), ONNX rules."""
    r = len(spatial)
    kernel = [int(k) for k in kernel]
    if len(kernel) != r:
        raise shape_error(node, f"kernel_shape {kernel} does not match {r} spatial dims")
    strides = [int(s) for s in node.attr("strides", [1] * r)]
    dil = [int(d) for d in node.attr("dilations", [1] * r)]
    if len(strides) != r or len(dil) != r:
        raise shape_error(node, f"strides {strides} / dilations {dil} do not match {r} spatial dims")
    if any(s < 1 for s in strides) or any(d < 1 for d in dil):
        raise shape_error(node, "strides and dilations must be positive")
    if any(k < 1 for k in kernel):
        raise shape_error(node, f"kernel_shape {kernel} must be positive")
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
        return Window(kernel, strides, dil, pb, pe, out)
    if auto_pad == "VALID":
        pb, pe = [0] * r, [0] * r
    elif auto_pad == "NOTSET":
        pads = [int(p) for p in node.attr("pads", [0] * (2 * r))]
        if len(pads) != 2 * r:
            raise shape_error(node, f"pads {pads} do not match {r} spatial dims")
        pb, pe = pads[:r], pads[r:]
    else:
        raise shape_error(node, f"unknown auto_pad {auto_pad!r}")
    out = []
    for s, k, st, b, e in zip(spatial, ext, strides, pb, pe):
        span = s + b + e - k
        if span < 0:
            raise shape_error(node, f"window {k} larger than the padded input {s + b + e}")
        if ceil_mode:
            o = -(-span // st) + 1
            if (o - 1) * st >= s + b:        # the last window must start inside the input
                o -= 1
        else:
            o = span // st + 1
        out.append(o)
    return Window(kernel, strides, dil, pb, pe, out)


def may_leave(w: Window, i: int, size: int) -> bool:
    """Can a tap of spatial dim i fall outside the input?"""
    last = (w.out[i] - 1) * w.strides[i] - w.pads_begin[i] + (w.kernel[i] - 1) * w.dilations[i]
    return w.pads_begin[i] > 0 or decide(last, ">=", size) is not False     # (run-time sizes: unless known not to)


def inside_input(pos, S, w: Window):
    """Condition that every (outer) position is inside the input, None when always true."""
    return all_of(binop("&&", q >= 0, q < S[i]) for i, q in enumerate(pos) if may_leave(w, i, S[i]))


def tap_bounds(o: Expr, size: int, w: Window, i: int):
    """Valid tap range [lo, hi) of spatial dim i at output position o (see module doc)."""
    s, d, pb, k = w.strides[i], w.dilations[i], w.pads_begin[i], w.kernel[i]
    lo = ceil_div(pb - o * s, d)
    hi = minimum(const(k), ceil_div(size + pb - o * s, d))
    return lo, hi


UNROLL_TAPS = 11      # kernels at most this wide get one copy of the row loop per tap


def tap_range(k, stride: int, dil: int, pad: int, size: int, n_out: int):
    """Output positions [lo, hi) whose input position o*stride - pad + k*dil is inside [0, size).
    Python ints when k is an int (the bounds are then constants), expressions otherwise."""
    if isinstance(k, int) and not (is_dim(size) or is_dim(n_out)):
        lo = min(n_out, -(-max(pad - k * dil, 0) // stride))
        hi = max(lo, min(n_out, -(-max(size + pad - k * dil, 0) // stride)))
        return lo, hi
    if isinstance(k, int):            # run-time sizes: the same, where the ranges decide each step
        try:
            lo = _pick(min, n_out, -(-max(pad - k * dil, 0) // stride))
            hi = _pick(max, lo, _pick(min, n_out, -(-_pick(max, size + pad - k * dil, 0) // stride)))
            return lo, hi
        except RunTimeDim:
            pass                       # (then as expressions, computed by the run)
    k = wrap(k)                       # (a run-time size or a tap loop's index: expressions)
    lo = minimum(wrap(n_out), ceil_div(const(pad) - k * dil, stride))
    hi = maximum(lo, minimum(wrap(n_out), ceil_div(wrap(size) + pad - k * dil, stride)))
    return lo, hi


def _pick(fn, a, b):
    """min or max of two sizes (ints or Dims) where the ranges decide it, else RunTimeDim."""
    c = decide(a, "<=", b)
    if c is None:
        raise RunTimeDim(f"{fn.__name__}({a}, {b}) depends on the run-time sizes")
    return (a if c else b) if fn is min else (b if c else a)


def pick_all(fn, xs):
    """min or max of sizes (ints or Dims) where the ranges decide it, else RunTimeDim."""
    best = xs[0]
    for x in xs[1:]:
        best = _pick(fn, best, x)
    return best


def each_tap(b, win: Window, size: int, n_out: int, body) -> None:
    """body(k, lo, hi) for every tap k of the last kernel dim, with its valid output range:
    unrolled with constant bounds for small kernels, a loop with computed bounds otherwise."""
    K, s, d, pb = win.kernel[-1], win.strides[-1], win.dilations[-1], win.pads_begin[-1]
    if K <= UNROLL_TAPS:
        for k in range(K):
            lo, hi = tap_range(k, s, d, pb, size, n_out)
            body(const(k), wrap(lo), wrap(hi))
        return
    with b.loop(K, f"k{len(win.kernel) - 1}") as k:
        lo, hi = tap_range(k, s, d, pb, size, n_out)
        lo = b.local("lo", lo)
        body(k, lo, b.local("hi", hi))


def span_loop(b, start: Expr, end: Expr, name: str = "p"):
    """A loop over output positions [start, end) of a row (each writes its own element), or
    None when constant bounds make it empty."""
    if isinstance(start, Const) and isinstance(end, Const) and start.value >= end.value:
        return None
    return b.loop(end, name, role=SPATIAL, start=start)


def conv_parts(node, xs, ws):
    if len(xs) < 3 or len(ws) != len(xs):
        raise shape_error(node, f"input {tuple(xs)} and weight {tuple(ws)} must be N-C-spatial of equal rank")
    group = int(node.attr("group", 1))
    C, M = xs[1], ws[0]
    if group < 1 or C % group or M % group or ws[1] * group != C:
        raise shape_error(node, f"{C} input channels, weight {tuple(ws)} and group={group} do not fit")
    ks = node.attr("kernel_shape", None)
    kernel = list(ws[2:]) if ks is None else [int(k) for k in ks]
    if list(kernel) != list(ws[2:]):
        raise shape_error(node, f"kernel_shape {kernel} differs from the weight's {tuple(ws[2:])}")
    if any(int(p) < 0 for p in node.attr("pads", [])):
        raise shape_error(node, f"pads {list(node.attr('pads'))} must be >= 0")
    return group, sliding_window(node, xs[2:], kernel)


