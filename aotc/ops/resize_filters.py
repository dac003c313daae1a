"""Resize's antialiasing filter (attribute antialias=1, opset 18 on).

When a linear or cubic Resize shrinks an axis (scale < 1), each output is a weighted sum over a
window of inputs 1/scale times wider than the interpolation kernel's: the kernel (the triangle
1 - |d| of linear mode, Keys' cubic of cubic mode) is stretched by 1/scale and its weights are
renormalized to sum to 1, so that the output is a low-passed, not an aliased, sample. An axis
that grows or keeps its length is resized as without the attribute (ops/resize.py).

The numbers are ONNX Runtime's (its Pillow-derived antialias path), in float32 and in its order,
for output index o of an axis of input length L, output length O and scale s < 1:

    support = (W / 2) * (1 / s)            W: the kernel's width, 2 (linear) or 4 (cubic)
    K       = 2 * ceil(support) + 1        the most taps a window can have
    center  = x(o) + 0.5                   x(o): o's source coordinate (coordinate_transformation_mode)
    window  = [floor(center - support + 0.5), floor(center + support + 0.5)), at most K long
    w(j)    = filter((j - center + 0.5) * s) for each input index j of the window, divided by
              the window's total (left as they are where the total is 0)

A tap outside the input reads the element at the input's nearest edge (ONNX Runtime adds such
taps' weights onto the edge element's: the same sum, rounded in another order); with
exclude_outside the window is first cut to the input, so the weights are renormalized over the
taps inside it. The ONNX reference implementation computes the same weights, in float64 (over a
window a tap or two longer, whose extra taps weigh 0).

Where ONNX Runtime and the reference disagree, aotc follows ONNX Runtime:
  * an axis whose output length is its input length is copied, whatever its scale (ONNX Runtime
    skips it; the reference resamples it, e.g. 5 -> 5 at scale 1.1);
  * align_corners with scales divides by the integer output length less 1 (the reference by
    scale * input length less 1), and pytorch_half_pixel maps a one-element output to 0 (the
    reference to -0.5), as without antialias;
  * nearest mode ignores the attribute (the spec gives it to linear and cubic modes only; both
    ONNX Runtime and the reference refuse the node).
ONNX Runtime filters only some layouts (linear: 2-D and 3-D inputs, and 4-D and 5-D ones whose
two outer axes, or a 4-D one's first and last, keep a scale of 1; cubic: 2-D and such 4-D
ones); aotc filters any axes of any rank the same way.

The weights depend only on the axis and the output index, so a kernel computes each filtered
axis' table once (`antialias_filter`: a loop over the axis' outputs before the main loop nest),
and the main loop nest reads it (`AxisFilter.tap`): for each output element, a reduction loop
per filtered axis over that output's taps.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..kernel.ir import F32, I64, ORDERED, SPATIAL, Buffer, Expr, call, cast, const, maximum, minimum, select

# the interpolation kernel's width (in input elements, at scale 1) by Resize mode
KERNEL_WIDTH = {"linear": 2, "cubic": 4}


def _f(v) -> Expr:
    return const(float(np.float32(v)), F32)


def linear_filter(b, d: Expr) -> Expr:
    """The triangle kernel at distance d: 1 - |d| inside (-1, 1), 0 outside."""
    a = b.local("ad", call("abs", d))
    return select(a < _f(1.0), _f(1.0) - a, _f(0.0))


def cubic_filter(b, d: Expr, A: float) -> Expr:
    """Keys' cubic convolution kernel with coefficient A at distance d (0 from |d| = 2 on), in
    ONNX Runtime's form of the two polynomials."""
    a = b.local("ad", call("abs", d))
    near = ((_f(np.float32(A) + np.float32(2.0)) * a - _f(np.float32(A) + np.float32(3.0))) * a * a + _f(1.0))
    far = (((a - _f(5.0)) * a + _f(8.0)) * a - _f(4.0)) * _f(A)
    return select(a < _f(1.0), near, select(a < _f(2.0), far, _f(0.0)))


@dataclass(frozen=True)
class FilterShape:
    """The compile-time constants of one filtered axis, as ONNX Runtime computes them in float32."""
    support: np.float32       # half the stretched kernel's width, in input elements
    inv_stretch: np.float32   # what a distance in input elements is multiplied by (1 / (1 / s))
    taps: int                 # K: the most taps one output's window has

    @staticmethod
    def of(mode: str, scale) -> "FilterShape":
        stretch = np.float32(1.0) / np.float32(scale)                       # 1 / s > 1
        support = np.float32(np.float32(KERNEL_WIDTH[mode]) * np.float32(0.5)) * stretch
        return FilterShape(support, np.float32(1.0) / stretch, 2 * math.ceil(float(support)) + 1)


@dataclass
class AxisFilter:
    """One filtered axis' table: for each output index o, its window's first input index
    (`first`, outside the input where the window is), its number of taps (`count`) and their
    weights (`weight`, K per output, the first `count` used)."""
    axis: int
    length: int               # the input's length on the axis
    taps: int                 # K
    first: Buffer
    count: Buffer
    weight: Buffer
    inside: bool              # every tap inside the input (exclude_outside): no clamping

    def window(self, b, o: Expr) -> tuple[Expr, Expr]:
        """Output o's first tap and tap count, as locals (emitted where o is known)."""
        i = self.axis
        return b.local(f"first{i}", self.first[o]), b.local(f"n{i}", self.count[o])

    def tap(self, b, o: Expr, first: Expr, k: Expr) -> tuple[Expr, Expr]:
        """Tap k of output o: (its input index, clamped into the input, as a local; its weight)."""
        j = first + k if self.inside else maximum(const(0), minimum(const(self.length - 1), first + k))
        return b.local(f"j{self.axis}", j), self.weight[o * self.taps + k]


def antialias_filter(ctx, axis: int, mode: str, coord: Callable[[Expr], Expr], scale, in_len: int,
                     out_len: int, cubic_coeff_a: float, exclude_outside: bool) -> AxisFilter:
    """Emit the loop that fills the table of axis `axis` (input length in_len, output length
    out_len, scale < 1) and return it; coord(o) is output o's source coordinate (float32)."""
    b = ctx.b
    shape = FilterShape.of(mode, scale)
    K, L = shape.taps, in_len
    first = ctx.scratch((out_len,), I64, f"first_tap{axis}")
    count = ctx.scratch((out_len,), I64, f"taps{axis}")
    weight = ctx.scratch((out_len, K), F32, f"weights{axis}")
    b.comment(f"axis {axis}: antialiased {mode} filter, {1 / float(scale):.4g}x wide: at most {K} taps per output")
    with b.loop(out_len, "o", role=SPATIAL) as o:
        center = b.local("center", _f(0.5) + coord(o))
        lo = b.local("lo", cast(call("floor", center - _f(shape.support) + _f(0.5)), I64))
        hi = b.local("hi", cast(call("floor", center + _f(shape.support) + _f(0.5)), I64))
        n = b.local("n", maximum(const(0), minimum(const(K), hi - lo)))
        if exclude_outside:          # the window cut to the input
            hi = b.local("hi_in", maximum(const(0), minimum(const(L), lo + n)))
            lo = b.local("lo_in", maximum(const(0), minimum(const(L), lo)))
            n = b.local("n_in", hi - lo)
        b.store(first, o, lo)
        b.store(count, o, n)
        total = b.local("total", _f(0.0))
        with b.loop(K, "k", role=ORDERED) as k:
            d = (cast(lo + k, F32) - center + _f(0.5)) * _f(shape.inv_stretch)
            f = cubic_filter(b, d, cubic_coeff_a) if mode == "cubic" else linear_filter(b, d)
            w = b.local("w", select(k < n, f, _f(0.0)))
            b.store(weight, o * K + k, w)
            b.assign(total, total + w)
        norm = b.local("norm", select(total.eq(_f(0.0)), _f(1.0), _f(1.0) / total))
        with b.loop(K, "k", role=SPATIAL) as k:
            b.store(weight, o * K + k, weight[o * K + k] * norm)
    return AxisFilter(axis, L, K, first, count, weight, exclude_outside)


def filtered_axes(mode: str, antialias: bool, scales, in_shape, out_shape) -> list[int]:
    """The axes antialias=1 filters: those a linear or cubic Resize shrinks."""
    if not antialias or mode not in KERNEL_WIDTH:
        return []
    return [i for i, (s, L, O) in enumerate(zip(scales, in_shape, out_shape)) if float(s) < 1.0 and O != L]
