"""Run-time dimensions on the GPU targets (issue 28, step 6): one opencl or cuda artifact for every
size in a declared range, against ONNX Runtime on fresh random inputs at both ends of the range
and between.

The opencl target runs on PoCL here, the cuda target on the CUDA emulation (tests/cuda_emu; with
AOTC_TEST_ON_GPU=1, on a real GPU: tools/gpu_lease.sh). Each runs as written and with the GPU
schedule's thresholds at their most eager (tests/helpers.py eager_gpu_target): smallest tiles,
GEMMs split along a K of run-time size, a work-group for every spatial iteration. The kernels take
the run's sizes as arguments; the host computes each launch's grid from them, copies the run's
bytes in and out, and returns AOTC_ERR_SHAPE for a size out of range, as the CPU targets do
(tests/test_run_time_dims.py)."""
from __future__ import annotations

import re
import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest

from aotc.api import load
from aotc.build.loader import Library
from aotc.compiler import compile_model
from aotc.errors import InputError
from tests.helpers import eager_cuda_target, eager_gpu_target
from tests.test_opencl import _opencl_missing
from tests.test_run_time_dims import (OCR_CASES, OP_CASES, _ort, bert, check_zero_case, cnn,  # noqa: F401
                                      depthwise_case, mlp, ocr, op_case, zero_case)

CXX = shutil.which("g++")

TARGETS = [pytest.param("opencl", marks=pytest.mark.skipif(_opencl_missing() is not None,
                                                            reason=str(_opencl_missing()))),
           pytest.param("opencl-eager", marks=pytest.mark.skipif(_opencl_missing() is not None,
                                                                  reason=str(_opencl_missing()))),
           pytest.param("cuda", marks=pytest.mark.skipif(CXX is None, reason="g++ is not installed")),
           pytest.param("cuda-eager", marks=pytest.mark.skipif(CXX is None, reason="g++ is not installed"))]


def _compile(path, target: str, tmp_path, **kw):
    """compile_model for one of TARGETS (the cuda ones built for the emulation)."""
    build = {}
    if target.startswith("cuda"):
        from tests.test_cuda_emulated import emulated_build
        build["build"] = emulated_build
    name = {"opencl-eager": eager_gpu_target, "cuda-eager": eager_cuda_target}.get(target)
    tgt = name(tmp_path) if name else "cuda:sm_90" if target == "cuda" else target
    return compile_model(path, target=tgt, output_dir=tmp_path / "out", **build, **kw)


@pytest.mark.parametrize("target", TARGETS)
def test_mlp_over_batch(mlp, tmp_path, target):
    """torch's MLP (two GEMMs with bias, GELU, softmax) over batch 1..64; out-of-range and
    disagreeing shapes refused by the run itself (the loader's check bypassed)."""
    out = _compile(mlp, target, tmp_path, name="mlp", dims={"batch": (1, 64)})
    m = load(out)
    rng = np.random.default_rng(7)
    for batch in (1, 2, 33, 64, 5):
        x = rng.standard_normal((batch, 64)).astype(np.float32)
        (y,) = m.run({"x": x})
        assert y.shape == (batch, 24)
        np.testing.assert_allclose(y, _ort(mlp, {"x": x})[0], rtol=1e-5, atol=1e-6)
    lib = Library(out)
    inst = lib.create()
    for shape, rule in (((65, 64), r"dim 0 \(batch\) must be in 1..64"), ((4, 63), "dim 1 must be 64")):
        with pytest.raises(InputError, match=rule):
            lib.run(inst, [np.ones(shape, np.float32)])
    x = rng.standard_normal((3, 64)).astype(np.float32)
    np.testing.assert_allclose(lib.run(inst, [x])[0], _ort(mlp, {"x": x})[0], rtol=1e-5, atol=1e-6)


@pytest.fixture(scope="module")
def linear(tmp_path_factory) -> Path:
    """torch.nn.Linear(256, 512) and a ReLU, exported by torch.onnx with a dynamic batch axis."""
    torch = pytest.importorskip("torch")

    class Linear(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.l = torch.nn.Linear(256, 512)

        def forward(self, x):
            return torch.relu(self.l(x))

    torch.manual_seed(1)
    path = tmp_path_factory.mktemp("linear") / "linear.onnx"
    torch.onnx.export(Linear().eval(), (torch.randn(4, 256),), str(path), input_names=["x"], output_names=["y"],
                      dynamic_shapes={"x": {0: torch.export.Dim("batch", min=1, max=512)}}, dynamo=True,
                      external_data=False)
    return path


@pytest.mark.parametrize("target", TARGETS)
def test_gemm_variants_by_size(linear, tmp_path, target):
    """A GEMM over batch 1..512 on the cuda target is cut two ways, as builds fixed to small and
    to large batches would cut it (smaller tiles and a K split for few rows, wider tiles for
    many), each launched under its test of the run's multiply-adds: both variants against ORT,
    at the ends of the range and on both sides of the boundary."""
    out = _compile(linear, target, tmp_path, name="linear", dims={"batch": (1, 512)})
    if target == "cuda":            # (the eager thresholds cut it one way at every size)
        tests = re.findall(r"if \(\(131072 \* aotc_dim_batch\) (<=|>) (\d+)\) \{", (out / "linear.cu").read_text())
        assert len(tests) >= 2 and {t[0] for t in tests} == {"<=", ">"}, tests
        boundary = int(tests[0][1]) // 131072
        sizes = (1, boundary, boundary + 1, 512)
    else:
        sizes = (1, 100, 512)
    m = load(out)
    for batch in sizes:
        x = np.random.default_rng(batch).standard_normal((batch, 256)).astype(np.float32)
        (y,) = m.run({"x": x})
        np.testing.assert_allclose(y, _ort(linear, {"x": x})[0], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("target", TARGETS)
def test_bert_over_batch_and_seq(bert, tmp_path, target):
    """The dynamo-exported two-layer BERT: batched attention GEMMs over run-time batch x heads,
    softmax rows and layer norms of run-time length, the mask's shape logic."""
    out = _compile(bert, target, tmp_path, dims={"batch": (1, 3), "seq": (2, 24)})
    m = load(out)
    rng = np.random.default_rng(11)
    for batch, seq in ((1, 2), (3, 24), (2, 13)):
        ids = rng.integers(0, 100, (batch, seq)).astype(np.int64)
        mask = (rng.random((batch, seq)) > 0.25).astype(np.int64)
        mask[:, 0] = 1
        feeds = {"input_ids": ids, "attention_mask": mask}
        got = m.run(feeds)
        assert [g.shape for g in got] == [(batch, seq, 32), (batch, 32)]
        for g, w in zip(got, _ort(bert, feeds)):
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("target", TARGETS)
def test_cnn_over_batch_height_and_width(cnn, tmp_path, target):
    """models/dynamic_cnn.py's CNN over batch, height and width (multiples of 4): convolutions
    (im2col staged from the input), depthwise, strided, pooling, the global mean."""
    out = _compile(cnn, target, tmp_path, shapes={"x": ((1, 2), 3, (8, 32, 4), (8, 32, 4))})
    m = load(out)
    for batch, h, w in ((1, 8, 8), (2, 32, 32), (1, 12, 28)):
        x = np.random.default_rng(h * w).standard_normal((batch, 3, h, w)).astype(np.float32)
        (y,) = m.run({"x": x})
        np.testing.assert_allclose(y, _ort(cnn, {"x": x})[0], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("target", ["opencl", "cuda"])
@pytest.mark.parametrize("case", ["3x3", "3x3 stride 2 asymmetric", "7x7"])
def test_depthwise_over_run_time_planes(case, target, tmp_path):
    """Depthwise convolutions over planes of run-time sides, down to those where no output sees
    every tap (tests/test_run_time_dims.py depthwise_case)."""
    path, shapes, runs = depthwise_case(case, tmp_path)
    m = load(_compile(path, target, tmp_path, shapes=shapes))
    rng = np.random.default_rng(len(case))
    for shape in runs:
        x = rng.standard_normal(shape).astype(np.float32)
        (y,) = m.run({"x": x})
        np.testing.assert_allclose(y, _ort(path, {"x": x})[0], rtol=1e-5, atol=1e-5, err_msg=str(shape))


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", ["lstm", "gru"])
def test_recurrent_zoo_models_over_sequence(name, tmp_path, target):
    """The zoo's LSTM and GRU over seq in 1..16: the time steps a host loop of run-time count."""
    from models.zoo import ZOO
    path = tmp_path / f"{name}.onnx"
    onnx.save(ZOO[name].build("small"), str(path))
    m = load(_compile(path, target, tmp_path, dims={"seq": (1, 16)}))
    for seq in (1, 16, 6):
        x = np.random.default_rng(seq).standard_normal((seq, 1, 16)).astype(np.float32)
        for got, want in zip(m.run({"x": x}), _ort(path, {"x": x})):
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("target", ["opencl", "cuda"])
@pytest.mark.parametrize("op", sorted(OP_CASES))
def test_op_over_a_run_time_dim(op, tmp_path, target):
    """Each op of tests/test_run_time_dims.py's OP_CASES with a run-time dim n in 2..12."""
    if target == "opencl" and _opencl_missing() is not None:
        pytest.skip(str(_opencl_missing()))
    if target == "cuda" and CXX is None:
        pytest.skip("g++ is not installed")
    path, name, kind = op_case(op, tmp_path)
    m = load(_compile(path, target, tmp_path, dims={"n": (2, 12)}))
    for n in (2, 12, 7):
        shape = (n, 6) if kind == "rows" else (1, 3, n, n)
        x = np.random.default_rng(n).standard_normal(shape).astype(np.float32)
        for got, want in zip(m.run({name: x}), _ort(path, {name: x})):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("target", [t for t in TARGETS if "eager" not in t.values[0]])
@pytest.mark.parametrize("which", sorted(OCR_CASES))
def test_ocr_pair(ocr, which, target, tmp_path):
    """tests/test_run_time_dims.py's dynamic OCR pair (the detector's Resize to sizes read from
    the graph, the recognizer's bidirectional LSTM over run-time batch and steps), at smaller
    sizes than on the CPU (the emulation is slow)."""
    path = ocr[0] if which == "det" else ocr[1]
    shapes, _ = OCR_CASES[which]
    sizes = [(1, 3, 32, 32), (2, 3, 64, 96)] if which == "det" else [(1, 3, 48, 8), (3, 3, 48, 100)]
    m = load(_compile(path, target, tmp_path, shapes=shapes))
    for shape in sizes:
        x = np.random.default_rng(sum(shape)).standard_normal(shape).astype(np.float32)
        (got,) = m.run({"x": x})
        np.testing.assert_allclose(got, _ort(path, {"x": x})[0], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("target", TARGETS)
def test_a_run_time_dim_may_be_zero(tmp_path, target):
    """A range from 0 on the GPU targets: a launch whose grid is empty at the run's sizes is
    skipped (CUDA and OpenCL 1.2 refuse it), and so is an OpenCL copy of no bytes."""
    path = zero_case(tmp_path)
    check_zero_case(path, load(_compile(path, target, tmp_path, dims={"n": (0, 40)})))
