"""An integer Gemm (8-bit operands, int32 C: kernel/ir.py Gemm) as plain loops: the reference
form of what it computes, which a schedule takes where no faster one applies (the GPU schedules
always; the CPU one where the 8-bit GEMM of runtime/aotc_igemm.h does not fit the operands).

    for i, j:  acc = sum over k of (A(i, k) - a_zero) * (B(k, j) - b_zero)   (int32)
               C(i, j) = (C(i, j) +) acc, or the epilogue with value = acc
"""
from __future__ import annotations

from .ir import I32, REDUCTION, SPATIAL, Assign, Decl, Gemm, Load, Loop, Rewriter, Stmt, Store, Var, cast, const


def expand_integer_gemm(gm: Gemm, fresh) -> list[Stmt]:
    """g as loops; `fresh(hint)` names the new variables."""
    k, acc = Var(fresh("k")), Var(fresh("sum"), I32)

    def operand(m, r, c, zero):
        v = cast(m.element(r, c), I32)
        return v - zero if zero is not None else v

    term = operand(gm.a, gm.i, k, gm.a_zero) * operand(gm.b, k, gm.j, gm.b_zero)
    at = gm.c.at(gm.i, gm.j)
    total = Load(gm.c.buf, at) + acc if gm.accumulate else acc
    if gm.epilogue:
        finish = [Decl(gm.value, total)] + gm.epilogue
    else:
        finish = [Store(gm.c.buf, at, total)]
    element = [Decl(acc, const(0, I32), accumulator=True, pinned=True),
               Loop(k, const(gm.K), [Assign(acc, acc + term)], role=REDUCTION)] + finish
    columns = Loop(gm.j, const(gm.N), element, role=SPATIAL)
    return [Loop(gm.i, const(gm.M), gm.row_epilogue + [columns], role=SPATIAL)]


class _Expand(Rewriter):
    def __init__(self, fresh):
        self.fresh = fresh

    def visit_Gemm(self, s: Gemm):
        return expand_integer_gemm(s, self.fresh) if s.integer else s


def expand_integer_gemms(stmts: list[Stmt], fresh) -> list[Stmt]:
    """stmts with every integer Gemm expanded into loops (expand_integer_gemm)."""
    return _Expand(fresh).stmts(stmts)
