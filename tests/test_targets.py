"""The SIMD targets compile every zoo model (small) to the same answers as ONNX Runtime.
Targets this CPU cannot run are left out of the parameter list (they still compile in
test_gemm's cross-checks)."""
import onnx
import pytest

from aotc.check.runner import run_check
from aotc.targets import NATIVE, available, load_target, native_target, runs_here
from models.zoo import ZOO

CPU = [t for t in available() if t != NATIVE and load_target(t).language == "c"]
RUNNABLE = [t for t in CPU if t != "c" and runs_here(load_target(t))]


def test_every_target_file_loads():
    for t in available():
        tgt = load_target(t)
        assert tgt.requested == t
        assert tgt.name == t or t == NATIVE


def test_native_is_the_best_target_this_cpu_runs():
    best = native_target()
    assert load_target(NATIVE).name == best and runs_here(load_target(best))
    for t in RUNNABLE:
        assert load_target(t).native_rank <= load_target(best).native_rank


@pytest.mark.parametrize("target", RUNNABLE)
@pytest.mark.parametrize("name", ["resnet50", "mobilenetv2", "bert", "gpt2", "lstm", "yolo"])
def test_zoo_on_simd_target(name, target, tmp_path):
    e = ZOO[name]
    path = tmp_path / f"{name}.onnx"
    onnx.save(e.build("small"), str(path))
    res = run_check(path, target=target, shapes=e.shapes_for("small"), rtol=e.rtol, atol=e.atol,
                    output_dir=tmp_path / "out", seed=5)
    assert res.outputs
    for o in res.outputs:
        assert o.passed, f"{name}/{o.name} on {target}: max_abs={o.max_abs_err:.3g} {o.note}"


def test_target_options_after_a_comma():
    """`cuda,tf32` / `cuda:sm_90,tf32` turn on a switch the target file lists under [options]
    (its [numerics] key); an option a target does not list is refused, naming the ones it has."""
    from aotc.errors import AotcError
    t = load_target("cuda:sm_90,tf32")
    assert t.arch == ("sm_90",) and t.numerics.tf32 is True and t.name == "cuda:sm_90,tf32"
    assert load_target("cuda,tf32").arch == ("sm_80", "sm_90")
    assert load_target("cuda").numerics.tf32 is False
    # `native` takes the options of the target it resolves to
    nat = load_target("native,direct_conv")
    assert nat.numerics.direct_conv is True and nat.name.endswith(",direct_conv")
    for bad, why in (("cuda,fast", "its options: ieee_subnormals, tf32"), ("opencl,tf32", "its options: none"),
                     ("c,tf32", "its options: ieee_subnormals, direct_conv, planar, winograd4")):
        with pytest.raises(AotcError, match="has no option") as e:
            load_target(bad)
        assert why in str(e.value.hint), e.value.hint


@pytest.mark.parametrize("edit,error", [
    (lambda t: t.replace("[gemm]\n", "[gemm]\nmrr = 4\n", 1), r"\[gemm\]: unknown key 'mrr'"),
    (lambda t: t + "\n[gemmm]\nmr = 4\n", r"unknown key 'gemmm'"),
    (lambda t: t.replace("alignment = 64", 'alignment = "64"'), r"key 'alignment' must be an integer"),
    (lambda t: t.replace("tile_epilogue = true", "tile_epilogue = 1"), r"\[gemm\] key 'tile_epilogue' must be true or false"),
    (lambda t: t.replace('accumulate_float32 = "float64"', 'accumulate_float32 = "double"'), "accumulate_float32"),
    (lambda t: t.replace("[options]\n", '[options]\nfast = "no such switch"\n', 1), r"\[options\]: 'fast' is no switch"),
])
def test_a_target_file_is_checked_key_by_key(edit, error, tmp_path):
    """A typo in a target file is an error naming the file and the key, never ignored."""
    from aotc.errors import AotcError
    from aotc.paths import TARGETS_DIR
    path = tmp_path / "mine.toml"
    path.write_text(edit((TARGETS_DIR / "c.toml").read_text()))
    with pytest.raises(AotcError, match=error) as e:
        load_target(str(path))
    assert str(path) in str(e.value)


def test_gpu_tiles_that_do_not_divide_are_refused(tmp_path):
    from aotc.errors import AotcError
    from aotc.paths import TARGETS_DIR
    path = tmp_path / "odd.toml"
    path.write_text((TARGETS_DIR / "cuda.toml").read_text().replace("rm = 8", "rm = 7"))
    with pytest.raises(AotcError, match="do not divide evenly"):
        load_target(str(path))


def test_target_facts_come_from_the_files():
    """What the schedules read is the file's: a key set there is the field's value, a key left
    out the one default targets.py gives."""
    import tomllib
    from aotc.paths import TARGETS_DIR
    for name in available():
        if name == NATIVE:
            continue
        with open(TARGETS_DIR / f"{name}.toml", "rb") as f:
            raw = tomllib.load(f)
        t = load_target(name)
        for table in ("gemm", "threads", "vector", "winograd", "numerics", "gpu"):
            for key, value in raw.get(table, {}).items():
                assert getattr(getattr(t, table), key) == value, (name, table, key)
    assert load_target("cuda").gpu.max_grid_z == 65535 and load_target("c").gpu is None


def test_check_tolerances_are_the_targets_for_cli_and_api():
    from aotc.check.parity import DEFAULT_TOLERANCES, TF32_TOLERANCES, tolerances
    assert tolerances(load_target("cuda,tf32")) == TF32_TOLERANCES
    assert tolerances(load_target("cuda")) == tolerances(load_target("c")) == DEFAULT_TOLERANCES
