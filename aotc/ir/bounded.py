"""Values whose size along some axes is known only at run time ("bounded": a static capacity, a
run-time count), as the graph IR records them: the facts both the ops that make such values
(ops/data_dependent.py) and the analysis that follows them through the graph (passes/bounded.py,
whose docstring tells the whole story) need.

A source node writes its count into an extra int64[1] output, `<output>.count`, named in its
COUNT_ATTR attribute (ir/internal.py) so that passes renaming its outputs leave it found."""
from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import UnsupportedError
from . import dtypes
from .graph import Graph, Node, Value
from .internal import COUNT_ATTR


@dataclass
class Bound:
    """How a value depends on run-time counts: axis -> the count value holding its size, and
    whether its padding (the elements past the counts) is zero."""
    axes: dict[int, str] = field(default_factory=dict)
    zero: bool = False
    # a shape vector (Shape of a bounded tensor, folded to its capacity), not a tensor of run-time
    # size: `axes` are then positions in it whose value is that count. Expand alone may take one
    # (as its shape: exporters expand indices to their own shape), and records where (_expand).
    shape: bool = False


COUNT_SUFFIX = ".count"
class Refusal(UnsupportedError):
    pass


def refuse(node: Node, why: str) -> Refusal:
    return Refusal([f"{node.op_type} node {node.name!r} {why}"],
                   "aotc computes tensors whose size is known only at run time (the outputs of NonZero, "
                   "NonMaxSuppression, Unique, Compress) through elementwise ops, views, Transpose, Slice (of "
                   "other axes, or the first rows), Concat, reductions, Softmax, ArgMax and TopK along other axes, Gather, MatMul "
                   "and Gemm of their rows; see docs/DESIGN.md, \"Bounded dimensions\"",
                   what="use(s) of a dimension known only at run time")


def count_output(g: Graph, node: Node, out: int = 0) -> str:
    """The count value a source node writes: an extra output, added on first use and named in
    the node's `_count` attribute (so that passes renaming its outputs leave it found)."""
    name = node.attrs.get(COUNT_ATTR)
    if name and name in node.outputs:
        if name not in g.values:
            g.add_value(Value(name, dtypes.INT64, (1,)))
        return name
    name = fresh_count_name(g, node.outputs[out])
    node.outputs.append(name)
    node.attrs[COUNT_ATTR] = name
    g.add_value(Value(name, dtypes.INT64, (1,)))
    return name


def fresh_count_name(g: Graph, base: str, also_taken=()) -> str:
    """`<base>.count`, or a fresh variant where a value or node output (or `also_taken`) has it."""
    taken = set(g.values) | {o for m in g.nodes for o in m.outputs} | set(also_taken)
    name = base + COUNT_SUFFIX
    while name in taken:
        name = g.fresh_name(base) + COUNT_SUFFIX
    return name


def onnx_outputs(node: Node) -> list[str]:
    """The node's outputs less the count a source node was given (count_output)."""
    return [o for o in node.outputs if not o or o != node.attrs.get(COUNT_ATTR)]


def count_position(node: Node) -> int:
    """Where the count is among the node's outputs (and its kernel's output buffers)."""
    return node.outputs.index(node.attrs[COUNT_ATTR])
