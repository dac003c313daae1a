"""The cuda target, where there is no GPU: every small zoo model compiles with nvcc (machine code
for sm_80 and sm_90, PTX for sm_80), the generated code has the shape the GPU schedule gave it,
and an instance made without a usable device returns a clear status (never a crash). Running
on a GPU is tools/gpu_check.py's job (docs/GPU.md). Skips, saying why, without nvcc."""
from __future__ import annotations

import json
import shutil
import subprocess

import onnx
import pytest

from aotc.api import load
from aotc.compiler import compile_model
from aotc.errors import AotcError, ArtifactError
from models.zoo import ZOO

NVCC = shutil.which("nvcc")
pytestmark = pytest.mark.skipif(NVCC is None, reason="nvcc (the CUDA toolkit) is not installed")


def _has_gpu() -> bool:
    smi = shutil.which("nvidia-smi")
    return smi is not None and subprocess.run([smi, "-L"], capture_output=True).returncode == 0


@pytest.mark.parametrize("name", sorted(ZOO))
def test_zoo_compiles_for_cuda(name, tmp_path):
    e = ZOO[name]
    path = tmp_path / f"{name}.onnx"
    onnx.save(e.build("small"), str(path))
    out = compile_model(path, target="cuda", output_dir=tmp_path / "out", shapes=e.shapes_for("small"))
    m = json.loads((out / "manifest.json").read_text())
    assert m["language"] == "cuda" and m["target"] == "cuda"
    so = out / m["library"]
    sass = subprocess.run(["cuobjdump", "--list-elf", str(so)], capture_output=True, text=True).stdout \
        if shutil.which("cuobjdump") else ""
    if sass:
        assert "sm_80" in sass and "sm_90" in sass, sass
    src = (out / f"{name}.cu").read_text()
    assert src.count('extern "C" __global__ void k') >= len(m["kernels"])
    assert "cudaGraphLaunch" in src and "cudaStreamBeginCapture" in src


def test_one_architecture_and_readable_kernels(tmp_path):
    e = ZOO["bert"]
    path = tmp_path / "bert.onnx"
    onnx.save(e.build("small"), str(path))
    out = compile_model(path, target="cuda:sm_90", output_dir=tmp_path / "out", shapes=e.shapes_for("small"))
    m = json.loads((out / "manifest.json").read_text())
    assert m["target"] == "cuda:sm_90"
    src = (out / "bert.cu").read_text()
    # GEMMs are tiled with shared memory and barriers; the fused GELU chain is in the epilogue
    assert "__shared__ __align__(32) float a_tile" in src and "__syncthreads();" in src
    assert "wmma" not in src                                  # tensor cores only with tf32
    assert "/* MatMul 'matmul_133', Add 'add_135', Div 'div_137', Erf 'erf_138'" in src and "erff(" in src
    with pytest.raises(AotcError, match="takes no architecture"):
        compile_model(path, target="c:sm_90", output_dir=tmp_path / "bad", shapes=e.shapes_for("small"))


@pytest.mark.skipif(_has_gpu(), reason="a GPU is present: this checks the no-device path")
@pytest.mark.parametrize("name", ["bert", "resnet50", "lstm"])
def test_tf32_runs_gemms_on_tensor_cores(name, tmp_path):
    """`cuda,tf32`: every float32 GEMM (MatMul, a Conv's im2col product, an LSTM step) becomes
    warp-level tensor-core steps (wmma, TF32 inputs, float32 sums) that nvcc compiles for both
    architectures, and the PTX has the TF32 MMA instruction. (Its numerics need a GPU: see
    docs/GPU.md.) Other targets have no such option."""
    e = ZOO[name]
    path = tmp_path / f"{name}.onnx"
    onnx.save(e.build("small"), str(path))
    out = compile_model(path, target="cuda,tf32", output_dir=tmp_path / "out", shapes=e.shapes_for("small"))
    m = json.loads((out / "manifest.json").read_text())
    assert m["target"] == "cuda,tf32"
    src = (out / f"{name}.cu").read_text()
    gemms = [line for line in src.splitlines() if line.startswith("    /* C[")]
    assert gemms and all("on tensor cores in TF32" in line for line in gemms), gemms
    assert "#include <mma.h>" in src and "wmma::mma_sync(" in src and "__float_to_tf32" in src
    ptx = subprocess.run([NVCC, "-ptx", "-arch=sm_80", "-std=c++17", "-I", str(out), str(out / f"{name}.cu"),
                          "-o", str(tmp_path / "k.ptx")], capture_output=True, text=True)
    assert ptx.returncode == 0, ptx.stderr
    assert "wmma.mma.sync.aligned.row.row.m16n16k8.f32.tf32.tf32.f32" in (tmp_path / "k.ptx").read_text()
    with pytest.raises(AotcError, match="has no option 'tf32'"):
        compile_model(path, target="opencl,tf32", output_dir=tmp_path / "bad", shapes=e.shapes_for("small"))


def test_no_device_is_a_clear_status(tmp_path):
    e = ZOO["mlp"]
    path = tmp_path / "mlp.onnx"
    onnx.save(e.build("small"), str(path))
    out = compile_model(path, target="cuda:sm_80", output_dir=tmp_path / "out", shapes=e.shapes_for("small"))
    with pytest.raises(ArtifactError, match=r"mlp_create failed with status 1[03]: .*(device|driver)") as err:
        load(out)
    assert "NVIDIA GPU" in err.value.hint
