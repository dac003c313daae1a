"""Tensor sequences and optional values, resolved at compile time into the tensors they hold.

A sequence value is a list of tensor names known to shape inference (Graph.sequences), never
a buffer: SequenceConstruct, SequenceEmpty, SequenceInsert, SequenceErase and SplitToSequence
make such lists (SplitToSequence through Split or Gather nodes), SequenceAt becomes an
Identity of one tensor, SequenceLength a constant, ConcatFromSequence a Concat (after
Unsqueeze nodes when it stacks on a new axis); an Identity of a sequence (a Loop's carried
value) names the same list. Positions and split sizes must be compile-time
constants, and a sequence cannot be a graph output (the artifact's outputs are tensors).

An optional value (Graph.optionals) is the name of the tensor it holds or None:
OptionalHasElement becomes a constant, OptionalGetElement an Identity (of an empty optional,
a ShapeError).
"""
from __future__ import annotations

import numpy as np

from ..errors import ShapeError, UnsupportedError
from ..ir.graph import Graph, Node
from ..ops.control import OPTIONAL_OPS, SEQUENCE_OPS

# (SequenceMap, which runs a body per element, is unrolled with Loop and Scan: passes/control.py)


def _label(n: Node) -> str:
    return f"{n.op_type} node {n.name!r}"


def _seq(g: Graph, n: Node, name: str) -> list[str]:
    if name not in g.sequences:
        raise ShapeError(f"{_label(n)}: input {name!r} is not a sequence")
    return g.sequences[name]


def _position(g: Graph, n: Node, k: int, length: int, default: int, insert: bool = False) -> int:
    """Input k of n as a position in a sequence of `length` (negative counts from the end);
    `insert` allows the position just past the end."""
    name = n.inputs[k] if len(n.inputs) > k else ""
    if not name:
        return default
    v = g.values[name]
    if v.const is None:
        raise ShapeError(f"{_label(n)}: the position must be known at compile time",
                         "bind the input that feeds it with --const")
    arr = np.asarray(v.const)
    if arr.size != 1 or arr.dtype.kind not in "iu":
        raise ShapeError(f"{_label(n)}: the position must be one integer, not {arr.tolist()!r}")
    p = int(arr.reshape(-1)[0])
    hi = length if insert else length - 1
    if not -length <= p <= hi:
        raise ShapeError(f"{_label(n)}: position {p} is outside [{-length}, {hi}] for a sequence of {length}")
    return p + length if p < 0 else p


def _dtype_of(g: Graph, items: list[str]):
    return {g.values[t].dtype for t in items if t in g.values}


def expand(g: Graph, n: Node) -> list[Node] | None:
    """The nodes sequence op `n` becomes (often none: it only updates Graph.sequences), or None
    when n is not a sequence op."""
    if n.op_type == "Identity" and n.inputs[0] in g.sequences:      # (a Loop's carried sequence)
        g.sequences[n.outputs[0]] = list(g.sequences[n.inputs[0]])
        return []
    if n.op_type == "Identity" and n.inputs[0] in g.optionals:
        g.optionals[n.outputs[0]] = g.optionals[n.inputs[0]]
        return []
    if n.op_type in OPTIONAL_OPS and n.domain in ("", "ai.onnx"):
        return _optional(g, n)
    if n.op_type not in SEQUENCE_OPS or n.domain not in ("", "ai.onnx"):
        return None
    t, out = n.op_type, (n.outputs[0] if n.outputs else "")
    if t == "SequenceConstruct":
        if len(_dtype_of(g, n.inputs)) > 1:
            raise ShapeError(f"{_label(n)}: the tensors have different element types")
        g.sequences[out] = list(n.inputs)
        return []
    if t == "SequenceEmpty":
        g.sequences[out] = []
        return []
    if t == "SequenceInsert":
        items = _seq(g, n, n.inputs[0])
        if items and _dtype_of(g, items) != _dtype_of(g, [n.inputs[1]]):
            raise ShapeError(f"{_label(n)}: the tensor's element type differs from the sequence's")
        p = _position(g, n, 2, len(items), len(items), insert=True)
        g.sequences[out] = items[:p] + [n.inputs[1]] + items[p:]
        return []
    if t == "SequenceErase":
        items = _seq(g, n, n.inputs[0])
        if not items:
            raise ShapeError(f"{_label(n)}: the sequence is empty")
        p = _position(g, n, 1, len(items), len(items) - 1)
        g.sequences[out] = items[:p] + items[p + 1:]
        return []
    if t == "SequenceAt":
        items = _seq(g, n, n.inputs[0])
        if not items:
            raise ShapeError(f"{_label(n)}: the sequence is empty")
        return [Node("Identity", [items[_position(g, n, 1, len(items), 0)]], [out], {}, n.name)]
    if t == "SequenceLength":
        items = _seq(g, n, n.inputs[0])
        return [Node("Identity", [g.add_const(np.array(len(items), np.int64), f"{n.name}/length")], [out], {}, n.name)]
    if t == "ConcatFromSequence":
        return _concat(g, n, _seq(g, n, n.inputs[0]), out)
    return _split(g, n, out)


def _concat(g: Graph, n: Node, items: list[str], out: str) -> list[Node]:
    if not items:
        raise ShapeError(f"{_label(n)}: the sequence is empty (no element type or shape to concatenate)")
    if n.attr("axis") is None:
        raise ShapeError(f"{_label(n)}: the axis attribute is required")
    axis, new = int(n.attr("axis")), int(n.attr("new_axis", 0))
    rank = len(g.values[items[0]].shape)
    if not (-rank - new <= axis < rank + new):
        raise ShapeError(f"{_label(n)}: axis {axis} is outside the range for rank {rank}"
                         + (" stacked on a new axis" if new else ""))
    if not new:
        return [Node("Concat", list(items), [out], {"axis": axis}, n.name)]
    return stack(g, n, items, axis, out)


def stack(g: Graph, n: Node, parts: list[str], axis: int, out: str) -> list[Node]:
    """Nodes stacking tensors `parts` into `out` on a new axis `axis` (of the stacked rank;
    negative counts from its end): an Unsqueeze of each there, then a Concat."""
    ax = g.add_const(np.array([axis], np.int64), f"{n.name}/axis")
    nodes, ups = [], []
    for k, p in enumerate(parts):
        u = g.fresh_name(f"{n.name}/{out}_{k}")
        nodes.append(Node("Unsqueeze", [p, ax], [u], {}, f"{n.name}/unsqueeze_{out}_{k}"))
        ups.append(u)
    nodes.append(Node("Concat", ups, [out], {"axis": axis}, f"{n.name}/concat_{out}"))
    return nodes


def _split(g: Graph, n: Node, out: str) -> list[Node]:
    x = g.values[n.inputs[0]]
    rank = len(x.shape)
    axis = int(n.attr("axis", 0))
    if not -rank <= axis < rank:
        raise ShapeError(f"{_label(n)}: axis {axis} is outside [{-rank}, {rank - 1}]")
    axis %= rank
    length = int(x.shape[axis])
    split_name = n.inputs[1] if len(n.inputs) > 1 else ""
    if not split_name:
        # pieces of 1; without keepdims each loses the axis (a Gather at each index)
        if int(n.attr("keepdims", 1)):
            sizes = [1] * length
        else:
            items = []
            nodes = []
            for k in range(length):
                item = g.fresh_name(f"{n.name}/item{k}")
                at = g.add_const(np.array(k, np.int64), f"{n.name}/at")
                nodes.append(Node("Gather", [n.inputs[0], at], [item], {"axis": axis}, f"{n.name}/gather{k}"))
                items.append(item)
            g.sequences[out] = items
            return nodes
    else:
        sv = g.values[split_name]
        if sv.const is None:
            raise ShapeError(f"{_label(n)}: split must be known at compile time",
                             "bind the input that feeds it with --const")
        arr = np.asarray(sv.const).astype(np.int64)
        if arr.ndim == 0:
            step = int(arr)
            if step <= 0:
                raise ShapeError(f"{_label(n)}: a split of {step} (it must be positive)")
            sizes = [step] * (length // step) + ([length % step] if length % step else [])
        else:
            sizes = [int(s) for s in arr.reshape(-1)]
            if any(s < 0 for s in sizes) or sum(sizes) != length:
                raise ShapeError(f"{_label(n)}: split sizes {sizes} must be >= 0 and add up to {length}")
    if not sizes:
        g.sequences[out] = []
        return []
    items = [g.fresh_name(f"{n.name}/item{k}") for k in range(len(sizes))]
    g.sequences[out] = items
    sp = g.add_const(np.array(sizes, np.int64), f"{n.name}/split")
    return [Node("Split", [n.inputs[0], sp], items, {"axis": axis}, n.name)]


def _optional(g: Graph, n: Node) -> list[Node]:
    """Optional values: the name of the tensor one holds, or None when it is empty."""
    x = n.inputs[0] if n.inputs else ""
    out = n.outputs[0] if n.outputs else ""
    if n.op_type == "Optional":
        if x in g.sequences:
            raise UnsupportedError([f"Optional node {n.name!r} holding a sequence"])
        g.optionals[out] = x or None
        return []
    if n.op_type == "OptionalHasElement":
        has = bool(g.optionals.get(x)) if x in g.optionals else bool(x)
        return [Node("Identity", [g.add_const(np.array(has), f"{n.name}/has")], [out], {}, n.name)]
    # OptionalGetElement: of an optional, the tensor it holds; of a tensor, that tensor
    held = g.optionals.get(x, None) if x in g.optionals else x
    if not held:
        raise ShapeError(f"OptionalGetElement node {n.name!r}: the optional {x!r} is empty")
    return [Node("Identity", [held], [out], {}, n.name)]


def check_no_sequence_outputs(g: Graph) -> None:
    bad = [f"graph output {o!r}, a sequence of tensors" for o in g.outputs if o in g.sequences]
    bad += [f"graph output {o!r}, an optional value" for o in g.outputs if o in g.optionals]
    if bad:
        raise UnsupportedError(bad, "the artifact's outputs are tensors: end the graph in a ConcatFromSequence, "
                               "SequenceAt or OptionalGetElement")

