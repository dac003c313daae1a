"""aotc.WinogradConv: a 3 x 3, stride-1, dilation-1, single-group float32 convolution by
Winograd's minimal filtering F(m x m, 3 x 3) (Lavin & Gray, "Fast Algorithms for Convolutional
Neural Networks", 2016). The graph pass aotc/passes/winograd.py puts it where a Conv was, with
the weights already transformed; this module holds the transforms and the lowering.

One output tile of m x m takes an input tile of a x a (a = m + 2):
    Y_tile = Aᵀ [ (G g Gᵀ) ⊙ (Bᵀ d B) ] A
with g the 3 x 3 filter, d the input tile, ⊙ the elementwise product. Over channels the
elementwise products become a² independent matrix products, one per position (k, l) of the
a x a tile:
    P[k,l][m_out, t] = sum over c of U[k,l][m_out, c] * V[k,l][c, t]
where U = G g Gᵀ (at compile time: the node's weight input is U, [a², M, C]) and V = Bᵀ d B
for every input tile t. A 3 x 3 convolution costs 9 multiply-adds per output per channel; this
one a²/m²: 4 for F(2x2), 2.25 for F(4x4), plus the transforms, which are additions (and a few
multiplications by small constants) done once per tile and channel, not per product.

The kernel works block by block: a block is `block_rows` rows of tiles of one batch entry (the
pass picks it so that the block's V and P stay in cache), and the blocks are independent, each
with its own V, P and padded rows (Loop.private: threads take blocks). Per block:
  1. per input channel, a copy of the input rows the block reads with the padding (and the
     rows and columns the last tiles overhang) as zeros, so that every tile reads an a x a
     block without bound checks; then Bᵀ d B for every tile, into V (the tile loop innermost:
     tiles m apart are read with constant strides, which compilers vectorize; a tile may be
     done twice, Loop.rerun);
  2. a² GEMMs, P[k,l] the product of U[k,l] and V[k,l] (the runtime's packed GEMM; U packed at
     compile time);
  3. per output channel, Aᵀ P A for every tile plus the bias, stored where the tile lies in
     the output (the image's last tile row and column only where they are inside), through
     positioned stores, so that the elementwise ops after the convolution run right there.
Numerics: the transforms sum and difference values before the products, so rounding differs
from a direct sum; F(2x2) uses only 0, 1, 1/2 and F(4x4) the points 0, ±1, ±2 (the largest
constant 8 in Aᵀ), the usual choice that keeps float32 errors near those of the direct sum
(tests/test_winograd.py measures them against ONNX Runtime)."""
from __future__ import annotations

from fractions import Fraction as Fr

import numpy as np

from ..ir import dtypes
from ..ir.dims import decide, is_dim
from ..ir.internal import WINOGRAD_CONV
from ..kernel.ir import F32, SPATIAL, GemmDest, binop, const, matrix, wrap
from .registry import register
from .window import IfElse

# (Bᵀ, G, Aᵀ) of F(m x m, 3 x 3) by output tile size m, exact rationals
TRANSFORMS = {
    2: ([[1, 0, -1, 0],
         [0, 1, 1, 0],
         [0, -1, 1, 0],
         [0, 1, 0, -1]],
        [[1, 0, 0],
         [Fr(1, 2), Fr(1, 2), Fr(1, 2)],
         [Fr(1, 2), Fr(-1, 2), Fr(1, 2)],
         [0, 0, 1]],
        [[1, 1, 1, 0],
         [0, 1, -1, -1]]),
    4: ([[4, 0, -5, 0, 1, 0],
         [0, -4, -4, 1, 1, 0],
         [0, 4, -4, -1, 1, 0],
         [0, -2, -1, 2, 1, 0],
         [0, 2, -1, -2, 1, 0],
         [0, 4, 0, -5, 0, 1]],
        [[Fr(1, 4), 0, 0],
         [Fr(-1, 6), Fr(-1, 6), Fr(-1, 6)],
         [Fr(-1, 6), Fr(1, 6), Fr(-1, 6)],
         [Fr(1, 24), Fr(1, 12), Fr(1, 6)],
         [Fr(1, 24), Fr(-1, 12), Fr(1, 6)],
         [0, 0, 1]],
        [[1, 1, 1, 1, 1, 0],
         [0, 1, -1, 2, -2, 0],
         [0, 1, 1, 4, 4, 0],
         [0, 1, -1, 8, -8, 1]]),
}
TILES = tuple(TRANSFORMS)


def transform_weights(w: np.ndarray, m: int) -> np.ndarray:
    """U = G g Gᵀ for every (output, input) channel pair of w [M, C, 3, 3], as [a², M, C]
    float32 (position (k, l) of the a x a tile at k*a + l), computed in float64."""
    G = np.array(TRANSFORMS[m][1], dtype=np.float64)
    u = np.einsum("ki,mcij,lj->klmc", G, w.astype(np.float64), G)
    a = m + 2
    return np.ascontiguousarray(u.reshape(a * a, *w.shape[:2]).astype(np.float32))


def geometry(x_shape, m: int, pads) -> dict:
    """Sizes of the tiling of an input [N, C, H, W] with pads [top, left, bottom, right]
    (run-time sizes stay Dims: the pass makes these only where the tiles fit whole)."""
    N, H, W = (d if is_dim(d) else int(d) for d in (x_shape[0], x_shape[2], x_shape[3]))
    C = int(x_shape[1])
    pt, pl, pb, pr = (int(p) for p in pads)
    OH, OW = H + pt + pb - 2, W + pl + pr - 2
    TH, TW = -(-OH // m), -(-OW // m)
    return dict(N=N, C=C, H=H, W=W, pt=pt, pl=pl, OH=OH, OW=OW, TH=TH, TW=TW, Wp=TW * m + 2)


def _err(node, msg):
    from ..errors import AotcError
    return AotcError(f"{node.op_type} '{node.name}': {msg}")


def _infer(node, ins):
    x, u = ins[0], ins[1]
    m = int(node.attr("tile"))
    pads = list(node.attr("pads"))
    if m not in TRANSFORMS or len(x.shape) != 4 or len(pads) != 4 or x.dtype != dtypes.FLOAT32:
        raise _err(node, f"needs a float32 N-C-H-W input, tile in {TILES} and 4 pads")
    a = m + 2
    if len(u.shape) != 3 or u.shape[0] != a * a or u.shape[2] != x.shape[1]:
        raise _err(node, f"transformed weights {tuple(u.shape)} do not fit F({m}x{m}, 3x3) on {tuple(x.shape)}")
    geo = geometry(x.shape, m, pads)
    if decide(geo["OH"], "<", 1) is not False or decide(geo["OW"], "<", 1) is not False:
        raise _err(node, "the padded input is smaller than the 3 x 3 window")
    return [(x.dtype, (geo["N"], u.shape[1], geo["OH"], geo["OW"]))]


def _combine(coefs, vals):
    """sum of c * v over the nonzero coefficients, with +-1 as additions and subtractions."""
    out = None
    for c, v in zip(coefs, vals):
        if c == 0:
            continue
        if abs(c) == 1:
            term, neg = v, c < 0
        else:
            term, neg = const(float(abs(c)), F32) * v, c < 0
        if out is None:
            out = -term if neg else term
        else:
            out = out - term if neg else out + term
    return out if out is not None else const(0.0, F32)


def _lower(node, ctx):
    X, U = ctx.ins[0], ctx.ins[1]
    Bias = ctx.ins[2] if len(ctx.ins) > 2 else None
    Y = ctx.outs[0]
    m = int(node.attr("tile"))
    a = m + 2
    BT, _, AT = TRANSFORMS[m]
    geo = geometry(X.shape, m, node.attr("pads"))
    N, C, H, W, pt, pl = (geo[k] for k in ("N", "C", "H", "W", "pt", "pl"))
    OH, OW, TH, TW, Wp = (geo[k] for k in ("OH", "OW", "TH", "TW", "Wp"))
    R = int(node.attr("block_rows", 1 if is_dim(TH) else TH))
    if R == 0:              # (passes/winograd.py WHOLE_PLANE: one block of the run's rows of tiles)
        R = TH
    elif R < 1 or TH % R:
        raise _err(node, f"block_rows {R} does not divide the {TH} rows of tiles")
    M = U.shape[1]
    T = R * TW                                # tiles a block
    rows_in = R * m + 2                       # input rows a block reads
    b = ctx.b
    b.comment(f"Winograd F({m}x{m}, 3x3): {TH} x {TW} tiles of {m} x {m} per plane, in blocks of {R} "
              f"row(s) of tiles; per block {a * a} GEMMs {M} x {T} x {C}")
    V = ctx.scratch((a * a, C, T), X.dtype, "tiles_in")
    P = ctx.scratch((a * a, M, T), X.dtype, "tiles_out")
    plane = ctx.scratch((rows_in * Wp,), X.dtype, "padded")
    zero = const(0.0, F32)

    def zeros(start: int, end: int, base=0):
        """plane[base + p] = 0 for p in [start, end)"""
        if decide(end, ">", start) is not False:
            with b.loop(wrap(end), "p", role=SPATIAL, start=wrap(start)) as p:
                b.store(plane, base + p, zero)

    # each block (R rows of tiles of one batch entry) by itself: its tiles stay in cache
    with b.loops([N, TH // R], ["n", "blk"], role=SPATIAL, private=(V, P, plane)) as (n, blk):
        # 1. per input channel: the rows the block reads, padded with zeros, then Bᵀ d B of each tile
        with b.loops([C], ["c"], role=SPATIAL, private=(plane,)) as (c,):
            src = (n * C + c) * (H * W)
            with b.loop(rows_in, "r", role=SPATIAL) as r:
                y = b.local("y", blk * (R * m) - pt + r)
                with IfElse(b, binop("&&", y >= 0, y < H)) as (inside, outside):
                    with inside:
                        zeros(0, pl, r * Wp)
                        with b.loop(W, "x", role=SPATIAL) as x:
                            b.store(plane, r * Wp + pl + x, X[src + y * W + x])
                        zeros(pl + W, Wp, r * Wp)
                    with outside:
                        zeros(0, Wp, r * Wp)
            with b.loop(R, "th", role=SPATIAL) as th:
                # (a tile may be transformed twice, as the schedule likes: Loop.rerun)
                with b.loop(TW, "tw", role=SPATIAL, rerun=True) as tw:
                    corner = th * (m * Wp) + tw * m
                    d = [[b.local(f"d{i}{j}", plane[corner + (i * Wp + j)]) for j in range(a)] for i in range(a)]
                    h = [[b.local(f"h{i}{l}", _combine(BT[l], d[i])) for l in range(a)] for i in range(a)]
                    t = th * TW + tw
                    for k in range(a):
                        for l in range(a):
                            b.store(V, ((k * a + l) * C + c) * T + t, _combine(BT[k], [h[i][l] for i in range(a)]))

        # 2. one GEMM per tile position
        with b.loop(a * a, "xi", role=SPATIAL) as xi:
            b.gemm(M, T, C, matrix(U, xi * (M * C), C, 1), matrix(V, xi * (C * T), T, 1),
                   GemmDest(P, (xi, 0, 0), (1,), (2,)))

        # 3. Aᵀ P A (+ bias) of each tile, stored where it is inside the output
        full_cols = OW // m           # (run-time planes: OW a multiple of m, the pass checked)
        with b.loop(M, "mo", role=SPATIAL) as mo:
            bias = Bias[mo] if Bias is not None else None

            def tile(th, tw, rows: int, cols: int):
                t = th * TW + tw
                oh = (blk * R + th) * m
                # (a partial tile at the edge reads only the products its inside rows and columns use)
                ks = [k for k in range(a) if any(AT[i][k] for i in range(rows))]
                ls = [l for l in range(a) if any(AT[j][l] for j in range(cols))]
                p = {(k, l): b.local(f"p{k}{l}", P[((k * a + l) * M + mo) * T + t]) for k in ks for l in ls}
                s = {(k, j): b.local(f"s{k}{j}", _combine([AT[j][l] for l in ls], [p[k, l] for l in ls]))
                     for k in ks for j in range(cols)}
                for i in range(rows):
                    for j in range(cols):
                        v = _combine([AT[i][k] for k in ks], [s[k, j] for k in ks])
                        b.store_at(Y, (n, mo, oh + i, tw * m + j), v + bias if bias is not None else v)

            def tile_row(th, rows: int):
                if full_cols != 0:
                    with b.loop(full_cols, "tw", role=SPATIAL, rerun=True) as tw:
                        tile(th, tw, rows, m)
                if OW % m:
                    tile(th, const(full_cols), rows, OW % m)

            with b.loop(R, "th", role=SPATIAL) as th:
                if OH % m == 0:
                    tile_row(th, m)
                else:                       # the image's last row of tiles is partial
                    with IfElse(b, (blk * R + th) * m + m <= OH) as (whole, partial):
                        with whole:
                            tile_row(th, m)
                        with partial:
                            tile_row(th, OH % m)


register(WINOGRAD_CONV, lower=_lower, how="Winograd F(m x m, 3 x 3) transforms + GEMMs",
         run_time_dims=True)(_infer)          # (a run-time batch; its planes are of fixed size)
