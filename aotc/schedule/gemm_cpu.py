"""The CPU schedule's matrix multiply: tiles from the target, operands packed at compile time,
orientation and threading of every Gemm statement (printed as a call of the runtime's
blocked GEMM, runtime/aotc_gemm_packed.h).

    C[M,N] (=, or += when accumulate) A[M,K] . B[K,N], then the epilogue on every tile

A *constant* operand (a weight) is packed here, at compile time, into the micro-kernel's
panels, K block after K block (`pack_a` / `pack_b`), and the packed copy replaces it in the
weights; the runtime packs run-time operands one cache block at a time into `work`.
The micro-tile (MR x NR), the cache blocks (KC, MC, NC) and the prefetch distance are the
target's [gemm] table (targets/<name>.toml), written into the generated C as AOTC_GEMM_*
macros; packed constants depend on them, so they are made per target.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, replace

import numpy as np

from ..errors import AotcError
from ..frontend.mapped import drop_pages
from ..ir.dims import range_points
from ..kernel.ir import (Assign, Decl, Expr, Gemm, Load, Loop, Matrix, SizeVar, Stmt, Store, as_dim, children,
                         const, evaluate, expr_vars, stmt_exprs, upper_bound, walk_expr)
from ..targets import GemmConfig, Target

@dataclass(frozen=True)
class GemmTiles:
    mr: int     # micro-tile rows (values of A per k step)
    nr: int     # micro-tile columns (contiguous values of B per k step): one or two vector widths
    kc: int     # K block (at most)
    mc: int     # row block (a multiple of mr)
    nc: int     # column block (a multiple of nr)
    prefetch: int = 0   # k steps the micro-kernel prefetches ahead (0: none)
    # what storing one element of a product computed transposed costs beyond a plain store, in
    # micro-tile multiply-adds (prefers_transposed)
    transpose_cost: int = 64
    # the option bf16: products of at least BF16_MIN rows and columns may run on AMX tiles
    # (runtime/aotc_gemm_packed.h aotc_sgemm_block_bf16), whose blocks take scratch of their own
    bf16: bool = False
    # [gemm] int8_amx: the integer GEMM may run on AMX-INT8 tiles (runtime/aotc_igemm.h), whose
    # rows of A take scratch and whose reads of B may pass a panel's end (INT8_AMX_TAIL)
    int8_amx: bool = False
    # [gemm] conv_broadcast: convolutions' GEMMs of at most this many rows are summed by broadcast
    # (sums_by_broadcast); 0: none
    conv_broadcast_rows: int = 0

    _FIELDS = ("mr", "nr", "kc", "mc", "nc", "prefetch")     # (the C macros)

    @classmethod
    def of(cls, target: Target) -> "GemmTiles":
        t = target.gemm
        missing = [k for k in cls._FIELDS[:5] if not getattr(t, k)]
        if missing:
            raise AotcError(f"target {target.name!r}: its [gemm] table lacks {', '.join(missing)}",
                            "a CPU target's file gives the GEMM's tiles (mr, nr, kc, mc, nc, prefetch)")
        tiles = cls(t.mr, t.nr, t.kc, t.mc, t.nc, t.prefetch, t.transpose_cost, target.numerics.bf16, t.int8_amx,
                    t.conv_broadcast_max_rows if t.conv_broadcast else 0)
        if min(tiles.mr, tiles.nr, tiles.kc, tiles.mc, tiles.nc) < 1 or tiles.prefetch < 0 \
                or tiles.mc % tiles.mr or tiles.nc % tiles.nr:
            raise AotcError(f"target {target.name!r}: gemm tiles {cls._FIELDS} = "
                            f"{tuple(getattr(tiles, k) for k in cls._FIELDS)} must be positive, mc a multiple of mr "
                            "and nc a multiple of nr")
        return tiles

    def macros(self) -> dict[str, int]:
        """The C macros aotc_gemm_packed.h (and aotc_igemm.h) read."""
        return {**{f"AOTC_GEMM_{k.upper()}": getattr(self, k) for k in self._FIELDS},
                **({"AOTC_GEMM_BF16": 1} if self.bf16 else {}), **({"AOTC_IGEMM_AMX": 1} if self.int8_amx else {})}

    def defines(self) -> list[str]:
        return [f"#define {k} {v}" for k, v in self.macros().items()]

    def k_step(self, K: int) -> int:
        """K block size: K in ceil(K / kc) equal blocks (aotc_sgemm_kstep in the runtime)."""
        blocks = -(-K // self.kc)
        return -(-K // blocks) if blocks else 0

    def int8_k_step(self, K: int) -> int:
        """The integer GEMM's K block: k_step rounded up to a whole number of quads
        (aotc_igemm_kstep in the runtime)."""
        return _round_up(self.k_step(K), 4)

    def k_sizes(self, K: int, k_varies: bool) -> list[int]:
        """The K to size a GEMM's scratch for: K itself, or where K is a run-time size with K at
        its bound, also every K below KC. The runtime's K blocks are not monotone in K (K = 385
        takes blocks of 193, K = 384 one of 384), and its scratch grows with the block: sized for
        the bound alone, a product of 64 x K x 64 with K up to 2048 overran it at K = 384. A K up
        to KC is its own block, so those K reach every block a smaller K can take."""
        return sorted({K, *range(1, min(K, self.kc) + 1)}) if k_varies else [K]

    def int8_work_bytes(self, M: int, N: int, K: int, a_packed: bool, b_packed: bool, k_varies: bool = False) -> int:
        """Scratch bytes aotc_igemm needs for the blocks of its strided operand (`k_varies`:
        K is a run-time size, K its bound; k_sizes)."""
        if k_varies:
            return max(self.int8_work_bytes(M, N, k, a_packed, b_packed) for k in self.k_sizes(K, True))
        kc = self.int8_k_step(K)
        n = 0
        if not b_packed:
            n += kc * _round_up(min(self.nc, N), self.nr)
        if not a_packed:
            n += kc * _round_up(min(self.mc, M), self.mr)
        if self.int8_amx and min(M, N, K) >= INT8_AMX_MIN:        # A's rows for the tiles, and the tail
            n += _round_up(min(self.mc, M), 32) * _round_up(kc, 64) + INT8_AMX_TAIL
        return n

    def computed_rows(self, M: int) -> int:
        """Rows the micro-tiles compute for M rows: whole MR-row tiles, and an edge tile of one
        row (the one-row kernel), of at most half MR rows (the half-height one, half MR rows)
        or of more (a whole tile), as aotc_sgemm_tile_any picks them."""
        edge = M % self.mr
        half = (self.mr + 1) // 2
        if edge == 0:
            pad = 0
        elif edge == 1:
            pad = 1
        elif edge <= half < self.mr:
            pad = half
        else:
            pad = self.mr
        return M - edge + pad

    def padded_madds(self, M: int, N: int) -> int:
        """Multiply-adds per k the micro-tiles spend on an M x N result (the rows they compute
        for M, N padded to NR)."""
        return self.computed_rows(M) * _round_up(N, self.nr)

    def b_block_columns(self, K: int) -> int:
        """Columns of a B packed at run time that aotc_sgemm_block packs at a time: NC, or fewer
        where that block would hold more than MC x KC floats (it stays in L2, as A's block)."""
        kstep = self.k_step(K)
        if kstep == 0:
            return self.nc
        return min(self.nc, max(self.nr, self.mc * self.kc // kstep // self.nr * self.nr))

    def prefers_transposed(self, M: int, N: int, K: int, margin: float = 0.05) -> bool:
        """True when computing Cᵀ = Bᵀ·Aᵀ (the roles of M and N swapped) and transposing the
        result back is `margin` cheaper than computing C: an N of 49 pads to 64 on a 32-wide
        tile, where an M of 49 pads to 56 on an 8-row one."""
        return self.transposed_cost(M, N, K) < 1 - margin

    def transposed_cost(self, M: int, N: int, K: int) -> float:
        """What computing Cᵀ and transposing it back costs, over computing C."""
        plain = self.padded_madds(M, N) * K
        swapped = self.padded_madds(N, M) * K + self.transpose_cost * M * N
        return swapped / plain if plain else 1.0

    def work_floats(self, M: int, N: int, K: int, a_packed: bool, b_packed: bool, a_bf16: bool = False,
                    b_bf16: bool = False, k_varies: bool = False) -> int:
        """Scratch floats aotc_sgemm_packed needs for the blocks of its strided operands (and of
        its operands stored as bfloat16 tiles, `a_bf16` / `b_bf16`, which the float32 path widens
        as it would pack a strided one), plus the AMX path's with the option bf16 (`k_varies`:
        K is a run-time size, K its bound; k_sizes)."""
        if k_varies:
            return max(self.work_floats(M, N, k, a_packed, b_packed, a_bf16, b_bf16) for k in self.k_sizes(K, True))
        kc = self.k_step(K)
        n = self.bf16_work_floats(M, N, K, a_packed, b_packed, a_bf16, b_bf16) \
            if self.bf16 and min(M, N, K) >= BF16_MIN else 0
        if not b_packed:
            n += kc * _round_up(min(self.b_block_columns(K), N), self.nr)
        if not a_packed:
            n += kc * _round_up(min(self.mc, M), self.mr)
        return n

    def bf16_work_floats(self, M: int, N: int, K: int, a_packed: bool, b_packed: bool, a_bf16: bool,
                         b_bf16: bool) -> int:
        """Scratch floats the AMX path takes after the float32 path's (aotc_sgemm_block_bf16), in
        bfloat16 pairs, k rounded up to 32 and rows and columns to 32: B's columns converted at a
        time (at most BF16_COLUMNS; none for a B stored as tiles) and A's row block, or a constant
        A in float32 panels whole when it has at most BF16_A_ONCE values so laid out (none for an
        A stored as tiles)."""
        kstep = self.k_step(K)
        kp = _round_up(kstep, 32)
        columns = min(self.nc if b_packed else self.b_block_columns(K), BF16_COLUMNS, N)
        b = 0 if b_bf16 else kp * _round_up(columns, 32)
        a_whole = _round_up(M, 32) * kp * -(-K // kstep)
        a = 0 if a_bf16 else a_whole if a_packed and a_whole <= BF16_A_ONCE else _round_up(min(self.mc, M), 32) * kp
        return (b + a) // 2


# the integer GEMM's AMX path (runtime/aotc_igemm.h AOTC_IGEMM_AMX_MIN, AOTC_IGEMM_AMX_TAIL): the least
# rows, columns and K it takes, and the bytes its last K step may read past a panel of B
INT8_AMX_MIN = 16
INT8_AMX_TAIL = 2048

# the AMX path's constants (runtime/aotc_gemm_packed.h AOTC_BF16_MIN, AOTC_BF16_NC, AOTC_BF16_A_ONCE)
BF16_MIN = 16
BF16_COLUMNS = 512
BF16_A_ONCE = 1 << 22


def _pack_quads(x: np.ndarray, width: int, kstep: int) -> np.ndarray:
    """[R, K] bytes -> the integer GEMM's panels (runtime/aotc_igemm.h): K block after K block
    (kstep each, a multiple of 4; the last one shorter), each holding all the panels of `width`
    rows, quad-major: panel p, quad q, row r, byte t at ((p*quads + q)*width + r)*4 + t. Rows
    past R and k past each block's end are zero."""
    x = np.asarray(x)
    R, K = x.shape
    P = -(-R // width)
    pad = np.zeros((P * width, K), x.dtype)
    pad[:R] = x
    blocks = []
    for k0 in range(0, K, kstep):
        blk = pad[:, k0:k0 + kstep]
        kc4 = _round_up(blk.shape[1], 4)
        q = np.zeros((P * width, kc4), x.dtype)
        q[:, :blk.shape[1]] = blk
        blocks.append(q.reshape(P, width, kc4 // 4, 4).transpose(0, 2, 1, 3).reshape(-1))
    return np.ascontiguousarray(np.concatenate(blocks)) if blocks else np.zeros(0, x.dtype)


def pack_a_int8(a: np.ndarray, tiles: GemmTiles) -> np.ndarray:
    """A [M, K] (uint8 or int8) as the integer GEMM's MR-row panels of quads."""
    return _pack_quads(a, tiles.mr, tiles.int8_k_step(a.shape[-1]))


def pack_b_int8(b: np.ndarray, tiles: GemmTiles) -> np.ndarray:
    """B [K, N] (uint8 or int8) as the integer GEMM's NR-column panels of quads (then, where it
    may run on AMX tiles, INT8_AMX_TAIL zero bytes that their last K step may read)."""
    packed = _pack_quads(np.asarray(b).T, tiles.nr, tiles.int8_k_step(b.shape[-2]))
    if tiles.int8_amx:
        packed = np.concatenate([packed, np.zeros(INT8_AMX_TAIL, packed.dtype)])
    return packed


def _round_up(x: int, m: int) -> int:
    return -(-x // m) * m


def _pack(x: np.ndarray, width: int, kstep: int) -> np.ndarray:
    """[..., R, K] -> [..., ceil(R/width)*width*K]: K block after K block (kstep each, the
    last one shorter), each holding all the panels of `width` rows, k-major; rows past R zero.
    Written block by block into the one result (a weight of a large model is hundreds of MB:
    no padded or per-block copies of it)."""
    x = np.asarray(x, dtype=np.float32)
    *batch, R, K = x.shape
    P, full = -(-R // width), R // width
    out = np.zeros((*batch, P * width * K), np.float32)
    at = 0
    for k0 in range(0, K, kstep or 1):       # (kstep is 0 only where K is)
        ks = min(kstep, K - k0)
        panels = out[..., at:at + P * width * ks].reshape(*batch, P, ks, width)
        rows = x[..., :, k0:k0 + ks]
        panels[..., :full, :, :] = rows[..., :full * width, :].reshape(*batch, full, width, ks).swapaxes(-1, -2)
        if full < P:                    # the last panel's rows past R stay zero
            panels[..., full, :, :R - full * width] = rows[..., full * width:, :].swapaxes(-1, -2)
        at += P * width * ks
    return out


def pack_a(a: np.ndarray, tiles: GemmTiles) -> np.ndarray:
    """A [..., M, K] as aotc_sgemm_packed reads a packed A: MR-row panels, K-block-major,
    flattened to [..., ceil(M/MR)*MR*K]."""
    return _pack(a, tiles.mr, tiles.k_step(a.shape[-1]))


def pack_b(b: np.ndarray, tiles: GemmTiles) -> np.ndarray:
    """B [..., K, N] as aotc_sgemm_packed reads a packed B: NR-column panels, K-block-major,
    flattened to [..., ceil(N/NR)*NR*K]."""
    b = np.asarray(b, dtype=np.float32)
    return _pack(b.swapaxes(-1, -2), tiles.nr, tiles.k_step(b.shape[-2]))


def to_bfloat16(x: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bits (uint16), rounded to nearest, ties to even (as the CPU's
    conversion does); a NaN stays a (quiet) NaN."""
    u = np.ascontiguousarray(x, np.float32).view(np.uint32)
    rounded = ((u.astype(np.uint64) + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    return np.where(np.isnan(x), (u >> 16).astype(np.uint16) | 0x40, rounded)


def pack_a_bf16(a: np.ndarray, tiles: GemmTiles) -> np.ndarray:
    """A [..., M, K] as the AMX tiles read a constant A (runtime/aotc_gemm_packed.h, the option
    bf16): bfloat16, K block after K block (k_step each), each block a region of kp x round(M, 32)
    values (kp: k_step rounded up to 32) whose row i holds the block's k at i * kcp (kcp: this
    block's length rounded up to 32); zeros past M and past each block's k; then 32 rows of
    zeros, which a thread's last 32-row tile may read past its rows. Flattened to [..., size]."""
    a = np.asarray(a, dtype=np.float32)
    *batch, M, K = a.shape
    kstep = tiles.k_step(K)
    kp, rows = _round_up(kstep, 32), _round_up(M, 32)
    blocks = -(-K // kstep) if kstep else 0
    out = np.zeros((*batch, blocks * kp * rows + 32 * kp), np.uint16)
    for b in range(blocks):
        k0 = b * kstep
        kc = min(kstep, K - k0)
        kcp = _round_up(kc, 32)
        region = out[..., b * kp * rows:b * kp * rows + kcp * rows].reshape(*batch, rows, kcp)
        region[..., :M, :kc] = to_bfloat16(a[..., :, k0:k0 + kc])
    return out


def pack_b_bf16(b: np.ndarray, tiles: GemmTiles) -> np.ndarray:
    """B [..., K, N] as the AMX tiles read a constant B: bfloat16, K block after K block, each
    block a region of kp x round(N, 32) values holding groups of 16 columns, each group kcp/2 rows
    of 16 pairs: (k, 16g + c) at g * kcp * 16 + (k // 2) * 32 + 2c + k % 2 (k within the block);
    zeros past N and past each block's k. Flattened to [..., size]."""
    b = np.asarray(b, dtype=np.float32)
    *batch, K, N = b.shape
    kstep = tiles.k_step(K)
    kp, cols = _round_up(kstep, 32), _round_up(N, 32)
    blocks = -(-K // kstep) if kstep else 0
    out = np.zeros((*batch, blocks * kp * cols), np.uint16)
    for blk in range(blocks):
        k0 = blk * kstep
        kc = min(kstep, K - k0)
        kcp = _round_up(kc, 32)
        dense = np.zeros((*batch, kcp, cols), np.uint16)
        dense[..., :kc, :N] = to_bfloat16(b[..., k0:k0 + kc, :])
        groups = dense.reshape(*batch, kcp // 2, 2, cols // 16, 16)            # [pair, k % 2, group, c]
        at = blk * kp * cols
        out[..., at:at + kcp * cols] = np.moveaxis(groups, (-2, -4, -1, -3), (-4, -3, -2, -1)).reshape(*batch, -1)
    return out






def packs_im2col(gm: Gemm, gemm: GemmConfig) -> bool:
    """Should g read its B from the convolution's input (g.b.direct) rather than its im2col buffer?
    It packs the im2col matrix from the input (aotc_sgemm_pack_im2col: as B, or as A when the
    product is computed transposed) when each tap's plan, made once per panel (or span of A's
    panels), serves at least `im2col_min_channels` input channels, or every packed
    element feeds at least `im2col_min_rows` rows of the product (the packing is then small
    beside the GEMM), or the im2col buffer would exceed `im2col_max_buffer` bytes (its passes
    then run at memory speed, and reading the input directly is no slower while the workspace
    shrinks): the target's [gemm] values, whose measurements targets/c.toml gives. Otherwise
    making the plans costs more than the buffer's passes."""
    d = gm.b.direct
    if d is None:
        return False
    M, N, K = capacity(gm)
    return K >= gemm.im2col_min_channels * d.window.kernel[0] * d.window.kernel[1] or M >= gemm.im2col_min_rows \
        or K * N * 4 > gemm.im2col_max_buffer


def sums_by_broadcast(gm: Gemm, tiles: GemmTiles) -> bool:
    """Is g, a convolution's GEMM that can read its im2col matrix from the input, summed (reading
    it so, whatever packs_im2col says) with its output channels in vector lanes
    (Gemm.conv_broadcast, runtime/aotc_gemm_packed.h aotc_conv_broadcast)? Asked both before
    read_im2col_directly (g.b is then the buffer, its direct form in g.b.direct) and after.
    Where the target has it ([gemm] conv_broadcast), for at most
    conv_broadcast_max_rows rows: every packed element of the matrix would feed only that many
    rows, and packing it costs more than the product (YOLO's 3 -> 16 and 16 -> 32 channel
    stride-2 convolutions: 45% and 34% of their time). Sizes fixed at compile time, K in one K
    block, C's columns contiguous, float32, nothing accumulated, the weights a constant (packed
    here in panels of 16 rows: ConstPacker.pack's lanes16)."""
    b = gm.b.direct if gm.b.direct is not None else gm.b
    if not tiles.conv_broadcast_rows or b.layout != "im2col" or gm.integer or gm.accumulate:
        return False
    if not all(isinstance(x, int) for x in (gm.M, gm.N, gm.K, gm.c.rs, gm.c.cs)) or gm.c.cs != 1:
        return False
    # output rows of at least 16 columns: the kernel's blocks (narrower planes would take its
    # column-at-a-time path for every column: LeNet-5's 10 x 10 one ran 1.7x the GEMM's time);
    # and M filling its groups of 16 lanes as well as the GEMM's tiles fill theirs (LeNet-5's
    # 6 channels: 6 of 16 lanes, 1.25x the time of 8-row tiles with 6 rows)
    lanes = -(-gm.M // 16) * 16
    return gm.M <= tiles.conv_broadcast_rows and lanes == -(-gm.M // tiles.mr) * tiles.mr \
        and 0 < gm.K <= tiles.kc and b.window.out[-1] >= 16


def capacity(gm: Gemm) -> tuple[int, int, int]:
    """M, N and K at their largest: a run-time size (kernel/ir.py SizeVar) at its bound. The
    schedule's choices (orientation, packing, threads, tiles) and its scratch are made for
    these until choices per size class exist (docs/journal/run-time-dims-plan.md)."""
    return upper_bound(gm.M), upper_bound(gm.N), upper_bound(gm.K)


def computes_transposed(gm: Gemm, tiles: GemmTiles, margin: float = 0.05) -> bool:
    """Is gm computed as Cᵀ = Bᵀ·Aᵀ (GemmTiles.prefers_transposed)? Over run-time sizes, by
    the geometric mean of transposed_cost at the range's points (ir/dims.py range_points), each
    size counting alike: a 1x1 convolution of 192 channels over planes of 4 to 64 positions
    costs 0.14 of the plain product transposed on 4 (an 8-row tile against a 32-column one),
    0.56 on 16, 1.13 on 64; decided at the largest plane, it would run plain everywhere, at
    twice what a build fixed to 16 costs."""
    sizes = [as_dim(x) for x in (gm.M, gm.N, gm.K)]
    points = range_points(sizes) if None not in sizes else [capacity(gm)]
    if columns_contiguous(gm):
        # C's columns are contiguous (a channels-last output, ops/channels_last.py): computed
        # transposed it is stored row by row, and it is the plain product that would pay the
        # transposed store; so the same choice, made from the other side
        return not computes_transposed_sizes([(N, M, K) for M, N, K in points], tiles, margin)
    return computes_transposed_sizes(points, tiles, margin)


def computes_transposed_sizes(points, tiles: GemmTiles, margin: float) -> bool:
    if len(points) == 1:
        return tiles.prefers_transposed(*points[0], margin)
    cost = math.exp(sum(math.log(tiles.transposed_cost(*p)) for p in points) / len(points))
    return cost < 1 - margin


def columns_contiguous(gm: Gemm) -> bool:
    """Is C column-major: consecutive rows adjacent and columns not, with more than one of each
    (a single row or column has no stride that matters)?"""
    c, (M, N, _) = gm.c, capacity(gm)
    return c.layout == "strided" and isinstance(c.rs, int) and isinstance(c.cs, int) and c.rs == 1 \
        and c.cs != 1 and M > 1 and N > 1


def gemm_macs(gm: Gemm) -> int:
    M, N, K = capacity(gm)
    return M * N * max(K, 1)


def swap_orientation(gm: Gemm) -> Gemm:
    """Cᵀ = Bᵀ.Aᵀ: the same product with the roles of rows and columns exchanged. The
    epilogue keeps its variables (the new rows walk the old j), so it is unchanged, except that
    its per-row part now depends on the inner index and joins the element part."""
    dest = replace(gm.dest, rows=gm.dest.cols, cols=gm.dest.rows) if gm.dest is not None else None
    return replace(gm, M=gm.N, N=gm.M, a=gm.b.transposed(), b=gm.a.transposed(), c=gm.c.transposed(),
                   i=gm.j, j=gm.i, dest=dest, epilogue=gm.row_epilogue + gm.epilogue, row_epilogue=[])


class ConstPacker:
    """Packs constant GEMM operands into new weights, once per (weight, layout) across kernels."""

    def __init__(self, graph, tiles: GemmTiles):
        self.graph, self.tiles = graph, tiles
        self._made: dict = {}

    def pack(self, step, gm: Gemm, which: str, loops: list[Loop], bf16: bool = False,
             lanes16: bool = False) -> Matrix | None:
        """The operand `which` ('a' or 'b') of g packed (float32 panels; with `bf16`, bfloat16 in
        the AMX tiles' layout: pack_a_bf16 / pack_b_bf16; with `lanes16`, an A in panels of 16
        rows, one K block, as aotc_conv_broadcast reads its weights: Gemm.conv_broadcast), or
        None when it is not a constant (or its offset depends on something other than the
        enclosing loops' indices)."""
        found = self._instances(step, gm, which, loops)
        if found is None:
            return None
        src, key, index, instances = found
        key = (("bf16",) if bf16 else ("lanes16",) if lanes16 else ()) + key
        name = self._made.get(key)
        if name is None:
            mats = instances(np.float32)
            if bf16:
                packed = pack_a_bf16(mats, self.tiles) if which == "a" else pack_b_bf16(mats, self.tiles)
            elif lanes16:
                packed = _pack(mats, 16, mats.shape[-1])
            else:
                packed = pack_a(mats, self.tiles) if which == "a" else pack_b(mats, self.tiles)
            name = self.graph.add_const(np.ascontiguousarray(packed.reshape(-1)), f"{src}_packed_{which}")
            self._made[key] = name
            drop_pages(self.graph.const(src))
        size = self.graph.values[name].size // len(key[-1])
        return Matrix(step.param_for(self.graph.values[name]), index * size, 0, 0,
                      f"{'bf16' if bf16 else 'panels'}_{which}")

    def pack_int8(self, step, gm: Gemm, which: str, loops: list[Loop], sums: bool) -> tuple[Matrix, Expr | None] | None:
        """The int8 operand `which` of an integer Gemm packed in quads for runtime/aotc_igemm.h,
        and (when `sums`) its sums over k as an int32 expression of the other index (g.i for
        'a', g.j for 'b'), which the uint8 operand's zero point multiplies; None where `pack`
        gives None."""
        found = self._instances(step, gm, which, loops)
        if found is None:
            return None
        src, key, index, instances = found
        n = len(key[-1])
        name = self._made.get(("int8",) + key)
        if name is None:
            packs = [pack_a_int8(m, self.tiles) if which == "a" else pack_b_int8(m, self.tiles)
                     for m in instances(np.int8)]
            name = self.graph.add_const(np.ascontiguousarray(np.concatenate(packs)), f"{src}_packed_{which}")
            self._made[("int8",) + key] = name
            drop_pages(self.graph.const(src))
        packed = self.graph.values[name]
        matrix = Matrix(step.param_for(packed), index * (packed.size // n), 0, 0, f"panels_{which}")
        if not sums:
            return matrix, None
        name = self._made.get(("sums",) + key)
        if name is None:
            totals = instances(np.int32).sum(axis=2 if which == "a" else 1)      # [instances, rows or cols]
            name = self.graph.add_const(np.ascontiguousarray(totals.reshape(-1)), f"{src}_sums_{which}")
            self._made[("sums",) + key] = name
        totals = self.graph.values[name]
        return matrix, Load(step.param_for(totals), index * (totals.size // n) + (gm.i if which == "a" else gm.j))

    def _instances(self, step, gm: Gemm, which: str, loops: list[Loop]):
        """(source constant, cache key, instance number expression, instances(dtype) -> the
        matrices [instances, rows, cols]) of the constant operand `which`, one instance per
        combination of the enclosing loops' indices its offset reads; None where it is not a
        constant or its offset reads other variables."""
        m: Matrix = getattr(gm, which)
        if m.packed or m.buf.role != "in":
            return None
        src = step.binds.get(m.buf.name)
        arr = self.graph.const(src) if src is not None else None
        if arr is None:
            return None
        ranges = {lp.var.name: lp for lp in loops}
        names = expr_vars(m.offset)
        if any(n not in ranges or not _constant_range(ranges[n]) for n in names):
            return None
        extents = [int(ranges[n].extent.value) for n in names]
        rows, cols = (gm.M, gm.K) if which == "a" else (gm.K, gm.N)
        offsets = [int(evaluate(m.offset, dict(zip(names, combo))))
                   for combo in itertools.product(*[range(e) for e in extents])]
        key = (src, which, rows, cols, m.rs, m.cs, tuple(offsets))

        def instances(dtype):
            flat = np.ascontiguousarray(arr, dtype=dtype).reshape(-1)
            last = max(offsets) + (rows - 1) * m.rs + (cols - 1) * m.cs
            if m.rs >= 0 and m.cs >= 0 and last < flat.size:     # views of the weight: no copy
                views = [np.lib.stride_tricks.as_strided(flat[o:], (rows, cols), (m.rs * flat.itemsize,
                         m.cs * flat.itemsize), writeable=False) for o in offsets]
                return views[0][None] if len(views) == 1 else np.stack(views)
            r = np.arange(rows)[:, None] * m.rs + np.arange(cols)[None, :] * m.cs
            return np.stack([flat[o + r] for o in offsets])
        index = const(0)
        for n, e in zip(names, extents):              # instance number, loop order, mixed radix
            index = index * e + ranges[n].var
        return src, key, index, instances


def _constant_range(lp: Loop) -> bool:
    from ..kernel.ir import Const
    return isinstance(lp.extent, Const) and isinstance(lp.start, Const) and lp.start.value == 0


def enclosing_loops(stmts: list[Stmt], target: Stmt, stack=None) -> list[Loop] | None:
    """The loops around `target`, outermost first (None if it is not in `stmts`)."""
    stack = stack or []
    for s in stmts:
        if s is target:
            return stack
        for body in children(s):
            found = enclosing_loops(body, target, stack + ([s] if isinstance(s, Loop) else []))
            if found is not None:
                return found
    return None


# An operand larger than this many bytes (about a server CPU's last-level cache) comes from
# memory on every run: a thread that reads all of it pays for the traffic (choose_split).
STREAMED_BYTES = 32 << 20


def choose_split(gm: Gemm, tiles: GemmTiles, threads: int) -> str:
    """How threads share C: whole row panels or whole column panels, whichever costs least:
    the slowest thread's multiply-adds plus what it packs (every thread packs its own part of
    the operand it splits, and all of the other operand when that one is not packed) plus,
    when the operand it does not split is larger than the last-level cache, reading all of it
    from memory (a language model's head: 64 rows of A times a 768 x 50257 B, where every
    thread streaming the whole of B made two threads 1.64x as fast as one, not 2x)."""
    M, N, K = capacity(gm)
    K = max(K, 1)
    pack_weight = 16          # one packed float costs about this many multiply-adds (measured loosely)
    stream_weight = 8         # one float read from memory costs about this many (loosely: ~10 GB/s a core)
    row_panels, col_panels = -(-M // tiles.mr), -(-N // tiles.nr)

    def streamed(rows: int, cols: int) -> int:
        return rows * cols if rows * cols * 4 > STREAMED_BYTES else 0

    def cost(split):
        if split == "rows":
            share = -(-row_panels // threads) * tiles.mr
            work = share * N * K
            packing = (share * K if not gm.a.packed else 0) + (K * N if not gm.b.packed else 0)
            traffic = streamed(K, N)
        else:
            share = -(-col_panels // threads) * tiles.nr
            work = M * share * K
            packing = (share * K if not gm.b.packed else 0) + (M * K if not gm.a.packed else 0)
            traffic = streamed(M, K)
        return work + pack_weight * packing + stream_weight * traffic

    options = [s for s, n in (("rows", row_panels), ("cols", col_panels)) if n >= 2]
    return min(options, key=cost) if options else "none"


def epilogue_in_tile(gm: Gemm, tiles: GemmTiles, c_dead: bool = False) -> bool:
    """Can g's whole micro-tiles run its epilogue on their sums, before storing them
    (Gemm.tile_epilogue)? The tile then applies it to one vector of sums at a time, whose lanes
    are consecutive columns of C (or rows, for a product computed transposed, where the runtime
    can transpose its tiles: AOTC_TILE_COLUMNS), and stores only what the epilogue stores. That
    needs:
      * whole tiles (M >= MR, N >= NR), the only ones that take this path;
      * C's columns or rows contiguous (cs == 1 or rs == 1), so that a vector's lanes are
        consecutive elements;
      * a straight-line epilogue (stores and locals: what a compiler vectorizes over lanes);
      * no read of C but the value itself (C's elements are never stored as plain sums), and
        a store of the epilogue's own to C(i, j), so that C holds what it held before; or
        (c_dead) nothing reads C after the GEMM but its epilogue (an integer GEMM's int32 sums,
        requantized into another buffer), so that what whole tiles leave in it is never read.
    An integer GEMM's tile has rows only: its C needs contiguous columns."""
    stmts = gm.row_epilogue + gm.epilogue
    M, N, _ = capacity(gm)
    strides = [x for x in (gm.c.rs, gm.c.cs) if not isinstance(x, int)]
    sizes = {v.name for x in strides for v in walk_expr(x) if isinstance(v, SizeVar)}
    if sizes - {v.name for s in stmts for e in stmt_exprs(s) for v in walk_expr(e) if isinstance(v, SizeVar)}:
        return False        # C's strides are run-time sizes that the tile function (given the epilogue's
                            # variables) would not have
    if not gm.epilogue or M < tiles.mr or N < tiles.nr or 1 not in (gm.c.cs, gm.c.rs) \
            or gm.c.layout != "strided" \
            or not all(isinstance(s, (Store, Decl, Assign)) for s in stmts) or (gm.integer and gm.c.cs != 1):
        return False
    for s in stmts:
        exprs = [s.index, s.value] if isinstance(s, Store) else [s.init if isinstance(s, Decl) else s.value]
        if any(isinstance(x, Load) and x.buf is gm.c.buf for e in exprs for x in walk_expr(e)):
            return False
    return c_dead or _stores_c_everywhere(gm, stmts)


def _stores_c_everywhere(gm: Gemm, stmts: list) -> bool:
    """Does the epilogue store to C at C(i, j) for every (i, j)? Its index expressions are
    compared with C's at sample points: the corners and a few inner elements, other variables
    (enclosing loops' indices) at small values."""
    stores = [s for s in stmts if isinstance(s, Store) and s.buf is gm.c.buf]
    if not stores or any(isinstance(s, Assign) and s.var.dtype.kind in "iu" for s in stmts):
        return False
    M, N, _ = capacity(gm)
    samples = {(0, 0), (M - 1, N - 1), (M // 2, N // 3), (min(1, M - 1), N - 1), (M - 1, 0)}
    exprs = [gm.c.offset] + [s.index for s in stores] + [s.init for s in stmts if isinstance(s, Decl)]
    outer = {v for e in exprs for v in expr_vars(e)} - {s.var.name for s in stmts if isinstance(s, Decl)}
    for i, j in samples:
        env = {name: 3 for name in outer}
        env.update({gm.i.name: i, gm.j.name: j})
        try:
            for s in stmts:
                if isinstance(s, Decl) and s.var.dtype.kind in "iu":
                    try:
                        env[s.var.name] = evaluate(s.init, env)
                    except (KeyError, ValueError, ZeroDivisionError):
                        pass        # a value (read from memory), not an index: no store's index then uses it
            want = evaluate(gm.c.at(gm.i, gm.j), env)
            if not any(evaluate(s.index, env) == want for s in stores):
                return False
        except (KeyError, ValueError, ZeroDivisionError):
            return False
    return True
