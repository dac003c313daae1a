"""MatMul and Gemm. float32 products are Gemm statements (kernel/ir.py): the operands as
strided matrices (a transposed operand is only other strides), where C lands in the output,
and what Gemm makes of each element (alpha, beta * C); the schedule decides tiles, packing
and threads. Other types get a plain loop nest."""
from __future__ import annotations

from ..errors import ShapeError
from ..ir import dtypes
from ..kernel.ir import REDUCTION, SPATIAL, GemmDest, const, matrix
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
    sa, sb, sy = _batch_strides(a_batch, M * K), _batch_strides(b_batch, K * N), _batch_strides(batch, M * N)
    if A.dtype != dtypes.FLOAT32:
        with b.loops(batch, [f"b{k}" for k in range(nb)], role=SPATIAL) as idx:
            oa = sum((i * s for i, s in zip(idx, sa) if s), const(0))
            ob = sum((i * s for i, s in zip(idx, sb) if s), const(0))
            oy = sum((i * s for i, s in zip(idx, sy) if s), const(0))
            with b.loops((M, N), ["m", "n"], role=SPATIAL) as (m, n):
                acc = b.accumulator("acc", const(0, A.dtype))
                with b.loop(K, "k", role=REDUCTION) as k:
                    b.assign(acc, acc + A[oa + m * K + k] * B[ob + k * N + n])
                b.store(Y, oy + m * N + n, acc)
        return
    # Y's dims: the batch, then M unless A is a vector, then N unless B is a vector
    m_dim = [nb] if len(A.shape) > 1 else []
    n_dim = [nb + len(m_dim)] if len(B.shape) > 1 else []
    if prod(b_batch) == 1 and tuple(a_batch) == tuple(batch):
        # B is one matrix for the whole batch: the batch's rows of A are one taller matrix
        b.comment(f"{prod(batch)} x {M} rows of A times one B")
        dest = GemmDest(Y, (0,) * len(Y.shape), tuple(range(nb)) + tuple(m_dim), tuple(n_dim))
        b.gemm(M * prod(batch), N, K, matrix(A, 0, K, 1), matrix(B, 0, N, 1), dest)
        return
    with b.loops(batch, [f"b{k}" for k in range(nb)], role=SPATIAL) as idx:
        oa = sum((i * s for i, s in zip(idx, sa) if s), const(0))
        ob = sum((i * s for i, s in zip(idx, sb) if s), const(0))
        dest = GemmDest(Y, tuple(idx) + (0,) * (len(Y.shape) - nb), tuple(m_dim), tuple(n_dim))
        b.gemm(M, N, K, matrix(A, oa, K, 1), matrix(B, ob, N, 1), dest)


@register("MatMul", lower=_lower_matmul, bounded_rule="matmul", run_time_dims=True)
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

    def result(v, m, n):
        """Y = alpha * A.B + beta * C, element (m, n)."""
        if alpha != 1.0:
            v = v * const(alpha, Y.dtype)
        if C is not None:
            c = c_at(m, n)
            v = v + (c * const(beta, Y.dtype) if beta != 1.0 else c)
        return v

    if A.dtype != dtypes.FLOAT32:
        with b.loops((M, N), ["m", "n"], role=SPATIAL) as (m, n):
            acc = b.accumulator("acc", const(0, A.dtype))
            with b.loop(K, "k", role=REDUCTION) as k:
                a = A[k, m] if ta else A[m, k]
                w = B[n, k] if tb else B[k, n]
                b.assign(acc, acc + a * w)
            b.store(Y, (m, n), result(acc, m, n))
        return
    b.gemm(M, N, K, matrix(A, 0, *((1, M) if ta else (K, 1))), matrix(B, 0, *((1, K) if tb else (N, 1))),
           GemmDest(Y, (0, 0), (0,), (1,)),
           result=result if (alpha != 1.0 or C is not None) else None)


@register("Gemm", lower=_lower_gemm, bounded_rule="gemm", run_time_dims=True)
def _gemm_infer(node, ins):
    M, N, _, _, _ = _gemm_dims(node, ins[0].shape, ins[1].shape)
    if len(ins) > 2 and ins[2] is not None:
        broadcast(ins[2].shape, (M, N), node=node)
    return [(ins[0].dtype, (M, N))]
