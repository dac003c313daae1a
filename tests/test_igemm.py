"""The runtime's integer GEMM (runtime/aotc_igemm.h, aotc_igemm): uint8 x int8 products summed
in int32, exactly, against numpy's int64 matmul. Compiled with each CPU target's flags and tiles,
with AMX-INT8 tiles (where this CPU has them, for products of 16 rows, columns and K or more),
the AVX-512 VNNI tile (where this CPU has it), the AVX-512BW one (for CPUs without
VNNI) and the plain C one: both operand
orders (A uint8 and B int8, and the reverse), extreme values (255 x -128), edge sizes around
the micro-tile, the quads of K and the K blocks (several: stores that accumulate), operands
packed at compile time (pack_a_int8 / pack_b_int8) or strided (transposed, inside larger
arrays), accumulate, split among threads by rows and by columns, an epilogue that sees every
element exactly once, and no write outside C or past the work buffer."""
from __future__ import annotations

import numpy as np
import pytest

from aotc.schedule.gemm_cpu import pack_a_int8, pack_b_int8
from aotc.targets import cpu_flags, load_target
from tools.gemm_bench import GemmLib

_NEEDS = {name: set(load_target(name).requires) for name in ("c", "c-avx2", "c-avx512")}


@pytest.fixture(scope="module", params=["c", "c-avx2", "c-avx512", "c-avx512/vnni", "c-avx512/bw", "c-avx512/plain"])
def lib(request, tmp_path_factory):
    target, _, variant = request.param.partition("/")
    missing = _NEEDS[target] - cpu_flags()
    if missing:
        pytest.skip(f"this CPU lacks {', '.join(sorted(missing))} for target {target}")
    defines = {"plain": {"AOTC_IGEMM_PLAIN": 1}, "bw": {"AOTC_IGEMM_NO_VNNI": 1, "AOTC_IGEMM_NO_AMX": 1},
               "vnni": {"AOTC_IGEMM_NO_AMX": 1}}.get(variant)
    g = GemmLib(target, tmp_path_factory.mktemp(f"igemm_{target}_{variant}"), defines=defines)
    g.variant = variant
    return g


def test_each_tile_is_taken_where_it_is_built_and_the_cpu_has_it(lib):
    """(so that the tests below cover each on such a machine)"""
    if lib.target.name != "c-avx512" or lib.variant == "plain":
        want = "plain"
    elif lib.variant == "bw" or "avx512_vnni" not in cpu_flags():
        want = "avx512bw"
    else:
        want = "vnni"
    assert lib.igemm_tile == want
    amx = lib.target.name == "c-avx512" and not lib.variant and {"amx_int8", "amx_tile"} <= cpu_flags()
    assert lib.igemm_amx == amx


def _shapes(t):
    out = {(1, 1, 1), (1, 37, 13), (29, 1, 31), (13, 17, 2), (7, 13, 97), (2, 3, 5)}
    for m in (t.mr - 1, t.mr, t.mr + 1, 2 * t.mr + 3):
        for n in (t.nr - 1, t.nr, t.nr + 1, 3 * t.nr + 5):
            out.add((max(m, 1), max(n, 1), 19))
    out |= {(t.mc + 1, 2 * t.nr + 1, 23), (t.mc - 1, t.nr, t.kc + 1), (t.mr + 1, t.nc + 3, 11),
            (5, 7, 2 * t.kc + 3), (t.mc + t.mr + 1, t.nr + 1, t.kc + t.kc // 2 + 2), (61, 67, 71),
            (1, 3 * t.nr, 2 * t.kc + 9), (1, t.nr + 5, 30), (t.mr + 1, 2 * t.nr, 97)}   # (one-row tiles)
    return sorted(out)


def _operands(rng, M, N, K, a_unsigned: bool, extreme: bool = False):
    u = (lambda *s: np.full(s, 255, np.uint8)) if extreme else (lambda *s: rng.integers(0, 256, s).astype(np.uint8))
    s = (lambda *s: np.full(s, -128, np.int8)) if extreme else (lambda *s: rng.integers(-128, 128, s).astype(np.int8))
    return (u(M, K), s(K, N)) if a_unsigned else (s(M, K), u(K, N))


def _want(A, B, C0=None):
    out = A.astype(np.int64) @ B.astype(np.int64)
    return out + C0 if C0 is not None else out


@pytest.mark.parametrize("a_unsigned", [True, False])
def test_integer_gemm_is_exact(lib, a_unsigned):
    rng = np.random.default_rng(1)
    t = lib.tiles
    for M, N, K in _shapes(t):
        for packed in ("", "A", "B"):
            A, B = _operands(rng, M, N, K, a_unsigned)
            Ap = pack_a_int8(A, t) if packed == "A" else A
            Bp = pack_b_int8(B, t) if packed == "B" else B
            per = max(1, t.int8_work_bytes(M, N, K, packed == "A", packed == "B"))
            work = np.full(per + 64, 7, np.uint8)
            C = np.full((M, N), -5, np.int32)
            lib.igemm(M, N, K, Ap, Bp, C, a_unsigned, a_packed=packed == "A", b_packed=packed == "B", work=work)
            assert np.array_equal(C, _want(A, B)), f"{M}x{N}x{K} packed {packed or '-'}"
            assert np.all(work[per:] == 7), "wrote past the work buffer"


@pytest.mark.parametrize("a_unsigned", [True, False])
def test_extreme_values_do_not_saturate(lib, a_unsigned):
    """255 x -128 everywhere: 4 products a lane are -130,560, which a 16-bit pair sum (what
    vpmaddubsw does) would saturate; K = 2000 sums -65 million, still exact in int32."""
    t = lib.tiles
    for M, N, K in [(t.mr, t.nr, 4), (2 * t.mr + 1, t.nr + 3, 2000), (1, t.nr, 2000)]:
        A, B = _operands(None, M, N, K, a_unsigned, extreme=True)
        C = np.zeros((M, N), np.int32)
        lib.igemm(M, N, K, A, B, C, a_unsigned)
        assert np.array_equal(C, _want(A, B)) and C[0, 0] == -128 * 255 * K


def test_strided_operands_accumulate_and_threads(lib):
    """Transposed and row-strided operands, C inside a larger array (its border intact), C +=
    the product, and the product split among 2 threads by rows and by columns, every element
    seen once by the epilogue after its last K block."""
    rng = np.random.default_rng(3)
    t = lib.tiles
    for M, N, K in [(t.mr + 3, 2 * t.nr + 1, t.kc + 5), (2 * t.mc + 1, 3, 2 * t.kc + 1), (5, t.nc + 7, 9)]:
        for a_unsigned in (True, False):
            A, B = _operands(rng, M, N, K, a_unsigned)
            At = np.ascontiguousarray(A.T).T                           # element (i, k) at [k*M + i]
            Bbig = np.zeros((K, N + 5), B.dtype)
            Bbig[:, :N] = B
            for threads, split in ((1, "none"), (2, "rows"), (2, "cols")):
                big = rng.integers(-1000, 1000, (M + 2, N + 4)).astype(np.int32)
                before = big.copy()
                C = big[1:M + 1, 2:N + 2]
                C0 = C.astype(np.int64)
                seen = np.zeros((M, N), np.int64)
                lib.igemm(M, N, K, At, Bbig[:, :N], C, a_unsigned, accumulate=True, threads=threads, split=split,
                          seen=seen)
                assert np.array_equal(C, _want(A, B, C0)), f"{M}x{N}x{K}, {threads} threads {split}"
                assert np.all(seen == 1)
                outside = np.ones(big.shape, bool)
                outside[1:M + 1, 2:N + 2] = False
                assert np.array_equal(big[outside], before[outside]), "wrote outside C"


def test_the_tiles_agree(tmp_path):
    """The plain, AVX-512BW and (where this CPU has them) VNNI and AMX tiles of c-avx512 give the
    same integers (they are exact, so they must)."""
    if _NEEDS["c-avx512"] - cpu_flags():
        pytest.skip("this CPU has no AVX-512")
    no_amx = {"AOTC_IGEMM_NO_AMX": 1}
    libs = {"plain": GemmLib("c-avx512", tmp_path / "p", defines={"AOTC_IGEMM_PLAIN": 1}),
            "avx512bw": GemmLib("c-avx512", tmp_path / "b", defines={"AOTC_IGEMM_NO_VNNI": 1, **no_amx})}
    if "avx512_vnni" in cpu_flags():
        libs["vnni"] = GemmLib("c-avx512", tmp_path / "v", defines=no_amx)
    if {"amx_int8", "amx_tile"} <= cpu_flags():
        libs["amx"] = GemmLib("c-avx512", tmp_path / "a")
        assert libs["amx"].igemm_amx
    assert [lib.igemm_tile for lib in libs.values()] == [k if k != "amx" else "vnni" for k in libs]
    rng = np.random.default_rng(4)
    for a_unsigned in (True, False):
        A, B = _operands(rng, 37, 101, 333, a_unsigned)
        want = _want(A, B)
        for name, lib in libs.items():
            got = np.zeros((37, 101), np.int32)
            lib.igemm(37, 101, 333, A, B, got, a_unsigned)
            assert np.array_equal(got, want), name
