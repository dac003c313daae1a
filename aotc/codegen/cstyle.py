"""The C-style printer every kernel language shares: expressions, statements and loops of the
kernel IR as C-family source. C99 (codegen/c), OpenCL C (codegen/opencl) and CUDA C++
(codegen/cuda) are subclasses that override the hooks below, and nothing else:

    type_name        the spelling of a dtype (float, int64_t / long, half...)
    math_name        a generic math function for a dtype (expf / exp / __expf)
    load / store     an element access; a float16 / bfloat16 buffer computed in float32 is
                     converted at each (`narrow_conversions`: the language's functions, or
                     narrow_load / narrow_store for other shapes of access)
    param_decl       a kernel parameter (address-space qualifier, const, restrict)
    kernel_header    the kernel's signature (static void / __kernel void / __global__ void)
    loop_open        how a loop of each kind opens (pragma, bound GPU index)
    gpu_index        a GPU index axis (get_global_id(0) / blockIdx.x * blockDim.x + ...)
    barrier / fail / gemm / local_decl

Every kernel is one function named after its fused ONNX nodes, with a comment naming them.
"""
from __future__ import annotations

import math

import numpy as np

from .abi import ctype
from ..errors import UnsupportedError
from ..ir import dtypes
from ..kernel.ir import (BITCAST, BOUND, PARALLEL, WARP_XOR, Assign, Barrier, BinOp, BufPtr, Buffer,
                         Call, GpuIndex, CallStmt, Cast, Comment, Const, Decl, Expr, Fail, Gemm, If, Kernel, Load, Loop,
                         Select, Stmt, Store, Unary, Var)

_ARITH = {"+", "-", "*", "/", "%"}
_PREC = {"||": 1, "&&": 2, "|": 2.25, "^": 2.5, "&": 2.75, "==": 3, "!=": 3, "<": 4, "<=": 4, ">": 4, ">=": 4, "<<": 5, ">>": 5,
         "+": 6, "-": 6, "*": 7, "/": 7, "%": 7}
# generic math names with a float (`f` suffix in C99) and a double variant
MATH_FUNCTIONS = ("exp", "log", "sqrt", "tanh", "erf", "floor", "ceil", "rint", "sin", "cos", "tan", "atan",
                  "asin", "acos", "sinh", "cosh", "asinh", "acosh", "atanh", "pow", "fmod", "log1p", "atan2",
                  "round", "expm1", "fabs")
# and "sigmoid", which C has not: each printer spells it (sigmoid(), by default 1 / (1 + exp(-x)))
# and BITCAST (bitcast()), a value's bits read as another type of the same width


# the 8- and 4-bit floats and 4- and 2-bit integers: storage dtype name -> (to the compute type,
# from it), the functions of runtime/aotc_support.h on uint8_t bits, which C, CUDA (host and
# device) and OpenCL (a copy in the kernels' source) share
SMALL_TYPE_CONVERSIONS = {
    **{name: (f"aotc_{short}_to_float", f"aotc_{short}_from_float") for name, short in (
        ("float8_e4m3fn", "f8e4m3fn"), ("float8_e4m3fnuz", "f8e4m3fnuz"), ("float8_e5m2", "f8e5m2"),
        ("float8_e5m2fnuz", "f8e5m2fnuz"), ("float8_e8m0fnu", "f8e8m0"), ("float4_e2m1fn", "f4e2m1"))},
    **{name: (f"aotc_{name}_to_int", f"aotc_{name}_from_int") for name in ("int4", "uint4", "int2", "uint2")},
}


class PrintError(Exception):
    """The IR holds something this language cannot express (a schedule bug)."""


def _converted(buf: Buffer) -> bool:
    """Is buf a narrow type's storage whose values are computed in a wider type?"""
    return dtypes.is_narrow(buf.dtype) and buf.value_dtype != buf.dtype


class CStylePrinter:
    language = "c-style"
    restrict = "restrict"
    indent = "    "

    def __init__(self):
        self.lines: list[str] = []
        self.kernel_: Kernel | None = None

    # ================================================================= hooks (override)
    def type_name(self, dt) -> str:
        return ctype(dt)

    def int_literal(self, v: int, dt) -> str:
        dt = np.dtype(dt)
        if dt == np.int64 and abs(v) > 2**31 - 1:
            return f"INT64_C({v})"
        if dt == np.uint64:
            return f"UINT64_C({v})"
        if dt == np.uint32:     # (2147483648 and up would be a wider signed type unsuffixed)
            return f"{v}u"
        return str(v)

    def float_literal(self, v: float, dt) -> str:
        dt = np.dtype(dt)
        single = dt != np.float64
        if math.isnan(v):
            return "NAN" if single else "(double)NAN"
        if math.isinf(v):
            s = "INFINITY" if single else "(double)INFINITY"
            return s if v > 0 else f"(-{s})"
        r = repr(float(np.float32(v))) if single else repr(v)
        if "e" not in r and "." not in r:
            r += ".0"
        r = f"{r}f" if single else r
        return f"({r})" if r.startswith("-") else r

    def math_name(self, fn: str, dt) -> str:
        """C99 spelling: expf for float, exp for double."""
        base = "fabs" if fn == "abs" else fn
        return f"{base}f" if np.dtype(dt) == np.float32 else base

    def sigmoid(self, x: str, dt) -> str:
        """1 / (1 + exp(-x)) (x printed as an operand of a unary minus)."""
        one = self.float_literal(1.0, dt)
        return f"({one} / ({one} + {self.math_name('exp', dt)}(-{x})))"

    def bitcast(self, x: str, src, dst) -> str:
        """x's bits (of type src) read as type dst, of the same width: C99's union punning
        (each printer spells it in its language)."""
        return (f"((union {{ {self.type_name(src)} from; {self.type_name(dst)} to; }}){{ .from = {x} }}).to")

    def warp_xor(self, value: str, lane_mask: str) -> str:
        """`value` as the work-item whose lane in the warp is this one's xor lane_mask has it."""
        raise PrintError(f"{self.language} has no warp shuffles")

    def minmax(self, op: str, dt, a: str, b: str) -> str:
        if np.dtype(dt).kind == "f":
            return f"{self.math_name('fmax' if op == 'max' else 'fmin', dt)}({a}, {b})"
        cmp = ">" if op == "max" else "<"
        return f"(({a}) {cmp} ({b}) ? ({a}) : ({b}))"

    # storage dtype name -> (function to float32, function from float32) of the language
    narrow_conversions: dict[str, tuple[str, str]] = {}

    def load(self, buf: Buffer, index: str) -> str:
        if _converted(buf):
            return self.narrow_load(buf, index)
        return f"{buf.name}[{index}]"

    def store(self, buf: Buffer, index: str, value: str) -> str:
        if _converted(buf):
            return self.narrow_store(buf, index, value)
        return f"{buf.name}[{index}] = {value};"

    def narrow_load(self, buf: Buffer, index: str) -> str:
        """A narrow element (float16, bfloat16, float8...) as the value it is computed in (exact)."""
        return f"{self._narrow(buf)[0]}({buf.name}[{index}])"

    def narrow_store(self, buf: Buffer, index: str, value: str) -> str:
        """A value stored in a narrow type: rounded to nearest even, a NaN kept a NaN (a value of
        the 8-, 4- and 2-bit types is one of that type already: ops/narrow.py)."""
        return f"{buf.name}[{index}] = {self._narrow(buf)[1]}({value});"

    def _narrow(self, buf: Buffer) -> tuple[str, str]:
        try:
            return self.narrow_conversions[buf.dtype.name]
        except KeyError:
            # (a type the language's printer has no conversions for: a user's model, not a bug)
            raise UnsupportedError([f"{buf.dtype.name} inputs and outputs in {self.language} kernels "
                                    f"(buffer {buf.name!r})"]) from None

    def param_decl(self, buf: Buffer) -> str:
        raise NotImplementedError

    def kernel_header(self, k: Kernel, params: list[str]) -> list[str]:
        raise NotImplementedError

    def gpu_index(self, axis: str) -> str:
        raise PrintError(f"{self.language} has no GPU index {axis!r}")

    def barrier(self, s: Barrier) -> list[str]:
        raise PrintError(f"{self.language} kernels have no work-group barriers")

    def fail(self, s: Fail) -> list[str]:
        return [f"return {s.status};"]

    def gemm(self, s: Gemm, ind: int) -> None:
        raise PrintError(f"{self.language}: a Gemm statement must have been lowered by the schedule")

    def local_decl(self, buf: Buffer) -> str:
        return f"{self.type_name(buf.dtype)} {buf.name}[{buf.size}];"

    def loop_open(self, s: Loop, ind: int) -> None:
        """Print the opening of a loop (and any pragma); the caller prints the body and `}`."""
        pad = self.indent * ind
        v, ext, start = s.var.name, self.expr(s.extent), self.expr(s.start)
        if s.kind == BOUND:
            self.out(f"{pad}{{ const {self.type_name(s.var.dtype)} {v} = {start} + {self.gpu_index(s.axis)};")
            self.out(f"{pad}if ({v} < {ext}) {{")
            return
        if s.kind == PARALLEL:
            raise PrintError(f"{self.language}: parallel loop {v!r} has no lowering here")
        pragma = self.loop_pragma(s)
        if pragma:
            self.out(f"{pad}{pragma}")
        ty = self.type_name(s.var.dtype)
        inc = f"++{v}" if s.step == 1 else f"{v} += {s.step}"
        self.out(f"{pad}for ({ty} {v} = {start}; {v} < {ext}; {inc}) {{")

    def loop_close(self, s: Loop, ind: int) -> None:
        pad = self.indent * ind
        self.out(f"{pad}}}}}" if s.kind == BOUND else f"{pad}}}")

    def loop_pragma(self, s: Loop) -> str:
        return ""

    # ================================================================= expressions
    def literal(self, value, dt) -> str:
        dt = np.dtype(dt)
        if dt.kind == "f":
            return self.float_literal(float(value), dt)
        if dt.kind == "b":
            return "1" if value else "0"
        return self.int_literal(int(value), dt)

    def expr(self, e, parent: int = 0) -> str:
        if isinstance(e, Const):
            return self.literal(e.value, e.dtype)
        if isinstance(e, Var):
            return e.name
        if isinstance(e, Load):
            return self.load(e.buf, self.expr(e.index))
        if isinstance(e, BinOp):
            if e.op in ("max", "min"):
                return self.minmax(e.op, e.dtype, self.expr(e.a), self.expr(e.b))
            p = _PREC[e.op]
            s = f"{self._operand(e, e.a, p)} {e.op} {self._operand(e, e.b, p + 1)}"
            return f"({s})" if p < parent else s
        if isinstance(e, Unary):
            return f"{e.op}{self.expr(e.a, 99)}"
        if isinstance(e, Call):
            if e.fn == WARP_XOR:
                return self.warp_xor(self.expr(e.args[0]), self.expr(e.args[1]))
            if e.fn == "sigmoid":
                return self.sigmoid(self.expr(e.args[0], 99), e.dtype)
            if e.fn == BITCAST:
                return self.bitcast(self.expr(e.args[0]), e.args[0].dtype, e.dtype)
            if e.fn == "abs" and e.dtype.kind in "iu":
                a = self.expr(e.args[0], 99)
                return f"({a} < 0 ? -{a} : {a})"
            args = ", ".join(self.expr(a) for a in e.args)
            return f"{self.math_name(e.fn, e.dtype)}({args})"
        if isinstance(e, Select):
            return self.select(e)
        if isinstance(e, Cast):
            return self.cast(e)
        if isinstance(e, GpuIndex):
            return self.gpu_index(e.axis)
        if isinstance(e, BufPtr):
            off = self.expr(e.offset)
            return e.buf.name if off == "0" else f"{e.buf.name} + {off}"
        if isinstance(e, Buffer):
            return e.name
        raise PrintError(f"cannot print {e!r}")

    def select(self, e: Select) -> str:
        return f"({self.expr(e.cond, 1)} ? {self.expr(e.a, 1)} : {self.expr(e.b, 1)})"

    def cast(self, e: Cast) -> str:
        return f"({self.type_name(e.dtype)}){self.expr(e.a, 99)}"

    def _operand(self, parent: BinOp, child: Expr, prec: int) -> str:
        """Parenthesize mixes of comparison/logic/shift operators, as compilers' warnings ask."""
        if isinstance(child, BinOp) and child.op in _PREC and (child.op not in _ARITH or parent.op not in _ARITH):
            return f"({self.expr(child)})"
        return self.expr(child, prec)

    # ================================================================= statements
    def out(self, line: str) -> None:
        self.lines.append(line)

    def stmts(self, ss: list[Stmt], ind: int) -> None:
        for s in ss:
            self.stmt(s, ind)

    def stmt(self, s: Stmt, ind: int) -> None:
        pad = self.indent * ind
        if isinstance(s, Store):
            self.out(pad + self.store(s.buf, self.expr(s.index), self.expr(s.value)))
        elif isinstance(s, Decl):
            self.out(f"{pad}{self.type_name(s.var.dtype)} {s.var.name} = {self.expr(s.init)};")
        elif isinstance(s, Assign):
            self.out(f"{pad}{s.var.name} = {self.expr(s.value)};")
        elif isinstance(s, Loop):
            self.loop_open(s, ind)
            self.stmts(s.body, ind + 1)
            self.loop_close(s, ind)
        elif isinstance(s, If):
            self.out(f"{pad}if ({self.expr(s.cond)}) {{")
            self.stmts(s.then, ind + 1)
            if s.orelse:
                self.out(f"{pad}}} else {{")
                self.stmts(s.orelse, ind + 1)
            self.out(f"{pad}}}")
        elif isinstance(s, CallStmt):
            self.out(f"{pad}{s.fn}({', '.join(self.expr(a) for a in s.args)});")
        elif isinstance(s, Comment):
            self.out(f"{pad}/* {s.text} */")
        elif isinstance(s, Barrier):
            for line in self.barrier(s):
                self.out(pad + line)
        elif isinstance(s, Fail):
            for line in self.fail(s):
                self.out(pad + line)
        elif isinstance(s, Gemm):
            self.gemm(s, ind)
        else:
            raise PrintError(f"cannot print {s!r}")

    # ================================================================= kernels
    def kernel(self, k: Kernel) -> str:
        """The kernel as one function, preceded by the helpers the language needs for it
        (C: the outlined bodies of parallel loops and GEMM epilogues)."""
        self.kernel_ = k
        self.helpers: list[str] = []
        self.lines = []
        params = [self.param_decl(p) for p in self.kernel_params(k)]
        self.lines.append(f"/* {k.comment} */")
        self.lines.extend(self.kernel_header(k, params))
        self.lines.append("{")
        for buf in self.kernel_locals(k):
            self.out(self.indent + self.local_decl(buf))
        top = len(self.lines)
        self.begin_function()
        self.stmts(k.body, 1)
        self.kernel_epilogue(k)
        self.lines[top:top] = self.end_function(self.lines[top:])
        self.lines.append("}")
        return "\n\n".join(self.helpers + ["\n".join(self.lines)])

    def begin_function(self) -> None:
        """A function's body is about to be printed (the kernel's, or a helper's)."""

    def end_function(self, body: list[str]) -> list[str]:
        """The function whose body is `body` is printed: lines to put at the body's top."""
        return []

    def capture(self, fn) -> list[str]:
        """The lines `fn()` prints, printed aside (for a helper function)."""
        saved, self.lines = self.lines, []
        try:
            fn()
            return self.lines
        finally:
            self.lines = saved

    def kernel_params(self, k: Kernel) -> list[Buffer]:
        return k.params + k.scratch

    def kernel_locals(self, k: Kernel) -> list[Buffer]:
        from ..kernel.ir import walk_buffers
        return [b for b in walk_buffers(k.body) if b.role == "local"]

    def kernel_epilogue(self, k: Kernel) -> None:
        """Lines before the closing brace (C kernels that can fail return AOTC_OK there)."""
