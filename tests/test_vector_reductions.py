"""Reduction loops the CPU schedule vectorizes (aotc/schedule/cpu.py, `_reductions`): which
accumulators the vector lanes may keep apart, and that the artifact built with the OpenMP SIMD
reductions on gives what the same artifact with them off gives (the loops as written, one
element after another), and what numpy / ONNX Runtime give, on rows with NaN, infinities, both
zeros and lengths that are not a multiple of the vector width."""
from __future__ import annotations

import tomllib
from pathlib import Path

import numpy as np
import pytest
from onnx import helper

from aotc.api import compile as aotc_compile
from aotc.kernel.ir import (F32, I32, REDUCTION, SPATIAL, VECTORIZED, Buffer, Builder, Loop, binop, cast, maximum,
                            select, walk_stmts)
from aotc.paths import TARGETS_DIR
from aotc.schedule.cpu import _vectorize
from aotc.targets import native_target
from tests.helpers import assert_parity, graph_model, rand

X = Buffer("x", F32, (4, 197), "in")
Y = Buffer("y", F32, (4, 197), "out")
N = helper.make_node


def _reduction_loop(stmts):
    loops = [s for s in walk_stmts(stmts) if isinstance(s, Loop) and s.role == REDUCTION]
    assert len(loops) == 1
    return loops[0]


def _scheduled(build) -> Loop:
    b = Builder()
    with b.loop(4, "p", role=SPATIAL) as p:
        build(b, p)
    return _reduction_loop(_vectorize(b.body))


def test_sums_products_and_maxima_from_a_constant_are_vectorized():
    def softmax_like(b, p):
        mx = b.local("mx", float("-inf"))
        with b.loop(197, "k", role=REDUCTION) as k:
            v = b.local("v", X[p * 197 + k])
            b.assign(mx, select(v > mx, v, mx))

    lp = _scheduled(softmax_like)
    assert lp.kind == VECTORIZED and lp.reductions == (("mx", "max"),)

    def sum_and_store(b, p):
        s = b.accumulator("sum", 0.0)
        with b.loop(197, "k", role=REDUCTION) as k:
            e = b.local("e", X[p * 197 + k] * 2.0)
            b.store(Y, p * 197 + k, e)
            b.assign(s, s + e)

    assert _scheduled(sum_and_store).reductions == (("sum", "+"),)

    def min_with_nan_flag(b, p):
        # ReduceMin's form: the select skips NaN, an int32 flag remembers one
        acc = b.local("acc", float("inf"))
        nan = b.local("nan", 0, dtype=I32)
        with b.loop(197, "k", role=REDUCTION) as k:
            x = b.local("x", X[p * 197 + k])
            b.assign(acc, select(x < acc, x, acc))
            b.assign(nan, maximum(nan, cast(binop("!=", x, x), I32)))

    assert [op for _, op in _scheduled(min_with_nan_flag).reductions] == ["min", "max"]


@pytest.mark.parametrize("case", ["start_from_data", "start_nan", "read_inside", "two_forms", "float_max"])
def test_loops_whose_lanes_could_differ_stay_serial(case):
    def build(b, p):
        if case == "start_from_data":        # a NaN first value stays NaN serially only
            mx = b.local("mx", X[p * 197])
        else:
            mx = b.local("mx", float("nan") if case == "start_nan" else float("-inf"))
        with b.loop(197, "k", role=REDUCTION, start=1) as k:
            v = b.local("v", X[p * 197 + k])
            if case == "float_max":           # fmaxf's NaN rule is not the select's
                b.assign(mx, maximum(mx, v))
                continue_ = False
            else:
                b.assign(mx, select(v > mx, v, mx))
                continue_ = True
            if continue_ and case == "read_inside":     # a lane would read its own part only
                b.store(Y, p * 197 + k, v - mx)
            if continue_ and case == "two_forms":
                b.assign(mx, mx + v)

    lp = _scheduled(build)
    assert lp.kind != VECTORIZED and lp.reductions == ()


# ----------------------------------------------------------------------------- end to end
def _target_without_simd(directory: Path) -> str:
    """The native target with the OpenMP SIMD reductions off: the loops run as written."""
    name = native_target()
    text = (TARGETS_DIR / f"{name}.toml").read_text()
    with open(TARGETS_DIR / f"{name}.toml", "rb") as f:
        flags = tomllib.load(f)["cflags"]
    assert "-DAOTC_OPENMP_SIMD" in flags
    text = text.replace(', "-DAOTC_OPENMP_SIMD"', "").replace(f'name = "{name}"', f'name = "{name}-serial"', 1)
    p = directory / f"{name}-serial.toml"
    p.write_text(text)
    return str(p)


def _special_rows(n: int, seed: int) -> np.ndarray:
    """Rows of random values, then rows with a NaN first / in the middle / last, all -inf, a
    +inf, +0 and -0 only, huge values."""
    x = rand(10, n, seed=seed) * 4
    x[1, 0] = np.nan
    x[2, n // 2] = np.nan
    x[3, -1] = np.nan
    x[4, :] = -np.inf
    x[5, n // 3] = np.inf
    x[6, :] = 0.0
    x[6, ::2] = -0.0
    x[7, :] = 3e38
    x[8, :] = -3e38
    x[9, n // 2] = -np.inf
    return x


@pytest.mark.parametrize("n", [1, 7, 197])
def test_vectorized_reductions_match_the_serial_loops_and_numpy(n, tmp_path):
    x = _special_rows(n, seed=n)
    xi = (rand(10, n, seed=n + 1) * 1000).astype(np.int32)
    nodes = [N("ReduceSum", ["x", "axes"], ["sum"], keepdims=0),
             N("ReduceMax", ["x", "axes"], ["max"], keepdims=0),
             N("ReduceMin", ["x", "axes"], ["min"], keepdims=0),
             N("ReduceSum", ["xi", "axes"], ["isum"], keepdims=0),
             N("ReduceMax", ["xi", "axes"], ["imax"], keepdims=0),
             N("Softmax", ["x"], ["softmax"], axis=-1),
             N("LogSoftmax", ["x"], ["logsoftmax"], axis=-1),
             N("Reshape", ["x", "shape4"], ["x4"]),
             N("GlobalMaxPool", ["x4"], ["gmax"]),
             N("GlobalAveragePool", ["x4"], ["gavg"])]
    inits = {"axes": np.array([-1], np.int64), "shape4": np.array([1, 10, n, 1], np.int64)}
    model = graph_model(nodes, {"x": x, "xi": xi}, ["sum", "max", "min", "isum", "imax", "softmax", "logsoftmax",
                                                    "gmax", "gavg"], inits, opset=18)
    path = tmp_path / "m.onnx"
    import onnx
    onnx.save(model, str(path))
    feeds = {"x": x, "xi": xi}
    fast = aotc_compile(path, target="native", output_dir=tmp_path / "fast", threads=1)
    serial = aotc_compile(path, target=_target_without_simd(tmp_path), output_dir=tmp_path / "serial", threads=1)
    src = (tmp_path / "fast" / "m.c").read_text()
    assert "AOTC_VECTORIZE_REDUCTION(reduction(+:" in src and "AOTC_VECTORIZE_REDUCTION(reduction(max:" in src
    got, want = fast.run(feeds), serial.run(feeds)
    for name, a, b in zip(fast.output_names, got, want):
        if name in ("max", "min", "imax", "isum", "gmax"):
            np.testing.assert_array_equal(a, b, err_msg=name)          # exact in any order (NaN where NaN)
        else:
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-30, equal_nan=True, err_msg=name)
    # and both are right: numpy's NaN-propagating reductions, and the rows' softmax rule
    out = dict(zip(fast.output_names, got))
    np.testing.assert_array_equal(out["max"], x.max(axis=-1))
    np.testing.assert_array_equal(out["min"], x.min(axis=-1))
    np.testing.assert_array_equal(out["imax"], xi.max(axis=-1))
    np.testing.assert_array_equal(out["isum"], xi.sum(axis=-1, dtype=np.int32))
    with np.errstate(all="ignore"):
        e = np.exp(x - x.max(axis=-1, keepdims=True))
        np.testing.assert_allclose(out["softmax"], e / e.sum(axis=-1, keepdims=True), rtol=1e-5, atol=1e-7,
                                   equal_nan=True)
        np.testing.assert_allclose(out["sum"], x.astype(np.float64).sum(axis=-1).astype(np.float32), rtol=1e-6,
                                   equal_nan=True)


@pytest.mark.parametrize("shape", [(3, 197, 64), (2, 5, 16)])
def test_layernorm_and_attention_rows_on_random_inputs(shape, tmp_path):
    """The loops that BERT-like models spend their reductions in, against ONNX Runtime."""
    B, S, D = shape
    x = rand(B, S, D, seed=3)
    q, k, v = (rand(1, B, S, D, seed=s) for s in (4, 5, 6))
    nodes = [N("LayerNormalization", ["x", "g", "b"], ["ln"], axis=-1, epsilon=1e-5),
             N("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
             N("MatMul", ["q", "kt"], ["s"]), N("Mul", ["s", "scale"], ["ss"]),
             N("Softmax", ["ss"], ["p"], axis=-1), N("MatMul", ["p", "v"], ["att"])]
    inits = {"g": rand(D, seed=7), "b": rand(D, seed=8), "scale": np.array(D ** -0.5, np.float32)}
    model = graph_model(nodes, {"x": x, "q": q, "k": k, "v": v}, ["ln", "att"], inits, opset=17)
    res = assert_parity(model, tmp_path, {"x": x, "q": q, "k": k, "v": v})
    src = next((tmp_path / "out").glob("*.c")).read_text() if res else ""
    assert "AOTC_VECTORIZE_REDUCTION" in src
