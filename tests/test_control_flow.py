"""Control flow known at compile time. If: the branch taken is inlined (condition from shapes, from
initializers, from --const inputs; nested Ifs; branches with their own initializers and reads
of enclosing scopes), against ONNX Runtime on random inputs (an If decided at run time:
tests/test_runtime_if.py). Unsupported ops inside a branch are refused with UnsupportedError;
ONNX's own If case with its condition bound. Loop (trip count constant or from a shape, stopped by a condition
the body computes) and Scan (every axis and direction) unrolled, against ONNX Runtime; loops
with scan outputs decided at run time or too long to unroll refused (the host program runs the
others: tests/test_runtime_loop.py); ONNX's Loop and Scan cases. Compress on a
constant condition (a Gather), refused on a run-time one."""
import numpy as np
import onnx
import pytest
from onnx import TensorProto as TP
from onnx import helper, numpy_helper

from aotc.compiler import compile_program, compile_model
from aotc.errors import UnsupportedError
from tests.helpers import assert_parity, rand, run_onnx_node_case


def _vi(name, shape=None, dt=TP.FLOAT):
    return helper.make_tensor_value_info(name, dt, shape)


def _branch(name, nodes, out, inits=(), shape=("N", 3)):
    return helper.make_graph(nodes, name, [], [_vi(out, list(shape))],
                             initializer=[numpy_helper.from_array(a, n) for n, a in inits])


def _model(nodes, inputs, outputs, inits=(), opset=17):
    g = helper.make_graph(nodes, "m", inputs, outputs, initializer=[numpy_helper.from_array(a, n) for n, a in inits])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


def _shape_if(inner_then=None):
    """y = Relu(If(x.shape[0] == 2, x * wt, x + 1)): the exporters' `if x.shape[0] == 2`."""
    then_nodes = [helper.make_node("Mul", ["x", "wt"], ["t_out"])]
    if inner_then is not None:
        then_nodes = inner_then
    then_g = _branch("then", then_nodes, "t_out", [("wt", rand(3, seed=2))])
    else_g = _branch("else", [helper.make_node("Add", ["x", "one"], ["e_out"])], "e_out")
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Gather", ["s", "i0"], ["d0"], axis=0),
             helper.make_node("Equal", ["d0", "two"], ["c"]),
             helper.make_node("If", ["c"], ["r"], then_branch=then_g, else_branch=else_g),
             helper.make_node("Relu", ["r"], ["y"])]
    inits = [("i0", np.array(0, np.int64)), ("two", np.array(2, np.int64)), ("one", np.array(1, np.float32))]
    return _model(nodes, [_vi("x", ["N", 3])], [_vi("y", ["N", 3])], inits)


@pytest.mark.parametrize("rows", [2, 5])
def test_if_on_a_shape_takes_either_branch(rows, tmp_path):
    x = rand(rows, 3, seed=rows)
    assert_parity(_shape_if(), tmp_path, {"x": x})
    path = tmp_path / "m.onnx"
    onnx.save(_shape_if(), str(path))
    c = compile_program(path, target="c", threads=1, shapes={"x": (rows, 3)})
    assert not any(n.op_type == "If" for n in c.graph.nodes)


def test_nested_if_reads_the_enclosing_branch(tmp_path):
    """The then-branch computes a value, and an If inside it (on a constant) reads that value
    and the branch's own initializer."""
    inner_then = _branch("inner_then", [helper.make_node("Mul", ["m", "wt"], ["it"])], "it")
    inner_else = _branch("inner_else", [helper.make_node("Sub", ["m", "x"], ["ie"])], "ie")
    nodes = [helper.make_node("Tanh", ["x"], ["m"]),
             helper.make_node("Constant", [], ["k"], value=numpy_helper.from_array(np.array(True))),
             helper.make_node("If", ["k"], ["t_out"], then_branch=inner_then, else_branch=inner_else)]
    x = rand(2, 3, seed=7)
    m = _shape_if(inner_then=nodes)
    assert_parity(m, tmp_path, {"x": x})


def test_if_on_a_const_input(tmp_path):
    """The condition is a graph input: bound with --const, the branch is chosen at compile time."""
    then_g = _branch("then", [helper.make_node("Sigmoid", ["x"], ["t"])], "t")
    else_g = _branch("else", [helper.make_node("Neg", ["x"], ["e"])], "e")
    m = _model([helper.make_node("If", ["flag"], ["y"], then_branch=then_g, else_branch=else_g)],
               [_vi("x", ["N", 3]), _vi("flag", [], TP.BOOL)], [_vi("y", ["N", 3])])
    x = rand(4, 3, seed=8)
    for flag in (True, False):
        (tmp_path / str(flag)).mkdir()
        assert_parity(m, tmp_path / str(flag), {"x": x}, consts={"flag": np.array(flag)})


def test_unsupported_op_inside_the_branch_taken_is_named(tmp_path):
    then_g = _branch("then", [helper.make_node("StringNormalizer", ["x"], ["t"])], "t", shape=(2, 3))
    else_g = _branch("else", [helper.make_node("Neg", ["x"], ["e"])], "e", shape=(2, 3))
    m = _model([helper.make_node("If", ["flag"], ["y"], then_branch=then_g, else_branch=else_g)],
               [_vi("x", [2, 3])], [_vi("y", [2, 3])], [("flag", np.array(True))])
    path = tmp_path / "m.onnx"
    onnx.save(m, str(path))
    with pytest.raises(UnsupportedError, match="StringNormalizer"):
        compile_model(path, output_dir=tmp_path / "out")


def test_onnx_if_case_with_its_condition_bound(tmp_path):
    """ONNX's test_if: the condition is a graph input; bound as a constant, each branch's
    expected output comes out."""
    run_onnx_node_case("test_if", tmp_path, {"cond"}, exact=True)


# ----------------------------------------------------------------------------- Loop
def _loop_body(cond_from_iter=None, data_cond=False):
    """(iter, cond, v) -> (cond, v * 0.5 + iter, v + 1): one carried value, one scan output."""
    nodes = [helper.make_node("Cast", ["iter"], ["itf"], to=TP.FLOAT),
             helper.make_node("Mul", ["v", "half"], ["vh"]),
             helper.make_node("Add", ["vh", "itf"], ["v_next"]),
             helper.make_node("Add", ["v", "one"], ["scan"])]
    if cond_from_iter is not None:          # continue while iter < cond_from_iter
        nodes.append(helper.make_node("Less", ["iter", "stop"], ["cond_out"]))
    elif data_cond:                         # continue while sum(v) < 100: known at run time only
        nodes += [helper.make_node("ReduceSum", ["v_next"], ["s"], keepdims=0),
                  helper.make_node("Less", ["s", "hundred"], ["cond_out"])]
    else:
        nodes.append(helper.make_node("Identity", ["cond"], ["cond_out"]))
    inits = [numpy_helper.from_array(np.array(0.5, np.float32), "half"),
             numpy_helper.from_array(np.array(1.0, np.float32), "one"),
             numpy_helper.from_array(np.array(cond_from_iter or 0, np.int64), "stop"),
             numpy_helper.from_array(np.array(100.0, np.float32), "hundred")]
    return helper.make_graph(nodes, "body", [_vi("iter", [], TP.INT64), _vi("cond", [], TP.BOOL), _vi("v", [2, 3])],
                             [_vi("cond_out", [], TP.BOOL), _vi("v_next", [2, 3]), _vi("scan", [2, 3])],
                             initializer=inits)


def _loop_model(trip, body, trip_from_shape=False):
    nodes, inits = [], [("c0", np.array(True))]
    if trip_from_shape:                     # M = x.shape[0], as `for i in range(x.size(0))` exports
        nodes += [helper.make_node("Shape", ["x"], ["sh"]), helper.make_node("Gather", ["sh", "i0"], ["m"], axis=0)]
        inits.append(("i0", np.array(0, np.int64)))
    else:
        inits.append(("m", np.array(trip, np.int64)))
    nodes.append(helper.make_node("Loop", ["m", "c0", "x"], ["v_final", "scans"], body=body))
    return _model(nodes, [_vi("x", [2, 3])], [_vi("v_final", [2, 3]), _vi("scans", ["T", 2, 3])], inits)


@pytest.mark.parametrize("trip", [1, 4])
def test_loop_with_a_constant_trip_count(trip, tmp_path):
    assert_parity(_loop_model(trip, _loop_body()), tmp_path, {"x": rand(2, 3, seed=trip)})


def test_loop_trip_count_from_a_shape(tmp_path):
    assert_parity(_loop_model(None, _loop_body(), trip_from_shape=True), tmp_path, {"x": rand(2, 3, seed=11)})


def test_loop_stopped_by_a_condition_the_body_computes(tmp_path):
    """M is 10, the body's condition (iter < 2, folded from the iteration number) stops it
    after 3 iterations: the scan output has 3 rows."""
    m = _loop_model(10, _loop_body(cond_from_iter=2))
    res = assert_parity(m, tmp_path, {"x": rand(2, 3, seed=12)})
    assert tuple(res.outputs[1].shape) == (3, 2, 3)


def test_loop_condition_known_at_run_time_with_scan_outputs_is_refused(tmp_path):
    """(Without scan outputs the host program runs it: tests/test_runtime_loop.py.)"""
    path = tmp_path / "m.onnx"
    onnx.save(_loop_model(10, _loop_body(data_cond=True)), str(path))
    with pytest.raises(UnsupportedError, match="Loop node .* with scan outputs and a number of iterations known only "
                                               "at run time"):
        compile_model(path, output_dir=tmp_path / "out")


def test_loop_too_long_to_unroll_is_refused(tmp_path, monkeypatch):
    import aotc.passes.control as control
    monkeypatch.setattr(control, "MAX_UNROLL", 3)
    path = tmp_path / "m.onnx"
    onnx.save(_loop_model(4, _loop_body()), str(path))
    with pytest.raises(UnsupportedError, match="scan outputs and more than 3 iterations"):
        compile_model(path, output_dir=tmp_path / "out")


# ----------------------------------------------------------------------------- Scan
def _scan_model(in_axis=0, in_dir=0, out_axis=0, out_dir=0, steps=5):
    """A running sum over the scan axis (state) and each step's state times the input (scan
    output), as an RNN export would."""
    body = helper.make_graph(
        [helper.make_node("Add", ["s", "xt"], ["s_next"]), helper.make_node("Mul", ["s_next", "xt"], ["yt"])],
        "body", [_vi("s", [4]), _vi("xt", [4])], [_vi("s_next", [4]), _vi("yt", [4])])
    x_shape = [steps, 4] if in_axis in (0, -2) else [4, steps]
    y_shape = [steps, 4] if out_axis in (0, -2) else [4, steps]
    node = helper.make_node("Scan", ["s0", "x"], ["s_final", "y"], body=body, num_scan_inputs=1,
                            scan_input_axes=[in_axis], scan_input_directions=[in_dir],
                            scan_output_axes=[out_axis], scan_output_directions=[out_dir])
    return _model([node], [_vi("s0", [4]), _vi("x", x_shape)], [_vi("s_final", [4]), _vi("y", y_shape)], opset=16), \
        x_shape


@pytest.mark.parametrize("in_axis, in_dir, out_axis, out_dir", [
    (0, 0, 0, 0), (1, 0, 0, 0), (0, 1, 0, 0), (0, 0, 1, 0), (0, 0, 0, 1), (-1, 1, -1, 1)])
def test_scan(in_axis, in_dir, out_axis, out_dir, tmp_path):
    m, x_shape = _scan_model(in_axis, in_dir, out_axis, out_dir)
    assert_parity(m, tmp_path, {"s0": rand(4, seed=13), "x": rand(*x_shape, seed=14)})


@pytest.mark.parametrize("name", ["test_scan9_sum", "test_loop11"])
def test_onnx_loop_and_scan_cases(name, tmp_path):
    """ONNX's own Loop and Scan cases (test_loop11's trip count and condition bound as
    constants, as the conformance runner cannot)."""
    run_onnx_node_case(name, tmp_path, {"trip_count", "cond"})


# ----------------------------------------------------------------------------- Compress
@pytest.mark.parametrize("axis, cond", [(None, [1, 0, 1, 1, 0, 0, 1]), (0, [0, 1, 1]), (1, [1, 0, 1]),
                                        (-1, [0, 1, 0, 1, 1]), (1, [1, 1, 1, 1])])
def test_compress_with_a_constant_condition(axis, cond, tmp_path):
    attrs = {} if axis is None else {"axis": axis}
    m = _model([helper.make_node("Compress", ["x", "c"], ["y"], **attrs)], [_vi("x", [3, 4, 5])], [_vi("y", ["k"] * (1 if axis is None else 3))],
               [("c", np.array(cond, bool))], opset=11)
    assert_parity(m, tmp_path, {"x": rand(3, 4, 5, seed=15)})


@pytest.mark.parametrize("seed", [0, 1])
def test_compress_on_a_run_time_condition(seed, tmp_path):
    """A run-time condition: an output of run-time size (passes/bounded.py), as ONNX Runtime's."""
    m = _model([helper.make_node("Compress", ["x", "c"], ["y"], axis=0)], [_vi("x", [3, 4]), _vi("c", [3], TP.BOOL)],
               [_vi("y", ["k", 4])], opset=11)
    cond = np.random.default_rng(seed).random(3) < 0.5
    assert_parity(m, tmp_path, {"x": rand(3, 4, seed=16 + seed), "c": cond})
