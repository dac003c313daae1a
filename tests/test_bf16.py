"""The option bf16 (`native,bf16`): float32 GEMMs with bfloat16 operands (runtime/aotc_gemm_packed.h
aotc_sgemm_block_bf16), on AMX tiles where the CPU has AMX-BF16, else by AVX512-BF16's dot
products of pairs (AMD Zen 4 and newer).

On a CPU with AVX512-BF16 the product must be what float32 sums of the operands rounded to
bfloat16 give (numpy, in float64), far closer to that than to the float32 product (so the bfloat16
path ran): every way the float32 path takes its operands (strided, transposed, packed at compile
time, a convolution's im2col matrix), edges of the 32 x 32 block and of K's blocks, C strided and
transposed, accumulate, the epilogue once per element, threads, and no write past the scratch.
Each of these runs twice: as the runtime chooses (the tiles where there is AMX), and built with
AOTC_BF16_NO_AMX (the dot-product tile even where there is AMX, so that an AMX machine tests both).
Products under 16 rows or columns stay float32. On a CPU without AVX512-BF16 the same build must
give the float32 path's results (what the option promises there); a model compiled with it is
checked against ONNX Runtime either way."""
from __future__ import annotations

import numpy as np
import pytest

from aotc.schedule.gemm_cpu import BF16_MIN, pack_a, pack_a_bf16, pack_b, pack_b_bf16
from aotc.targets import cpu_flags, load_target
from tools.gemm_bench import GemmLib

# products in bfloat16 here: on the tiles (AMX-BF16) or by the dot-product tile (AVX512-BF16)
BF16 = "avx512_bf16" in cpu_flags()


@pytest.fixture(scope="module", params=["chosen", "no_amx"])
def libs(request, tmp_path_factory):
    missing = set(load_target("c-avx512").requires) - cpu_flags()
    if missing:
        pytest.skip(f"this CPU lacks {', '.join(sorted(missing))} for target c-avx512 (the bf16 option's)")
    d = tmp_path_factory.mktemp("bf16")
    defines = {"AOTC_BF16_NO_AMX": 1} if request.param == "no_amx" else None
    return GemmLib("c-avx512,bf16", d, defines=defines), GemmLib("c-avx512", d)


def _bf16(x: np.ndarray) -> np.ndarray:
    """float32 rounded to bfloat16 (to nearest, ties to even), as float32"""
    u = np.ascontiguousarray(x, np.float32).view(np.uint32).astype(np.uint64)
    return (((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16).astype(np.uint32).view(np.float32).reshape(x.shape)


def _rand(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def _check(C, A, B, lib_f32_result=None, C0=None):
    """C against the bf16 product (with AVX512-BF16) or the float32 one (elsewhere, or small)."""
    A64, B64 = np.asarray(A, np.float64), np.asarray(B, np.float64)
    f32 = A64 @ B64 + (0 if C0 is None else C0)
    M, K = A.shape
    N = B.shape[1]
    on_tiles = BF16 and min(M, N, K) >= BF16_MIN
    if not on_tiles:
        np.testing.assert_allclose(C, f32, rtol=1e-4, atol=2e-6 * K + 1e-6)
        return
    bf = _bf16(A).astype(np.float64) @ _bf16(B).astype(np.float64) + (0 if C0 is None else C0)
    scale = np.abs(_bf16(A)).astype(np.float64) @ np.abs(_bf16(B)).astype(np.float64) + 1
    err_bf, err_f32 = np.abs(C - bf) / scale, np.abs(C - f32) / scale
    assert err_bf.max() < 2e-6, f"{M}x{N}x{K}: {err_bf.max():.2e} from float32 sums of bfloat16 operands"
    assert err_f32.max() > 20 * err_bf.max(), f"{M}x{N}x{K}: as close to float32 as to bf16 (tiles not used?)"


def _shapes():
    """Around the tiles' 32 x 32 block and 32-wide k steps, the 512-column conversion block, the
    16-value threshold, K blocks of unequal lengths (385 = 193 + 192) and several row blocks; last
    blocks of 1 to 4 columns past a vector of 16 or none (49 = 32 + 16 + 1, 36 = 32 + 4, 20 = 16 +
    4, 196 = 6 x 32 + 4), which the dot-product tile sums one column at a time."""
    return [(16, 16, 16), (15, 40, 40), (40, 15, 40), (40, 40, 15), (17, 33, 31), (31, 31, 33), (32, 32, 32),
            (33, 65, 64), (64, 531, 100), (17, 2100, 385), (200, 47, 1000), (129, 70, 769),
            (40, 49, 400), (33, 36, 70), (20, 20, 100), (17, 196, 64)]


def _operands(t, A, B, packed):
    """A and B as `packed` says ("A" / "B": float32 panels, "A16" / "B16": bfloat16 tiles, as
    the compiler stores constants with the option), and the keywords GemmLib.packed takes."""
    kw = dict(a_packed=packed == "A", b_packed=packed == "B", a_bf16=packed == "A16", b_bf16=packed == "B16")
    Ap = pack_a(A, t) if packed == "A" else pack_a_bf16(A, t) if packed == "A16" else A
    Bp = pack_b(B, t) if packed == "B" else pack_b_bf16(B, t) if packed == "B16" else B
    return Ap, Bp, kw


@pytest.mark.parametrize("packed", ["", "A", "B", "A16", "B16"])
def test_products_match_bfloat16_operands(libs, packed):
    bf, _ = libs
    t = bf.tiles
    rng = np.random.default_rng(1)
    for M, N, K in _shapes():
        A, B = _rand(rng, M, K), _rand(rng, K, N)
        if packed == "A16":             # a constant stored as bfloat16 is bfloat16 on every path
            A = _bf16(A)
        if packed == "B16":
            B = _bf16(B)
        Ap, Bp, kw = _operands(t, A, B, packed)
        n_work = max(1, t.work_floats(M, N, K, kw["a_packed"], kw["b_packed"], kw["a_bf16"], kw["b_bf16"]))
        work = np.full(n_work + 64, 7.0, np.float32)
        C = np.full((M, N), np.nan, np.float32)
        bf.packed(M, N, K, Ap, Bp, C, work=work, **kw)
        _check(C, A, B)
        assert np.all(work[n_work:] == 7.0), f"{M}x{N}x{K}: wrote past the work buffer"


@pytest.mark.parametrize("layout", ["At", "Bt", "strided"])
def test_transposed_and_strided_operands(libs, layout):
    bf, _ = libs
    rng = np.random.default_rng(2)
    for M, N, K in [(33, 47, 61), (20, 300, 400)]:
        A = _rand(rng, K, M).T if layout == "At" else _rand(rng, M, K + 6)[:, 3:K + 3] if layout == "strided" \
            else _rand(rng, M, K)
        B = _rand(rng, N, K).T if layout == "Bt" else _rand(rng, K, 2 * N + 1)[:, :2 * N:2] if layout == "strided" \
            else _rand(rng, K, N)
        C = np.empty((M, N), np.float32)
        bf.packed(M, N, K, A, B, C)
        _check(C, A, B)


def test_accumulate_epilogue_threads_and_strided_c(libs):
    """C += A.B through strides (transposed, inside a larger array), the bias + ReLU epilogue
    seeing each element once, after its last K block, on one thread and split two ways."""
    bf, _ = libs
    rng = np.random.default_rng(3)
    for M, N, K in [(40, 70, 400), (130, 33, 50)]:
        for threads, split in ((1, "none"), (2, "rows"), (2, "cols")):
            for packed in ("", "A", "B", "A16", "B16"):
                A, B, bias = _rand(rng, M, K), _rand(rng, K, N), _rand(rng, N)
                A, B = (_bf16(A) if packed == "A16" else A), (_bf16(B) if packed == "B16" else B)
                big = _rand(rng, N + 3, M + 2)
                before = big.copy()
                C = big[1:N + 1, 1:M + 1].T
                C0 = C.astype(np.float64)
                seen = np.zeros((M, N), np.int64)
                Ap, Bp, kw = _operands(bf.tiles, A, B, packed)
                bf.packed(M, N, K, Ap, Bp, C, accumulate=True, threads=threads, split=split, bias=bias, seen=seen,
                          **kw)
                assert np.all(seen == 1), f"{M}x{N}x{K}: epilogue saw elements {np.unique(seen)} times"
                # undo the epilogue where it left a value (ReLU kept it): C - bias is the product
                live = C > 0
                product = np.where(live, C.astype(np.float64) - bias, np.nan)
                _check_where(product, A, B, C0, live)
                outside = np.ones(big.shape, bool)
                outside[1:N + 1, 1:M + 1] = False
                assert np.array_equal(big[outside], before[outside]), "wrote outside C"


def _check_where(product, A, B, C0, live):
    """_check on the elements in `live` only (the others the ReLU made 0)."""
    f32 = A.astype(np.float64) @ B.astype(np.float64) + C0
    K = A.shape[1]
    if not BF16:
        np.testing.assert_allclose(product[live], f32[live], rtol=1e-4, atol=2e-6 * K + 1e-5)
        return
    bf = _bf16(A).astype(np.float64) @ _bf16(B).astype(np.float64) + C0
    scale = np.abs(_bf16(A)).astype(np.float64) @ np.abs(_bf16(B)).astype(np.float64) + 1 + np.abs(C0)
    err_bf, err_f32 = (np.abs(product - bf) / scale)[live], (np.abs(product - f32) / scale)[live]
    assert err_bf.max() < 2e-6 and err_f32.max() > 20 * err_bf.max()


def test_without_bf16_or_small_the_product_is_float32(libs):
    """Products under 16 rows, columns or K take the float32 path bit for bit; so does every
    product on a CPU without AVX512-BF16. A constant stored as bfloat16 tiles is widened for it: the
    float32 product of its bfloat16 values (a decoder's one-token step over its weights), up to
    the order of the sums (a one-row product of strided operands sums in its own order)."""
    bf, f32 = libs
    rng = np.random.default_rng(4)
    shapes = [(15, 64, 64), (64, 15, 64), (64, 64, 15), (1, 500, 300), (3, 70, 800)] + \
        ([] if BF16 else [(64, 64, 64), (40, 600, 500)])
    for M, N, K in shapes:
        for packed in ("", "A16", "B16"):
            A, B = _rand(rng, M, K), _rand(rng, K, N)
            A, B = (_bf16(A) if packed == "A16" else A), (_bf16(B) if packed == "B16" else B)
            C1, C2 = np.empty((M, N), np.float32), np.empty((M, N), np.float32)
            Ap, Bp, kw = _operands(bf.tiles, A, B, packed)
            bf.packed(M, N, K, Ap, Bp, C1, **kw)
            f32.packed(M, N, K, A, B, C2)
            if packed:
                scale = np.abs(A).astype(np.float64) @ np.abs(B).astype(np.float64)
                assert (np.abs(C1 - C2) / scale).max() < 1e-6, f"{M}x{N}x{K} {packed}"
            else:
                assert np.array_equal(C1, C2), f"{M}x{N}x{K}"


def test_option_belongs_to_the_avx512_target():
    from aotc.errors import AotcError
    assert load_target("c-avx512,bf16").numerics.bf16
    with pytest.raises(AotcError, match="no option 'bf16'"):
        load_target("c,bf16")


@pytest.mark.parametrize("flags,winograd", [({"avx512_bf16"}, True), ({"avx512_bf16", "amx_bf16", "amx_tile"}, False),
                                            (set(), False)])
def test_native_bf16_keeps_winograd_where_the_products_are_dot_products(flags, winograd, monkeypatch):
    """`native,bf16` adds bf16_winograd on a CPU with AVX512-BF16 and no AMX (its bf16 products
    about 2x float32's, so Winograd's fewer products still pay), not on AMX nor where bf16 runs
    float32; a target named outright keeps what it says."""
    from aotc import targets
    from aotc.passes.winograd import allowed_tiles
    base = set(load_target("c-avx512").requires)
    monkeypatch.setattr(targets, "cpu_flags", lambda: frozenset(base | flags))
    t = load_target("native,bf16")
    assert t.numerics.bf16 and t.numerics.bf16_winograd == winograd
    assert t.name == "c-avx512,bf16" + (",bf16_winograd" if winograd else "")
    assert bool(allowed_tiles(t)) == winograd
    assert not allowed_tiles(load_target("c-avx512,bf16")) and allowed_tiles(load_target("c-avx512,bf16,bf16_winograd"))


def test_threads_compute_what_one_thread_does(libs):
    """Whether a product runs on the tiles is decided for the whole product, never per thread's
    block: split by rows or columns, it is bit for bit the one-thread result."""
    bf, _ = libs
    rng = np.random.default_rng(5)
    for M, N, K in [(40, 33, 70), (17, 300, 50), (24, 20, 100)]:
        A, B = _rand(rng, M, K), _rand(rng, K, N)
        one = np.empty((M, N), np.float32)
        bf.packed(M, N, K, A, B, one)
        _check(one, A, B)
        for split in ("rows", "cols"):
            C = np.empty((M, N), np.float32)
            bf.packed(M, N, K, A, B, C, threads=2, split=split)
            assert np.array_equal(C, one), f"{M}x{N}x{K} split by {split}"


@pytest.mark.parametrize("name", ["resnet50", "bert"])
def test_zoo_models_on_bf16_match_onnx_runtime(name, tmp_path):
    """A CNN (convolutions as im2col products, their weights packed at compile time) and a
    transformer (MatMuls over packed weights, attention over run-time operands) compiled with the
    option: within its tolerances of ONNX Runtime, and not the float32 artifact's numbers (its
    weights are bfloat16 on every CPU; with AVX512-BF16 its operands too)."""
    import onnx

    from aotc.api import load
    from aotc.check.inputs import sample_inputs
    from aotc.check.runner import run_check
    from aotc.frontend import import_model, load_onnx
    from models.zoo import ZOO
    if set(load_target("c-avx512").requires) - cpu_flags():
        pytest.skip("this CPU cannot run the c-avx512 target (the bf16 option's)")
    e = ZOO[name]
    path = tmp_path / f"{name}.onnx"
    onnx.save(e.build("small"), str(path))
    shapes = e.shapes_for("small")
    res = run_check(path, target="c-avx512,bf16", shapes=shapes, output_dir=tmp_path / "bf16", seed=3)
    assert (res.rtol, res.atol) == (5e-2, 5e-2)
    for o in res.outputs:
        assert o.passed, f"{name}/{o.name}: max_abs={o.max_abs_err:.3g} max_rel={o.max_rel_err:.3g} {o.note}"
    run_check(path, target="c-avx512", shapes=shapes, output_dir=tmp_path / "f32", seed=3)
    feeds = sample_inputs(import_model(load_onnx(path), name, shapes), seed=4)
    got = [load(tmp_path / d, threads=1).run(feeds) for d in ("bf16", "f32")]
    assert any(not np.array_equal(a, b) for a, b in zip(*got)), "the bf16 build computed float32's numbers"


def test_check_says_its_tolerances_are_widened(tmp_path):
    """`aotc check` on the option: rtol = atol = 5e-2, and it says why."""
    import onnx

    from models.zoo import ZOO
    from tests.test_cli import aotc
    if set(load_target("c-avx512").requires) - cpu_flags():
        pytest.skip("this CPU cannot run the c-avx512 target (the bf16 option's)")
    path = tmp_path / "mlp.onnx"
    onnx.save(ZOO["mlp"].build("small"), str(path))
    p = aotc("check", path, "--target", "c-avx512,bf16", "--shape", "x=32x64", check_rc=0)
    assert "(rtol 0.05, atol 0.05)" in p.stdout and "tolerances widened: the target's float32 GEMMs take " \
        "bfloat16 operands" in p.stdout, p.stdout
    p = aotc("check", path, "--target", "c-avx512", "--shape", "x=32x64", check_rc=0)
    assert "widened" not in p.stdout


def test_resnet_by_winograd_on_bf16_matches_onnx_runtime(tmp_path):
    """bf16_winograd: ResNet's 3 x 3 convolutions by Winograd with bfloat16 products (where the
    CPU has AVX512-BF16; float32 elsewhere), within the option's tolerances of ONNX Runtime."""
    import onnx

    from aotc.check.runner import run_check
    from models.zoo import ZOO
    if set(load_target("c-avx512").requires) - cpu_flags():
        pytest.skip("this CPU cannot run the c-avx512 target (the bf16 option's)")
    e = ZOO["resnet50"]
    path = tmp_path / "resnet50.onnx"
    onnx.save(e.build("small"), str(path))
    res = run_check(path, target="c-avx512,bf16,bf16_winograd", shapes=e.shapes_for("small"),
                    output_dir=tmp_path / "out", seed=3)
    assert (res.rtol, res.atol) == (5e-2, 5e-2) and res.outputs
    for o in res.outputs:
        assert o.passed, f"{o.name}: max_abs={o.max_abs_err:.3g} max_rel={o.max_rel_err:.3g} {o.note}"
    assert "winogradconv" in (tmp_path / "out" / "resnet50.c").read_text()


@pytest.mark.parametrize("name", ["gpt2", "gru", "legacy_opset11", "legacy_opset13", "lenet5", "lstm", "mlp",
                                  "mobilenetv2", "vit", "yolo"])
def test_every_other_zoo_model_on_bf16_matches_onnx_runtime(name, tmp_path):
    """The rest of the zoo (depthwise and grouped convolutions, recurrent steps of one row over
    weights that stay float32, a decoder's attention, a detector's heads) through `aotc check` on
    the option, at 2 threads."""
    import onnx

    from aotc.check.runner import run_check
    from models.zoo import ZOO
    if set(load_target("c-avx512").requires) - cpu_flags():
        pytest.skip("this CPU cannot run the c-avx512 target (the bf16 option's)")
    e = ZOO[name]
    path = tmp_path / f"{name}.onnx"
    onnx.save(e.build("small"), str(path))
    res = run_check(path, target="c-avx512,bf16", shapes=e.shapes_for("small"), output_dir=tmp_path / "out", seed=3,
                    threads=2)
    assert res.outputs
    for o in res.outputs:
        assert o.passed, f"{name}/{o.name}: max_abs={o.max_abs_err:.3g} max_rel={o.max_rel_err:.3g} {o.note}"
