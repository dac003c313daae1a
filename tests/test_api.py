"""The Python API: aotc.compile, aotc.load, CompiledModel.run."""
from __future__ import annotations

import json
import shutil

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper

import aotc
from aotc.errors import ArtifactError, InputError
from tests.helpers import graph_model, rand

N = helper.make_node


def ort_run(model, feeds):
    so = ort.SessionOptions()
    so.log_severity_level = 3
    src = model.SerializeToString() if isinstance(model, onnx.ModelProto) else str(model)
    return ort.InferenceSession(src, so, providers=["CPUExecutionProvider"]).run(None, feeds)


def two_in_two_out():
    """inputs a (float32 3x4), ids (int64 3); outputs y = tanh(a @ w) + rowbias[ids], n = ids * 2"""
    a = rand(3, 4, seed=1)
    ids = np.array([2, 0, 1], dtype=np.int64)
    nodes = [N("MatMul", ["a", "w"], ["m"]), N("Tanh", ["m"], ["t"]), N("Cast", ["ids"], ["idf"], to=1),
             N("Unsqueeze", ["idf", "ax1"], ["col"]), N("Add", ["t", "col"], ["y"]),
             N("Mul", ["ids", "two"], ["n"])]
    m = graph_model(nodes, {"a": a, "ids": ids}, ["y", "n"],
                    {"w": rand(4, 5, seed=2), "ax1": np.array([1]), "two": np.array(2, dtype=np.int64)})
    return m


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    d = tmp_path_factory.mktemp("api")
    m = two_in_two_out()
    path = d / "model.onnx"
    onnx.save(m, str(path))
    cm = aotc.compile(path, output_dir=d / "out")
    return m, cm, d


def feeds(seed):
    rng = np.random.default_rng(seed)
    return {"a": rand(3, 4, seed=seed), "ids": rng.integers(-5, 5, 3).astype(np.int64)}


def test_compile_returns_a_loaded_model(compiled):
    _, cm, d = compiled
    assert isinstance(cm, aotc.CompiledModel)
    assert cm.input_names == ["a", "ids"]
    assert cm.output_names == ["y", "n"]
    assert (d / "out" / "manifest.json").is_file()


def test_run_with_a_dict_in_any_order(compiled):
    m, cm, _ = compiled
    f = feeds(3)
    y, n = cm.run({"ids": f["ids"], "a": f["a"]})
    want_y, want_n = ort_run(m, f)
    assert y.dtype == np.float32 and n.dtype == np.int64
    np.testing.assert_allclose(y, want_y, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(n, want_n)
    assert np.any(n != 0) and np.any(y != 0)


def test_run_with_a_list_in_graph_order(compiled):
    m, cm, _ = compiled
    f = feeds(4)
    y, n = cm.run([f["a"], f["ids"]])
    want_y, want_n = ort_run(m, f)
    np.testing.assert_allclose(y, want_y, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(n, want_n)


def test_repeated_runs_and_non_contiguous_inputs(compiled):
    m, cm, _ = compiled
    f1, f2 = feeds(5), feeds(6)
    a_f = np.asfortranarray(f1["a"])                 # same values, column-major
    a_strided = np.repeat(f2["a"], 2, axis=1)[:, ::2]  # same values, a strided view
    before = a_f.copy()
    r1 = cm.run({"a": a_f, "ids": f1["ids"]})
    r2 = cm.run({"a": a_strided, "ids": f2["ids"]})
    r1_again = cm.run(f1)
    np.testing.assert_array_equal(a_f, before)          # inputs are not written
    for got, f in ((r1, f1), (r2, f2)):
        want = ort_run(m, f)
        np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(got[1], want[1])
    np.testing.assert_array_equal(r1[0], r1_again[0])
    assert r1[0] is not r1_again[0] and not np.shares_memory(r1[0], r1_again[0]), "fresh output arrays"


@pytest.mark.parametrize("bad, message, hint", [
    ({"a": "A", "ids": "IDS", "extra": "A"}, "unknown input(s) 'extra'", "the model's inputs are: a, ids"),
    ({"a": "A"}, "missing input(s) 'ids'", "the model's inputs are: a, ids"),
    ({"a": "A64", "ids": "IDS"}, "input 'a' has dtype float64, the model expects float32", "x.astype(np.float32)"),
    ({"a": "A", "ids": "IDS32"}, "input 'ids' has dtype int32, the model expects int64", "x.astype(np.int64)"),
    ({"a": "A_T", "ids": "IDS"}, "input 'a' has shape (4, 3), the model was compiled for (3, 4)", "--shape"),
    ({"a": "A", "ids": "IDS_2D"}, "input 'ids' has shape (1, 3), the model was compiled for (3,)", "--shape"),
    (["A"], "1 inputs given, the model takes 2 (a, ids)", None),
])
def test_input_validation_errors(compiled, bad, message, hint):
    _, cm, _ = compiled
    f = feeds(7)
    values = {"A": f["a"], "A64": f["a"].astype(np.float64), "A_T": f["a"].T.copy(), "IDS": f["ids"],
              "IDS32": f["ids"].astype(np.int32), "IDS_2D": f["ids"][None]}
    arg = {k: values[v] for k, v in bad.items()} if isinstance(bad, dict) else [values[v] for v in bad]
    with pytest.raises(InputError) as info:
        cm.run(arg)
    assert info.value.message == message
    if hint:
        assert hint in info.value.hint


def test_python_lists_are_checked_not_guessed(compiled):
    _, cm, _ = compiled
    with pytest.raises(InputError, match="input 'a' has dtype float64"):
        cm.run({"a": [[0.5] * 4] * 3, "ids": np.zeros(3, np.int64)})


def test_load_works_after_the_onnx_file_is_deleted(tmp_path):
    m = two_in_two_out()
    path = tmp_path / "model.onnx"
    onnx.save(m, str(path))
    aotc.compile(path, output_dir=tmp_path / "art")
    f = feeds(8)
    want = ort_run(m, f)
    path.unlink()
    moved = tmp_path / "elsewhere"
    shutil.move(str(tmp_path / "art"), str(moved))       # the artifact is relocatable too
    cm = aotc.load(moved)
    y, n = cm.run(f)
    np.testing.assert_allclose(y, want[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(n, want[1])


def test_external_weights_through_the_api(tmp_path):
    x = rand(2, 16, seed=9)
    m = graph_model([N("MatMul", ["x", "w"], ["h"]), N("Relu", ["h"], ["y"])], {"x": x}, ["y"],
                    {"w": rand(16, 8, seed=10)})
    path = tmp_path / "m.onnx"
    onnx.save(m, str(path))
    cm = aotc.compile(path, output_dir=tmp_path / "out", weights="external")
    assert cm.manifest["weights"]["mode"] == "external"
    (y,) = aotc.load(tmp_path / "out").run([x])
    np.testing.assert_allclose(y, ort_run(m, {"x": x})[0], rtol=1e-5, atol=1e-6)
    (tmp_path / "out" / "m.weights").write_bytes(b"short")
    with pytest.raises(ArtifactError, match="wrong size"):
        aotc.load(tmp_path / "out")


def test_load_refuses_what_is_not_an_artifact(tmp_path):
    with pytest.raises(ArtifactError, match="has no manifest.json") as info:
        aotc.load(tmp_path)
    assert "aotc compile" in info.value.hint
    (tmp_path / "manifest.json").write_text(json.dumps({"name": "m", "library": "libm_missing.so"}))
    with pytest.raises(ArtifactError, match="is missing"):
        aotc.load(tmp_path)


def test_compile_with_shapes_and_consts(tmp_path):
    """The Python spellings of --shape and --const."""
    x = helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["n", 6])
    s = helper.make_tensor_value_info("target", onnx.TensorProto.INT64, [2])
    g = helper.make_graph([N("Reshape", ["x", "target"], ["r"]), N("Sigmoid", ["r"], ["y"])], "g", [x, s],
                          [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    path = tmp_path / "m.onnx"
    onnx.save(m, str(path))
    target = np.array([3, 4])
    cm = aotc.compile(path, output_dir=tmp_path / "out", shapes={"x": (2, 6)}, consts={"target": target})
    assert cm.input_names == ["x"]
    xv = rand(2, 6, seed=11)
    (y,) = cm.run({"x": xv})
    np.testing.assert_allclose(y, ort_run(m, {"x": xv, "target": target})[0], rtol=1e-5, atol=1e-6)


def test_recompiling_into_the_same_directory_loads_the_new_model(tmp_path):
    """dlopen() caches libraries by path: the second compile into `out` must not run the
    first model's code."""
    x = rand(2, 3, seed=12)
    path = tmp_path / "m.onnx"
    results = []
    for k in range(3):
        m = graph_model([N("MatMul", ["x", "w"], ["y"])], {"x": x}, ["y"], {"w": rand(3, 4, seed=13 + k)})
        onnx.save(m, str(path))
        cm = aotc.compile(path, output_dir=tmp_path / "out")
        (y,) = cm.run([x])
        np.testing.assert_allclose(y, ort_run(m, {"x": x})[0], rtol=1e-5, atol=1e-6)
        results.append((cm, y))
    # the earlier instances still run their own model
    for cm, y in results:
        np.testing.assert_array_equal(cm.run([x])[0], y)
    assert not np.allclose(results[0][1], results[1][1])


def test_weights_auto_goes_external_above_8_mib(tmp_path):
    x = rand(2, 1100, seed=14)
    m = graph_model([N("MatMul", ["x", "w"], ["y"])], {"x": x}, ["y"], {"w": rand(1100, 2000, seed=15)})
    path = tmp_path / "big.onnx"
    onnx.save(m, str(path))
    cm = aotc.compile(path, output_dir=tmp_path / "out")          # weights="auto"
    assert cm.manifest["weights"]["mode"] == "external"
    assert (tmp_path / "out" / "big.weights").stat().st_size == cm.manifest["weights"]["bytes"] > 8 << 20
    assert not (tmp_path / "out" / "big_weights.c").exists()
    (y,) = cm.run([x])
    np.testing.assert_allclose(y, ort_run(m, {"x": x})[0], rtol=1e-4, atol=1e-4)
