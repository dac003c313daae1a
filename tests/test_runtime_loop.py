"""Loops whose number of iterations is known only at run time (passes/control.py host_loop,
passes/loops.py, the host programs' `while`): the body compiles once and the host program
repeats it while the loop's flag holds. Against ONNX Runtime on fresh random inputs, on the C
target, the thread pool, OpenCL (PoCL) and the CUDA emulation: a run-time trip count and
condition (zero, one and many iterations, the condition ending it first or the count); a
while loop as exporters write it (M = INT64_MAX); a constant trip count with a run-time
condition (the first iteration unrolled, the rest run by the host); a constant trip count
beyond the unrolling limit; a body reading values computed before the loop, which must
outlive every iteration (the nested loops fail without it); nested host loops; a host loop
inside an If decided at run time and an If inside a host loop. Refused by name: scan outputs,
carried values that change shape, random ops in the body."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto as TP
from onnx import helper, numpy_helper

from aotc.compiler import compile_program, compile_model
from aotc.errors import UnsupportedError
from aotc.inspection import format_text, inspect_model
from aotc.program.ir import HostWhile
from tests.helpers import assert_parity
from tests.test_attention import TARGETS, _target
from tests.test_runtime_if import _model, _vi

N = helper.make_node
INT64_MAX = np.iinfo(np.int64).max


def _body(nodes, carried, inits=(), extra_out=(), pre=""):
    """A Loop body: inputs (i, cond_in, *carried), outputs (cond_out, *carried outs, *extra_out)
    (the first two and the last named with the prefix `pre`: names are unique across scopes);
    `carried`: [(in name, out name, shape, type)]."""
    ins = [_vi(pre + "i", [], TP.INT64), _vi(pre + "c_in", [], TP.BOOL)] + [_vi(a, s, t) for a, _, s, t in carried]
    outs = [_vi(pre + "c_out", [], TP.BOOL)] + [_vi(b, s, t) for _, b, s, t in carried] + list(extra_out)
    return helper.make_graph(nodes, "body", ins, outs, initializer=[numpy_helper.from_array(a, n) for n, a in inits])


def halving_loop():
    """y <- tanh(y / 2 + z) + y / 2 + z, acc <- acc + i, while acc + sum(y) / 100 < lim and
    i < M; z = Relu(x) * 3 computed before the loop and read by the body's first kernel only."""
    body = _body([N("Mul", ["y_in", "half"], ["t"]), N("Add", ["t", "z"], ["u"]), N("Tanh", ["u"], ["v"]),
                  N("Add", ["v", "u"], ["y_out"]),
                  N("Cast", ["i"], ["fi"], to=TP.FLOAT), N("Add", ["acc_in", "fi"], ["acc_out"]),
                  N("ReduceSum", ["y_out"], ["s"], keepdims=0), N("Mul", ["s", "cent"], ["sc"]),
                  N("Add", ["acc_out", "sc"], ["tot"]), N("Less", ["tot", "lim"], ["c_out"])],
                 [("y_in", "y_out", [2, 3], TP.FLOAT), ("acc_in", "acc_out", [], TP.FLOAT)],
                 [("half", np.array(0.5, np.float32)), ("cent", np.array(0.01, np.float32))])
    nodes = [N("Relu", ["x"], ["r"]), N("Mul", ["r", "three"], ["z"]),
             N("Loop", ["M", "c0", "y0", "a0"], ["y", "acc"], body=body), N("Mul", ["y", "z"], ["yz"])]
    return _model(nodes, [_vi("x", [2, 3]), _vi("M", [], TP.INT64), _vi("c0", [], TP.BOOL), _vi("y0", [2, 3]),
                          _vi("lim", [])],
                  [_vi("yz", [2, 3]), _vi("acc", [])],
                  [("a0", np.array(0, np.float32)), ("three", np.array(3, np.float32))])


def _feeds(rng, M, c0, lim):
    return {"x": rng.standard_normal((2, 3)).astype(np.float32), "M": np.array(M, np.int64), "c0": np.array(c0),
            "y0": rng.standard_normal((2, 3)).astype(np.float32), "lim": np.array(lim, np.float32)}


# (M, c0, lim): many iterations ended by M; none (M = 0; c0 false); one (the condition fails
# after the first); ended by the condition; a while loop (M = INT64_MAX)
CASES = [(9, True, 1e9), (0, True, 1e9), (4, False, 1e9), (6, True, -1e9), (500, True, 40.0), (INT64_MAX, True, 40.0)]


@pytest.mark.parametrize("kind", TARGETS)
def test_run_time_trip_count_and_condition(kind, tmp_path):
    target, build, threads = _target(kind, tmp_path)
    rng = np.random.default_rng(11)
    for k, (M, c0, lim) in enumerate(CASES):
        d = tmp_path / str(k)
        d.mkdir()
        assert_parity(halving_loop(), d, _feeds(rng, M, c0, lim), target=target, threads=threads, build=build)


def test_aotc_check_draws_trip_counts_that_go_round(tmp_path):
    """Without given inputs, `aotc check` draws a Loop's trip count (at the top, or read inside
    an If's branch) from [0, 8), not {0, 1} as other integers, and matches ONNX Runtime."""
    from aotc.check.inputs import sample_inputs
    from aotc.ops.control import TRIP_COUNTS
    from aotc.check.runner import run_check
    from aotc.frontend import import_model, load_onnx
    for k, model in enumerate((nested_loops(), loop_and_if())):
        path = tmp_path / f"m{k}.onnx"
        onnx.save(model, str(path))
        g = import_model(load_onnx(path), "m", {})
        draws = [int(sample_inputs(g, seed)["M"]) for seed in range(30)]
        assert min(draws) >= 0 and max(draws) == TRIP_COUNTS - 1, draws
        res = run_check(path, target="c", output_dir=tmp_path / f"out{k}", threads=1)
        assert res.passed, [(o.name, o.max_abs_err) for o in res.outputs]


def test_the_host_loop_is_one_while_around_the_body(tmp_path):
    path = tmp_path / "m.onnx"
    onnx.save(halving_loop(), str(path))
    c = compile_program(path, target="c", threads=1)
    loops = [op for op in c.program.body if isinstance(op, HostWhile)]
    assert len(loops) == 1
    inside = [ln.kernel.comment for ln in loops[0].body]
    assert all("Loop_" in x or "/body/" in x for x in inside), inside
    assert not any("Relu" in x for x in inside)           # computed once, before the loop
    compile_model(path, target="c", output_dir=tmp_path / "out", threads=1)
    assert (tmp_path / "out" / "m.c").read_text().count("while (ws[") == 1
    text = format_text(inspect_model(path, target="c"))
    body = [line for line in text.splitlines() if "[host loop: Loop_" in line]
    assert len(body) == len(loops[0].body) and "Carry:Loop_2/end" in body[-1], text


def count_loop(cond_from_data: bool):
    """A Loop with the constant trip count 12; with `cond_from_data` its body's condition is
    computed (x's running sum below a bound): the first iteration is unrolled, and the rest run
    in the host program from iteration 1 on."""
    cond = [N("ReduceSum", ["s_out"], ["tot"], keepdims=0), N("Less", ["tot", "bound"], ["c_out"])] \
        if cond_from_data else [N("Identity", ["c_in"], ["c_out"])]
    body = _body([N("Add", ["s_in", "x"], ["s_out"]), N("Cast", ["i"], ["f"], to=TP.FLOAT),
                  N("Mul", ["f", "s_out"], ["w"]), N("Add", ["w_in", "w"], ["w_out"])] + cond,
                 [("s_in", "s_out", [4], TP.FLOAT), ("w_in", "w_out", [4], TP.FLOAT)])
    return _model([N("Loop", ["M", "", "s0", "s0"], ["s", "wsum"], body=body)],
                  [_vi("x", [4]), _vi("bound", [])], [_vi("s", [4]), _vi("wsum", [4])],
                  [("M", np.array(12, np.int64)), ("s0", np.zeros(4, np.float32))])


@pytest.mark.parametrize("kind", ["c", "opencl", "cuda-eager"])
def test_constant_trip_count_with_a_run_time_condition(kind, tmp_path):
    target, build, threads = _target(kind, tmp_path)
    rng = np.random.default_rng(3)
    for k, bound in enumerate([1e9, 3.0, -1.0]):
        d = tmp_path / str(k)
        d.mkdir()
        feeds = {"x": rng.random(4).astype(np.float32), "bound": np.array(bound, np.float32)}
        assert_parity(count_loop(True), d, feeds, target=target, threads=threads, build=build)
    path = tmp_path / "m.onnx"
    onnx.save(count_loop(True), str(path))
    assert any(isinstance(op, HostWhile) for op in compile_program(path, target="c", threads=1).program.body)
    onnx.save(count_loop(False), str(path))        # the condition folds: unrolled, no host loop
    assert not any(isinstance(op, HostWhile) for op in compile_program(path, target="c", threads=1).program.body)


def test_iterations_beyond_the_unrolling_limit_run_in_the_host(tmp_path, monkeypatch):
    import aotc.passes.control as control
    monkeypatch.setattr(control, "MAX_UNROLL", 3)
    rng = np.random.default_rng(6)
    feeds = {"x": rng.random(4).astype(np.float32), "bound": np.array(1e9, np.float32)}
    assert_parity(count_loop(False), tmp_path, feeds)
    path = tmp_path / "model.onnx"           # (where assert_parity saved it)
    assert any(isinstance(op, HostWhile) for op in compile_program(path, target="c", threads=1).program.body)


def nested_loops():
    """for i < M: (for j < K: a <- a * 0.9 + i) ; b <- b + a."""
    inner = _body([N("Mul", ["ia_in", "p9"], ["t"]), N("Cast", ["i_outer"], ["fi"], to=TP.FLOAT),
                   N("Add", ["t", "fi"], ["ia_out"]), N("Identity", ["in_c_in"], ["in_c_out"])],
                  [("ia_in", "ia_out", [3], TP.FLOAT)], [("p9", np.array(0.9, np.float32))], pre="in_")
    outer = _body([N("Identity", ["i"], ["i_outer"]), N("Loop", ["K", "", "a_in"], ["a_out"], body=inner),
                   N("Add", ["b_in", "a_out"], ["b_out"]), N("Identity", ["c_in"], ["c_out"])],
                  [("a_in", "a_out", [3], TP.FLOAT), ("b_in", "b_out", [3], TP.FLOAT)])
    return _model([N("Loop", ["M", "", "a0", "b0"], ["a", "b"], body=outer)],
                  [_vi("M", [], TP.INT64), _vi("K", [1], TP.INT64), _vi("a0", [3]), _vi("b0", [3])],
                  [_vi("a", [3]), _vi("b", [3])])


@pytest.mark.parametrize("kind", ["c", "threads", "opencl", "cuda-eager"])
def test_nested_host_loops(kind, tmp_path):
    target, build, threads = _target(kind, tmp_path)
    rng = np.random.default_rng(4)
    for k, (M, K) in enumerate([(3, 4), (5, 0), (0, 2), (1, 1)]):
        d = tmp_path / str(k)
        d.mkdir()
        feeds = {"M": np.array(M), "K": np.array([K]), "a0": rng.standard_normal(3).astype(np.float32),
                 "b0": rng.standard_normal(3).astype(np.float32)}
        assert_parity(nested_loops(), d, feeds, target=target, threads=threads, build=build)


def loop_and_if():
    """If sum(x) > 0: (Loop M: y <- y * 1.5 - x, with an If on i % 2 inside) else: x - 1."""
    odd = helper.make_graph([N("Add", ["y_in", "one"], ["o"])], "odd", [], [_vi("o", [2, 2])],
                            initializer=[numpy_helper.from_array(np.array(1, np.float32), "one")])
    even = helper.make_graph([N("Neg", ["y_in"], ["e"])], "even", [], [_vi("e", [2, 2])])
    body = _body([N("Mod", ["i", "two"], ["m"]), N("Equal", ["m", "one_i"], ["is_odd"]),
                  N("If", ["is_odd"], ["p"], then_branch=odd, else_branch=even),
                  N("Mul", ["p", "k"], ["q"]), N("Sub", ["q", "x"], ["y_out"]), N("Identity", ["c_in"], ["c_out"])],
                 [("y_in", "y_out", [2, 2], TP.FLOAT)],
                 [("two", np.array(2, np.int64)), ("one_i", np.array(1, np.int64)), ("k", np.array(1.5, np.float32))])
    then = helper.make_graph([N("Loop", ["M", "", "x"], ["t"], body=body)], "then", [], [_vi("t", [2, 2])])
    els = helper.make_graph([N("Sub", ["x", "one_f"], ["e"])], "else", [], [_vi("e", [2, 2])],
                            initializer=[numpy_helper.from_array(np.array(1, np.float32), "one_f")])
    return _model([N("ReduceSum", ["x"], ["s"], keepdims=0), N("Greater", ["s", "zero"], ["c"]),
                   N("If", ["c"], ["y"], then_branch=then, else_branch=els)],
                  [_vi("x", [2, 2]), _vi("M", [], TP.INT64)], [_vi("y", [2, 2])], [("zero", np.array(0, np.float32))])


@pytest.mark.parametrize("kind", ["c", "opencl", "cuda-eager"])
def test_host_loop_inside_an_if_and_an_if_inside_it(kind, tmp_path):
    target, build, threads = _target(kind, tmp_path)
    rng = np.random.default_rng(8)
    for k, (sign, M) in enumerate([(1, 5), (1, 0), (-1, 5), (1, 2)]):
        d = tmp_path / str(k)
        d.mkdir()
        x = (sign * np.abs(rng.standard_normal((2, 2)))).astype(np.float32)
        assert_parity(loop_and_if(), d, {"x": x, "M": np.array(M)}, target=target, threads=threads, build=build)


def _refused(model, tmp_path, match):
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    with pytest.raises(UnsupportedError, match=match):
        compile_model(path, target="c", output_dir=tmp_path / "out")


def test_scan_outputs_changing_shapes_and_random_ops_are_refused(tmp_path):
    scan = _body([N("Add", ["y_in", "y_in"], ["y_out"]), N("Identity", ["c_in"], ["c_out"]),
                  N("Identity", ["y_out"], ["sc"])], [("y_in", "y_out", [2], TP.FLOAT)], extra_out=[_vi("sc", [2])])
    _refused(_model([N("Loop", ["M", "", "y0"], ["y", "ys"], body=scan)], [_vi("M", [], TP.INT64), _vi("y0", [2])],
                    [_vi("y", [2]), _vi("ys", [None, 2])]), tmp_path, "scan outputs")
    grow = _body([N("Concat", ["y_in", "y_in"], ["y_out"], axis=0), N("Identity", ["c_in"], ["c_out"])],
                 [("y_in", "y_out", None, TP.FLOAT)])
    _refused(_model([N("Loop", ["M", "", "y0"], ["y"], body=grow)], [_vi("M", [], TP.INT64), _vi("y0", [2])],
                    [_vi("y", [None])]), tmp_path, r"changes from float32 \[2\] to float32 \[4\]")
    rand = _body([N("RandomUniformLike", ["y_in"], ["r"]), N("Add", ["y_in", "r"], ["y_out"]),
                  N("Identity", ["c_in"], ["c_out"])], [("y_in", "y_out", [2], TP.FLOAT)])
    _refused(_model([N("Loop", ["M", "", "y0"], ["y"], body=rand)], [_vi("M", [], TP.INT64), _vi("y0", [2])],
                    [_vi("y", [2])]), tmp_path, "draws random numbers")
