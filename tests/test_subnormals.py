"""Subnormal floats (below 1.2e-38): a CPU or CUDA target computes them as zero, in the weights (made
zero at compile time, counted: passes/subnormals.py) and at run time (flush-to-zero and
denormals-are-zero for the run's threads, the caller's modes restored after), as ONNX Runtime
with its session.set_denormal_as_zero does; the option ,ieee_subnormals keeps IEEE's numbers."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper

from aotc.api import load
from aotc.check.runner import run_check
from aotc.compiler import compile_model
from aotc.inspection import inspect_model
from aotc.targets import load_target
from tests.helpers import eager_threads_target, graph_model

N = helper.make_node
TINY = np.finfo(np.float32).tiny


def _model(rng):
    """y = (Relu((x * 1e-20) * 1e-20) @ W) * 1e38 + x @ V and z = x @ W: the activations fall
    among the subnormals at run time (each constant is normal), W holds subnormal weights among
    normal ones, and the scale makes what the subnormals contribute visible."""
    w = (rng.standard_normal((16, 8)) * 0.5).astype(np.float32)
    sub = rng.random(w.shape) < 0.3
    w[sub] = (rng.uniform(0.1, 0.9, int(sub.sum())) * TINY * np.sign(rng.standard_normal(int(sub.sum())))).astype(
        np.float32)
    v = (rng.standard_normal((16, 8)) * 0.5).astype(np.float32)
    nodes = [N("Mul", ["x", "s1"], ["a"]), N("Mul", ["a", "s2"], ["b"]), N("Relu", ["b"], ["r"]),
             N("MatMul", ["r", "w"], ["m"]), N("Mul", ["m", "big"], ["mb"]),
             N("MatMul", ["x", "v"], ["xv"]), N("Add", ["mb", "xv"], ["y"]),
             N("MatMul", ["x", "w"], ["z"])]
    inits = {"s1": np.array(1e-20, np.float32), "s2": np.array(1e-20, np.float32), "w": w, "v": v,
             "big": np.array(1e38, np.float32)}
    x = rng.standard_normal((4, 16)).astype(np.float32)
    return graph_model(nodes, {"x": x}, ["y", "z"], inits), int(sub.sum())


def _ort(model, x, daz: bool):
    so = ort.SessionOptions()
    if daz:
        so.add_session_config_entry("session.set_denormal_as_zero", "1")
    from aotc.check.runner import caller_fp_state
    with caller_fp_state(flush=daz):
        return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(
            None, {"x": x})


def _numpy_computes_subnormals() -> bool:
    a = np.array([TINY / 4], np.float32)
    return bool((a * np.float32(1.0))[0] != 0)


@pytest.mark.parametrize("target,threads", [("c", 1), ("eager", 2)])
def test_subnormals_computed_as_zero_as_ort_with_denormal_as_zero(target, threads, tmp_path):
    rng = np.random.default_rng()
    model, n_sub = _model(rng)
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    tgt = eager_threads_target(tmp_path) if target == "eager" else target
    out = compile_model(path, target=tgt, output_dir=tmp_path / "out", threads=threads)
    m = load(out)
    x = rng.standard_normal((4, 16)).astype(np.float32)
    y, z = m.run({"x": x})
    want_y, want_z = _ort(model, x, daz=True)
    np.testing.assert_allclose(y, want_y, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(z, want_z, rtol=1e-5, atol=1e-5)
    # without denormals-as-zero ORT differs: the subnormal activations reach y through the scale
    ieee_y, _ = _ort(model, x, daz=False)
    assert np.abs(ieee_y - want_y).max() > 1e-3
    assert _numpy_computes_subnormals(), "the run left this thread computing subnormals as zero"
    import json
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["subnormal_weights"] == {"w": n_sub}
    # aotc check compares with ORT computing them as zero too, and says so
    res = run_check(path, target=tgt, threads=threads, output_dir=tmp_path / "check")
    assert res.passed and "subnormal floats as zero" in res.reference, res.reference
    assert _numpy_computes_subnormals()


def test_ieee_subnormals_option_keeps_them(tmp_path):
    rng = np.random.default_rng()
    model, n_sub = _model(rng)
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    m = load(compile_model(path, target="c,ieee_subnormals", output_dir=tmp_path / "out", threads=1))
    x = rng.standard_normal((4, 16)).astype(np.float32)
    y, z = m.run({"x": x})
    want_y, want_z = _ort(model, x, daz=False)
    np.testing.assert_allclose(y, want_y, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(z, want_z, rtol=1e-5, atol=1e-5)
    assert inspect_model(path, target="c,ieee_subnormals")["subnormal_weights"] == {}
    info = inspect_model(path, target="c")
    assert info["subnormal_weights"] == {"w": n_sub}
    from aotc.inspection import format_text
    assert f"subnormal weights made zero: {n_sub} values in 1 tensor(s)" in format_text(info)


def test_a_subnormal_input_is_zero_unless_ieee(tmp_path):
    """The flush applies to inputs too (denormals-are-zero): NonZero sees a subnormal input as
    0 by default, as ONNX Runtime with its denormal-as-zero option does, and as nonzero with
    ieee_subnormals, as ONNX Runtime by default does."""
    x = np.array([[0.0, TINY / 3, 1.0], [-TINY / 7, 0.0, TINY]], np.float32)
    model = graph_model([N("NonZero", ["x"], ["nz"])], {"x": x}, ["nz"], opset=13)
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    for target, daz in (("c", True), ("c,ieee_subnormals", False)):
        out = compile_model(path, target=target, output_dir=tmp_path / target.replace(",", "_"), threads=1)
        (got,) = load(out).run({"x": x})
        (want,) = _ort(model, x, daz)
        np.testing.assert_array_equal(got, want)
        assert got.shape[1] == (2 if daz else 4), (target, got)


@pytest.mark.parametrize("option", ["", ",ieee_subnormals"])
def test_cuda_builds_with_flush_to_zero(option, tmp_path, monkeypatch):
    """The cuda target computes subnormals as zero too: its subnormal weights are made zero and
    nvcc builds its kernels with -ftz=true (float32 operations flush inputs and results), unless
    ,ieee_subnormals. On the CPU emulation only the weights' part is checked against ONNX Runtime
    with denormal-as-zero (the emulation computes in the CPU's IEEE mode); with
    AOTC_TEST_ON_GPU=1 the subnormal activations too."""
    from aotc.codegen.cuda import backend
    from tests.test_cuda_emulated import ON_GPU, emulated_build
    flags = []
    monkeypatch.setattr(backend, "build_shared", lambda sources, lib, target, inc: flags.extend(target.cflags))
    backend.BACKEND.build([tmp_path / "m.cu"], tmp_path / "libm.so", load_target(f"cuda:sm_90{option}"), [])
    assert ("-ftz=true" in flags) == (option == "")
    monkeypatch.undo()

    rng = np.random.default_rng()
    model, n_sub = _model(rng)
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    out = compile_model(path, target=f"cuda:sm_90{option}", output_dir=tmp_path / "out", build=emulated_build)
    import json
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["subnormal_weights"] == ({"w": n_sub} if option == "" else {})
    x = rng.standard_normal((4, 16)).astype(np.float32)
    y, z = load(out).run({"x": x})
    want_y, want_z = _ort(model, x, daz=option == "")
    np.testing.assert_allclose(z, want_z, rtol=1e-5, atol=1e-5)
    if ON_GPU or option:
        np.testing.assert_allclose(y, want_y, rtol=1e-4, atol=1e-5)
