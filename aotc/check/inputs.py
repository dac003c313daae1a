"""Seeded random inputs for a model, by dtype and by use.

Floats are standard normal. Integer inputs that feed Gather/GatherElements/GatherND indices
(token ids, positions) are drawn from the indexed dimension's valid range; a Loop's trip count
(in the graph or in a subgraph) from [0, TRIP_COUNTS), so that a loop the host program runs
goes round a few times; other integer inputs (masks, flags) from {0, 1}; bools are fair coin
flips.
"""
from __future__ import annotations

import numpy as np


from ..ir import dtypes
from ..ir.graph import Graph, subgraphs

TRIP_COUNTS = 8


def _trip_counts(g: Graph) -> set[str]:
    """The names that Loop nodes of g (or of its nodes' subgraphs) read as their trip count."""
    names = {n.inputs[0] for n in g.nodes if n.op_type == "Loop" and n.inputs and n.inputs[0]}
    for n in g.nodes:
        for sub in subgraphs(n):
            names |= {m.inputs[0] for graph in sub.walk() for m in graph.nodes
                      if m.op_type == "Loop" and m.inputs and m.inputs[0]}
    return names


def _index_bound(g: Graph, name: str) -> int | None:
    bound = None
    for n in g.nodes:
        for pos, i in enumerate(n.inputs):
            if i != name:
                continue
            data = g.values.get(n.inputs[0]) if n.inputs else None
            if n.op_type == "Gather" and pos == 1 and data is not None:
                axis = int(n.attr("axis", 0))
                d = data.shape[axis] if data.shape else None
            elif n.op_type in ("GatherElements",) and pos == 1 and data is not None:
                d = data.shape[int(n.attr("axis", 0))]
            elif n.op_type == "GatherND" and pos == 1 and data is not None:
                d = min(data.shape) if data.shape else None
            else:
                continue
            if d is not None:
                bound = d if bound is None else min(bound, d)
    return bound


def sample_inputs(g: Graph, seed: int = 0) -> dict[str, np.ndarray]:
    """`g` is the imported graph (before optimization), so the uses of each input are visible."""
    rng = np.random.default_rng(seed)
    out = {}
    trips = _trip_counts(g)
    for name in g.inputs:
        v = g.values[name]
        dt, shape = v.dtype, v.shape
        if dt == dtypes.E8M0:                          # (powers of two: no negative values)
            a = np.exp2(rng.integers(-8, 8, size=shape)).astype(np.float32).astype(dt)
        elif dtypes.is_float(dt):                      # (bfloat16, float8...: numpy kind 'V')
            a = rng.standard_normal(shape).astype(dt)
        elif dtypes.is_small_int(dt):                  # int4, uint4, int2, uint2: their whole range
            lo, hi = dtypes.int_range(dt)
            a = rng.integers(lo, hi + 1, size=shape).astype(dt)
        elif dt.kind == "b":
            a = rng.random(shape) < 0.5
        elif dt.kind in "iu" and name in trips:
            a = rng.integers(0, TRIP_COUNTS, size=shape).astype(dt)
        elif dt.kind in "iu":
            hi = _index_bound(g, name)
            a = rng.integers(0, hi if hi else 2, size=shape).astype(dt)
        else:
            raise ValueError(f"cannot sample inputs of dtype {dt}")
        out[name] = np.asarray(a, order="C")
    return out
