"""MatMul and Gemm. float32 goes to the runtime's packed GEMM (kernel/gemm.py): a constant
operand is packed into the micro-kernel's panels at compile time, transposed operands are
read through strides. Other types get a plain loop nest."""
from __future__ import annotations

from ..errors import ShapeError
from ..ir import dtypes
from ..kernel import gemm
from ..kernel.gemm import GemmTiles, emit_sgemm, pack_a, pack_b
from ..kernel.ir import BufPtr, const
from .common import broadcast, prod
from .registry import register


def _matmul_shapes(node, a, b):
    if len(a) == 0 or len(b) == 0:
        raise ShapeError(f"MatMul node {node.name!r}: scalar operands are not allowed")
    a2 = (1,) + tuple(a) if len(a) == 1 else tuple(a)
    b2 = tuple(b) + (1,) if len(b) == 1 else tuple(b)
    if a2[-1] != b2[-2]:
        raise ShapeError(f"MatMul node {node.name!r}: inner dimensions differ, {tuple(a)} x {tuple(b)}")
    batch = broadcast(a2[:-2], b2[:-2], node=node)
    out = tuple(batch) + (a2[-2], b2[-1])
    if len(a) == 1:
        out = out[:-2] + out[-1:]
    if len(b) == 1:
        out = out[:-1]
    return a2, b2, batch, out


def _batch_strides(shape, mat):
    """Element strides of each batch dim for matrices of `mat` elements (0 where broadcast)."""
    st, acc = [], mat
    for d in reversed(shape):
        st.append(0 if d == 1 else acc)
        acc *= d
    return st[::-1]


def _lower_matmul(node, ctx):
    A, B = ctx.ins
    Y = ctx.outs[0]
    a2, b2, batch, _ = _matmul_shapes(node, A.shape, B.shape)
    M, K, N = a2[-2], a2[-1], b2[-1]
    b = ctx.b
    # batch strides with broadcasting (0 where an operand is broadcast over a batch dim)
    ra, rb = len(a2) - 2, len(b2) - 2
    nb = len(batch)
    a_batch = (1,) * (nb - ra) + tuple(a2[:-2])
    b_batch = (1,) * (nb - rb) + tuple(b2[:-2])
    if A.dtype != dtypes.FLOAT32:
        sa, sb, sy = (_batch_strides(a_batch, M * K), _batch_strides(b_batch, K * N),
                      _batch_strides(batch, M * N))
        with b.loops(batch, [f"b{k}" for k in range(nb)]) as idx:
            oa = sum((i * s for i, s in zip(idx, sa) if s), const(0))
            ob = sum((i * s for i, s in zip(idx, sb) if s), const(0))
            oy = sum((i * s for i, s in zip(idx, sy) if s), const(0))
            with b.loop(M, "m") as m:
                with b.loop(N, "n") as n:
                    acc = b.local("acc", const(0, A.dtype))
                    with b.loop(K, "k") as k:
                        b.assign(acc, acc + A[oa + m * K + k] * B[ob + k * N + n])
                    b.store(Y, oy + m * N + n, acc)
        return
    if prod(b_batch) == 1 and tuple(a_batch) == tuple(batch):
        # B is one matrix for the whole batch: the batch's rows of A are one taller matrix
        M, a_batch, batch = M * prod(batch), (), ()
        nb = 0
    tiles = GemmTiles.of(ctx.target)
    # a constant operand is packed into the micro-kernel's panels once, at compile time
    Ap = ctx.derived_const(0, "packed_a", lambda a: pack_a(a.reshape(a2), tiles))
    Bp = ctx.derived_const(1, "packed_b", lambda w: pack_b(w.reshape(b2), tiles)) \
        if Ap is None else None
    a_mat = -(-M // tiles.mr) * tiles.mr * K if Ap is not None else M * K
    b_mat = -(-N // tiles.nr) * tiles.nr * K if Bp is not None else K * N
    sa, sb, sy = _batch_strides(a_batch, a_mat), _batch_strides(b_batch, b_mat), _batch_strides(batch, M * N)
    if Ap is not None:
        b.comment(f"A packed at compile time into {tiles.mr}-row panels")
    if Bp is not None:
        b.comment(f"B packed at compile time into {tiles.nr}-column panels")
    with b.loops(batch, [f"b{k}" for k in range(nb)]) as idx:
        oa = sum((i * s for i, s in zip(idx, sa) if s), const(0))
        ob = sum((i * s for i, s in zip(idx, sb) if s), const(0))
        oy = sum((i * s for i, s in zip(idx, sy) if s), const(0))
        emit_sgemm(ctx, M, N, K,
                   gemm.packed(Ap, oa) if Ap is not None else gemm.strided(A, oa, K, 1),
                   gemm.packed(Bp, ob) if Bp is not None else gemm.strided(B, ob, N, 1),
                   BufPtr(Y, oy), N)


@register("MatMul", lower=_lower_matmul)
def _matmul_infer(node, ins):
    _, _, _, out = _matmul_shapes(node, ins[0].shape, ins[1].shape)
    return [(ins[0].dtype, out)]


def _gemm_dims(node, a, b):
    ta, tb = int(node.attr("transA", 0)), int(node.attr("transB", 0))
    M, K = (a[1], a[0]) if ta else (a[0], a[1])
    K2, N = (b[1], b[0]) if tb else (b[0], b[1])
    if K != K2:
        raise ShapeError(f"Gemm node {node.name!r}: inner dimensions differ, {tuple(a)} x {tuple(b)}"
                         f" with transA={ta} transB={tb}")
    return M, N, K, ta, tb


def _lower_gemm(node, ctx):
    A, B = ctx.ins[0], ctx.ins[1]
    C = ctx.ins[2] if len(ctx.ins) > 2 else None
    Y = ctx.outs[0]
    M, N, K, ta, tb = _gemm_dims(node, A.shape, B.shape)
    alpha, beta = float(node.attr("alpha", 1.0)), float(node.attr("beta", 1.0))
    b = ctx.b
    if C is not None and beta == 0.0:
        C = None
    cshape = (1,) * (2 - len(C.shape)) + tuple(C.shape) if C is not None else None

    def c_at(m, n):
        cm = m if cshape[0] != 1 else 0
        cn = n if cshape[1] != 1 else 0
        return C[cm * cshape[1] + cn] if len(C.shape) else C[const(0)]

    if A.dtype != dtypes.FLOAT32:
        with b.loops((M, N), ["m", "n"]) as (m, n):
            acc = b.local("acc", const(0, A.dtype))
            with b.loop(K, "k") as k:
                a = A[k, m] if ta else A[m, k]
                w = B[n, k] if tb else B[k, n]
                b.assign(acc, acc + a * w)
            b.store(Y, (m, n), acc)
    else:
        tiles = GemmTiles.of(ctx.target)
        Ap = ctx.derived_const(0, "packed_a", lambda a: pack_a(a.T if ta else a, tiles))
        Bp = ctx.derived_const(1, "packed_b", lambda w: pack_b(w.T if tb else w, tiles)) \
            if Ap is None else None
        # Y = alpha * A.B + beta * C: with alpha == beta == 1, C is written first and the GEMM
        # accumulates onto it (one pass over Y)
        bias_first = C is not None and alpha == 1.0 and beta == 1.0
        if bias_first:
            with b.loops((M, N), ["m", "n"]) as (m, n):
                b.store(Y, (m, n), c_at(m, n))
        for name, op, tiles_n in (("A", Ap, tiles.mr), ("B", Bp, tiles.nr)):
            if op is not None:
                b.comment(f"{name} packed at compile time into {tiles_n}-{'row' if name == 'A' else 'column'} panels")
        emit_sgemm(ctx, M, N, K,
                   gemm.packed(Ap) if Ap is not None else gemm.strided(A, 0, *((1, M) if ta else (K, 1))),
                   gemm.packed(Bp) if Bp is not None else gemm.strided(B, 0, *((1, K) if tb else (N, 1))),
                   BufPtr(Y), N, accumulate=bias_first)
        if bias_first:
            return
    if alpha != 1.0 or C is not None:
        with b.loops((M, N), ["m", "n"]) as (m, n):
            v = Y[m, n]
            if alpha != 1.0:
                v = v * const(alpha, Y.dtype)
            if C is not None:
                c = c_at(m, n)
                v = v + (c * const(beta, Y.dtype) if beta != 1.0 else c)
            b.store(Y, (m, n), v)


@register("Gemm", lower=_lower_gemm)
def _gemm_infer(node, ins):
    M, N, _, _, _ = _gemm_dims(node, ins[0].shape, ins[1].shape)
    if len(ins) > 2 and ins[2] is not None:
        broadcast(ins[2].shape, (M, N), node=node)
    return [(ins[0].dtype, (M, N))]
