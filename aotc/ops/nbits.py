"""Block-quantized weights read in place: `aotc.MatMulNBits` and `aotc.GatherBlockQuantized`
(ir/internal.py), which frontend/contrib_nbits.py writes for ONNX Runtime's MatMulNBits and
GatherBlockQuantized (its uint8 form: rows gathered along axis 0, blocks along the last). Its weights stay
packed (uint8 bytes of 2, 4 or 8-bit values, low bits first, each row of B one run of blocks, as
the quantizer wrote them; or, where passes/caches.py marks the node NBITS_TILES, constants relaid
by tiles of 16 columns for the runtime's product), so the artifact holds them at their
own size (4 bits: 1/8 of float32, plus the scales), and the kernel unpacks each value in its
inner loop.

Inputs: A (float32 [..., K]), B (uint8 [N, blocks, block_size * bits / 8], or those bytes
flattened per row), scales (float32, N * blocks), zero points (optional: uint8 packed
(N, ceil(blocks * bits / 8)) bytes, or float32 N * blocks; absent: 2^(bits - 1)).
Attributes K, N, bits, block_size. Output float32 [..., N].

Numerics: each weight is dequantized as the graph rewrite computes it, (float(q) - zero) * scale
in float32, then multiplied and summed in float32 as MatMul's loops do: the exact
dequantize-then-float product (ONNX Runtime's accuracy levels 0 to 3). With int8_activations
(its level 4), each block of a row of A is quantized to int8 as ONNX Runtime's CPU kernel does
(runtime/aotc_nbits.h says how), the products of the quantized activations and the weights'
raw values summed exactly in int32 per block, scaled by both blocks' scales, less the zero
points' share: on targets whose runtime has that product (NBITS_KERNEL, set by
passes/caches.py runtime_kernels) by aotc_nbits_gemm, a loop over column chunks that the
thread pool splits; elsewhere (the GPU targets) as the same arithmetic in kernel loops.
"""
from __future__ import annotations

import numpy as np

from ..errors import ShapeError, UnsupportedError
from ..ir import dtypes
from ..ir.dims import decide
from ..ir.internal import GATHER_NBITS, MATMUL_NBITS, NBITS_KERNEL, NBITS_TILES
from ..kernel.ir import (F32, I32, I64, REDUCTION, SPATIAL, BufPtr, Expr, GemmDest, Load, binop, call, cast, const, matrix,
                         maximum, minimum, select, upper_bound, wrap)
from .common import prod
from .window import IfElse
from .registry import register

U8 = np.dtype(np.uint8)
# from this many rows of A on, the weights are dequantized a tile of TILE rows of B at a time
# into float32 and multiplied by a GEMM; below it, each row of A unpacks every weight again in
# its own loop, which costs less there (measured: docs/journal/performance.md, MatMulNBits)
GEMM_ROWS = 16
TILE = 64
# int8 activations by the runtime: the output columns each aotc_nbits_gemm call computes (the
# thread pool's unit: N / NBITS_COLS calls a run; one tile of relaid weights, passes/caches.py)
NBITS_COLS = 16
I8 = np.dtype(np.int8)


def _attrs(node) -> tuple[int, int, int, int]:
    K, N, bits, bs = (int(node.attr(k, 0)) for k in ("K", "N", "bits", "block_size"))
    if bits not in (2, 4, 8) or bs < 16 or bs & (bs - 1) or K < 1 or N < 1:
        raise UnsupportedError([f"{MATMUL_NBITS} node {node.name!r}: K={K}, N={N}, bits={bits}, block_size={bs}"])
    return K, N, bits, bs


def _infer(node, ins):
    K, N, bits, bs = _attrs(node)
    a, b, scales = ins[0], ins[1], ins[2]
    zp = ins[3] if len(ins) > 3 else None
    where = f"{MATMUL_NBITS} node {node.name!r}"
    blocks = -(-K // bs)
    if a.dtype != dtypes.FLOAT32 or not a.shape or a.shape[-1] != K:
        raise ShapeError(f"{where}: A must be float32 [..., {K}], not {a.dtype} {tuple(a.shape)}")
    if node.attr(NBITS_TILES, 0):
        # (passes/caches.py's relaid constants: tiles of 16 columns, zero points in input 4 only)
        cols = -(-N // 16) * 16
        if (b.dtype != U8 or prod(b.shape) != cols * blocks * bs * bits // 8 or scales.dtype != dtypes.FLOAT32
                or prod(scales.shape) != cols * blocks or zp is not None
                or (len(ins) > 4 and (ins[4].dtype != dtypes.FLOAT32 or prod(ins[4].shape) != cols * blocks))):
            raise ShapeError(f"{where}: the weights relaid by tiles do not match K={K}, N={N}")
        return [(dtypes.FLOAT32, tuple(a.shape[:-1]) + (N,))]
    if b.dtype != U8 or prod(b.shape) != N * blocks * bs * bits // 8 or b.shape[0] != N:
        raise ShapeError(f"{where}: B must be uint8 ({N}, {blocks}, {bs * bits // 8}), not {b.dtype} {tuple(b.shape)}")
    if scales.dtype != dtypes.FLOAT32 or prod(scales.shape) != N * blocks:
        raise ShapeError(f"{where}: scales must be float32 of {N * blocks} elements")
    if zp is not None:
        want = N * -(-blocks * bits // 8) if zp.dtype == U8 else N * blocks
        if zp.dtype not in (U8, dtypes.FLOAT32) or prod(zp.shape) != want:
            raise ShapeError(f"{where}: zero points must be packed uint8 or float32 of {want} elements")
    zero_scaled = ins[4] if len(ins) > 4 else None
    if zero_scaled is not None and (zp is None or zero_scaled.dtype != dtypes.FLOAT32
                                    or prod(zero_scaled.shape) != N * blocks):
        raise ShapeError(f"{where}: scales x zero points must be float32 of {N * blocks} elements, with zero points")
    return [(dtypes.FLOAT32, tuple(a.shape[:-1]) + (N,))]


def _field(byte: Expr, t: int, bits: int) -> Expr:
    """Value t (a constant, counted from the low bits) of an int32 byte holding 8 / bits of them."""
    if bits == 8:
        return byte
    return binop("&", binop(">>", byte, const(t * bits, I32)), const((1 << bits) - 1, I32))


def _value(byte: Expr, j: Expr, bits: int) -> Expr:
    """Value j (counted from the low bits) of a byte holding 8 / bits of them, as int32."""
    v = cast(byte, I32)
    if bits == 8:
        return v
    per = 8 // bits
    shift = (j % per) * bits
    return binop("&", binop(">>", v, cast(shift, I32)), const((1 << bits) - 1, I32))


def _zero_point(Z, row: Expr, blk: Expr, blocks: int, bits: int) -> Expr:
    """Block blk's zero point of row `row` as float32, from packed uint8 zero points (a row's
    ceil(blocks * bits / 8) bytes, low bits first); 2^(bits - 1) without them."""
    if Z is None:
        return const(float(1 << (bits - 1)), F32)
    per = 8 // bits
    return cast(_value(Z[row * -(-blocks * bits // 8) + blk / per], blk, bits), F32)


def _unpack_zeros(b, Z, zeros, n: Expr, blocks: int, bits: int) -> None:
    """Row n's packed zero points as floats in `zeros`, byte by byte (each byte's values with
    constant shifts: a loop over the blocks reading byte blk / per with shift (blk % per) * bits
    stays scalar, a quarter of a 1-row product's time at blocks of 32)."""
    per = 8 // bits
    zrow = -(-blocks * bits // 8)
    whole, rest = blocks // per, blocks % per
    if whole:
        with b.loops((whole,), ["i"], role=SPATIAL) as (i,):
            byte = cast(Z[n * zrow + i], I32)
            for t in range(per):
                b.store(zeros, i * per + t, cast(_field(byte, t, bits), F32))
    for t in range(rest):
        b.store(zeros, whole * per + t, cast(_field(cast(Z[n * zrow + whole], I32), t, bits), F32))


def _byte_order(ctx, A, M: int, K: int, bs: int, blob: int, per: int):
    """A's rows copied so that, within each whole block, value t of byte j of the weights meets
    its activation at t * blob + j (the quantizer packs value 2j and 2j + 1 of a block into byte
    j at 4 bits): the unpacking loops then read bytes and activations in order, one vector each,
    where reading A in place would gather every per-th float. The tail block is copied as is."""
    if per == 1 or K < bs:
        return A
    b = ctx.b
    full, tail = K // bs, K % bs
    a = ctx.scratch((M, K), F32, "a_order")
    with b.loops((M, full, per, blob), ["m", "blk", "t", "j"], role=SPATIAL) as (m, blk, t, j):
        b.store(a, m * K + blk * bs + t * blob + j, A[m * K + blk * bs + j * per + t])
    if tail:
        with b.loops((M, tail), ["m", "k"], role=SPATIAL) as (m, k):
            b.store(a, m * K + full * bs + k, A[m * K + full * bs + k])
    return a


def _lower(node, ctx):
    K, N, bits, bs = _attrs(node)
    A, Z = ctx.ins[0], ctx.ins[3] if ctx.has_input(3) else None
    M = prod(A.shape[:-1])
    if int(node.attr("int8_activations", 0)):
        _lower_int8(ctx, M, K, N, bits, bs, bool(node.attr(NBITS_KERNEL, 0)))
        return
    blocks = -(-K // bs)
    blob = bs * bits // 8                  # bytes of one block
    full = K // bs
    b = ctx.b
    b.comment(f"{M} x {N} outputs of {K}-long rows: {bits}-bit weights in blocks of {bs}, unpacked here")
    packed_zero = Z is not None and Z.dtype == U8
    # each row's packed zero points as floats, unpacked before its blocks: read in the block
    # loop, their byte and shift (blk / per, blk % per) keep GCC 12 from vectorizing it (3x)
    zeros = ctx.scratch((blocks,), F32, "zeros") if packed_zero else None
    # GEMM from GEMM_ROWS rows of A on; over run-time rows, whichever the run's count picks
    few = decide(M, "<", GEMM_ROWS)
    # the lanes of a row's sum (below)
    part = ctx.scratch((blob,), F32, "part") if full and few is not False else None

    def zero(n: Expr, blk: Expr) -> Expr:
        if Z is None:
            return const(float(1 << (bits - 1)), F32)
        if zeros is not None:
            return zeros[blk]
        return Z[n * blocks + blk]

    def weight(byte: Expr, t: int, z: Expr, s: Expr) -> Expr:
        """Value t of a byte (low bits first), dequantized: (q - zero) * scale, in float32."""
        return (cast(_field(byte, t, bits), F32) - z) * s

    if few is False:
        _lower_gemm(ctx, M, K, N, bits, bs, zero, weight, zeros)
    elif few is True:
        _lower_rows(ctx, M, K, N, bits, bs, zero, weight, zeros, part)
    else:
        with IfElse(b, binop(">=", wrap(M), const(GEMM_ROWS))) as (then, orelse):
            with then:
                _lower_gemm(ctx, M, K, N, bits, bs, zero, weight, zeros)
            with orelse:
                _lower_rows(ctx, M, K, N, bits, bs, zero, weight, zeros, part)


def _lower_int8(ctx, M, K: int, N: int, bits: int, bs: int, runtime: bool) -> None:
    """Activations quantized to int8 blocks (the module doc): A's rows into `qa` (zero past K;
    within each block in the weights' byte order, or in A's own order for the runtime's tiles),
    each block's scale and scale x sum of its values, then every output from them."""
    A, B, S, Z, Y = ctx.ins[0], ctx.ins[1], ctx.ins[2], ctx.ins[3] if ctx.has_input(3) else None, ctx.outs[0]
    b = ctx.b
    blocks, per, blob = -(-K // bs), 8 // bits, bs * bits // 8
    width = blocks * bs
    b.comment(f"{M} x {N} outputs of {K}-long rows: {bits}-bit weights in blocks of {bs} times "
              "activations quantized to int8 blocks (ONNX Runtime's accuracy_level 4)")
    qa = ctx.scratch((M, width), I8, "qa")
    a_scale = ctx.scratch((M, blocks), F32, "a_scale")
    a_sum = ctx.scratch((M, blocks), F32, "a_sum")
    if runtime:
        # (tiles: passes/caches.py relaid the weights, which meet the activations in their own order)
        tiles = int(bool(ctx.node.attr(NBITS_TILES, 0)))
        b.call("aotc_nbits_quantize", BufPtr(A), wrap(M), const(K), const(bs), const(bits), const(tiles), BufPtr(qa),
               BufPtr(a_scale), BufPtr(a_sum), work=upper_bound(wrap(M)) * width)
        # (scratch of aotc_nbits_gemm: a column's scales x zero points)
        zs = ctx.scratch((blocks,), F32, "zero_scaled")
        chunks = -(-N // NBITS_COLS)
        # the scales x zero points (input 4), where passes/caches.py made them
        zero_scaled = ctx.ins[4] if ctx.has_input(4) else None
        with b.loops((chunks,), ["c"], role=SPATIAL, private=[zs]) as (c,):
            n0 = c * NBITS_COLS
            b.call("aotc_nbits_gemm", wrap(M), n0, minimum(n0 + NBITS_COLS, const(N)), const(K), const(bs),
                   const(bits), const(tiles), BufPtr(qa), BufPtr(a_scale), BufPtr(a_sum), BufPtr(B), BufPtr(S),
                   BufPtr(Z if Z is not None else B), const(int(Z is not None)),
                   BufPtr(zero_scaled if zero_scaled is not None else S), const(int(zero_scaled is not None)),
                   BufPtr(Y), const(N), BufPtr(zs),
                   work=upper_bound(wrap(M)) * NBITS_COLS * K // 16)
        return
    with b.loops((M, blocks), ["m", "blk"], role=SPATIAL) as (m, blk):
        amax = b.local("amax", const(0.0, F32), dtype=F32)
        with b.loop(bs, "k", role=REDUCTION) as k:
            at = blk * bs + k
            v = A[m * K + minimum(at, const(K - 1))]
            b.assign(amax, select(at < K, maximum(amax, select(v < 0.0, const(0.0, F32) - v, v)), amax))
        inv = b.local("inv", select(amax > 0.0, const(127.0, F32) / amax, const(0.0, F32)))
        total = b.local("total", const(0, I32), dtype=I32)
        with b.loop(bs, "k", role=REDUCTION) as k:
            at = blk * bs + k
            q = b.local("q", select(at < K, cast(call("rint", A[m * K + minimum(at, const(K - 1))] * inv), I32),
                                    const(0, I32)))
            b.store(qa, m * width + blk * bs + (k % per) * blob + k / per, cast(q, I8))
            b.assign(total, total + q)
        b.store(a_scale, m * blocks + blk, amax / 127.0)
        b.store(a_sum, m * blocks + blk, amax / 127.0 * cast(total, F32))
    with b.loops((N, M), ["n", "m"], role=SPATIAL) as (n, m):
        acc = b.local("acc", const(0.0, F32), dtype=F32)
        corr = b.local("corr", const(0.0, F32), dtype=F32)
        with b.loop(blocks, "blk", role=REDUCTION) as blk:
            dot = b.local("dot", const(0, I32), dtype=I32)
            with b.loop(blob, "j", role=REDUCTION) as j:
                byte = cast(B[(n * blocks + blk) * blob + j], I32)
                for t in range(per):
                    b.assign(dot, dot + cast(qa[m * width + blk * bs + t * blob + j], I32) * _field(byte, t, bits))
            s = b.local("s", S[n * blocks + blk])
            z = _zero_point(Z, n, blk, blocks, bits)
            b.assign(acc, acc + a_scale[m * blocks + blk] * s * cast(dot, F32))
            b.assign(corr, corr + a_sum[m * blocks + blk] * (s * z))
        b.store(Y, m * N + n, acc - corr)


def _lower_rows(ctx, M, K: int, N: int, bits: int, bs: int, zero, weight, zeros, part) -> None:
    """Few rows of A: each output's products summed as its bytes are unpacked."""
    A, B, S, Z, Y = ctx.ins[0], ctx.ins[1], ctx.ins[2], ctx.ins[3] if ctx.has_input(3) else None, ctx.outs[0]
    b = ctx.b
    blocks, blob, per = -(-K // bs), bs * bits // 8, 8 // bits
    full, tail = K // bs, K % bs
    a = _byte_order(ctx, A, M, K, bs, blob, per)

    def lanes(n: Expr, m: Expr, blk: Expr, first: bool) -> None:
        """part[j] (+)= the products of byte j of block blk (its per values)."""
        s = b.local("s", S[n * blocks + blk])
        z = b.local("z", zero(n, blk))
        with b.loops((blob,), ["j"], role=SPATIAL) as (j,):
            byte = cast(B[(n * blocks + blk) * blob + j], I32)
            total = None if first else part[j]
            for t in range(per):
                term = a[m * K + blk * bs + t * blob + j] * weight(byte, t, z, s)
                total = term if total is None else total + term
            b.store(part, j, total)

    # Each output's whole blocks are summed lane-wise: lane j of `part` takes byte j of every
    # block, so that the inner loop is spatial and as long as a block's bytes, and the lanes
    # are added once per output, not once per block. The first block sets the lanes (a loop
    # zeroing them, which GCC makes a memset, keeps it from vectorizing the block loop: 3.5x).
    # n outside m: a row of B (K * bits / 8 bytes) stays in cache across the rows of A. The
    # sums are float32, as MatMul's GEMM's.
    private = [x for x in (zeros, part) if x is not None]
    with b.loops((N,), ["n"], role=SPATIAL, private=private) as (n,):
        if zeros is not None:
            _unpack_zeros(b, Z, zeros, n, blocks, bits)
        with b.loops((M,), ["m"], role=SPATIAL, private=[part] if part is not None else []) as (m,):
            acc = b.local("acc", const(0.0, F32), dtype=F32)
            if full:
                lanes(n, m, const(0), True)
                if full > 1:
                    with b.loop(full, "blk", role=REDUCTION, start=1) as blk:
                        lanes(n, m, blk, False)
                with b.loop(blob, "j", role=REDUCTION) as j:
                    b.assign(acc, acc + part[j])
            if tail:                 # K's last block, shorter than the others
                s = b.local("s", S[n * blocks + full])
                z = b.local("z", zero(n, const(full)))
                first = m * K + full * bs
                whole, rest = tail // per, tail % per
                if whole:
                    with b.loop(whole, "j", role=REDUCTION) as j:
                        byte = cast(B[(n * blocks + full) * blob + j], I32)
                        for t in range(per):
                            b.assign(acc, acc + A[first + j * per + t] * weight(byte, t, z, s))
                if rest:             # (it ends inside a byte)
                    byte = cast(B[(n * blocks + full) * blob + whole], I32)
                    for t in range(rest):
                        b.assign(acc, acc + A[first + whole * per + t] * weight(byte, t, z, s))
            b.store(Y, m * N + n, acc)


def _lower_gemm(ctx, M, K: int, N: int, bits: int, bs: int, zero, weight, zeros) -> None:
    """Several rows of A: TILE rows of B at a time are dequantized into a float32 scratch
    (TILE x K), which a Gemm statement multiplies (the schedule's GEMM, as MatMul's): each
    weight is unpacked once per run, not once per row of A. Within each whole block the
    products are summed in the order the bytes hold the values (value t of byte j at t * blob
    + j, both in the scratch and in a copy of A's rows), so that the unpacking loop reads
    bytes and writes floats in order (a sum's order changes its rounding only)."""
    A, B, S, Z, Y = ctx.ins[0], ctx.ins[1], ctx.ins[2], ctx.ins[3] if ctx.has_input(3) else None, ctx.outs[0]
    b = ctx.b
    blocks, blob, per = -(-K // bs), bs * bits // 8, 8 // bits
    full, tail = K // bs, K % bs
    tile = min(N, TILE)
    # the tile's row stride: K floats, or 16 more where K's bytes are a multiple of 4 KB, whose
    # rows would all fall in one set of the L1 cache as the GEMM packs the tile's columns
    # (16 x 4096 x 4096: 49 ms with a 4096 stride, 15 ms with 4112)
    ld = K + 16 if (K * 4) % 4096 == 0 else K
    w = ctx.scratch((tile, ld), F32, "w_tile")
    rank = len(Y.shape)
    a = _byte_order(ctx, A, M, K, bs, blob, per)

    def rows(first: Expr, count: int) -> None:
        with b.loops((count,), ["r"], role=SPATIAL, private=[zeros] if zeros is not None else []) as (r,):
            n = first + r
            if zeros is not None:
                _unpack_zeros(b, Z, zeros, n, blocks, bits)
            if full:
                with b.loops((full,), ["blk"], role=SPATIAL) as (blk,):
                    s = b.local("s", S[n * blocks + blk])
                    z = b.local("z", zero(n, blk))
                    for t in range(per):
                        with b.loops((blob,), ["j"], role=SPATIAL) as (j,):
                            byte = cast(B[(n * blocks + blk) * blob + j], I32)
                            b.store(w, r * ld + blk * bs + t * blob + j, weight(byte, t, z, s))
            if tail:             # the last block, shorter, in its own order
                s = b.local("s", S[n * blocks + full])
                z = b.local("z", zero(n, const(full)))
                for k in range(tail):
                    byte = cast(B[(n * blocks + full) * blob + k // per], I32)
                    b.store(w, r * ld + full * bs + k, weight(byte, k % per, z, s))
        # Y[:, first:first + count] = a . w[:count]^T (w's element (k, r) at r * ld + k)
        dest = GemmDest(Y, (0,) * (rank - 1) + (first,), tuple(range(rank - 1)), (rank - 1,))
        b.gemm(M, count, K, matrix(a, 0, K, 1), matrix(w, 0, 1, ld), dest)

    whole, rest = N // tile, N % tile
    private = [w] + ([zeros] if zeros is not None else [])
    with b.loops((whole,), ["nt"], role=SPATIAL, private=private) as (nt,):
        rows(nt * tile, tile)
    if rest:
        rows(const(whole * tile), rest)


register(MATMUL_NBITS, lower=_lower, reference_fold=False, run_time_dims=True,
         how="packed 2/4/8-bit weights read in place, unpacked in the inner loop")(_infer)


# ------------------------------------------------------------------------ GatherBlockQuantized
def _gather_attrs(node, data) -> tuple[int, int, int, int]:
    """(bits, block_size, columns, blocks a row) of a uint8 table [rows, bytes] (or relaid by
    tiles: NBITS_TILES, its columns in attribute K)."""
    bits, bs = int(node.attr("bits", 4)), int(node.attr("block_size", 128))
    if bits not in (4, 8) or bs < 16 or bs & (bs - 1):
        raise UnsupportedError([f"{GATHER_NBITS} node {node.name!r}: bits={bits}, block_size={bs}"])
    cols = int(node.attr("K")) if node.attr(NBITS_TILES, 0) else data.shape[-1] * 8 // bits
    return bits, bs, cols, -(-cols // bs)


def _gather_rows(node, data) -> int:
    return int(node.attr("N")) if node.attr(NBITS_TILES, 0) else data.shape[0]


def _gather_infer(node, ins):
    data, idx, scales = ins[0], ins[1], ins[2]
    zp = ins[3] if len(ins) > 3 else None
    where = f"{GATHER_NBITS} node {node.name!r}"
    tiles = bool(node.attr(NBITS_TILES, 0))
    if data.dtype != U8 or len(data.shape) != (1 if tiles else 2):
        raise ShapeError(f"{where}: data must be uint8 [rows, bytes], not {data.dtype} {tuple(data.shape)}")
    bits, bs, cols, blocks = _gather_attrs(node, data)
    rows = _gather_rows(node, data)
    padded = -(-rows // 16) * 16 if tiles else rows        # (tiles: a whole last tile)
    if tiles and (zp is not None or prod(data.shape) != padded * blocks * bs * bits // 8):
        raise ShapeError(f"{where}: the table relaid by tiles does not match {rows} x {cols}")
    if idx.dtype not in (dtypes.INT32, dtypes.INT64):
        raise ShapeError(f"{where}: indices must be int32 or int64")
    if scales.dtype != dtypes.FLOAT32 or prod(scales.shape) != padded * blocks:
        raise ShapeError(f"{where}: scales must be float32 of {padded * blocks} elements")
    if zp is not None and (zp.dtype != U8 or prod(zp.shape) != rows * -(-blocks * bits // 8)):
        raise ShapeError(f"{where}: zero points must be uint8, {-(-blocks * bits // 8)} bytes a row")
    return [(dtypes.FLOAT32, tuple(idx.shape) + (cols,))]


def _gather_lower(node, ctx):
    D, I, S = ctx.ins[0], ctx.ins[1], ctx.ins[2]
    Z = ctx.ins[3] if ctx.has_input(3) else None
    Y = ctx.outs[0]
    bits, bs, cols, blocks = _gather_attrs(node, D)
    rows = _gather_rows(node, D)
    per = 8 // bits
    b = ctx.b
    tiles = bool(node.attr(NBITS_TILES, 0))
    b.comment(f"{prod(I.shape)} rows of a {rows} x {cols} table of {bits}-bit values in blocks of {bs}, unpacked"
              + (" from the tiles of a MatMulNBits sharing it (passes/caches.py)" if tiles else ""))
    with b.loops((prod(I.shape),), ["t"], role=SPATIAL) as (t,):
        row = b.local("row", cast(Load(I, t), I64))
        with b.if_(binop("||", row < -rows, row >= rows)):
            b.fail("AOTC_ERR_INDEX_OUT_OF_RANGE", f"an index outside [-{rows}, {rows})")
        b.assign(row, select(row < 0, row + rows, row))
        if tiles:
            # row r is column r % 16 of tile r / 16: position k's byte 4 (r % 16) + k % 4 of its
            # group k / span (64 bytes), value (k % span) / 4 of it (runtime/aotc_nbits.h)
            span, width = 4 * per, blocks * bs
            tile, col = row / 16, row % 16
            with b.loops((cols,), ["k"], role=SPATIAL) as (k,):
                byte = cast(D[(tile * (width // span) + k / span) * 64 + col * 4 + k % 4], I32)
                s = S[(tile * blocks + k / bs) * 16 + col]
                z = const(float(1 << (bits - 1)), F32)
                b.store(Y, t * cols + k, (cast(_value(byte, (k % span) / 4, bits), F32) - z) * s)
        else:
            with b.loops((cols // per,), ["j"], role=SPATIAL) as (j,):
                blk = j * per / bs
                byte = cast(D[row * (D.shape[-1]) + j], I32)
                s = S[row * blocks + blk]
                z = _zero_point(Z, row, blk, blocks, bits)
                for v in range(per):
                    b.store(Y, t * cols + j * per + v, (cast(_field(byte, v, bits), F32) - z) * s)


register(GATHER_NBITS, lower=_gather_lower, reference_fold=False, run_time_dims=True, index_inputs=lambda node, ins: (
    {1: _gather_rows(node, ins[0])} if ins and ins[0] is not None and ins[0].shape else {}),
    how="rows of a packed 4/8-bit table dequantized as they are gathered")(_gather_infer)
