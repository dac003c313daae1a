"""Float32 matrix multiply as kernel IR: one call to the runtime's blocked, packed GEMM
(runtime/aotc_gemm_packed.h), for every op that multiplies matrices (MatMul, Gemm, Conv,
ConvTranspose, LSTM/GRU/RNN).

    C[M,N] (=, or += when accumulate) A[M,K] * B[K,N]

Each operand is either a *strided* view of a buffer (element (r, c) at ptr[r*rs + c*cs], so
transposed operands need no copy), which the runtime packs block by block into a scratch
buffer, or *packed* at compile time: a constant weight laid out in the micro-kernel's panels,
K block after K block (`pack_a` / `pack_b`), stored in the weights blob instead of the
original and streamed in place.

The micro-tile (MR x NR), the cache blocks (KC, MC, NC) and the prefetch distance are target
facts: the [gemm] table of targets/<name>.toml, written into the generated C as AOTC_GEMM_*
macros. Packed constants depend on MR/NR/KC, so they are made per target.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Union

import numpy as np

from ..errors import AotcError
from .ir import F32, BufPtr, Buffer, Expr, const

IntLike = Union[int, Expr]


@dataclass(frozen=True)
class GemmTiles:
    mr: int     # micro-tile rows (values of A per k step)
    nr: int     # micro-tile columns (contiguous values of B per k step): one or two vector widths
    kc: int     # K block (at most)
    mc: int     # row block (a multiple of mr)
    nc: int     # column block (a multiple of nr)
    prefetch: int = 0   # k steps the micro-kernel prefetches ahead (0: none)

    _FIELDS = ("mr", "nr", "kc", "mc", "nc", "prefetch")

    @classmethod
    def of(cls, target: dict) -> "GemmTiles":
        t = target.get("gemm")
        name = target.get("name", "?")
        if not isinstance(t, dict):
            raise AotcError(f"target {name!r} has no [gemm] table (mr, nr, kc, mc, nc, prefetch)",
                            "add one to its file under targets/")
        try:
            tiles = cls(*(int(t[k]) for k in cls._FIELDS[:5]), int(t.get("prefetch", 0)))
        except KeyError as e:
            raise AotcError(f"target {name!r}: gemm.{e.args[0]} is missing") from None
        if min(tiles.mr, tiles.nr, tiles.kc, tiles.mc, tiles.nc) < 1 or tiles.prefetch < 0 \
                or tiles.mc % tiles.mr or tiles.nc % tiles.nr:
            raise AotcError(f"target {name!r}: gemm tiles {t} must be positive, mc a multiple of mr "
                            "and nc a multiple of nr")
        return tiles

    def macros(self) -> dict[str, int]:
        """The C macros aotc_gemm_packed.h reads."""
        return {f"AOTC_GEMM_{k.upper()}": getattr(self, k) for k in self._FIELDS}

    def defines(self) -> list[str]:
        return [f"#define {k} {v}" for k, v in self.macros().items()]

    def k_step(self, K: int) -> int:
        """K block size: K in ceil(K / kc) equal blocks (aotc_sgemm_kstep in the runtime)."""
        blocks = -(-K // self.kc)
        return -(-K // blocks) if blocks else 0

    def padded_madds(self, M: int, N: int) -> int:
        """Multiply-adds per k the micro-tiles spend on an M x N result (M, N padded to MR, NR)."""
        return _round_up(M, self.mr) * _round_up(N, self.nr)

    # what transposing one result element back costs, in micro-tile multiply-adds (measured on
    # ResNet-50's 1x1 convolutions, where the GEMM alone got faster but the whole did not)
    TRANSPOSE_COST = 64

    def prefers_transposed(self, M: int, N: int, K: int, margin: float = 0.05) -> bool:
        """True when computing Cᵀ = Bᵀ·Aᵀ (the roles of M and N swapped) and transposing the
        result back is `margin` cheaper than computing C: an N of 49 pads to 64 on a 32-wide
        tile, where an M of 49 pads to 56 on an 8-row one."""
        plain = self.padded_madds(M, N) * K
        swapped = self.padded_madds(N, M) * K + self.TRANSPOSE_COST * M * N
        return swapped < (1 - margin) * plain

    def work_floats(self, M: int, N: int, K: int, a_packed: bool, b_packed: bool) -> int:
        """Scratch floats aotc_sgemm_packed needs for the blocks of its strided operands."""
        kc = self.k_step(K)
        n = 0
        if not b_packed:
            n += kc * _round_up(min(self.nc, N), self.nr)
        if not a_packed:
            n += kc * _round_up(min(self.mc, M), self.mr)
        return n


def _round_up(x: int, m: int) -> int:
    return -(-x // m) * m


def _pack(x: np.ndarray, width: int, kstep: int) -> np.ndarray:
    """[..., R, K] -> [..., ceil(R/width)*width*K]: K block after K block (kstep each, the
    last one shorter), each holding all the panels of `width` rows, k-major; rows past R zero."""
    x = np.asarray(x, dtype=np.float32)
    *batch, R, K = x.shape
    P = -(-R // width)
    pad = np.zeros((*batch, P * width, K), np.float32)
    pad[..., :R, :] = x
    if P == 0 or K == 0:
        return pad.reshape(*batch, 0)
    blocks = [pad[..., k0:k0 + kstep].reshape(*batch, P, width, -1).swapaxes(-1, -2).reshape(*batch, -1)
              for k0 in range(0, K, kstep)]
    return np.ascontiguousarray(np.concatenate(blocks, axis=-1))


def pack_a(a: np.ndarray, tiles: GemmTiles) -> np.ndarray:
    """A [..., M, K] as aotc_sgemm_packed reads a packed A: MR-row panels, K-block-major,
    flattened to [..., ceil(M/MR)*MR*K]."""
    return _pack(a, tiles.mr, tiles.k_step(a.shape[-1]))


def pack_b(b: np.ndarray, tiles: GemmTiles) -> np.ndarray:
    """B [..., K, N] as aotc_sgemm_packed reads a packed B: NR-column panels, K-block-major,
    flattened to [..., ceil(N/NR)*NR*K]."""
    b = np.asarray(b, dtype=np.float32)
    return _pack(b.swapaxes(-1, -2), tiles.nr, tiles.k_step(b.shape[-2]))


@dataclass(frozen=True)
class Operand:
    """A matrix operand of `emit_sgemm`: element (r, c) at ptr[r*rs + c*cs], or pre-packed
    panels (see pack_a / pack_b) when `packed`."""
    ptr: BufPtr
    rs: IntLike = 0
    cs: IntLike = 0
    packed: bool = False


def strided(buf: Buffer, offset: IntLike = 0, rs: IntLike = 0, cs: IntLike = 1) -> Operand:
    return Operand(BufPtr(buf, _expr(offset)), rs, cs)


def packed(buf: Buffer, offset: IntLike = 0) -> Operand:
    return Operand(BufPtr(buf, _expr(offset)), 0, 0, True)


def _expr(x: IntLike) -> Expr:
    return x if isinstance(x, Expr) else const(x)


def emit_sgemm(ctx, M: int, N: int, K: int, A: Operand, B: Operand, C: BufPtr, ldc: IntLike,
               accumulate: bool = False) -> None:
    """C[M,N] (=, or += when accumulate) A[M,K] * B[K,N] as one aotc_sgemm_packed call, with a
    scratch buffer for packing blocks of the strided operands."""
    tiles = GemmTiles.of(ctx.target)
    n_work = tiles.work_floats(M, N, K, A.packed, B.packed)
    work = ctx.scratch((max(n_work, 1),), F32, "gemm_work") if n_work else None
    ctx.b.call("aotc_sgemm_packed", const(M), const(N), const(K),
               A.ptr, _expr(A.rs), _expr(A.cs), B.ptr, _expr(B.rs), _expr(B.cs),
               C, _expr(ldc), const(1 if accumulate else 0), work if work is not None else const(0))
