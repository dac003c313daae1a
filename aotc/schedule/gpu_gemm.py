"""GEMM templates of the GPU schedule, written in the kernel IR (schedule/gpu.py forms the launches
that use them):
  * `gemm_kernel`: a work-group per TM x TN tile of C, A and B tiles staged in `local` memory
    between barriers (a convolution's B, its im2col matrix, staged straight from the input),
    each work-item accumulating RM x RN results in `private` registers, then the Gemm's
    epilogue at each of its elements; the next K slice loaded into registers while this one is
    summed; on a target with `warp` set, each work-item's results strided across the tile in
    runs of 4 and the staged rows padded, so that neither reads nor writes of `local` memory
    conflict (tile_pad);
  * `mma_kernel`: where the target allows TF32, warps of the work-group summing 16 x 16
    fragments on tensor cores (`Mma` statements, which only the CUDA printer prints);
  * `gemv_loop`: a GEMM of few rows as one work-item per result;
  * `split_sum_kernel`: the second launch of a GEMM split along K, summing the slices.
`gemm_shape` / `mma_shape` choose tiles, their halving and K splits from the target's [gpu]
table (docs/GPU.md has the measurements behind them).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from ..ir.dims import upper
from ..kernel.ir import (F32, I64, LOCAL, MMA_A, MMA_B, MMA_C, MMA_K, MMA_M, MMA_N, PRIVATE, REDUCTION, SPATIAL,
                         UNROLLED, Barrier, Buffer, Builder, Decl, Expr, Gemm, GpuIndex, Kernel, Load, Loop, Matrix,
                         Mma, Stmt, Var, as_dim, binop, const, select, upper_bound, wrap)
from ..targets import GpuConfig


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def _ceil_expr(n, q: int):
    """ceil(n / q) of an int, or of a size over run-time dimensions (an Expr or a Dim: then an
    index expression the host evaluates)."""
    if isinstance(n, int):
        return -(-n // q)
    return (wrap(n) + (q - 1)) / q if q > 1 else wrap(n)


def _largest(gm: Gemm, batch: tuple) -> tuple[int, int, int, int]:
    """M, N, K and the batch's depth at their largest: what a GEMM over run-time dimensions is
    cut for (every size in the range then runs the same tiles, the grid covering its own C)."""
    depth = 1
    for _, e in batch:
        depth *= upper(e)
    return upper_bound(gm.M), upper_bound(gm.N), upper_bound(gm.K), depth


@dataclass(frozen=True)
class GemmShape:
    """How one GEMM launch is cut: the tile (a copy of the target's, or halved for a small
    product), `batch` spatial loops over independent products on grid axis 2, or `split` K
    chunks of `chunk` on grid axis 2 whose partial products a second launch sums."""
    p: GpuConfig
    batch: tuple = ()             # ((Var, extent), ...) outermost first
    split: int = 1
    chunk: int = 0

    @property
    def depth(self):
        """Products on grid axis 2: an int, or a Dim where the batch loops run over run-time sizes."""
        n = self.split
        for _, e in self.batch:
            n = n * e
        return n


def gemm_shape(gm: Gemm, p: GpuConfig, batch: tuple = (), at: tuple | None = None) -> GemmShape:
    """The target's tile, halved while the launch would have fewer than `min_groups` groups (a
    small product leaves most of the device idle) down to `min_results` results per work-item,
    then K split while it still would. A product that even so has fewer than `floor_groups`
    groups (K too short to split) gets tiles halved further, down to 2 x 2 results. Halved
    tiles stage K `small_tk` at a time where that is set (fewer barriers per multiply-add).
    Over run-time dimensions the cut is made for M, N, K and depth `at` (ints: one variant's
    sizes, schedule/gpu.py gemm_variants), else for the largest; K's chunks then cover the
    largest K."""
    M, N, K, depth = at or _largest(gm, batch)

    def groups(q):
        return -(-M // q.tm) * -(-N // q.tn) * depth

    def halved(q, least):
        # (2 x 2 at least: one loads two operands per multiply-add)
        while q.min_groups and groups(q) < q.min_groups and q.rm % 2 == 0 and q.rn % 2 == 0 \
                and q.rm * q.rn // 4 >= max(least, 4):
            tk = q.small_tk or q.tk
            if (q.tm // 2 * tk) % q.threads() or (q.tn // 2 * tk) % q.threads():
                break
            q = replace(q, tm=q.tm // 2, tn=q.tn // 2, rm=q.rm // 2, rn=q.rn // 2, tk=tk)
        return q

    def split_of(q):
        if q.min_groups and not batch and groups(q) < q.min_groups:
            return max(1, min(-(-q.min_groups // groups(q)), K // max(q.split_min_k, q.tk)))
        return 1

    p = halved(p, p.min_results)
    split = split_of(p)
    if groups(p) * split < p.floor_groups:
        p = halved(p, 4)
        split = split_of(p)
    if split < 2:
        return GemmShape(p, batch)
    chunk = _ceil(_ceil(K, split), p.tk) * p.tk           # a whole number of K steps
    return GemmShape(p, (), _ceil(upper_bound(gm.K), chunk), chunk)


BANKS = 32                   # local-memory banks, 4 bytes wide (NVIDIA's shared memory)


def tile_pad(p: "GpuConfig") -> int:
    """Words added to each row of a staged GEMM tile, on a device with warps, so that a warp
    storing a tile walked along K (tk consecutive K, 32/tk rows or columns) hits 32 banks, and
    rows stay 16-byte aligned for 128-bit reads."""
    return max(VECTOR, BANKS // p.tk) if p.warp else 0


VECTOR = 4                   # floats in a 128-bit local-memory read


def _vector(n: int) -> int:
    """The widest read (1, 2 or 4 floats) that a work-item's n rows or columns split into."""
    return next(v for v in (VECTOR, 2, 1) if n % v == 0)


def _tile_walk(m: Matrix, along_k: str, extent: int, tk: int, e: Expr) -> tuple[Expr, Expr]:
    """(k, other) of element e of a staged tile of extent x tk, so that consecutive work-items
    read consecutive addresses of the operand (coalesced): along K when K is the operand's unit
    stride, else along the other dim. `along_k` names the stride of K ('cs' for A, 'rs' for B)."""
    k_unit = getattr(m, along_k) == 1
    other_unit = getattr(m, "rs" if along_k == "cs" else "cs") == 1
    if k_unit and not other_unit:
        return e % tk, e / tk
    return e / extent, e % extent


class _GemmFrame:
    """What the tiled GEMM kernels share: the work-group's place (group.0: the tile's column
    block bn, group.1: its row block bm, group.2: the batch entry or K chunk), the work-item's
    index, and the K loop that stages A's and B's next TK-slices through registers into local
    tiles (a register prefetch: the next slice is loaded from global memory while this one is
    used), each operand walked along its unit stride so that the loads are coalesced."""

    def __init__(self, b: Builder, gm: Gemm, shape: GemmShape, tm: int, tn: int, tk: int, T: int):
        self.b, self.g, self.shape, self.tm, self.tn, self.tk, self.T = b, gm, shape, tm, tn, tk, T
        # the launch is exactly n_bn x n_bm (x depth) groups of T work-items: no guards, so
        # that every work-item of a group reaches every barrier
        self.bn = b.local("bn", GpuIndex("group.0"))
        self.bm = b.local("bm", GpuIndex("group.1"))
        if shape.batch:
            flat = b.local("z", GpuIndex("group.2"))
            inner = 1
            for var, e in reversed(shape.batch):
                idx = flat / inner if not isinstance(inner, int) or inner != 1 else flat
                b.emit(Decl(var, idx % e if var is not shape.batch[0][0] else idx))
                inner = inner * e
        self.k_lo, self.k_hi, self.z = const(0), wrap(gm.K), None
        if shape.split > 1:
            self.z = b.local("z", GpuIndex("group.2"))
            self.k_lo = b.local("k_lo", self.z * shape.chunk)
            self.k_hi = b.local("k_hi", binop("min", self.k_lo + shape.chunk, wrap(gm.K)))
        self.tid = b.local("tid", GpuIndex("local.0"))

    @property
    def grid(self) -> tuple:
        g, depth = self.g, self.shape.depth
        return (_ceil_expr(g.N, self.tn) * self.T, _ceil_expr(g.M, self.tm),
                depth if isinstance(depth, int) else wrap(depth)), (self.T, 1, 1)

    def k_loop(self, a_at, b_at, As: Buffer, Bs: Buffer, body) -> None:
        """for each TK-slice of K: stage it (A's element (r, k) of the slice at As[a_at(k, r)],
        B's (k, c) at Bs[b_at(k, c)]), barrier, fetch the next, body(), barrier."""
        b, g, T, tk = self.b, self.g, self.T, self.tk
        A, B = g.a, g.b
        na, nb = self.tm * tk // T, self.tn * tk // T          # elements each work-item stages
        a_next = Buffer(b.fresh("a_next"), F32, (na,), "local", PRIVATE)
        b_next = Buffer(b.fresh("b_next"), F32, (nb,), "local", PRIVATE)

        def fetch(k0: Expr) -> None:
            with _unrolled(b, na, "l") as l_:
                kc, r = _tile_walk(A, "cs", self.tm, tk, self.tid + l_ * T)
                gi, gk = b.local("gi", self.bm * self.tm + r), b.local("gk", k0 + kc)
                ok = binop("&&", gi < g.M, gk < self.k_hi)
                b.store(a_next, l_, select(ok, A.element(gi, gk, b.local), const(0.0, F32)))
            with _unrolled(b, nb, "l") as l_:
                kc, c = _tile_walk(B, "rs", self.tn, tk, self.tid + l_ * T)
                gk, gj = b.local("gk", k0 + kc), b.local("gj", self.bn * self.tn + c)
                ok = binop("&&", gk < self.k_hi, gj < g.N)
                b.store(b_next, l_, select(ok, B.element(gk, gj, b.local), const(0.0, F32)))

        # K steps: a whole chunk's, or K's (over a run-time K, computed by the kernel: every
        # fetch is guarded by k_hi)
        steps = _ceil_expr(self.shape.chunk if self.shape.split > 1 else
                           (max(g.K, 0) if isinstance(g.K, int) else g.K), tk)
        if not isinstance(steps, int) or steps:
            fetch(self.k_lo)
        with b.loop(steps, "kt", role=REDUCTION) as kt:
            with _unrolled(b, na, "l") as l_:
                kc, r = _tile_walk(A, "cs", self.tm, tk, self.tid + l_ * T)
                b.store(As, a_at(kc, r), a_next[l_])
            with _unrolled(b, nb, "l") as l_:
                kc, c = _tile_walk(B, "rs", self.tn, tk, self.tid + l_ * T)
                b.store(Bs, b_at(kc, c), b_next[l_])
            b.emit(Barrier("local"))
            if not isinstance(steps, int) or steps > 1:
                with b.if_(kt + 1 < steps):
                    fetch(self.k_lo + (kt + 1) * tk)
            body()
            b.emit(Barrier("local"))

    def result(self, i: Expr, j: Expr, value, partial: Buffer | None) -> None:
        """C's element at tile row i, column j (where C has it): the Gemm's epilogue of
        value(), or the K chunk's partial sum."""
        b, g = self.b, self.g
        b.emit(Decl(g.i, self.bm * self.tm + i))
        with b.if_(g.i < g.M):
            if partial is None:
                for s in g.row_epilogue:
                    b.emit(s)
            b.emit(Decl(g.j, self.bn * self.tn + j))
            with b.if_(g.j < g.N):
                v = value()
                if partial is not None:
                    b.store(partial, (self.z * g.M + g.i) * g.N + g.j, v)
                else:
                    _epilogue(b, g, v)


def _describe(gm: Gemm, shape: GemmShape, tm: int, tn: int, tk: int) -> str:
    what = f" of {shape.depth} products" if shape.batch else \
        f", K in {shape.split} chunks of {shape.chunk} summed by the next launch" if shape.split > 1 else ""
    M, N, K = (str(as_dim(x)) for x in (gm.M, gm.N, gm.K))
    return f"C[{M}, {N}] = A[{M}, {K}] . B[{K}, {N}]{what}: {tm}x{tn} tiles, K in steps of {tk}"


def gemm_kernel(gm: Gemm, shape: GemmShape, k: Kernel, partial: Buffer | None = None
                ) -> tuple[list[Stmt], tuple, tuple]:
    """A tiled GEMM as kernel IR: work-group (bn, bm, z) computes C[bm*TM:, bn*TN:] of product z
    (a batch entry, or a K chunk whose sums land in `partial`), a TM x TN tile, with T work-items;
    A and B go through local memory a TK-slice at a time (`_GemmFrame`).

    Work-item (tr, tc) owns RM x RN results of the tile (ri < RM, rj < RN). On a device with
    warps (`warp`) they come in runs of 4 (`_vector`) strided across the tile, columns
    tc*4 + rj%4 + (rj/4)*4*(TN/RN) (rows alike), so that each run is one 128-bit read of the
    staged tile and the work-items of a warp read consecutive runs (no bank conflicts); each
    staged row is padded (`tile_pad`) so that the stores, walked along the operand's unit
    stride, do not conflict either. Elsewhere (a CPU driver, which vectorizes a work-item's own
    loops) they are a block, rows tr*RM + ri and columns tc*RN + rj."""
    p = shape.p
    b = Builder()
    b.names = set(k.names_used) | b.names
    T = p.threads()
    rows, cols = p.tm // p.rm, p.tn // p.rn          # work-items down and across the tile
    pad = tile_pad(p)
    va, vb = _vector(p.rm), _vector(p.rn)

    def row(r: Expr, ri: Expr) -> Expr:            # the tile row of a work-item's ri-th result
        return (ri / va) * (rows * va) + r * va + ri % va if p.warp else r * p.rm + ri

    def col(c: Expr, rj: Expr) -> Expr:
        return (rj / vb) * (cols * vb) + c * vb + rj % vb if p.warp else c * p.rn + rj
    lda, ldb = p.tm + pad, p.tn + pad                 # staged: As[k * lda + r], Bs[k * ldb + c]
    As = Buffer(b.fresh("a_tile"), F32, (p.tk * lda,), "local", LOCAL)
    Bs = Buffer(b.fresh("b_tile"), F32, (p.tk * ldb,), "local", LOCAL)
    acc = Buffer(b.fresh("acc"), F32, (p.rm * p.rn,), "local", PRIVATE)
    ar = Buffer(b.fresh("a_reg"), F32, (p.rm,), "local", PRIVATE)
    br = Buffer(b.fresh("b_reg"), F32, (p.rn,), "local", PRIVATE)
    b.comment(_describe(gm, shape, p.tm, p.tn, p.tk) + f", {p.rm}x{p.rn} per work-item" +
              (f" in runs of {va}x{vb} strided across the tile" if p.warp else ""))
    f = _GemmFrame(b, gm, shape, p.tm, p.tn, p.tk, T)
    tr = b.local("tr", f.tid / cols)
    tc = b.local("tc", f.tid % cols)
    with _unrolled(b, p.rm * p.rn, "z") as zz:
        b.store(acc, zz, const(0.0, F32))

    def products() -> None:
        with b.loop(p.tk, "kk", role=REDUCTION) as kk:
            with _unrolled(b, p.rm, "ri") as ri:
                b.store(ar, ri, As[kk * lda + row(tr, ri)])
            with _unrolled(b, p.rn, "rj") as rj:
                b.store(br, rj, Bs[kk * ldb + col(tc, rj)])
            with _unrolled(b, p.rm, "ri") as ri:
                with _unrolled(b, p.rn, "rj") as rj:
                    at = ri * p.rn + rj
                    b.store(acc, at, acc[at] + ar[ri] * br[rj])
    f.k_loop(lambda kc, r: kc * lda + r, lambda kc, c: kc * ldb + c, As, Bs, products)
    # each of the work-item's results, where C has it: the epilogue, or the chunk's partial sum
    with _unrolled(b, p.rm, "ri") as ri:
        with _unrolled(b, p.rn, "rj") as rj:
            f.result(row(tr, ri), col(tc, rj), lambda: acc[ri * p.rn + rj], partial)
    k.names_used |= b.names
    grid, block = f.grid
    return b.body, grid, block


MMA_WARPS = (4, 2)           # a TF32 GEMM work-group's warps, down and across its tile
MMA_TK = 16                  # K staged per step (two tensor-core steps)


def mma_shape(gm: Gemm, p: GpuConfig, batch: tuple = (), at: tuple | None = None) -> GemmShape:
    """The tile of a TF32 tensor-core GEMM: 128 x 128 (64 x 64 where the target's tiles are
    smaller), halved down to 64 x 64 while the launch would have fewer than min_groups groups,
    then K split as for `gemm_shape` (`at` too)."""
    M, N, K, depth = at or _largest(gm, batch)
    q = replace(p, tk=MMA_TK, tm=128 if p.tm >= 128 else 64, tn=128 if p.tn >= 128 else 64)

    def groups(q):
        return -(-M // q.tm) * -(-N // q.tn) * depth
    while q.min_groups and groups(q) < q.min_groups and q.tm > 64 and q.tn > 64:
        q = replace(q, tm=q.tm // 2, tn=q.tn // 2)
    split = 1
    if q.min_groups and not batch and groups(q) < q.min_groups:
        split = min(-(-q.min_groups // groups(q)), K // max(q.split_min_k, q.tk))
    if split < 2:
        return GemmShape(q, batch)
    chunk = _ceil(_ceil(K, split), q.tk) * q.tk
    return GemmShape(q, (), _ceil(upper_bound(gm.K), chunk), chunk)


def mma_kernel(gm: Gemm, shape: GemmShape, k: Kernel, partial: Buffer | None = None
               ) -> tuple[list[Stmt], tuple, tuple]:
    """A GEMM on tensor cores (TF32 inputs, float32 sums), as kernel IR with `Mma` steps: the
    work-group's 8 warps (4 x 2) each compute a (TM/4) x (TN/2) block of the tile as 16 x 16
    fragments; A and B are staged row-major (As[r * lda + k], Bs[k * ldb + c], rows padded by
    8 floats so that fragments start 32-byte aligned), each warp loads its fragments from
    there. The results go fragment by fragment through a 16 x 16 scratch of the warp's in local
    memory, from which each of its work-items takes 8 elements to the Gemm's epilogue."""
    p = shape.p
    wr_n, wc_n = MMA_WARPS
    T = 32 * wr_n * wc_n
    wm, wn = p.tm // wr_n, p.tn // wc_n            # a warp's block of the tile
    fm, fn = wm // MMA_M, wn // MMA_N              # its fragments down and across
    if wm % MMA_M or wn % MMA_N or not fm or not fn:
        raise ValueError(f"tensor-core tile {p.tm}x{p.tn} does not split into 16 x 16 fragments of {wr_n}x{wc_n} warps")
    tk = p.tk
    b = Builder()
    b.names = set(k.names_used) | b.names
    lda, ldb = tk + 8, p.tn + 8
    As = Buffer(b.fresh("a_tile"), F32, (p.tm * lda,), "local", LOCAL)
    Bs = Buffer(b.fresh("b_tile"), F32, (tk * ldb,), "local", LOCAL)
    Cs = Buffer(b.fresh("c_frag"), F32, (wr_n * wc_n * MMA_M * MMA_N,), "local", LOCAL)
    fa = Buffer(b.fresh("a_frag"), F32, (fm,), "local", MMA_A)
    fb = Buffer(b.fresh("b_frag"), F32, (fn,), "local", MMA_B)
    fc = Buffer(b.fresh("c_acc"), F32, (fm * fn,), "local", MMA_C)
    b.comment(_describe(gm, shape, p.tm, p.tn, tk) + f", on tensor cores in TF32: {wr_n}x{wc_n} warps of "
              f"{fm}x{fn} fragments of {MMA_M}x{MMA_N}")
    f = _GemmFrame(b, gm, shape, p.tm, p.tn, tk, T)
    warp = b.local("warp", f.tid / 32)
    lane = b.local("lane", f.tid % 32)
    wr = b.local("wr", warp / wc_n)
    wc = b.local("wc", warp % wc_n)
    for x in range(fm * fn):
        b.emit(Mma("zero", fc, const(x)))

    def products() -> None:
        for ks in range(0, tk, MMA_K):
            for x in range(fm):
                b.emit(Mma("load", fa, const(x), As, (wr * wm + x * MMA_M) * lda + ks, lda))
            for y in range(fn):
                b.emit(Mma("load", fb, const(y), Bs, ks * ldb + wc * wn + y * MMA_N, ldb))
            for x in range(fm):
                for y in range(fn):
                    b.emit(Mma("mma", fc, const(x * fn + y), a=(fa, const(x)), b=(fb, const(y))))
    f.k_loop(lambda kc, r: r * lda + kc, lambda kc, c: kc * ldb + c, As, Bs, products)
    scratch = warp * (MMA_M * MMA_N)
    for x in range(fm):
        for y in range(fn):
            b.emit(Mma("store", fc, const(x * fn + y), Cs, scratch, MMA_N))
            b.emit(Barrier("warp"))
            with _unrolled(b, MMA_M * MMA_N // 32, "t") as t:
                e = b.local("e", lane + t * 32)
                f.result(wr * wm + x * MMA_M + e / MMA_N, wc * wn + y * MMA_N + e % MMA_N,
                         lambda: Cs[scratch + e], partial)
            b.emit(Barrier("warp"))
    k.names_used |= b.names
    grid, block = f.grid
    return b.body, grid, block


def _epilogue(b: Builder, gm: Gemm, v: Expr) -> None:
    """What the Gemm makes of its element (g.i, g.j) whose product is v."""
    if gm.accumulate:
        v = v + Load(gm.c.buf, gm.c.at(gm.i, gm.j))
    b.emit(Decl(gm.value, v))
    if gm.epilogue:
        for s in gm.epilogue:
            b.emit(s)
    else:
        b.store(gm.c.buf, gm.c.at(gm.i, gm.j), gm.value)


def _nest_over_c(gm: Gemm, k: Kernel, hint: str, init, extent: int, start: int, term) -> Loop:
    """A spatial nest over C(i, j) whose body sums init(i, j) and term(i, j, r) for r in
    [start, extent), then runs the Gemm's epilogue on the sum."""
    b = Builder()
    b.names = set(k.names_used) | b.names
    with b.loops([gm.M, gm.N], ["i", "j"], role=SPATIAL) as (i, j):
        b.emit(Decl(gm.i, i))
        for s in gm.row_epilogue:
            b.emit(s)
        b.emit(Decl(gm.j, j))
        total = b.accumulator(hint, init(i, j))
        with b.loop(extent, "r", role=REDUCTION, start=start) as r:
            b.assign(total, total + term(i, j, r))
        _epilogue(b, gm, total)
    k.names_used |= b.names
    if not isinstance(b.body[0], Loop):         # a 1 x 1 C: b.loops made no loop, the launch needs one
        return Loop(Var(k.fresh("i")), const(1), b.body, role=SPATIAL)
    return b.body[0]


def gemv_loop(gm: Gemm, k: Kernel) -> Loop:
    """A GEMM with few rows (a batch-1 layer, an LSTM step) as a spatial nest over C with each
    result's dot product inside: one work-item per result, consecutive work-items reading
    consecutive columns of B (coalesced) and the same row of A, then the Gemm's epilogue. No
    local memory, no barriers: tiles of 32 rows would mostly compute rows C does not have."""
    return _nest_over_c(gm, k, "dot", lambda i, j: const(0.0, F32), gm.K, 0,
                        lambda i, j, r: gm.a.element(i, r) * gm.b.element(r, j))


def split_sum_kernel(gm: Gemm, shape: GemmShape, partial: Buffer, k: Kernel) -> Loop:
    """The K chunks' partial products summed, then the Gemm's epilogue: a spatial nest over C."""
    return _nest_over_c(gm, k, "sum", lambda i, j: Load(partial, i * gm.N + j), shape.split, 1,
                        lambda i, j, z: Load(partial, (z * gm.M + i) * gm.N + j))


class _unrolled:
    """`with _unrolled(b, n, "ri") as ri:` an unrolled spatial loop of n iterations."""

    def __init__(self, b: Builder, n: int, name: str):
        self.b = b
        self.loop = Loop(Var(b.fresh(name), I64), const(n), [], UNROLLED, const(0), SPATIAL)

    def __enter__(self) -> Var:
        self.b.emit(self.loop)
        self.b._stack.append(self.loop.body)
        return self.loop.var

    def __exit__(self, *exc) -> None:
        self.b._stack.pop()
