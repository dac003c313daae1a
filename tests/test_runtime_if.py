"""If nodes whose condition is known only at run time (passes/control.py inline_both,
passes/branches.py, the host programs' `if`): both branches compile, the host program runs the
kernels of the branch taken only. Against ONNX Runtime on fresh random inputs taking each
branch, on the C target, the thread pool, OpenCL (PoCL) and the CUDA emulation; a branch not
taken is not run (its out-of-range Gather does not fail the run, the taken one's does); nested
Ifs on two run-time conditions (four paths); branches that return outer values and constants;
a condition that is a graph input; the same node in both branches; branches whose outputs
differ in shape are refused; the run conditions' algebra."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto as TP
from onnx import helper, numpy_helper

from aotc.api import load
from aotc.compiler import compile_program, compile_model
from aotc.errors import UnsupportedError
from aotc.inspection import format_text, inspect_model
from aotc.passes.branches import ALWAYS, NEVER, both, either
from tests.helpers import assert_parity
from tests.test_attention import TARGETS, _target

N = helper.make_node


def _vi(name, shape=None, dt=TP.FLOAT):
    return helper.make_tensor_value_info(name, dt, shape)


def _graph(name, nodes, outs, inits=()):
    return helper.make_graph(nodes, name, [], [_vi(o) for o in outs],
                             initializer=[numpy_helper.from_array(a, n) for n, a in inits])


def _model(nodes, inputs, outputs, inits=()):
    g = helper.make_graph(nodes, "m", inputs, outputs, initializer=[numpy_helper.from_array(a, n) for n, a in inits])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


def sign_if():
    """y = (If sum(x) > 0: x * w + 1, x[:, idx] else: Relu(x) - 3, x[:, :2]) ** 2: the
    then-branch gathers by a run-time index input."""
    then = _graph("then", [N("Mul", ["x", "w"], ["t1"]), N("Add", ["t1", "one"], ["ty"]),
                           N("Gather", ["x", "idx"], ["tg"], axis=1)], ["ty", "tg"],
                  [("w", np.linspace(-1, 1, 4, dtype=np.float32))])
    els = _graph("else", [N("Relu", ["x"], ["e1"]), N("Sub", ["e1", "three"], ["ey"]),
                          N("Slice", ["x", "s0", "s1", "s2"], ["eg"])], ["ey", "eg"],
                 [("three", np.array(3, np.float32)), ("s0", np.array([0])), ("s1", np.array([2])),
                  ("s2", np.array([1]))])
    nodes = [N("ReduceSum", ["x"], ["s"], keepdims=0), N("Greater", ["s", "zero"], ["c"]),
             N("If", ["c"], ["y", "g"], then_branch=then, else_branch=els), N("Mul", ["y", "y"], ["y2"])]
    return _model(nodes, [_vi("x", [3, 4]), _vi("idx", [2], TP.INT64)], [_vi("y2", [3, 4]), _vi("g", [3, 2])],
                  [("zero", np.array(0, np.float32)), ("one", np.array(1, np.float32))])


def _x(sign, seed):
    return (sign * np.abs(np.random.default_rng(seed).standard_normal((3, 4)))).astype(np.float32)


@pytest.mark.parametrize("kind", TARGETS)
def test_either_branch_matches_onnxruntime(kind, tmp_path):
    target, build, threads = _target(kind, tmp_path)
    for sign, seed in ((1, 1), (-1, 2)):
        d = tmp_path / f"s{sign}"
        d.mkdir()
        feeds = {"x": _x(sign, seed), "idx": np.random.default_rng(seed).integers(-4, 4, 2)}
        assert_parity(sign_if(), d, feeds, target=target, threads=threads, build=build)
    # a device's host code reads the condition back once, for the then-block and the else-block
    read = {"opencl": "aotc_cl_flag(", "cuda-eager": "aotc_cuda_flag("}.get(kind)
    if read:
        host = next(p for p in (d / "out").iterdir() if p.suffix in (".c", ".cu") and "weights" not in p.name)
        text = host.read_text()
        assert text.count(read) == 1 and "if (aotc_cond0) {" in text and "if (!aotc_cond0) {" in text, host


@pytest.mark.parametrize("kind", ["c", "opencl", "cuda-eager"])
def test_the_branch_not_taken_does_not_run(kind, tmp_path):
    """An index out of range fails the then-branch's Gather only when the then-branch runs."""
    target, build, threads = _target(kind, tmp_path)
    path = tmp_path / "m.onnx"
    onnx.save(sign_if(), str(path))
    compile_model(path, target=target, output_dir=tmp_path / "out", threads=threads, build=build)
    m = load(tmp_path / "out")
    bad = np.array([7, -9])
    x = _x(-1, 3)
    y2, g = m.run({"x": x, "idx": bad})            # else-branch: the index is never read
    np.testing.assert_allclose(y2, (np.maximum(x, 0) - 3) ** 2, rtol=1e-6)
    np.testing.assert_array_equal(g, x[:, :2])
    with pytest.raises(Exception, match="(?i)index|range"):
        m.run({"x": _x(1, 4), "idx": bad})


def test_only_the_branches_kernels_are_guarded(tmp_path):
    """The Ifs' branch kernels run under the condition, the rest always; the generated C says so."""
    path = tmp_path / "m.onnx"
    onnx.save(sign_if(), str(path))
    c = compile_program(path, target="c", threads=1)
    guarded = {ln.kernel.name: ln.guard for ln in c.program.launches()}
    labels = {ln.kernel.name: ln.kernel.comment for ln in c.program.launches()}
    assert sum(g is not None for g in guarded.values()) == 4, labels
    for name, g in guarded.items():
        is_branch = "/then/" in labels[name] or "/else/" in labels[name]
        assert (g is not None) == is_branch, (name, labels[name])
        assert "ReduceSum" not in labels[name] or g is None
    compile_model(path, target="c", output_dir=tmp_path / "out", threads=1)
    src = (tmp_path / "out" / "m.c").read_text()
    assert src.count("if (ws[") + src.count("if (!ws[") == 2
    text = format_text(inspect_model(path, target="c"))          # `aotc inspect` says when they run
    assert sum("[runs when: c]" in line for line in text.splitlines()) == 2, text
    assert sum("[runs when: not c]" in line for line in text.splitlines()) == 2, text


def nested_if():
    """z = If a > 0: (If b > 0: x * 2 else: x - 1) + x else: -x."""
    inner = N("If", ["cb"], ["r"],
              then_branch=_graph("it", [N("Mul", ["x", "two"], ["ti"])], ["ti"], [("two", np.array(2, np.float32))]),
              else_branch=_graph("ie", [N("Sub", ["x", "one"], ["ei"])], ["ei"], [("one", np.array(1, np.float32))]))
    then = _graph("then", [inner, N("Add", ["r", "x"], ["t"])], ["t"])
    els = _graph("else", [N("Neg", ["x"], ["e"])], ["e"])
    nodes = [N("Greater", ["a", "zero"], ["ca"]), N("Greater", ["b", "zero"], ["cb"]),
             N("If", ["ca"], ["z"], then_branch=then, else_branch=els)]
    return _model(nodes, [_vi("x", [2, 5]), _vi("a", [1]), _vi("b", [])], [_vi("z", [2, 5])],
                  [("zero", np.array(0, np.float32))])


@pytest.mark.parametrize("kind", ["c", "opencl", "cuda-eager"])
def test_nested_ifs_take_all_four_paths(kind, tmp_path):
    target, build, threads = _target(kind, tmp_path)
    rng = np.random.default_rng(5)
    for a in (1.5, -0.5):
        for b in (0.25, -2.0):
            d = tmp_path / f"{a}_{b}"
            d.mkdir()
            feeds = {"x": rng.standard_normal((2, 5)).astype(np.float32), "a": np.array([a], np.float32),
                     "b": np.array(b, np.float32)}
            assert_parity(nested_if(), d, feeds, target=target, threads=threads, build=build)


def test_branches_returning_outer_values_constants_and_shared_nodes(tmp_path):
    """then: (x, a constant, Relu(x)); else: (Relu(x) * 2, x, Relu(x)) (x through an Identity, as
    ONNX requires); the condition a bool graph input.
    Relu(x) is in both branches (one node after common subexpressions are merged: it runs always)."""
    then = _graph("then", [N("Relu", ["x"], ["tr"]), N("Identity", ["x"], ["tx"])], ["tx", "k", "tr"],
                  [("k", np.full((2, 3), 7, np.float32))])
    els = _graph("else", [N("Relu", ["x"], ["er"]), N("Mul", ["er", "two"], ["e2"]), N("Identity", ["x"], ["ex"])],
                 ["e2", "ex", "er"],
                 [("two", np.array(2, np.float32))])
    m = _model([N("If", ["flag"], ["p", "q", "r"], then_branch=then, else_branch=els)],
               [_vi("x", [2, 3]), _vi("flag", [], TP.BOOL)], [_vi("p", [2, 3]), _vi("q", [2, 3]), _vi("r", [2, 3])])
    x = np.random.default_rng(9).standard_normal((2, 3)).astype(np.float32)
    for flag in (True, False):
        (tmp_path / str(flag)).mkdir()
        assert_parity(m, tmp_path / str(flag), {"x": x, "flag": np.array(flag)}, threads=1)


def test_branches_of_different_shapes_are_refused(tmp_path):
    then = _graph("then", [N("Relu", ["x"], ["t"])], ["t"])
    els = _graph("else", [N("ReduceSum", ["x"], ["e"], keepdims=1)], ["e"])
    m = _model([N("If", ["flag"], ["y"], then_branch=then, else_branch=els)],
               [_vi("x", [2, 3]), _vi("flag", [], TP.BOOL)], [_vi("y", ["a", "b"])])
    path = tmp_path / "m.onnx"
    onnx.save(m, str(path))
    with pytest.raises(UnsupportedError, match=r"output 0 differs in shape \(\[2, 3\] and \[1, 1\]\)"):
        compile_model(path, target="c", output_dir=tmp_path / "out")


def test_condition_algebra():
    a, b = ("a", True), ("b", True)
    na = ("a", False)
    assert either(both(ALWAYS, a), both(ALWAYS, na)) == ALWAYS
    assert both(both(ALWAYS, a), na) == NEVER
    ab = both(both(ALWAYS, a), b)
    assert either(ab, both(ALWAYS, a)) == both(ALWAYS, a)          # a and b, or a: a
    assert either(ab, both(both(ALWAYS, na), b)) == both(ALWAYS, b)
    assert either(NEVER, ab) == ab


def _two_rate_vad(path: Path) -> None:
    """A voice-activity model as the widely used one is shipped: the sample rate a run-time input,
    16 kHz chunks of 576 samples into one LSTM, 8 kHz chunks of 288 into another (torch.jit.script
    and torch.onnx.export write the If)."""
    import warnings

    import torch

    class Vad(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lstm16 = torch.nn.LSTM(64, 16, batch_first=True)
            self.lstm8 = torch.nn.LSTM(32, 16, batch_first=True)

        def forward(self, x, sr):
            if bool(sr == 16000):
                y = self.lstm16(x.reshape(1, 9, 64))[0]
            else:
                y = self.lstm8(x.reshape(1, 9, 32))[0]
            return torch.sigmoid(y[:, -1])

    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(torch.jit.script(Vad().eval()), (torch.randn(1, 576), torch.tensor(16000)), str(path),
                          input_names=["x", "sr"], output_names=["p"], opset_version=17, dynamo=False,
                          dynamic_axes={"x": {1: "samples"}})


@pytest.mark.parametrize("kind", ["c", "opencl", "cuda-eager"])
def test_a_branch_that_cannot_run_at_the_compiled_size_is_a_run_time_status(kind, tmp_path):
    """Compiled for one chunk length, the other rate's branch cannot be shaped (its Reshape needs
    another length): the model compiles, the rate that fits matches ONNX Runtime, the other
    returns AOTC_ERR_BRANCH naming the If, the branch and why, and the next run is right again."""
    import onnxruntime as ort

    from aotc.errors import RunError
    target, build, threads = _target(kind, tmp_path)
    path = tmp_path / "vad.onnx"
    _two_rate_vad(path)
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng()
    for n, rate, other in ((576, 16000, 8000), (288, 8000, 16000)):
        out = compile_model(path, target=target, output_dir=tmp_path / f"out{n}", threads=threads, build=build,
                            shapes={"x": (1, n)})
        info = inspect_model(path, target=target, shapes={"x": (1, n)})
        (why,) = info["unrunnable_branches"].values()
        assert "Reshape" in why and ("else_branch" if rate == 16000 else "then_branch") in why, why
        m = load(out)
        for _ in range(2):
            x = rng.standard_normal((1, n)).astype(np.float32)
            feeds = {"x": x, "sr": np.array(rate, np.int64)}
            np.testing.assert_allclose(m.run(feeds)[0], sess.run(None, feeds)[0], rtol=1e-5, atol=1e-6)
            with pytest.raises(RunError, match="status 16") as e:
                m.run({"x": x, "sr": np.array(other, np.int64)})
            assert "cannot run at the compiled input sizes" in str(e.value) and "Reshape" in str(e.value)


@pytest.mark.parametrize("kind", ["c", "opencl", "cuda-eager"])
def test_both_rates_from_one_artifact_over_a_run_time_chunk_length(kind, tmp_path):
    """The two-rate model compiled once with its chunk length a run-time dim of two sizes
    (samples in 288..576%288): neither branch can be shaped over both, so each becomes an If on
    the run's length whose copy at the length it was written for runs (passes/control.py
    specialize_branch). Both rates match ONNX Runtime, alternating, from one instance; a rate
    with the other rate's chunk length returns AOTC_ERR_BRANCH naming the branch and why."""
    import onnxruntime as ort

    from aotc.errors import RunError
    target, build, threads = _target(kind, tmp_path)
    path = tmp_path / "vad.onnx"
    _two_rate_vad(path)
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    out = compile_model(path, target=target, output_dir=tmp_path / "out", threads=threads, build=build,
                        dims={"samples": (288, 576, 288)})
    m = load(out)
    rng = np.random.default_rng()
    for n, rate in ((576, 16000), (288, 8000), (288, 8000), (576, 16000)):
        feeds = {"x": rng.standard_normal((1, n)).astype(np.float32), "sr": np.array(rate, np.int64)}
        np.testing.assert_allclose(m.run(feeds)[0], sess.run(None, feeds)[0], rtol=1e-5, atol=1e-6)
    for n, rate in ((576, 8000), (288, 16000)):
        with pytest.raises(RunError, match="status 16") as e:
            m.run({"x": rng.standard_normal((1, n)).astype(np.float32), "sr": np.array(rate, np.int64)})
        assert "cannot run at the compiled input sizes" in str(e.value), str(e.value)


def test_an_if_neither_of_whose_branches_can_be_shaped_fails_the_compile(tmp_path):
    path = tmp_path / "vad.onnx"
    _two_rate_vad(path)
    with pytest.raises(Exception, match="neither branch can be shaped"):
        compile_model(path, target="c", output_dir=tmp_path / "out", shapes={"x": (1, 100)})
