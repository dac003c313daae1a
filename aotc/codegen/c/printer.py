"""Prints kernel IR as C99."""
from __future__ import annotations

import math

import numpy as np

from ...ir import dtypes
from ...kernel.ir import (Assign, BinOp, BufPtr, Buffer, Call, CallStmt, Cast, Comment, Const, Decl, Expr,
                          If, Kernel, Load, Loop, Select, Stmt, Store, Unary, Var)

# generic math name -> (float variant, double variant)
_MATH = {
    "exp": ("expf", "exp"), "log": ("logf", "log"), "sqrt": ("sqrtf", "sqrt"), "tanh": ("tanhf", "tanh"),
    "erf": ("erff", "erf"), "floor": ("floorf", "floor"), "ceil": ("ceilf", "ceil"), "rint": ("rintf", "rint"),
    "sin": ("sinf", "sin"), "cos": ("cosf", "cos"), "tan": ("tanf", "tan"), "atan": ("atanf", "atan"),
    "asin": ("asinf", "asin"), "acos": ("acosf", "acos"), "sinh": ("sinhf", "sinh"), "cosh": ("coshf", "cosh"),
    "pow": ("powf", "pow"), "fmod": ("fmodf", "fmod"), "log1p": ("log1pf", "log1p"), "abs": ("fabsf", "fabs"),
    "atan2": ("atan2f", "atan2"),
}
_ARITH = {"+", "-", "*", "/", "%"}
_PREC = {"||": 1, "&&": 2, "==": 3, "!=": 3, "<": 4, "<=": 4, ">": 4, ">=": 4, "<<": 5, ">>": 5,
         "+": 6, "-": 6, "*": 7, "/": 7, "%": 7}


def ctype(dt) -> str:
    return dtypes.c_type(dt)


def literal(value, dt) -> str:
    dt = np.dtype(dt)
    if dt.kind == "f":
        v = float(value)
        suffix = "f" if dt == np.float32 else ""
        if math.isnan(v):
            return "NAN" if dt == np.float32 else "(double)NAN"
        if math.isinf(v):
            s = "INFINITY" if dt == np.float32 else "(double)INFINITY"
            return s if v > 0 else f"(-{s})"
        r = repr(float(np.float32(v))) if dt == np.float32 else repr(v)
        if "e" not in r and "." not in r:
            r += ".0"
        return f"{r}{suffix}" if not r.startswith("-") else f"({r}{suffix})"
    if dt.kind == "b":
        return "1" if value else "0"
    v = int(value)
    if dt == np.int64:
        return f"INT64_C({v})" if abs(v) > 2**31 - 1 else str(v)
    if dt == np.uint64:
        return f"UINT64_C({v})"
    return str(v)


class CPrinter:
    def __init__(self):
        self.lines: list[str] = []

    # ---------------------------------------------------------------- expressions
    def expr(self, e: Expr, parent: int = 0) -> str:
        if isinstance(e, Const):
            return literal(e.value, e.dtype)
        if isinstance(e, Var):
            return e.name
        if isinstance(e, Load):
            return f"{e.buf.name}[{self.expr(e.index)}]"
        if isinstance(e, BinOp):
            if e.op in ("max", "min"):
                a, b = self.expr(e.a), self.expr(e.b)
                cmp = ">" if e.op == "max" else "<"
                if e.dtype.kind == "f":
                    fn = ("fmaxf" if e.op == "max" else "fminf") if e.dtype == np.float32 else \
                         ("fmax" if e.op == "max" else "fmin")
                    return f"{fn}({a}, {b})"
                return f"(({a}) {cmp} ({b}) ? ({a}) : ({b}))"
            p = _PREC[e.op]
            s = f"{self._operand(e, e.a, p)} {e.op} {self._operand(e, e.b, p + 1)}"
            return f"({s})" if p < parent else s
        if isinstance(e, Unary):
            return f"{e.op}{self.expr(e.a, 99)}"
        if isinstance(e, Call):
            args = ", ".join(self.expr(a) for a in e.args)
            if e.fn == "abs" and e.dtype.kind in "iu":
                a = self.expr(e.args[0], 99)
                return f"({a} < 0 ? -{a} : {a})"
            pair = _MATH.get(e.fn)
            if pair is None:
                return f"{e.fn}({args})"
            return f"{pair[0] if e.dtype == np.float32 else pair[1]}({args})"
        if isinstance(e, Select):
            s = f"{self.expr(e.cond, 1)} ? {self.expr(e.a, 1)} : {self.expr(e.b, 1)}"
            return f"({s})"
        if isinstance(e, Cast):
            return f"({ctype(e.dtype)}){self.expr(e.a, 99)}"
        if isinstance(e, BufPtr):
            off = self.expr(e.offset)
            return e.buf.name if off == "0" else f"{e.buf.name} + {off}"
        if isinstance(e, Buffer):
            return e.name
        raise TypeError(f"cannot print {e!r}")

    def _operand(self, parent: BinOp, child: Expr, prec: int) -> str:
        """Parenthesize mixes of comparison/logic/shift operators, as gcc -Wall asks."""
        if isinstance(child, BinOp) and child.op in _PREC and (child.op not in _ARITH or parent.op not in _ARITH):
            return f"({self.expr(child)})"
        return self.expr(child, prec)

    # ---------------------------------------------------------------- statements
    def stmts(self, ss: list[Stmt], ind: int) -> None:
        for s in ss:
            self.stmt(s, ind)

    def stmt(self, s: Stmt, ind: int) -> None:
        pad = "    " * ind
        out = self.lines.append
        if isinstance(s, Store):
            out(f"{pad}{s.buf.name}[{self.expr(s.index)}] = {self.expr(s.value)};")
        elif isinstance(s, Decl):
            out(f"{pad}{ctype(s.var.dtype)} {s.var.name} = {self.expr(s.init)};")
        elif isinstance(s, Assign):
            out(f"{pad}{s.var.name} = {self.expr(s.value)};")
        elif isinstance(s, Loop):
            v = s.var.name
            out(f"{pad}for (int64_t {v} = {self.expr(s.start)}; {v} < {self.expr(s.extent)}; ++{v}) {{")
            self.stmts(s.body, ind + 1)
            out(f"{pad}}}")
        elif isinstance(s, If):
            out(f"{pad}if ({self.expr(s.cond)}) {{")
            self.stmts(s.then, ind + 1)
            if s.orelse:
                out(f"{pad}}} else {{")
                self.stmts(s.orelse, ind + 1)
            out(f"{pad}}}")
        elif isinstance(s, CallStmt):
            out(f"{pad}{s.fn}({', '.join(self.expr(a) for a in s.args)});")
        elif isinstance(s, Comment):
            out(f"{pad}/* {s.text} */")
        else:
            raise TypeError(f"cannot print {s!r}")

    # ---------------------------------------------------------------- kernels
    def kernel(self, k: Kernel) -> str:
        self.lines = []
        params = []
        for p in k.params + k.scratch:
            const_q = "const " if p.role == "in" else ""
            params.append(f"{const_q}{ctype(p.dtype)} *{p.name}")
        self.lines.append(f"/* {k.comment} */")
        self.lines.append(f"static void {k.name}({', '.join(params) or 'void'})")
        self.lines.append("{")
        self.stmts(k.body, 1)
        self.lines.append("}")
        return "\n".join(self.lines)
