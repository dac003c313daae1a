"""The GPU schedule's decisions, on kernel IR built by hand: when the work-items of a group
share the loops of a spatial iteration (aotc/schedule/gpu_group.py), which barriers that
needs, and how a GEMM launch is cut (tiles, batch, split K). Parity of the code this makes is
tested on OpenCL (tests/test_opencl.py, the 'eager' target), on the CUDA emulation
(tests/test_cuda_emulated.py) and on a GPU (docs/GPU.md)."""
from __future__ import annotations

from dataclasses import replace

from aotc.kernel.ir import (F32, PRIVATE, REDUCTION, SPATIAL, Assign, Barrier, Buffer, Builder, GemmDest, If, Loop,
                            Store, Var, binop, matrix, select, walk_stmts)
from aotc.schedule.gpu_gemm import gemm_shape
from aotc.targets import GpuConfig
from aotc.schedule.gpu_group import _coefficient, _combine, work_group_form

X = Buffer("x", F32, (64, 512), "in")
Y = Buffer("y", F32, (64, 512), "out")


def _fresh():
    names = set()

    def fresh(hint):
        name, k = hint, 0
        while name in names:
            k += 1
            name = f"{hint}{k}"
        names.add(name)
        return name
    return fresh


def _row_body(b: Builder, row):
    """A softmax-like row: max, then exp stored and summed, then scaled in place."""
    mx = b.local("mx", X[row * 512])
    with b.loop(512, "k", role=REDUCTION, start=1) as k:
        v = b.local("v", X[row * 512 + k])
        b.assign(mx, select(v > mx, v, mx))
    s = b.accumulator("sum", 0.0)
    with b.loop(512, "k", role=REDUCTION) as k:
        e = b.local("e", X[row * 512 + k] - mx)
        b.store(Y, row * 512 + k, e)
        b.assign(s, s + e)
    inv = b.local("inv", 1.0 / s)
    with b.loop(512, "k", role=SPATIAL) as k:
        b.store(Y, row * 512 + k, Y[row * 512 + k] * inv)


def test_rows_become_work_groups_with_tree_reductions():
    b = Builder()
    row = Var("p")
    _row_body(b, row)
    stmts, T, lid = work_group_form(b.body, _fresh(), 256, 256)
    assert T == 256
    loops = [s for s in walk_stmts(stmts) if isinstance(s, Loop)]
    # all three loops split across the group, each work-item starting at its own index
    assert [lp.step for lp in loops[:3]] == [256, 256, 256]
    # two reductions combined through local memory; y is owned (element k always by work-item
    # k mod 256), so no global barrier between the loops that write and read it
    assert sum(isinstance(s, Barrier) and s.scope == "local" for s in walk_stmts(stmts)) == 2 * (8 + 2)
    assert not any(isinstance(s, Barrier) and s.scope == "global" for s in walk_stmts(stmts))


def test_small_work_keeps_one_work_item_per_iteration():
    b = Builder()
    with b.loop(9, "k", role=SPATIAL) as k:
        b.store(Y, k, X[k])
    assert work_group_form(b.body, _fresh(), 256, 256) is None
    assert work_group_form(b.body, _fresh(), 256, 8) is not None


def test_unowned_accesses_get_barriers_and_unsafe_bodies_are_refused():
    # a shared loop writes y at 2k: another work-item reads y[k] in the next loop
    b = Builder()
    with b.loop(256, "k", role=SPATIAL) as k:
        b.store(Y, k * 2, X[k])
    with b.loop(256, "k", role=SPATIAL) as k:
        b.store(Y, k * 2 + 1, Y[k])
    stmts, _, _ = work_group_form(b.body, _fresh(), 256, 1)
    assert any(isinstance(s, Barrier) and s.scope == "global" for s in stmts)
    # a uniform read of a buffer the group writes, or a private array stored in a shared
    # loop, cannot be shared
    b = Builder()
    with b.loop(256, "k", role=SPATIAL) as k:
        b.store(Y, k, X[k])
    b.local("first", Y[0])
    assert work_group_form(b.body, _fresh(), 256, 1) is None
    priv = Buffer("tmp", F32, (4,), "local", PRIVATE)
    b = Builder()
    with b.loop(256, "k", role=SPATIAL) as k:
        b.store(priv, k % 4, X[k])
    assert work_group_form(b.body, _fresh(), 256, 1) is None


def test_a_lone_store_runs_in_work_item_zero():
    b = Builder()
    s = b.accumulator("sum", 0.0)
    with b.loop(512, "k", role=REDUCTION) as k:
        b.assign(s, s + X[k])
    b.store(Y, 0, s)
    stmts, _, lid = work_group_form(b.body, _fresh(), 256, 1)
    guarded = [s for s in stmts if isinstance(s, If) and any(isinstance(x, Store) and x.buf is Y for x in s.then)]
    assert len(guarded) == 1 and lid.name in repr(guarded[0].cond)


def test_reduction_forms_recognized():
    a, v = Var("acc", F32), Var("v", F32)
    assert _combine(Assign(a, a + v), {"acc"})[0] == "+"
    assert _combine(Assign(a, binop("max", v, a)), {"acc"})[0] == "max"
    assert _combine(Assign(a, select(v > a, v, a)), {"acc"})[0] == "smax"
    assert _combine(Assign(a, select(a > v, v, a)), {"acc"})[0] == "smin"
    assert _combine(Assign(a, a * a), {"acc"}) is None            # not a combine of an element
    assert _combine(Assign(a, a - v), {"acc"}) is None
    k = Var("k")
    assert _coefficient(k * 3 + 7, k) == 3 and _coefficient(Var("n") * 5, k) == 0
    assert _coefficient(k * k, k) is None and _coefficient(k / 2, k) is None


def test_gemm_launch_shapes():
    p = GpuConfig(tm=128, tn=128, tk=8, rm=8, rn=8, min_groups=128, split_min_k=256)
    A = Buffer("a", F32, (4096, 768), "in")
    B = Buffer("b", F32, (768, 3072), "in")
    C = Buffer("c", F32, (4096, 3072), "out")

    def gemm(M, N, K):
        b = Builder()
        return b.gemm(M, N, K, matrix(A, 0, K, 1), matrix(B, 0, N, 1), GemmDest(C, (0, 0), (0,), (1,)))

    big = gemm_shape(gemm(4096, 3072, 768), p)            # 768 groups of the full tile
    assert (big.p.tm, big.p.rm, big.split) == (128, 8, 1)
    small = gemm_shape(gemm(128, 768, 768), p)            # 6 groups -> 32x32 tiles, then K in 2
    assert (small.p.tm, small.p.rm, small.split, small.chunk) == (32, 2, 2, 384)
    batched = gemm_shape(gemm(128, 128, 64), p, ((Var("h"), 12),))
    assert batched.split == 1 and batched.depth == 12
    assert gemm_shape(gemm(128, 768, 768), GpuConfig()).split == 1     # min_groups 0: as configured
    # min_results 16: tiles stop at 4 x 4 results per work-item (64 x 64), K splits instead
    q = replace(p, min_results=16)
    ffn = gemm_shape(gemm(128, 3072, 768), q)                 # 2 x 48 groups -> K in 2
    assert (ffn.p.tm, ffn.p.rm, ffn.split, ffn.chunk) == (64, 4, 2, 384)
    assert (gemm_shape(gemm(128, 3072, 768), p).p.rm, gemm_shape(gemm(128, 3072, 768), p).split) == (2, 1)
    # floor_groups 32: a product whose K is too short to split (960 x 49 x 160: 15 groups of 64 x 64)
    # goes down to 2 x 2 (32 x 32 tiles, 60 groups); one that splits keeps 4 x 4
    f = replace(q, floor_groups=32)
    assert (gemm_shape(gemm(960, 49, 160), q).p.rm, gemm_shape(gemm(960, 49, 160), q).split) == (4, 1)
    short = gemm_shape(gemm(960, 49, 160), f)
    assert (short.p.tm, short.p.rm, short.split) == (32, 2, 1)
    assert (gemm_shape(gemm(128, 3072, 768), f).p.rm, gemm_shape(gemm(128, 3072, 768), f).split) == (4, 2)
    heads = gemm_shape(gemm(128, 64, 128), f, ((Var("h"), 12),))    # 24 groups of 64 x 64, no split
    assert (heads.p.rm, heads.depth) == (2, 12)
    # small_tk: halved tiles stage K 32 at a time; the full tile keeps its tk
    t = replace(f, small_tk=32)
    assert (gemm_shape(gemm(128, 3072, 768), t).p.tk, gemm_shape(gemm(4096, 3072, 768), t).p.tk) == (32, 8)
    assert gemm_shape(gemm(960, 49, 160), t).p.tk == 32
    # the target file's own settings (targets/cuda.toml)
    from aotc.targets import load_target
    cuda = load_target("cuda:sm_90").gpu
    assert (cuda.min_results, cuda.floor_groups, cuda.small_tk) == (16, 64, 32)


def _address(e, env: dict, decls: dict) -> int:
    """The integer value of an index expression for one work-item: `env` holds GPU indices and
    loop variables, `decls` the locals' initial expressions."""
    from aotc.kernel.ir import BinOp, Const, GpuIndex, Var
    if isinstance(e, Const):
        return int(e.value)
    if isinstance(e, GpuIndex):
        return env[e.axis]
    if isinstance(e, Var):
        return env[e.name] if e.name in env else _address(decls[e.name], env, decls)
    assert isinstance(e, BinOp), e
    a, b = _address(e.a, env, decls), _address(e.b, env, decls)
    ops = {"+": int.__add__, "-": int.__sub__, "*": int.__mul__, "/": int.__floordiv__, "%": int.__mod__, "min": min}
    return ops[e.op](a, b)


def _local_accesses(body, in_loop: str | None):
    """(buffer name, index, loop variable names around it) of each load from and store to a
    `local`-memory buffer, inside the first loop named `in_loop` (None: anywhere)."""
    from aotc.kernel.ir import LOCAL, Load, stmt_exprs, walk_expr

    def walk(stmts, loops, inside):
        for s in stmts:
            if isinstance(s, Loop):
                yield from walk(s.body, loops + [s.var.name], inside or s.var.name == in_loop)
                continue
            if isinstance(s, If):
                yield from walk(s.then + s.orelse, loops, inside)
                continue
            if not inside:
                continue
            if isinstance(s, Store) and s.buf.space == LOCAL:
                yield s.buf.name, s.index, loops
            for e in stmt_exprs(s)[1 if isinstance(s, Store) else 0:]:      # (the first: the store's)
                for x in walk_expr(e):
                    if isinstance(x, Load) and x.buf.space == LOCAL:
                        yield x.buf.name, x.index, loops
    yield from walk(body, [], in_loop is None)


def _warp_words(index, loops, decls, fixed: int, warp: int, **at) -> list[int]:
    """The word each of the 32 work-items of warp `warp` accesses, the loops around at `fixed`
    (or as `at` says), the group at (1, 1, 0)."""
    env = {name: fixed for name in loops}
    env.update({"group.0": 1, "group.1": 1, "group.2": 0}, **at)
    return [_address(index, dict(env, **{"local.0": 32 * warp + lane}), decls) for lane in range(32)]


def _worst_conflict(index, loops, decls) -> int:
    """The most distinct words one bank serves for a warp's scalar access (1: conflict-free,
    equal words being broadcast), over a few iterations of the loops around it and 8 warps."""
    worst = 0
    for fixed in (0, 1, 3):
        for warp in range(8):
            banks: dict = {}
            for w in set(_warp_words(index, loops, decls, fixed, warp)):
                banks.setdefault(w % 32, set()).add(w)
            worst = max(worst, max(len(v) for v in banks.values()))
    return worst


def _worst_vector_conflict(index, loops, decls, width: int) -> int:
    """For a read in an unrolled loop (the innermost of `loops`) whose runs of `width`
    iterations read `width` consecutive, aligned words (one 128-bit read when width is 4):
    the most distinct 16-byte chunks that one group of 4 banks serves for a quarter warp (the
    8 work-items a 128-bit read serves at once). Asserts the runs are consecutive and aligned."""
    inner, worst = loops[-1], 0
    for fixed in (0, 1, 3):
        for warp in range(8):
            for first in range(0, 8, width):
                runs = [_warp_words(index, loops, decls, fixed, warp, **{inner: first + q}) for q in range(width)]
                for lane in range(32):
                    assert [r[lane] for r in runs] == [runs[0][lane] + q for q in range(width)], "not consecutive"
                    assert runs[0][lane] % width == 0, "not aligned"
                for quarter in range(4):
                    groups: dict = {}
                    for w in set(runs[0][8 * quarter:8 * quarter + 8]):
                        groups.setdefault((w // 4) % 8, set()).add(w)
                    worst = max(worst, max(len(v) for v in groups.values()))
    return worst


def test_gemm_tiles_are_read_and_written_without_bank_conflicts():
    """With the cuda target's tiles, a warp's accesses to the staged A and B tiles in local
    (shared) memory: the compute loop reads each work-item's rows of A and columns of B in runs
    of 4 consecutive aligned words (128-bit reads), and no 4 banks serve two chunks at once;
    the stores, for each operand layout (K as the unit stride of A, of B, or of neither), hit
    each bank with one word at most."""
    from aotc.kernel.ir import Decl, Kernel, walk_stmts
    from aotc.schedule.gpu_gemm import GemmShape, gemm_kernel
    p = GpuConfig(block=256, tm=128, tn=128, tk=8, rm=8, rn=8, warp=32)
    M, N, K = 512, 512, 512
    for a_rs, a_cs in ((K, 1), (1, M)):
        for b_rs, b_cs in ((N, 1), (1, K)):
            A, B = Buffer("a", F32, (M * K,), "in"), Buffer("b", F32, (K * N,), "in")
            C = Buffer("c", F32, (M, N), "out")
            b = Builder()
            g = b.gemm(M, N, K, matrix(A, 0, a_rs, a_cs), matrix(B, 0, b_rs, b_cs), GemmDest(C, (0, 0), (0,), (1,)))
            body, grid, block = gemm_kernel(g, GemmShape(p), Kernel("k", "", [A, B, C], []))
            assert block == (256, 1, 1) and grid == (4 * 256, 4, 1)
            decls = {s.var.name: s.init for s in walk_stmts(body) if isinstance(s, Decl)}
            reads = list(_local_accesses(body, "kk"))
            stores = [x for x in _local_accesses(body, "kt") if "kk" not in x[2]]
            assert len(reads) == 2 and len(stores) == 2, (reads, stores)
            for name, index, loops in reads:
                assert _worst_vector_conflict(index, loops, decls, 4) == 1, name
            for name, index, loops in stores:
                assert _worst_conflict(index, loops, decls) == 1, (name, (a_rs, a_cs), (b_rs, b_cs))


def test_tensor_core_fragments_are_aligned_and_cover_the_tile():
    """The TF32 GEMM (`mma_kernel`): every warp's fragment loads and stores start 32 bytes
    aligned with rows a multiple of 8 floats apart (what wmma requires), the warps' 16 x 16
    accumulators together cover the work-group's tile once, and the shape keeps fragments whole
    (tiles halved to 64 x 64 at least, then K split)."""
    from aotc.kernel.ir import MMA_C, Decl, Kernel, Mma, walk_stmts
    from aotc.schedule.gpu_gemm import MMA_WARPS, GemmShape, mma_kernel, mma_shape
    for tile in (128, 64):
        p = GpuConfig(block=256, tm=tile, tn=tile, tk=16, rm=8, rn=8, warp=32)
        M, N, K = 300, 260, 200
        A, B = Buffer("a", F32, (M * K,), "in"), Buffer("b", F32, (K * N,), "in")
        C = Buffer("c", F32, (M, N), "out")
        b = Builder()
        g = b.gemm(M, N, K, matrix(A, 0, K, 1), matrix(B, 0, N, 1), GemmDest(C, (0, 0), (0,), (1,)))
        body, grid, block = mma_kernel(g, GemmShape(p), Kernel("k", "", [A, B, C], []))
        assert block == (256, 1, 1) and grid == (-(-N // tile) * 256, -(-M // tile), 1)
        decls = {s.var.name: s.init for s in walk_stmts(body) if isinstance(s, Decl)}
        mmas = [s for s in walk_stmts(body) if isinstance(s, Mma)]
        assert {s.op for s in mmas} == {"zero", "load", "mma", "store"}
        loops = {s.var.name: 0 for s in walk_stmts(body) if isinstance(s, Loop)}     # element 0 of each
        covered = []
        for warp in range(MMA_WARPS[0] * MMA_WARPS[1]):
            env = dict(loops, **{"local.0": 32 * warp, "group.0": 0, "group.1": 0, "group.2": 0})
            for s in mmas:
                if s.op in ("load", "store"):
                    off = _address(s.offset, env, decls)
                    assert off % 8 == 0 and s.ld % 8 == 0, (s.op, s.frag.name, off, s.ld)
            # where each accumulator fragment lands: the epilogue's (i, j) after each store
            after_store = False
            for s in walk_stmts(body):
                if isinstance(s, Mma) and s.op == "store":
                    after_store, at = True, []
                elif after_store and isinstance(s, Decl) and s.var.name in (g.i.name, g.j.name):
                    at.append(_address(s.init, env, decls))
                    if len(at) == 2:
                        covered.append((at[0] // 16, at[1] // 16))
                        after_store = False
        assert sorted(covered) == [(r, c) for r in range(tile // 16) for c in range(tile // 16)]
        assert sum(1 for s in mmas if s.op == "zero") == len({(s.frag.name, s.at.value) for s in mmas
                                                                if s.frag.space == MMA_C})
    # a GEMM too small for the device: 64 x 64 tiles, then K split (never below whole fragments)
    q = GpuConfig(block=256, tm=128, tn=128, tk=8, rm=8, rn=8, min_groups=128, split_min_k=256, warp=32)
    b = Builder()
    A, B = Buffer("a", F32, (128 * 768,), "in"), Buffer("b", F32, (768 * 768,), "in")
    C = Buffer("c", F32, (128, 768), "out")
    g = b.gemm(128, 768, 768, matrix(A, 0, 768, 1), matrix(B, 0, 768, 1), GemmDest(C, (0, 0), (0,), (1,)))
    shape = mma_shape(g, q)
    assert (shape.p.tm, shape.p.tn, shape.p.tk, shape.split) == (64, 64, 16, 3)
