"""Sizes made of run-time dimensions, computed at compile time (issue 28).

Exporters write a model's shape logic as nodes: Shape of an input, Gather / Slice / Concat /
Unsqueeze of its entries, arithmetic on them, and the result as a Reshape target, an Expand
shape, a Range limit. With fixed sizes all of it folds into constants. With run-time
dimensions (ir/dims.py) it folds too, into *symbolic* values: `Value.sym`, an object array of
ints and Dims (`[batch, seq, 4, 8]`), with `const` None. `fold` computes a node of the shape
vocabulary below on such inputs (numpy's own indexing, concatenation and broadcasting on object
arrays, the Dims doing the arithmetic), and a result without Dims becomes an ordinary constant.

An op that reads a shape from an input (OpDef.shape_inputs: Reshape's target, Expand's shape,
Range's limit...) sees the symbolic entries through `ops/common.py const_ints`, and its output
shape holds the Dims. Any other reader takes the value as data: `materialize` gives it a
producer, an `aotc.SizeValues` node whose kernel writes each entry from the run's sizes (the
value keeps its symbolic entries for shape readers after it). What does not fold (a size
divided by one that does not divide it for every size in range, a comparison the ranges do not
decide) is left to the op, which computes it at run time or refuses it by name.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from ..ir import dtypes
from ..ir.dims import Dim, RunTimeDim, decide
from ..ir.graph import Graph, Node, Value
from ..ir.internal import SIZE_VALUES, SIZES_ATTR


def known(v: Optional[Value]):
    """A value's compile-time array: its symbolic entries, its constant, or None."""
    if v is None:
        return None
    return v.sym if v.sym is not None else v.const


def _ints(a) -> list:
    return [x if isinstance(x, Dim) else int(x) for x in np.asarray(a, dtype=object).reshape(-1)]


def _eq(a, b):
    return decide(a, "==", b)


def _cmp(op: str, a, b):
    return decide(a, op, b)


def _div(a, b):
    """ONNX's integer Div (toward zero) where it is exact for every size, else None."""
    if isinstance(b, Dim):
        q = a.divide(b) if isinstance(a, Dim) else None
        return q
    b = int(b)
    if isinstance(a, Dim):
        return a.divide(b)
    q = abs(int(a)) // abs(b)
    return q if (int(a) >= 0) == (b > 0) else -q


def _elementwise(fn, *arrays):
    """fn over broadcast object arrays; None when any element is undecided."""
    arrs = np.broadcast_arrays(*[np.asarray(a, dtype=object) for a in arrays])
    out = np.empty(arrs[0].shape, dtype=object)
    for idx in np.ndindex(out.shape):
        r = fn(*[a[idx] for a in arrs])
        if r is None:
            return None
        out[idx] = r
    return out


_COMPARE = {"Less": "<", "LessOrEqual": "<=", "Greater": ">", "GreaterOrEqual": ">="}
# the node kinds fold() computes
FOLDABLE = frozenset({"Shape", "Size", "Identity", "Squeeze", "Unsqueeze", "Reshape", "Flatten", "Concat", "Gather",
                      "Slice", "Cast", "Add", "Sub", "Mul", "Div", "Max", "Min", "Equal", "Where", "Expand",
                      *_COMPARE})


def fold(node: Node, ins: list, types: list) -> Optional[list]:
    """The node's outputs computed on compile-time inputs of which one at least is symbolic
    (object arrays), or None when the node is not of the shape vocabulary or an entry depends
    on the size. `types` are its inferred (dtype, shape) outputs."""
    op = node.op_type
    arrays = [known(v) for v in ins]
    if op == "Shape":
        from ..ops.constants import _shape_range
        s, e = _shape_range(node, len(ins[0].shape))
        return [np.array(list(ins[0].shape[s:e]), dtype=object)]
    if op == "Size":
        n = 1
        for d in ins[0].shape:
            n = n * d
        return [np.array(n, dtype=object)]
    if any(a is None for a, v in zip(arrays, ins) if v is not None):
        return None                        # a run-time input
    if not any(v is not None and v.sym is not None for v in ins):
        return None
    shape = tuple(types[0][1]) if types else ()
    try:
        if op in ("Identity", "Squeeze", "Unsqueeze", "Reshape", "Flatten"):
            return [np.asarray(arrays[0], dtype=object).reshape(shape)]
        if op == "Concat":
            return [np.concatenate([np.asarray(a, dtype=object) for a in arrays if a is not None],
                                   axis=int(node.attr("axis", 0)))]
        if op == "Gather":
            data = np.asarray(arrays[0], dtype=object)
            axis = int(node.attr("axis", 0)) % max(data.ndim, 1)
            idx = np.asarray(arrays[1]).astype(np.int64)
            idx = np.where(idx < 0, idx + data.shape[axis], idx)
            return [np.take(data, idx, axis=axis)]
        if op == "Slice":
            data = np.asarray(arrays[0], dtype=object)
            if any(a is not None and any(isinstance(x, Dim) for x in _ints(a)) for a in arrays[1:]):
                return None
            starts, ends = _ints(arrays[1]), _ints(arrays[2])
            axes = _ints(arrays[3]) if len(arrays) > 3 and arrays[3] is not None else list(range(len(starts)))
            steps = _ints(arrays[4]) if len(arrays) > 4 and arrays[4] is not None else [1] * len(starts)
            index = [slice(None)] * data.ndim
            for s, e, a, st in zip(starts, ends, axes, steps):
                index[a % data.ndim] = slice(s, e, st)
            return [data[tuple(index)]]
        if op == "Cast":
            if np.dtype(types[0][0]).kind not in "iu":
                return None
            return [np.asarray(arrays[0], dtype=object)]
        if op in ("Add", "Sub", "Mul"):
            f = {"Add": lambda a, b: a + b, "Sub": lambda a, b: a - b, "Mul": lambda a, b: a * b}[op]
            return [_elementwise(f, arrays[0], arrays[1])]
        if op == "Div":
            r = _elementwise(_div, arrays[0], arrays[1])
            return None if r is None else [r]
        if op in ("Max", "Min"):
            def pick(*xs):
                best = xs[0]
                for x in xs[1:]:
                    c = _cmp(">" if op == "Max" else "<", x, best)
                    if c is None:
                        return None
                    best = x if c else best
                return best
            r = _elementwise(pick, *arrays)
            return None if r is None else [r]
        if op == "Equal":
            r = _elementwise(_eq, arrays[0], arrays[1])
            return None if r is None else [r.astype(bool)]
        if op in _COMPARE:
            r = _elementwise(lambda a, b: _cmp(_COMPARE[op], a, b), arrays[0], arrays[1])
            return None if r is None else [r.astype(bool)]
        if op == "Where":
            if isinstance(ins[0].sym, np.ndarray):
                return None
            c, a, b = np.broadcast_arrays(np.asarray(arrays[0]).astype(bool), np.asarray(arrays[1], dtype=object),
                                          np.asarray(arrays[2], dtype=object))
            return [np.where(c, a, b)]
        if op == "Expand":
            if ins[0].sym is None:
                return None
            return [np.broadcast_to(np.asarray(arrays[0], dtype=object), shape).copy()]
    except RunTimeDim:
        return None
    return None


def store(g: Graph, name: str, dtype, result: np.ndarray) -> None:
    """A folded result as the value `name`: symbolic where it holds Dims, else a constant."""
    result = np.asarray(result, dtype=object)
    if any(isinstance(x, Dim) for x in result.reshape(-1)):
        g.values[name] = Value(name, np.dtype(dtype), tuple(result.shape), None, result)
        return
    arr = np.asarray(result.astype(np.dtype(dtype)) if result.size else np.zeros(result.shape, dtype), order="C")
    g.values[name] = Value(name, arr.dtype, tuple(arr.shape), arr)


def shape_value(g: Graph, shape, hint: str) -> str:
    """A new int64 value holding `shape` (a Reshape's target): a constant, or symbolic where the
    shape has run-time dims."""
    if all(isinstance(d, int) for d in shape):
        return g.add_const(np.array(shape, dtype=np.int64), hint)
    name = g.fresh_name(hint)
    g.values[name] = Value(name, dtypes.INT64, (len(shape),), None, np.array(list(shape), dtype=object))
    return name


def materialize(g: Graph, name: str) -> Node:
    """The node that writes a symbolic value at run time, for an op that reads it as data."""
    v = g.values[name]
    return Node(SIZE_VALUES, [], [name], {SIZES_ATTR: list(v.sym.reshape(-1)), "dtype": dtypes.name(v.dtype),
                                          "shape": list(v.shape)}, name=f"{name}/sizes")
