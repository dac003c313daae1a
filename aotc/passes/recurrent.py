"""Recurrent weights (LSTM/GRU/RNN W and R) stored as ONNX has them, [D, G*H, in], are
transposed once at compile time to [D, in, G*H]: the GEMM's B operand, with the gate columns
innermost, which lowering then packs into the GEMM's panels (kernel/gemm.py); no run spends
time transposing them."""
from __future__ import annotations

import numpy as np

from ..ir.graph import Graph
from ..ir.internal import PACKED_ATTR
from ..ops.rnn import RECURRENT_OPS


def prepack_recurrent_weights(g: Graph) -> Graph:
    for n in g.nodes:
        if n.op_type not in RECURRENT_OPS or n.attr(PACKED_ATTR):
            continue
        w, r = g.const(n.inputs[1]), g.const(n.inputs[2])
        if w is None or r is None or w.ndim != 3 or r.ndim != 3:
            continue
        n.inputs[1] = g.add_const(np.ascontiguousarray(w.transpose(0, 2, 1)), f"{n.name}_W_t")
        n.inputs[2] = g.add_const(np.ascontiguousarray(r.transpose(0, 2, 1)), f"{n.name}_R_t")
        n.attrs[PACKED_ATTR] = 1
    g.prune_values()
    return g
