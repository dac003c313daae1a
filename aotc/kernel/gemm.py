"""Float32 matrix multiply as kernel IR: one call to the runtime's blocked, packed GEMM
(runtime/aotc_gemm_packed.h), for every op that multiplies matrices (MatMul, Gemm, Conv,
ConvTranspose, LSTM/GRU/RNN).

    C[M,N] (=, or += when accumulate) A[M,K] * B[K,N]

Each operand is either a *strided* view of a buffer (element (r, c) at ptr[r*rs + c*cs], so
transposed operands need no copy), which the runtime packs block by block into a scratch
buffer, or *packed* at compile time: a constant weight laid out in the micro-kernel's panels
(`pack_a` / `pack_b`), stored in the weights blob instead of the original, read in place.

The micro-tile (MR x NR) and the cache blocks (KC, MC, NC) are target facts: the `gemm`
table of targets/<name>.toml, written into the generated C as AOTC_GEMM_* macros.
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
    nr: int     # micro-tile columns (contiguous values of B per k step): a multiple of the vector width
    kc: int     # K block
    mc: int     # row block (a multiple of mr)
    nc: int     # column block (a multiple of nr)

    @classmethod
    def of(cls, target: dict) -> "GemmTiles":
        t = target.get("gemm")
        name = target.get("name", "?")
        if not isinstance(t, dict):
            raise AotcError(f"target {name!r} has no [gemm] table (mr, nr, kc, mc, nc)",
                            "add one to its file under targets/")
        try:
            tiles = cls(*(int(t[k]) for k in ("mr", "nr", "kc", "mc", "nc")))
        except KeyError as e:
            raise AotcError(f"target {name!r}: gemm.{e.args[0]} is missing") from None
        if min(tiles.mr, tiles.nr, tiles.kc, tiles.mc, tiles.nc) < 1 or tiles.mc % tiles.mr or tiles.nc % tiles.nr:
            raise AotcError(f"target {name!r}: gemm tiles {t} must be positive, mc a multiple of mr "
                            "and nc a multiple of nr")
        return tiles

    def macros(self) -> dict[str, int]:
        """The C macros aotc_gemm_packed.h reads."""
        return {f"AOTC_GEMM_{k.upper()}": getattr(self, k) for k in ("mr", "nr", "kc", "mc", "nc")}

    def defines(self) -> list[str]:
        return [f"#define {k} {v}" for k, v in self.macros().items()]

    def work_floats(self, M: int, N: int, K: int, a_packed: bool, b_packed: bool) -> int:
        """Scratch floats aotc_sgemm_packed needs for the blocks of its strided operands."""
        kc = min(self.kc, K)
        n = 0
        if not b_packed:
            n += kc * _round_up(min(self.nc, N), self.nr)
        if not a_packed:
            n += kc * _round_up(min(self.mc, M), self.mr)
        return n


def _round_up(x: int, m: int) -> int:
    return -(-x // m) * m


def pack_a(a: np.ndarray, mr: int) -> np.ndarray:
    """[..., M, K] -> [..., ceil(M/mr), K, mr]: MR-row panels, k-major, rows past M zero."""
    a = np.asarray(a, dtype=np.float32)
    *batch, M, K = a.shape
    P = -(-M // mr)
    pad = np.zeros((*batch, P * mr, K), np.float32)
    pad[..., :M, :] = a
    return np.ascontiguousarray(pad.reshape(*batch, P, mr, K).swapaxes(-1, -2))


def pack_b(b: np.ndarray, nr: int) -> np.ndarray:
    """[..., K, N] -> [..., ceil(N/nr), K, nr]: NR-column panels, k-major, columns past N zero."""
    b = np.asarray(b, dtype=np.float32)
    *batch, K, N = b.shape
    Q = -(-N // nr)
    pad = np.zeros((*batch, K, Q * nr), np.float32)
    pad[..., :N] = b
    return np.ascontiguousarray(pad.reshape(*batch, K, Q, nr).swapaxes(-3, -2))


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
