"""The index space a fused elementwise chain runs over.

A chain's nodes all compute one element per position of the same dense, row-major index space,
but not always under the same shape: a Reshape between two of them ([S, 3072] -> [1, S, 3072])
relabels the positions without moving them. The loop space is the coarsest list of extents
that *refines* every shape involved: each dim of each shape covers a run of consecutive loop
dims. It exists when every shape's dim boundaries (its suffix products) nest: [6, 4] and
[3, 8] do not (the boundaries 4 and 8 cross), [S, 3072] and [1, S, 3072] do.

Operands are then strides over the loop dims, and a flat position of any of the shapes is a
loop multi-index, which is how fusion evaluates a chain inside a GEMM's epilogue at (i, j).
"""
from __future__ import annotations

from typing import Sequence

from ..ir.dims import Dim, lower, upper
from .ir import Expr, const, wrap


def _int(d):
    """A dim as it is: an int, or a run-time Dim (ir/dims.py), which this module multiplies,
    divides exactly and compares by value like an int."""
    return d if isinstance(d, Dim) else int(d)


def _suffix_products(shape) -> list:
    out, acc = [], 1
    for d in reversed(list(shape)):
        acc = acc * _int(d)
        out.append(acc)
    return out


def _size(shape):
    n = 1
    for d in shape:
        n = n * _int(d)
    return n


def _quotient(b, a):
    """b / a when a divides b for every run-time size, else None."""
    if isinstance(b, Dim):
        return b.divide(a)
    if isinstance(a, Dim):
        return None
    return b // a if b % a == 0 else None


def _order(x):
    """Sort key of the suffix products: by value, a run-time one by its bounds (a nesting
    chain divides, so its values grow along it for every size)."""
    return (upper(x), lower(x), str(x))


class IndexSpace:
    def __init__(self, shapes: Sequence[Sequence[int]]):
        shapes = [tuple(_int(d) for d in s) for s in shapes]
        sizes = {_size(s) for s in shapes}
        if len(sizes) != 1:
            raise ValueError(f"shapes {shapes} hold different numbers of elements")
        size = sizes.pop()
        self.size = size
        if size == 0:                 # nothing to compute: one empty loop
            self.extents, self.strides = [0], [1]
            return
        bounds = sorted({1, size} | {b for s in shapes for b in _suffix_products(s)}, key=_order)
        extents = []
        for a, b in zip(bounds, bounds[1:]):
            q = _quotient(b, a)
            if q is None:
                raise ValueError(f"shapes {shapes} do not nest")
            extents.append(q)
        # loop dims outermost first; stride of loop dim k = bounds[len - 2 - k]
        self.extents = extents[::-1]
        self.strides = bounds[:-1][::-1]

    @staticmethod
    def fits(shapes) -> bool:
        try:
            IndexSpace(shapes)
            return True
        except ValueError:
            return False

    def runs(self, shape) -> list[list[int]]:
        """For each dim of `shape`, the loop dims it covers (size-1 dims cover none)."""
        if self.size == 0:
            return [[] for _ in shape]
        st = _suffix_products(shape)[::-1]          # st[d] = product of shape[d:]
        rank = {s: k for k, s in enumerate(self.strides)}      # loop dim of each stride
        out = []
        for d in range(len(shape)):
            hi = st[d]
            lo = st[d + 1] if d + 1 < len(shape) else 1
            # the loop dims from the one of stride hi (exclusive; none when hi is the size) to lo
            if lo not in rank:                  # lo is the size: this dim and the ones before it are 1
                out.append([])
                continue
            first = rank[hi] + 1 if hi in rank else 0
            out.append([k for k in range(first, rank[lo] + 1) if self.extents[k] != 1])
        return out

    def operand_strides(self, shape, operand_shape) -> list[int]:
        """Element strides over the loop dims of an operand broadcast (numpy rules) to `shape`."""
        r = len(shape)
        full = (1,) * (r - len(operand_shape)) + tuple(operand_shape)
        ost, acc = [0] * r, 1
        for d in range(r - 1, -1, -1):
            ost[d] = 0 if full[d] == 1 else acc
            acc *= full[d]
        out = [0] * len(self.extents)
        for d, run in enumerate(self.runs(shape)):
            inner = 1
            for k in reversed(run):
                out[k] = ost[d] * inner
                inner *= self.extents[k]
        return out

    def offset(self, idx: Sequence, strides: Sequence[int]) -> Expr:
        """sum(idx[k] * strides[k]) over the loop dims."""
        off: Expr = const(0)
        for i, s in zip(idx, strides):
            if s:
                off = off + wrap(i) * s
        return off

    def dim_offset(self, run: list[int], value, strides: Sequence[int]) -> Expr:
        """The contribution of one dim of some shape at index `value` (an Expr), given operand
        strides over the loop dims: the dim's index split over its run of loop dims, merged
        where the operand walks them contiguously (so it is usually value * stride)."""
        value = wrap(value)
        terms: list[tuple[int, int, int]] = []      # (divisor, extent, stride) per loop dim, inner first
        div = 1
        for k in reversed(run):
            terms.append((div, self.extents[k], strides[k]))
            div *= self.extents[k]
        # merge inner-to-outer while the operand's strides continue contiguously
        merged: list[list[int]] = []
        for dv, ext, st in terms:
            if merged and (merged[-1][2] * merged[-1][1] == st or (st == 0 and merged[-1][2] == 0)):
                merged[-1][1] *= ext
                continue
            merged.append([dv, ext, st])
        off: Expr = const(0)
        for i, (dv, ext, st) in enumerate(merged):
            if st == 0:
                continue
            x = value / dv if dv != 1 else value
            if i != len(merged) - 1:          # not the outermost part: wrap around its extent
                x = x % ext
            off = off + x * st
        return off
