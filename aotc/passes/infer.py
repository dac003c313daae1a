"""Type/shape inference over the graph, folding every node whose inputs are all constant.

Static shapes make Shape-driven subgraphs (Shape -> Gather -> Concat -> Reshape) constant,
so this sweep also folds them away.
"""
from __future__ import annotations

from collections import deque

import numpy as np

from ..errors import AotcError, ShapeError, UnsupportedError
from ..ir import dims
from ..ir.bounded import Bound
from ..ir.graph import Graph, Value
from ..ir.internal import IF_MERGE, SIZE_VALUES
from ..ops import registry
from ..ops.reference import evaluate
from . import bounded, control, sequences, symbolic
from .normalize import normalize_nodes

# Ops with a large output (OpDef.large_output) are folded only up to this many bytes of it.
# Never folded: ops the reference computes otherwise than ONNX Runtime (OpDef.reference_fold),
# and nodes that draw random numbers (registry.draws_random): RandomNormal has no inputs, so all
# of them are constant, but its output is a fresh draw per run, not a constant.
FOLD_LIMIT_BYTES = 1 << 20


def infer_shapes(g: Graph, fold: bool = True, int8_gemm: bool = False) -> Graph:
    """Every node's output types and shapes, folding what is constant (`fold`); control flow,
    sequences and the ops built from others expanded as their inputs are known (`int8_gemm`:
    the target's 8-bit GEMM outruns its float32 one, passes/decompose.py)."""
    kept = []
    bounds: dict[str, Bound] = {}       # values of run-time size so far (passes/bounded.py)
    work = deque(g.nodes)
    branches: dict[str, tuple] = {}     # prefix of a run-time If's branch's nodes -> (its merge, key)
    while work:
        n = work.popleft()
        try:
            _infer_node(g, n, work, kept, bounds, branches, fold, int8_gemm)
        except ShapeError as e:
            inside = [p for p in branches if n.name.startswith(p)]
            if not inside:
                raise
            prefix = max(inside, key=len)        # the innermost run-time branch holding n
            merge, key = branches[prefix]
            work = deque(m for m in work if not m.name.startswith(prefix))
            kept = [m for m in kept if not m.name.startswith(prefix)]
            special = control.specialize_branch(g, merge, key) if g.symbols else None
            if special is not None:         # the branch again, under an If on the run's size
                normalize_nodes(g, special)
                work.extendleft(reversed(special))
                continue
            del branches[prefix]
            control.unshapeable_branch(merge, key, str(e))
    bounded.check_outputs(g, bounds)
    made = {m.outputs[0] for m in kept if m.op_type == SIZE_VALUES}
    for o in g.outputs:                   # sizes of run-time dims as an output: written by the run
        v = g.values.get(o)              # (a sequence output is no value: refused below)
        if v is not None and v.sym is not None and o not in made:
            kept.append(symbolic.materialize(g, o))
            made.add(o)
    g.nodes = kept
    sequences.check_no_sequence_outputs(g)
    return g


def _infer_node(g: Graph, n, work: deque, kept: list, bounds: dict, branches: dict, fold: bool,
                int8_gemm: bool) -> None:
    """One node of infer_shapes' work list: expanded (control flow, the nodes it becomes go
    first in `work`), folded, or inferred and appended to `kept`."""
    expanded = control.expand(g, n, int8_gemm)
    if expanded is not None:          # control flow: the nodes it unrolls to come next, in its place
        normalize_nodes(g, expanded)
        work.extendleft(reversed(expanded))
        if n.op_type == "If" and expanded and expanded[-1].op_type == IF_MERGE:
            for key in ("then_branch", "else_branch"):
                branches[control.branch_prefix(n, key)] = (expanded[-1], key)
        return
    op = registry.get(n.op_type)
    if op is None or n.domain not in ("", "ai.onnx"):
        raise UnsupportedError([f"{n.op_type} (domain {n.domain or 'ai.onnx'}) in node {n.name!r}"],
                               "see docs/ONNX_SUPPORT.md for the operators aotc compiles", what="operator(s)")
    ins = [g.values[i] if i else None for i in n.inputs]
    ranged = [v for v in ins if v is not None and not dims.is_static(v.shape)]
    if fold and _symbolic_fold(g, n, op, ins, ranged):
        return
    for k, v in enumerate(ins):           # sizes of run-time dims that the op reads as data
        if v is not None and v.sym is not None and k not in op.shape_inputs and not any(
                m.op_type == SIZE_VALUES and m.outputs[0] == v.name for m in kept):
            kept.append(symbolic.materialize(g, v.name))
    if ranged and not op.takes_run_time_dims:
        v = ranged[0]
        raise dims.RunTimeDim(f"{n.op_type} node {n.name!r} does not take run-time dimensions yet: its input "
                              f"{v.name!r} is {dims.shape_text(v.shape)}",
                              "compile with this dimension fixed (--shape), or see docs/DESIGN.md "
                              "'Run-time dimensions' for the operators that take them")
    try:
        types = op.infer(n, ins)
    except dims.RunTimeDim as e:
        raise dims.RunTimeDim(f"{n.op_type} node {n.name!r}: {e.message}", e.hint) from e
    except AotcError:
        raise
    except Exception as e:
        raise ShapeError(f"cannot infer the output shape of {n.op_type} node {n.name!r}: {e}") from None
    for o, (dt, shape) in zip(n.outputs, types):
        if o:
            g.values[o] = Value(o, np.dtype(dt), tuple(d if dims.is_dim(d) else int(d) for d in shape))
    out_bounds = bounded.node_bounds(g, n, bounds)
    run_time = any(b is not None and b.axes and not b.shape for b in out_bounds)
    for o, b in zip(n.outputs, out_bounds):
        if o and b is not None and b.axes:
            bounds[o] = b
    all_const = all(v is None or v.const is not None for v in ins)
    results = op.fold(n, ins) if (fold and op.fold is not None and not run_time) else None
    if results is None and fold and all_const and not run_time and op.reference_fold \
            and not registry.draws_random(n, ins) and _worth_folding(op, types):
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
        return
    kept.append(n)


def _symbolic_fold(g: Graph, n, op, ins, ranged) -> bool:
    """Shape logic on run-time dimensions folded at compile time into symbolic values
    (passes/symbolic.py); False where the node is not such logic."""
    if n.op_type not in symbolic.FOLDABLE or not (ranged or any(v is not None and v.sym is not None for v in ins)):
        return False
    try:
        types = op.infer(n, ins)
    except dims.RunTimeDim:
        return False
    results = symbolic.fold(n, ins, types)
    if results is None or any(r is None for r in results):
        return False
    for o, r, (dt, _) in zip(n.outputs, results, types):
        if o:
            symbolic.store(g, o, dt, r)
    return True


def _worth_folding(op, types) -> bool:
    if op.large_output:
        out_bytes = sum(int(np.prod(s)) * np.dtype(d).itemsize for d, s in types)
        return out_bytes <= FOLD_LIMIT_BYTES
    return True
