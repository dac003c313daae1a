"""Shape helpers shared by the op modules."""
from __future__ import annotations

from typing import Sequence

import numpy as np

from ..errors import ShapeError
from ..ir.graph import Node, Value


def broadcast(*shapes: Sequence[int], node: Node | None = None) -> tuple[int, ...]:
    try:
        return tuple(int(d) for d in np.broadcast_shapes(*[tuple(s) for s in shapes]))
    except ValueError:
        where = f" in {node.op_type} node {node.name!r}" if node else ""
        raise ShapeError(f"shapes {[tuple(s) for s in shapes]} do not broadcast{where}") from None


def norm_axis(axis: int, rank: int, node: Node | None = None) -> int:
    a = axis + rank if axis < 0 else axis
    if not 0 <= a < max(rank, 1):
        where = f" of {node.op_type} node {node.name!r}" if node else ""
        raise ShapeError(f"axis {axis} out of range for rank {rank}{where}")
    return a


def same_as_input(node: Node, ins: list[Value | None]):
    return [(ins[0].dtype, ins[0].shape)]


def prod(xs) -> int:
    n = 1
    for x in xs:
        n *= int(x)
    return n


def ints(arr) -> list[int]:
    return [int(v) for v in np.asarray(arr).reshape(-1)]


def const_ints(node: Node, ins: list[Value | None], pos: int, what: str) -> list[int] | None:
    """Input `pos` as a list of ints; it must be a compile-time constant (None if absent)."""
    if len(ins) <= pos or ins[pos] is None:
        return None
    if ins[pos].const is None:
        raise ShapeError(f"{node.op_type} node {node.name!r}: {what} must be known at compile time",
                         "bind the input that feeds it with --const, or fix input shapes with --shape")
    return ints(ins[pos].const)


def shape_error(node: Node, msg: str) -> ShapeError:
    """A ShapeError naming the node."""
    return ShapeError(f"{node.op_type} node {node.name!r}: {msg}")
