"""Bounded dimensions (aotc/passes/bounded.py): NonZero and Compress on run-time inputs, whose
outputs' sizes are known only after a run, against ONNX Runtime on fresh random inputs, compared
exactly (selections, and single elementwise ops after them; MatMul's sums within rounding).

What is covered: NonZero of ranks 1-3 on float, bool and int32 inputs (an all-zero input: an
empty result; an all-nonzero one: the whole capacity; NaN and -0.0); Compress flattened, along
axis 0, 1, a negative axis, with a condition shorter than the axis, followed by elementwise
kernels; the patterns exporters write after them (torch's masked select Greater -> NonZero ->
Transpose -> GatherND; a row of NonZero gathering columns; Concat and Slice of static axes;
MatMul of the selected rows; Shape of static axes only); outputs that need moving into the
dense layout (aotc_compact) and ones that do not; several threads; the refusals, by node
name; the GPU targets (PoCL, the CUDA emulation); the C ABI (<output>_shape in the outputs
struct) from a C program; `aotc check` and `aotc run`; ONNX's node cases for NonZero and
Compress with run-time inputs; reductions, Softmax, ArgMax, TopK along static axes and Gemm
of bounded rows; the bugs these tests found (a renamed source output, an empty input, a name
clash, rank 17)."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as TP
from onnx import helper

from aotc.api import load
from aotc.compiler import compile_model
from aotc.errors import UnsupportedError
from tests.helpers import (assert_parity, eager_gpu_target, eager_threads_target, graph_model, onnx_node_cases_of, rand,
                           run_onnx_node_case)

N = helper.make_node
ROOT = Path(__file__).resolve().parent.parent
CC = shutil.which("cc") or shutil.which("gcc")


def I64(*v) -> np.ndarray:
    return np.array(v, np.int64)


def _ort(model: onnx.ModelProto, feeds: dict) -> list[np.ndarray]:
    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def _compile(model: onnx.ModelProto, tmp_path: Path, feeds: dict, name: str = "m", **kw) -> Path:
    path = Path(tmp_path) / f"{name}.onnx"
    onnx.save(model, str(path))
    return compile_model(path, output_dir=Path(tmp_path) / f"out_{name}",
                         shapes={k: np.asarray(v).shape for k, v in feeds.items()}, **kw)


def _same(got: list, want: list, what: str = "") -> None:
    assert len(got) == len(want), what
    for k, (g, w) in enumerate(zip(got, want)):
        assert g.dtype == w.dtype, f"{what} output {k}: {g.dtype} != {w.dtype}"
        assert g.shape == w.shape, f"{what} output {k}: shape {g.shape} != {w.shape}"
        np.testing.assert_array_equal(g, w, err_msg=f"{what} output {k}")


def _parity_runs(model: onnx.ModelProto, tmp_path: Path, feed_sets: list[dict], name: str = "m", **kw):
    """Compile once (shapes from the first feeds), run every feed set on the one instance, each
    equal to ONNX Runtime's answer exactly; returns the artifact directory."""
    out = _compile(model, tmp_path, feed_sets[0], name, **kw)
    m = load(out)
    for k, feeds in enumerate(feed_sets):
        _same(m.run(feeds), _ort(model, feeds), f"feed set {k}")
    return out


def _compacts(out: Path) -> bool:
    """Whether the generated host program moves an output into its dense layout."""
    return any("aotc_compact(out->" in p.read_text() for p in out.glob("*.c"))


def _sparse(shape, seed: int, dtype) -> np.ndarray:
    """Fresh random values with about half of them zero (never all zero)."""
    rng = np.random.default_rng(seed)
    keep = rng.random(shape) < 0.5
    keep.flat[rng.integers(keep.size)] = True
    if dtype == np.bool_:
        return keep
    if np.dtype(dtype).kind == "f":
        v = rng.standard_normal(shape)
        v = np.where(v == 0, 1.0, v)
    else:
        v = rng.integers(1, 100, size=shape) * rng.choice([-1, 1], size=shape)
    return np.where(keep, v, 0).astype(dtype)


def _refusal(model: onnx.ModelProto, tmp_path: Path, feeds: dict, node: str, *fragments, **kw) -> str:
    with pytest.raises(UnsupportedError) as e:
        _compile(model, tmp_path, feeds, **kw)
    msg = str(e.value)
    assert repr(node) in msg, msg
    assert re.search(r"run[ -]time", msg), msg          # "known only at run time", "run-time dimension"
    assert "run time" in (e.value.hint or ""), e.value.hint
    for f in fragments:
        assert f in msg, msg
    return msg


# ----------------------------------------------------------------------------- NonZero
SHAPES = {1: (13,), 2: (4, 7), 3: (3, 4, 5)}


@pytest.mark.parametrize("dtype", [np.float32, np.bool_, np.int32], ids=["float32", "bool", "int32"])
@pytest.mark.parametrize("rank", [1, 2, 3])
def test_nonzero_of_a_run_time_input(rank, dtype, tmp_path):
    """Several random inputs with about half zeros, an all-zero one (an empty result: shape
    (rank, 0)) and an all-nonzero one (the whole capacity), on one compiled instance."""
    shape = SHAPES[rank]
    sets = [{"x": _sparse(shape, seed, dtype)} for seed in (11, 12, 13)]
    sets += [{"x": np.zeros(shape, dtype)}, {"x": np.ones(shape, dtype)}]
    m = graph_model([N("NonZero", ["x"], ["nz"])], sets[0], ["nz"], opset=13)
    out = _parity_runs(m, tmp_path, sets)
    got = load(out).run(sets[3])[0]
    assert got.shape == (rank, 0) and got.dtype == np.int64
    got = load(out).run(sets[4])[0]
    np.testing.assert_array_equal(got, np.array(np.nonzero(np.ones(shape))))
    # [rank, n]: moved into the dense layout unless rank is 1 (no axis of size > 1 before n)
    assert _compacts(out) == (rank > 1)


def test_nonzero_of_nan_and_negative_zero(tmp_path):
    """NaN is nonzero, -0.0 is zero (as != 0 has it, and ONNX Runtime); so is a tiny normal float
    (a subnormal input is zero by default: tests/test_subnormals.py)."""
    x = np.array([[0.0, -0.0, np.nan, 2.0], [-np.inf, 0.0, -0.0, 1e-37]], np.float32)
    m = graph_model([N("NonZero", ["x"], ["nz"])], {"x": x}, ["nz"], opset=13)
    _parity_runs(m, tmp_path, [{"x": x}, {"x": _sparse(x.shape, 3, np.float32)}])


def test_nonzero_of_a_computed_mask_on_several_threads(tmp_path):
    """Greater -> NonZero and Compress along axis 1 with every spatial loop on the thread pool
    (the ordered selection loop must stay one thread's), on inputs of some thousands."""
    x = rand(48, 131, seed=21)
    c = _sparse((131,), 22, np.bool_)
    nodes = [N("Greater", ["x", "t"], ["mask"]), N("NonZero", ["mask"], ["nz"]),
             N("Compress", ["x", "c"], ["cols"], axis=1), N("Mul", ["cols", "cols"], ["sq"])]
    m = graph_model(nodes, {"x": x, "c": c}, ["nz", "sq"], {"t": np.float32(0.3)}, opset=13)
    sets = [{"x": rand(48, 131, seed=s), "c": _sparse((131,), s + 50, np.bool_)} for s in (21, 23)]
    _parity_runs(m, tmp_path, sets, target=eager_threads_target(tmp_path), threads=4)


# ----------------------------------------------------------------------------- Compress
@pytest.mark.parametrize("axis,cond_len", [(None, 60), (None, 37), (0, 3), (1, 6), (-1, 5), (-2, 6), (1, 4),
                                           (2, 3)],
                         ids=["flat", "flat-short", "axis0", "axis1", "axis-1", "axis-2", "axis1-short",
                              "axis2-short"])
def test_compress_on_a_run_time_condition(axis, cond_len, tmp_path):
    """Compress of a 3-D tensor on a run-time condition, then Mul (by a constant and by itself)
    and Cast: the bounded value flows through elementwise kernels; the selection and its
    products are outputs."""
    x = rand(3, 6, 5, seed=31)
    attrs = {} if axis is None else {"axis": axis}
    nodes = [N("Compress", ["x", "c"], ["sel"], **attrs), N("Mul", ["sel", "k"], ["scaled"]),
             N("Mul", ["scaled", "sel"], ["prod"]), N("Cast", ["prod"], ["as_int"], to=TP.INT32),
             N("Cast", ["c"], ["cf"], to=TP.FLOAT)]
    sets = [{"x": rand(3, 6, 5, seed=s), "c": _sparse((cond_len,), s, np.bool_)} for s in (32, 33, 34)]
    sets.append({"x": rand(3, 6, 5, seed=35), "c": np.ones(cond_len, bool)})
    m = graph_model(nodes, {"x": x, "c": sets[0]["c"]}, ["sel", "prod", "as_int", "cf"], {"k": np.float32(2.5)},
                    opset=13)
    out = _parity_runs(m, tmp_path, sets)
    a = None if axis is None else axis % 3
    # only a bounded axis with an axis of size > 1 before it needs moving
    assert _compacts(out) == (a is not None and a > 0)


def test_compress_that_selects_nothing(tmp_path):
    """An all-false condition: empty outputs of the right shapes, also after elementwise ops."""
    x = rand(4, 3, seed=41)
    nodes = [N("Compress", ["x", "c"], ["rows"], axis=0), N("Compress", ["x", "c3"], ["cols"], axis=1),
             N("Neg", ["rows"], ["neg"])]
    sets = [{"x": x, "c": np.zeros(4, bool), "c3": np.zeros(3, bool)},
            {"x": rand(4, 3, seed=42), "c": _sparse((4,), 43, np.bool_), "c3": _sparse((3,), 44, np.bool_)}]
    m = graph_model(nodes, sets[0], ["rows", "cols", "neg"], opset=13)
    _parity_runs(m, tmp_path, sets)
    got = load(tmp_path / "out_m").run(sets[0])
    assert [g.shape for g in got] == [(0, 3), (4, 0), (0, 3)]


# ----------------------------------------------------------------------------- after the source
def test_masked_select_as_torch_exports_it(tmp_path):
    """x[x > t]: Greater -> NonZero -> Transpose -> GatherND, then an elementwise op; and the
    coordinates themselves (Transpose of a bounded [rank, n] into [n, rank])."""
    x = rand(5, 6, seed=51)
    nodes = [N("Greater", ["x", "t"], ["mask"]), N("NonZero", ["mask"], ["nz"]),
             N("Transpose", ["nz"], ["idx"], perm=[1, 0]), N("GatherND", ["x", "idx"], ["picked"]),
             N("Mul", ["picked", "picked"], ["sq"])]
    m = graph_model(nodes, {"x": x}, ["picked", "sq", "idx"], {"t": np.float32(0.2)}, opset=13)
    sets = [{"x": rand(5, 6, seed=s)} for s in (51, 52, 53)] + [{"x": -np.abs(rand(5, 6, seed=54)) - 1}]
    _parity_runs(m, tmp_path, sets)


def test_masked_select_of_rows(tmp_path):
    """x[mask] with a mask over the leading two axes of a 3-D x: GatherND takes whole rows."""
    x = rand(4, 5, 3, seed=55)
    nodes = [N("ReduceSum", ["x", "last"], ["s"], keepdims=0), N("Greater", ["s", "t"], ["mask"]),
             N("NonZero", ["mask"], ["nz"]), N("Transpose", ["nz"], ["idx"], perm=[1, 0]),
             N("GatherND", ["x", "idx"], ["rows"]), N("Relu", ["rows"], ["y"])]
    m = graph_model(nodes, {"x": x}, ["rows", "y"], {"t": np.float32(0.0), "last": I64(2)}, opset=13)
    _parity_runs(m, tmp_path, [{"x": rand(4, 5, 3, seed=s)} for s in (55, 56, 57)])


@pytest.mark.parametrize("pick", ["squeeze", "gather_row"])
def test_nonzero_row_gathers_columns(pick, tmp_path):
    """NonZero of a 1-D mask -> [1, n] -> Squeeze (or Gather of row 0) -> [n] -> Gather(data,
    idx, axis=1): [rows, n], a bounded axis after a static one (moved into the dense layout)."""
    m8 = _sparse((8,), 61, np.bool_)
    data = rand(3, 8, seed=62)
    take = N("Squeeze", ["nz", "zero_axis"], ["idx"]) if pick == "squeeze" else \
        N("Gather", ["nz", "row0"], ["idx"], axis=0)
    nodes = [N("NonZero", ["m"], ["nz"]), take, N("Gather", ["data", "idx"], ["cols"], axis=1),
             N("Add", ["cols", "cols"], ["twice"])]
    m = graph_model(nodes, {"m": m8, "data": data}, ["cols", "twice", "idx"],
                    {"zero_axis": I64(0), "row0": np.array(0, np.int64)}, opset=13)
    sets = [{"m": _sparse((8,), s, np.bool_), "data": rand(3, 8, seed=s + 1)} for s in (61, 63, 65)]
    sets.append({"m": np.zeros(8, bool), "data": rand(3, 8, seed=67)})
    out = _parity_runs(m, tmp_path, sets)
    assert _compacts(out)


def test_concat_of_bounded_tensors_along_a_static_axis(tmp_path):
    """Concat of two tensors with the same run-time rows along a static axis: NonZero's [2, n]
    with twice itself along axis 0 ([4, n], moved), Compress's rows with their squares along
    axis 1 ([n, 8], not moved)."""
    x = _sparse((4, 5), 71, np.float32)
    x6 = rand(6, 4, seed=72)
    nodes = [N("NonZero", ["x"], ["nz"]), N("Mul", ["nz", "two"], ["nz2"]),
             N("Concat", ["nz", "nz2"], ["coords"], axis=0),
             N("Compress", ["x6", "c"], ["rows"], axis=0), N("Mul", ["rows", "rows"], ["sq"]),
             N("Concat", ["rows", "sq"], ["wide"], axis=-1)]
    sets = [{"x": _sparse((4, 5), s, np.float32), "x6": rand(6, 4, seed=s + 1), "c": _sparse((6,), s + 2, np.bool_)}
            for s in (71, 74, 77)]
    m = graph_model(nodes, {"x": x, "x6": x6, "c": sets[0]["c"]}, ["coords", "wide"], {"two": I64(2)}, opset=13)
    _parity_runs(m, tmp_path, sets)


def test_slice_of_a_static_axis(tmp_path):
    """Slice of the static axes of bounded tensors (rows 1:3 of NonZero's [3, n], columns 1:4
    step 2 of Compress's [n, 6]); a Slice whose range along the run-time axis is the whole of
    it (0 to INT64_MAX) is allowed too."""
    nodes = [N("NonZero", ["x"], ["nz"]), N("Slice", ["nz", "s1", "e3", "ax0"], ["yz"]),
             N("Compress", ["x6", "c"], ["rows"], axis=0), N("Slice", ["rows", "s1", "e4", "ax1", "st2"], ["cols"]),
             N("Slice", ["rows", "s0", "big", "ax0"], ["whole"])]
    inits = {"s0": I64(0), "s1": I64(1), "e3": I64(3), "e4": I64(4), "ax0": I64(0), "ax1": I64(1), "st2": I64(2),
             "big": I64(np.iinfo(np.int64).max)}
    sets = [{"x": _sparse((3, 4, 5), s, np.float32), "x6": rand(5, 6, seed=s), "c": _sparse((5,), s, np.bool_)}
            for s in (81, 83, 85)]
    m = graph_model(nodes, sets[0], ["yz", "cols", "whole"], inits, opset=13)
    _parity_runs(m, tmp_path, sets)


def test_matmul_of_bounded_rows(tmp_path):
    """Compress along axis 0, then MatMul with a constant weight (+ bias, Relu) on 2-D rows and
    on a 3-D batch of them; Gather of static columns of the bounded rows."""
    nodes = [N("Compress", ["x", "c"], ["rows"], axis=0), N("MatMul", ["rows", "w"], ["mm"]),
             N("Add", ["mm", "b"], ["biased"]), N("Relu", ["biased"], ["act"]),
             N("Compress", ["xb", "cb"], ["batch"], axis=0), N("MatMul", ["batch", "w"], ["bmm"]),
             N("Gather", ["rows", "cols"], ["picked"], axis=1)]
    inits = {"w": rand(4, 3, seed=93), "b": rand(3, seed=94), "cols": I64(3, 0)}
    sets = [{"x": rand(7, 4, seed=s), "c": _sparse((7,), s, np.bool_), "xb": rand(5, 3, 4, seed=s + 1),
             "cb": _sparse((5,), s + 1, np.bool_)} for s in (91, 93, 95)]
    m = graph_model(nodes, sets[0], ["act", "bmm", "picked", "mm"], inits, opset=13)
    out = _compile(m, tmp_path, sets[0])
    model = load(out)
    for feeds in sets:
        got, want = model.run(feeds), _ort(m, feeds)
        for g, w in zip(got, want):      # MatMul's sums: within rounding, in any order
            assert g.shape == w.shape and g.dtype == w.dtype
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def test_reductions_softmax_argmax_topk_gemm_of_bounded_rows(tmp_path):
    """Ops that work along static axes keep the run-time rows: ReduceMax / ReduceSum (with and
    without keepdims), Softmax, ArgMax, TopK along the features of Compress's rows, and Gemm
    (transA = 0 and 1) of them, as detection post-processing does after selecting boxes."""
    nodes = [N("Compress", ["x", "c"], ["rows"], axis=0),
             N("ReduceMax", ["rows", "ax1"], ["best"], keepdims=0), N("ReduceSum", ["rows", "ax1"], ["tot"]),
             N("Softmax", ["rows"], ["prob"], axis=1), N("ArgMax", ["rows"], ["cls"], axis=1, keepdims=0),
             N("TopK", ["rows", "k2"], ["topv", "topi"], axis=1),
             N("Gemm", ["rows", "w", "b"], ["lin"]), N("Transpose", ["rows"], ["rows_t"], perm=[1, 0]),
             N("Gemm", ["rows_t", "w"], ["lin_t"], transA=1, alpha=0.5)]
    inits = {"ax1": I64(1), "k2": I64(2), "w": rand(5, 3, seed=201), "b": rand(3, seed=202)}
    sets = [{"x": rand(8, 5, seed=s), "c": _sparse((8,), s, np.bool_)} for s in (203, 204, 205)]
    outs = ["best", "tot", "prob", "cls", "topv", "topi", "lin", "lin_t"]
    m = graph_model(nodes, sets[0], outs, inits, opset=18)
    out = _compile(m, tmp_path, sets[0])
    model = load(out)
    for feeds in sets:
        got, want = model.run(feeds), _ort(m, feeds)
        for name, g, w in zip(outs, got, want):
            assert g.shape == w.shape and g.dtype == w.dtype, name
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6, err_msg=name)


def test_expand_to_the_shape_of_a_bounded_tensor(tmp_path):
    """Expand to Shape(x) where x has a run-time dimension (the dynamo exporter writes it for a
    boolean mask): the Shape folds to the capacity, the Expand keeps the count; from the
    tensor itself (a copy) and from a size-1 row broadcast over the run-time rows."""
    nodes = [N("Compress", ["x", "c"], ["rows"], axis=0), N("Shape", ["rows"], ["shp"]),
             N("Expand", ["rows", "shp"], ["same"]), N("Expand", ["one_row", "shp"], ["bias"]),
             N("Add", ["same", "bias"], ["y"])]
    sets = [{"x": rand(7, 4, seed=s), "c": _sparse((7,), s, np.bool_)} for s in (241, 242, 243)]
    m = graph_model(nodes, sets[0], ["y", "bias"], {"one_row": rand(1, 4, seed=244)}, opset=13)
    _parity_runs(m, tmp_path, sets)


@pytest.mark.parametrize("start, end", [(0, 3), (1, 4), (2, 100), (0, -1), (1, -2), (5, 6)])
def test_first_rows_of_a_run_time_axis(start, end, tmp_path):
    """Slice start:end of a run-time axis (the first k detections): its count is computed at
    run time (an aotc.Count kernel), its rows copied over the capacity; a static Slice after."""
    nodes = [N("Compress", ["x", "c"], ["rows"], axis=0), N("Slice", ["rows", "s", "e", "ax"], ["part"]),
             N("Mul", ["part", "part"], ["y"]), N("Slice", ["y", "s0", "e1", "ax1"], ["y1"])]
    inits = {"s": I64(start), "e": I64(end), "ax": I64(0), "s0": I64(0), "e1": I64(2), "ax1": I64(1)}
    rng = np.random.default_rng(start * 10 + end + 50)
    sets = [{"x": rand(8, 3, seed=251 + k), "c": rng.random(8) < p} for k, p in enumerate((0.1, 0.5, 0.8, 1.0))]
    m = graph_model(nodes, sets[0], ["y", "y1", "part"], inits, opset=13)
    _parity_runs(m, tmp_path, sets)


def test_concat_along_a_run_time_axis(tmp_path):
    """Each input's rows start where the previous one's count ends (aotc.ConcatRows), a static
    input among them; the total a run-time count (aotc.Count). Rows of Compress results, and
    NonZero's [2, n] along its columns (then moved into the dense layout)."""
    nodes = [N("Compress", ["x", "c"], ["a"], axis=0), N("Compress", ["y", "d"], ["b"], axis=0),
             N("Concat", ["a", "b"], ["cat"], axis=0), N("Concat", ["b", "s", "a"], ["cat2"], axis=0),
             N("Mul", ["cat", "cat"], ["sq"]), N("NonZero", ["x"], ["nx"]), N("NonZero", ["y"], ["ny"]),
             N("Concat", ["nx", "ny"], ["cols"], axis=1)]
    rng = np.random.default_rng(261)
    sets = [{"x": _sparse((6, 3), 262 + k, np.float32), "c": rng.random(6) < p,
             "y": _sparse((5, 3), 266 + k, np.float32), "d": rng.random(5) < q}
            for k, (p, q) in enumerate(((0.1, 0.0), (0.5, 0.3), (0.8, 0.6), (1.0, 1.0)))]
    m = graph_model(nodes, sets[0], ["cat", "cat2", "sq", "cols"], {"s": rand(2, 3, seed=270)}, opset=13)
    _parity_runs(m, tmp_path, sets)


def test_sums_over_a_zero_padded_run_time_axis(tmp_path):
    """Sum-like reductions need no count where the padding is zero (the sources write zeros):
    ReduceSum over NonZero's columns (keepdims), ReduceL2 and ReduceSumSquare over everything,
    ReduceSum of Compress's rows and of their Cast."""
    nodes = [N("NonZero", ["x"], ["nz"]), N("ReduceSum", ["nz", "ax1"], ["colsum"], keepdims=1),
             N("Compress", ["x", "c"], ["rows"], axis=0), N("ReduceL2", ["rows"], ["norm"], keepdims=0),
             N("ReduceSumSquare", ["rows"], ["ss"], keepdims=1), N("ReduceSum", ["rows", "ax0"], ["rowsum"], keepdims=0),
             N("Cast", ["nz"], ["nzf"], to=TP.FLOAT), N("ReduceSum", ["nzf"], ["total"], keepdims=0)]
    sets = [{"x": _sparse((5, 4), 281 + k, np.float32), "c": _sparse((5,), 285 + k, np.bool_)} for k in range(3)]
    m = graph_model(nodes, sets[0], ["colsum", "norm", "ss", "rowsum", "total"], {"ax0": I64(0), "ax1": I64(1)},
                    opset=18)
    out = _compile(m, tmp_path, sets[0])
    model = load(out)
    for feeds in sets:
        for g, w in zip(model.run(feeds), _ort(m, feeds)):
            assert g.shape == w.shape and g.dtype == w.dtype
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def test_shape_of_static_axes_only(tmp_path):
    """Shape with start/end selecting only static axes is a constant; it compiles and matches."""
    nodes = [N("Compress", ["x", "c"], ["rows"], axis=0), N("Shape", ["rows"], ["tail"], start=1),
             N("NonZero", ["xs"], ["nz"]), N("Shape", ["nz"], ["rank"], end=1),
             N("Shape", ["nz"], ["rank_neg"], end=-1),
             N("Cast", ["tail"], ["tailf"], to=TP.FLOAT), N("ReduceProd", ["tailf"], ["per_row"], keepdims=0),
             N("Mul", ["rows", "per_row"], ["scaled"])]
    sets = [{"x": rand(6, 4, 3, seed=s), "c": _sparse((6,), s, np.bool_), "xs": _sparse((3, 5), s, np.float32)}
            for s in (101, 103)]
    m = graph_model(nodes, sets[0], ["tail", "rank", "rank_neg", "scaled", "nz"], opset=18)
    _parity_runs(m, tmp_path, sets)


def test_check_on_a_bounded_model(tmp_path):
    """run_check (`aotc check`) through assert_parity: the trimmed outputs compare with ONNX
    Runtime's, shapes included."""
    x = rand(4, 6, seed=111)
    c = _sparse((6,), 112, np.bool_)
    nodes = [N("Greater", ["x", "t"], ["mask"]), N("NonZero", ["mask"], ["nz"]),
             N("Compress", ["x", "c"], ["cols"], axis=1), N("Sigmoid", ["cols"], ["act"])]
    m = graph_model(nodes, {"x": x, "c": c}, ["nz", "act"], {"t": np.float32(0.1)}, opset=13)
    res = assert_parity(m, tmp_path, {"x": x, "c": c}, target="c")
    assert res.outputs[0].shape == [2, int(np.count_nonzero(x > 0.1))]
    assert res.outputs[1].shape == [4, int(c.sum())]


# ----------------------------------------------------------------------------- refusals
def _refusal_cases():
    x = {"x": _sparse((4, 5), 121, np.float32)}
    xc = {"x6": rand(6, 4, seed=122), "c": _sparse((6,), 123, np.bool_)}
    nz = N("NonZero", ["x"], ["nz"], name="find")
    rows = N("Compress", ["x6", "c"], ["rows"], axis=0, name="pick")
    return {
        "max_over_run_time_axis": ([nz, N("ReduceMax", ["nz", "ax1"], ["y"], keepdims=0, name="max_cols")],
                                   x, {"ax1": I64(1)}, "max_cols", ()),
        "sum_over_padding_not_zero": ([nz, N("Add", ["nz", "one"], ["nz1"]),
                                       N("ReduceSum", ["nz1", "ax1"], ["y"], keepdims=0, name="sum_cols")],
                                      x, {"ax1": I64(1), "one": I64(1)}, "sum_cols", ("padding is not zero",)),
        "softmax_along_it": ([rows, N("Softmax", ["rows"], ["y"], axis=0, name="normalize")], xc, {}, "normalize",
                             ("works along",)),
        "shape_of_run_time_dim": ([rows, N("Shape", ["rows"], ["y"], name="how_many")], xc, {}, "how_many",
                                  ("compile-time constants",)),
        "shape_end_covers_it": ([nz, N("Shape", ["nz"], ["y"], start=-1, name="last_dim")], x, {}, "last_dim", ()),
        "size": ([rows, N("Size", ["rows"], ["y"], name="count_all")], xc, {}, "count_all", ()),
        "shape_used_in_arithmetic": ([rows, N("Shape", ["rows"], ["shp"]),
                                      N("Gather", ["shp", "i0"], ["y"], axis=0, name="first_dim")],
                                     xc, {"i0": I64(0)}, "first_dim", ("computes with",)),
        "expand_to_a_fixed_size": ([rows, N("Expand", ["rows", "six_by_4"], ["y"], name="widen")], xc,
                                   {"six_by_4": I64(6, 4)}, "widen", ("fixed at compile time",)),
        "concat_of_different_run_time_axes": ([nz, N("Neg", ["x"], ["negx"]), N("NonZero", ["negx"], ["nz2"]),
                                               N("Concat", ["nz", "nz2"], ["y"], axis=0, name="stack")], x, {},
                                              "stack", ("do not share",)),
        "gather_with_computed_indices": ([nz, N("Add", ["nz", "one"], ["nz1"]),
                                          N("Gather", ["table", "nz1"], ["y"], axis=0, name="lookup")],
                                         x, {"one": I64(1), "table": rand(6, seed=124)}, "lookup", ("padding",)),
        "integer_division_by_padding": ([nz, N("Div", ["seven", "nz"], ["y"], name="divide")], x, {"seven": I64(7)},
                                        "divide", ()),
        "reshape_merging_it": ([nz, N("Reshape", ["nz", "flat"], ["y"], name="flatten_all")], x, {"flat": I64(-1)},
                               "flatten_all", ("merges or splits",)),
        "slice_of_run_time_axis_from_its_end": ([rows, N("Slice", ["rows", "m2", "big", "ax0"], ["y"], name="last_two")],
                                                xc, {"m2": I64(-2), "big": I64(100), "ax0": I64(0)}, "last_two",
                                                ("counted from the end",)),
        "slice_of_run_time_axis_with_a_step": ([rows, N("Slice", ["rows", "s0", "big", "ax0", "two"], ["y"],
                                                        name="every_other")], xc,
                                               {"s0": I64(0), "big": I64(100), "ax0": I64(0), "two": I64(2)},
                                               "every_other", ("step",)),
        "op_with_no_rule": ([rows, N("CumSum", ["rows", "ax1"], ["y"], name="running")], xc, {"ax1": I64(1)},
                            "running", ()),
        "nonzero_of_bounded": ([nz, N("NonZero", ["nz"], ["y"], name="again")], x, {}, "again", ()),
        "broadcast_against_static": ([rows, N("Add", ["rows", "x6"], ["y"], name="mix")], xc, {}, "mix", ()),
    }


@pytest.mark.parametrize("case", list(_refusal_cases()))
def test_refused_uses_name_the_node(case, tmp_path):
    nodes, feeds, inits, node, fragments = _refusal_cases()[case]
    m = graph_model(nodes, feeds, ["y"], inits, opset=18)
    _refusal(m, tmp_path, feeds, node, *fragments)


def _gpu(target: str, tmp_path: Path) -> dict:
    """compile_model's arguments for a GPU target here: PoCL, or the CUDA emulation."""
    if target.startswith("opencl"):
        from tests.test_opencl import _opencl_missing
        if _opencl_missing():
            pytest.skip(_opencl_missing())
        return {"target": eager_gpu_target(tmp_path) if target == "opencl-eager" else "opencl"}
    if shutil.which("g++") is None:
        pytest.skip("g++ is not installed")
    from tests.test_cuda_emulated import emulated_build
    return {"target": "cuda:sm_90", "build": emulated_build}


@pytest.mark.parametrize("target", ["opencl", "opencl-eager", "cuda-emulated"])
def test_gpu_targets(target, tmp_path):
    """The GPU hosts read the counts back with the outputs and finish them as the C host does:
    NonZero's [2, n] (moved), masked select, Compress along axis 1 then Mul (moved), NonZero's
    columns concatenated (offsets and a total counted on the device), on PoCL
    (plain and with the most eager GPU schedule) and on the CUDA emulation (tests/cuda_emu)."""
    kw = _gpu(target, tmp_path)
    nodes = [N("Greater", ["x", "t"], ["mask"]), N("NonZero", ["mask"], ["nz"]),
             N("Transpose", ["nz"], ["idx"], perm=[1, 0]), N("GatherND", ["x", "idx"], ["picked"]),
             N("Compress", ["x", "c"], ["cols"], axis=1), N("Mul", ["cols", "cols"], ["sq"]),
             N("Concat", ["nz", "nz"], ["twice"], axis=1)]
    sets = [{"x": rand(4, 6, seed=s), "c": _sparse((6,), s, np.bool_)} for s in (131, 132, 133)]
    sets.append({"x": -np.abs(rand(4, 6, seed=134)) - 1, "c": np.zeros(6, bool)})      # nothing selected
    m = graph_model(nodes, sets[0], ["nz", "picked", "sq", "twice"], {"t": np.float32(0.2)}, opset=13)
    _parity_runs(m, tmp_path, sets, **kw)


# ----------------------------------------------------------------------------- C ABI and CLI
ABI_C = r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "nzabi.h"

#define X_ELEMS %(x_elems)d
#define CAP %(cap)d

static void show(const nzabi_outputs *out)
{
    long long n = out->nz_shape[0] * out->nz_shape[1];
    printf("%%lld %%lld :", (long long)out->nz_shape[0], (long long)out->nz_shape[1]);
    for (long long k = 0; k < n; ++k)
        printf(" %%lld", (long long)out->nz[k]);
    printf("\n");
}

int main(int argc, char **argv)
{
    static float x[X_ELEMS];
    static int64_t y[CAP];
    size_t align = NZABI_WORKSPACE_ALIGN;
    size_t bytes = (NZABI_WORKSPACE_BYTES + align) / align * align;
    void *ws = aligned_alloc(align, bytes);
    nzabi_model *model = NULL;
    if (!ws || nzabi_create(NULL, &model) != AOTC_OK) return 2;
    for (int a = 1; a < argc; ++a) {
        FILE *f = fopen(argv[a], "rb");
        nzabi_inputs in;
        nzabi_outputs out;
        int status;
        if (!f || fread(x, sizeof x[0], X_ELEMS, f) != X_ELEMS) return 3;
        fclose(f);
        in.x = x;
        memset(y, 0x5a, sizeof y);
        out.nz = y;
        out.nz_shape[0] = out.nz_shape[1] = -1;
        status = nzabi_run(&in, &out, ws);          /* with a workspace */
        if (status != AOTC_OK) { fprintf(stderr, "run: %%s\n", nzabi_strerror(status)); return 4; }
        show(&out);
        memset(y, 0x5a, sizeof y);
        out.nz_shape[0] = out.nz_shape[1] = -1;
        status = nzabi_invoke(model, &in, &out);     /* an instance (its thread pool) */
        if (status != AOTC_OK) { fprintf(stderr, "invoke: %%s\n", nzabi_strerror(status)); return 5; }
        show(&out);
    }
    nzabi_destroy(model);
    free(ws);
    return 0;
}
"""


@pytest.mark.skipif(CC is None, reason="no C compiler")
def test_c_abi_writes_the_shape_and_dense_elements(tmp_path):
    """A C program includes the header, runs the model (<name>_run with a workspace, and
    <name>_invoke), prints <output>_shape and that many elements: numpy.nonzero's answer, for
    random inputs, an all-zero one and an all-nonzero one."""
    shape = (3, 4, 5)
    x = _sparse(shape, 141, np.float32)
    m = graph_model([N("NonZero", ["x"], ["nz"])], {"x": x}, ["nz"], opset=13)
    out = _compile(m, tmp_path, {"x": x}, name="nzabi", target="c")
    header = (out / "nzabi.h").read_text()
    assert "int64_t nz_shape[2];" in header and "at most 60" in header
    port = json.loads((out / "manifest.json").read_text())["outputs"][0]
    assert port["shape"] == [3, 60] and port["run_time_axes"] == [1] and port["shape_field"] == "nz_shape"
    inputs = [_sparse(shape, s, np.float32) for s in (141, 142, 143)] + [np.zeros(shape, np.float32),
                                                                         rand(*shape, seed=144, low=1, high=2)]
    files = []
    for k, a in enumerate(inputs):
        a.tofile(tmp_path / f"x{k}.bin")
        files.append(str(tmp_path / f"x{k}.bin"))
    src = tmp_path / "prog.c"
    src.write_text(ABI_C % {"x_elems": x.size, "cap": 3 * x.size})
    exe = tmp_path / "prog"
    p = subprocess.run([CC, "-std=c11", "-Wall", "-Werror", "-pthread", str(src), "-o", str(exe), f"-I{out}",
                        f"-L{out}", "-lnzabi", f"-Wl,-rpath,{out.resolve()}"], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    p = subprocess.run([str(exe), *files], capture_output=True, text=True, timeout=60, env=env)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert len(lines) == 2 * len(inputs)
    for k, a in enumerate(inputs):
        want = np.array(np.nonzero(a), np.int64)
        for line in lines[2 * k:2 * k + 2]:
            dims, _, elems = line.partition(":")
            assert tuple(int(d) for d in dims.split()) == want.shape, (k, line)
            np.testing.assert_array_equal(np.array(elems.split(), np.int64), want.reshape(-1), err_msg=str(k))
    assert lines[6].startswith("3 0 :")


def test_shape_field_does_not_clash_with_an_output_name(tmp_path):
    """An output named like the shape field of another ('nz_shape'): the shape field takes a
    fresh name, and both outputs come back right."""
    x = _sparse((3, 4), 145, np.float32)
    m = graph_model([N("NonZero", ["x"], ["nz"]), N("Relu", ["x"], ["nz_shape"])], {"x": x}, ["nz", "nz_shape"],
                    opset=13)
    out = _parity_runs(m, tmp_path, [{"x": x}, {"x": _sparse((3, 4), 146, np.float32)}])
    header = (out / "m.h").read_text()
    assert "float *nz_shape;" in header and "int64_t nz_shape_1[2];" in header


def test_cli_run_writes_the_trimmed_array(tmp_path):
    """`aotc run` on an artifact with bounded outputs writes arrays of the run's shape; `aotc
    check` on the model passes."""
    from typer.testing import CliRunner
    from aotc.cli import app
    x = rand(5, 4, seed=151)
    c = _sparse((4,), 152, np.bool_)
    nodes = [N("Greater", ["x", "t"], ["mask"]), N("NonZero", ["mask"], ["nz"]),
             N("Compress", ["x", "c"], ["cols"], axis=1)]
    m = graph_model(nodes, {"x": x, "c": c}, ["nz", "cols"], {"t": np.float32(0.0)}, opset=13)
    path = tmp_path / "m.onnx"
    onnx.save(m, str(path))
    out = compile_model(path, output_dir=tmp_path / "art", target="c")
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "c.npy", c)
    r = CliRunner().invoke(app, ["run", str(out), "--input", f"x={tmp_path / 'x.npy'}", "--input",
                                 f"c={tmp_path / 'c.npy'}", "--output-dir", str(tmp_path / "res")])
    assert r.exit_code == 0, r.output
    nz, cols = np.load(tmp_path / "res" / "nz.npy"), np.load(tmp_path / "res" / "cols.npy")
    np.testing.assert_array_equal(nz, np.array(np.nonzero(x > 0)))
    np.testing.assert_array_equal(cols, x[:, c])
    assert f"[2, {int(np.count_nonzero(x > 0))}]" in r.output
    r = CliRunner().invoke(app, ["check", str(path), "--target", "c", "--input", f"x={tmp_path / 'x.npy'}",
                                 "--input", f"c={tmp_path / 'c.npy'}"])
    assert r.exit_code == 0, r.output
    assert "PASS" in r.output


# ----------------------------------------------------------------------------- ONNX node cases
NODE_CASES = {**onnx_node_cases_of("nonzero"), **onnx_node_cases_of("compress")}


@pytest.mark.parametrize("name", sorted(NODE_CASES))
def test_onnx_node_case_with_run_time_inputs(name, tmp_path):
    """ONNX's own cases with every input (the condition too) a run-time input."""
    run_onnx_node_case(name, tmp_path, bound=(), exact=True, case=NODE_CASES[name])


# ----------------------------------------------------------------------------- bugs found on the way (fixed)
def test_bounded_source_renamed_to_a_graph_output(tmp_path):
    x6 = rand(6, 4, seed=161)
    sets = [{"x6": rand(6, 4, seed=s), "c": _sparse((6,), s, np.bool_)} for s in (161, 162)]
    m = graph_model([N("Compress", ["x6", "c"], ["sel"], axis=0), N("Identity", ["sel"], ["y"])],
                    {"x6": x6, "c": sets[0]["c"]}, ["y"], opset=13)
    _parity_runs(m, tmp_path, sets)


def test_nonzero_renamed_to_a_graph_output_in_a_child_process(tmp_path):
    x = _sparse((3, 4), 171, np.float32)
    m = graph_model([N("NonZero", ["x"], ["s"]), N("Identity", ["s"], ["y"])], {"x": x}, ["y"], opset=13)
    out = _compile(m, tmp_path, {"x": x})
    np.save(tmp_path / "x.npy", x)
    code = ("import sys, numpy as np; from aotc.api import load; "
            f"y = load({str(out)!r}).run({{'x': np.load({str(tmp_path / 'x.npy')!r})}})[0]; "
            "np.save(sys.argv[1], y)")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    p = subprocess.run([sys.executable, "-c", code, str(tmp_path / "y.npy")], capture_output=True, text=True,
                       timeout=60, env=env)
    assert p.returncode == 0, f"exit {p.returncode}: {p.stderr[-2000:]}"
    np.testing.assert_array_equal(np.load(tmp_path / "y.npy"), np.array(np.nonzero(x)))


def test_nonzero_of_an_empty_input(tmp_path):
    x = np.zeros((0, 3), np.float32)
    m = graph_model([N("NonZero", ["x"], ["nz"])], {"x": x}, ["nz"], opset=13)
    _parity_runs(m, tmp_path, [{"x": x}])


def test_compaction_of_rank_17_is_refused(tmp_path):
    """aotc_compact moves outputs of rank 16 at most: a larger one that needs moving is refused
    at compile time (it was returned unmoved, so wrong)."""
    shape = (2, 4) + (1,) * 15
    m = graph_model([N("Compress", ["x", "c"], ["y"], axis=1)], {"x": rand(*shape, seed=181),
                    "c": np.array([1, 0, 1, 1], bool)}, ["y"], opset=13)
    path = tmp_path / "m.onnx"
    onnx.save(m, str(path))
    with pytest.raises(UnsupportedError, match="rank 17"):
        compile_model(path, output_dir=tmp_path / "out")


def test_count_name_does_not_collide_with_a_graph_value(tmp_path):
    x = _sparse((3, 4), 191, np.float32)
    m = graph_model([N("NonZero", ["x"], ["nz"]), N("Relu", ["x"], ["nz.count"])], {"x": x}, ["nz", "nz.count"],
                    opset=13)
    _parity_runs(m, tmp_path, [{"x": x}])


# ----------------------------------------------------------------------------- NonMaxSuppression
def _boxes(rng, batches: int, n: int, center: bool) -> np.ndarray:
    """Random boxes, many overlapping: corners [y1, x1, y2, x2] in either order, or centers."""
    if center:
        return np.concatenate([rng.uniform(0, 8, (batches, n, 2)), rng.uniform(0.5, 4, (batches, n, 2))],
                              -1).astype(np.float32)
    p = rng.uniform(0, 8, (batches, n, 2))
    return np.concatenate([p, p + rng.uniform(-3, 3, (batches, n, 2))], -1).astype(np.float32)


def _nms_model(batches, classes, n, most, iou, score, center, post=False, thresholds_at_run_time=False):
    """NonMaxSuppression, and with `post` what a detector does with its rows: the selected
    boxes (Gather of the box column, then of batch 0's boxes), their scores (GatherND), their
    class as float, concatenated into [n, 6] detections."""
    names = ["boxes", "scores", "most", "iou"] + (["st"] if score is not None or thresholds_at_run_time else [])
    inits = {"most": I64(most)}
    if not thresholds_at_run_time:
        inits["iou"] = np.array([iou], np.float32)
        if score is not None:
            inits["st"] = np.array([score], np.float32)
    nodes = [N("NonMaxSuppression", names, ["sel"], center_point_box=int(center), name="nms")]
    outs = ["sel"]
    if post:
        nodes += [N("Gather", ["sel", "two_s"], ["box_i"], axis=1), N("Gather", ["boxes", "zero_s"], ["b0"], axis=0),
                  N("Gather", ["b0", "box_i"], ["picked"], axis=0), N("GatherND", ["scores", "sel"], ["sc"]),
                  N("Unsqueeze", ["sc", "one"], ["sc1"]), N("Slice", ["sel", "one", "two", "one"], ["cls"]),
                  N("Cast", ["cls"], ["clsf"], to=TP.FLOAT), N("Concat", ["picked", "sc1", "clsf"], ["det"], axis=1)]
        inits.update(zero_s=np.array(0, np.int64), two_s=np.array(2, np.int64), one=I64(1), two=I64(2))
        outs.append("det")
    feeds = {"boxes": np.zeros((batches, n, 4), np.float32), "scores": np.zeros((batches, classes, n), np.float32)}
    if thresholds_at_run_time:
        feeds.update(iou=np.zeros(1, np.float32), st=np.zeros(1, np.float32))
    return graph_model(nodes, feeds, outs, inits, opset=13)


NMS_CASES = {   # batches, classes, boxes, most per class, iou, score threshold, center format, post-processing
    "one_class": (1, 1, 12, 4, 0.5, None, False, False),
    "classes_and_batches": (2, 3, 40, 6, 0.4, 0.3, False, True),
    "center_format": (1, 4, 50, 100, 0.5, 0.0, True, True),
    "keep_all_below_iou_1": (1, 2, 20, 20, 1.0, None, False, False),
    "one_box": (1, 2, 1, 3, 0.5, None, False, False),
    "none_kept": (1, 2, 10, 0, 0.5, None, False, False),
}


@pytest.mark.parametrize("case", list(NMS_CASES))
def test_nms_against_onnx_runtime(case, tmp_path):
    """Exactly ONNX Runtime's rows on fresh random boxes, with tied scores (the lower index
    first), an all-low score set when a threshold is given (no row), and a detector's use of
    them (`post`)."""
    batches, classes, n, most, iou, score, center, post = NMS_CASES[case]
    m = _nms_model(batches, classes, n, most, iou, score, center, post)
    rng = np.random.default_rng(len(case))
    sets = []
    for _ in range(3):
        scores = rng.random((batches, classes, n)).astype(np.float32)
        if n > 4:
            scores[..., 1:4] = scores[..., :1]           # ties
        sets.append({"boxes": _boxes(rng, batches, n, center), "scores": scores})
    if score is not None:
        sets.append({"boxes": _boxes(rng, batches, n, center),
                     "scores": np.full((batches, classes, n), score, np.float32)})   # none above it
    _parity_runs(m, tmp_path, sets)


def test_nms_thresholds_given_at_run_time(tmp_path):
    m = _nms_model(2, 2, 30, 5, None, None, False, thresholds_at_run_time=True)
    rng = np.random.default_rng(211)
    sets = [{"boxes": _boxes(rng, 2, 30, False), "scores": rng.random((2, 2, 30)).astype(np.float32),
             "iou": np.array([t], np.float32), "st": np.array([s], np.float32)}
            for t, s in ((0.5, 0.2), (0.2, 0.6), (0.9, 0.0))]
    _parity_runs(m, tmp_path, sets)


def test_nms_needs_a_constant_most_per_class(tmp_path):
    nodes = [N("NonMaxSuppression", ["boxes", "scores", "most"], ["sel"], name="nms")]
    feeds = {"boxes": _boxes(np.random.default_rng(0), 1, 5, False), "scores": rand(1, 1, 5, seed=212),
             "most": I64(3)}
    m = graph_model(nodes, feeds, ["sel"], opset=13)
    with pytest.raises(UnsupportedError, match="max_output_boxes_per_class known only at run time"):
        _compile(m, tmp_path, feeds)


NMS_NODE_CASES = onnx_node_cases_of("nonmaxsuppression")


@pytest.mark.parametrize("name", sorted(NMS_NODE_CASES))
def test_nms_onnx_node_case(name, tmp_path):
    """ONNX's cases, boxes and scores at run time (the most per class bound: the capacity)."""
    run_onnx_node_case(name, tmp_path, bound=("max_output_boxes_per_class",), exact=True, case=NMS_NODE_CASES[name])


@pytest.mark.parametrize("target", ["opencl", "cuda-emulated"])
def test_nms_and_unique_on_gpu_targets(target, tmp_path):
    """NonMaxSuppression with a detector's post-processing and its first 10 rows (a count
    computed on the device), and Unique of rows (its sort and several outputs sharing one
    count), on PoCL and the CUDA emulation."""
    kw = _gpu(target, tmp_path)
    m = _nms_model(2, 3, 40, 6, 0.4, 0.3, False, True)
    top = onnx.helper.make_node("Slice", ["det", "zero", "ten", "zero"], ["top"])     # the first 10 rows
    m.graph.node.append(top)
    m.graph.initializer.extend([onnx.numpy_helper.from_array(I64(0), "zero"), onnx.numpy_helper.from_array(I64(10), "ten")])
    m.graph.output.append(onnx.helper.make_empty_tensor_value_info("top"))
    rng = np.random.default_rng(221)
    _parity_runs(m, tmp_path, [{"boxes": _boxes(rng, 2, 40, False), "scores": rng.random((2, 3, 40)).astype(np.float32)}
                               for _ in range(2)], name="nms", **kw)
    u = graph_model([N("Unique", ["x"], ["y", "first", "inv", "cnt"], axis=0)], {"x": np.zeros((9, 2), np.float32)},
                    ["y", "first", "inv", "cnt"], opset=11)
    _parity_runs(u, tmp_path, [{"x": rng.integers(0, 2, (9, 2)).astype(np.float32)} for _ in range(2)], name="u", **kw)


def test_inspect_names_the_outputs_of_run_time_size(tmp_path):
    from aotc.inspection import format_text, inspect_model
    x = _sparse((3, 4), 231, np.float32)
    m = graph_model([N("NonZero", ["x"], ["nz"]), N("Relu", ["x"], ["r"])], {"x": x}, ["nz", "r"], opset=13)
    path = tmp_path / "m.onnx"
    onnx.save(m, str(path))
    info = inspect_model(path, target="c")
    assert info["outputs"] == {"nz": [2, 12], "r": [3, 4]}
    assert info["run_time_axes"] == {"nz": [1]}
    assert "output 'nz' has a size known only at run time: [2, at most 12]" in format_text(info)
