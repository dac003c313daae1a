"""The CPU schedule: how each kernel runs on a multi-core CPU (targets c, c-avx2, c-avx512).

Decisions, all from the kernel IR's facts (loop roles, sizes) and the target's data:
  * GEMMs (gemm_cpu.py): constant operands packed at compile time into the micro-kernel's
    panels; the orientation (Cᵀ = Bᵀ.Aᵀ when that pads less to the tile); with threads, the
    GEMM is split among them (rows or columns) when it is big enough; its packing scratch
    is per thread. A convolution's im2col matrix that the op also describes as its input
    holds it (`Matrix.direct`) is packed by the GEMM from the input itself (`[gemm]
    im2col_packing`): the im2col buffer and the loops that fill it go.
  * GEMM epilogues (bias, activation, residual add: the elementwise ops fused after it) run
    on each whole micro-tile's sums while they are in registers, where the epilogue allows
    (`epilogue_in_tile`; `[gemm] tile_epilogue = false` in a target file turns it off).
  * Parallel loops: the outermost `spatial` loop whose work pays for a hand-off to the pool
    (`[threads] min_parallel_work` in the target file) runs in parallel; loops inside it,
    and GEMMs inside it, run on the thread that runs the iteration; the scratch its
    iterations each use alone (`Loop.private`) gets a copy per thread.
  * Vectorization hints: innermost spatial loops are marked `vectorized` (the printer gives
    the compiler `ivdep`: their iterations are independent by the op's word), and so are
    innermost reduction loops whose accumulators vector lanes can keep apart (a sum, a
    product, a maximum from a constant start), with those accumulators (the C printer asks
    for an OpenMP SIMD reduction: compilers do not reorder a floating-point sum otherwise).
  * Accumulation precision: float32 accumulators are widened to the target's
    `[numerics] accumulate_float32` (kernel/retype.py).
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..errors import AotcError
from ..kernel.ir import (CALL_COST, F32, PARALLEL, REDUCTION, SERIAL, SPATIAL, VECTORIZED, Assign, BinOp, BufPtr, Buffer, Call,
                         CallStmt, Cast, Const, Decl, Expr, Fail, Gemm, If, Load, Loop, Rewriter, Select, SizeVar, Stmt, Store,
                         Var, as_dim, binop, children, const, dim_expr, map_stmts, replace_buffers, same_expr,
                         stmt_exprs, walk_buffers, walk_expr, walk_stmts)
from ..ir.dims import Dim
from ..kernel.integer_gemm import expand_integer_gemm
from ..kernel.retype import widen_accumulators
from ..targets import Target
from .direct import drop_unused_scratch, read_im2col_directly
from .gemm_cpu import (BF16_MIN, ConstPacker, GemmTiles, capacity, choose_split, computes_transposed, epilogue_in_tile,
                       gemm_macs, packs_im2col, sums_by_broadcast, swap_orientation)

# a loop of unknown trip count (bounds from data or from outer indices) counts as this many
UNKNOWN_TRIPS = 8


def schedule_cpu(graph, steps, target: Target, threads: int) -> None:
    """Schedule every kernel of `steps` in place for `threads` threads."""
    tiles = GemmTiles.of(target)
    packer = ConstPacker(graph, tiles)
    min_work = target.threads.min_parallel_work
    min_gemm = target.threads.min_parallel_gemm_macs
    block = target.threads.scratch_block
    acc = target.numerics.accumulate_float32 or "float64"
    im2col, in_tile = target.gemm.im2col_packing, target.gemm.tile_epilogue
    run, run_stmts = target.vector.run, target.vector.run_max_statements
    for st in steps:
        k = st.kernel
        # (a GEMM computed transposed packs the im2col matrix as its A: aotc_sgemm_call's aim2col)
        k.body = read_im2col_directly(k.body, lambda g: im2col and (packs_im2col(g, target.gemm)
                                                                    or sums_by_broadcast(g, tiles)))
        k.body = _Gemms(st, packer, tiles, threads, min_gemm, in_tile, block).stmts(k.body)
        drop_unused_scratch(k)
        if threads > 1:
            k.body = _parallelize(k.body, min_work, threads, block)
            _private_per_thread(k, block)
        if run > 1:
            k.body = _vector_runs(k.body, run, run_stmts, st.kernel.fresh)
        k.body = _vectorize(k.body)
        k.body = widen_accumulators(k.body, F32, acc)
        work = [g for g in walk_stmts(k.body) if isinstance(g, Gemm) and g.work is not None]
        _share_work_buffer(st, work, threads, block)
        st.drop_unused_params()


# ----------------------------------------------------------------------------- GEMMs
class _Gemms(Rewriter):
    """Every Gemm of a kernel scheduled (_schedule_gemm, _schedule_integer_gemm), knowing the
    loops around it."""

    def __init__(self, st, packer: ConstPacker, tiles: GemmTiles, threads: int, min_gemm: int, in_tile: bool,
                 block: int):
        self.st, self.packer, self.tiles, self.threads = st, packer, tiles, threads
        self.min_gemm, self.in_tile, self.block = min_gemm, in_tile, block
        self.loops: list[Loop] = []

    def visit_Loop(self, s: Loop) -> Loop:
        self.loops.append(s)
        try:
            return self.generic(s)
        finally:
            self.loops.pop()

    def visit_Gemm(self, s: Gemm):
        args = (list(self.loops), self.st, self.packer, self.tiles, self.threads, self.min_gemm, self.in_tile,
                self.block)
        if s.integer:
            return _schedule_integer_gemm(s, *args, _c_dead(s, self.st))
        return _schedule_gemm(s, *args)


def _c_dead(gm: Gemm, st) -> bool:
    """Does nothing read g's C after g but its own epilogue? C must be the kernel's own memory
    (a scratch, or a value made and used only here): a kernel parameter bound to a graph value
    is one that something outside reads (lowering stores only those), directly or through a
    view. And no statement of this kernel outside g may load it."""
    if gm.c.buf.name in st.binds:
        return False
    own = {id(t) for t in walk_stmts([gm] + gm.row_epilogue + gm.epilogue)}
    # (a store counts too: stmt_exprs gives it as a load of what it overwrites)
    return not any(isinstance(x, (Load, BufPtr)) and x.buf is gm.c.buf
                   for s in walk_stmts(st.kernel.body) if id(s) not in own
                   for e in stmt_exprs(s) for x in walk_expr(e))


def _schedule_gemm(gm: Gemm, loops, st, packer: ConstPacker, tiles: GemmTiles, threads: int, min_gemm: int,
                   in_tile: bool, block: int) -> Gemm:
    # with the option bf16, a constant of a product big enough for the AMX tiles is stored as
    # their bfloat16 (half the bytes, nothing converted per run; the float32 path widens it),
    # and the product is never computed transposed: the tiles' 32 x 32 blocks pad M and N alike,
    # and a transposed C is stored element by element (ResNet-50's 7 x 7 layers packed their
    # activations as A for it: 7% of the run)
    bf16 = tiles.bf16 and min(capacity(gm)) >= BF16_MIN
    broadcast = not bf16 and sums_by_broadcast(gm, tiles)
    if not bf16 and not broadcast and computes_transposed(gm, tiles):
        gm = swap_orientation(gm)
    if broadcast:
        # the weights in panels of 16 rows, as aotc_conv_broadcast reads them; nothing packed at
        # run time (no work); threads share the output's columns, each summing every channel of
        # its own; no whole tiles run (the runtime runs the epilogue over each row's segment)
        pa = packer.pack(st, gm, "a", loops, lanes16=True)
        if pa is not None:
            gm = _on_threads(replace(gm, a=pa, conv_broadcast=True), tiles, threads, min_gemm, 0, block)
            return replace(gm, split="cols") if gm.parallel else gm
    pa = packer.pack(st, gm, "a", loops, bf16)
    if pa is not None:
        gm = replace(gm, a=pa)
    else:
        pb = packer.pack(st, gm, "b", loops, bf16)
        if pb is not None:
            gm = replace(gm, b=pb)
    a, b = gm.a, gm.b
    work = tiles.work_floats(*capacity(gm), a.packed and not a.bf16, b.packed and not b.bf16, a.bf16, b.bf16,
                             k_varies=isinstance(gm.K, Expr))
    gm = _on_threads(gm, tiles, threads, min_gemm, work, block)
    return replace(gm, tile_epilogue=in_tile and epilogue_in_tile(gm, tiles))


def _on_threads(gm: Gemm, tiles: GemmTiles, threads: int, min_gemm: int, work_floats: int, block: int) -> Gemm:
    """g split among the threads where it is big enough (`[threads] min_parallel_gemm_macs`),
    with its packing scratch of work_floats (one per thread when split)."""
    parallel = threads > 1 and gemm_macs(gm) >= min_gemm
    split = choose_split(gm, tiles, threads) if parallel else "none"
    work = Buffer("gemm_work", F32, (work_floats,), "scratch", per_thread=split != "none", block=block) \
        if work_floats else None
    sized = [x for x in (gm.M, gm.N, gm.K) if isinstance(x, Expr)]
    when = None
    if split != "none" and sized:      # split only where the run's sizes make it big enough
        M, N, K = (as_dim(x) if isinstance(x, Expr) else int(x) for x in (gm.M, gm.N, gm.K))
        when = _when(M * N * K, min_gemm) if None not in (M, N, K) else None
    return replace(gm, parallel=split != "none", split=split, work=work, when=when)


def _schedule_integer_gemm(gm: Gemm, loops, st, packer: ConstPacker, tiles: GemmTiles, threads: int,
                           min_gemm: int, in_tile: bool, block: int, c_dead: bool) -> list[Stmt]:
    """An integer Gemm: the 8-bit GEMM of runtime/aotc_igemm.h where one operand is uint8 and
    strided and the other a constant int8 with no zero point (a quantized model's weights), the
    constant packed here in quads; the uint8 operand's zero point z comes off in the epilogue:
    sum (u - z) s = sum u s - z sum s, the sums over k of the constant computed here too.
    Otherwise (two run-time operands, a zero point on the int8 one) the plain loops."""
    kinds = {w: getattr(gm, w).buf.value_dtype for w in "ab"}
    signed = [w for w in "ab" if kinds[w] == np.int8]
    unsigned = [w for w in "ab" if kinds[w] == np.uint8]
    zero = {"a": _known(gm.a_zero, st, packer.graph), "b": _known(gm.b_zero, st, packer.graph)}
    if len(signed) == 1 and len(unsigned) == 1 and _is_zero(zero[signed[0]]) \
            and getattr(gm, unsigned[0]).layout == "strided":
        z = zero[unsigned[0]]
        found = packer.pack_int8(st, gm, signed[0], loops, sums=not _is_zero(z))
        if found is not None:
            packed, sums = found
            gm = replace(gm, **{signed[0]: packed}, a_zero=None, b_zero=None)
            if sums is not None:
                gm = _less_zero_point(gm, z, sums, st.kernel.fresh)
            work_bytes = tiles.int8_work_bytes(*capacity(gm), gm.a.packed, gm.b.packed, k_varies=isinstance(gm.K, Expr))
            gm = _on_threads(gm, tiles, threads, min_gemm, -(-work_bytes // 4), block)   # (the scratch is floats)
            return [replace(gm, tile_epilogue=in_tile and epilogue_in_tile(gm, tiles, c_dead))]
    return expand_integer_gemm(gm, st.kernel.fresh)


def _is_zero(z) -> bool:
    return z is None or (isinstance(z, Const) and z.value == 0)


def _known(z: Expr | None, st, graph) -> Expr | None:
    """A zero point read from a constant (a model's initializer) as that constant: its one value,
    or the value every element of it holds (per-channel zeros, as quantizers write them)."""
    if isinstance(z, Cast) and isinstance(z.a, Load) and isinstance(z.a.index, Const):
        src = st.binds.get(z.a.buf.name)
        arr = graph.const(src) if src is not None else None
        if arr is not None and arr.size >= 1 and np.all(arr == arr.reshape(-1)[0]):
            return const(int(arr.reshape(-1)[0]), z.dtype)
    return z


def _less_zero_point(gm: Gemm, z: Expr, sums: Expr, fresh) -> Gemm:
    """g computing sum u s (the raw 8-bit products), its epilogue first taking off z * sums
    (the zero point of the uint8 operand times the int8 one's sums over k)."""
    raw = Var(fresh("sum"), gm.value.dtype)
    fix = Decl(gm.value, BinOp("-", raw, BinOp("*", z, sums, z.dtype), raw.dtype))
    epilogue = gm.epilogue or [Store(gm.c.buf, gm.c.at(gm.i, gm.j), gm.value)]
    return replace(gm, value=raw, epilogue=[fix] + epilogue)


def _share_work_buffer(st, gemms: list[Gemm], threads: int, block: int) -> None:
    """One packing scratch per kernel, as large as its largest GEMM needs (per thread when any
    GEMM of the kernel is split), shared by its GEMMs, which run one after the other."""
    if not gemms:
        return
    size = max(g.work.size for g in gemms)
    per_thread = any(g.work.per_thread for g in gemms)
    buf = Buffer(st.kernel.fresh("gemm_work"), F32, (size,), "scratch", per_thread=per_thread, block=block)
    mapping = {g.work: buf for g in gemms}

    class Share(Rewriter):
        def visit_Gemm(self, s: Gemm) -> Gemm:
            return replace(s, work=mapping[s.work]) if s.work in mapping else s

    st.kernel.body = Share().stmts(st.kernel.body)
    st.kernel.scratch.append(buf)


# ----------------------------------------------------------------------------- parallel loops
def work_estimate(stmts: list[Stmt], bounds: dict | None = None, sizes: bool = False):
    """Rough cost of running a statement list once: statements times trip counts (a GEMM
    counts its multiply-adds / 16, what a vector unit does per step). A trip count that is
    not a constant is bounded through the locals it comes from (a pooling window's
    `hi = min(3, ...)` has at most 3 trips), else counts as UNKNOWN_TRIPS; a run-time size
    (kernel/ir.py SizeVar) at its largest. With `sizes`, the trip counts and GEMM sizes that are
    run-time sizes are kept as such: the result is a Dim polynomial (ir/dims.py) of the run's
    work, an int where nothing in it depends on a run-time size."""
    bounds = {} if bounds is None else bounds
    total = 0
    for s in stmts:
        if isinstance(s, Decl):
            ub = _upper(s.init, bounds)
            if ub is not None:
                bounds[s.var.name] = ub
            total = total + _cost(s)
        elif isinstance(s, Loop):
            from_zero = isinstance(s.start, Const) and s.start.value == 0
            n = as_dim(s.extent) if sizes and from_zero and _has_size(s.extent) else None
            if n is None:
                hi = _upper(s.extent, bounds)
                lo = s.start.value if isinstance(s.start, Const) else 0
                n = max(hi - lo, 0) if hi is not None else UNKNOWN_TRIPS
            inner = work_estimate(s.body, dict(bounds), sizes)
            total = total + n * (inner if isinstance(inner, Dim) else max(inner, 1))
        elif isinstance(s, If):
            total = total + 1 + max(work_estimate(s.then, dict(bounds)), work_estimate(s.orelse, dict(bounds)))
        elif isinstance(s, Gemm):
            M, N, K = capacity(s)
            if sizes:
                found = [as_dim(x) if isinstance(x, Expr) else int(x) for x in (s.M, s.N, s.K)]
                M, N, K = (M, N, K) if None in found else found
            macs = M * N * max(K, 1)
            total = total + (macs.estimate_div(16) if isinstance(macs, Dim) else macs // 16) \
                + M * N * max(work_estimate(s.epilogue), 1)
        elif isinstance(s, (Store, Assign, CallStmt)):
            total = total + _cost(s)
    return total


def _has_size(e) -> bool:
    return any(isinstance(x, SizeVar) for x in walk_expr(e))


def _when(work, need: int):
    """The run-time condition `work >= need` for a parallel loop or GEMM sized at run time, or
    None where it holds for every size (the work's least value reaches `need`) or is static."""
    if not isinstance(work, Dim) or work.lo >= need:
        return None
    return binop(">=", dim_expr(work), const(need))


def _cost(s: Stmt) -> int:
    """One statement: 1, plus CALL_COST per math function call it makes; a runtime call what it
    says it costs."""
    if isinstance(s, CallStmt):
        return s.work
    calls = sum(1 for e in stmt_exprs(s) for x in walk_expr(e) if isinstance(x, Call))
    return 1 + CALL_COST * calls


def _upper(e, bounds: dict):
    """An upper bound of an integer expression, or None."""
    if isinstance(e, Const):
        return e.value if isinstance(e.value, int) else None
    if isinstance(e, SizeVar):
        return e.hi                    # a run-time size: its bound
    if isinstance(e, Var):
        return bounds.get(e.name)
    if isinstance(e, BinOp):
        a, b = _upper(e.a, bounds), _upper(e.b, bounds)
        if e.op == "min":
            known = [x for x in (a, b) if x is not None]
            return min(known) if known else None
        if a is None or b is None:
            return None
        if e.op == "max":
            return max(a, b)
        if e.op == "+":
            return a + b
        if e.op == "*" and a >= 0 and b >= 0 and _nonnegative(e.a) and _nonnegative(e.b):
            return a * b
    if isinstance(e, Select):
        a, b = _upper(e.a, bounds), _upper(e.b, bounds)
        return max(a, b) if a is not None and b is not None else None
    return None


def _nonnegative(e) -> bool:
    """Sizes and their sums and products (a run-time extent of dim_expr's making)."""
    return isinstance(e, SizeVar) or (isinstance(e, Const) and isinstance(e.value, int) and e.value >= 0) or \
        (isinstance(e, BinOp) and e.op in ("+", "*") and _nonnegative(e.a) and _nonnegative(e.b))


# a parallel region inside an ordered loop (an RNN's time steps) runs once per iteration and
# moves its data between cores every time: it must carry this many times the usual work
NESTED_WORK_FACTOR = 4


def _parallelize(stmts: list[Stmt], min_work: int, threads: int, block: int) -> list[Stmt]:
    """Mark the outermost spatial loops worth a hand-off to the pool as parallel. A loop holding
    GEMMs qualifies when its iterations (attention heads, an RNN's directions) divide evenly
    among the threads, or are many: its GEMMs then run whole on the thread that runs the
    iteration, which beats splitting each of them."""
    return _Parallelize(min_work, threads, block).stmts(stmts)


class _Parallelize(Rewriter):
    def __init__(self, min_work: int, threads: int, block: int):
        self.min_work, self.threads, self.block = min_work, threads, block
        self.nested = False          # inside an ordered loop or one with private scratch

    def visit_Loop(self, s: Loop) -> Loop:
        need = self.min_work * (NESTED_WORK_FACTOR if self.nested else 1)
        if _can_parallelize(s, self.threads) and work_estimate([s]) >= need:
            # (work that depends on run-time sizes: the hand-off only where the run's sizes make it)
            return replace(s, kind=PARALLEL, body=_serial_inside(s.body, self.block),
                           when=_when(work_estimate([s], sizes=True), need))
        outer = self.nested
        self.nested = outer or s.role != SPATIAL or bool(s.private)
        try:
            return self.generic(s)
        finally:
            self.nested = outer

    def visit_Gemm(self, s: Gemm) -> Gemm:
        return s


# A loop of GEMMs whose iterations do not divide among the threads is handed to the pool only
# when each thread has at least this many: 3 attention heads on 2 threads as parallel
# iterations took 2 / 3 of the 1-thread time; run one after the other, each GEMM split, 0.55.
UNEVEN_ITERATIONS = 4


def _can_parallelize(lp: Loop, threads: int) -> bool:
    """Spatial, starting at 0, with at least two iterations; with GEMMs inside, as many
    iterations as threads or a multiple, or at least UNEVEN_ITERATIONS a thread (otherwise
    the iterations run in turn, their GEMMs split). (Its private scratch then gets a copy per
    thread: _private_per_thread.)"""
    if lp.role != SPATIAL or not (isinstance(lp.start, Const) and lp.start.value == 0):
        return False
    n = lp.extent.value if isinstance(lp.extent, Const) else None
    if n is not None and n < 2:
        return False
    if any(isinstance(x, Gemm) for x in walk_stmts(lp.body)):
        return n is not None and (n % threads == 0 or n >= UNEVEN_ITERATIONS * threads)
    return True


def _private_per_thread(k, block: int) -> None:
    """The private scratch of a parallel loop (Loop.private: each iteration fills it and uses it
    alone, e.g. an attention head's scores) gets one copy per thread: the task a thread runs
    uses its own (codegen/c/printer.py)."""
    names = {n for s in walk_stmts(k.body) if isinstance(s, Loop) and s.kind == PARALLEL for n in s.private}
    mapping = {b: replace(b, per_thread=True, block=block) for b in k.scratch if b.name in names and not b.per_thread}
    if mapping:
        k.scratch = [mapping.get(b, b) for b in k.scratch]
        k.body = replace_buffers(k.body, mapping)


class _SerialInside(Rewriter):
    """Inside a parallel loop everything runs on the iteration's thread: GEMMs are not split,
    and their packing scratch is per thread."""

    def __init__(self, block: int):
        self.block = block

    def visit_Gemm(self, s: Gemm) -> Gemm:
        work = replace(s.work, per_thread=True, block=self.block) if s.work is not None else None
        return replace(s, parallel=False, split="none", work=work)


def _serial_inside(stmts: list[Stmt], block: int) -> list[Stmt]:
    return _SerialInside(block).stmts(stmts)


# ----------------------------------------------------------------------------- vector runs
# a loop walked in runs may do at most this share of its iterations twice
RUN_WASTE = 0.25


def _vector_runs(stmts: list[Stmt], run: int, max_stmts: int, fresh) -> list[Stmt]:
    """Innermost loops the op marks `rerun` (an iteration may run twice), of constant trip count
    n that is not a multiple of the target's `[vector] run` (its vector lanes) and of at most
    `run_max_statements` statements, walked in runs of constant length: r = run (or run/2,
    run/4: the longest whose extra iterations stay within RUN_WASTE of n), the last run moved
    back to end at n. A compiler then vectorizes every run whole, with no scalar remainder: 28
    Winograd tiles a row on AVX-512 were 16 in a vector, then 8, then 4 one by one, which took
    most of the transforms' time."""

    class Runs(Rewriter):
        def visit_Loop(self, s: Loop) -> Loop:
            return _in_runs(s, run, max_stmts, fresh) or self.generic(s)

        def visit_Gemm(self, s: Gemm) -> Gemm:
            return s

    return Runs().stmts(stmts)


def _in_runs(lp: Loop, run: int, max_stmts: int, fresh) -> Stmt | None:
    """lp in runs (see _vector_runs), or None where that does not apply."""
    if not lp.rerun or lp.role != SPATIAL or lp.kind != SERIAL or len(lp.body) > max_stmts \
            or any(children(x) or isinstance(x, Gemm) for x in lp.body):
        return None
    if not (isinstance(lp.extent, Const) and isinstance(lp.start, Const)):
        return _in_sized_runs(lp, run, fresh)
    if lp.start.value != 0:
        return None
    n = int(lp.extent.value)
    r = next((r for r in (run, run // 2, run // 4) if 1 < r <= n and -(-n // r) * r <= (1 + RUN_WASTE) * n), 0)
    if not r or n % r == 0:             # (whole vectors already)
        return None
    return _runs_of(lp, r, const(n), fresh)


def _runs_of(lp: Loop, r: int, n: Expr, fresh) -> Loop:
    """lp's n >= r iterations as ceil(n / r) runs of r, the last moved back to end at n."""
    outer, first, inner = Var(fresh(f"{lp.var.name}_run")), Var(fresh(f"{lp.var.name}0")), Var(fresh(lp.var.name))
    decls = [Decl(first, binop("+", lp.start, binop("min", binop("*", outer, const(r)), binop("-", n, const(r)))))]
    index = BinOp("+", first, inner, inner.dtype)
    body = map_stmts(lp.body, lambda e: index if isinstance(e, Var) and e.name == lp.var.name else e)
    return Loop(outer, binop("/", binop("+", n, const(r - 1)), const(r)),
                decls + [replace(lp, var=inner, extent=const(r), start=const(0), body=body)], role=SPATIAL)


# runs shorter than this are not worth the test (and a compiler unrolls a loop of two whole,
# which GCC then warns drops its vectorize annotation)
SIZED_RUN_MIN = 4


def _in_sized_runs(lp: Loop, run: int, fresh) -> Stmt | None:
    """lp, whose trip count n depends on run-time sizes, in runs of `run` iterations where
    n >= run at run time, else of run / 2 where n >= run / 2, the last run moved back to end
    at n; below that lp as it was (a run would leave the loop's range). A compiler's loop over
    an unknown count takes whole vectors, then half ones, then one by one: a depthwise
    convolution's rows of 30 outputs were 16 + 8 + 6 scalar iterations of nine multiply-adds."""
    n = binop("-", lp.extent, lp.start)
    d = as_dim(n)
    lo, hi = (d.lo, d.hi) if isinstance(d, Dim) else (d, d) if d is not None else (0, None)
    n = dim_expr(d) if d is not None else n          # (its polynomial, folded)
    out: Stmt = lp
    for r in (run // 2, run):                         # (built inside out: the longest tested first)
        if r < SIZED_RUN_MIN or hi is not None and hi < r:
            continue
        runs = _runs_of(lp, r, n, fresh)
        out = runs if lo >= r else If(binop(">=", n, const(r)), [runs], [out])
    return None if out is lp else out


# ----------------------------------------------------------------------------- vector hints
def _vectorize(stmts: list[Stmt]) -> list[Stmt]:
    """Innermost spatial loops get the `vectorized` kind (iterations are independent); so do
    innermost reduction loops whose accumulators the vector lanes can update apart (the loop
    carries them in `reductions`, see _reductions)."""
    return _Vectorize().stmts(stmts)


class _Vectorize(Rewriter):
    def __init__(self):
        # per statement list being walked: its locals holding a constant, not assigned since
        self.known: list[dict[str, Expr]] = []

    def stmts(self, ss: list[Stmt]) -> list[Stmt]:
        self.known.append({})
        try:
            return super().stmts(ss)
        finally:
            self.known.pop()

    def visit_Decl(self, s: Decl) -> Decl:
        if isinstance(s.init, Const):
            self.known[-1][s.var.name] = s.init
        return s

    def visit_Assign(self, s: Assign) -> Assign:
        self.known[-1].pop(s.var.name, None)
        return s

    def visit_Loop(self, s: Loop) -> Loop:
        known = self.known[-1]
        innermost = s.kind != PARALLEL and not any(children(x) for x in s.body) \
            and not any(isinstance(x, (Gemm, CallStmt)) for x in s.body)      # (a call is no vector lane)
        if innermost and s.role == SPATIAL:
            s = replace(s, kind=VECTORIZED)
        elif innermost and s.role == REDUCTION and (red := _reductions(s, known)):
            s = replace(s, kind=VECTORIZED, reductions=red)
        else:
            s = self.generic(s)
        self._forget_assigned(s.body)
        return s

    def visit_If(self, s: If) -> If:
        s = self.generic(s)
        self._forget_assigned(s.then + s.orelse)
        return s

    def visit_Gemm(self, s: Gemm) -> Gemm:
        return s

    def _forget_assigned(self, stmts: list[Stmt]) -> None:
        for x in walk_stmts(stmts):
            if isinstance(x, Assign):
                self.known[-1].pop(x.var.name, None)


def _reductions(lp: Loop, known: dict) -> tuple:
    """The accumulators of a reduction loop as (name, op) pairs when vector lanes can each
    update their own copy and the copies combine into what the loop computes serially; () when
    not. Each accumulator must be read only by its own updates, all of one form:
      * acc = acc + e, acc = acc * e: reassociated, so the sum changes by rounding only;
      * acc = max(acc, e) / min(acc, e) on integers: exact in any order;
      * acc = e > acc ? e : acc (or <) on floats: a NaN e is skipped in any order, and so the
        result is exact when acc starts from a constant that is not NaN (a NaN start would
        stay NaN serially, but the lanes' combination may not keep it). -0 and +0 tie: either
        may come out where both occur."""
    if any(isinstance(x, (Fail, CallStmt, Gemm, Loop)) for x in walk_stmts(lp.body)):
        return ()
    local = {x.var.name for x in walk_stmts(lp.body) if isinstance(x, Decl)}
    ops: dict[str, str] = {}
    for x in walk_stmts(lp.body):
        if isinstance(x, Assign) and x.var.name not in local:
            op = _update_op(x.var, x.value) if x.var.dtype.kind in "fiu" else None
            if op is None or ops.setdefault(x.var.name, op) != op:
                return ()
            if op in ("smax", "smin") and x.var.dtype.kind == "f":
                start = known.get(x.var.name)
                if start is None or start.value != start.value:
                    return ()
    if not ops:
        return ()
    # an accumulator read anywhere but in its own update would see one lane's part
    for x in walk_stmts(lp.body):
        own = x.var.name if isinstance(x, Assign) and x.var.name in ops else None
        if any(isinstance(v, Var) and v.name in ops and v.name != own for e in stmt_exprs(x) for v in walk_expr(e)):
            return ()
    return tuple((name, {"smax": "max", "smin": "min"}.get(op, op)) for name, op in ops.items())


def _update_op(acc: Var, value: Expr) -> str | None:
    """How `acc = value` combines acc with a term that does not read it: '+', '*', 'max',
    'min' (integers), 'smax' / 'smin' (the select form), or None."""
    def is_acc(e):
        return isinstance(e, Var) and e.name == acc.name

    def free(e):
        return not any(isinstance(v, Var) and v.name == acc.name for v in walk_expr(e))

    if isinstance(value, BinOp) and value.op in ("+", "*", "max", "min"):
        if value.op in ("max", "min") and acc.dtype.kind == "f":
            return None
        if (is_acc(value.a) and free(value.b)) or (is_acc(value.b) and free(value.a)):
            return value.op
        return None
    if isinstance(value, Select) and is_acc(value.b) and free(value.a) and isinstance(value.cond, BinOp):
        c = value.cond
        if c.op in (">", "<") and is_acc(c.b) and same_expr(c.a, value.a):
            return "smax" if c.op == ">" else "smin"
    return None


def check_threads(threads: int) -> int:
    if not isinstance(threads, int) or threads < 0:
        raise AotcError(f"--threads must be a non-negative integer, not {threads!r}",
                        "0 means all cores of this machine")
    return threads


__all__ = ["schedule_cpu", "work_estimate", "check_threads", "REDUCTION", "walk_buffers"]
