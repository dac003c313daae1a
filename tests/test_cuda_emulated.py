"""The cuda target's own code, run here without a GPU: the artifact's CUDA C++ (kernels and host
code, as generated) is built with g++ against a CPU emulation of the CUDA runtime, the device
language and wmma (tests/cuda_emu/), which runs each block's threads as fibers between barriers.
What only the CUDA printer prints (tensor-core steps, warp barriers, shared-memory declarations,
launches, graph capture) is then checked against ONNX Runtime on fresh random inputs, as the
opencl target is on PoCL. Speed means nothing here; docs/GPU.md has the GPU's numbers.

On a machine with an NVIDIA GPU, AOTC_TEST_ON_GPU=1 runs every test that builds through
`emulated_build` (here and in the other test files that import it) on the GPU instead: the
build is then nvcc's, the target's own (`tools/gpu_lease.sh` does this in a lease). A test
that looks at what the emulated build leaves (its rewritten sources, say) may then fail for
that reason alone: read a failure's assertion before blaming the GPU."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper

from aotc.api import load
from aotc.check.inputs import sample_inputs
from aotc.check.runner import reference_outputs
from aotc.compiler import compile_model
from aotc.errors import ArtifactError
from aotc.frontend import import_model, load_onnx
from models.zoo import ZOO
from tests.helpers import assert_parity, eager_cuda_target, gemm_layouts_model, graph_model, rand

EMU = Path(__file__).parent / "cuda_emu"
CXX = shutil.which("g++")
pytestmark = pytest.mark.skipif(CXX is None, reason="g++ is not installed")
N = helper.make_node


ON_GPU = os.environ.get("AOTC_TEST_ON_GPU") == "1"


def emulated_build(sources: list[Path], lib: Path, target: dict, include_dirs: list[Path]) -> None:
    """compile_model's build step for the emulation: each launch rewritten as a call, g++
    (with AOTC_TEST_ON_GPU=1: the cuda backend's own nvcc build, for a real GPU)."""
    if ON_GPU:
        from aotc.codegen import get_backend
        get_backend(target.language).build(sources, lib, target, include_dirs)
        return
    objs = []
    for src in sources:
        obj = src.with_suffix(src.suffix + ".o")
        if src.suffix == ".cu":
            text = re.sub(r"(\w+)<<<(.+?)>>>\(", r"aotc_emu::launch(\1, \2)(", src.read_text())
            src = src.with_suffix(".emu.cpp")
            src.write_text(text)
            cmd = [CXX, "-std=c++20", "-x", "c++"]
        else:
            cmd = ["gcc", "-std=c99"]
        # (-U_FORTIFY_SOURCE: where the compiler defines it, _longjmp checks that it jumps up
        # its own stack, which the emulator's fibers, each on a stack of its own, never do)
        cmd += ["-O1", "-fPIC", "-w", "-U_FORTIFY_SOURCE", "-I", str(EMU)] + [f"-I{d}" for d in include_dirs]
        cmd += ["-c", str(src), "-o", str(obj)]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr[-4000:]
        objs.append(str(obj))
    proc = subprocess.run([CXX, "-shared", "-o", str(lib)] + objs, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-4000:]


def _parity(model: onnx.ModelProto, tmp_path: Path, target: str, shapes=None, rtol=1e-4, atol=1e-5) -> str:
    """Compile for `target` with the emulated build, run on seeded random inputs, compare every
    output with ONNX Runtime; returns the generated .cu."""
    path = tmp_path / "model.onnx"
    onnx.save(model, str(path))
    out = compile_model(path, target=target, output_dir=tmp_path / "out", shapes=shapes, build=emulated_build)
    feeds = sample_inputs(import_model(load_onnx(path), "m", shapes), seed=3)
    m = load(out)
    got = m.run({k: feeds[k] for k in m.input_names})
    ref = reference_outputs(path, feeds)
    for name, g, r in zip(m.output_names, got, ref):
        np.testing.assert_allclose(g, r, rtol=rtol, atol=atol, err_msg=name)
    return (out / "model.cu").read_text()


@pytest.mark.parametrize("rows", [37, 3])
def test_gemms_as_cuda_prints_them(rows, tmp_path):
    """Tiled GEMMs (37 rows), and few-row ones as a thread per result (3 rows, `gemv_rows`)."""
    src = _parity(gemm_layouts_model(rows)[0], tmp_path, "cuda:sm_90")
    assert "__shared__ __align__(32) float a_tile" in src and "wmma" not in src
    assert (f"GEMM {rows}x133x70" in src) == (rows == 37) and (f"{rows * 133} work-items" in src) == (rows == 3)


@pytest.mark.parametrize("k", [512, 513])
def test_few_row_gemms_with_long_dot_products_are_tiled(k, tmp_path):
    """A few-row GEMM runs a thread per result only while its K is at most the target's
    gemv_max_k (512 on cuda): beyond, each thread's dot product is long and the results few,
    so tiles split along K keep more of the GPU busy (BERT-base at one position on the H200:
    3.33 -> 1.13 ms). Both sides of the bound against ONNX Runtime."""
    from tests.helpers import single_op_model
    rng = np.random.default_rng(5)
    model = single_op_model("MatMul", {"a": rng.standard_normal((2, k)).astype(np.float32),
                                       "b": rng.standard_normal((k, 96)).astype(np.float32)})
    src = _parity(model, tmp_path, "cuda:sm_90")
    assert (f"GEMM 2x96x{k}" in src) == (k > 512)


@pytest.mark.parametrize("a_shape,b_shape", [((5,), (5,)), ((1, 5), (5, 1)), ((5,), (5, 3))])
def test_one_result_gemms(a_shape, b_shape, tmp_path):
    """A product with a 1 x 1 C (a dot product: MatMul of two vectors) is a launch of one
    work-item: the few-row GEMM's nest over C has no loop to collapse onto the grid otherwise
    (it raised an AttributeError in the GPU schedule)."""
    from tests.helpers import single_op_model
    rng = np.random.default_rng(7)
    model = single_op_model("MatMul", {"a": rng.standard_normal(a_shape).astype(np.float32),
                                       "b": rng.standard_normal(b_shape).astype(np.float32)})
    _parity(model, tmp_path, "cuda:sm_90")


def _tf32(x: np.ndarray) -> np.ndarray:
    """float32 rounded to TF32 (10 explicit mantissa bits), to nearest, ties away from zero."""
    bits = x.astype(np.float32).view(np.uint32)
    return ((bits + np.uint32(0x1000)) & np.uint32(0xFFFFE000)).view(np.float32)


@pytest.mark.parametrize("kind", ["cuda:sm_90,tf32", "small-tiles-split-k"])
def test_tf32_gemms_on_emulated_tensor_cores(kind, tmp_path):
    """`cuda,tf32`: the wmma steps, their fragment alignment (checked by the emulated loads),
    the warp barriers and the epilogue through local memory give each GEMM of TF32-rounded
    inputs, summed in float32 (numpy's product of the rounded inputs, to float32 rounding).
    'small-tiles-split-k': a target file of 32 x 32 tiles with tf32 in its [numerics] and the
    eager thresholds: tensor-core tiles of 64 x 64 (the least whole fragments), K split."""
    model, _ = gemm_layouts_model()
    path = tmp_path / "model.onnx"
    onnx.save(model, str(path))
    target = kind
    if kind == "small-tiles-split-k":
        from tests.helpers import opencl_target_with
        small = {"tm": 32, "tn": 32, "rm": 2, "rn": 2, "min_groups": 4096, "split_min_k": 16}
        target = opencl_target_with(tmp_path, "cuda-small-tf32", small, base="cuda")
        Path(target).write_text(Path(target).read_text().replace("tf32 = false", "tf32 = true"))
    out = compile_model(path, target=target, output_dir=tmp_path / "out", build=emulated_build)
    src = (out / "model.cu").read_text()
    assert "wmma::mma_sync(" in src and "__syncwarp();" in src
    assert kind != "small-tiles-split-k" or ("64x64 tiles" in src and "chunks of" in src)
    m = load(out)
    feeds = sample_inputs(import_model(load_onnx(path), "m"), seed=4)
    got = dict(zip(m.output_names, m.run({k: feeds[k] for k in m.input_names})))
    bias = next(np.asarray(onnx.numpy_helper.to_array(t)) for t in model.graph.initializer if t.name == "bias")
    for ta in (0, 1):
        for tb in (0, 1):
            a, b = feeds[f"a{ta}{tb}"], feeds[f"b{ta}{tb}"]
            a, b = (a.T if ta else a), (b.T if tb else b)
            want = 0.5 * (_tf32(a).astype(np.float64) @ _tf32(b).astype(np.float64)) + 2.0 * bias
            np.testing.assert_allclose(got[f"y{ta}{tb}"], want, rtol=1e-5, atol=1e-4)
    want = _tf32(feeds["p"]).astype(np.float64) @ _tf32(feeds["q"]).astype(np.float64)
    np.testing.assert_allclose(got["pq"], want, rtol=1e-5, atol=1e-4)


def test_tf32_rounds_like_the_hardware(tmp_path):
    """A product whose float32 result TF32 cannot give: inputs with more than 10 mantissa bits
    come out rounded (so the emulation does round, and the test above is not float32 by luck)."""
    a = np.full((16, 8), 1.0 + 2.0 ** -12, np.float32)          # rounds to 1.0 in TF32
    b = np.ones((8, 16), np.float32)
    m = graph_model([N("MatMul", ["a", "b"], ["y"])], {"a": a}, ["y"], {"b": b})
    path = tmp_path / "model.onnx"
    onnx.save(m, str(path))
    out = compile_model(path, target="cuda:sm_90,tf32", output_dir=tmp_path / "out", build=emulated_build)
    y = load(out).run({"a": a})[0]
    assert np.all(y == 8.0), y[0, :4]                              # float32 would give 8 + 2**-9


@pytest.mark.parametrize("name,target", [(n, "cuda:sm_90") for n in sorted(ZOO)] + [
    ("bert", "cuda:sm_90,tf32"), ("resnet50", "cuda:sm_80,tf32"), ("bert", "eager"), ("mobilenetv2", "eager"),
    ("gpt2", "eager"), ("yolo", "eager"), ("gru", "eager")])
def test_zoo_models_on_emulated_cuda(name, target, tmp_path):
    """Small zoo models through the whole cuda artifact: the graph capture and replay, host
    loops, work-group launches with their barriers, GEMMs and Conv batches; with tf32, within
    its tolerance (as `aotc check` takes it); 'eager': with the thresholds that make small
    models take full-size paths (rows as blocks with shuffle reductions, split K)."""
    e = ZOO[name]
    tol = (1e-2, 1e-2) if target.endswith("tf32") else (e.rtol, e.atol)
    if target == "eager":
        target = eager_cuda_target(tmp_path)
    _parity(e.build("small"), tmp_path, target, shapes=e.shapes_for("small"), rtol=tol[0], atol=tol[1])


@pytest.mark.skipif(ON_GPU, reason="the emulation's device count and architecture are set by the test; a real "
                    "GPU has its own (tests/test_cuda.py checks the no-device status of nvcc's build)")
def test_device_checks_on_emulated_cuda(tmp_path, monkeypatch):
    """The host code's device check: no device, or one older than the architectures built."""
    m = graph_model([N("Relu", ["x"], ["y"])], {"x": rand(4, 5)}, ["y"])
    path = tmp_path / "model.onnx"
    onnx.save(m, str(path))
    out = compile_model(path, target="cuda:sm_90", output_dir=tmp_path / "out", build=emulated_build)
    x = rand(4, 5, seed=9)
    assert np.array_equal(load(out).run({"x": x})[0], np.maximum(x, 0))
    monkeypatch.setenv("AOTC_EMU_CC", "80")
    with pytest.raises(ArtifactError, match="(?i)device"):
        load(out)
    monkeypatch.setenv("AOTC_EMU_CC", "90")
    monkeypatch.setenv("AOTC_EMU_DEVICES", "0")
    with pytest.raises(ArtifactError, match="(?i)device"):
        load(out)


def test_op_families_on_emulated_cuda(tmp_path):
    """The opencl tests' graph of op families as the cuda target prints it with every row a
    block (eager thresholds): reductions split across the block combine by warp shuffles."""
    from tests.test_opencl import op_families_model
    m, feeds = op_families_model()
    assert_parity(m, tmp_path, feeds, target=eager_cuda_target(tmp_path), build=emulated_build)
    src = (tmp_path / "out" / "model.cu").read_text()
    assert "__shfl_xor_sync" in src and "__syncthreads();" in src


def test_check_on_a_tf32_target_takes_its_tolerance(tmp_path, monkeypatch):
    """`aotc check --target cuda:sm_90,tf32` compares with rtol = atol = 1e-2 unless told
    otherwise (run here on the emulation): a product TF32 cannot give to float32's precision
    passes with them and fails at 1e-6."""
    from typer.testing import CliRunner

    import aotc.check.runner as runner
    from aotc.cli import app
    real = runner.run_check
    monkeypatch.setattr(runner, "run_check", lambda *a, **kw: real(*a, build=emulated_build, **kw))
    m = graph_model([N("MatMul", ["a", "b"], ["y"])], {"a": rand(32, 256, seed=1)}, ["y"], {"b": rand(256, 48, seed=2)})
    path = tmp_path / "mm.onnx"
    onnx.save(m, str(path))
    ok = CliRunner().invoke(app, ["check", str(path), "--target", "cuda:sm_90,tf32"])
    assert ok.exit_code == 0 and "(rtol 0.01, atol 0.01)" in ok.output, ok.output
    tight = CliRunner().invoke(app, ["check", str(path), "--target", "cuda:sm_90,tf32", "--rtol", "1e-6",
                                     "--atol", "1e-6"])
    assert tight.exit_code == 1 and "MISMATCH" in tight.output, tight.output


@pytest.mark.parametrize("eager", [False, True])
def test_index_error_is_a_status_on_emulated_cuda(eager, tmp_path):
    """A kernel's Fail (atomicCAS into the status word) comes back as a status naming the
    kernel, through the graph; the next run with good indices is right. 'eager': the gather
    rows as blocks (no barrier in them, so a thread may stop alone)."""
    from aotc.errors import RunError
    from tests.helpers import single_op_model
    x = rand(10, 4, seed=12)
    m = single_op_model("Gather", {"x": x, "i": np.array([3, 10], np.int64)}, axis=0)
    path = tmp_path / "m.onnx"
    onnx.save(m, str(path))
    target = eager_cuda_target(tmp_path) if eager else "cuda:sm_90"
    cm = load(compile_model(path, target=target, output_dir=tmp_path / "out", build=emulated_build))
    with pytest.raises(RunError, match=r"Gather.*out of range"):
        cm.run({"x": x, "i": np.array([3, 10], np.int64)})
    np.testing.assert_array_equal(cm.run({"x": x, "i": np.array([3, -10], np.int64)})[0], x[[3, 0]])


def test_profile_mode_on_emulated_cuda(tmp_path):
    """An instance made with profile=True runs its launches one by one (no graph), between
    events, and names each device kernel; results as with the graph."""
    e = ZOO["mlp"]
    path = tmp_path / "mlp.onnx"
    onnx.save(e.build("small"), str(path))
    out = compile_model(path, target="cuda:sm_90", output_dir=tmp_path / "out", shapes=e.shapes_for("small"),
                        build=emulated_build)
    feeds = sample_inputs(import_model(load_onnx(path), "m", e.shapes_for("small")), seed=5)
    plain, profiled = load(out), load(out, profile=True)
    for a, b in zip(plain.run(feeds), profiled.run(feeds)):
        np.testing.assert_array_equal(a, b)
    names = [n for n, _ in profiled.profile()]
    assert len(names) == 3 and all(n.startswith("k00") for n in names), names


def test_schedule_variants_harness(tmp_path):
    """`python -m tools.gpu_check variants` (the GPU schedule's choices side by side), run
    here on the emulation: each variant's target really has its setting, every model at batch
    2 passes against ONNX Runtime under each, and each gets a time and a ratio."""
    import argparse
    from tools.gpu_check import variants
    a = argparse.Namespace(models="lenet5,mlp", size="small", batch=2, target="cuda:sm_90", jobs=1, runs=4,
                           rounds=2, workdir=str(tmp_path), variant=["im2col-buffers:gemm.im2col_packing=false",
                                                                    "tiled-few-rows:gpu.gemv_rows=0"])
    table = variants(a, build=emulated_build)
    rows = [r for r in table.splitlines() if r.startswith("| lenet5") or r.startswith("| mlp")]
    assert len(rows) == 6, table
    for r in rows:
        cells = [c.strip() for c in r.strip("|").split("|")]
        assert cells[-1] == "PASS" and float(cells[3]) > 0 and float(cells[4]) > 0, r
    ws = {lb: json.loads((tmp_path / f"v_lenet5_small_b2_{lb}" / "manifest.json").read_text())["workspace_bytes"]
          for lb in ("base", "im2col-buffers")}
    assert ws["im2col-buffers"] > ws["base"], ws
    src = {lb: (tmp_path / f"v_mlp_small_b2_{lb}" / "v_mlp_small_b2.cu").read_text() for lb in ("base", "tiled-few-rows")}
    assert "a_tile" not in src["base"] and "a_tile" in src["tiled-few-rows"]


def test_decoder_harness(tmp_path):
    """`python -m tools.gpu_check decode` (KV-cache decoders on the cuda target), run here on the
    emulation with the tiny Hugging Face LLaMA and GPT-2 exports it makes: each generates ONNX
    Runtime's tokens from one artifact over run-time sequence lengths, and gets its times."""
    import argparse
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from tools.gpu_check import decode
    a = argparse.Namespace(dir=None, size="small", longest=24, phase="all", target="cuda:sm_90", jobs=1,
                           workdir=str(tmp_path), prompt=6, steps=8, rounds=1)
    table = decode(a, build=emulated_build)
    rows = [r for r in table.splitlines() if r.startswith("| hf_")]
    assert [r.split("|")[1].strip() for r in rows] == ["hf_llama", "hf_gpt2"], table
    for r in rows:
        cells = [c.strip() for c in r.strip("|").split("|")]
        assert cells[1] == "PASS (9/9)" and all(float(c) > 0 for c in cells[2:7]), r


def test_bitcast_on_emulated_cuda(tmp_path):
    """BitCast as the CUDA printer spells it (aotc_bitcast, runtime/aotc_cuda.h): numpy's view."""
    x = rand(4, 6, seed=31)
    model = graph_model([N("BitCast", ["x"], ["i"], to=onnx.TensorProto.INT32),
                         N("BitCast", ["x"], ["u"], to=onnx.TensorProto.UINT32)], {"x": x}, ["i", "u"], opset=26)
    path = tmp_path / "model.onnx"
    onnx.save(model, str(path))
    out = compile_model(path, target="cuda:sm_90", output_dir=tmp_path / "out", build=emulated_build)
    i, u = load(out).run({"x": x})
    np.testing.assert_array_equal(i, x.view(np.int32))
    np.testing.assert_array_equal(u, x.view(np.uint32))
    assert "aotc_bitcast<int32_t>" in (out / "model.cu").read_text()
