"""Loops the host program runs (passes/control.py host_loop): where each one's body is, and an
order of the nodes that keeps every body in one piece.

A host loop is the nodes between its two Carry nodes: the one that copies the initial state
into the loop's storage (`end` False) and the one that copies the next iteration's state over
it (`end` True). Its body is what the graph passes left of the nodes that read the state and
that the end reads: a node of the body that reads only values from outside the loop was moved
out (computed once, before the loop) by nothing more than this definition. Loops nest.

`order_loop_bodies` reorders g.nodes so that each loop is [begin Carry, body, end Carry] and
every node comes after the values it reads and the If conditions it runs under (passes/branches.py), and
returns, for every node inside a loop, the innermost loop's name (a loop's begin Carry runs
once, before it: it is in the loop around it, if any). Fusion keeps loops apart; the host
program repeats each loop's kernels while the loop's flag holds; the memory plan keeps what a
body reads from outside live through its last iteration (memory/planner.py).
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Optional

from ..errors import UnsupportedError
from ..ir.graph import Graph
from ..ir.internal import is_carry
from ..ops import registry
from .branches import guard_values


@dataclass
class HostLoopRegion:
    name: str
    begin: int                                 # node indices in g.nodes (before order_loop_bodies)
    end: int
    members: set = field(default_factory=set)  # every node index of the loop, begin and end included
    parent: Optional[str] = None


def loop_regions(g: Graph) -> dict[str, HostLoopRegion]:
    """Every host loop of g, with the node indices of its body."""
    begins = {n.attrs["loop"]: k for k, n in enumerate(g.nodes) if is_carry(n, False)}
    ends = {n.attrs["loop"]: k for k, n in enumerate(g.nodes) if is_carry(n, True)}
    if set(begins) != set(ends):
        raise AssertionError(f"host loops without both ends: {sorted(set(begins) ^ set(ends))}")
    made = {o: k for k, n in enumerate(g.nodes) for o in n.outputs if o}
    readers: dict[int, list[int]] = {}
    for k, n in enumerate(g.nodes):
        for i in n.inputs:
            if i in made:
                readers.setdefault(made[i], []).append(k)
    regions = {}
    for name, b in begins.items():
        e = ends[name]
        after, stack = set(), [b]                  # what reads the state, directly or not
        while stack:
            k = stack.pop()
            for r in readers.get(k, []):
                if r not in after and r != e:
                    after.add(r)
                    stack.append(r)
        before, stack = set(), [e]                 # what the end reads, directly or not
        while stack:
            k = stack.pop()
            for i in g.nodes[k].inputs:
                j = made.get(i)
                if j is not None and j not in before and j != b:
                    before.add(j)
                    stack.append(j)
        if after - before:
            names = [g.nodes[k].name for k in sorted(after - before)][:3]
            raise AssertionError(f"host loop {name}: nodes read its state but do not lead to its end: {names}")
        members = (after & before) | {b, e}
        for k in members:
            if registry.draws_random(g.nodes[k], [g.values[i] if i else None for i in g.nodes[k].inputs]):
                raise UnsupportedError([f"{g.nodes[k].op_type} node {g.nodes[k].name!r}, which draws random "
                                        "numbers, in a Loop run a number of times known only at run time"])
        regions[name] = HostLoopRegion(name, b, e, members)
    for r in regions.values():
        outer = [o for o in regions.values() if o is not r and r.members < o.members]
        if outer:
            r.parent = min(outer, key=lambda o: len(o.members)).name
    return regions


def order_loop_bodies(g: Graph, conds: dict) -> dict[int, str]:
    """Reorder g.nodes: each host loop in one piece, begin first and end last; every node after
    what it reads and the conditions it runs under (`conds`: passes/branches.py). Returns
    id(node) -> its innermost loop's name, for the nodes inside loops."""
    regions = loop_regions(g)
    if not regions and not conds:
        return {}
    made = {o: k for k, n in enumerate(g.nodes) for o in n.outputs if o}
    deps = []
    for n in g.nodes:
        c = conds.get(id(n))
        deps.append({made[v] for v in list(n.inputs) + guard_values(c) if v and v in made})
    inner: dict[int, str] = {}                   # node index -> innermost loop
    for r in sorted(regions.values(), key=lambda r: -len(r.members)):
        for k in r.members:
            inner[k] = r.name
    children: dict[Optional[str], list[str]] = {}
    for r in regions.values():
        children.setdefault(r.parent, []).append(r.name)

    def unit_at(k: int, level: Optional[str]):
        """Node k as seen from inside `level`: itself, or the child loop of `level` holding it."""
        name = inner.get(k)
        if name is None or name == level:
            return ("node", k)
        while regions[name].parent != level:
            name = regions[name].parent
        return ("loop", name)

    def place(level: Optional[str]) -> list[int]:
        scope = regions[level].members if level else set(range(len(g.nodes)))
        units = {unit_at(k, level) for k in scope}
        if level:
            units -= {("node", regions[level].begin), ("node", regions[level].end)}
        nodes_of = {u: ([u[1]] if u[0] == "node" else sorted(regions[u[1]].members)) for u in units}
        need = {u: set() for u in units}
        for u, ks in nodes_of.items():
            for k in ks:
                for d in deps[k]:
                    if d in scope:
                        v = unit_at(d, level)
                        if v != u and v in units:
                            need[u].add(v)
        users: dict = {u: [] for u in units}
        for u, ds in need.items():
            for d in ds:
                users[d].append(u)
        waiting = {u: len(ds) for u, ds in need.items()}
        first = {u: min(ks) for u, ks in nodes_of.items()}
        ready = [(first[u], u) for u, w in waiting.items() if w == 0]
        heapq.heapify(ready)
        order: list[int] = []
        done = 0
        while ready:                       # Kahn's order, the earliest ready unit first
            _, u = heapq.heappop(ready)
            done += 1
            order += [u[1]] if u[0] == "node" else place(u[1])
            for v in users[u]:
                waiting[v] -= 1
                if waiting[v] == 0:
                    heapq.heappush(ready, (first[v], v))
        if done != len(units):
            raise AssertionError(f"no order of the nodes {'in host loop ' + level if level else ''} keeps every "
                                 "loop in one piece")
        if level:
            order = [regions[level].begin] + order + [regions[level].end]
        return order

    order = place(None)
    assert sorted(order) == list(range(len(g.nodes)))
    loops = {}
    for k, name in inner.items():
        if k == regions[name].begin:       # runs once, before its loop: in the loop around it, if any
            name = regions[name].parent
        if name is not None:
            loops[id(g.nodes[k])] = name
    g.nodes = [g.nodes[k] for k in order]
    return loops
