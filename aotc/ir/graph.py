"""The graph IR: a typed SSA graph where every value has a dtype and a shape of sizes (a size may be
a run-time dimension, ir/dims.py, where the user gave a range).

Values are named; each is produced by exactly one node, or is a graph input, or a
constant (an initializer or a folded result, held as a numpy array). Nodes keep ONNX's
op_type/attribute vocabulary so that op definitions read like the ONNX spec.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .dims import upper


@dataclass
class Value:
    name: str
    dtype: np.dtype
    shape: tuple[int, ...]
    const: np.ndarray | None = None
    # a value made of sizes that depend on run-time dimensions (ir/dims.py): known at compile
    # time as an object array of ints and Dims (a Shape of a ranged input, and arithmetic on
    # it), while `const` is None: passes/symbolic.py folds such values and gives them to the
    # ops that read shapes from them, or materializes them for ops that read them as data
    sym: np.ndarray | None = None

    @property
    def is_const(self) -> bool:
        return self.const is not None

    @property
    def size(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def nbytes(self) -> int:
        """Bytes at the capacity: a run-time dimension (ir/dims.py) counts at its upper bound."""
        n = 1
        for d in self.shape:
            n *= upper(d)
        return n * np.dtype(self.dtype).itemsize


@dataclass
class Node:
    op_type: str
    inputs: list[str]           # "" marks an omitted optional input
    outputs: list[str]
    attrs: dict[str, Any] = field(default_factory=dict)
    name: str = ""
    domain: str = ""

    def attr(self, key: str, default: Any = None) -> Any:
        return self.attrs.get(key, default)

    def __repr__(self) -> str:
        return f"{self.op_type}({', '.join(self.inputs)}) -> {', '.join(self.outputs)} [{self.name}]"


@dataclass
class Subgraph:
    """A graph a node holds in an attribute (an If's branches; a Loop's, Scan's or SequenceMap's
    body), as the frontend imported it (frontend/onnx_import.py import_subgraph): in its own
    names, which passes/control.py renames into the graph when shape inference reaches the node
    and inlines or unrolls it.

    `inputs` are its formal inputs, `outputs` the names of the values it gives (its own, or
    names of the scopes around it), `nodes` in its order (their attributes imported like the
    graph's: a subgraph of theirs is a Subgraph too, narrow types widened as frontend/narrow.py
    says), `initializers` its constants in the types aotc computes them in. `unreadable` lists
    the initializers it could not read, (kind, name, why), kind "sparse" or "dtype": refused,
    naming the node, only when the subgraph is inlined (a branch never taken may hold them)."""
    inputs: list[str]
    outputs: list[str]
    nodes: list[Node]
    initializers: dict[str, np.ndarray] = field(default_factory=dict)
    unreadable: list[tuple[str, str, str]] = field(default_factory=list)

    def free_names(self) -> set[str]:
        """The names it (and the subgraphs inside it) reads but does not define: what it takes
        from the scopes around it."""
        defined = set(self.initializers) | set(self.inputs) | {name for kind, name, _ in self.unreadable if kind == "dtype"}
        read: set[str] = set()
        for n in self.nodes:
            read.update(i for i in n.inputs if i)
            for sub in subgraphs(n):
                read |= sub.free_names()
            defined.update(o for o in n.outputs if o)
        read.update(self.outputs)
        return read - defined

    def walk(self):
        """This subgraph and every subgraph inside it, depth first."""
        yield self
        for n in self.nodes:
            for sub in subgraphs(n):
                yield from sub.walk()


def subgraphs(node: Node) -> list[Subgraph]:
    """The subgraphs a node holds in its attributes."""
    out = []
    for v in node.attrs.values():
        if isinstance(v, Subgraph):
            out.append(v)
        elif isinstance(v, list) and v and isinstance(v[0], Subgraph):
            out += v
    return out


def subgraph_reads(node: Node) -> set[str]:
    """The names of the scopes around it that the node's subgraphs read (its implicit inputs)."""
    names: set[str] = set()
    for sub in subgraphs(node):
        names |= sub.free_names()
    return names


class Graph:
    def __init__(self, name: str = "model", opset: int = 17):
        self.name = name
        self.opset = opset
        self.values: dict[str, Value] = {}
        self.nodes: list[Node] = []
        self.inputs: list[str] = []
        self.outputs: list[str] = []
        # opset imported by the model per domain ("ai.onnx" included), and the default-domain
        # opset before normalize_opset rewrote the nodes to its own
        self.domain_opsets: dict[str, int] = {}
        self.source_opset: int = opset
        # public (ONNX) names of outputs whose value had to be renamed (materialize_outputs)
        self.output_labels: dict[str, str] = {}
        # sequence values: the names of the tensors each holds, while shape inference resolves
        # the sequence ops (aotc/passes/sequences.py)
        self.sequences: dict[str, list[str]] = {}
        # optional values: the name of the tensor each holds, or None (empty)
        self.optionals: dict[str, str | None] = {}
        # values whose size along some axes is known only at run time: value -> {axis: the
        # int64[1] value holding that size} (aotc/passes/bounded.py)
        self.bounded: dict[str, dict[int, str]] = {}
        # run-time dimensions (ir/dims.py): every Symbol the inputs' shapes use, by name
        self.symbols: dict = {}
        self._counter = 0

    # -- construction -------------------------------------------------------------------
    def add_value(self, v: Value) -> Value:
        self.values[v.name] = v
        return v

    def add_const(self, array: np.ndarray, hint: str = "const") -> str:
        name = self.fresh_name(hint)
        arr = np.asarray(array, order="C")  # keeps 0-d arrays 0-d
        self.values[name] = Value(name, arr.dtype, tuple(arr.shape), arr)
        return name

    def fresh_name(self, hint: str) -> str:
        while True:
            self._counter += 1
            name = f"{hint}__{self._counter}"
            if name not in self.values:
                return name

    # -- queries ------------------------------------------------------------------------
    def value(self, name: str) -> Value:
        return self.values[name]

    def producers(self) -> dict[str, Node]:
        return {o: n for n in self.nodes for o in n.outputs if o}

    def consumers(self) -> dict[str, list[Node]]:
        out: dict[str, list[Node]] = {}
        for n in self.nodes:
            for i in n.inputs:
                if i:
                    out.setdefault(i, []).append(n)
        return out

    def const(self, name: str) -> np.ndarray | None:
        if not name:
            return None
        v = self.values.get(name)
        return None if v is None else v.const

    def counts(self) -> list[str]:
        """The int64[1] values holding run-time sizes of bounded values (self.bounded), sorted."""
        return sorted({c for axes in self.bounded.values() for c in axes.values()})

    def op_histogram(self) -> dict[str, int]:
        hist: dict[str, int] = {}
        for n in self.nodes:
            hist[n.op_type] = hist.get(n.op_type, 0) + 1
        return dict(sorted(hist.items(), key=lambda kv: (-kv[1], kv[0])))

    # -- editing ------------------------------------------------------------------------
    def forward(self, old: str, new: str) -> bool:
        """Make every reader of value `old` read `new` instead, so `old`'s producer can go.

        A graph output keeps its public name, so when `old` is an output the value `new`
        is renamed to `old` instead; that is only possible when `new` is an ordinary
        intermediate. Returns False (and changes nothing) when it cannot be done.
        """
        if old not in self.outputs:
            for n in self.nodes:
                n.inputs = [new if i == old else i for i in n.inputs]
            return True
        v = self.values.get(new)
        if v is None or v.is_const or new in self.inputs or new in self.outputs:
            return False
        for n in self.nodes:
            n.inputs = [old if i == new else i for i in n.inputs]
            n.outputs = [old if o == new else o for o in n.outputs]
        ov = self.values[old]
        self.values[old] = Value(old, ov.dtype, ov.shape, None)
        del self.values[new]
        return True

    def prune_values(self) -> None:
        """Forget values nothing refers to any more."""
        live = set(self.inputs) | set(self.outputs)
        for n in self.nodes:
            live.update(i for i in n.inputs if i)
            live.update(o for o in n.outputs if o)
        for name in list(self.values):
            if name not in live:
                del self.values[name]

    def copy(self) -> "Graph":
        g = Graph(self.name, self.opset)
        g.values = {k: Value(v.name, v.dtype, v.shape, v.const, v.sym) for k, v in self.values.items()}
        g.nodes = [Node(n.op_type, list(n.inputs), list(n.outputs), dict(n.attrs), n.name, n.domain)
                   for n in self.nodes]
        g.inputs = list(self.inputs)
        g.outputs = list(self.outputs)
        g.domain_opsets = dict(self.domain_opsets)
        g.source_opset = self.source_opset
        g.output_labels = dict(self.output_labels)
        g.bounded = {k: dict(v) for k, v in self.bounded.items()}
        g.symbols = dict(self.symbols)
        g._counter = self._counter
        return g
