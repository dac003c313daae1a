"""When each node must run: the branches of Ifs decided at run time.

passes/control.py inlines both branches of such an If and chooses each output with a Where
marked BRANCH_ATTR. After the graph passes, `run_conditions` walks the graph backwards from
its outputs and gives every node the condition under which its results are needed: always
for what the outputs need unconditionally; for a marked Where, its second input only when its
condition is true and its third only when it is false. A node's condition is the union of its
consumers'. The passes in between may merge, fold or rewrite nodes as they like: the analysis
reads only the final graph, and where a mark is lost, both sides count as needed (correct,
only slower).

A condition is a set of alternatives, each a set of literals (condition value, polarity): the
node runs when every literal of one alternative holds. ALWAYS has one empty alternative.

passes/loops.py then moves nodes after the nodes computing the condition values they are
guarded by (a branch node that reads only outer values may stand before them), so that the
host program can test them. Fusion joins only nodes of one condition (fusion/groups.py), the memory
plan keeps condition values live until the last kernel they guard (memory/planner.py), and the
host program runs each guarded kernel under an `if` (program/ir.py).

Kernels of a branch not taken leave their outputs unwritten; only kernels of the same branch
and the choosing Where read them, and the Where discards them. The memory plan is the one for
running every kernel, so a skipped kernel never frees storage something else relies on.
"""
from __future__ import annotations

from typing import FrozenSet, Optional, Tuple

from ..ir.graph import Graph
from ..ir.internal import BRANCH_ATTR

Literal = Tuple[str, bool]
Condition = FrozenSet[FrozenSet[Literal]]

ALWAYS: Condition = frozenset({frozenset()})
NEVER: Condition = frozenset()


def either(a: Condition, b: Condition) -> Condition:
    """a or b, simplified: an alternative that contains another is dropped, and two that
    differ only in one literal's polarity become one without it."""
    alts = set(a) | set(b)
    changed = True
    while changed:
        changed = False
        for x in list(alts):
            for lit in x:
                flip = (x - {lit}) | {(lit[0], not lit[1])}
                if flip in alts:
                    alts -= {x, flip}
                    alts.add(x - {lit})
                    changed = True
                    break
            if changed:
                break
    return frozenset(x for x in alts if not any(y < x for y in alts))


def both(c: Condition, lit: Literal) -> Condition:
    """c and lit."""
    neg = (lit[0], not lit[1])
    return either(NEVER, frozenset(x | {lit} for x in c if neg not in x))


def run_conditions(g: Graph) -> dict[int, Condition]:
    """id(node) -> the condition under which the node must run. A node nothing reads (its
    outputs neither graph outputs nor read) keeps ALWAYS: never skipping what was asked for."""
    need: dict[str, Condition] = {o: ALWAYS for o in g.outputs}
    conds: dict[int, Condition] = {}
    for n in reversed(g.nodes):
        c = NEVER
        for o in n.outputs:
            if o:
                c = either(c, need.get(o, NEVER))
        if c == NEVER:
            c = ALWAYS
        conds[id(n)] = c
        branch = n.op_type == "Where" and bool(n.attrs.get(BRANCH_ATTR))
        for k, i in enumerate(n.inputs):
            if not i:
                continue
            ci = c
            if branch and k:
                ci = both(c, (n.inputs[0], k == 1))
            need[i] = either(need.get(i, NEVER), ci)
    return conds


def node_conditions(g: Graph) -> dict[int, Condition]:
    """run_conditions, or {} when every node runs always (no If decided at run time)."""
    conds = run_conditions(g)
    return {} if all(c == ALWAYS for c in conds.values()) else conds


def guard_values(guard: Optional[frozenset]) -> list[str]:
    """The bool values a guard (or any condition of passes/branches.py) tests, in a stable order."""
    return sorted({v for alt in guard for v, _ in alt}) if guard else []
