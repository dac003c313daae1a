"""Type/shape inference over the graph, folding every node whose inputs are all constant.

Static shapes make Shape-driven subgraphs (Shape -> Gather -> Concat -> Reshape) constant,
so this sweep also folds them away.
"""
from __future__ import annotations

from collections import deque

import numpy as np

from ..errors import AotcError, ShapeError, UnsupportedError
from ..ir.bounded import Bound
from ..ir.graph import Graph, Value
from ..ir.internal import CARRY
from ..ops import registry
from ..ops.reference import evaluate
from . import bounded, control, sequences
from .normalize import normalize_nodes

# Ops never folded even with constant inputs (they would only bloat the weights).
_NO_FOLD = {"ConstantOfShape", "Expand", "Tile", "Range"}
# Ops whose ONNX reference implementation differs from ONNX Runtime (whose reading aotc's
# kernels follow), so never folded by it: MaxUnpool with an output_shape larger than the
# inferred one (the reference pads the unpooled tensor; ONNX Runtime reads the indices as flat
# positions in output_shape, as MaxPool makes them); TfIdfVectorizer (the reference takes
# weights[i] for output i, ONNX Runtime and the spec for the i-th n-gram of the pool)
_REFERENCE_DIFFERS = {"MaxUnpool", "TfIdfVectorizer"}
# Nor the copies of a host loop's state (passes/control.py host_loop): constant going in, the
# state changes with every iteration.
_NOT_FOLDED = _REFERENCE_DIFFERS | {CARRY}
# Nor are nodes that draw random numbers (registry.draws_random): RandomNormal has no inputs,
# so all of them are constant, but its output is a fresh draw per run, not a constant.
FOLD_LIMIT_BYTES = 1 << 20


def infer_shapes(g: Graph, fold: bool = True) -> Graph:
    kept = []
    bounds: dict[str, Bound] = {}       # values of run-time size so far (passes/bounded.py)
    work = deque(g.nodes)
    while work:
        n = work.popleft()
        expanded = control.expand(g, n)
        if expanded is not None:          # control flow: the nodes it unrolls to come next, in its place
            normalize_nodes(g, expanded)
            work.extendleft(reversed(expanded))
            continue
        op = registry.get(n.op_type)
        if op is None or n.domain not in ("", "ai.onnx"):
            raise UnsupportedError([f"{n.op_type} (domain {n.domain or 'ai.onnx'}) in node {n.name!r}"],
                                   "see docs/ONNX_SUPPORT.md for the operators aotc compiles", what="operator(s)")
        ins = [g.values[i] if i else None for i in n.inputs]
        try:
            types = op.infer(n, ins)
        except AotcError:
            raise
        except Exception as e:
            raise ShapeError(f"cannot infer the output shape of {n.op_type} node {n.name!r}: {e}") from None
        for o, (dt, shape) in zip(n.outputs, types):
            if o:
                g.values[o] = Value(o, np.dtype(dt), tuple(int(d) for d in shape))
        out_bounds = bounded.node_bounds(g, n, bounds)
        run_time = any(b is not None and b.axes and not b.shape for b in out_bounds)
        for o, b in zip(n.outputs, out_bounds):
            if o and b is not None and b.axes:
                bounds[o] = b
        all_const = all(v is None or v.const is not None for v in ins)
        results = op.fold(n, ins) if (fold and op.fold is not None and not run_time) else None
        if results is None and fold and all_const and not run_time and n.op_type not in _NOT_FOLDED \
                and not registry.draws_random(n, ins) and _worth_folding(n, ins, types):
            arrays = [v.const if v is not None else None for v in ins]
            try:
                results = evaluate(n, arrays, types)
            except Exception as e:
                raise ShapeError(f"folding {n.op_type} node {n.name!r} on constant inputs failed: {e}") from None
        if results is not None:
            for o, r, (dt, shape) in zip(n.outputs, results, types):
                if not o:
                    continue
                r = np.asarray(r.astype(dt, copy=False), order="C")  # (ascontiguousarray makes 0-d 1-d)
                if tuple(r.shape) != tuple(shape):
                    raise ShapeError(f"{n.op_type} node {n.name!r}: inferred shape {tuple(shape)} but the "
                                     f"reference computes {tuple(r.shape)}")
                g.values[o] = Value(o, r.dtype, tuple(r.shape), r)
            continue
        kept.append(n)
    bounded.check_outputs(g, bounds)
    g.nodes = kept
    sequences.check_no_sequence_outputs(g)
    return g


def _worth_folding(n, ins, types) -> bool:
    if n.op_type in _NO_FOLD:
        out_bytes = sum(int(np.prod(s)) * np.dtype(d).itemsize for d, s in types)
        return out_bytes <= FOLD_LIMIT_BYTES
    return True
