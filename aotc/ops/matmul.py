"""MatMul and Gemm. float32 goes to the runtime's aotc_sgemm micro-kernel; other types
get a plain loop nest."""
from __future__ import annotations

from ..errors import ShapeError
from ..ir import dtypes
from ..kernel.ir import BufPtr, const
from .common import broadcast
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

    def strides(shape, mat):
        st, acc = [], mat
        for d in reversed(shape):
            st.append(0 if d == 1 else acc)
            acc *= d
        return st[::-1]

    sa, sb, sy = strides(a_batch, M * K), strides(b_batch, K * N), strides(batch, M * N)
    with b.loops(batch, [f"b{k}" for k in range(nb)]) as idx:
        oa = sum((i * s for i, s in zip(idx, sa) if s), const(0))
        ob = sum((i * s for i, s in zip(idx, sb) if s), const(0))
        oy = sum((i * s for i, s in zip(idx, sy) if s), const(0))
        if A.dtype == dtypes.FLOAT32:
            b.call("aotc_sgemm", const(M), const(N), const(K), BufPtr(A, oa), const(K),
                   BufPtr(B, ob), const(N), BufPtr(Y, oy), const(N), const(0))
        else:
            with b.loop(M, "m") as m:
                with b.loop(N, "n") as n:
                    acc = b.local("acc", const(0, A.dtype))
                    with b.loop(K, "k") as k:
                        b.assign(acc, acc + A[oa + m * K + k] * B[ob + k * N + n])
                    b.store(Y, oy + m * N + n, acc)


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
    # Operands stored transposed are copied into scratch first (constant ones were already
    # transposed at compile time by the canonicalize pass).
    if ta:
        At = ctx.scratch((M, K), A.dtype, "a_t")
        with b.loops((M, K), ["m", "k"]) as (m, k):
            b.store(At, (m, k), A[k, m])
        A = At
    if tb:
        Bt = ctx.scratch((K, N), B.dtype, "b_t")
        with b.loops((K, N), ["k", "n"]) as (k, n):
            b.store(Bt, (k, n), B[n, k])
        B = Bt
    if A.dtype == dtypes.FLOAT32:
        b.call("aotc_sgemm", const(M), const(N), const(K), BufPtr(A), const(K), BufPtr(B), const(N),
               BufPtr(Y), const(N), const(0))
    else:
        with b.loops((M, N), ["m", "n"]) as (m, n):
            acc = b.local("acc", const(0, A.dtype))
            with b.loop(K, "k") as k:
                b.assign(acc, acc + A[m, k] * B[k, n])
            b.store(Y, (m, n), acc)
    if alpha != 1.0 or (C is not None and beta != 0.0):
        cshape = (1,) * (2 - len(C.shape)) + tuple(C.shape) if C is not None else None
        with b.loops((M, N), ["m", "n"]) as (m, n):
            v = Y[m, n]
            if alpha != 1.0:
                v = v * const(alpha, Y.dtype)
            if C is not None and beta != 0.0:
                cm = m if cshape[0] != 1 else 0
                cn = n if cshape[1] != 1 else 0
                c = C[cm * cshape[1] + cn] if len(C.shape) else C[const(0)]
                v = v + (c * const(beta, Y.dtype) if beta != 1.0 else c)
            b.store(Y, (m, n), v)


@register("Gemm", lower=_lower_gemm)
def _gemm_infer(node, ins):
    M, N, _, _, _ = _gemm_dims(node, ins[0].shape, ins[1].shape)
    if len(ins) > 2 and ins[2] is not None:
        broadcast(ins[2].shape, (M, N), node=node)
    return [(ins[0].dtype, (M, N))]
