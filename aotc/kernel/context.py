"""What an op's `lower` function gets: its node, its buffers, and a builder to emit into."""
from __future__ import annotations

from typing import Callable, Optional

import numpy as np

from ..ir.graph import Graph, Node, Value
from .ir import Buffer, Builder


class LowerCtx:
    def __init__(self, node: Node, graph: Graph, ins: list[Optional[Buffer]], outs: list[Buffer],
                 b: Builder, target: dict, param: Optional[Callable[[Value], Buffer]] = None,
                 derived: Optional[dict] = None):
        self.node = node
        self.graph = graph
        self.ins = ins
        self.outs = outs
        self.b = b
        self.target = target
        self.scratch_buffers: list[Buffer] = []
        self._param = param                    # graph value -> this kernel's input buffer for it
        self._derived = {} if derived is None else derived   # (input value, tag) -> derived constant

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

    def derived_const(self, i: int, tag: str, make: Callable[[np.ndarray], np.ndarray]) -> Optional[Buffer]:
        """A compile-time transform of constant input i (a weight packed into GEMM panels, say):
        `make(array)` becomes a new constant, read by this kernel instead of the input, so the
        weights blob holds the original only if some other kernel still reads it. Every kernel
        asking for the same (input, tag) shares one copy. None when input i is not a constant."""
        arr = self.const(i)
        if arr is None or self._param is None:
            return None
        src = self.node.inputs[i]
        name = self._derived.get((src, tag))
        if name is None:
            name = self.graph.add_const(np.ascontiguousarray(make(arr)), f"{src}_{tag}")
            self._derived[(src, tag)] = name
        return self._param(self.graph.values[name])
