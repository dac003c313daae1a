"""Seeded random inputs for a model, by dtype and by use.

Floats are standard normal. Integer inputs that an op reads as indices or counts (its
registry entry's `index_inputs`: Gather's indices, token ids and positions, from the indexed
dimension's valid range; a Loop's trip count, in the graph or in a subgraph, from a few) are
drawn below the least bound their readers give; other integer inputs (masks, flags) from
{0, 1}; bools are fair coin flips.
"""
from __future__ import annotations

import numpy as np

from ..ir import dtypes
from ..ir.graph import Graph, subgraphs
from ..ops import registry


def _index_bounds(g: Graph) -> dict[str, int]:
    """The inputs of g that an op reads as indices or counts (OpDef.index_inputs), in g and in
    its nodes' subgraphs, each with the least bound those ops give."""
    bounds: dict[str, int] = {}
    nodes = list(g.nodes) + [m for n in g.nodes for sub in subgraphs(n) for graph in sub.walk() for m in graph.nodes]
    for n in nodes:
        op = registry.get(n.op_type) if n.domain in ("", "ai.onnx") else None
        if op is None or op.index_inputs is None:
            continue
        ins = [g.values.get(i) if i else None for i in n.inputs]
        for pos, bound in op.index_inputs(n, ins).items():
            name = n.inputs[pos] if pos < len(n.inputs) else ""
            if name and bound:
                bounds[name] = min(bounds.get(name, bound), int(bound))
    return bounds


def sample_inputs(g: Graph, seed: int = 0) -> dict[str, np.ndarray]:
    """`g` is the imported graph (before optimization), so the uses of each input are visible."""
    rng = np.random.default_rng(seed)
    out = {}
    bounds = _index_bounds(g)
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
        elif dt.kind in "iu":
            a = rng.integers(0, bounds.get(name, 2), size=shape).astype(dt)
        else:
            raise ValueError(f"cannot sample inputs of dtype {dt}")
        out[name] = np.asarray(a, order="C")
    return out
