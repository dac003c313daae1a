"""The SIMD targets compile every zoo model (small) to the same answers as ONNX Runtime.
Targets this CPU cannot run are left out of the parameter list (they still compile in
test_gemm's cross-checks)."""
import onnx
import pytest

from aotc.check.runner import run_check
from aotc.targets import NATIVE, available, load_target, native_target, runs_here
from models.zoo import ZOO

CPU = [t for t in available() if t != NATIVE and load_target(t)["language"] == "c"]
RUNNABLE = [t for t in CPU if t != "c" and runs_here(load_target(t))]


def test_every_target_file_loads():
    for t in available():
        tgt = load_target(t)
        assert tgt["requested"] == t
        assert tgt["name"] == t or t == NATIVE


def test_native_is_the_best_target_this_cpu_runs():
    best = native_target()
    assert load_target(NATIVE)["name"] == best and runs_here(load_target(best))
    for t in RUNNABLE:
        assert load_target(t)["native_rank"] <= load_target(best)["native_rank"]


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
    assert t["arch"] == ["sm_90"] and t["numerics"]["tf32"] is True and t["name"] == "cuda:sm_90,tf32"
    assert load_target("cuda,tf32")["arch"] == ["sm_80", "sm_90"]
    assert load_target("cuda")["numerics"]["tf32"] is False
    # `native` takes the options of the target it resolves to
    nat = load_target("native,direct_conv")
    assert nat["numerics"]["direct_conv"] is True and nat["name"].endswith(",direct_conv")
    for bad, why in (("cuda,fast", "its options: tf32"), ("opencl,tf32", "its options: none"),
                     ("c,tf32", "its options: direct_conv, winograd4")):
        with pytest.raises(AotcError, match="has no option") as e:
            load_target(bad)
        assert why in str(e.value.hint), e.value.hint
