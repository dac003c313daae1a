"""The opencl target: the same kernel IR, scheduled for a grid of work-items and printed as
OpenCL C, with C host code; run here on the CPU through PoCL. Every small zoo model, a graph of
many op families, fused GEMM epilogues, kernel status codes and device options, against ONNX
Runtime on fresh random inputs. Skips (saying why) where no OpenCL platform or headers exist:
`make opencl-deps` installs PoCL (CI does)."""
from __future__ import annotations

import ctypes
import functools
import shutil
import subprocess

import numpy as np
import onnx
import pytest
from onnx import helper

from aotc.api import compile as aotc_compile
from aotc.check.runner import run_check
from aotc.errors import ArtifactError, RunError
from models.zoo import ZOO
from tests.helpers import (assert_parity, eager_gpu_target, gemm_layouts_model, graph_model, opencl_target_with, rand,
                           single_op_model)

N = helper.make_node


@functools.lru_cache(maxsize=1)
def _opencl_missing() -> str | None:
    cc = shutil.which("cc")
    if cc is None:
        return "no C compiler"
    probe = subprocess.run([cc, "-x", "c", "-", "-o", "/dev/null", "-lOpenCL"], input=(
        "#define CL_TARGET_OPENCL_VERSION 120\n#include <CL/cl.h>\n"
        "int main(void) { cl_uint n = 0; clGetPlatformIDs(0, 0, &n); return 0; }\n"),
        capture_output=True, text=True)
    if probe.returncode != 0:
        return "the OpenCL headers or ICD loader are missing (make opencl-deps installs PoCL)"
    try:
        lib = ctypes.CDLL("libOpenCL.so.1")
    except OSError:
        return "libOpenCL.so.1 is missing (make opencl-deps installs PoCL)"
    n = ctypes.c_uint(0)
    if lib.clGetPlatformIDs(0, None, ctypes.byref(n)) != 0 or n.value == 0:
        return "no OpenCL platform is installed (make opencl-deps installs PoCL)"
    return None


pytestmark = pytest.mark.skipif(_opencl_missing() is not None, reason=str(_opencl_missing()))


def _target(kind: str, tmp_path) -> str:
    return "opencl" if kind == "opencl" else eager_gpu_target(tmp_path)


@pytest.mark.parametrize("kind", ["opencl", "eager"])
@pytest.mark.parametrize("name", list(ZOO))
def test_zoo_on_opencl(name, kind, tmp_path):
    """Every small zoo model; 'eager': with every shareable spatial iteration given a work-group
    (the launch full-size models get for im2col, softmax and normalization rows) and every
    GEMM in small tiles with K split (what small products get on a large GPU)."""
    e = ZOO[name]
    path = tmp_path / f"{name}.onnx"
    onnx.save(e.build("small"), str(path))
    res = run_check(path, target=_target(kind, tmp_path), shapes=e.shapes_for("small"), rtol=e.rtol,
                    atol=e.atol, output_dir=tmp_path / "out", seed=13)
    assert res.outputs
    for o in res.outputs:
        assert o.passed, f"{name}/{o.name} on {kind}: max_abs={o.max_abs_err:.3g} {o.note}"


def test_artifact_is_readable_opencl_c(tmp_path):
    e = ZOO["gpt2"]
    path = tmp_path / "gpt2.onnx"
    onnx.save(e.build("small"), str(path))
    m = aotc_compile(path, target="opencl", output_dir=tmp_path / "out", shapes=e.shapes_for("small"))
    cl = (tmp_path / "out" / "gpt2.cl").read_text()
    assert "gpt2.cl" in m.manifest["sources"] and m.manifest["language"] == "opencl"
    # one function per launch, named after its fusion kernel, with a comment naming the ONNX nodes
    assert cl.count("__kernel void ") >= len(m.manifest["kernels"])
    assert "/* Gemm 'gemm_168', Pow 'pow_183'" in cl and "barrier(CLK_LOCAL_MEM_FENCE);" in cl
    assert "__local float" in cl and "get_global_id(0)" in cl
    host = (tmp_path / "out" / "gpt2.c").read_text()
    assert "clBuildProgram" not in host and "aotc_cl_build" in host    # built once, at create


def op_families_model():
    """Reductions (a softmax and an argmax whose outer loops vanish: their running max and sum
    must stay in one launch), pooling, resize, pad, gather, instance norm, conv transpose,
    depthwise conv, layer norm, a batched MatMul with a fused epilogue; (model, feeds)."""
    x = rand(2, 6, 9, 10, seed=1)
    v = rand(1, 37, seed=2)
    ids = np.random.default_rng(3).integers(-6, 6, size=(4,)).astype(np.int64)
    nodes = [N("ReduceMean", ["x", "ax1"], ["r1"], keepdims=1), N("ReduceMax", ["x", "ax23"], ["r2"], keepdims=0),
             N("Softmax", ["v"], ["sv"], axis=1), N("ArgMax", ["v"], ["av"], axis=1),
             N("MaxPool", ["x"], ["mp"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[2, 2]),
             N("Resize", ["x", "", "sc"], ["rs"], mode="linear"), N("Pad", ["x", "pads"], ["pd"], mode="edge"),
             N("Gather", ["x", "ids"], ["ga"], axis=1), N("InstanceNormalization", ["x", "s6", "b6"], ["inn"]),
             N("ConvTranspose", ["x", "wt"], ["ct"], strides=[2, 2]),
             N("Conv", ["x", "wd"], ["dw"], group=6, pads=[1, 1, 1, 1]),
             N("LayerNormalization", ["x", "s10", "b10"], ["ln"], axis=-1),
             N("MatMul", ["x", "w10"], ["mm"]), N("Add", ["mm", "b7"], ["mb"]), N("Tanh", ["mb"], ["y"])]
    inits = {"ax1": np.array([1]), "ax23": np.array([2, 3]), "sc": np.array([1, 1, 2, 1.5], np.float32),
             "pads": np.array([0, 0, 2, 1, 0, 0, 1, 2]), "s6": rand(6, seed=4), "b6": rand(6, seed=5),
             "wt": rand(6, 4, 3, 3, seed=6) * 0.2, "wd": rand(6, 1, 3, 3, seed=7), "s10": rand(10, seed=8),
             "b10": rand(10, seed=9), "w10": rand(10, 7, seed=10), "b7": rand(7, seed=11)}
    outs = ["r1", "r2", "sv", "av", "mp", "rs", "pd", "ga", "inn", "ct", "dw", "ln", "y"]
    return graph_model(nodes, {"x": x, "v": v, "ids": ids}, outs, inits, opset=18), {"x": x, "v": v, "ids": ids}


@pytest.mark.parametrize("kind", ["opencl", "eager"])
def test_op_families_on_opencl(kind, tmp_path):
    m, feeds = op_families_model()
    assert_parity(m, tmp_path, feeds, target=_target(kind, tmp_path))
    if kind == "eager":
        cl = (tmp_path / "out" / "model.cl").read_text()
        shared = {line.split("'")[0].strip("/* ").strip() for line in cl.splitlines()
                  if line.startswith("/*") and "work-group" in line}
        # the row-wise kernels run as work-groups; their reductions combine across the group
        assert {"ReduceMean", "Softmax", "LayerNormalization", "MaxPool", "Conv"} <= shared, shared
        assert "part[lid] = " in cl


@pytest.mark.parametrize("kind", ["opencl", "eager"])
def test_index_error_is_a_status_on_opencl(kind, tmp_path):
    """A kernel's Fail is a status; 'eager': the gather rows run as work-groups (no barrier in
    them, so a work-item may stop alone)."""
    x = rand(10, 4, seed=12)
    m = single_op_model("Gather", {"x": x, "i": np.array([3, 10], np.int64)}, axis=0)
    path = tmp_path / "m.onnx"
    onnx.save(m, str(path))
    cm = aotc_compile(path, target=_target(kind, tmp_path), output_dir=tmp_path / "out")
    assert kind == "opencl" or "work-group" in (tmp_path / "out" / "m.cl").read_text()
    with pytest.raises(RunError, match=r"Gather.*out of range"):
        cm.run({"x": x, "i": np.array([3, 10], np.int64)})
    got = cm.run({"x": x, "i": np.array([3, -10], np.int64)})[0]
    np.testing.assert_array_equal(got, x[[3, 0]])


def test_device_options_are_checked(tmp_path):
    e = ZOO["mlp"]
    path = tmp_path / "mlp.onnx"
    onnx.save(e.build("small"), str(path))
    aotc_compile(path, target="opencl", output_dir=tmp_path / "out", shapes=e.shapes_for("small"))
    from aotc.build.loader import Library
    lib = Library(tmp_path / "out")
    with pytest.raises(ArtifactError, match="status 6"):
        lib.create(platform=99)
    with pytest.raises(ArtifactError, match="status 6"):
        lib.create(threads=4)                  # an OpenCL instance runs on its device
    inst = lib.create(platform=0, device=0)
    x = rand(1, 64, seed=14)
    y = lib.run(inst, [x])[0]
    assert y.shape == (1, 10) and np.all(np.isfinite(y))


@pytest.mark.parametrize("kind", ["opencl", "eager"])
def test_batched_convolutions_on_opencl(kind, tmp_path):
    """Batch entries (and groups) of a Conv run in the same launches: each gets its own copy of
    the im2col scratch, and the GEMMs of all of them are one launch."""
    x = rand(3, 4, 9, 8, seed=21)
    nodes = [N("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]),
             N("Conv", ["c1", "w2"], ["c2"], group=2, strides=[2, 1], pads=[0, 1, 1, 0]),
             N("Conv", ["c2", "w3", "b3"], ["y"])]
    inits = {"w1": rand(6, 4, 3, 3, seed=22), "w2": rand(6, 3, 2, 3, seed=23), "w3": rand(5, 6, 1, 1, seed=24),
             "b3": rand(5, seed=25)}
    m = graph_model(nodes, {"x": x}, ["y"], inits, opset=18)
    assert_parity(m, tmp_path, {"x": x}, target=_target(kind, tmp_path))
    cl = (tmp_path / "out" / "model.cl").read_text()
    gemms = [line for line in cl.splitlines() if "GEMM" in line and line.startswith("/*")]
    assert len(gemms) >= 3 and all(" 3x" in g or " 6x" in g for g in gemms[:3]), gemms
    host = (tmp_path / "out" / "model.c").read_text()
    assert "for (" not in host.split("_execute(")[1].split("\n}\n")[0]      # no host loops


def _cuda_tiles(tmp_path, **extra) -> str:
    """The opencl target with the cuda target's [gpu] table (its GEMM tiles, 256 work-items a
    group), plus `extra`: the kernels the cuda target gets, run here on PoCL."""
    import tomllib
    from aotc.paths import TARGETS_DIR
    with open(TARGETS_DIR / "cuda.toml", "rb") as f:
        gpu = dict(tomllib.load(f)["gpu"])
    gpu.update(extra, shuffle=0)                 # (OpenCL C 1.2 has no warp shuffles)
    name = "opencl-cuda-tiles-" + "-".join(f"{k}{v}" for k, v in extra.items())
    return opencl_target_with(tmp_path, name, gpu)


@pytest.mark.parametrize("rows", [37, 3])
@pytest.mark.parametrize("mode", ["full-tiles", "split-k", "split-k-4x4"])
def test_gemm_layouts_with_cuda_tiles(mode, rows, tmp_path):
    """The GEMM kernel with the cuda target's tiles on `gemm_layouts_model` (every operand
    layout, sizes that are not multiples of the tiles, a bias epilogue, a batched product);
    'split-k': tiles halved (to 2 x 2 results per work-item, or 4 x 4 with min_results 16 and
    no floor) and K split as for a GEMM too small for the GPU; else the tiles stay whole.
    Halved tiles stage K 32 at a time (the cuda target's small_tk). rows=3: the Gemms are
    few-row products, one work-item per result (`gemv_rows`)."""
    m, feeds = gemm_layouts_model(rows)
    eager = mode != "full-tiles"
    extra = {"min_groups": 4096, "split_min_k": 16} if eager else {"min_groups": 0}
    extra.update({"split-k": {"min_results": 4}, "split-k-4x4": {"min_results": 16, "floor_groups": 0}}.get(mode, {}))
    assert_parity(m, tmp_path, feeds, target=_cuda_tiles(tmp_path, **extra))
    cl = (tmp_path / "out" / "model.cl").read_text()
    for g in range(4):
        launches = [line for line in cl.splitlines() if line.startswith(f"/* Gemm 'Gemm_{g}'")]
        tiled = [line for line in launches if f"GEMM {rows}x133x70" in line]
        assert (len(tiled) == 1) == (rows == 37) and (f"{rows * 133} work-items" in launches[0]) == (rows == 3), launches
    assert ("chunks of" in cl) == (eager and rows == 37)   # (a batched product never splits K)
    per_item = {"full-tiles": "8x8", "split-k": "2x2", "split-k-4x4": "4x4"}[mode]
    assert rows == 3 or f"{per_item} per work-item" in cl
    assert rows == 3 or f"K in steps of {32 if eager else 8}," in cl


def test_private_scratch_of_a_spatial_nest_is_per_work_item(tmp_path):
    """A spatial nest whose iterations each fill and read a private scratch (Loop.private: a
    linear Resize's plane) runs its iterations as work-items at once: each gets its own copy
    (schedule/gpu.py with_private_copies). One shared copy made this flaky on PoCL."""
    import re
    x = rand(2, 16, 24, 20, seed=31)
    m = graph_model([N("Resize", ["x", "", "s"], ["y"], mode="linear")], {"x": x}, ["y"],
                    {"s": np.array([1, 1, 1.5, 1.75], np.float32)}, opset=13)
    for i in range(3):          # a race shows on some runs only
        (tmp_path / str(i)).mkdir()
        assert_parity(m, tmp_path / str(i), {"x": x}, target="opencl")
    cl = (tmp_path / "0" / "out" / "model.cl").read_text()
    # the plane (24 input rows of 35) is indexed by the nest's iteration:
    # plane[(i1 + i0 * 16) * 840 + (h * 35 + o1)]
    assert re.search(r"plane\[\([^\]]*i0[^\]]*\) \* 840 \+", cl), cl
