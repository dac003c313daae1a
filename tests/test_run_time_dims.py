"""Run-time dimensions (aotc/ir/dims.py, issue 28): one artifact for every size in a declared range.

A model exported by torch.onnx with a dynamic batch axis, compiled once with --dim batch=1..64
(or a ranged --shape), is run at both ends and at sizes between against ONNX Runtime on fresh
random inputs, at 1 and 2 threads; its workspace is the fixed build's at the largest size; a C
program drives the ABI (the inputs' <input>_shape, the outputs' <output>_shape) at two sizes
from one library; sizes outside the range and shapes that disagree are refused by the Python
loader (InputError) and, with the loader's check bypassed, by the run itself (AOTC_ERR_SHAPE,
<name>_failure naming the input, the axis and the rule). The Dim arithmetic that shape
inference uses, the CLI's parsing, the hints for unbound dims, and the refusal of an op that does
not take run-time dims yet are checked here too (the GPU targets: test_run_time_dims_gpu.py)."""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as TP
from onnx import helper

from aotc.api import load
from aotc.build.loader import Library
from aotc.check.runner import run_check
from aotc.compiler import compile_model
from aotc.errors import AotcError, InputError, ShapeError
from aotc.ir.dims import Dim, RunTimeDim, Symbol, parse_range, range_points, size_at

CC = shutil.which("cc") or shutil.which("gcc")


# ----------------------------------------------------------------------------- the Dim algebra
def test_dim_arithmetic_and_bounds():
    seq, batch = Symbol("seq", 1, 512), Symbol("batch", 2, 8, 2)
    s, b = Dim.of(seq), Dim.of(batch)
    assert s - s == 0 and isinstance(s - s, int)          # a constant is an int, never a Dim
    assert str(12 * b * s) == "12*batch*seq" and (12 * b * s) // 12 == b * s
    assert (s * 64) // (s * 8) == 8 and (2 * s + 1).hi == 1025 and (2 * s + 1).lo == 3
    assert (b * s).hi == 8 * 512 and (b * s).lo == 2
    assert s * 3 == 3 * s and hash(s * 3) == hash(3 * s) and s != b and s != 1
    assert b % 2 == 0 and (b + 1) % 2 == 1 and s >= 1 and not (s > 512)
    assert (s * 4).divide(8) is None
    # by a divisor of several terms: long division, exact or None
    assert ((s - 4) * (b - 4)).divide(b - 4) == s - 4 and (s * s * s - 1).divide(s - 1) == s * s + s + 1
    assert (2 * s * b - 8 * s).divide(2 * b - 8) == s and (s * b + 3).divide(b - 4) is None
    assert ((s - 4) * (b - 4)).divide(2 * b - 8) is None           # (s - 4) / 2: not integral
    # the points of the ranges the schedule weighs a choice at: geometric, on the multiples
    assert range_points([b * s, 7]) == [(2, 7), (2 * 5, 7), (4 * 23, 7), (6 * 108, 7), (8 * 512, 7)]
    assert [p[0] for p in range_points([b])] == [2, 2, 4, 6, 8] and range_points([3, 4]) == [(3, 4)]
    with pytest.raises(RunTimeDim):
        int(s)
    with pytest.raises(RunTimeDim):
        _ = s > 5                      # depends on the size
    with pytest.raises(RunTimeDim):
        _ = s // 3
    assert seq.sizes() == [1, 256, 512] and batch.sizes() == [2, 4, 8]
    assert Symbol("x.2", 32, 960, 32).sizes() == [32, 480, 960]
    with pytest.raises(ShapeError):
        Symbol("bad", -1, 4)
    with pytest.raises(ShapeError):
        Symbol("bad", 0, 0)            # (only the empty size)
    past = Symbol("past", 0, 63)       # (a decoder's empty past: from 0)
    # (the points weighing a choice over the range start at its first nonzero size)
    assert past.sizes() == [0, 31, 63] and size_at(past, 0.0) == 1 and size_at(past, 0.5) == 8
    with pytest.raises(ShapeError):
        Symbol("bad", 4, 3)
    with pytest.raises(ShapeError):
        Symbol("bad", 3, 64, 32)       # does not start on a multiple
    assert parse_range("7") == 7 and parse_range("1..512") == (1, 512) and parse_range("32..960%32") == (32, 960, 32)
    with pytest.raises(ValueError):
        parse_range("1..x")


# ----------------------------------------------------------------------------- a real exporter's model
@pytest.fixture(scope="module")
def mlp(tmp_path_factory) -> Path:
    """Linear -> GELU -> Linear -> Softmax, exported by torch.onnx (its default, dynamo exporter)
    with a dynamic batch axis."""
    torch = pytest.importorskip("torch")

    class MLP(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.l1, self.l2 = torch.nn.Linear(64, 96), torch.nn.Linear(96, 24)

        def forward(self, x):
            return torch.softmax(self.l2(torch.nn.functional.gelu(self.l1(x))), -1)

    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("mlp") / "mlp.onnx"
    batch = torch.export.Dim("batch", min=1, max=64)
    torch.onnx.export(MLP().eval(), (torch.randn(4, 64),), str(path), input_names=["x"], output_names=["y"],
                      dynamic_shapes={"x": {0: batch}}, dynamo=True, external_data=False)
    return path


def _ort(path: Path, feeds: dict) -> list:
    so = ort.SessionOptions()
    so.log_severity_level = 3
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"]).run(None, feeds)


@pytest.mark.parametrize("threads", [1, 2])
def test_mlp_over_batch_matches_onnxruntime(mlp, tmp_path, threads):
    out = compile_model(mlp, target="c", output_dir=tmp_path / "out", name="mlp", dims={"batch": (1, 64)},
                        threads=threads)
    m = load(out, threads=threads)
    rng = np.random.default_rng(threads)
    for batch in (1, 2, 7, 33, 64):
        x = rng.standard_normal((batch, 64)).astype(np.float32)
        (y,) = m.run({"x": x})
        (want,) = _ort(mlp, {"x": x})
        assert y.shape == (batch, 24)
        np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-6)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["inputs"][0]["dims"] == [{"axis": 0, "dim": "batch", "min": 1, "max": 64, "multiple": 1}]
    if threads == 2:
        # the first GEMM is split among threads only where the run's batch makes it big enough
        # (batch 64: 393216 multiply-adds; batch 1: 6144), and both sizes ran above
        assert "aotc_sgemm((6144 * aotc_dim_batch) >= 262144 ? pool : NULL, &gemm);" in (out / "mlp.c").read_text()
    assert manifest["outputs"][0]["shape"] == [64, 24]        # its capacity


def test_workspace_is_the_fixed_build_at_the_largest_size(mlp, tmp_path):
    ranged = compile_model(mlp, target="c", output_dir=tmp_path / "r", shapes={"x": ((1, 64), 64)}, threads=1)
    fixed = compile_model(mlp, target="c", output_dir=tmp_path / "f", shapes={"x": (64, 64)}, threads=1)
    mr, mf = (json.loads((d / "manifest.json").read_text()) for d in (ranged, fixed))
    assert mr["workspace_bytes"] == mf["workspace_bytes"] > 0
    assert mr["memory_plan"]["arena_bytes"] == mr["memory_plan"]["lower_bound_bytes"]


def test_out_of_range_sizes_are_refused(mlp, tmp_path):
    out = compile_model(mlp, target="c", output_dir=tmp_path / "out", name="mlp", dims={"batch": (2, 64, 2)},
                        threads=1)
    m = load(out)
    for shape in ((1, 64), (3, 64), (66, 64), (4, 63), (4, 64, 1)):
        with pytest.raises(InputError, match="input 'x'"):
            m.run({"x": np.ones(shape, np.float32)})
    # the run's own checks, with the loader's bypassed: a status, and <name>_failure's words
    lib = Library(out)
    inst = lib.create(threads=1)
    for shape, rule in (((66, 64), r"dim 0 \(batch\) must be in 2..64%2"), ((3, 64), "2..64%2"),
                        ((4, 63), "dim 1 must be 64")):
        with pytest.raises(InputError, match=rule):
            lib.run(inst, [np.ones(shape, np.float32)])
    (y,) = lib.run(inst, [np.ones((6, 64), np.float32)])      # and the instance still runs
    assert y.shape == (6, 24)


@pytest.mark.skipif(CC is None, reason="no C compiler")
def test_c_program_runs_two_sizes_from_one_library(mlp, tmp_path):
    out = compile_model(mlp, target="c", output_dir=tmp_path / "out", name="mlp", dims={"batch": (1, 16)},
                        threads=1)
    header = (out / "mlp.h").read_text()
    assert "#define MLP_X_DIM0_MIN 1" in header and "#define MLP_X_DIM0_MAX 16" in header
    assert "int64_t x_shape[2];" in header and "int64_t y_shape[2];" in header
    rng = np.random.default_rng(5)
    xs = {b: rng.standard_normal((b, 64)).astype(np.float32) for b in (3, 16)}
    for b, x in xs.items():
        x.tofile(tmp_path / f"x{b}.bin")
    (tmp_path / "main.c").write_text(r'''
#include <stdio.h>
#include <stdlib.h>
#include "mlp.h"
int main(int argc, char **argv) {
    mlp_model *m;
    if (mlp_create(NULL, &m) != AOTC_OK) return 1;
    for (int a = 1; a < argc; a++) {
        int64_t batch = atoi(argv[a]);
        static float x[MLP_X_DIM0_MAX * 64], y[MLP_X_DIM0_MAX * 24];
        char name[64];
        snprintf(name, sizeof name, "x%d.bin", (int)batch);
        FILE *f = fopen(name, "rb");
        if (!f || fread(x, sizeof(float), batch * 64, f) != (size_t)(batch * 64)) return 2;
        fclose(f);
        mlp_inputs in = { .x = x, .x_shape = { batch, 64 } };
        mlp_outputs out = { .y = y };
        if (mlp_invoke(m, &in, &out) != AOTC_OK) return 3;
        snprintf(name, sizeof name, "y%d.bin", (int)batch);
        f = fopen(name, "wb");
        fwrite(y, sizeof(float), out.y_shape[0] * out.y_shape[1], f);
        fclose(f);
        printf("%lld %lld\n", (long long)out.y_shape[0], (long long)out.y_shape[1]);
    }
    static float x1[1], y1[1];          /* never read: the shape check fails first */
    mlp_inputs bad = { .x = x1, .x_shape = { MLP_X_DIM0_MAX + 1, 64 } };
    mlp_outputs o = { .y = y1 };
    int status = mlp_invoke(m, &bad, &o);
    printf("%d %s\n", status, mlp_failure(m));
    mlp_destroy(m);
    return 0;
}
''')
    exe = tmp_path / "main"
    subprocess.run([CC, "-O1", "-o", str(exe), str(tmp_path / "main.c"), f"-I{out}", f"-L{out}", "-lmlp",
                    f"-Wl,-rpath,{out}"], check=True)
    res = subprocess.run([str(exe), "3", "16"], cwd=tmp_path, capture_output=True, text=True, check=True)
    lines = res.stdout.splitlines()
    assert lines[:2] == ["3 24", "16 24"]
    assert lines[2] == "17 shape check: input 'x' dim 0 (batch) must be in 1..16"     # AOTC_ERR_SHAPE
    for b, x in xs.items():
        y = np.fromfile(tmp_path / f"y{b}.bin", np.float32).reshape(b, 24)
        np.testing.assert_allclose(y, _ort(mlp, {"x": x})[0], rtol=1e-5, atol=1e-6)


def test_check_runs_several_sizes(mlp, tmp_path):
    res = run_check(mlp, target="c", dims={"batch": (1, 40)}, threads=1)
    assert res.passed and [o.name for o in res.outputs] == ["y [batch=1]", "y [batch=20]", "y [batch=40]"]
    res = run_check(mlp, target="c", shapes={"x": ((1, 40), 64)}, sizes={"batch": [5, 9]}, threads=1)
    assert res.passed and [o.shape for o in res.outputs] == [[5, 24], [9, 24]]
    with pytest.raises(InputError, match="outside 1..40"):
        run_check(mlp, target="c", dims={"batch": (1, 40)}, sizes={"batch": [41]}, threads=1)


# ----------------------------------------------------------------------------- the front door
def test_unbound_dims_hint_names_both_forms(mlp, tmp_path):
    with pytest.raises(ShapeError) as e:
        compile_model(mlp, target="c", output_dir=tmp_path / "out")
    assert "--shape x=1x64" in e.value.hint and "--dim batch=1..N" in e.value.hint


def test_binding_errors(mlp, tmp_path):
    with pytest.raises(ShapeError, match="'seq', which no graph input declares"):
        compile_model(mlp, target="c", output_dir=tmp_path / "o", dims={"batch": (1, 4), "seq": (1, 4)})
    with pytest.raises(ShapeError, match="bound to 1..4 and to 1..8"):
        compile_model(mlp, target="c", output_dir=tmp_path / "o", dims={"batch": (1, 4)},
                      shapes={"x": ((1, 8), 64)})
    with pytest.raises(ShapeError, match="range"):
        compile_model(mlp, target="c", output_dir=tmp_path / "o", dims={"batch": (1, 2, 3, 4)})


def test_cli_parses_ranges():
    from aotc.cli import _parse_dims, _parse_shapes
    assert _parse_shapes(["x=1x3x32..960%32x32..960"]) == {"x": (1, 3, (32, 960, 32), (32, 960))}
    assert _parse_dims(["seq=1..512", "b=4"]) == {"seq": (1, 512), "b": (4, 4)}
    for bad in (["seq"], ["seq=1..x"], ["=1..4"]):
        with pytest.raises(AotcError):
            _parse_dims(bad)


def test_an_op_without_run_time_dims_is_refused_by_name(tmp_path):
    model = helper.make_model(helper.make_graph(
        [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("LpNormalization", ["r"], ["y"], name="lpn")], "g",
        [helper.make_tensor_value_info("x", TP.FLOAT, ["n", 8])], [helper.make_tensor_value_info("y", TP.FLOAT, None)]),
        opset_imports=[helper.make_opsetid("", 17)])
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    with pytest.raises(RunTimeDim, match="LpNormalization node 'lpn' does not take run-time dimensions yet"):
        compile_model(path, target="c", output_dir=tmp_path / "o", dims={"n": (1, 9)})


# ----------------------------------------------------------------------------- a transformer over batch and seq
@pytest.fixture(scope="module")
def bert(tmp_path_factory) -> Path:
    """A two-layer Hugging Face BertModel (random weights) exported by torch.onnx's dynamo exporter
    with dynamic batch and sequence axes: its shape logic (Shape, Slice, Concat, Reshape targets,
    Range, Expand of the mask) is in the graph as nodes."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    cfg = transformers.BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                  intermediate_size=64, max_position_embeddings=128)
    torch.manual_seed(0)
    model = transformers.BertModel(cfg).eval()
    path = tmp_path_factory.mktemp("bert") / "bert.onnx"
    batch, seq = torch.export.Dim("batch", min=1, max=8), torch.export.Dim("seq", min=2, max=128)
    ids, mask = torch.randint(0, 100, (2, 16)), torch.ones(2, 16, dtype=torch.int64)
    torch.onnx.export(model, (ids, mask), str(path), input_names=["input_ids", "attention_mask"],
                      output_names=["last_hidden_state", "pooler_output"], dynamo=True, external_data=False,
                      dynamic_shapes={"input_ids": {0: batch, 1: seq}, "attention_mask": {0: batch, 1: seq}})
    return path


@pytest.mark.parametrize("threads", [1, 2])
def test_bert_over_batch_and_seq_matches_onnxruntime(bert, tmp_path, threads):
    out = compile_model(bert, target="c", output_dir=tmp_path / "out", dims={"batch": (1, 4), "seq": (2, 64)},
                        threads=threads)
    m = load(out, threads=threads)
    rng = np.random.default_rng(10 + threads)
    for batch, seq in ((1, 2), (2, 17), (4, 64), (3, 33)):
        ids = rng.integers(0, 100, (batch, seq)).astype(np.int64)
        mask = (rng.random((batch, seq)) > 0.25).astype(np.int64)
        mask[:, 0] = 1
        feeds = {"input_ids": ids, "attention_mask": mask}
        got, want = m.run(feeds), _ort(bert, feeds)
        assert [g.shape for g in got] == [(batch, seq, 32), (batch, 32)]
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)
    # the two inputs share batch and seq: a disagreement is refused
    with pytest.raises(InputError, match="input 'attention_mask' dim 1 must be seq"):
        lib = Library(out)
        lib.run(lib.create(threads=1), [np.zeros((2, 5), np.int64), np.ones((2, 6), np.int64)])


def test_shape_logic_folds_and_sizes_become_data_where_read(tmp_path):
    """x [n, 6] -> Shape -> Gather(0) -> Unsqueeze -> Concat([n, 2, 3]) -> Reshape: folded at
    compile time into a Reshape to [n, 2, 3]; the same Shape cast to float and added to the
    data, and as a graph output of its own, are sizes the run writes (aotc.SizeValues)."""
    N = helper.make_node
    inits = [helper.make_tensor("zero", TP.INT64, [1], [0]), helper.make_tensor("two_three", TP.INT64, [2], [2, 3]),
             helper.make_tensor("ax", TP.INT64, [1], [0])]
    nodes = [N("Shape", ["x"], ["s"]), N("Gather", ["s", "zero"], ["n"], axis=0),
             N("Concat", ["n", "two_three"], ["target"], axis=0), N("Reshape", ["x", "target"], ["r"]),
             N("Cast", ["s"], ["sf"], to=TP.FLOAT), N("ReduceSum", ["sf"], ["total"], keepdims=0),
             N("Add", ["r", "total"], ["y"])]
    model = helper.make_model(helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TP.FLOAT, ["n", 6])],
        [helper.make_tensor_value_info("y", TP.FLOAT, None), helper.make_tensor_value_info("s", TP.INT64, None)],
        inits), opset_imports=[helper.make_opsetid("", 18)])
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    out = compile_model(path, target="c", output_dir=tmp_path / "o", dims={"n": (1, 50)}, threads=1)
    m = load(out)
    for n in (1, 4, 50):
        x = np.random.default_rng(n).standard_normal((n, 6)).astype(np.float32)
        got, want = m.run({"x": x}), _ort(path, {"x": x})
        np.testing.assert_allclose(got[0], want[0], rtol=1e-6)
        np.testing.assert_array_equal(got[1], want[1])


@pytest.fixture(scope="module")
def cnn(tmp_path_factory) -> Path:
    """models/dynamic_cnn.py's CNN (convolutions with BatchNorm, pooling, depthwise, Winograd-sized
    and strided layers), exported by torch.onnx with a dynamic batch, height and width."""
    pytest.importorskip("torch")
    from models.dynamic_cnn import export_cnn
    return export_cnn(tmp_path_factory.mktemp("cnn") / "cnn.onnx", width=16)


@pytest.mark.parametrize("target,threads", [("c", 1), ("native", 2), ("native,winograd4", 1)])
def test_cnn_over_batch_matches_onnxruntime(cnn, tmp_path, target, threads):
    """Planes fixed at 32 x 32, the batch a range: Winograd convolutions where the target makes
    them (the batch scales their cost and the direct one's alike)."""
    out = compile_model(cnn, target=target, output_dir=tmp_path / "out", dims={"batch": (1, 8)},
                        shapes={"x": ((1, 8), 3, 32, 32)}, threads=threads)
    if target != "c":
        assert "WinogradConv" in json.dumps(json.loads((out / "manifest.json").read_text())["kernels"])
    m = load(out, threads=threads)
    for batch in (1, 3, 8):
        x = np.random.default_rng(batch).standard_normal((batch, 3, 32, 32)).astype(np.float32)
        (y,) = m.run({"x": x})
        np.testing.assert_allclose(y, _ort(cnn, {"x": x})[0], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("target,threads", [("c", 1), ("native", 2), ("c,direct_conv", 1)])
def test_cnn_over_height_and_width_matches_onnxruntime(cnn, tmp_path, target, threads):
    """Height and width ranges of multiples of 4 (what the exporter declares, 4*h and 4*w), batch
    too: convolutions by im2col (read from the input itself where the target packs it so) and
    direct depthwise loops over run-time planes, pooling, a stride 2 (whose output, half a
    multiple of 4, stays exact), the global mean over them."""
    out = compile_model(cnn, target=target, output_dir=tmp_path / "out", threads=threads,
                        shapes={"x": ((1, 4), 3, (8, 64, 4), (8, 64, 4))})
    m = load(out, threads=threads)
    for batch, h, w in ((1, 8, 8), (2, 36, 20), (4, 64, 64), (3, 12, 60)):
        x = np.random.default_rng(h * w).standard_normal((batch, 3, h, w)).astype(np.float32)
        (y,) = m.run({"x": x})
        np.testing.assert_allclose(y, _ort(cnn, {"x": x})[0], rtol=1e-4, atol=1e-5)
    with pytest.raises(InputError, match="multiple of 4"):
        m.run({"x": np.ones((1, 3, 10, 8), np.float32)})


@pytest.mark.parametrize("target", ["native", "native,winograd4"])
def test_cnn_winograd_over_run_time_planes(cnn, tmp_path, target):
    """Sides in 16..64%16: the 3 x 3 convolution of 32 channels becomes a Winograd one whose
    tiles divide its output at every size (no partial tiles of run-time size), in blocks of
    rows of tiles that divide them too; parity with ORT at four sizes, both ends included."""
    out = compile_model(cnn, target=target, output_dir=tmp_path / "out", threads=1,
                        shapes={"x": ((1, 2), 3, (16, 64, 16), (16, 64, 16))})
    kernels = json.dumps(json.loads((out / "manifest.json").read_text())["kernels"])
    assert "WinogradConv" in kernels
    m = load(out, threads=1)
    for batch, h, w in ((1, 16, 16), (2, 32, 48), (1, 64, 64), (2, 48, 16)):
        x = np.random.default_rng(h + w).standard_normal((batch, 3, h, w)).astype(np.float32)
        (y,) = m.run({"x": x})
        np.testing.assert_allclose(y, _ort(cnn, {"x": x})[0], rtol=1e-4, atol=1e-5)


# depthwise geometries: (kernel, stride, pads, dilation, smallest side, sides a multiple of):
# each output at least 1, and a whole number at every size (a stride 2 over even sides)
DEPTHWISE = {
    "3x3": (3, 1, [1, 1, 1, 1], 1, 1, 1),
    "3x3 stride 2": (3, 2, [1, 1, 1, 1], 1, 2, 2),
    "5x5 stride 2": (5, 2, [2, 2, 2, 2], 1, 2, 2),
    "3x3 stride 2 asymmetric": (3, 2, [0, 1, 1, 0], 1, 2, 2),
    "3x3 dilated, no padding": (3, 1, [0, 0, 0, 0], 2, 5, 1),
    "7x7": (7, 1, [3, 3, 3, 3], 1, 1, 1),
}


def depthwise_case(case: str, directory: Path, lo: int | None = None) -> tuple[Path, dict, list]:
    """DEPTHWISE[case] as a model (a depthwise convolution of 6 channels and a ReLU over planes
    of run-time height and width, from side `lo` or the case's smallest): its path, its ranged
    shapes, and the sides to run it at: both ends, sides where no output row or column sees
    every tap (the middle of the one-pass loops is empty), where the middle is shorter than a
    vector, between half a vector and one, and longer."""
    k, s, pads, d, smallest, mult = DEPTHWISE[case]
    lo = max(lo or smallest, smallest)
    C, hi = 6, 72
    rng = np.random.default_rng(k * 10 + s)
    w = helper.make_tensor("w", TP.FLOAT, (C, 1, k, k), rng.standard_normal(C * k * k).astype(np.float32))
    bias = helper.make_tensor("b", TP.FLOAT, (C,), rng.standard_normal(C).astype(np.float32))
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], group=C, kernel_shape=[k, k], strides=[s, s],
                              pads=pads, dilations=[d, d]),
             helper.make_node("Relu", ["c"], ["y"])]
    graph = helper.make_graph(nodes, "dw", [helper.make_tensor_value_info("x", TP.FLOAT, [1, C, "h", "w"])],
                              [helper.make_tensor_value_info("y", TP.FLOAT, None)], [w, bias])
    path = directory / "dw.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), str(path))
    sides = [tuple(max(lo, -(-v // mult) * mult) for v in hw)
             for hw in ((lo, lo), (lo + 1, lo + 2), (3, 7), (13, 20), (40, 33), (hi, hi), (9, hi))]
    return path, {"x": (1, C, (lo, hi, mult), (lo, hi, mult))}, [(1, C, h, wd) for h, wd in sides]


@pytest.mark.parametrize("target", ["c", "native"])
@pytest.mark.parametrize("lo", [None, 32])
@pytest.mark.parametrize("case", list(DEPTHWISE))
def test_depthwise_over_run_time_planes(case, lo, target, tmp_path):
    """depthwise_case's model at its sides against ONNX Runtime (ops/conv_direct.py
    _depthwise_guarded and _depthwise_padded; the whole-vector runs of schedule/cpu.py
    _in_sized_runs): over sides from the smallest (the edge rows' outputs guarded sums) and
    from 32 (a pass per kernel row)."""
    path, shapes, runs = depthwise_case(case, tmp_path, lo)
    out = compile_model(path, target=target, output_dir=tmp_path / "out", threads=1, shapes=shapes)
    m = load(out, threads=1)
    rng = np.random.default_rng(len(case))
    for shape in runs:
        x = rng.standard_normal(shape).astype(np.float32)
        (y,) = m.run({"x": x})
        np.testing.assert_allclose(y, _ort(path, {"x": x})[0], rtol=1e-5, atol=1e-5, err_msg=str(shape))


# ----------------------------------------------------------------------------- one op at a time
def _tensor(name, vals, dt=TP.INT64, shape=None):
    return helper.make_tensor(name, dt, [len(vals)] if shape is None else shape, vals)


_W = [float(v) for v in np.random.default_rng(0).standard_normal(54)]
# op -> (nodes, initializers, input kind): "rows" is x [n, 6], "planes" x4 [1, 3, n, n]
OP_CASES = {
    "ConstantOfShape": ([helper.make_node("Shape", ["x"], ["s"]),
                         helper.make_node("ConstantOfShape", ["s"], ["c"],
                                          value=helper.make_tensor("v", TP.FLOAT, [1], [2.5])),
                         helper.make_node("Add", ["x", "c"], ["y"])], [], "rows"),
    "Tile": ([helper.make_node("Tile", ["x", "r"], ["y"])], [_tensor("r", [2, 3])], "rows"),
    "Pad": ([helper.make_node("Pad", ["x", "p"], ["y"], mode="constant")], [_tensor("p", [1, 2, 0, 1])], "rows"),
    "Pad-reflect": ([helper.make_node("Pad", ["x", "p"], ["y"], mode="reflect")], [_tensor("p", [1, 2, 1, 1])],
                    "rows"),
    "CumSum": ([helper.make_node("CumSum", ["x", "a"], ["y"])], [_tensor("a", [0], shape=[])], "rows"),
    "ArgMax": ([helper.make_node("ArgMax", ["x"], ["y"], axis=0, keepdims=1)], [], "rows"),
    "TopK": ([helper.make_node("TopK", ["x", "k"], ["y", "i"], axis=1)], [_tensor("k", [3])], "rows"),
    "Trilu": ([helper.make_node("Trilu", ["x"], ["y"])], [], "rows"),
    "ReduceMax": ([helper.make_node("ReduceMax", ["x"], ["y"], keepdims=1)], [], "rows"),
    "InstanceNormalization": ([helper.make_node("InstanceNormalization", ["x4", "sc", "bi"], ["y"])],
                              [_tensor("sc", [1., 2., 3.], TP.FLOAT), _tensor("bi", [.1, .2, .3], TP.FLOAT)], "planes"),
    "GroupNormalization": ([helper.make_node("GroupNormalization", ["x4", "sc", "bi"], ["y"], num_groups=3)],
                           [_tensor("sc", [1., 2., 3.], TP.FLOAT), _tensor("bi", [.1, .2, .3], TP.FLOAT)], "planes"),
    "DepthToSpace": ([helper.make_node("DepthToSpace", ["x4"], ["y"], blocksize=1)], [], "planes"),
    "Resize-nearest": ([helper.make_node("Resize", ["x4", "", "sc"], ["y"], mode="nearest")],
                       [_tensor("sc", [1., 1., 2., 2.], TP.FLOAT)], "planes"),
    "Resize-linear": ([helper.make_node("Resize", ["x4", "", "sc"], ["y"], mode="linear")],
                      [_tensor("sc", [1., 1., 2., 2.], TP.FLOAT)], "planes"),
    "Resize-align-corners": ([helper.make_node("Resize", ["x4", "", "sc"], ["y"], mode="linear",
                                               coordinate_transformation_mode="align_corners")],
                             [_tensor("sc", [1., 1., 2., 2.], TP.FLOAT)], "planes"),
    "ConvTranspose": ([helper.make_node("ConvTranspose", ["x4", "w"], ["y"], strides=[2, 2])],
                      [_tensor("w", _W, TP.FLOAT, [3, 2, 3, 3])], "planes"),
}


def op_case(op: str, directory: Path) -> tuple[Path, str, str]:
    """OP_CASES[op] as a model file in `directory`: (its path, its input's name, its kind)."""
    nodes, inits, kind = OP_CASES[op]
    name, dims = ("x", ["n", 6]) if kind == "rows" else ("x4", [1, 3, "n", "n"])
    outs = [helper.make_tensor_value_info(o, TP.INT64 if (o == "i" or op == "ArgMax") else TP.FLOAT, None)
            for o in nodes[-1].output]
    model = helper.make_model(helper.make_graph(nodes, "g", [helper.make_tensor_value_info(name, TP.FLOAT, dims)],
                                                outs, inits), opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8            # what opset 18 needs: an older ONNX Runtime (a GPU machine's) reads it
    path = directory / "m.onnx"
    onnx.save(model, str(path))
    return path, name, kind


@pytest.mark.parametrize("op", sorted(OP_CASES))
def test_op_over_a_run_time_dim(op, tmp_path):
    """Each op of OP_CASES on an input with a run-time dim n in 2..12, at three sizes, against
    ORT (a graph of the op alone, or with the nodes an exporter writes around it)."""
    path, name, kind = op_case(op, tmp_path)
    m = load(compile_model(path, target="c", output_dir=tmp_path / "o", dims={"n": (2, 12)}, threads=1))
    for n in (2, 7, 12):
        shape = (n, 6) if kind == "rows" else (1, 3, n, n)
        x = np.random.default_rng(n).standard_normal(shape).astype(np.float32)
        for got, want in zip(m.run({name: x}), _ort(path, {name: x})):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", ["lstm", "gru"])
def test_recurrent_zoo_models_over_sequence(name, tmp_path):
    """The zoo's LSTM and GRU (their input [seq, 1, 16], seq a dim_param) over seq in 1..16."""
    from models.zoo import ZOO
    path = tmp_path / f"{name}.onnx"
    onnx.save(ZOO[name].build("small"), str(path))
    m = load(compile_model(path, target="native", output_dir=tmp_path / "o", dims={"seq": (1, 16)}, threads=2))
    for seq in (1, 7, 16):
        x = np.random.default_rng(seq).standard_normal((seq, 1, 16)).astype(np.float32)
        for got, want in zip(m.run({"x": x}), _ort(path, {"x": x})):
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_inspect_and_report_describe_run_time_dims(mlp):
    """aotc inspect lists the dimensions and the shapes in their terms; the report's data (FLOPs
    at the largest sizes) is JSON as the page embeds it."""
    from aotc import report
    from aotc.inspection import format_text, inspect_model
    info = inspect_model(mlp, "c", dims={"batch": (1, 64)})
    assert info["run_time_dims"] == {"batch": {"min": 1, "max": 64, "multiple": 1}}
    assert info["inputs"] == {"x": ["batch", 64]} and info["output_dims"] == {"y": ["batch", "24"]}
    assert "batch                    1..64   (x[0])" in format_text(info)
    data = report.collect(mlp, "c", dims={"batch": (1, 64)})
    assert data["inputs"]["x"][1] == ["batch", 64]
    json.dumps(data)
    assert sum(k["flops"] for k in data["kernels"]) >= 2 * 64 * (64 * 96 + 96 * 24)


def test_run_time_if_over_a_run_time_dim(tmp_path):
    """An If decided at run time whose branches compute over an input with a run-time dim: both
    branches, at both ends of the range and between, against ORT."""
    N = helper.make_node
    then_g = helper.make_graph([N("Mul", ["x", "two"], ["t"])], "then", [],
                               [helper.make_tensor_value_info("t", TP.FLOAT, None)],
                               [helper.make_tensor("two", TP.FLOAT, [], [2.0])])
    else_g = helper.make_graph([N("Softmax", ["x"], ["e"], axis=-1)], "else", [],
                               [helper.make_tensor_value_info("e", TP.FLOAT, None)])
    model = helper.make_model(helper.make_graph(
        [N("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)], "g",
        [helper.make_tensor_value_info("x", TP.FLOAT, ["n", 5]), helper.make_tensor_value_info("c", TP.BOOL, [])],
        [helper.make_tensor_value_info("y", TP.FLOAT, None)]), opset_imports=[helper.make_opsetid("", 18)])
    path = tmp_path / "if.onnx"
    onnx.save(model, str(path))
    m = load(compile_model(path, target="c", output_dir=tmp_path / "o", dims={"n": (1, 9)}, threads=1))
    for n in (1, 4, 9):
        for c in (True, False):
            feeds = {"x": np.random.default_rng(n).standard_normal((n, 5)).astype(np.float32), "c": np.array(c)}
            np.testing.assert_allclose(m.run(feeds)[0], _ort(path, feeds)[0], rtol=1e-6, atol=1e-7)


# ----------------------------------------------------------------------------- a dynamic OCR pair
@pytest.fixture(scope="module")
def ocr(tmp_path_factory) -> tuple[Path, Path]:
    """models/dynamic_ocr.py's text detector ([batch, 3, 32*h, 32*w], its feature pyramid resizing
    maps to sizes read from the graph) and recognizer ([batch, 3, 48, 4*w] into a bidirectional
    LSTM over width / 4 steps), exported by torch.onnx with those dynamic axes."""
    pytest.importorskip("torch")
    from models.dynamic_ocr import export_detector, export_recognizer
    d = tmp_path_factory.mktemp("ocr")
    return export_detector(d / "det.onnx"), export_recognizer(d / "rec.onnx")


OCR_CASES = {
    "det": ({"x": ((1, 2), 3, (32, 256, 32), (32, 256, 32))}, [(1, 3, 32, 32), (2, 3, 64, 256), (1, 3, 256, 96),
                                                              (2, 3, 256, 256)]),
    "rec": ({"x": ((1, 4), 3, 48, (8, 320, 4))}, [(1, 3, 48, 8), (3, 3, 48, 100), (2, 3, 48, 164), (4, 3, 48, 320)]),
}


@pytest.mark.parametrize("target,threads", [("c", 1), ("native", 2)])
@pytest.mark.parametrize("which", sorted(OCR_CASES))
def test_ocr_pair_over_page_and_line_sizes(ocr, which, target, threads, tmp_path):
    """One artifact for pages (detector) or text lines (recognizer) of any size in range, at both
    ends and two sizes between, against ORT: the detector's Resize to a neighbour map's size
    (`sizes` from Shape) takes the ratio of the two run-time sizes, the recognizer's LSTM runs
    over a run-time batch and sequence."""
    path = ocr[0] if which == "det" else ocr[1]
    shapes, sizes = OCR_CASES[which]
    m = load(compile_model(path, target=target, output_dir=tmp_path / "o", shapes=shapes, threads=threads),
             threads=threads)
    for shape in sizes:
        x = np.random.default_rng(sum(shape)).standard_normal(shape).astype(np.float32)
        (got,) = m.run({"x": x})
        (want,) = _ort(path, {"x": x})
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def zero_case(directory: Path) -> Path:
    """A model over a run-time n from 0 (a decoder's empty past): a GEMM over an empty K (zeros,
    and its bias), a Concat with an empty input, reductions over no elements and over some, a
    softmax of n rows."""
    nodes = [helper.make_node("MatMul", ["a", "b"], ["ab"]),                    # [4, n] x [n, 5]
             helper.make_node("Add", ["ab", "bias"], ["y0"]),
             helper.make_node("Transpose", ["b"], ["bt"], perm=[1, 0]),           # [5, n]
             helper.make_node("Concat", ["bt", "c"], ["y1"], axis=1),            # [5, n + 3]
             helper.make_node("ReduceSum", ["a", "ax"], ["y2"], keepdims=0),     # [4]
             helper.make_node("ReduceMax", ["y1", "ax"], ["y3"], keepdims=1),    # [5, 1]
             helper.make_node("Softmax", ["b"], ["y4"], axis=1)]                 # [n, 5]
    f = lambda name, dims: helper.make_tensor_value_info(name, TP.FLOAT, dims)   # noqa: E731
    graph = helper.make_graph(nodes, "g", [f("a", [4, "n"]), f("b", ["n", 5]), f("c", [5, 3])],
                              [f(f"y{k}", None) for k in range(5)],
                              [_tensor("bias", np.linspace(-1, 1, 5), TP.FLOAT), _tensor("ax", [1])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    path = directory / "zero.onnx"
    onnx.save(model, str(path))
    return path


def check_zero_case(path: Path, m) -> None:
    """zero_case's artifact `m` (n in 0..40) at n = 0 and a few sizes, against ONNX Runtime."""
    rng = np.random.default_rng(3)
    for n in (0, 1, 17, 40):
        feeds = {"a": rng.standard_normal((4, n)).astype(np.float32),
                 "b": rng.standard_normal((n, 5)).astype(np.float32),
                 "c": rng.standard_normal((5, 3)).astype(np.float32)}
        for k, (got, want) in enumerate(zip(m.run(feeds), _ort(path, feeds))):
            assert got.shape == want.shape, (n, k)
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=f"n={n} y{k}")


@pytest.mark.parametrize("target", ["c", "native"])
def test_a_run_time_dim_may_be_zero(target, tmp_path):
    """A range from 0: the runtime's GEMM over K = 0 (no K blocks) and loops that run no times."""
    path = zero_case(tmp_path)
    check_zero_case(path, load(compile_model(path, target=target, output_dir=tmp_path / "o", dims={"n": (0, 40)})))


@pytest.mark.parametrize("threads", [1, 2])
def test_run_time_k_below_its_bound_fits_the_gemm_scratch(tmp_path, threads):
    """A product whose K is a run-time size: its scratch is sized for every K block a K in the
    range can take, not for the bound's alone (K = 2048 runs in blocks of 342, K = 384 in one of
    384: sized for 2048, the packed blocks overran the scratch and the heap), K at both ends and
    between, against numpy. (The integer GEMM's scratch is sized the same way; MatMulInteger
    takes no run-time dimensions yet.)"""
    from aotc.schedule.gemm_cpu import GemmTiles
    from aotc.targets import load_target
    t = GemmTiles.of(load_target("native"))
    assert t.work_floats(64, 64, 2048, False, False, k_varies=True) > t.work_floats(64, 64, 2048, False, False)
    assert t.int8_work_bytes(64, 64, 2048, False, True, k_varies=True) > t.int8_work_bytes(64, 64, 2048, False, True)
    g = helper.make_graph([helper.make_node("MatMul", ["a", "b"], ["c"])], "g",
                          [helper.make_tensor_value_info("a", TP.FLOAT, [64, "K"]),
                           helper.make_tensor_value_info("b", TP.FLOAT, ["K", 64])],
                          [helper.make_tensor_value_info("c", TP.FLOAT, [64, 64])])
    path = tmp_path / "k.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    out = compile_model(path, output_dir=tmp_path / "out", dims={"K": (1, 2048)}, threads=threads)
    m = load(out, threads=threads)
    rng = np.random.default_rng(0)
    for K in (384, 2048, 385, 100, 1):
        a, b = rng.standard_normal((64, K)).astype(np.float32), rng.standard_normal((K, 64)).astype(np.float32)
        (c,) = m.run({"a": a, "b": b})
        np.testing.assert_allclose(c, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4 * np.sqrt(K))
