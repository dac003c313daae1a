"""The runtime's packed GEMM (aotc_sgemm) against the reference aotc_sgemm_reference and numpy,
compiled with each target's flags and tiles: edge sizes (1, primes, not multiples of the
micro-tile or the cache blocks), transposed and strided operands and results, operands packed
at compile time (pack_a / pack_b), accumulate, split among threads by rows and by columns,
the per-tile epilogue, and no write outside C or past the work buffer."""
from __future__ import annotations

import numpy as np
import pytest

from aotc.schedule.gemm_cpu import GemmTiles, pack_a, pack_b
from aotc.targets import cpu_flags, load_target
from tools.gemm_bench import GemmLib

_NEEDS = {name: set(load_target(name).requires) for name in ("c", "c-avx2", "c-avx512")}


@pytest.fixture(scope="module", params=["c", "c-avx2", "c-avx2/plain-tile", "c-avx512", "c-avx512/plain-tile"])
def lib(request, tmp_path_factory):
    """The GEMM of each target; plain-tile: its micro-kernel in plain C, as compilers without
    GCC's vector extension build it (GCC and Clang hold the tile in vectors)."""
    target, _, variant = request.param.partition("/")
    missing = _NEEDS[target] - cpu_flags()
    if missing:
        pytest.skip(f"this CPU lacks {', '.join(sorted(missing))} for target {target}")
    defines = {"AOTC_TILE_VECTORS": 0} if variant == "plain-tile" else None
    return GemmLib(target, tmp_path_factory.mktemp(f"gemm_{target}_{variant}"), defines=defines)


def _shapes(t: GemmTiles):
    """(M, N, K) around every boundary the kernel has: 1, the micro-tile, the cache blocks, an
    edge tile of one row (the one-row kernel), of 2 rows and of half the tile's rows (the
    half-height kernel, partly and wholly filled)."""
    out = {(1, 1, 1), (1, 37, 13), (29, 1, 31), (13, 17, 1), (7, 13, 97), (2, 3, 5)}
    for m in (t.mr - 1, t.mr, t.mr + 1, t.mr + 2, t.mr + (t.mr + 1) // 2, 2 * t.mr + 3):
        for n in (t.nr - 1, t.nr, t.nr + 1, 3 * t.nr + 5):
            out.add((max(m, 1), max(n, 1), 19))
    out |= {(t.mc + 1, 2 * t.nr + 1, 23), (t.mc - 1, t.nr, t.kc + 1), (t.mr + 1, t.nc + 3, 11),
            (5, 7, 2 * t.kc + 3), (t.mc + t.mr + 1, t.nr + 1, t.kc + t.kc // 2 + 1), (61, 67, 71)}
    return sorted(out)


def _rand(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def _expected(A, B, C0=None):
    out = A.astype(np.float64) @ B.astype(np.float64)
    return out + C0 if C0 is not None else out


def _check(C, want, K):
    np.testing.assert_allclose(C, want, rtol=1e-4, atol=2e-6 * K + 1e-6)


def _guarded_c(rng, M, N, pad=5):
    """C as a view with row stride N + pad inside a larger array whose border must stay intact."""
    big = _rand(rng, M + 2, N + pad)
    return big, big[1:M + 1, :N]


def test_packed_matches_reference_and_numpy(lib):
    rng = np.random.default_rng(0)
    for M, N, K in _shapes(lib.tiles):
        A, B = _rand(rng, M, K), _rand(rng, K, N)
        C_ref = np.full((M, N), np.nan, np.float32)
        lib.ref(A, B, C_ref)
        big, C = _guarded_c(rng, M, N)
        before = big.copy()
        n_work = max(1, lib.tiles.work_floats(M, N, K, False, False))
        work = np.full(n_work + 64, 7.0, np.float32)
        lib.packed(M, N, K, A, B, C, work=work)
        _check(C, _expected(A, B), K)
        np.testing.assert_allclose(C, C_ref, rtol=1e-5, atol=1e-5 * np.sqrt(K), err_msg=f"{M}x{N}x{K}")
        outside = np.ones(big.shape, bool)
        outside[1:M + 1, :N] = False
        assert np.array_equal(big[outside], before[outside]), f"{M}x{N}x{K}: wrote outside C"
        assert np.all(work[n_work:] == 7.0), f"{M}x{N}x{K}: wrote past the work buffer"


def test_one_row_kernel_matches_the_tile_rows(lib):
    """Products with one row of C take the one-row micro-kernel (its k steps over separate
    sums); the same row computed as the first of an MR-row tile (the MR-row kernel, one sum)
    must agree with it and with numpy, for K around the sums' count and the cache block."""
    rng = np.random.default_rng(5)
    t = lib.tiles
    for N, K in [(t.nr, 1), (t.nr, 3), (t.nr + 1, 4), (2 * t.nr - 1, 5), (3 * t.nr + 5, 130), (t.nr, t.kc + 3),
                 (2 * t.nr, 2 * t.kc + 1)]:
        A, B = _rand(rng, t.mr, K), _rand(rng, K, N)
        row = np.full((1, N), np.nan, np.float32)
        lib.packed(1, N, K, A[:1], B, row)
        tile = np.full((t.mr, N), np.nan, np.float32)
        lib.packed(t.mr, N, K, A, B, tile)
        _check(row, _expected(A[:1], B), K)
        np.testing.assert_allclose(row[0], tile[0], rtol=1e-5, atol=1e-5 * np.sqrt(K), err_msg=f"N={N} K={K}")
        C0 = _rand(rng, 1, N)
        acc = C0.copy()
        lib.packed(1, N, K, A[:1], B, acc, accumulate=True)
        _check(acc, _expected(A[:1], B, C0), K)


def test_one_row_over_many_panels(lib):
    """A row of C over many NR-column panels of weights packed at compile time takes them
    several at a time (the row-panels kernel: 8 on AVX-512, 4 elsewhere, or half as many), the
    panels left one at a time (B packed at run time: all one at a time). Against numpy and the
    same row as the first of an MR-row tile, for N with whole groups, half groups (threads split
    the row by halves: 3 groups among 2 threads are 1.5 each), a partial last panel in a group,
    leftover panels; accumulating, with the epilogue (each element seen once, after the last K
    block) and split by columns over threads, which gives what one thread gives, bit for bit."""
    rng = np.random.default_rng(11)
    t = lib.tiles
    for groups, extra in [(1, 0), (1, 5), (2, t.nr + 3), (3, 3 * t.nr - 1), (3, 0), (1.5, 0), (2.5, 7)]:
        N = int(groups * 8) * t.nr + extra
        for K in (1, 7, t.kc + 9):
            A, B = _rand(rng, t.mr, K), _rand(rng, K, N)
            tile = np.full((t.mr, N), np.nan, np.float32)
            lib.packed(t.mr, N, K, A, B, tile)
            for b_packed in (False, True):
                Bp = pack_b(B, t) if b_packed else B
                row = np.full((1, N), np.nan, np.float32)
                lib.packed(1, N, K, A[:1], Bp, row, b_packed=b_packed)
                _check(row, _expected(A[:1], B), K)
                np.testing.assert_allclose(row[0], tile[0], rtol=1e-5, atol=1e-5 * np.sqrt(K),
                                           err_msg=f"N={N} K={K}")
                C0 = _rand(rng, 1, N)
                acc = C0.copy()
                lib.packed(1, N, K, A[:1], Bp, acc, accumulate=True, b_packed=b_packed)
                _check(acc, _expected(A[:1], B, C0), K)
                bias = _rand(rng, N)
                first = None
                for threads, split in ((1, "none"), (2, "cols"), (3, "cols")):
                    per = max(1, t.work_floats(1, N, K, False, b_packed))
                    C = np.full((1, N), np.nan, np.float32)
                    seen = np.zeros((1, N), np.int64)
                    lib.packed(1, N, K, A[:1], Bp, C, b_packed=b_packed, threads=threads, split=split,
                               bias=bias, seen=seen, work=np.zeros(per * threads + 64, np.float32))
                    _check(C, np.maximum(_expected(A[:1], B) + bias, 0), K)
                    assert np.all(seen == 1), f"N={N} K={K}: epilogue saw elements {np.unique(seen)} times"
                    first = C if first is None else first
                    assert np.array_equal(C, first), f"N={N} K={K}: {threads} threads differ from one"


def test_one_row_by_groups_or_half_groups_gives_the_same_bits(lib):
    """Weights of at most 1 MiB (AOTC_ROW_CACHED_BYTES: they stay in L2 from one product to the
    next) go by half-groups of panels, larger ones by whole groups: each panel's sums are the
    same chain either way, so the columns of a product over 1 MiB and of its left half under it
    agree bit for bit (packed at compile time, as the one-row kernels need)."""
    rng = np.random.default_rng(12)
    t = lib.tiles
    K = t.kc + 9
    N = 2 * ((1 << 20) // (4 * K) // (8 * t.nr) * (8 * t.nr))     # a left half of whole groups
    A, B = _rand(rng, 1, K), _rand(rng, K, N)
    assert K * N * 4 > 1 << 20 >= K * (N // 2) * 4
    whole = np.full((1, N), np.nan, np.float32)
    lib.packed(1, N, K, A, pack_b(B, t), whole, b_packed=True)
    _check(whole, _expected(A, B), K)
    half = np.full((1, N // 2), np.nan, np.float32)
    lib.packed(1, N // 2, K, A, pack_b(np.ascontiguousarray(B[:, :N // 2]), t), half, b_packed=True)
    assert np.array_equal(whole[:, :N // 2], half)


def test_accumulate_adds_onto_c(lib):
    rng = np.random.default_rng(1)
    for M, N, K in [(1, 1, 1), (7, 33, 5), (lib.tiles.mr + 2, lib.tiles.nr + 3, lib.tiles.kc + 7)]:
        A, B = _rand(rng, M, K), _rand(rng, K, N)
        C0 = _rand(rng, M, N)
        C = C0.copy()
        lib.packed(M, N, K, A, B, C, accumulate=True)
        _check(C, _expected(A, B, C0), K)
        C_ref = C0.copy()
        lib.ref(A, B, C_ref, accumulate=True)
        np.testing.assert_allclose(C, C_ref, rtol=1e-5, atol=1e-5 * np.sqrt(K))


def test_k_zero_writes_zeros_or_keeps_c(lib):
    rng = np.random.default_rng(2)
    A, B = np.zeros((3, 0), np.float32), np.zeros((0, 4), np.float32)
    C = _rand(rng, 3, 4)
    keep = C.copy()
    lib.packed(3, 4, 0, A, B, C, accumulate=True)
    assert np.array_equal(C, keep)
    lib.packed(3, 4, 0, A, B, C)
    assert np.all(C == 0)


@pytest.mark.parametrize("b_layout", ["keys", "values"])
def test_one_row_reads_a_strided_b_in_place(lib, b_layout):
    """One row of C from a B given by strides with a unit stride (a decoder's attention over its
    cache: keys as the columns of B, rsb 1; values as its rows, csb 1) is computed from B as it
    lies, without packing it (aotc_sgemm_one_row): against numpy and against the same row as
    the first of a two-row product (which packs B), accumulating, with the epilogue seeing
    each element once, and split over threads (bit for bit what one thread gives)."""
    rng = np.random.default_rng(13)
    for N, K in [(193, 64), (64, 193), (1, 1), (5, 17), (3 * lib.tiles.nr + 1, 2 * lib.tiles.kc + 3)]:
        A = _rand(rng, 2, K)
        B = _rand(rng, N, K).T if b_layout == "keys" else _rand(rng, K, N)
        two = np.full((2, N), np.nan, np.float32)
        lib.packed(2, N, K, A, B, two)
        one = np.full((1, N), np.nan, np.float32)
        lib.packed(1, N, K, A[:1], B, one)
        _check(one, _expected(A[:1], B), K)
        np.testing.assert_allclose(one[0], two[0], rtol=1e-5, atol=1e-5 * np.sqrt(K), err_msg=f"N={N} K={K}")
        C0 = _rand(rng, 1, N)
        acc = C0.copy()
        lib.packed(1, N, K, A[:1], B, acc, accumulate=True)
        _check(acc, _expected(A[:1], B, C0), K)
        bias, seen = _rand(rng, N), np.zeros((1, N), np.int64)
        for threads in (1, 2, 3):
            split = "cols" if threads > 1 else "none"
            out = np.full((1, N), np.nan, np.float32)
            seen[:] = 0
            lib.packed(1, N, K, A[:1], B, out, threads=threads, split=split, bias=bias, seen=seen)
            np.testing.assert_allclose(out, np.maximum(one + bias, 0), rtol=1e-6, atol=1e-6)
            assert np.all(seen == 1), f"N={N} K={K}: epilogue saw elements {np.unique(seen)} times"
            if threads == 1:
                first = out
            assert np.array_equal(out, first), f"N={N} K={K}: {threads} threads differ"


@pytest.mark.parametrize("layout", ["At", "Bt", "AtBt", "strided"])
def test_transposed_and_strided_operands(lib, layout):
    """Operands given by strides: a transposed matrix is its transpose's storage, read by columns."""
    rng = np.random.default_rng(3)
    t = lib.tiles
    for M, N, K in [(1, 5, 3), (t.mr + 3, t.nr + 5, 17), (2 * t.mr + 1, 2 * t.nr + 1, t.kc + 9), (31, 3, 29)]:
        if "At" in layout:
            A = _rand(rng, K, M).T                     # element (i, k) at [k*M + i]
        elif layout == "strided":
            A = _rand(rng, M, K + 6)[:, 3:K + 3]       # row stride K + 6
        else:
            A = _rand(rng, M, K)
        if "Bt" in layout:
            B = _rand(rng, N, K).T
        elif layout == "strided":
            B = _rand(rng, K, 2 * N + 1)[:, :2 * N:2]   # column stride 2
        else:
            B = _rand(rng, K, N)
        C = np.empty((M, N), np.float32)
        lib.packed(M, N, K, A, B, C)
        _check(C, _expected(A, B), K)
        C_ref = np.empty((M, N), np.float32)
        lib.ref(np.ascontiguousarray(A), np.ascontiguousarray(B), C_ref)
        np.testing.assert_allclose(C, C_ref, rtol=1e-5, atol=1e-5 * np.sqrt(K))


@pytest.mark.parametrize("which", ["A", "B", "AB"])
def test_operands_packed_at_compile_time(lib, which):
    """pack_a / pack_b (what the compiler stores in the weights) read in place, whole K per panel."""
    rng = np.random.default_rng(4)
    t = lib.tiles
    for M, N, K in [(1, 1, 1), (5, 3, 2), (t.mr + 1, t.nr - 1, t.kc + 1), (t.mc + 5, t.nr * 3 + 1, 2 * t.kc + 5),
                    (3, t.nc + t.nr + 2, 7)]:
        A, B = _rand(rng, M, K), _rand(rng, K, N)
        Ap = pack_a(A, t) if "A" in which else A
        Bp = pack_b(B, t) if "B" in which else B
        n_work = max(1, t.work_floats(M, N, K, "A" in which, "B" in which))
        work = np.full(n_work + 64, 7.0, np.float32)
        C = np.empty((M, N), np.float32)
        lib.packed(M, N, K, Ap, Bp, C, a_packed="A" in which, b_packed="B" in which, work=work)
        _check(C, _expected(A, B), K)
        assert np.all(work[n_work:] == 7.0)


def test_pack_layouts():
    """K block after K block, each with all the panels: what aotc_sgemm_packed reads in place."""
    t = GemmTiles(mr=4, nr=4, kc=2, mc=8, nc=8)
    a = np.arange(5 * 3, dtype=np.float32).reshape(5, 3)       # K = 3: blocks of k_step(3) = 2, 1
    assert t.k_step(3) == 2 and t.k_step(4) == 2 and t.k_step(5) == 2 and t.k_step(1) == 1
    p = pack_a(a, t)
    assert p.shape == (8 * 3,)
    blk0, blk1 = p[:8 * 2].reshape(2, 2, 4), p[8 * 2:].reshape(2, 1, 4)   # [panel, k, row]
    assert np.array_equal(blk0[0, 1], a[0:4, 1]) and np.array_equal(blk0[1, 0], [a[4, 0], 0, 0, 0])
    assert np.array_equal(blk1[0, 0], a[0:4, 2]) and np.array_equal(blk1[1, 0], [a[4, 2], 0, 0, 0])
    b = np.arange(3 * 5, dtype=np.float32).reshape(3, 5)
    q = pack_b(b, t)
    blk0 = q[:8 * 2].reshape(2, 2, 4)                                    # [panel, k, column]
    assert np.array_equal(blk0[0, 1], b[1, 0:4]) and np.array_equal(blk0[1, 0], [b[0, 4], 0, 0, 0])
    batched = pack_b(np.stack([b, 2 * b]), t)
    assert batched.shape == (2, 8 * 3) and np.array_equal(batched[1], 2 * q)
    assert pack_a(np.zeros((0, 3), np.float32), t).size == 0 and pack_b(np.zeros((3, 0), np.float32), t).size == 0
    assert pack_a(np.zeros((2, 5, 0), np.float32), t).shape == (2, 0)


@pytest.mark.parametrize("split", ["rows", "cols"])
def test_threads_split_c_and_match_one_thread(lib, split):
    """Two and three threads, each packing into its own part of the work buffer, give what one
    thread gives (bit for bit: every element is computed by one thread in the same order)."""
    rng = np.random.default_rng(7)
    t = lib.tiles
    for M, N, K in [(1, 3 * t.nr + 1, 9), (3 * t.mr + 1, 1, 9), (2 * t.mr + 3, 2 * t.nr + 5, t.kc + 3),
                    (t.mc + 2 * t.mr + 1, t.nr * 5, 2 * t.kc + 1), (5, 7, 0)]:
        for packed in ("", "A", "B"):
            A, B = _rand(rng, M, K), _rand(rng, K, N)
            Ap = pack_a(A, t) if packed == "A" else A
            Bp = pack_b(B, t) if packed == "B" else B
            one = np.full((M, N), np.nan, np.float32)
            lib.packed(M, N, K, Ap, Bp, one, a_packed=packed == "A", b_packed=packed == "B")
            for threads in (2, 3):
                per = max(1, t.work_floats(M, N, K, packed == "A", packed == "B"))
                work = np.full(per * threads + 64, 7.0, np.float32)
                C = np.full((M, N), np.nan, np.float32)
                lib.packed(M, N, K, Ap, Bp, C, a_packed=packed == "A", b_packed=packed == "B", threads=threads,
                           split=split, work=work)
                assert np.array_equal(C, one), f"{M}x{N}x{K} packed {packed or '-'}: {threads} threads differ"
                assert np.all(work[per * threads:] == 7.0), "wrote past the work buffer"
            _check(one, _expected(A, B), K)


def test_transposed_result_and_epilogue(lib):
    """C written through strides (transposed, inside a larger array), and the epilogue sees every
    element of C exactly once, after its last K block (so it sees the whole product)."""
    rng = np.random.default_rng(8)
    t = lib.tiles
    for M, N, K in [(1, 1, 1), (t.mr + 3, 2 * t.nr + 1, t.kc + 5), (2 * t.mc + 1, 3, 2 * t.kc + 1)]:
        for threads, split in ((1, "none"), (2, "rows"), (2, "cols")):
            A, B, bias = _rand(rng, M, K), _rand(rng, K, N), _rand(rng, N)
            big = _rand(rng, N + 3, M + 2)
            before = big.copy()
            C = big[1:N + 1, 1:M + 1].T                     # element (i, j) at big[1 + j, 1 + i]
            seen = np.zeros((M, N), np.int64)
            lib.packed(M, N, K, A, B, C, threads=threads, split=split, bias=bias, seen=seen)
            want = np.maximum(_expected(A, B) + bias, 0)
            _check(C, want, K)
            assert np.all(seen == 1), f"{M}x{N}x{K}: epilogue saw elements {np.unique(seen)} times"
            outside = np.ones(big.shape, bool)
            outside[1:N + 1, 1:M + 1] = False
            assert np.array_equal(big[outside], before[outside]), "wrote outside C"


def test_epilogue_over_weights_packed_at_compile_time(lib):
    """With B packed at compile time and an epilogue, the last K block's tiles walk C's rows in
    parts of B's columns no larger than A's block (aotc_sgemm_block): products whose N crosses
    several parts, a last part and a last panel cut short, one and two K blocks, threads split
    by rows and by columns, each element seen once by the epilogue."""
    rng = np.random.default_rng(9)
    t = lib.tiles
    for M, K, extra in [(t.mr + 3, t.kc + 5, t.nr + 3), (2 * t.mr, t.kc, 1), (5, 40, 0)]:
        # a part: A's block over the last K block's length, in whole panels
        part = max(t.nr, t.mc * t.kc // (K - (K - 1) // t.k_step(K) * t.k_step(K)) // t.nr * t.nr)
        N = 2 * part + extra
        for threads, split in ((1, "none"), (2, "rows"), (2, "cols")):
            A, B, bias = _rand(rng, M, K), _rand(rng, K, N), _rand(rng, N)
            C = np.empty((M, N), np.float32)
            seen = np.zeros((M, N), np.int64)
            lib.packed(M, N, K, A, pack_b(B, t), C, b_packed=True, threads=threads, split=split, bias=bias,
                       seen=seen)
            _check(C, np.maximum(_expected(A, B) + bias, 0), K)
            assert np.all(seen == 1), f"{M}x{N}x{K}: epilogue saw elements {np.unique(seen)} times"


def test_transposed_result_equals_the_plain_one_bit_for_bit(lib):
    """A C stored transposed (row stride 1) holds exactly the values a plain C does: with
    8-row tiles of 16-lane vectors, whole tiles are transposed in registers and stored a column
    at a time (aotc_sgemm_tile_columns), edge tiles element by element; the sums are the same.
    Sizes with whole and edge tiles, one K block and several (stores that accumulate)."""
    rng = np.random.default_rng(11)
    t = lib.tiles
    for M, N, K in [(2 * t.mr, 2 * t.nr, 7), (3 * t.mr + 1, t.nr + 5, t.kc + 9), (t.mc + t.mr, 3 * t.nr, 2 * t.kc + 1)]:
        for threads, split in ((1, "none"), (2, "rows"), (2, "cols")):
            A, B = _rand(rng, M, K), _rand(rng, K, N)
            plain = np.full((M, N), np.nan, np.float32)
            lib.packed(M, N, K, A, B, plain, threads=threads, split=split)
            store = np.full((N, M), np.nan, np.float32)
            lib.packed(M, N, K, A, B, store.T, threads=threads, split=split)
            assert np.array_equal(store.T, plain), f"{M}x{N}x{K}, {threads} thread(s): transposed C differs"
            _check(plain, _expected(A, B), K)


def test_every_target_has_gemm_tiles():
    for name in _NEEDS:
        t = GemmTiles.of(load_target(name))
        assert t.mc % t.mr == 0 and t.nc % t.nr == 0


def test_computed_rows_count_the_edge_kernels():
    """The orientation choice counts the rows the tiles compute: an edge of one row runs the
    one-row kernel, an edge of at most half MR rows the half-height tile (6-row tiles: 8 rows
    compute 6 + 3, 7 rows 6 + 1, 10 rows 6 + 6)."""
    t = GemmTiles.of(load_target("c-avx2"))
    assert t.mr == 6
    assert [t.computed_rows(m) for m in (1, 2, 3, 4, 6, 7, 8, 9, 10, 12)] == [1, 3, 3, 6, 6, 7, 9, 9, 12, 12]
    assert t.padded_madds(8, 17) == 9 * 32


def test_run_time_b_is_packed_in_blocks_that_fit_beside_a():
    """work_floats holds B's block of b_block_columns columns: NC for a short K, fewer for a
    long one (at most MC x KC floats, whole panels), as runtime/aotc_gemm_packed.h packs it."""
    for name in _NEEDS:
        t = GemmTiles.of(load_target(name))
        for K in (1, 27, 144, t.kc, 3 * t.kc + 1):
            cols = t.b_block_columns(K)
            assert cols % t.nr == 0 and t.nr <= cols <= t.nc
            assert cols == t.nr or t.k_step(K) * cols <= t.mc * t.kc
        assert t.b_block_columns(1) == t.nc


# ----------------------------------------------------------------------------- through the compiler
def _target_or_skip(name):
    missing = _NEEDS[name] - cpu_flags()
    if missing:
        pytest.skip(f"this CPU lacks {', '.join(sorted(missing))} for target {name}")
    return GemmTiles.of(load_target(name))


# (x shape, w shape, attrs): convolutions whose GEMM runs as Y = W.col and as Y^T = col^T.W^T
# (small outputs, long K), 1x1 and im2col, grouped, with and without bias
CONVS = [
    ((1, 128, 7, 7), (64, 128, 3, 3), dict(pads=[1, 1, 1, 1])),
    ((1, 96, 14, 14), (40, 96, 3, 3), dict(pads=[1, 1, 1, 1], strides=[2, 2])),
    ((1, 512, 3, 3), (64, 512, 1, 1), {}),
    ((2, 256, 5, 5), (48, 128, 3, 3), dict(pads=[1, 1, 1, 1], group=2)),
    ((1, 64, 7, 7), (96, 64, 1, 1), {}),
    ((1, 3, 19, 17), (13, 3, 5, 5), dict(strides=[2, 2], pads=[2, 2, 2, 2])),
]


def _conv_gemm(x, w, attrs):
    group = attrs.get("group", 1)
    k = w[1] * w[2] * w[3]
    s = attrs.get("strides", [1, 1])[0]
    p = attrs.get("pads", [0, 0, 0, 0])[0]
    ol = ((x[2] + 2 * p - w[2]) // s + 1) * ((x[3] + 2 * p - w[3]) // s + 1)
    return w[0] // group, ol, k


@pytest.mark.parametrize("target", ["c", "c-avx512"])
def test_conv_gemm_both_orientations(target, tmp_path):
    """The convolutions (every other one with a bias) in one model, one compile, against ONNX
    Runtime; between them they take both GEMM orientations."""
    from onnx import helper
    from tests.helpers import assert_parity, graph_model, rand
    tiles = _target_or_skip(target)
    taken = set()
    nodes, feeds, inits = [], {}, {}
    for i, (xs, ws, attrs) in enumerate(CONVS):
        taken.add(tiles.prefers_transposed(*_conv_gemm(xs, ws, attrs)))
        feeds[f"x{i}"] = rand(*xs, seed=i)
        inits[f"w{i}"] = rand(*ws, seed=10 + i) * 0.1
        if i % 2 == 0:
            inits[f"b{i}"] = rand(ws[0], seed=20 + i)
        nodes.append(helper.make_node("Conv", [f"x{i}", f"w{i}"] + ([f"b{i}"] if i % 2 == 0 else []), [f"y{i}"],
                                      **attrs))
    m = graph_model(nodes, feeds, [f"y{i}" for i in range(len(CONVS))], inits)
    assert_parity(m, tmp_path, feeds, target=target)
    assert taken == {False, True}, f"the cases should take both GEMM orientations on {target}"


@pytest.mark.parametrize("target", ["c", "c-avx512"])
def test_matmul_and_gemm_operand_forms(target, tmp_path):
    """Constant B (packed at compile time), constant A, both at run time, batched with a
    broadcast B (rows folded into one GEMM), Gemm with transposed run-time operands and bias."""
    from onnx import helper
    from tests.helpers import assert_parity, graph_model, rand
    _target_or_skip(target)
    N = helper.make_node
    x, y = rand(3, 37, 45, seed=1), rand(45, 19, seed=2)
    x2 = rand(19, 45, seed=3)
    nodes = [N("MatMul", ["x", "w"], ["a"]),                 # [3,37,45] x const [45,70]
             N("MatMul", ["wa", "y"], ["b"]),                # const [29,45] x [45,19]
             N("MatMul", ["x", "y"], ["c"]),                 # both at run time, B broadcast
             N("Transpose", ["x"], ["xt"], perm=[0, 2, 1]),  # [3,45,37]
             N("MatMul", ["xt", "x"], ["d"]),                # batched, both at run time
             N("Gemm", ["y", "x2"], ["e"], transA=1, transB=1, alpha=0.5),   # [19,19]
             N("Gemm", ["x2", "y", "bias"], ["f"])]          # [19,19] + bias, accumulated onto
    inits = {"w": rand(45, 70, seed=4), "wa": rand(29, 45, seed=5), "bias": rand(19, seed=6)}
    m = graph_model(nodes, {"x": x, "y": y, "x2": x2}, ["a", "b", "c", "d", "e", "f"], inits)
    assert_parity(m, tmp_path, {"x": x, "y": y, "x2": x2}, target=target)


@pytest.mark.parametrize("target", ["c", "c-avx512"])
def test_weights_given_at_run_time_are_read_through_strides(target, tmp_path):
    """Conv in both orientations and grouped ConvTranspose with W a graph input: no packing at
    compile time, the GEMM reads W (or W^T) where it lies."""
    from onnx import helper
    from tests.helpers import assert_parity, graph_model, rand
    tiles = _target_or_skip(target)
    N = helper.make_node
    cases = [((1, 512, 3, 3), (64, 512, 1, 1), {}), ((1, 16, 9, 9), (24, 8, 3, 3), dict(group=2, pads=[1, 1, 1, 1]))]
    assert tiles.prefers_transposed(*_conv_gemm(*cases[0])) and not tiles.prefers_transposed(*_conv_gemm(*cases[1]))
    for i, (xs, ws, attrs) in enumerate(cases):
        feeds = {"x": rand(*xs, seed=i), "w": rand(*ws, seed=5 + i) * 0.1}
        m = graph_model([N("Conv", ["x", "w"], ["y"], **attrs)], feeds, ["y"])
        (tmp_path / f"conv{i}").mkdir()
        assert_parity(m, tmp_path / f"conv{i}", feeds, target=target)
    feeds = {"x": rand(1, 6, 5, 4, seed=9), "w": rand(6, 2, 3, 3, seed=10), "b": rand(4, seed=11)}
    m = graph_model([N("ConvTranspose", ["x", "w", "b"], ["y"], group=2, strides=[2, 2], pads=[1, 0, 1, 0])],
                    feeds, ["y"])
    (tmp_path / "convt").mkdir()
    assert_parity(m, tmp_path / "convt", feeds, target=target)
