"""Graph verifier: run after every pass so a broken pass is caught where it broke things."""
from __future__ import annotations

from .dims import Dim
from .graph import Graph


class VerifyError(AssertionError):
    pass


def verify(g: Graph, where: str = "", typed: bool = True) -> None:
    """Raise VerifyError where g breaks the IR's rules: every value defined once, before it is
    read; graph inputs and outputs defined; constants agreeing with their types; and, when
    `typed` (after shape inference), every node output typed with a static shape."""
    ctx = f" (after {where})" if where else ""
    defined: set[str] = set()
    for name in g.inputs:
        if name not in g.values:
            raise VerifyError(f"graph input {name!r} has no value{ctx}")
        defined.add(name)
    for name, v in g.values.items():
        if v.sym is not None:          # sizes of run-time dims, known at compile time (passes/symbolic.py)
            defined.add(name)
        if v.const is not None:
            defined.add(name)
            if tuple(v.const.shape) != tuple(v.shape) or v.const.dtype != v.dtype:
                raise VerifyError(f"constant {name!r} disagrees with its value type{ctx}")
    produced: set[str] = set()
    for n in g.nodes:
        for i in n.inputs:
            if i and i not in defined:
                raise VerifyError(f"{n.op_type} node {n.name!r} reads {i!r} before it is defined{ctx}")
        for o in n.outputs:
            if not o:
                continue
            if o in produced or o in g.inputs or (o in g.values and g.values[o].const is not None):
                raise VerifyError(f"value {o!r} is defined twice{ctx}")
            if typed and o not in g.values:
                raise VerifyError(f"{n.op_type} node {n.name!r} output {o!r} has no type{ctx}")
            v = g.values.get(o)
            if typed and any(not (isinstance(d, int) and d >= 0 or
                                  isinstance(d, Dim) and all(s.name in g.symbols for s in d.symbols()))
                             for d in v.shape):
                raise VerifyError(f"value {o!r} has a shape {v.shape} that is neither sizes nor the graph's "
                                  f"run-time dims{ctx}")
            produced.add(o)
            defined.add(o)
    for o in g.outputs:
        if o not in defined:
            raise VerifyError(f"graph output {o!r} is never computed{ctx}")
