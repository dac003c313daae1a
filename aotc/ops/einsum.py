"""Einsum: the equation's product and sum as one loop nest.

Every label of the output is a loop over its size; every label that appears only in the
inputs is a reduction loop inside them, over which the product of the operands' elements is
accumulated (in the schedule's accumulator type). A label repeated within one operand reads
its diagonal; `...` stands for the same broadcast dims in every operand (right-aligned, a dim
of 1 broadcasting); without `->` the output is the ellipsis dims, then the labels that appear
once, in alphabetical order. The loop nest is the simple form of any equation: equations that
are matrix products run it too (no GEMM), at the speed of a plain loop nest."""
from __future__ import annotations

import re

from ..errors import ShapeError, UnsupportedError
from ..kernel.ir import REDUCTION, SPATIAL, Load, const
from .common import prod
from .registry import register

_ELL = "..."


def _parse(node, shapes) -> tuple[list[list[str]], list[str], dict[str, int]]:
    """(each operand's labels, the output's labels, every label's size); ellipsis dims become
    the labels '.0', '.1', ... (outermost first)."""
    eq = node.attr("equation", None)
    name = f"Einsum node {node.name!r}"
    if not isinstance(eq, str):
        raise ShapeError(f"{name}: the equation attribute is missing")
    text = eq.replace(" ", "")
    if not re.fullmatch(r"[A-Za-z.]*(,[A-Za-z.]*)*(->[A-Za-z.]*)?", text):
        raise UnsupportedError([f"{name} with equation {eq!r} (letters, ',', '...' and '->' only)"])
    lhs, arrow, rhs = text.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(shapes):
        raise ShapeError(f"{name}: equation {eq!r} has {len(terms)} operand(s), the node {len(shapes)}")

    def split(term: str) -> list[str]:
        if term.count(_ELL) > 1 or term.replace(_ELL, "").count("."):
            raise ShapeError(f"{name}: equation {eq!r}: a malformed ellipsis in {term!r}")
        return [_ELL if t == _ELL else t for t in re.findall(r"\.\.\.|[A-Za-z]", term)]

    ell_rank = 0
    for term, shape in zip(terms, shapes):
        letters = [t for t in split(term) if t != _ELL]
        if _ELL in split(term):
            if len(shape) < len(letters):
                raise ShapeError(f"{name}: operand {term!r} has rank {len(shape)}, fewer than its labels")
            ell_rank = max(ell_rank, len(shape) - len(letters))
        elif len(shape) != len(letters):
            raise ShapeError(f"{name}: operand {term!r} has {len(letters)} labels for rank {len(shape)}")
    ell = [f".{k}" for k in range(ell_rank)]
    sizes: dict[str, int] = {}
    operands = []
    for term, shape in zip(terms, shapes):
        labels: list[str] = []
        for t in split(term):
            if t == _ELL:
                n = len(shape) - (len(split(term)) - 1)
                labels += ell[ell_rank - n:]
            else:
                labels.append(t)
        for lab, n in zip(labels, shape):
            n = int(n)
            old = sizes.get(lab)
            if lab.startswith(".") and old is not None and 1 in (old, n):
                sizes[lab] = max(old, n)            # an ellipsis dim of 1 broadcasts
            elif old is not None and old != n:
                raise ShapeError(f"{name}: label {lab!r} is {old} in one place and {n} in another ({eq!r})")
            else:
                sizes[lab] = n
        operands.append(labels)
    if arrow:
        out = []
        for t in split(rhs):
            out += ell if t == _ELL else [t]
        for lab in out:
            if lab not in sizes:
                raise ShapeError(f"{name}: output label {lab!r} appears in no operand ({eq!r})")
        if len(set(out)) != len(out):
            raise ShapeError(f"{name}: an output label repeats ({eq!r})")
    else:
        counts: dict[str, int] = {}
        for labels in operands:
            for lab in labels:
                if not lab.startswith("."):
                    counts[lab] = counts.get(lab, 0) + 1
        out = ell + sorted(lab for lab, c in counts.items() if c == 1)
    return operands, out, sizes


def _infer(node, ins):
    if any(v is None for v in ins) or not ins:
        raise ShapeError(f"Einsum node {node.name!r}: every operand is required")
    dt = ins[0].dtype
    if dt.kind not in "fiu" or any(v.dtype != dt for v in ins):
        raise UnsupportedError([f"Einsum node {node.name!r} on element types {[str(v.dtype) for v in ins]}"])
    _, out, sizes = _parse(node, [v.shape for v in ins])
    return [(dt, tuple(sizes[lab] for lab in out))]


def _lower(node, ctx):
    ins, Y = ctx.ins, ctx.outs[0]
    operands, out, sizes = _parse(node, [X.shape for X in ins])
    summed = sorted({lab for labels in operands for lab in labels} - set(out))
    b = ctx.b
    b.comment(f"einsum {node.attr('equation')!r}: {len(out)} output loop(s), {len(summed)} summed label(s)")

    def product(var):
        p = None
        for X, labels in zip(ins, operands):
            off = const(0)
            stride = 1
            for lab, n in zip(reversed(labels), reversed(X.shape)):
                if n != 1:                      # (a dim of 1 broadcasts: index 0)
                    off = off + var[lab] * stride
                stride *= n
            v = Load(X, off)
            p = v if p is None else p * v
        return p

    with b.loops([sizes[lab] for lab in out], [f"o_{lab.strip('.')}" for lab in out], role=SPATIAL) as ov:
        var = dict(zip(out, ov))
        at = const(0)
        for lab, v in zip(out, ov):
            at = at * sizes[lab] + v
        if not summed:
            b.store(Y, at, product(var))
            return
        acc = b.accumulator("acc", const(0, Y.dtype))
        if prod(sizes[lab] for lab in summed):
            with b.loops([sizes[lab] for lab in summed], [f"s_{lab}" for lab in summed], role=REDUCTION) as sv:
                var.update(zip(summed, sv))
                b.assign(acc, acc + product(var))
        b.store(Y, at, acc)


register("Einsum", lower=_lower)(_infer)
