"""Fusion: partition the graph's nodes into groups that each become one kernel.

A group is an optional *anchor* (any non-elementwise op: Conv, MatMul, Softmax, ...)
followed by a *chain* of elementwise ops that all produce the group's shape. The chain
runs inside the anchor's kernel as an epilogue (bias, activation, residual add), or on
its own as one loop nest when there is no anchor. View ops (Reshape & co.) form groups
of their own that generate no code.

Rule that keeps this correct: a node may join group G only if every input it takes from
outside G was computed before G runs, and runs under G's condition (passes/branches.py) in
G's host loop (passes/loops.py). Values made inside a group that something outside needs (or that are graph outputs) are
stored; the rest stay in registers.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from ..ir.graph import Graph, Node
from ..ops import registry


@dataclass
class Group:
    index: int
    anchor: Optional[Node]
    chain: list[Node] = field(default_factory=list)
    view: bool = False
    # when the kernel runs (passes/branches.py: alternatives of (bool value, polarity)
    # literals); None: always
    guard: Optional[frozenset] = None
    # the innermost loop the host program runs the kernel in (passes/loops.py); None: none
    loop: Optional[str] = None

    @property
    def nodes(self) -> list[Node]:
        return ([self.anchor] if self.anchor is not None else []) + self.chain

    @property
    def label(self) -> str:
        return "+".join(n.op_type for n in self.nodes)


def form_groups(g: Graph, fuse: bool = True, conds: Optional[dict] = None, loops: Optional[dict] = None
                ) -> list[Group]:
    """The groups of g's nodes, in order. `conds` (passes/branches.py node_conditions):
    id(node) -> the condition it runs under; `loops` (passes/loops.py order_loop_bodies):
    id(node) -> the host loop it is in. A node joins only a group of the same condition and loop."""
    conds, loops = conds or {}, loops or {}

    def guard(node: Node) -> Optional[frozenset]:
        c = conds.get(id(node))
        return None if c is None or c == frozenset({frozenset()}) else c

    def where(node: Node) -> tuple:
        return guard(node), loops.get(id(node))

    groups: list[Group] = []
    made_by: dict[str, Group] = {}          # value name -> group that computes it
    view_of: dict[str, str] = {}            # view output -> its source (through chains of views)

    def source(value: str) -> str:
        while value in view_of:
            value = view_of[value]
        return value

    def inside(value: str, grp: Group) -> bool:
        """Is the value made in grp, itself or as a view of something made there?"""
        return made_by.get(source(value)) is grp

    def ready_before(value: str, grp: Group) -> bool:
        src = made_by.get(value)
        return src is None or src is grp or src.index < grp.index or inside(value, grp)

    for node in g.nodes:
        op = registry.get(node.op_type)
        if op.view:
            grp = Group(len(groups), node, [], True, *where(node))
            view_of[node.outputs[0]] = node.inputs[0]
        elif op.pointwise is not None:
            grp = None
            if fuse:
                grp = _find_host(g, node, made_by, source, ready_before, where)
            if grp is not None:
                grp.chain.append(node)
                for o in node.outputs:
                    made_by[o] = grp
                continue
            grp = Group(len(groups), None, [node], False, *where(node))
        else:
            grp = Group(len(groups), node, [], False, *where(node))
        groups.append(grp)
        for o in node.outputs:
            if o:
                made_by[o] = grp
    return groups


def group_shapes(g: Graph, grp: Group) -> list[tuple]:
    """The shapes a group's elementwise positions are seen under (its nodes' outputs)."""
    return [tuple(g.values[n.outputs[0]].shape) for n in grp.nodes]


def _find_host(g: Graph, node: Node, made_by, source, ready_before, where) -> Optional[Group]:
    """The latest group that makes one of the node's inputs (directly, or through Reshape-family
    views) and can take the node as one more link of its chain: same number of elements, shapes
    that nest (kernel/space.py), every other input ready before that group runs, the same
    condition to run under and the same loop."""
    from ..kernel.space import IndexSpace
    shape = tuple(g.values[node.outputs[0]].shape)
    producers = {}
    for i in node.inputs:
        if i and source(i) in made_by:
            grp = made_by[source(i)]
            producers[grp.index] = grp
    for _, grp in sorted(producers.items(), reverse=True):
        if grp.view or (grp.guard, grp.loop) != where(node):
            continue
        if grp.anchor is not None:
            op = registry.get(grp.anchor.op_type)
            if not op.accepts_epilogue or len([o for o in grp.anchor.outputs if o]) != 1:
                continue
        if not IndexSpace.fits(group_shapes(g, grp) + [shape]):
            continue
        if all(not i or ready_before(i, grp) for i in node.inputs):
            return grp
    return None
