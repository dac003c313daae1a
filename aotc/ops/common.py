"""Shape helpers shared by the op modules."""
from __future__ import annotations

from typing import Sequence

import numpy as np

from ..errors import ShapeError
from ..ir.dims import RunTimeDim, is_dim, is_static, shape_text
from ..ir.graph import Node, Value
from ..kernel.ir import cast, const, wrap


def broadcast(*shapes: Sequence[int], node: Node | None = None) -> tuple[int, ...]:
    where = f" in {node.op_type} node {node.name!r}" if node else ""
    if any(not is_static(s) for s in shapes):
        return _broadcast_dims(shapes, where)
    try:
        return tuple(int(d) for d in np.broadcast_shapes(*[tuple(s) for s in shapes]))
    except ValueError:
        raise ShapeError(f"shapes {[tuple(s) for s in shapes]} do not broadcast{where}") from None


def _broadcast_dims(shapes, where: str) -> tuple:
    """numpy's broadcasting where some dims are run-time ones (ir/dims.py): a run-time dim
    broadcasts with 1 and with itself; with another size it would need a run-time rule."""
    rank = max(len(s) for s in shapes)
    out = []
    for k in range(rank):
        ds = {s[k - rank + len(s)] for s in shapes if k - rank + len(s) >= 0} - {1}
        if len(ds) > 1:
            shown = [shape_text(s) for s in shapes]
            if all(isinstance(d, int) for d in ds):
                raise ShapeError(f"shapes {shown} do not broadcast{where}")
            raise RunTimeDim(f"shapes {shown} broadcast only where {' == '.join(map(str, ds))}{where}",
                             "aotc does not check such equalities at run time yet: bind the dims to one --dim name")
        out.append(ds.pop() if ds else 1)
    return tuple(out)


def norm_axis(axis: int, rank: int, node: Node | None = None) -> int:
    a = axis + rank if axis < 0 else axis
    if not 0 <= a < max(rank, 1):
        where = f" of {node.op_type} node {node.name!r}" if node else ""
        raise ShapeError(f"axis {axis} out of range for rank {rank}{where}")
    return a


def same_as_input(node: Node, ins: list[Value | None]):
    return [(ins[0].dtype, ins[0].shape)]


def count(n, dtype):
    """A number of elements as a value of `dtype` to divide by (a mean's): a constant, or the
    run's size where it is a run-time dim (ir/dims.py)."""
    return cast(wrap(n), dtype) if is_dim(n) else const(float(n) if np.dtype(dtype).kind == "f" else n, dtype)


def prod(xs) -> int:
    """The product of sizes: an int, or a Dim where run-time dims take part (ir/dims.py)."""
    n = 1
    for x in xs:
        n = n * (x if is_dim(x) else int(x))
    return n


def ints(arr) -> list[int]:
    """The entries as ints; sizes of run-time dims (an object array, passes/symbolic.py) keep
    their Dims."""
    return [v if is_dim(v) else int(v) for v in np.asarray(arr).reshape(-1)]


def const_ints(node: Node, ins: list[Value | None], pos: int, what: str) -> list[int] | None:
    """Input `pos` as a list of ints; it must be a compile-time constant (None if absent)."""
    if len(ins) <= pos or ins[pos] is None:
        return None
    if ins[pos].sym is not None:        # sizes of run-time dims (passes/symbolic.py): ints and Dims
        return [x if is_dim(x) else int(x) for x in ins[pos].sym.reshape(-1)]
    if ins[pos].const is None:
        raise ShapeError(f"{node.op_type} node {node.name!r}: {what} must be known at compile time",
                         "bind the input that feeds it with --const, or fix input shapes with --shape")
    return ints(ins[pos].const)


def shape_error(node: Node, msg: str) -> ShapeError:
    """A ShapeError naming the node."""
    return ShapeError(f"{node.op_type} node {node.name!r}: {msg}")
