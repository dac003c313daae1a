"""The ONNX frontend: what it refuses (clearly), what it accepts, and that what it accepts
computes what ONNX Runtime computes."""
from __future__ import annotations

import builtins
import json
import os
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import aotc
from aotc.errors import ModelError, ShapeError, UnsupportedError
from aotc.frontend import import_model, load_onnx
from models.zoo import ZOO
from tests.helpers import assert_parity, graph_model, rand

N = helper.make_node


def save(model, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return path


def mlp_bytes() -> bytes:
    return ZOO["mlp"].build("small").SerializeToString()


# ------------------------------------------------------------------------------------------ not a model
@pytest.mark.parametrize("content", [b"hello, this is a text file\n", b"", b'{"graph": []}',
                                     bytes(np.random.default_rng(0).integers(0, 256, 4096, dtype=np.uint8))])
def test_a_file_that_is_not_onnx(content, tmp_path):
    p = tmp_path / "model.onnx"
    p.write_bytes(content)
    with pytest.raises(ModelError, match="is not an ONNX model") as info:
        load_onnx(p)
    assert "truncated" in info.value.hint


@pytest.mark.parametrize("keep", [0.002, 0.05, 0.3, 0.7, 0.95, 0.9995])
def test_a_truncated_file(keep, tmp_path):
    data = mlp_bytes()
    p = tmp_path / "model.onnx"
    p.write_bytes(data[:int(len(data) * keep)])
    with pytest.raises(ModelError, match="is not an ONNX model"):
        load_onnx(p)


def test_every_tail_cut_is_refused(tmp_path):
    """Cutting the last bytes (where opset_import lives) must not yield a model either."""
    data = mlp_bytes()
    p = tmp_path / "model.onnx"
    for k in range(1, 40):
        p.write_bytes(data[:-k])
        with pytest.raises(ModelError):
            load_onnx(p)


def test_missing_file_and_directory(tmp_path):
    with pytest.raises(ModelError, match="no such file"):
        load_onnx(tmp_path / "nope.onnx")
    with pytest.raises(ModelError, match="is a directory"):
        load_onnx(tmp_path)


# ------------------------------------------------------------------------------------------ bad graphs
def test_a_graph_with_a_cycle():
    x = rand(2, 3)
    m = graph_model([N("Add", ["x", "t2"], ["t1"], name="add"), N("Relu", ["t1"], ["t2"], name="relu"),
                     N("Neg", ["t2"], ["y"], name="neg")], {"x": x}, ["y"])
    with pytest.raises(ModelError, match="cycle through node '(add|relu)'"):
        import_model(m)


def test_a_node_that_reads_its_own_output():
    m = graph_model([N("Relu", ["t"], ["t"], name="self_loop"), N("Add", ["x", "t"], ["y"])], {"x": rand(2)}, ["y"])
    with pytest.raises(ModelError, match="cycle through node 'self_loop'"):
        import_model(m)


def test_a_dangling_input():
    m = graph_model([N("Add", ["x", "ghost"], ["y"], name="adder")], {"x": rand(2, 3)}, ["y"])
    with pytest.raises(ModelError, match="node 'adder' \\(Add\\) reads 'ghost', which nothing produces") as info:
        import_model(m)
    assert "dangling" in info.value.hint


def test_a_value_produced_twice_and_an_output_nothing_computes():
    m = graph_model([N("Relu", ["x"], ["y"], name="a"), N("Neg", ["x"], ["y"], name="b")], {"x": rand(2)}, ["y"])
    with pytest.raises(ModelError, match="'y' is produced twice"):
        import_model(m)
    m = graph_model([N("Relu", ["x"], ["r"])], {"x": rand(2)}, ["r", "missing"])
    with pytest.raises(ModelError, match="graph output 'missing' is not computed"):
        import_model(m)


def test_inputs_that_are_not_tensors_or_have_unsupported_types():
    g = helper.make_graph([N("Identity", ["s"], ["y"])], "g",
                          [helper.make_tensor_sequence_value_info("s", TensorProto.FLOAT, [2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    with pytest.raises(UnsupportedError, match="graph input 's' is not a tensor but a sequence"):
        import_model(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
    g = helper.make_graph([N("Identity", ["s"], ["y"])], "g",
                          [helper.make_tensor_value_info("s", TensorProto.STRING, [2])],
                          [helper.make_tensor_value_info("y", TensorProto.STRING, [2])])
    with pytest.raises(UnsupportedError, match="graph input 's'"):
        import_model(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))


def test_opset_older_than_7_is_refused_where_an_op_was_redefined(tmp_path):
    # Add-6 broadcasts only with its `broadcast` attribute; Add-7 broadcasts as numpy does
    m = graph_model([N("Relu", ["x"], ["r"]), N("Add", ["r", "x"], ["y"])], {"x": rand(2, 3)}, ["y"], opset=6)
    p = save(m, tmp_path / "old.onnx")
    with pytest.raises(ModelError, match=r"opset 6 is older than the oldest supported, 7, and these operators "
                                         r"were redefined since: Add \(version 6, redefined in 7\)$") as info:
        aotc.compile(p, output_dir=tmp_path / "out")
    assert "re-export" in info.value.hint and "convert_version" in info.value.hint
    assert not (tmp_path / "out").exists()


def test_opset_older_than_7_is_compiled_as_7_where_no_op_changed(tmp_path):
    # Relu-6 and Not-1 are the definitions in force at opset 7; the ops of an If body count too
    x = rand(3, 4, seed=5)
    body_then = helper.make_graph([N("Relu", ["x"], ["t"])], "then", [],
                                  [helper.make_tensor_value_info("t", TensorProto.FLOAT, None)])
    body_else = helper.make_graph([N("Neg", ["x"], ["e"])], "else", [],
                                  [helper.make_tensor_value_info("e", TensorProto.FLOAT, None)])
    m = graph_model([N("Relu", ["x"], ["r"]), N("Constant", [], ["c"],
                                                 value=helper.make_tensor("c", TensorProto.BOOL, [], [True])),
                     N("If", ["c"], ["y"], then_branch=body_then, else_branch=body_else)],
                    {"x": x}, ["y"], opset=6)
    out = aotc.compile(save(m, tmp_path / "old.onnx"), output_dir=tmp_path / "out")
    np.testing.assert_array_equal(out.run({"x": x})[0], np.maximum(x, 0))
    m = graph_model([N("Sin", ["x"], ["y"])], {"x": x}, ["y"], opset=6)      # Sin appears in opset 7
    with pytest.raises(ModelError, match="opset 6 defines no Sin"):
        aotc.compile(save(m, tmp_path / "older.onnx"), output_dir=tmp_path / "out1")


def test_opset_7_is_accepted(tmp_path):
    x = rand(3, 4, seed=1)
    m = graph_model([N("Sigmoid", ["x"], ["s"]), N("Mul", ["s", "x"], ["y"])], {"x": x}, ["y"], opset=7)
    assert_parity(m, tmp_path, {"x": x})


# ------------------------------------------------------------------------------------------ external data
def _external_model(tmp_path: Path):
    """A model whose two weights live in one external file, at different offsets."""
    x = rand(2, 8, seed=2)
    w1, w2 = rand(8, 40, seed=3), rand(40, 5, seed=4)
    m = graph_model([N("MatMul", ["x", "w1"], ["h"]), N("Tanh", ["h"], ["t"]), N("MatMul", ["t", "w2"], ["y"])],
                    {"x": x}, ["y"], {"w1": w1, "w2": w2})
    d = tmp_path / "model_dir"
    d.mkdir()
    onnx.save(m, str(d / "model.onnx"), save_as_external_data=True, all_tensors_to_one_file=True,
              location="weights.bin", size_threshold=0)
    return d / "model.onnx", x, (w1, w2)


def test_external_data_inside_the_folder_loads(tmp_path):
    path, x, (w1, w2) = _external_model(tmp_path)
    assert (path.parent / "weights.bin").stat().st_size >= w1.nbytes + w2.nbytes
    g = import_model(load_onnx(path))
    np.testing.assert_array_equal(g.values["w1"].const, w1)
    np.testing.assert_array_equal(g.values["w2"].const, w2)
    from aotc.check.runner import run_check
    res = run_check(path, inputs={"x": x}, output_dir=tmp_path / "out")
    assert res.passed and res.outputs[0].max_abs_err < 1e-4


def _point_external_data(path: Path, location: str, dest: Path) -> Path:
    m = onnx.load(str(path), load_external_data=False)
    for t in m.graph.initializer:
        for e in t.external_data:
            if e.key == "location":
                e.value = location
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_bytes(m.SerializeToString())
    return dest


@pytest.mark.parametrize("where", ["parent", "absolute", "dotdot_inside_path", "symlink_out"])
def test_external_data_outside_the_folder_is_refused_without_reading_it(where, tmp_path, monkeypatch):
    path, _, _ = _external_model(tmp_path)
    secret = tmp_path / "weights.bin"                        # a valid copy, one level up
    secret.write_bytes((path.parent / "weights.bin").read_bytes())
    sub = tmp_path / "model_dir" / "sub"
    sub.mkdir()
    location = {"parent": "../../weights.bin", "absolute": str(secret),
                "dotdot_inside_path": "a/../../../weights.bin", "symlink_out": "link.bin"}[where]
    if where == "symlink_out":
        (sub / "link.bin").symlink_to(secret)
    model_path = _point_external_data(path, location, sub / "model.onnx")

    opened = []
    real_open = builtins.open

    def spy(file, *a, **kw):
        opened.append(Path(file).resolve() if isinstance(file, (str, os.PathLike)) else file)
        return real_open(file, *a, **kw)
    monkeypatch.setattr(builtins, "open", spy)
    with pytest.raises(ModelError, match="outside the model's folder") as info:
        load_onnx(model_path)
    monkeypatch.undo()
    assert secret.resolve() not in opened, "the file outside the model's folder was read"
    assert "model's folder" in info.value.hint


def test_external_data_missing_or_too_short(tmp_path):
    path, _, _ = _external_model(tmp_path)
    bad = _point_external_data(path, "nothere.bin", tmp_path / "model_dir" / "m2.onnx")
    with pytest.raises(ModelError, match="'nothere.bin' not found"):
        load_onnx(bad)
    data = path.parent / "weights.bin"
    data.write_bytes(data.read_bytes()[:100])
    with pytest.raises(ModelError, match="shorter than the tensor needs"):
        load_onnx(path)


# ------------------------------------------------------------------------------------------ local functions
def _function_model(nested: bool):
    add_relu = helper.make_function(
        "custom", "AddRelu", ["a", "b"], ["c"],
        [N("Add", ["a", "b"], ["s"]), N("Relu", ["s"], ["c"])], [helper.make_opsetid("", 17)])
    funcs = [add_relu]
    op = "AddRelu"
    if nested:
        funcs.append(helper.make_function(
            "custom", "Block", ["a", "b"], ["c"],
            [N("AddRelu", ["a", "b"], ["h"], domain="custom"), N("Tanh", ["h"], ["c"])],
            [helper.make_opsetid("", 17), helper.make_opsetid("custom", 1)]))
        op = "Block"
    b = rand(8, seed=5)
    g = helper.make_graph([N(op, ["x", "b"], ["h"], domain="custom"), N(op, ["h", "b"], ["y"], domain="custom")],
                          "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])],
                          [numpy_helper.from_array(b, "b")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("custom", 1)],
                          functions=funcs)
    m.ir_version = 8
    return m


@pytest.mark.parametrize("nested", [False, True])
def test_local_functions_are_inlined_and_compile(nested, tmp_path):
    m = _function_model(nested)
    p = save(m, tmp_path / "f.onnx")
    g = import_model(load_onnx(p))
    assert {n.domain for n in g.nodes} == {""}
    assert sorted({n.op_type for n in g.nodes}) == (["Add", "Relu", "Tanh"] if nested else ["Add", "Relu"])
    x = rand(2, 8, seed=6)
    assert_parity(m, tmp_path, {"x": x})


# ------------------------------------------------------------------------------------------ shapes and constants
def _symbolic_model():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 6])
    g = helper.make_graph([N("MatMul", ["x", "w"], ["h"]), N("Relu", ["h"], ["y"])], "g", [x],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3])],
                          [numpy_helper.from_array(rand(6, 3, seed=7), "w")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def test_unbound_symbolic_dims_name_the_input_and_the_flag(tmp_path):
    p = save(_symbolic_model(), tmp_path / "sym.onnx")
    with pytest.raises(ShapeError) as info:
        aotc.compile(p, output_dir=tmp_path / "out")
    e = info.value
    assert "input 'x' has unbound symbolic dimensions (batchx6)" in e.message
    assert "--shape x=1x6" in e.hint


def test_every_unbound_input_is_named_at_once(tmp_path):
    """Two inputs with symbolic dims: one error naming both, and a hint with both flags."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 6])
    m_ = helper.make_tensor_value_info("m", TensorProto.FLOAT, ["batch", "seq"])
    g = helper.make_graph([N("Relu", ["x"], ["y"]), N("Relu", ["m"], ["z"])], "g", [x, m_],
                          [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in ("y", "z")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(ShapeError) as info:
        import_model(model)
    assert "inputs 'x' (batchx6), 'm' (batchxseq) have unbound symbolic dimensions" in info.value.message
    assert "--shape x=1x6 --shape m=1x1" in info.value.hint
    import_model(model, shapes={"x": (2, 6), "m": (2, 3)})


def test_input_without_any_shape_asks_for_one(tmp_path):
    g = helper.make_graph([N("Relu", ["x"], ["y"])], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, None)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(ShapeError, match=r"input 'x' has unbound symbolic dimensions \(\?\)") as info:
        import_model(m)
    assert "--shape x=" in info.value.hint


@pytest.mark.parametrize("batch", [1, 5])
def test_shape_binding(batch, tmp_path):
    m = _symbolic_model()
    x = rand(batch, 6, seed=8)
    res = assert_parity(m, tmp_path, {"x": x}, shapes={"x": (batch, 6)})
    assert res.outputs[0].shape == [batch, 3]
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["inputs"][0]["shape"] == [batch, 6]


def test_const_binding_folds_the_input_away(tmp_path):
    """`scale` and `target` are graph inputs bound at compile time: they disappear from the
    compiled interface, the Reshape's shape becomes constant and Mul by a constant folds."""
    x = rand(2, 6, seed=9)
    nodes = [N("Mul", ["scale", "two"], ["s2"]), N("Mul", ["x", "s2"], ["m"]), N("Reshape", ["m", "target"], ["y"])]
    m = graph_model(nodes, {"x": x, "scale": rand(6, seed=10), "target": np.array([3, 4])}, ["y"],
                    {"two": np.float32(2.0)})
    consts = {"scale": rand(6, seed=11), "target": np.array([4, 3])}
    res = assert_parity(m, tmp_path, {"x": x}, consts=consts)
    assert res.outputs[0].shape == [4, 3]
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert [i["name"] for i in manifest["inputs"]] == ["x"]
    from aotc.compiler import compile_program
    c = compile_program(tmp_path / "model.onnx", consts=consts)
    assert [n.op_type for n in c.graph.nodes] == ["Mul", "Reshape"]
    np.testing.assert_allclose(c.graph.const(c.graph.nodes[0].inputs[1]), consts["scale"] * 2)


def test_const_binding_with_the_wrong_rank(tmp_path):
    x = rand(2, 6, seed=12)
    m = graph_model([N("Reshape", ["x", "target"], ["y"])], {"x": x, "target": np.array([3, 4])}, ["y"])
    p = save(m, tmp_path / "m.onnx")
    with pytest.raises(ShapeError, match="--const target: array has rank 2, the model says 1"):
        aotc.compile(p, output_dir=tmp_path / "out", consts={"target": np.array([[3, 4]])})


def test_initializer_also_listed_as_graph_input(tmp_path):
    """Old exporters list every weight as a graph input too: it is a constant, not an input."""
    x = rand(3, 4, seed=13)
    w = rand(4, 2, seed=14)
    g = helper.make_graph([N("MatMul", ["x", "w"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4]),
                           helper.make_tensor_value_info("w", TensorProto.FLOAT, [4, 2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 2])],
                          [numpy_helper.from_array(w, "w")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 9)])
    m.ir_version = 3
    gi = import_model(m)
    assert gi.inputs == ["x"] and gi.values["w"].const is not None
    assert_parity(m, tmp_path, {"x": x})
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert [i["name"] for i in manifest["inputs"]] == ["x"]


def test_const_overrides_an_initializer_listed_as_input(tmp_path):
    """Such an initializer is only the input's default: --const replaces it, as a feed does in ORT."""
    x = rand(3, 4, seed=15)
    g = helper.make_graph([N("MatMul", ["x", "w"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4]),
                           helper.make_tensor_value_info("w", TensorProto.FLOAT, [4, 2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 2])],
                          [numpy_helper.from_array(rand(4, 2, seed=16), "w")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 7
    w = rand(4, 2, seed=17)
    res = assert_parity(m, tmp_path, {"x": x}, consts={"w": w})
    assert res.outputs[0].max_abs_err < 1e-5
    cm = aotc.load(tmp_path / "out")
    np.testing.assert_allclose(cm.run([x])[0], x @ w, rtol=1e-5, atol=1e-6)


def test_nodes_out_of_order_unused_inputs_and_no_nodes(tmp_path):
    """Nodes listed consumer-first are sorted; an unused input stays in the interface (it is
    part of the model's signature); a model with no nodes copies its input."""
    x, z = rand(2, 3, seed=18), rand(4, seed=19)
    m = graph_model([N("Exp", ["r"], ["y"]), N("Relu", ["x"], ["r"])], {"x": x, "z": z}, ["y"])
    assert [n.op_type for n in import_model(m).nodes] == ["Relu", "Exp"]
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    assert_parity(m, tmp_path / "a", {"x": x, "z": z})
    assert [i["name"] for i in json.loads((tmp_path / "a" / "out" / "manifest.json").read_text())["inputs"]] == \
        ["x", "z"]
    assert_parity(graph_model([], {"x": x}, ["x"]), tmp_path / "b", {"x": x})


def test_sparse_initializers_are_named_not_reported_as_dangling():
    values = numpy_helper.from_array(np.array([1.5, -2.0], np.float32), "w")
    sparse = helper.make_sparse_tensor(values, numpy_helper.from_array(np.array([0, 3], np.int64), "w_idx"), [4])
    node = helper.make_node("Add", ["x", "w"], ["y"])
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])], sparse_initializer=[sparse])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(UnsupportedError) as e:
        import_model(m)
    assert "sparse initializer 'w'" in e.value.message
    assert "operator" not in e.value.message
