"""What an op's `lower` function gets: its node, its buffers, and a builder to emit into.
Nothing here names a target: the op says what to compute; the schedule decides how.

DRAW names the one value of a run that no node makes and no caller passes: the run's draw
number (uint64 [1]), which random ops mix into their streams (ops/random.py). The host program
writes it at the start of every run, before any kernel: 0 in a stateless run (`<name>_run`),
the instance's count of earlier invokes in `<name>_invoke`, so that each invoke draws afresh
and two instances draw the same sequence. The memory plan gives it a place in the workspace
for the whole run (memory/planner.py), the program its offset (program/ir.py `Program.draw`).
It exists only in graphs with random ops: `LowerCtx.draw()` adds it."""
from __future__ import annotations

from typing import Callable, Optional

import numpy as np

from ..ir.graph import Graph, Node, Value
from ..ir.dims import is_dim
from .ir import U64, Buffer, Builder, Expr, Load, const

DRAW = "aotc.draw"


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
        """Input i's value at compile time: a constant, or sizes of run-time dims (an object
        array of ints and Dims, passes/symbolic.py); None when it is known only at run time."""
        name = self.node.inputs[i] if i < len(self.node.inputs) else ""
        v = self.graph.values.get(name) if name else None
        if v is not None and v.const is None and v.sym is not None:
            return v.sym
        return self.graph.const(name)

    def has_input(self, i: int) -> bool:
        return i < len(self.node.inputs) and bool(self.node.inputs[i])

    def scratch(self, shape, dtype, hint: str = "tmp") -> Buffer:
        """Temporary memory for this kernel only; the memory planner gives it arena space."""
        # (a run-time dim stays a Dim: the buffer is dense at the run's size, planned at the largest)
        buf = Buffer(self.b.fresh(hint), np.dtype(dtype), tuple(d if is_dim(d) else int(d) for d in shape), "scratch")
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

    def draw(self) -> Expr:
        """This run's draw number (see DRAW above), read from the kernel's `draw` parameter."""
        if self._param is None:
            raise RuntimeError("this lowering context cannot add kernel inputs")
        if DRAW not in self.graph.values:
            self.graph.add_value(Value(DRAW, U64, (1,)))
        return Load(self._param(self.graph.values[DRAW], "draw"), const(0))
