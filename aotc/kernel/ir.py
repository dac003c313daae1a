"""Kernel IR: what a kernel computes, and (after the schedule step) how it runs.

(One module of about 1,000 lines on purpose: the node types, the traversal that reads their
fields (Rewriter, walk_stmts) and the Builder ops write with are one vocabulary; every user
imports all three from here.)

A Kernel is one generated function per fusion group. It reads and writes Buffers through
typed scalar expressions, in loop nests, and calls typed micro-kernel statements (`Gemm`).

What the ops say (their `lower()` functions, target-independent):
  * loop *roles*: `spatial` (iterations independent: each writes its own elements and reads
    nothing another iteration writes), `reduction` (iterations combine into one accumulator;
    their order changes only rounding) or `ordered` (the default: iterations depend on earlier
    ones, or write places that come from data);
  * accumulators (`Builder.accumulator`): locals a reduction sums into, in the value's dtype;
  * `Gemm` statements: sizes, strided operands, where the product lands and what is done with
    each element of it (the epilogue);
  * `Fail`: the kernel stops and the run returns a status (an index out of range).

What the schedule step says (aotc/schedule, driven by targets/*.toml), never the ops:
  * loop *kinds*: `serial`, `parallel` (split across a thread pool), `vectorized`,
    `unrolled`, `bound` (a GPU grid/work-group axis: `axis` names it);
  * buffers' address spaces (`global`, `local` (GPU shared memory), `private`, `constant`),
    per-thread scratch, operand layouts (weights packed into GEMM panels), accumulation
    precision (kernel/retype.py), GEMM threading and orientation.

Storage dtype and compute dtype are apart: a Buffer holds `dtype` elements and its values are
computed in `compute` (float16 or bfloat16 stored, float32 computed); Load yields the compute
dtype and every printer converts at the load and the store.

Expressions are immutable; the smart constructors fold constants and drop `*1`, `+0` so that
generated index arithmetic stays readable.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import Callable, Iterator, Optional, Sequence, Union

import numpy as np

from ..ir import dtypes
from ..ir.dims import Dim, Symbol, decide, upper
from .names import RESERVED, c_ident

I64 = dtypes.INT64
I32 = dtypes.INT32
U32 = np.dtype(np.uint32)
U64 = np.dtype(np.uint64)
F32 = dtypes.FLOAT32
F64 = dtypes.FLOAT64
BOOL = dtypes.BOOL

# loop roles (the op's statement about a loop)
SPATIAL, REDUCTION, ORDERED = "spatial", "reduction", "ordered"
ROLES = (SPATIAL, REDUCTION, ORDERED)
# loop kinds (the schedule's choice)
SERIAL, PARALLEL, VECTORIZED, UNROLLED, BOUND = "serial", "parallel", "vectorized", "unrolled", "bound"
KINDS = (SERIAL, PARALLEL, VECTORIZED, UNROLLED, BOUND)
# GPU index axes a bound loop can take: global (one work-item per iteration), group and local
GPU_AXES = tuple(f"{k}.{d}" for k in ("global", "group", "local") for d in range(3))
# buffer address spaces
GLOBAL, LOCAL, PRIVATE, CONSTANT = "global", "local", "private", "constant"
# a warp's tensor-core operand tiles (CUDA's wmma fragments): A (16 x 8), B (8 x 16), C (16 x 16)
MMA_A, MMA_B, MMA_C = "mma_a", "mma_b", "mma_c"
MMA_M, MMA_N, MMA_K = 16, 16, 8          # the shape of one tensor-core step (TF32)
# Call(WARP_XOR, (value, lane_mask)): value as the work-item of this one's warp whose lane is this
# one's lane xor lane_mask has it (CUDA's __shfl_xor_sync); every work-item of the warp runs it
WARP_XOR = "warp_xor"
# Call(BITCAST, (value,)) of dtype T: the value's bits read as T (of the same width; BitCast)
BITCAST = "bitcast"


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
class SizeVar(Var):
    """The size of a run-time dimension (ir/dims.py Symbol `symbol`, in [lo, hi]): a parameter of
    every kernel that reads it (`size_vars`), which the host program reads from the inputs'
    shapes and checks before the first launch."""
    symbol: str = ""
    lo: int = 1               # its range: the symbol's, divided by its multiple
    hi: int = 1
    multiple: int = 1


def size_var(sym) -> SizeVar:
    """The kernel IR variable of a run-time dimension's Symbol: its size over its multiple."""
    m = sym.multiple
    return SizeVar(dim_ident(sym.name, m), I64, sym.name, sym.lo // m, sym.hi // m, m)


def dim_ident(symbol: str, multiple: int = 1) -> str:
    """The C identifier of a run-time dimension's size in kernels and host programs (of the
    size divided by its multiple, where it has one: aotc_dim_h_div32)."""
    return "aotc_dim_" + c_ident(symbol) + (f"_div{multiple}" if multiple > 1 else "")


def dim_expr(d) -> Expr:
    """A graph dimension as an index expression: an int as a constant, a Dim (a polynomial in
    run-time sizes) as their sums and products."""
    if not isinstance(d, Dim):
        return const(int(d))
    total: Expr = const(0)
    for mono, coef in d.terms:
        term: Expr = const(coef)
        for sym in mono:
            term = term * size_var(sym)
        total = total + term
    return total


def as_dim(e):
    """An index expression of run-time sizes (SizeVars, constants, sums and products) as the
    graph's Dim polynomial (ir/dims.py), normalized; None for any other expression."""
    if isinstance(e, int):
        return e
    if isinstance(e, Const) and isinstance(e.value, int) and not isinstance(e.value, bool):
        return int(e.value)
    if isinstance(e, SizeVar):
        m = e.multiple
        return Dim({(Symbol(e.symbol, e.lo * m, e.hi * m, m),): 1})
    if isinstance(e, BinOp) and e.op in ("+", "*"):
        a, b = as_dim(e.a), as_dim(e.b)
        if a is None or b is None:
            return None
        return a + b if e.op == "+" else a * b
    return None


def upper_bound(e) -> int:
    """The largest value of an index expression of run-time sizes (as_dim's forms), each at its
    bound: the capacity the schedule sizes scratch and makes choices for."""
    d = as_dim(e)
    if d is None:
        raise ValueError(f"no upper bound for {e!r}")
    return d.hi if isinstance(d, Dim) else d


@dataclass(frozen=True, eq=False)
class Load(Expr):
    buf: "Buffer"
    index: Expr

    @property
    def dtype(self):  # type: ignore[override]
        return self.buf.value_dtype


@dataclass(frozen=True, eq=False)
class BinOp(Expr):
    op: str          # + - * / % < <= > >= == != && || << >> min max
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
    """A math function by its generic name (exp, tanh, sqrt, erf, pow...); each printer picks
    the spelling for its language and the dtype (expf / exp)."""
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


@dataclass(frozen=True, eq=False)
class GpuIndex(Expr):
    """A work-item's index on a GPU axis (GPU_AXES: global.0, group.1, local.0...), where the
    launch covers the axis exactly (a bound loop is the guarded form)."""
    axis: str
    dtype: np.dtype = I64


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
    if isinstance(x, Dim):                 # a run-time dimension (ir/dims.py)
        return dim_expr(x)
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
        if op == "min": return const(min(x, y), dtype)
        if op == "max": return const(max(x, y), dtype)
    if dtype.kind in "iu" and (op in ("min", "max") or op == "/" and isinstance(b, Const)):
        folded = _fold_sizes(op, a, b)
        if folded is not None:
            return folded
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


def _fold_sizes(op: str, a: Expr, b: Expr) -> Expr | None:
    """min / max of index expressions over run-time sizes where their ranges decide it (a tap
    range's bound against the plane's side), and an exact division of such an expression by a
    positive constant (2 * w + 2 over 2: w + 1); None otherwise."""
    da, db = as_dim(a), as_dim(b)
    if da is None or db is None or not (isinstance(da, Dim) or isinstance(db, Dim)):
        return None
    if op == "/":
        q = da.divide(db) if isinstance(da, Dim) and isinstance(db, int) and db > 0 else None
        return None if q is None else dim_expr(q)
    le = decide(da, "<=", db)
    if le is None:
        le = False if decide(db, "<=", da) else None       # (b <= a everywhere: b is the min)
    if le is None:
        return None
    return (a if le else b) if op == "min" else (b if le else a)


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
    memory is contiguous (row-major). `name` is the kernel parameter's name.

    role: in | out | scratch (kernel-private memory the planner places) | local (declared
    inside the kernel, in `space`). `dtype` is how elements are stored, `compute` (when set)
    the dtype they are computed in. `per_thread`: scratch with one copy per thread, each
    starting on its own `block`-byte block (the target's [threads] scratch_block)."""
    name: str
    dtype: np.dtype
    shape: tuple
    role: str = "in"      # in | out | scratch | local
    space: str = GLOBAL   # global | local | private | constant
    compute: Optional[np.dtype] = None
    per_thread: bool = False
    block: int = 0

    @property
    def value_dtype(self) -> np.dtype:
        return self.compute if self.compute is not None else self.dtype

    @property
    def size(self) -> int:
        """Elements (a Dim, ir/dims.py, where the shape has run-time dims: a loop extent)."""
        n = 1
        for d in self.shape:
            n = n * d
        return n

    @property
    def capacity(self) -> int:
        """Elements at the largest sizes of its run-time dims: what memory holds."""
        n = 1
        for d in self.shape:
            n *= upper(d)
        return n

    @property
    def nbytes(self) -> int:
        return self.capacity * np.dtype(self.dtype).itemsize

    @property
    def thread_stride(self) -> int:
        """Elements from one thread's copy of a per-thread buffer to the next: its size rounded
        up to whole blocks of the target's [threads] scratch_block bytes, so that two threads
        never write one cache line (a 28-float row each, 112 bytes apart, would share lines and
        bounce them between the cores), nor one page, in which a core's prefetchers fetch the
        lines after those it writes: the other thread's (targets/c.toml says what it cost)."""
        if not self.per_thread:
            return self.capacity               # (one copy)
        item = np.dtype(self.dtype).itemsize
        per_block = max(1, self.block // item)
        return -(-self.capacity // per_block) * per_block

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


@dataclass(frozen=True, eq=False)
class BufPtr(Expr):
    """A pointer into a buffer at an element offset (a runtime call's argument)."""
    buf: Buffer
    offset: Expr = field(default_factory=lambda: const(0))

    @property
    def dtype(self):  # type: ignore[override]
        return self.buf.dtype


def scratch_bytes(buf: Buffer, threads: int) -> int:
    """Bytes a scratch buffer takes in the workspace (one copy per thread when per-thread)."""
    if buf.per_thread:
        return buf.thread_stride * np.dtype(buf.dtype).itemsize * threads
    return buf.nbytes


# ----------------------------------------------------------------------------- statements
class Stmt:
    pass


@dataclass(eq=False)
class Store(Stmt):
    """buf[index] = value. `at`, when the op gives it (Builder.store_at), is the element's
    multi-index into buf.shape: an anchor's output stores with it let fusion run the elementwise
    ops that follow right there (lowering/lower.py), as GEMM epilogues do."""
    buf: Buffer
    index: Expr
    value: Expr
    at: Optional[tuple] = None


@dataclass(eq=False)
class Finished(Stmt):
    """A part of buf holds its final values: the elements at the leading multi-index `at`,
    the remaining dims taken row-major from `start` to `end` (a depthwise convolution's output
    plane (n, m) is at = (n, m), end = OH * OW); nothing in the kernel writes or reads them
    after this statement. An op says so where it completes its output a part at a time with
    stores that do not give their multi-index (the plane's edges written tap by tap), so that
    fusion runs the elementwise ops that follow on each part while it is in cache
    (lowering/lower.py); an op that says it of a buffer says it of every element of it, once.
    Lowering expands or drops it: no schedule or code generator sees one."""
    buf: Buffer
    at: tuple
    end: Expr
    start: Expr = field(default_factory=lambda: const(0))


@dataclass(eq=False)
class Decl(Stmt):
    """Declare a local scalar (`var`) with an initial value. `accumulator`: a reduction sums
    into it (the schedule may widen it, kernel/retype.py); `pinned`: its dtype was chosen by
    the op and stays, whatever its initial value becomes."""
    var: Var
    init: Expr
    accumulator: bool = False
    pinned: bool = False


@dataclass(eq=False)
class Assign(Stmt):
    var: Var
    value: Expr


@dataclass(eq=False)
class Loop(Stmt):
    var: Var
    extent: Expr
    body: list[Stmt] = field(default_factory=list)
    kind: str = SERIAL        # the schedule's choice, see KINDS
    start: Expr = field(default_factory=lambda: const(0))
    role: str = ORDERED       # the op's statement, see ROLES
    axis: Optional[str] = None   # bound loops: the GPU index axis (GPU_AXES)
    step: int = 1             # a positive constant (work-items sharing a loop start apart and stride)
    # scratch buffers each iteration fills and then uses alone: the iterations are independent
    # given a copy each (a schedule running them at once must give them one), the op's
    # statement beside `role`, e.g. a Conv's im2col buffer reused for every batch entry
    private: tuple = ()
    # a vectorized reduction loop: its accumulators ((name, op) pairs, op one of + * max min),
    # each of which the vector lanes may update apart and combine at the end (the schedule's
    # finding that this keeps the result, up to rounding for + and *)
    reductions: tuple = ()
    # the op's statement that an iteration may run more than once with the same result: each
    # writes only its own elements, from values nothing in the loop writes (a schedule may then
    # walk the loop in whole vector runs, the last moved back over iterations already done)
    rerun: bool = False
    # a parallel loop whose work depends on run-time sizes: the pool takes it only where this
    # condition holds at run time (enough work for the hand-off), else the calling thread runs it
    when: Optional[Expr] = None


@dataclass(eq=False)
class If(Stmt):
    cond: Expr
    then: list[Stmt] = field(default_factory=list)
    orelse: list[Stmt] = field(default_factory=list)


# What a math function call (Call: exp, tanh, erf...) costs, in the schedule's units of work
# (kernel statements run; schedule/cpu.py work_estimate): a scalar libm exp / tanh / erf is tens
# of cycles, where a vectorized add is a fraction of one. A CallStmt's `work` counts in them too.
CALL_COST = 16


@dataclass(eq=False)
class CallStmt(Stmt):
    """Call a runtime function: args are Buffers / BufPtrs (passed as pointers) or Exprs; `work`:
    what the call costs, in the schedule's units (kernel statements run; schedule/cpu.py
    work_estimate, CALL_COST), for the thread pool's choice of loops."""
    fn: str
    args: list
    work: int = 1


@dataclass(eq=False)
class Comment(Stmt):
    text: str


@dataclass(eq=False)
class Barrier(Stmt):
    """Every work-item of a GPU work-group waits here until all have arrived, and sees their
    writes to `local` buffers (scope 'local') or to global memory too (scope 'global'); scope
    'warp': the work-items of one warp alone (CUDA's __syncwarp, after an `Mma` store)."""
    scope: str = "local"


@dataclass(eq=False)
class Mma(Stmt):
    """One tensor-core step of a warp, which its work-items run together (the GPU schedule's
    `mma_kernel`, for a target that allows TF32: [numerics] tf32). `frag` is a buffer of fragments (space MMA_A,
    MMA_B or MMA_C: a warp's 16 x 8, 8 x 16 or 16 x 16 tile, held across its registers) and
    `at` (a constant, or an unrolled loop's index) which of them. op:
      'zero':  frag[at] = 0
      'load':  frag[at] = the tile of `mem` at `offset` (row-major, `ld` elements a row),
               rounded to TF32; `offset` and `ld` must be multiples of 8 (32-byte aligned)
      'mma':   frag[at] += a[a_at] . b[b_at]  (`a`, `b`: (fragment Buffer, index Expr))
      'store': the tile frag[at] into `mem` at `offset`, row-major, `ld` a row."""
    op: str
    frag: Buffer
    at: Expr = field(default_factory=lambda: const(0))
    mem: Optional[Buffer] = None
    offset: Optional[Expr] = None
    ld: int = 0
    a: Optional[tuple] = None
    b: Optional[tuple] = None

    def offset_ptr(self) -> "BufPtr":
        return BufPtr(self.mem, self.offset)


@dataclass(eq=False)
class Fail(Stmt):
    """Stop the kernel; the run function returns `status` (a name from runtime/aotc_runtime.h,
    e.g. AOTC_ERR_INDEX_OUT_OF_RANGE) and says which kernel failed."""
    status: str
    detail: str = ""


@dataclass(frozen=True, eq=False)
class ConvWindow:
    """The geometry of a 2-D convolution's im2col matrix: for k = (c*KH + kh)*KW + kw and
    j = oh*OW + ow, element (k, j) is the input at channel c, row oh*SH - PH + kh*DH, column
    ow*SW - PW + kw*DW, and 0 where that is outside the H x W input (a 1-D one has H = 1)."""
    size: tuple      # (H, W)
    kernel: tuple    # (KH, KW)
    strides: tuple
    dilations: tuple
    pads: tuple      # (PH, PW): padding before
    out: tuple       # (OH, OW)


IM2COL_U32_LIMIT = 1 << 31   # an im2col matrix reads an input of fewer elements in 32-bit arithmetic


@dataclass(frozen=True, eq=False)
class Matrix:
    """A matrix operand: element (r, c) at buf[offset + r*rs + c*cs]. `layout` other than
    'strided' says how else to read it, and then rs and cs are 0:
      * 'panels_a' / 'panels_b': a constant the schedule packed into the GEMM's panels
        (schedule/gemm_cpu.py); `offset` is where this matrix's panels start;
      * 'bf16_a' / 'bf16_b': a constant the schedule stored as bfloat16 in the AMX tiles' layout
        (the option bf16; schedule/gemm_cpu.py pack_a_bf16 / pack_b_bf16), likewise;
      * 'im2col': a convolution's im2col matrix read from the input itself (`window` says how;
        `offset` is where the input's channels start); 'im2col_t' the same matrix transposed
        (the A of a convolution computed as Cᵀ = im2colᵀ . Wᵀ).
    `direct`, on a strided matrix that an op fills itself (an im2col buffer), is the same
    matrix as the op's input holds it (layout 'im2col'): a schedule whose GEMM can read that
    skips the buffer and the statements that fill it."""
    buf: Buffer
    offset: Expr
    rs: int
    cs: int
    layout: str = "strided"
    window: Optional[ConvWindow] = None
    direct: Optional["Matrix"] = None

    @property
    def packed(self) -> bool:
        """Packed at compile time, into panels or bfloat16 tiles (read as it is stored)."""
        return self.layout.startswith(("panels", "bf16"))

    @property
    def bf16(self) -> bool:
        """Stored as bfloat16 in the AMX tiles' layout (aotc_sgemm_call's Ah / Bh)."""
        return self.layout.startswith("bf16")

    def at(self, r: Expr, c: Expr) -> Expr:
        return self.offset + wrap(r) * self.rs + wrap(c) * self.cs

    def element(self, r: Expr, c: Expr, local: Callable[[str, Expr], Expr] = lambda name, e: e) -> Expr:
        """Element (r, c) as an expression: a load, or for an 'im2col' matrix the input element
        its window reaches, 0 in the padding. `local(name, e)` may give a subexpression a name
        (Builder.local) for readable code.

        The im2col arithmetic is unsigned 32-bit where the input has under 2^31 elements
        (cheaper than 64-bit on GPUs, whose integer units are 32 bits wide): an input row or
        column before the padding wraps around to a large value, so one compare per axis tests
        both of its bounds, and only for the axes the window can leave."""
        if self.layout == "strided":
            return Load(self.buf, self.at(r, c))
        if self.layout == "im2col_t":
            return self.transposed().element(c, r, local)
        if self.layout != "im2col":
            raise ValueError(f"a {self.layout} matrix is read by the packed GEMM only")
        w = self.window
        (H, W), (KH, KW), (SH, SW), (DH, DW), (PH, PW), (OH, OW) = \
            w.size, w.kernel, w.strides, w.dilations, w.pads, w.out
        r, c = wrap(r), wrap(c)
        if self.buf.capacity < IM2COL_U32_LIMIT:
            r, c = cast(r, U32), cast(c, U32)
        oh, ow = (c / OW, c % OW) if isinstance(OH, Dim) or OH > 1 else (wrap(0, c), c)
        ih = local("ih", oh * SH + (r / KW) % KH * DH - PH)
        iw = local("iw", ow * SW + r % KW * DW - PW)
        value = Load(self.buf, self.offset + cast((r / (KH * KW) * H + ih) * W + iw, I64))
        inside = []
        for x, pad, last, n in ((ih, PH, (OH - 1) * SH - PH + (KH - 1) * DH, H),
                                (iw, PW, (OW - 1) * SW - PW + (KW - 1) * DW, W)):
            past = decide(last, ">=", n) is not False        # (over run-time sizes: unless never)
            if x.dtype == U32 and (pad > 0 or past):
                inside.append(x < n)
            elif x.dtype != U32:
                inside += ([x >= 0] if pad > 0 else []) + ([x < n] if past else [])
        if not inside:
            return value
        cond = inside[0]
        for x in inside[1:]:
            cond = binop("&&", cond, x)
        return select(cond, value, const(0.0, self.buf.value_dtype))

    def transposed(self) -> "Matrix":
        if self.layout in ("im2col", "im2col_t"):
            return replace(self, layout="im2col_t" if self.layout == "im2col" else "im2col")
        return Matrix(self.buf, self.offset, self.cs, self.rs, self.layout)


def extent(x) -> Union[int, Expr]:
    """A size as a Gemm or a Matrix holds it: an int, or an index expression of run-time sizes."""
    return dim_expr(x) if isinstance(x, Dim) else x if isinstance(x, Expr) else int(x)


def matrix(buf: Buffer, offset=0, rs: int = 0, cs: int = 1) -> Matrix:
    return Matrix(buf, wrap(offset), extent(rs), extent(cs))


@dataclass(frozen=True, eq=False)
class GemmDest:
    """Where C(i, j) of a Gemm lands in its output buffer, as a multi-index of `buf.shape`:
    the dims in `rows` are walked by i (row-major over them), the dims in `cols` by j, every
    other dim d stays at index[d]; for a walked dim, index[d] is where the walk starts. This is
    what lets fusion evaluate the elementwise ops that follow at (i, j) (lowering.py)."""
    buf: Buffer
    index: tuple
    rows: tuple
    cols: tuple

    def matrix(self) -> Matrix:
        st = self.buf.strides()
        off = const(0)
        for d, ix in enumerate(self.index):
            off = off + wrap(ix) * st[d]
        rs = st[self.rows[-1]] if self.rows else 0
        cs = st[self.cols[-1]] if self.cols else 0
        return Matrix(self.buf, off, extent(rs), extent(cs))


@dataclass(eq=False)
class Gemm(Stmt):
    """C[M, N] = A[M, K] . B[K, N] (+ C when `accumulate`), float32, then for every element
    (i, j) the `epilogue` runs with `value` holding the result; `row_epilogue` is its part
    that depends on i only (hoisted out of the column loop). No epilogue: C(i, j) = value.

    An integer Gemm has 8-bit operands (uint8 or int8 buffers) and an int32 C and `value`:
    C(i, j) = sum over k of (A(i, k) - a_zero) * (B(k, j) - b_zero), exactly, the zero points
    being int32 scalar expressions (None: 0). How that is computed (an 8-bit GEMM with the zero
    points folded into constants, or plain loops) is the schedule's choice.

    `dest` (when the op gives one) says where C lands in the op's output, `result` what the
    op makes of each value (bias, alpha/beta): lowering turns them, plus any fused
    elementwise ops, into the epilogue. The schedule sets `parallel` (the GEMM itself is
    split across threads), `work` (its packing scratch), operand layouts and
    `tile_epilogue`."""
    M: int
    N: int
    K: int
    a: Matrix
    b: Matrix
    c: Matrix
    accumulate: bool = False
    i: Var = field(default_factory=lambda: Var("i"))
    j: Var = field(default_factory=lambda: Var("j"))
    value: Var = field(default_factory=lambda: Var("acc", F32))
    dest: Optional[GemmDest] = None
    result: Optional[Expr] = None
    # (statement lists are walked in field order: the row part before the part per element)
    row_epilogue: list[Stmt] = field(default_factory=list)
    epilogue: list[Stmt] = field(default_factory=list)
    parallel: bool = False
    split: str = "none"       # how a parallel GEMM splits C among threads: rows | cols | none
    work: Optional[Buffer] = None
    # the schedule's choice: whole micro-tiles run the epilogue on their sums before storing
    # them, one vector of consecutive columns at a time, instead of storing the sums and then
    # running it over the stored tile (schedule/gemm_cpu.py epilogue_in_tile)
    tile_epilogue: bool = False
    # the schedule's choice for a convolution's GEMM that reads its im2col matrix from the input
    # (b.layout 'im2col') and has few rows: summed with the output channels in vector lanes,
    # nothing packed but the weights (schedule/gemm_cpu.py sums_by_broadcast)
    conv_broadcast: bool = False
    # a parallel GEMM of run-time size: split among the threads only where this holds at run time
    when: Optional[Expr] = None
    a_zero: Optional[Expr] = None     # an integer Gemm's zero points (see above)
    b_zero: Optional[Expr] = None

    @property
    def integer(self) -> bool:
        """8-bit integer operands, int32 C (else float32 throughout; an operand stored as bfloat16
        tiles, uint16 bits, is float)."""
        return self.a.buf.value_dtype.kind in "iu" and not self.a.bf16


@dataclass(eq=False)
class Kernel:
    """One generated function. `params`: the buffers it is given (inputs, then outputs);
    `scratch`: kernel-private memory the planner places; `aliased`: names of params that may
    share memory with another param (no `restrict` for them; set after memory planning)."""
    name: str
    comment: str
    params: list[Buffer]
    body: list[Stmt]
    scratch: list[Buffer] = field(default_factory=list)
    aliased: frozenset = frozenset()
    names_used: set = field(default_factory=set)     # identifiers taken (see Builder.fresh)
    index: int = -1          # device kernels: the number of the fusion kernel they come from
    scalars: list = field(default_factory=list)      # device kernels: host loop indices they take

    def fresh(self, hint: str) -> str:
        """A new identifier for this kernel (the schedule adds parameters and scratch)."""
        name, k = hint, 0
        while name in self.names_used or name in RESERVED:
            k += 1
            name = f"{hint}{k}"
        self.names_used.add(name)
        return name

    @property
    def can_fail(self) -> bool:
        return any(isinstance(s, Fail) for s in walk_stmts(self.body))

    @property
    def size_vars(self) -> list["SizeVar"]:
        """The run-time sizes the kernel reads (parameters after its buffers), by name."""
        found = {}
        for s in walk_stmts(self.body):
            for e in stmt_exprs(s):
                for x in walk_expr(e):
                    if isinstance(x, SizeVar):
                        found[x.name] = x
        return [found[k] for k in sorted(found)]


# ----------------------------------------------------------------------------- traversal
def _fields(cls) -> tuple:
    names = _FIELDS.get(cls)
    if names is None:
        names = _FIELDS[cls] = tuple(f.name for f in fields(cls))
    return names


_FIELDS: dict = {}


def _is_stmt_list(v) -> bool:
    return isinstance(v, list) and bool(v) and isinstance(v[0], Stmt)


def children(s: Stmt) -> list[list[Stmt]]:
    """The statement lists nested in a statement (a Loop's body, an If's branches, a Gemm's
    epilogues: every field holding statements)."""
    return [v for v in (getattr(s, f) for f in _fields(type(s))) if _is_stmt_list(v)]


def walk_stmts(stmts: list[Stmt]) -> Iterator[Stmt]:
    """Every statement, depth first, in program order."""
    for s in stmts:
        yield s
        for body in children(s):
            yield from walk_stmts(body)


def stmt_exprs(s: Stmt) -> list:
    """The expressions a statement uses directly (not those of nested statements): what it
    reads, a store's address included (as a load of it); a Gemm's operands as pointers (its
    loop variables and accumulator are its own, defined by it)."""
    if isinstance(s, Store):
        return [Load(s.buf, s.index), s.value]
    if isinstance(s, Decl):
        return [s.init]
    if isinstance(s, Assign):
        return [s.value]
    if isinstance(s, Loop):
        return [s.extent, s.start] + ([s.when] if s.when is not None else [])
    if isinstance(s, If):
        return [s.cond]
    if isinstance(s, CallStmt):
        return list(s.args)
    if isinstance(s, Gemm):
        out = []
        for m in (s.a, s.b, s.c):
            out += [BufPtr(m.buf, m.offset)]
            if m.direct is not None:
                out.append(BufPtr(m.direct.buf, m.direct.offset))
        if s.work is not None:
            out.append(s.work)
        out += [x for x in (s.M, s.N, s.K, s.when) if isinstance(x, Expr)]
        return out + [z for z in (s.a_zero, s.b_zero) if z is not None]
    if isinstance(s, Mma):
        out = [s.frag, s.at] + [x for pair in (s.a, s.b) if pair is not None for x in pair]
        return out + ([BufPtr(s.mem, s.offset)] if s.mem is not None else [])
    return []


def walk_expr(e) -> Iterator:
    """Every sub-expression (Buffers appear as themselves), depth first."""
    yield e
    if isinstance(e, Expr):
        for f in _fields(type(e)):
            v = getattr(e, f)
            if isinstance(v, Expr):
                yield from walk_expr(v)
            elif isinstance(v, tuple):
                for x in v:
                    if isinstance(x, Expr):
                        yield from walk_expr(x)


def same_expr(a, b) -> bool:
    """Whether two expressions compute the same thing (the same tree; buffers by name)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, Var):
        return a.name == b.name and a.dtype == b.dtype
    if isinstance(a, Const):
        return a.dtype == b.dtype and (a.value == b.value or (a.value != a.value and b.value != b.value))
    if isinstance(a, Load):
        return a.buf.name == b.buf.name and same_expr(a.index, b.index)
    if isinstance(a, BinOp):
        return a.op == b.op and a.dtype == b.dtype and same_expr(a.a, b.a) and same_expr(a.b, b.b)
    if isinstance(a, (Unary, Cast)):
        return getattr(a, "op", None) == getattr(b, "op", None) and a.dtype == b.dtype and same_expr(a.a, b.a)
    if isinstance(a, Call):
        return a.fn == b.fn and a.dtype == b.dtype and len(a.args) == len(b.args) \
            and all(same_expr(x, y) for x, y in zip(a.args, b.args))
    if isinstance(a, Select):
        return a.dtype == b.dtype and all(same_expr(getattr(a, f), getattr(b, f)) for f in ("cond", "a", "b"))
    return a is b


class Rewriter:
    """Rebuilds kernel IR, driven by each statement's and expression's dataclass fields, so that
    every kind is walked the same way and a new kind needs no traversal code of its own.

    The default rebuilds every field of a node: an expression through `expr` (bottom-up, each
    node then handed to `expr_hook`), a statement list through `stmts`, a Buffer through
    `buffer_hook`, a Matrix, GemmDest or tuple field by field; names, numbers, roles and kinds
    are kept. A node whose fields all come back the same is returned itself, others are new
    (kernel IR is never changed in place). A subclass overrides what it changes:
      visit_<Class>(node)  a statement (visit_Loop, visit_Gemm, ...) or a Matrix / GemmDest:
                           returns what replaces it (a statement may become a list of them,
                           spliced in, or None, dropped); `self.generic(node)` inside it is the
                           default rebuild, statements nested in it included;
      expr_hook(e)         an expression whose children are rebuilt -> its replacement;
      buffer_hook(b)       a buffer (of a Load, Store, BufPtr, Matrix, Gemm, Mma...).
    """

    def stmts(self, ss: list[Stmt]) -> list[Stmt]:
        out, same = [], True
        for s in ss:
            r = self.node(s)
            if r is s:
                out.append(s)
                continue
            same = False
            if isinstance(r, list):
                out.extend(r)
            elif r is not None:
                out.append(r)
        return ss if same else out

    def node(self, n):
        visit = getattr(self, "visit_" + type(n).__name__, None)
        return visit(n) if visit is not None else self.generic(n)

    def generic(self, n):
        changes = {}
        for f in _fields(type(n)):
            v = getattr(n, f)
            w = self.value(v)
            if w is not v:
                changes[f] = w
        return replace(n, **changes) if changes else n

    def value(self, v):
        if isinstance(v, Expr):
            return self.expr(v)
        if isinstance(v, Buffer):
            return self.buffer_hook(v)
        if isinstance(v, (Matrix, GemmDest)):
            return self.node(v)
        if isinstance(v, list):
            if _is_stmt_list(v):
                return self.stmts(v)
            return self._each(v, list)
        if isinstance(v, tuple):
            return self._each(v, tuple)
        return v

    def _each(self, v, kind):
        out = [self.value(x) for x in v]
        return v if all(x is y for x, y in zip(out, v)) else kind(out)

    def expr(self, e):
        return self.expr_hook(self.generic(e))

    def expr_hook(self, e):
        return e

    def buffer_hook(self, b: Buffer) -> Buffer:
        return b


class _ExprMap(Rewriter):
    def __init__(self, f: Callable):
        self.expr_hook = f


def map_expr(e, f: Callable):
    """Rebuild an expression bottom-up: f(node with rebuilt children) -> replacement."""
    return _ExprMap(f).expr(e)


def map_stmts(stmts: list[Stmt], f: Callable) -> list[Stmt]:
    """A statement list with every expression mapped by map_expr(., f) (loop variables,
    locals and a Gemm's operand offsets included)."""
    return _ExprMap(f).stmts(stmts)


def walk_buffers(stmts: list[Stmt]) -> list[Buffer]:
    """Every buffer a statement list touches, in first-use order."""
    seen: dict[int, Buffer] = {}
    for s in walk_stmts(stmts):
        if isinstance(s, Store):
            seen.setdefault(id(s.buf), s.buf)
        for e in stmt_exprs(s):
            for x in walk_expr(e):
                if isinstance(x, (Load, BufPtr)):
                    seen.setdefault(id(x.buf), x.buf)
                elif isinstance(x, Buffer):
                    seen.setdefault(id(x), x)
    return list(seen.values())


class _BufferSwap(Rewriter):
    def __init__(self, mapping: dict):
        self.mapping = mapping

    def buffer_hook(self, b: Buffer) -> Buffer:
        return self.mapping.get(b, b)


def replace_buffers(stmts: list[Stmt], mapping: dict) -> list[Stmt]:
    """The statements with buffers swapped as `mapping` ({old Buffer: new Buffer}) says."""
    return _BufferSwap(mapping).stmts(stmts)


# ----------------------------------------------------------------------------- builder
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

    def loop(self, extent, name: str = "i", role: str = ORDERED, start=0, rerun: bool = False):
        """A loop; `role` says what it is (SPATIAL / REDUCTION / ORDERED, see the module doc),
        `rerun` that its iterations may run twice (Loop.rerun)."""
        assert role in ROLES, role
        return _LoopCtx(self, Loop(Var(self.fresh(name)), wrap(extent), [], SERIAL, wrap(start), role, rerun=rerun))

    def loops(self, shape: Sequence[int], names: Sequence[str] | None = None, role: str = ORDERED,
              private: Sequence[Buffer] = ()):
        """Nested loops over a whole shape, all of one role; yields the index variables.
        `private`: scratch every iteration fills and uses alone (see Loop.private)."""
        assert role in ROLES, role
        return _NestCtx(self, shape, names, role, tuple(b.name for b in private))

    def if_(self, cond):
        return _IfCtx(self, If(wrap(cond)))

    def local(self, hint: str, init, dtype=None) -> Var:
        """A local scalar. With `dtype`, the local has that type whatever its initial value
        becomes later (the accumulation precision the schedule picks, say)."""
        init = wrap(init)
        if dtype is not None:
            init = cast(init, dtype)
        v = Var(self.fresh(hint), init.dtype)
        self.emit(Decl(v, init, pinned=dtype is not None))
        return v

    def accumulator(self, hint: str, init) -> Var:
        """A local a reduction accumulates into, in the dtype of `init`: the schedule may widen
        it (float32 sums in float64 on CPU targets, kernel/retype.py)."""
        init = wrap(init)
        v = Var(self.fresh(hint), init.dtype)
        self.emit(Decl(v, init, accumulator=True))
        return v

    def assign(self, var: Var, value) -> None:
        self.emit(Assign(var, cast(wrap(value, var), var.dtype)))

    def store(self, buf: Buffer, idx, value) -> None:
        index = buf.flat(idx) if isinstance(idx, (tuple, list)) else wrap(idx)
        self.emit(Store(buf, index, cast(wrap(value, None), buf.value_dtype)))

    def store_at(self, buf: Buffer, idx: Sequence, value) -> None:
        """buf[idx] = value, the store remembering its multi-index (see Store.at)."""
        idx = tuple(wrap(i) for i in idx)
        self.emit(Store(buf, buf.flat(idx), cast(wrap(value, None), buf.value_dtype), at=idx))

    def finished(self, buf: Buffer, at: Sequence, end, start=0) -> None:
        """Say that the part of buf at `at`, elements [start, end) of the dims after it, is final
        (see Finished)."""
        self.emit(Finished(buf, tuple(wrap(i) for i in at), wrap(end), wrap(start)))

    def call(self, fn: str, *args, work: int = 1) -> None:
        self.emit(CallStmt(fn, list(args), work))

    def fail(self, status: str, detail: str = "") -> None:
        self.emit(Fail(status, detail))

    def gemm(self, M: int, N: int, K: int, a: Matrix, b: Matrix, dest: GemmDest, accumulate: bool = False,
             result: Callable | None = None, a_zero: Expr | None = None, b_zero: Expr | None = None) -> Gemm:
        """C = A.B (+ C when accumulate) landing in `dest`; `result(value, i, j)` is what the
        op makes of each element (bias, alpha/beta), default the value itself. 8-bit integer
        operands make an integer Gemm (Gemm's doc), of (A - a_zero) . (B - b_zero)."""
        i, j = Var(self.fresh("i")), Var(self.fresh("j"))
        value = Var(self.fresh("acc"), I32 if a.buf.value_dtype.kind in "iu" else F32)
        g = Gemm(extent(M), extent(N), extent(K), a, b, dest.matrix(), accumulate, i, j, value, dest,
                 result(value, i, j) if result is not None else None, a_zero=a_zero, b_zero=b_zero)
        self.emit(g)
        return g


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
    def __init__(self, b, shape, names, role, private=()):
        self.b, self.shape, self.role, self.private = b, list(shape), role, private
        self.names = list(names) if names else [f"i{k}" for k in range(len(shape))]
        self.depth = 0

    def __enter__(self):
        idx = []
        for d, nm in zip(self.shape, self.names):
            if d == 1:
                idx.append(const(0))
                continue
            lp = Loop(Var(self.b.fresh(nm)), wrap(d), [], SERIAL, const(0), self.role, private=self.private)
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


def free_variables(stmts: list[Stmt], bound: Sequence[Var] = (), strict: bool = True
                   ) -> tuple[list[Buffer], list[Var]]:
    """What a statement list needs from outside: the buffers it touches (not kernel-local
    ones) and the variables it reads without defining them (`bound` counts as defined).
    When `strict`, assigning a variable defined outside is a ValueError (iterations would race);
    else such a variable counts as free."""
    defined = {v.name for v in bound}
    free: dict[str, Var] = {}
    for s in walk_stmts(stmts):
        if isinstance(s, Assign) and s.var.name not in defined:
            if strict:
                raise ValueError(f"{s.var.name!r} is assigned here but defined outside")
            free.setdefault(s.var.name, s.var)
        for e in stmt_exprs(s):
            for x in walk_expr(e):
                if isinstance(x, Var) and x.name not in defined:
                    free.setdefault(x.name, x)
        if isinstance(s, Decl):
            defined.add(s.var.name)
        elif isinstance(s, Loop):
            defined.add(s.var.name)
        elif isinstance(s, Gemm):
            defined |= {s.i.name, s.j.name, s.value.name}
    bufs = [b for b in walk_buffers(stmts) if b.role != "local"]
    return bufs, list(free.values())


def evaluate(e: Expr, env: dict) -> Union[int, float, bool]:
    """The value of an index expression for variable values `env` (name -> number), with C's
    integer division and remainder."""
    if isinstance(e, Const):
        return e.value
    if isinstance(e, Var):
        return env[e.name]
    if isinstance(e, BinOp):
        a, b = evaluate(e.a, env), evaluate(e.b, env)
        if e.op == "/" and e.dtype.kind in "iu":
            q = abs(a) // abs(b)
            return q if (a >= 0) == (b >= 0) else -q
        if e.op == "%" and e.dtype.kind in "iu":
            return a - b * evaluate(BinOp("/", Const(a, e.dtype), Const(b, e.dtype), e.dtype), {})
        return {"+": lambda: a + b, "-": lambda: a - b, "*": lambda: a * b, "/": lambda: a / b,
                "<": lambda: a < b, "<=": lambda: a <= b, ">": lambda: a > b, ">=": lambda: a >= b,
                "==": lambda: a == b, "!=": lambda: a != b, "&&": lambda: bool(a and b),
                "||": lambda: bool(a or b), "min": lambda: min(a, b), "max": lambda: max(a, b),
                "<<": lambda: a << b, ">>": lambda: a >> b, "&": lambda: a & b, "|": lambda: a | b,
                "^": lambda: a ^ b}[e.op]()
    if isinstance(e, Unary):
        a = evaluate(e.a, env)
        return -a if e.op == "-" else (not a)
    if isinstance(e, Select):
        return evaluate(e.a, env) if evaluate(e.cond, env) else evaluate(e.b, env)
    if isinstance(e, Cast):
        v = evaluate(e.a, env)
        return int(v) if e.dtype.kind in "iu" else (bool(v) if e.dtype.kind == "b" else float(v))
    raise ValueError(f"cannot evaluate {e!r} at compile time")


def expr_vars(e) -> list[str]:
    """Names of the variables an expression reads, in first-use order."""
    return list(dict.fromkeys(x.name for x in walk_expr(e) if isinstance(x, Var)))
