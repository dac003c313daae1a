"""Accumulation precision, chosen by the schedule: ops declare accumulators in the value's
dtype (`Builder.accumulator`); a target that sums float32 in float64 (the CPU targets: it costs
nothing next to the loads, and long reductions such as LayerNorm over 768 channels or means
over images stay closer to the exact value) widens them here, and every expression that reads
an accumulator is retyped with C's usual arithmetic conversions, so that values derived from a
sum (a mean, a variance) are computed in the wider type too, up to where the op casts back or
stores. Locals follow their initial value's type unless the op pinned it (`Builder.local(...,
dtype=...)`). A GPU target that keeps float32 leaves the kernel as the op wrote it.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from .ir import BITCAST, Assign, BinOp, Call, Decl, Expr, Rewriter, Select, Stmt, Store, Unary, Var, cast

_CMP = {"<", "<=", ">", ">=", "==", "!=", "&&", "||"}


def widen_accumulators(stmts: list[Stmt], of, to) -> list[Stmt]:
    """Accumulators of dtype `of` become dtype `to`; expressions reading them follow."""
    of, to = np.dtype(of), np.dtype(to)
    if of == to:
        return stmts
    return _Retype(of, to).stmts(stmts)


def _wider(a: np.dtype, b: np.dtype) -> np.dtype:
    if a.kind == "f" and b.kind == "f":
        return a if a.itemsize >= b.itemsize else b
    if a.kind == "f":
        return a
    if b.kind == "f":
        return b
    return a


class _Retype(Rewriter):
    def __init__(self, of: np.dtype, to: np.dtype):
        self.of, self.to = of, to
        self.types: dict[str, np.dtype] = {}      # variables whose dtype changed

    def expr(self, e: Expr) -> Expr:
        if not self.types:
            return e
        if isinstance(e, Var):
            return Var(e.name, self.types[e.name]) if e.name in self.types else e
        r = self.generic(e)                  # (itself where no variable in it changed type)
        if r is e:
            return e
        if isinstance(r, BinOp):
            dt = r.dtype if r.op in _CMP or r.op in ("<<", ">>") else _wider(r.a.dtype, r.b.dtype)
            return BinOp(r.op, r.a, r.b, dt)
        if isinstance(r, Unary):
            return Unary(r.op, r.a, r.a.dtype if r.op == "-" else r.dtype)
        if isinstance(r, Call):
            dt = r.dtype
            if r.dtype.kind == "f" and r.fn != BITCAST:      # (a bitcast's type is its width's)
                for x in r.args:
                    dt = _wider(dt, x.dtype)
            return Call(r.fn, r.args, dt)
        if isinstance(r, Select):
            return Select(r.cond, r.a, r.b, _wider(r.a.dtype, r.b.dtype))
        return r

    def visit_Decl(self, s: Decl) -> Decl:
        init = self.expr(s.init)
        if s.accumulator and s.var.dtype == self.of:
            dt = self.to
        elif s.pinned:
            dt = s.var.dtype
        else:
            dt = _wider(s.var.dtype, init.dtype) if init.dtype.kind == "f" else s.var.dtype
        if dt != s.var.dtype:
            self.types[s.var.name] = dt
        return Decl(Var(s.var.name, dt), cast(init, dt), s.accumulator, s.pinned)

    def visit_Assign(self, s: Assign) -> Assign:
        var = self.expr(s.var)
        return Assign(var, cast(self.expr(s.value), var.dtype))

    def visit_Store(self, s: Store) -> Store:
        s = self.generic(s)
        return replace(s, value=cast(s.value, s.buf.value_dtype))
