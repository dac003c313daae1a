"""Weights read in place (aotc/frontend/mapped.py): large initializers, inline or in external data
files, are mapped from the file instead of copied into the proto and into arrays; packing and the
weights file stream them. What these tests hold: the values are the file's (against onnx's own
reader and ONNX Runtime), what is malformed is still refused as before, and compiling a model with
256 MB of weights peaks at no more than 1.5x those bytes above a small compile's peak."""
from __future__ import annotations

import json
import mmap
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from aotc.errors import ModelError
from aotc.frontend import import_model, load_onnx
from aotc.frontend import mapped
from tests.helpers import assert_parity, rand

N = helper.make_node


def _model(seed: int = 0) -> onnx.ModelProto:
    """y = relu(x @ W1 + b) @ W2 * s, with weights over and under the mapped size, of three
    element types (float32, float16 widened by a Cast, int64 for a Reshape's shape)."""
    w1 = rand(48, 64, seed=seed)                                     # 12 KB: mapped
    w2 = rand(64, 40, seed=seed + 1).astype(np.float16)               # 5 KB: mapped
    inits = [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(rand(64, seed=seed + 2), "b"),
             numpy_helper.from_array(w2, "w2"), numpy_helper.from_array(np.array([-1, 40], np.int64), "shape"),
             numpy_helper.from_array(rand(40, seed=seed + 3), "s")]
    nodes = [N("MatMul", ["x", "w1"], ["h"]), N("Add", ["h", "b"], ["hb"]), N("Relu", ["hb"], ["r"]),
             N("Cast", ["w2"], ["w2f"], to=TensorProto.FLOAT), N("MatMul", ["r", "w2f"], ["z"]),
             N("Mul", ["z", "s"], ["zs"]), N("Reshape", ["zs", "shape"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [5, 48])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [5, 40])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _is_mapped(a: np.ndarray) -> bool:
    b = a
    while isinstance(b, np.ndarray):
        b = b.base
    return isinstance(b, memoryview) and isinstance(b.obj, mmap.mmap)


@pytest.mark.parametrize("external", [False, True])
def test_large_weights_are_mapped_with_the_files_values(external, tmp_path):
    m = _model()
    path = tmp_path / "m.onnx"
    written = onnx.ModelProto()
    written.CopyFrom(m)                              # (saving as external data empties the proto's tensors)
    onnx.save_model(written, str(path), save_as_external_data=external, all_tensors_to_one_file=True,
                    location="m.data", size_threshold=1024)
    proto = load_onnx(path)
    marked = {t.name for t in proto.graph.initializer if mapped.is_marked(t)}
    assert marked == {"w1", "w2"}                    # the small ones stay in the proto
    g = import_model(proto)
    want = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
    for name, arr in want.items():
        got = g.values[name].const
        np.testing.assert_array_equal(got, arr)
        # float16 is widened to float32 as it is imported (frontend/narrow.py): a copy
        assert got.dtype == (np.float32 if arr.dtype == np.float16 else arr.dtype)
        assert _is_mapped(got) == (name == "w1")
    assert not g.values["w1"].const.flags.writeable     # a pass cannot write into the model's file
    mapped.drop_pages(g.values["w1"].const)          # out of memory, not out of reach
    np.testing.assert_array_equal(g.values["w1"].const, want["w1"])
    (tmp_path / "run").mkdir()
    assert_parity(m, tmp_path / "run", {"x": rand(5, 48, seed=9)}, rtol=2e-3, atol=1e-4)


def test_inline_weights_skeleton_points_into_the_file(tmp_path):
    """The skeleton's references name the .onnx file itself, at the raw bytes' offset."""
    m = _model(seed=4)
    path = tmp_path / "m.onnx"
    onnx.save(m, str(path))
    data = path.read_bytes()
    small = mapped.skeleton(data, "m.onnx")
    assert small is not None and len(small) < len(data) - 16000
    proto = onnx.ModelProto()
    proto.ParseFromString(small)
    for t in proto.graph.initializer:
        if t.data_location != TensorProto.EXTERNAL:
            continue
        info = {e.key: e.value for e in t.external_data}
        assert info["location"] == "m.onnx"
        raw = numpy_helper.to_array(next(x for x in m.graph.initializer if x.name == t.name)).tobytes()
        assert data[int(info["offset"]):int(info["offset"]) + int(info["length"])] == raw


def test_a_large_inline_payload_of_the_wrong_size_is_refused_as_before(tmp_path):
    m = _model()
    w1 = next(t for t in m.graph.initializer if t.name == "w1")
    w1.raw_data = w1.raw_data[:-4]
    path = tmp_path / "m.onnx"
    onnx.save(m, str(path))
    proto = load_onnx(path)
    assert not mapped.is_marked(next(t for t in proto.graph.initializer if t.name == "w1"))
    with pytest.raises(ModelError, match="holds 12284 bytes of raw_data"):
        import_model(proto)


@pytest.mark.parametrize("cut", [100, 5000, -3])
def test_a_truncated_file_is_not_a_model(cut, tmp_path):
    path = tmp_path / "m.onnx"
    onnx.save(_model(), str(path))
    path.write_bytes(path.read_bytes()[:cut])
    with pytest.raises(ModelError, match="not an ONNX model"):
        load_onnx(path)


# a model of 4 x 64 MB float32 weights; its compile's peak resident memory, measured in a child
# (VmHWM: ru_maxrss would count the parent's memory at the fork, which Linux carries over the exec)
_PEAK = """
import sys
import aotc
aotc.compile(sys.argv[1], target="c", output_dir=sys.argv[2], threads=1)
print(next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM:")) * 1024)
"""


def _peak(model: Path, out: Path) -> int:
    run = subprocess.run([sys.executable, "-c", _PEAK, str(model), str(out)], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-2000:]
    return int(run.stdout.split()[-1])


def _mlp(path: Path, width: int, layers: int, rows: int) -> int:
    rng = np.random.default_rng(1)
    inits, nodes, h = [], [], "x"
    for k in range(layers):
        w = rng.standard_normal((width, width), dtype=np.float32) * np.float32(width ** -0.5)
        inits.append(numpy_helper.from_array(w, f"w{k}"))
        nodes.append(N("MatMul", [h, f"w{k}"], [f"h{k}"]))
        h = f"h{k}"
    g = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [rows, width])],
                          [helper.make_tensor_value_info(h, TensorProto.FLOAT, [rows, width])], inits)
    onnx.save_model(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), str(path),
                    save_as_external_data=True, location=path.name + ".data")
    return layers * width * width * 4


def test_compile_peak_memory_is_within_one_and_a_half_times_the_weights(tmp_path):
    """Every weight is packed for the GEMM (16 rows): the packed copies are the one whole copy a
    compile holds; the model's own bytes are mapped and dropped once read."""
    small = _mlp(tmp_path / "small.onnx", 256, 4, 16)
    big = _mlp(tmp_path / "big.onnx", 4096, 4, 16)
    base = _peak(tmp_path / "small.onnx", tmp_path / "out_small")
    peak = _peak(tmp_path / "big.onnx", tmp_path / "out_big")
    manifest = json.loads((tmp_path / "out_big" / "manifest.json").read_text())
    assert manifest["weights"]["bytes"] >= big
    assert peak - base <= 1.5 * (big - small), f"compile peak {peak / 1e6:.0f} MB, a small model's " \
        f"{base / 1e6:.0f} MB, weights {big / 1e6:.0f} MB"
