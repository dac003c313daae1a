"""The GPU schedule's decisions, on kernel IR built by hand: when the work-items of a group
share the loops of a spatial iteration (aotc/schedule/gpu_group.py), which barriers that
needs, and how a GEMM launch is cut (tiles, batch, split K). Parity of the code this makes is
tested on OpenCL (tests/test_opencl.py, the 'eager' target) and on a GPU (docs/GPU.md)."""
from __future__ import annotations

from aotc.kernel.ir import (F32, PRIVATE, REDUCTION, SPATIAL, Assign, Barrier, Buffer, Builder, GemmDest, If, Loop,
                            Store, Var, binop, matrix, select, walk_stmts)
from aotc.schedule.gpu import GpuParams, gemm_shape
from aotc.schedule.gpu_group import _coefficient, _combine, cooperate

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
    stmts, T, lid = cooperate(b.body, _fresh(), 256, 256)
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
    assert cooperate(b.body, _fresh(), 256, 256) is None
    assert cooperate(b.body, _fresh(), 256, 8) is not None


def test_unowned_accesses_get_barriers_and_unsafe_bodies_are_refused():
    # a shared loop writes y at 2k: another work-item reads y[k] in the next loop
    b = Builder()
    with b.loop(256, "k", role=SPATIAL) as k:
        b.store(Y, k * 2, X[k])
    with b.loop(256, "k", role=SPATIAL) as k:
        b.store(Y, k * 2 + 1, Y[k])
    stmts, _, _ = cooperate(b.body, _fresh(), 256, 1)
    assert any(isinstance(s, Barrier) and s.scope == "global" for s in stmts)
    # a uniform read of a buffer the group writes, or a private array stored in a shared
    # loop, cannot be shared
    b = Builder()
    with b.loop(256, "k", role=SPATIAL) as k:
        b.store(Y, k, X[k])
    b.local("first", Y[0])
    assert cooperate(b.body, _fresh(), 256, 1) is None
    priv = Buffer("tmp", F32, (4,), "local", PRIVATE)
    b = Builder()
    with b.loop(256, "k", role=SPATIAL) as k:
        b.store(priv, k % 4, X[k])
    assert cooperate(b.body, _fresh(), 256, 1) is None


def test_a_lone_store_runs_in_work_item_zero():
    b = Builder()
    s = b.accumulator("sum", 0.0)
    with b.loop(512, "k", role=REDUCTION) as k:
        b.assign(s, s + X[k])
    b.store(Y, 0, s)
    stmts, _, lid = cooperate(b.body, _fresh(), 256, 1)
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
    p = GpuParams(tm=128, tn=128, tk=8, rm=8, rn=8, min_groups=128, split_min_k=256)
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
    assert gemm_shape(gemm(128, 768, 768), GpuParams()).split == 1     # min_groups 0: as configured
