"""What an op's `lower` function gets: its node, its buffers, and a builder to emit into.
Nothing here names a target: the op says what to compute; the schedule decides how."""
from __future__ import annotations

from typing import Optional

import numpy as np

from ..ir.graph import Graph, Node, Value
from .ir import Buffer, Builder


class LowerCtx:
    def __init__(self, node: Node, graph: Graph, ins: list[Optional[Buffer]], outs: list[Buffer], b: Builder):
        self.node = node
        self.graph = graph
        self.ins = ins
        self.outs = outs
        self.b = b
        self.scratch_buffers: list[Buffer] = []

    def value(self, i: int) -> Optional[Value]:
        name = self.node.inputs[i] if i < len(self.node.inputs) else ""
        return self.graph.values[name] if name else None

    def out_value(self, i: int = 0) -> Value:
        return self.graph.values[self.node.outputs[i]]

    def const(self, i: int) -> Optional[np.ndarray]:
        name = self.node.inputs[i] if i < len(self.node.inputs) else ""
        return self.graph.const(name)

    def has_input(self, i: int) -> bool:
        return i < len(self.node.inputs) and bool(self.node.inputs[i])

    def scratch(self, shape, dtype, hint: str = "tmp") -> Buffer:
        """Temporary memory for this kernel only; the memory planner gives it arena space."""
        buf = Buffer(self.b.fresh(hint), np.dtype(dtype), tuple(int(d) for d in shape), "scratch")
        self.scratch_buffers.append(buf)
        return buf
