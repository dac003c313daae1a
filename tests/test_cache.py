"""The compile cache (aotc/cache.py): an unchanged model recompiles from it in well under a second,
into an artifact that gives ONNX Runtime's answer and is byte for byte a fresh compile's; any
change of model, external data, constants, shapes or options is a miss; --no-cache neither
reads nor writes it; damaged entries are recompiled; it keeps to its size."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from aotc.api import build_artifact, load

ROOT = Path(__file__).resolve().parent.parent


def _model(path: Path, seed: int, external: bool = False) -> None:
    """x[2, 16] -> Relu(x @ w + b) -> [2, 8], random weights (w in an external file `w.bin`)."""
    rng = np.random.default_rng(seed)
    w = numpy_helper.from_array(rng.standard_normal((16, 8)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), "b")
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Add", ["m", "b"], ["a"]),
                           helper.make_node("Relu", ["a"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 8])], [w, b])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    if external:
        onnx.save(m, str(path), save_as_external_data=True, location="w.bin", size_threshold=0)
    else:
        onnx.save(m, str(path))


@pytest.fixture
def cache(tmp_path, monkeypatch):
    d = tmp_path / "cache"
    monkeypatch.setenv("AOTC_CACHE_DIR", str(d))
    return d


def entries(cache: Path) -> list[str]:
    return sorted(p.name for p in cache.iterdir() if p.is_dir() and not p.name.startswith(".")) if cache.exists() else []


def build(model, out, **kw):
    kw.setdefault("target", "c")
    kw.setdefault("shapes", {"x": (2, 16)})
    t0 = time.perf_counter()
    built = build_artifact(model, output_dir=out, cache=kw.pop("cache", True), **kw)
    return built.cached, time.perf_counter() - t0


def answers_like_onnx_runtime(model: Path, out: Path) -> None:
    x = np.random.default_rng(int(time.time())).standard_normal((2, 16)).astype(np.float32)
    ref = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert np.abs(ref).max() > 0
    np.testing.assert_allclose(load(out).run({"x": x})[0], ref, rtol=1e-5, atol=1e-5)


def test_a_recompile_is_a_hit_in_well_under_a_second(tmp_path, cache):
    model = tmp_path / "m.onnx"
    _model(model, 1)
    hit, t_miss = build(model, tmp_path / "a")
    assert not hit and len(entries(cache)) == 1
    hit, t_hit = build(model, tmp_path / "a")                   # the same directory: nothing to copy
    assert hit and t_hit < 1.0, t_hit
    hit, t_hit2 = build(model, tmp_path / "b")                  # another directory: the files are copied
    assert hit and t_hit2 < 1.0, t_hit2
    answers_like_onnx_runtime(model, tmp_path / "b")
    hit, _ = build(model, tmp_path / "fresh", cache=False)
    assert not hit
    fresh = {p.name: p.read_bytes() for p in (tmp_path / "fresh").iterdir()}
    cached = {p.name: p.read_bytes() for p in (tmp_path / "b").iterdir()}
    assert fresh.keys() == cached.keys() and "m.pc" in fresh and "mConfig.cmake" in fresh
    assert [n for n in fresh if fresh[n] != cached[n]] == []
    assert len(entries(cache)) == 1                              # cache=False stored nothing


@pytest.mark.parametrize("change", ["model", "shape", "threads", "weights", "name", "fuse", "static", "target",
                                    "const"])
def test_any_change_is_a_miss(tmp_path, cache, change):
    model = tmp_path / "m.onnx"
    _model(model, 2)
    base = {"shapes": {"x": (2, 16)}, "threads": 2}
    assert not build(model, tmp_path / "out", **base)[0]
    kw = dict(base)
    if change == "model":                 # the same file name, other weights
        _model(model, 3)
    elif change == "shape":
        kw["shapes"] = {"x": (3, 16)}
    elif change == "threads":
        kw["threads"] = 1
    elif change == "weights":
        kw["weights"] = "external"
    elif change == "name":
        kw["name"] = "other"
    elif change == "fuse":
        kw["fuse"] = False
    elif change == "static":
        kw["static"] = True
    elif change == "target":
        kw["target"] = "c,direct_conv"
    elif change == "const":               # x bound to constants: other values, another artifact
        kw = {"consts": {"x": np.ones((2, 16), np.float32)}, "threads": 2, "shapes": {}}
        assert not build(model, tmp_path / "c1", **kw)[0]
        assert build(model, tmp_path / "c2", **kw)[0]
        kw = {"consts": {"x": np.full((2, 16), 2, np.float32)}, "threads": 2, "shapes": {}}
    hit, _ = build(model, tmp_path / "out", **kw)
    assert not hit
    assert build(model, tmp_path / "again", **kw)[0]           # ... which is then a hit
    if change == "model":
        answers_like_onnx_runtime(model, tmp_path / "out")


def test_external_data_is_part_of_the_key(tmp_path, cache):
    model = tmp_path / "m.onnx"
    _model(model, 4, external=True)
    assert not build(model, tmp_path / "out")[0]
    assert build(model, tmp_path / "out")[0]
    data = bytearray((tmp_path / "w.bin").read_bytes())          # same size, other values
    data[:64] = bytes(reversed(data[:64]))
    (tmp_path / "w.bin").write_bytes(bytes(data))
    assert not build(model, tmp_path / "out")[0]
    answers_like_onnx_runtime(model, tmp_path / "out")


def test_the_same_content_rewritten_is_a_hit_and_stale_files_go(tmp_path, cache):
    model = tmp_path / "m.onnx"
    _model(model, 5)
    assert not build(model, tmp_path / "out", weights="embed")[0]
    assert not build(model, tmp_path / "out", weights="external", static=True)[0]
    assert (tmp_path / "out" / "m.weights").is_file() and (tmp_path / "out" / "libm.a").is_file()
    model.write_bytes(model.read_bytes())                        # new times, same bytes
    assert build(model, tmp_path / "out", weights="embed")[0]
    names = {p.name for p in (tmp_path / "out").iterdir()}
    assert "m_weights.c" in names and not names & {"m.weights", "libm.a", "m-static.pc"}
    answers_like_onnx_runtime(model, tmp_path / "out")


def test_a_damaged_entry_is_compiled_again(tmp_path, cache):
    model = tmp_path / "m.onnx"
    _model(model, 6)
    assert not build(model, tmp_path / "out")[0]
    entry, = entries(cache)
    (cache / entry / "libm.so").unlink()
    assert not build(model, tmp_path / "out2")[0]
    answers_like_onnx_runtime(model, tmp_path / "out2")
    assert build(model, tmp_path / "out3")[0]


def test_the_cache_keeps_to_its_size(tmp_path, cache, monkeypatch):
    first, second = tmp_path / "a.onnx", tmp_path / "b.onnx"
    _model(first, 7)
    _model(second, 8)
    build(first, tmp_path / "a")
    one = sum(f.stat().st_size for f in (cache / entries(cache)[0]).iterdir())
    monkeypatch.setenv("AOTC_CACHE_MAX_MIB", str(1.5 * one / (1 << 20)))    # room for one entry
    build(second, tmp_path / "b")
    assert len(entries(cache)) == 1 and build(second, tmp_path / "b2")[0] and not build(first, tmp_path / "a2")[0]
    monkeypatch.setenv("AOTC_CACHE_MAX_MIB", str(0.5 * one / (1 << 20)))    # no room at all
    _model(first, 9)
    build(first, tmp_path / "a3")
    assert not build(first, tmp_path / "a4")[0]


def test_aotc_compile_uses_the_cache_and_no_cache_bypasses_it(tmp_path):
    model = tmp_path / "m.onnx"
    _model(model, 10)
    env = {**os.environ, "AOTC_CACHE_DIR": str(tmp_path / "cache"), "PYTHONPATH": str(ROOT), "NO_COLOR": "1",
           "COLUMNS": "200"}

    def compile_(*extra):
        p = subprocess.run([sys.executable, "-m", "aotc.cli", "compile", str(model), "-o", str(tmp_path / "out"),
                            "--target", "c", "--shape", "x=2x16", *extra], env=env, capture_output=True, text=True)
        assert p.returncode == 0, p.stderr
        return p.stdout

    assert "from the compile cache" not in compile_("--no-cache") and not (tmp_path / "cache").exists()
    assert "from the compile cache" not in compile_()
    assert "from the compile cache" in compile_()
    assert "from the compile cache" not in compile_("--no-cache")
    assert len(entries(tmp_path / "cache")) == 1
    assert json.loads((tmp_path / "out" / "manifest.json").read_text())["target"] == "c"
