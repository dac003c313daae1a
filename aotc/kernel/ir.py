"""Kernel IR: loop nests over flat buffers, printed by every target's emitter.

A Kernel is one generated function. It reads and writes Buffers (flat, contiguous
arrays of one dtype) through scalar expressions. Loops carry a schedule annotation
(`serial`, `parallel`, `vector`) that each emitter maps to its own machinery: a plain
`for` in C, a thread index on a GPU. Ops that are better served by a hand-written
micro-kernel emit a `Call` to a runtime function instead of loops.

Expressions are immutable; the smart constructors fold constants and drop `*1`, `+0`
so that generated index arithmetic stays readable.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence, Union

import numpy as np

from ..ir import dtypes

I64 = dtypes.INT64
F32 = dtypes.FLOAT32
BOOL = dtypes.BOOL


# ----------------------------------------------------------------------------- expressions
class Expr:
    dtype: np.dtype

    # arithmetic sugar, so lowering code reads like the math it implements
    def __add__(self, o): return binop("+", self, o)
    def __radd__(self, o): return binop("+", o, self)
    def __sub__(self, o): return binop("-", self, o)
    def __rsub__(self, o): return binop("-", o, self)
    def __mul__(self, o): return binop("*", self, o)
    def __rmul__(self, o): return binop("*", o, self)
    def __truediv__(self, o): return binop("/", self, o)
    def __rtruediv__(self, o): return binop("/", o, self)
    def __floordiv__(self, o): return binop("/", self, o)   # integer division of indices
    def __mod__(self, o): return binop("%", self, o)
    def __neg__(self): return Unary("-", self, self.dtype)
    def __lt__(self, o): return binop("<", self, o)
    def __le__(self, o): return binop("<=", self, o)
    def __gt__(self, o): return binop(">", self, o)
    def __ge__(self, o): return binop(">=", self, o)
    def eq(self, o): return binop("==", self, o)
    def ne(self, o): return binop("!=", self, o)


@dataclass(frozen=True, eq=False)
class Const(Expr):
    value: Union[int, float, bool]
    dtype: np.dtype = I64


@dataclass(frozen=True, eq=False)
class Var(Expr):
    """A loop index or a local scalar."""
    name: str
    dtype: np.dtype = I64


@dataclass(frozen=True, eq=False)
class Load(Expr):
    buf: "Buffer"
    index: Expr

    @property
    def dtype(self):  # type: ignore[override]
        return self.buf.dtype


@dataclass(frozen=True, eq=False)
class BinOp(Expr):
    op: str          # + - * / % < <= > >= == != && || min max
    a: Expr
    b: Expr
    dtype: np.dtype


@dataclass(frozen=True, eq=False)
class Unary(Expr):
    op: str          # - !
    a: Expr
    dtype: np.dtype


@dataclass(frozen=True, eq=False)
class Call(Expr):
    """A math function by its generic name (exp, tanh, sqrt, erf, pow...); the emitter
    picks the typed variant (expf/exp)."""
    fn: str
    args: tuple
    dtype: np.dtype


@dataclass(frozen=True, eq=False)
class Select(Expr):
    cond: Expr
    a: Expr
    b: Expr
    dtype: np.dtype


@dataclass(frozen=True, eq=False)
class Cast(Expr):
    a: Expr
    dtype: np.dtype


def const(v, dtype=None) -> Const:
    if dtype is None:
        dtype = F32 if isinstance(v, float) else (BOOL if isinstance(v, bool) else I64)
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        v = float(v)
    elif dtype.kind == "b":
        v = bool(v)
    else:
        v = int(v)
    return Const(v, dtype)


def wrap(x, like: Expr | None = None) -> Expr:
    if isinstance(x, Expr):
        return x
    if like is not None:
        return const(x, like.dtype)
    return const(x)


_CMP = {"<", "<=", ">", ">=", "==", "!="}
_LOGIC = {"&&", "||"}


def binop(op: str, a, b) -> Expr:
    if not isinstance(a, Expr):
        a = wrap(a, b if isinstance(b, Expr) else None)
    if not isinstance(b, Expr):
        b = wrap(b, a)
    dtype = BOOL if op in _CMP or op in _LOGIC else a.dtype
    # constant folding on integer index arithmetic
    if isinstance(a, Const) and isinstance(b, Const) and a.dtype.kind in "iu" and b.dtype.kind in "iu":
        x, y = a.value, b.value
        if op == "+": return const(x + y, dtype)
        if op == "-": return const(x - y, dtype)
        if op == "*": return const(x * y, dtype)
        if op == "/" and y != 0 and x >= 0 and y > 0: return const(x // y, dtype)
        if op == "%" and y > 0 and x >= 0: return const(x % y, dtype)
    if dtype.kind in "iu":
        if op == "+":
            if _is(a, 0): return b
            if _is(b, 0): return a
        if op == "-" and _is(b, 0): return a
        if op == "*":
            if _is(a, 0) or _is(b, 0): return const(0, dtype)
            if _is(a, 1): return b
            if _is(b, 1): return a
        if op == "/" and _is(b, 1): return a
        if op == "%" and _is(b, 1): return const(0, dtype)
    return BinOp(op, a, b, dtype)


def _is(e: Expr, v) -> bool:
    return isinstance(e, Const) and e.value == v


def call(fn: str, *args, dtype=None) -> Call:
    args = tuple(wrap(a) for a in args)
    return Call(fn, args, np.dtype(dtype) if dtype is not None else args[0].dtype)


def select(cond, a, b) -> Expr:
    a = wrap(a, b if isinstance(b, Expr) else None)
    b = wrap(b, a)
    return Select(wrap(cond), a, b, a.dtype)


def cast(a: Expr, dtype) -> Expr:
    dtype = np.dtype(dtype)
    if a.dtype == dtype:
        return a
    if isinstance(a, Const):
        return const(a.value, dtype)
    return Cast(a, dtype)


def maximum(a, b) -> Expr:
    return binop("max", a, b)


def minimum(a, b) -> Expr:
    return binop("min", a, b)


# ----------------------------------------------------------------------------- buffers
@dataclass(frozen=True, eq=False)
class Buffer:
    """A flat array a kernel reads or writes. `shape` is for readable indexing only; the
    memory is contiguous (row-major). `name` is the kernel parameter's name."""
    name: str
    dtype: np.dtype
    shape: tuple
    role: str = "in"      # in | out | scratch

    @property
    def size(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    def strides(self) -> list[int]:
        st, acc = [], 1
        for d in reversed(self.shape):
            st.append(acc)
            acc *= d
        return st[::-1]

    def flat(self, idx: Sequence) -> Expr:
        """Row-major flat offset of a multi-index (ints or Exprs); size-1 dims are skipped."""
        if len(idx) != len(self.shape):
            raise ValueError(f"{self.name}: {len(idx)} indices for shape {self.shape}")
        off: Expr = const(0)
        for i, s, d in zip(idx, self.strides(), self.shape):
            if d == 1:
                continue
            off = off + wrap(i) * s
        return off

    def __getitem__(self, idx) -> Load:
        if not isinstance(idx, tuple):
            idx = (idx,)
        if len(idx) == 1 and len(self.shape) != 1:
            return Load(self, wrap(idx[0]))      # already a flat index
        return Load(self, self.flat(idx))


# ----------------------------------------------------------------------------- statements
class Stmt:
    pass


@dataclass(eq=False)
class Store(Stmt):
    buf: Buffer
    index: Expr
    value: Expr


@dataclass(eq=False)
class Decl(Stmt):
    """Declare a local scalar (`var`) with an initial value."""
    var: Var
    init: Expr


@dataclass(eq=False)
class Assign(Stmt):
    var: Var
    value: Expr


@dataclass(eq=False)
class Loop(Stmt):
    var: Var
    extent: Expr
    body: list[Stmt] = field(default_factory=list)
    kind: str = "serial"      # serial | parallel | vector
    start: Expr = field(default_factory=lambda: const(0))


@dataclass(eq=False)
class If(Stmt):
    cond: Expr
    then: list[Stmt] = field(default_factory=list)
    orelse: list[Stmt] = field(default_factory=list)


@dataclass(eq=False)
class CallStmt(Stmt):
    """Call a runtime micro-kernel: args are Buffers (passed as pointers) or Exprs."""
    fn: str
    args: list


@dataclass(eq=False)
class Comment(Stmt):
    text: str


@dataclass(eq=False)
class Kernel:
    name: str
    comment: str
    params: list[Buffer]
    body: list[Stmt]
    scratch: list[Buffer] = field(default_factory=list)


# ----------------------------------------------------------------------------- builder
# identifiers a kernel must not declare: C keywords and the library names it may call
RESERVED = frozenset("""auto break case char const continue default do double else enum extern float for goto if
inline int long register restrict return short signed sizeof static struct switch typedef union unsigned void
volatile while _Bool _Complex _Imaginary int8_t int16_t int32_t int64_t uint8_t uint16_t uint32_t uint64_t
size_t ptrdiff_t uintptr_t NULL INFINITY NAN main""".split()) | frozenset(
    f"{f}{s}" for f in """exp log sqrt tanh erf floor ceil rint sin cos tan atan asin acos sinh cosh pow fmod
log1p fabs atan2 fmax fmin round nearbyint expm1 log2 exp2 cbrt hypot trunc""".split() for s in ("", "f"))
class Builder:
    """Builds a statement list with `with b.loop(n) as i:` blocks, like the code it becomes."""

    def __init__(self):
        self.body: list[Stmt] = []
        self._stack: list[list[Stmt]] = [self.body]
        self.names: set[str] = set(RESERVED)   # every identifier used in the kernel so far

    def fresh(self, hint: str) -> str:
        """A new identifier: `hint`, else hint1, hint2... (parameters share this pool)."""
        name, k = hint, 0
        while name in self.names:
            k += 1
            name = f"{hint}{k}"
        self.names.add(name)
        return name

    def emit(self, s: Stmt) -> None:
        self._stack[-1].append(s)

    def comment(self, text: str) -> None:
        self.emit(Comment(text))

    def loop(self, extent, name: str = "i", kind: str = "serial", start=0):
        return _LoopCtx(self, Loop(Var(self.fresh(name)), wrap(extent), [], kind, wrap(start)))

    def loops(self, shape: Sequence[int], names: Sequence[str] | None = None, kind: str = "serial"):
        """Nested loops over a whole shape; yields the index variables."""
        return _NestCtx(self, shape, names, kind)

    def if_(self, cond):
        return _IfCtx(self, If(wrap(cond)))

    def local(self, hint: str, init, dtype=None) -> Var:
        init = wrap(init)
        if dtype is not None:
            init = cast(init, dtype)
        v = Var(self.fresh(hint), init.dtype)
        self.emit(Decl(v, init))
        return v

    def assign(self, var: Var, value) -> None:
        self.emit(Assign(var, cast(wrap(value, var), var.dtype)))

    def store(self, buf: Buffer, idx, value) -> None:
        index = buf.flat(idx) if isinstance(idx, (tuple, list)) else wrap(idx)
        self.emit(Store(buf, index, cast(wrap(value, None), buf.dtype)))

    def call(self, fn: str, *args) -> None:
        self.emit(CallStmt(fn, list(args)))


class _LoopCtx:
    def __init__(self, b: Builder, loop: Loop):
        self.b, self.loop_ = b, loop

    def __enter__(self) -> Var:
        self.b.emit(self.loop_)
        self.b._stack.append(self.loop_.body)
        return self.loop_.var

    def __exit__(self, *exc):
        self.b._stack.pop()


class _NestCtx:
    def __init__(self, b, shape, names, kind):
        self.b, self.shape, self.kind = b, list(shape), kind
        self.names = list(names) if names else [f"i{k}" for k in range(len(shape))]
        self.depth = 0

    def __enter__(self):
        idx = []
        for d, nm in zip(self.shape, self.names):
            if d == 1:
                idx.append(const(0))
                continue
            lp = Loop(Var(self.b.fresh(nm)), const(d), [], self.kind)
            self.b.emit(lp)
            self.b._stack.append(lp.body)
            self.depth += 1
            idx.append(lp.var)
        return idx

    def __exit__(self, *exc):
        for _ in range(self.depth):
            self.b._stack.pop()


class _IfCtx:
    def __init__(self, b, node: If):
        self.b, self.node = b, node

    def __enter__(self):
        self.b.emit(self.node)
        self.b._stack.append(self.node.then)
        return self.node

    def __exit__(self, *exc):
        self.b._stack.pop()


@dataclass(frozen=True, eq=False)
class BufPtr:
    """A pointer into a buffer at an element offset: a micro-kernel call argument."""
    buf: Buffer
    offset: Expr = field(default_factory=lambda: const(0))


def walk_buffers(stmts: list[Stmt]) -> list[Buffer]:
    """Every buffer a statement list touches, in first-use order."""
    seen: dict[int, Buffer] = {}

    def ex(e):
        if isinstance(e, Load):
            seen.setdefault(id(e.buf), e.buf)
            ex(e.index)
        elif isinstance(e, BinOp):
            ex(e.a); ex(e.b)
        elif isinstance(e, (Unary, Cast)):
            ex(e.a)
        elif isinstance(e, Call):
            for a in e.args:
                ex(a)
        elif isinstance(e, Select):
            ex(e.cond); ex(e.a); ex(e.b)
        elif isinstance(e, BufPtr):
            seen.setdefault(id(e.buf), e.buf)
            ex(e.offset)
        elif isinstance(e, Buffer):
            seen.setdefault(id(e), e)

    def st(ss):
        for s in ss:
            if isinstance(s, Store):
                seen.setdefault(id(s.buf), s.buf)
                ex(s.index); ex(s.value)
            elif isinstance(s, (Decl,)):
                ex(s.init)
            elif isinstance(s, Assign):
                ex(s.value)
            elif isinstance(s, Loop):
                ex(s.extent); ex(s.start); st(s.body)
            elif isinstance(s, If):
                ex(s.cond); st(s.then); st(s.orelse)
            elif isinstance(s, CallStmt):
                for a in s.args:
                    ex(a)

    st(stmts)
    return list(seen.values())
