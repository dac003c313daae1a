"""NaN and infinities as the ONNX spec and its reference implementation (onnx.reference, numpy
underneath) define them: Max / Min / ReduceMax / ReduceMin / Clip / Relu / HardSigmoid...
propagate a NaN, comparisons with a NaN are false, Sign and Abs keep it, Hardmax marks the first
NaN. Each case is a single-op model run on fresh random inputs with NaN and +-inf planted at
random places (the seed is in the failure message), compiled for the C target on one thread and
on two with every loop on the pool, and for OpenCL where PoCL is installed; the outputs must
match onnx.reference: NaN at the same places, every other value bit for bit (or within a few
ULP for ops that call a math function, or 1e-6 apart). ONNX Runtime differs from the spec on some of these
(ReduceMax skips NaN): `aotc check` says so in its note (aotc/check/parity.py), tested last.
Integer Div / Mod by zero stop the run with a status naming the node."""
from __future__ import annotations

import re
import warnings

import numpy as np
import onnx
import pytest
from onnx.reference import ReferenceEvaluator
from typer.testing import CliRunner

from aotc.api import compile as aotc_compile
from aotc.api import load
from aotc.check.parity import compare, nan_divergence_note
from aotc.check.runner import run_check
from aotc.cli import app
from aotc.compiler import compile_model
from aotc.errors import RunError
from tests.helpers import eager_cuda_target, eager_gpu_target, eager_threads_target, graph_model, single_op_model

F32, F64, I64 = np.float32, np.float64, np.int64


def _seed() -> int:
    return int(np.random.SeedSequence().entropy % 2**31)


def _plant(rng, shape, dtype=F32):
    """Normal values with NaN, +inf and -inf planted at random places; along the last axis, row
    k gets a mix of its own: clean, NaN only, infinities only, sparse NaN and infinities, all
    NaN, all -inf (so reductions meet every kind of slice)."""
    x = rng.standard_normal(shape).astype(dtype)
    rows = x.reshape(-1, shape[-1]) if x.ndim > 1 else x.reshape(1, -1)
    for k, row in enumerate(rows):
        u = rng.random(row.shape)
        mode = (k + rng.integers(6)) % 6 if rows.shape[0] > 1 else 3
        if mode == 1:
            row[u < 0.1] = np.nan
        elif mode == 2:
            row[u < 0.1] = np.inf
            row[u > 0.9] = -np.inf
        elif mode == 3:
            row[u < 0.1] = np.nan
            row[(u >= 0.1) & (u < 0.17)] = np.inf
            row[(u >= 0.17) & (u < 0.24)] = -np.inf
        elif mode == 4:
            row[:] = np.nan
        elif mode == 5:
            row[:] = -np.inf
    return x


# (op, attrs, inputs(rng) -> (graph inputs, initializers), opset, exact): exact ops are compared
# bit for bit; the others (exp, division...) within 4 ULP where both sides are finite
def _x(shape=(5, 33), dtype=F32):
    return lambda rng: ({"x": _plant(rng, shape, dtype)}, {})


def _xy(n=2, dtype=F32):
    return lambda rng: ({f"x{k}": _plant(rng, (5, 33), dtype) for k in range(n)}, {})


def _clip(lo, hi, runtime):
    def make(rng):
        bounds = {k: np.array(v, F32) for k, v in (("lo", lo), ("hi", hi)) if v is not None}
        x = {"x": _plant(rng, (5, 33))}
        return ({**x, **bounds}, {}) if runtime else (x, bounds)
    return make


def _axes(axes):
    return lambda rng: ({"x": _plant(rng, (6, 35))}, {"axes": np.array(axes, I64)})


EXACT_UNARY = ["Relu", "Abs", "Neg", "Sign", "Floor", "Ceil", "Round", "IsNaN", "ThresholdedRelu", "LeakyRelu",
               "PRelu"]
MATH_UNARY = ["Elu", "Selu", "Celu", "HardSigmoid", "HardSwish", "Softsign", "Sqrt", "Sigmoid", "Exp"]


def _cases():
    for op in EXACT_UNARY:
        if op == "PRelu":
            yield op, {}, lambda rng: ({"x": _plant(rng, (5, 33))}, {"slope": np.array([0.25], F32)}), 17, True
        else:
            yield op, {}, _x(), 17, True
    for op in MATH_UNARY:
        yield op, {}, _x(), 17, False
    yield "IsInf", {"detect_negative": 0}, _x(), 17, True
    yield "Relu", {}, _x(dtype=F64), 17, True
    for op in ("Max", "Min"):
        yield op, {}, _xy(2), 17, True
        yield op, {}, _xy(3), 17, True
        yield op, {}, _xy(2, F64), 17, True
    yield "Max", {}, lambda rng: ({"x0": _plant(rng, (5, 33))}, {"c": np.array(0.5, F32)}), 17, True
    yield "Min", {}, lambda rng: ({"x0": _plant(rng, (5, 33))}, {"c": np.array(np.nan, F32)}), 17, True
    for op in ("Equal", "Greater", "Less", "GreaterOrEqual", "LessOrEqual", "Add", "Mul", "Sum"):
        yield op, {}, _xy(2), 17, True
    yield "Div", {}, _xy(2), 17, True
    yield "Mod", {"fmod": 1}, _xy(2), 17, True
    yield "Mod", {}, _xy(2), 17, True                 # numpy's mod: -1 mod inf is inf
    yield "Where", {}, lambda rng: ({"c": rng.random((5, 33)) < 0.5, "x0": _plant(rng, (5, 33)),
                                     "x1": _plant(rng, (5, 33))}, {}), 17, True
    yield "Clip", {}, _clip(-0.5, 0.7, runtime=False), 17, True
    yield "Clip", {}, _clip(-0.5, None, runtime=False), 17, True
    yield "Clip", {}, _clip(-0.5, 0.7, runtime=True), 17, True
    yield "Clip", {}, _clip(np.nan, 0.7, runtime=True), 17, True
    yield "Clip", {}, _clip(-0.5, np.nan, runtime=True), 17, True
    for op in ("ReduceMax", "ReduceMin", "ReduceSum", "ReduceProd", "ReduceL1"):
        for axes in ([1], [0], [0, 1]):
            yield op, {}, _axes(axes), 18, op in ("ReduceMax", "ReduceMin")
    yield "ReduceMax", {"keepdims": 0}, _axes([1]), 18, True
    yield "ReduceMax", {}, lambda rng: ({"x": _plant(rng, (6, 35), F64)}, {"axes": np.array([1], I64)}), 18, True
    yield "ReduceMin", {}, lambda rng: ({"x": _plant(rng, (4, 3, 9))}, {"axes": np.array([0, 2], I64)}), 18, True
    yield "ReduceMean", {}, _axes([1]), 18, False
    yield "ReduceLogSumExp", {}, _axes([1]), 18, False
    for op in ("Softmax", "LogSoftmax"):
        yield op, {"axis": -1}, _x((6, 35)), 17, False
    yield "Hardmax", {"axis": -1}, _x((6, 35)), 17, True
    yield "Hardmax", {"axis": 0}, _x((6, 35)), 17, True


CASES = list(_cases())


def _ids():
    seen: dict[str, int] = {}
    for op, attrs, _, _, _ in CASES:
        seen[op] = seen.get(op, 0) + 1
        yield f"{op}-{seen[op]}"


IDS = list(_ids())


def _model(op, attrs, ins, inits, opset):
    order = list(ins) + list(inits)
    return single_op_model(op, ins, inits=inits, opset=opset, _order=order, **attrs)


def _reference(model, ins):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ReferenceEvaluator(model).run(None, ins)


def _reference_in_float64(model, ins, ref):
    """The reference evaluated on the float32 inputs widened to float64, rounded back to each
    output's dtype (None when that does not give the same outputs' shapes)."""
    try:
        wide = _reference(model, {k: v.astype(F64) if v.dtype == F32 else v for k, v in ins.items()})
    except Exception:         # an op the reference evaluates in float32 only
        return None
    if len(wide) != len(ref) or any(np.shape(w) != np.shape(r) for w, r in zip(wide, ref)):
        return None
    return [np.asarray(w).astype(np.asarray(r).dtype) for w, r in zip(wide, ref)]


def _ulps(a, b):
    ints = np.int32 if a.dtype == F32 else np.int64
    ia, ib = a.view(ints).astype(np.float64), b.view(ints).astype(np.float64)
    lo = float(np.iinfo(ints).min)
    ia, ib = np.where(ia < 0, lo - ia, ia), np.where(ib < 0, lo - ib, ib)
    return np.abs(ia - ib)


def assert_same(got, ref, exact, what):
    ref = np.asarray(ref)
    assert got.dtype == ref.dtype and got.shape == ref.shape, \
        f"{what}: got {got.dtype}{list(got.shape)}, expected {ref.dtype}{list(ref.shape)}"
    if got.dtype.kind != "f":
        bad = np.flatnonzero(got != ref)
        assert bad.size == 0, f"{what}: {bad.size} differ, first at {bad[:5]}: {got.ravel()[bad[:5]]} " \
                              f"(expected {ref.ravel()[bad[:5]]})"
        return
    gn, rn = np.isnan(got), np.isnan(ref)
    bad = np.flatnonzero(gn != rn)
    assert bad.size == 0, f"{what}: NaN at different places ({bad.size}), first at {bad[:5]}: " \
                          f"got {got.ravel()[bad[:5]]}, expected {ref.ravel()[bad[:5]]}"
    g, r = got[~gn], ref[~rn]
    if exact:                          # bit for bit, the sign of zero included
        bad = np.flatnonzero(g.view(f"u{g.dtype.itemsize}") != r.view(f"u{r.dtype.itemsize}"))
    else:                              # infinities exactly, finite values within 4 ULP or 1e-6
        with np.errstate(invalid="ignore"):
            near = (_ulps(g, r) <= 4) | (np.abs(g.astype(F64) - r) <= 1e-6)
        bad = np.flatnonzero((np.isinf(g) | np.isinf(r)) & (g != r) | ~near)
    assert bad.size == 0, f"{what}: {bad.size} non-NaN values differ: got {g[bad[:5]]}, expected {r[bad[:5]]}"


def _log_sum_exp(ins):
    """The spec's log(sum(exp(x))), in float64. (onnx.reference shifts by the largest finite
    value, and a slice with no finite value but a -inf comes out NaN there: -inf - -inf; here,
    as by the formula, all -inf is log(0) = -inf.)"""
    x, axes = ins["x"].astype(F64), tuple(int(a) for a in ins["axes"])
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        return np.log(np.exp(x).sum(axis=axes, keepdims=True)).astype(ins["x"].dtype)


def _run_case(case, target, threads, tmp_path, build=None):
    op, attrs, make, opset, exact = CASES[case]
    seed = _seed()
    rng = np.random.default_rng(seed)
    ins, inits = make(rng)
    model = _model(op, attrs, ins, inits, opset)
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    if build is None:
        cm = aotc_compile(path, target=target, output_dir=tmp_path / "out", threads=threads)
    else:
        cm = load(compile_model(path, target=target, output_dir=tmp_path / "out", build=build))
    got = cm.run(ins)
    ref = [_log_sum_exp({**ins, **inits})] if op == "ReduceLogSumExp" else _reference(model, ins)
    wide = None if exact or op == "ReduceLogSumExp" else _reference_in_float64(model, ins, ref)
    for k, (g, r) in enumerate(zip(got, ref)):
        what = f"{op} {attrs} output {k} (seed {seed}, inputs {list(ins)})"
        try:
            assert_same(g, r, exact, what)
        except AssertionError:
            # the reference sums in float32, whose rounding error can exceed the tolerance where
            # ours (float64 accumulators) does not: then the float64 reference decides
            if wide is None:
                raise
            assert_same(g, wide[k], exact, what + ", against the float64 reference too")


@pytest.fixture(scope="module")
def eager_threads(tmp_path_factory):
    return eager_threads_target(tmp_path_factory.mktemp("target"))


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("case", range(len(CASES)), ids=IDS)
def test_nan_and_inf_as_the_reference(case, threads, eager_threads, tmp_path):
    """threads=2: every loop on a 2-thread pool (thresholds at 1), so reductions and elementwise
    loops are split across threads; vectorized loops run on both."""
    _run_case(case, "c" if threads == 1 else eager_threads, threads, tmp_path)


def test_clamps_with_hidden_bounds_keep_nan_on_native(tmp_path):
    """The max / min selects of Relu, Clip with constant bounds, HardSigmoid and HardSwish read
    their bounds from locals the C compiler cannot see the values of (aotc/codegen/c/printer.py:
    so that GCC emits each as one MAXPS / MINPS, not a clamp's two selects merged into mask
    arithmetic), in elementwise loops and in a 1x1 convolution's tile epilogues: on the native
    target (AVX-512 here, where the two forms compile differently) NaN and infinities come out as
    the reference has them, and -0 as the selects say."""
    N = onnx.helper.make_node
    seed = _seed()
    rng = np.random.default_rng(seed)
    x = _plant(rng, (1, 32, 12, 12)) * 4
    x.reshape(-1)[rng.random(x.size) < 0.05] = -0.0
    inits = {"lo": np.array(0.0, F32), "hi": np.array(6.0, F32), "lo2": np.array(-0.5, F32),
             "hi2": np.array(0.75, F32), "w": (rng.standard_normal((64, 32, 1, 1)) * 0.3).astype(F32),
             "b": rng.standard_normal(64).astype(F32)}
    nodes = [N("Relu", ["x"], ["y1"]), N("Clip", ["x", "lo", "hi"], ["y2"]), N("Clip", ["x", "lo2", "hi2"], ["y3"]),
             N("HardSigmoid", ["x"], ["y4"]), N("HardSwish", ["x"], ["y5"]),
             N("Conv", ["x", "w", "b"], ["c"]), N("Clip", ["c", "lo", "hi"], ["y6"]),
             N("Conv", ["x", "w"], ["d"]), N("Relu", ["d"], ["y7"])]
    outs = [f"y{k}" for k in range(1, 8)]
    model = graph_model(nodes, {"x": x}, outs, inits)
    onnx.save(model, str(tmp_path / "m.onnx"))
    cm = aotc_compile(tmp_path / "m.onnx", target="native", output_dir=tmp_path / "out")
    source = (tmp_path / "out" / "m.c").read_text()
    assert "aotc_opaque_f32(6.0f)" in source and "aotc_opaque_f32(0.75f)" in source
    assert not re.search(r"[<>] (0\.0f|6\.0f|0\.75f|\(-0\.5f\)) \?", source), "a bound printed as a constant"
    assert re.search(r"_tile\d+\(void \*aotc_task[^{]*\{[^}]*aotc_opaque_f32", source), "no tile epilogue reads one"
    got = cm.run({"x": x})
    ref = _reference(model, {"x": x})
    for k, (g, r) in enumerate(zip(got, ref)):
        what = f"{outs[k]} (seed {seed})"
        if k < 3:       # bit for bit; -0 stays -0 (x < c is false on it), where numpy's maximum gives +0
            r = np.where((x == 0) & np.signbit(x), x, r)
            assert_same(g, r, True, what)
        elif k < 5:                        # products and sums, contracted into FMAs or not
            assert_same(g, r, False, what)
        else:                              # the convolutions' sums: their own order
            assert_same(np.isnan(g), np.isnan(r), True, what + ": NaN")
            finite = np.isfinite(r)
            assert np.array_equal(g[~finite & ~np.isnan(r)], r[~finite & ~np.isnan(r)]), what + ": infinities"
            np.testing.assert_allclose(g[finite], r[finite], rtol=1e-4, atol=1e-4, err_msg=what)
            assert np.all((g[finite] >= 0) & (g[finite] <= (6 if k == 5 else np.inf))), what + ": out of range"


# ArgMax / ArgMin: numpy's argmax / argmin take NaN for the largest and the smallest value, so
# the first NaN wins (the last with select_last_index); aotc/ops/tensor.py compares with > / <,
# which skips NaN (what ONNX Runtime does too)
ARG_CASES = [("ArgMax", {"axis": 1}), ("ArgMin", {"axis": 1}), ("ArgMax", {"axis": 0, "select_last_index": 1}),
             ("ArgMin", {"axis": 0, "select_last_index": 1})]


@pytest.mark.parametrize("op,attrs", ARG_CASES, ids=[f"{o}-{k}" for k, (o, _) in enumerate(ARG_CASES)])
def test_argmax_argmin_pick_the_first_nan(op, attrs, tmp_path):
    x = np.array([[1, np.nan, 3, np.nan], [np.nan, 5, 6, 7], [2, -np.inf, np.inf, 0]], F32)
    model = single_op_model(op, {"x": x}, **attrs)
    onnx.save(model, str(tmp_path / "m.onnx"))
    got = aotc_compile(tmp_path / "m.onnx", target="c", output_dir=tmp_path / "out").run({"x": x})[0]
    assert_same(got, _reference(model, {"x": x})[0], True, f"{op} {attrs}")


def _opencl_missing():
    from tests.test_opencl import _opencl_missing as probe
    return probe()


OPENCL_CASES = [k for k, (op, attrs, _, _, _) in enumerate(CASES)
                if op in ("ReduceMax", "ReduceMin", "Max", "Clip", "Relu", "Sign", "HardSigmoid", "Hardmax",
                          "Softmax", "Greater", "ReduceLogSumExp", "Mod")]


@pytest.mark.parametrize("kind", ["opencl", "eager"])
@pytest.mark.parametrize("case", OPENCL_CASES, ids=[IDS[k] for k in OPENCL_CASES])
def test_nan_and_inf_on_opencl(case, kind, tmp_path):
    """'eager': every reduction split across a work-group (the NaN flag of ReduceMax combines
    like its maximum)."""
    why = _opencl_missing()
    if why:
        pytest.skip(why)
    _run_case(case, "opencl" if kind == "opencl" else eager_gpu_target(tmp_path), 0, tmp_path)


@pytest.mark.parametrize("case", OPENCL_CASES, ids=[IDS[k] for k in OPENCL_CASES])
def test_nan_and_inf_on_emulated_cuda(case, tmp_path):
    """The cuda target's code (tests/test_cuda_emulated.py), every reduction split across a
    block and combined by warp shuffles: a NaN reaches every thread's result alike."""
    from tests.test_cuda_emulated import CXX, emulated_build
    if CXX is None:
        pytest.skip("g++ is not installed")
    _run_case(case, eager_cuda_target(tmp_path), 0, tmp_path, build=emulated_build)


def test_reduce_max_example_of_the_issue(tmp_path):
    """ONNX Runtime gives 6 here; the spec (and aotc) NaN for the first row."""
    x = np.array([[1, np.nan, 3, 2], [4, 5, 6, 7]], F32)
    model = single_op_model("ReduceMax", {"x": x}, inits={"axes": np.array([1], I64)}, opset=18)
    onnx.save(model, str(tmp_path / "m.onnx"))
    got = aotc_compile(tmp_path / "m.onnx", target="c", output_dir=tmp_path / "out").run({"x": x})[0]
    assert np.isnan(got[0, 0]) and got[1, 0] == 7


# ---------------------------------------------------------------------------- aotc check's note
def _divergent_model(tmp_path):
    x = np.array([[1, np.nan, 3, 2], [4, 5, 6, 7], [np.nan, np.nan, 0, 1]], F32)
    model = single_op_model("ReduceMax", {"x": x}, inits={"axes": np.array([1], I64)}, opset=18)
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    np.save(tmp_path / "x.npy", x)
    return path, x


def test_check_names_the_known_ort_nan_divergence(tmp_path):
    path, x = _divergent_model(tmp_path)
    res = run_check(path, target="c", inputs={"x": x}, output_dir=tmp_path / "out")
    (o,) = res.outputs
    assert not o.passed and o.mismatches >= 1     # ORT keeps a NaN met first: row 2 may agree
    assert "known ONNX Runtime NaN divergence" in o.note and "ReduceMax" in o.note and "ONNX spec" in o.note
    r = CliRunner().invoke(app, ["check", str(path), "--target", "c", "--input", f"x={tmp_path / 'x.npy'}"])
    assert r.exit_code == 1, r.output
    text = re.sub(r"\s+", " ", r.output)
    assert "known ONNX Runtime NaN divergence" in text and "ReduceMax" in text, r.output


def test_the_note_is_only_for_one_sided_nan_mismatches_of_listed_ops():
    ref = np.array([1.0, 2.0, 3.0], F32)
    nan_here = np.array([np.nan, 2.0, 3.0], F32)
    finite_off = np.array([np.nan, 2.5, 3.0], F32)
    assert "ReduceMin" in compare("y", nan_here, ref, 1e-4, 1e-5, {"ReduceMin", "Add"}).note
    assert compare("y", nan_here, ref, 1e-4, 1e-5, {"Add"}).note == ""           # no listed op
    assert compare("y", finite_off, ref, 1e-4, 1e-5, {"ReduceMax"}).note == ""   # another mismatch too
    assert compare("y", ref, ref, 1e-4, 1e-5, {"ReduceMax"}).note == ""          # no mismatch at all
    bad = np.array([True, False, False])
    assert nan_divergence_note(bad, np.array([1, 2, 3]), np.array([0, 2, 3]), {"ReduceMax"}) == ""   # ints


# ---------------------------------------------------------------------------- integer Div / Mod
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("op,attrs", [("Div", {}), ("Mod", {}), ("Mod", {"fmod": 1})])
@pytest.mark.parametrize("dtype", [np.int64, np.int32])
def test_integer_division_by_zero_is_an_error_naming_the_node(op, attrs, dtype, threads, eager_threads, tmp_path):
    a = np.array([5, 7, -3, 9, np.iinfo(dtype).min, -8], dtype)
    b = np.array([2, 0, 1, -1, -1, 3], dtype)
    model = single_op_model(op, {"a": a, "b": b}, **attrs)
    model.graph.node[0].name = "the_divide"
    onnx.save(model, str(tmp_path / "m.onnx"))
    cm = aotc_compile(tmp_path / "m.onnx", target="c" if threads == 1 else eager_threads,
                      output_dir=tmp_path / "out", threads=threads)
    with pytest.raises(RunError, match=rf"{op} 'the_divide'.*integer division \(Div or Mod\) by zero"):
        cm.run({"a": a, "b": b})
    # a non-zero divisor: as the reference, MIN / -1 included (MIN, and 0 for Mod); the same
    # instance runs again after the failure
    b[1] = -2
    got = cm.run({"a": a, "b": b})[0]
    assert_same(got, _reference(model, {"a": a, "b": b})[0], True, f"{op} {attrs}")


def test_integer_division_by_zero_on_opencl(tmp_path):
    why = _opencl_missing()
    if why:
        pytest.skip(why)
    a, b = np.array([5, 7, -3, 9], I64), np.array([2, 0, 1, -1], I64)
    model = single_op_model("Div", {"a": a, "b": b})
    onnx.save(model, str(tmp_path / "m.onnx"))
    cm = aotc_compile(tmp_path / "m.onnx", target="opencl", output_dir=tmp_path / "out")
    with pytest.raises(RunError, match=r"Div.*integer division \(Div or Mod\) by zero"):
        cm.run({"a": a, "b": b})
    b[1] = 3
    assert_same(cm.run({"a": a, "b": b})[0], _reference(model, {"a": a, "b": b})[0], True, "Div on OpenCL")
