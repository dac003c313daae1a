"""What an op's `lower` function gets: its node, its buffers, and a builder to emit into.
Nothing here names a target: the op says what to compute; the schedule decides how."""
from __future__ import annotations

from typing import Callable, Optional

import numpy as np

from ..ir.graph import Graph, Node, Value
from .ir import Buffer, Builder


class LowerCtx:
    def __init__(self, node: Node, graph: Graph, ins: list[Optional[Buffer]], outs: list[Buffer], b: Builder,
                 param: Optional[Callable[[Value, str], Buffer]] = None):
        self.node = node
        self.graph = graph
        self.ins = ins
        self.outs = outs
        self.b = b
        self.scratch_buffers: list[Buffer] = []
        self._param = param          # the kernel's input parameter for a graph value, by name

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

    def table(self, array, hint: str) -> Buffer:
        """A constant array the kernel reads that the op builds at compile time (a lookup table
        made from its attributes): a new constant of the graph, stored with the weights like an
        initializer, and an input parameter of this kernel named after `hint`."""
        if self._param is None:
            raise RuntimeError("this lowering context cannot add kernel inputs")
        name = self.graph.add_const(np.ascontiguousarray(array), f"{self.node.name or self.node.op_type}_{hint}")
        return self._param(self.graph.values[name], hint)
