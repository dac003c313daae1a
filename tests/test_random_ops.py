"""Random operators (aotc/ops/random.py: RandomNormal, RandomUniform, their Like forms,
Bernoulli, Multinomial; Dropout in training mode) and the per-instance draw number.

No other implementation draws the same values, so these tests are statistical and structural,
on enough samples that a wrong distribution or a weak generator fails: means and variances
within 5 standard errors, Kolmogorov-Smirnov distances against the CDF, chi-square tests of the
frequencies (Bernoulli against its probabilities, Multinomial against the softmax of its
unnormalized log-probabilities) and of the independence of neighbouring values and of
successive draws. The generator is deterministic, so every threshold is met or missed the same
way on every run. Then what the design promises: a seed repeats its values (across nodes,
instances, thread counts and targets: c, c on 2 threads, opencl and eager opencl, emulated
cuda), each invoke draws afresh, a stateless <name>_run is draw 0, no random node is folded or
merged unless seeded; ONNX's node cases (shape, dtype and value structure; the zero-ratio
Dropouts exactly); the attributes aotc refuses."""
from __future__ import annotations

import functools
import math
import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from aotc.api import load
from aotc.compiler import compile_program, compile_model
from aotc.errors import ModelError, ShapeError, UnsupportedError
from tests.helpers import eager_gpu_target, eager_threads_target
from tests.test_opencl import _opencl_missing

N = 120_000                     # values per generator output
PROBS = np.array([0.0, 0.05, 0.3, 0.5, 0.9, 1.0])
P_REPEAT = 20_000               # Bernoulli trials per probability
LOGITS = np.array([np.log([1.0, 2.0, 3.0, 4.0]),           # probabilities 0.1 .. 0.4
                   [0.0, -np.inf, 0.0, -np.inf],            # two impossible categories, the last among them
                   [100.0, 100.5, 99.0, 101.0],             # large: exp only after the max is taken off
                   [7.0, 7.0, 7.0, 7.0]], np.float32)
SAMPLES = 20_000
RATIO = 0.3
CALLS = 3                        # invokes of each instance


def _x(shape, seed=0, dtype=np.float32):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def _nodes():
    make = helper.make_node
    return [
        make("RandomUniform", [], ["u32"], shape=[N], low=-2.0, high=3.0, seed=5.0),
        make("RandomUniform", [], ["u32_twin"], shape=[N], low=-2.0, high=3.0, seed=5.0),
        make("RandomUniform", [], ["u01"], shape=[300, N // 300]),
        make("RandomUniform", [], ["u01_other"], shape=[300, N // 300]),
        make("RandomUniform", [], ["u64"], shape=[N], low=0.5, high=0.75, dtype=TensorProto.DOUBLE, seed=1.0),
        make("RandomNormal", [], ["n32"], shape=[N], mean=1.5, scale=2.0, seed=2.0),
        make("RandomNormal", [], ["n64"], shape=[N], dtype=TensorProto.DOUBLE),
        make("RandomUniformLike", ["x64"], ["ulike"]),
        make("RandomNormalLike", ["x64"], ["nlike"], dtype=TensorProto.FLOAT, scale=0.5),
        make("Bernoulli", ["p"], ["bern"], seed=3.0),
        make("Bernoulli", ["p64"], ["bern_bool"], dtype=TensorProto.BOOL),
        make("Multinomial", ["logits"], ["mult"], sample_size=SAMPLES, dtype=TensorProto.INT64),
        make("Multinomial", ["logits"], ["mult32"], sample_size=7, seed=4.0),
        make("Dropout", ["x", "ratio", "training"], ["drop", "mask"], seed=11),
        make("Add", ["u01", "u01"], ["u01_sum"]),                # fused into the generator's loop
    ]


OUTPUTS = ["u32", "u32_twin", "u01", "u01_other", "u64", "n32", "n64", "ulike", "nlike", "bern", "bern_bool", "mult",
           "mult32", "drop", "mask", "u01_sum"]


def _feeds():
    p = np.repeat(PROBS, P_REPEAT).astype(np.float32)
    return {"x64": np.zeros((40, N // 40)), "p": p, "p64": p.astype(np.float64), "logits": LOGITS,
            "x": _x((N,), seed=7)}


def _model() -> onnx.ModelProto:
    feeds = _feeds()
    elem = {np.float32: TensorProto.FLOAT, np.float64: TensorProto.DOUBLE}
    ins = [helper.make_tensor_value_info(k, elem[v.dtype.type], v.shape) for k, v in feeds.items()]
    inits = [numpy_helper.from_array(np.array(RATIO, np.float32), "ratio"),
             numpy_helper.from_array(np.array(True), "training")]
    g = helper.make_graph(_nodes(), "random", ins, [helper.make_empty_tensor_value_info(o) for o in OUTPUTS], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def _compile(directory: Path, target: str = "c", threads: int = 1, **kw) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "random.onnx"
    onnx.save(_model(), str(path))
    return compile_model(path, target=target, output_dir=directory / "out", threads=threads, **kw)


def _draws(out: Path, threads: int = 0) -> list[dict]:
    """CALLS invokes of one new instance: each a dict output name -> array."""
    m = load(out, threads=threads)
    feeds = _feeds()
    return [dict(zip(m.output_names, m.run(feeds))) for _ in range(CALLS)]


@pytest.fixture(scope="module")
def c_model(tmp_path_factory) -> Path:
    return _compile(tmp_path_factory.mktemp("random_c"))


@pytest.fixture(scope="module")
def c_draws(c_model) -> list[dict]:
    return _draws(c_model)


# ------------------------------------------------------------------ statistics
def _ks(sample: np.ndarray, cdf) -> float:
    """The Kolmogorov-Smirnov distance between the sample's empirical CDF and `cdf`."""
    x = np.sort(np.asarray(sample, np.float64))
    f = cdf(x)
    n = len(x)
    return float(max(np.max(np.arange(1, n + 1) / n - f), np.max(f - np.arange(n) / n)))


def _ks_limit(n: int) -> float:
    return 1.95 / math.sqrt(n)           # exceeded with probability 0.001


def _normal_cdf(x):
    return 0.5 * (1.0 + np.vectorize(math.erf)(x / math.sqrt(2.0)))


def _moments_ok(x: np.ndarray, mean: float, var: float) -> None:
    """Mean and variance within 5 standard errors (the variance's for a normal-like kurtosis,
    3 here: at most that of any distribution these tests draw)."""
    x = np.asarray(x, np.float64)
    n = len(x)
    assert abs(x.mean() - mean) < 5 * math.sqrt(var / n), (x.mean(), mean)
    assert abs(x.var() - var) < 5 * var * math.sqrt(2.0 / n), (x.var(), var)


def _pairs_chi2(u: np.ndarray, cells: int = 16) -> float:
    """Chi-square of the cells x cells histogram of neighbouring pairs (u[2k], u[2k+1]) of values in
    [0, 1) against independence (cells^2 - 1 degrees of freedom)."""
    u = np.asarray(u, np.float64)[: len(u) // 2 * 2]
    k = np.minimum((u * cells).astype(np.int64), cells - 1)
    counts = np.bincount(k[0::2] * cells + k[1::2], minlength=cells * cells)
    want = len(k) / 2 / cells ** 2
    return float(((counts - want) ** 2 / want).sum())


def _pairs_limit(cells: int = 16) -> float:
    dof = cells * cells - 1
    return dof + 5 * math.sqrt(2 * dof)


# ------------------------------------------------------------------ distributions
def test_uniform_values_are_uniform_and_independent(c_draws):
    for d in c_draws:
        u = d["u32"]
        assert u.dtype == np.float32 and u.shape == (N,)
        assert u.min() >= -2.0 and u.max() < 3.0
        _moments_ok(u, 0.5, 25.0 / 12)
        assert _ks(u, lambda x: (x + 2.0) / 5.0) < _ks_limit(N)
        assert _pairs_chi2((u + 2.0) / 5.0) < _pairs_limit()
        w = d["u64"]
        assert w.dtype == np.float64 and w.min() >= 0.5 and w.max() < 0.75
        assert _ks(w, lambda x: (x - 0.5) / 0.25) < _ks_limit(N)
        # float64 values have 53 random bits, not float32's 24
        assert len(np.unique(w)) == N and np.any((w - 0.5) * 2 ** 26 % 1 != 0)
        assert _ks(d["u01"].ravel(), lambda x: x) < _ks_limit(N)
        assert _pairs_chi2(d["u01"].ravel()) < _pairs_limit()
        np.testing.assert_array_equal(d["u01_sum"], d["u01"] + d["u01"])


def test_normal_values_are_normal_and_independent(c_draws):
    for d in c_draws:
        n = d["n32"]
        assert n.dtype == np.float32 and n.shape == (N,)
        _moments_ok(n, 1.5, 4.0)
        assert _ks(n, lambda x: _normal_cdf((x - 1.5) / 2.0)) < _ks_limit(N)
        assert _pairs_chi2(_normal_cdf((n - 1.5) / 2.0)) < _pairs_limit()
        assert np.abs(n - 1.5).max() < 2.0 * 5.8            # float32 Box-Muller's bound
        m = d["n64"]
        assert m.dtype == np.float64
        _moments_ok(m, 0.0, 1.0)
        assert _ks(m, _normal_cdf) < _ks_limit(N)
        assert _pairs_chi2(_normal_cdf(m)) < _pairs_limit()


def test_like_ops_take_the_inputs_shape_and_type(c_draws):
    d = c_draws[0]
    assert d["ulike"].dtype == np.float64 and d["ulike"].shape == (40, N // 40)
    assert d["ulike"].min() >= 0.0 and d["ulike"].max() < 1.0
    assert _ks(d["ulike"].ravel(), lambda x: x) < _ks_limit(N)
    assert d["nlike"].dtype == np.float32 and d["nlike"].shape == (40, N // 40)     # the dtype attribute
    _moments_ok(d["nlike"].ravel(), 0.0, 0.25)


def test_bernoulli_frequencies_follow_the_probabilities(c_draws):
    for d in c_draws:
        assert d["bern"].dtype == np.float32 and d["bern_bool"].dtype == np.bool_
        assert set(np.unique(d["bern"])) <= {0.0, 1.0}
        for out in (d["bern"], d["bern_bool"]):
            freq = out.reshape(len(PROBS), P_REPEAT).astype(np.float64).mean(axis=1)
            for p, f in zip(PROBS, freq):
                assert abs(f - p) <= 5 * math.sqrt(p * (1 - p) / P_REPEAT), (p, f)
    # the two nodes, one seeded and one not, draw independently
    a, b = c_draws[0]["bern"], c_draws[0]["bern_bool"].astype(np.float32)
    middle = slice(3 * P_REPEAT, 4 * P_REPEAT)           # p = 0.5
    assert abs(np.corrcoef(a[middle], b[middle])[0, 1]) < 5 / math.sqrt(P_REPEAT)


def test_multinomial_frequencies_follow_the_softmax_of_the_logits(c_draws):
    z = LOGITS.astype(np.float64)
    probs = np.exp(z - z.max(axis=1, keepdims=True))
    probs /= probs.sum(axis=1, keepdims=True)
    for d in c_draws:
        s = d["mult"]
        assert s.dtype == np.int64 and s.shape == (len(LOGITS), SAMPLES)
        assert s.min() >= 0 and s.max() < LOGITS.shape[1]
        for row, p in zip(s, probs):
            counts = np.bincount(row, minlength=len(p))
            assert np.all(counts[p == 0] == 0)                # impossible categories never come out
            want = p[p > 0] * SAMPLES
            chi2 = float(((counts[p > 0] - want) ** 2 / want).sum())
            assert chi2 < 25.0, (counts, want)               # 3 degrees of freedom at most: p < 1e-4
        assert d["mult32"].dtype == np.int32 and d["mult32"].shape == (len(LOGITS), 7)
        assert np.all(np.isin(d["mult32"][1], [0, 2]))


def test_dropout_in_training_mode_keeps_and_scales(c_draws):
    x = _feeds()["x"]
    for d in c_draws:
        mask, y = d["mask"], d["drop"]
        assert mask.dtype == np.bool_ and y.dtype == np.float32
        assert abs(mask.mean() - (1 - RATIO)) <= 5 * math.sqrt(RATIO * (1 - RATIO) / N)
        np.testing.assert_array_equal(y, x * np.where(mask, np.float32(1 / (1 - RATIO)), np.float32(0)))
        # neighbours independent: the correlation of the masks of elements 2k and 2k + 1
        assert abs(np.corrcoef(mask[0::2], mask[1::2])[0, 1]) < 5 / math.sqrt(N / 2)


def test_dropout_with_a_ratio_given_at_run_time(tmp_path):
    """The ratio a graph input (unchecked, read by the kernel); a dropped NaN stays NaN, as in
    ONNX's x * mask * scale."""
    x = _x((50_000,), seed=8)
    x[::7] = np.nan
    node = helper.make_node("Dropout", ["x", "r", "training"], ["y", "mask"])
    m = _graph([node], [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape),
                        helper.make_tensor_value_info("r", TensorProto.FLOAT, [])],
               inits=[numpy_helper.from_array(np.array(True), "training")])
    model = load(compile_model(_save(m, tmp_path), output_dir=tmp_path / "out"))
    for ratio in (0.2, 0.6):
        y, mask = model.run({"x": x, "r": np.array(ratio, np.float32)})
        assert abs(mask.mean() - (1 - ratio)) <= 5 * math.sqrt(ratio * (1 - ratio) / x.size)
        scale = np.float32(1) / (np.float32(1) - np.float32(ratio))
        np.testing.assert_array_equal(y, x * np.where(mask, scale, np.float32(0)))
        assert np.all(np.isnan(y[::7]))


def test_each_invoke_draws_afresh_and_a_seed_repeats(c_draws):
    first, second = c_draws[0], c_draws[1]
    for name in OUTPUTS:
        assert not np.array_equal(first[name], second[name]), name
    # successive draws are independent of each other, and unseeded twins of each other
    for a, b in ((first["u01"], second["u01"]), (first["u01"], first["u01_other"])):
        assert abs(np.corrcoef(a.ravel(), b.ravel())[0, 1]) < 5 / math.sqrt(N)
    for d in c_draws:          # one seed, one shape: the same values
        np.testing.assert_array_equal(d["u32"], d["u32_twin"])


def test_two_instances_draw_the_same_sequence(c_model, c_draws):
    again = _draws(c_model)
    for k in range(CALLS):
        for name in OUTPUTS:
            np.testing.assert_array_equal(again[k][name], c_draws[k][name], err_msg=f"invoke {k}: {name}")


def test_threads_change_no_value(c_draws, tmp_path):
    """Every loop on the pool of 2 threads (the thresholds at 1): the same bits."""
    out = _compile(tmp_path, target=eager_threads_target(tmp_path), threads=2)
    assert "aotc_parallel_for" in (out / "random.c").read_text()
    got = _draws(out, threads=2)
    for k in range(CALLS):
        for name in OUTPUTS:
            np.testing.assert_array_equal(got[k][name], c_draws[k][name], err_msg=f"invoke {k}: {name}")


def _same_draws_as_c(got: list[dict], want: list[dict]) -> None:
    """The uniform stream to the bit (uniform values in [0, 1), Bernoulli, Dropout's mask and its
    single product); affine maps and the normal's log / cos within a few ulp (a device compiler
    may contract low + (high - low) u into a fused multiply-add, its math library round
    differently); Multinomial's categories wherever exp's last bit does not move a boundary."""
    exact = ["u01", "u01_other", "u01_sum", "ulike", "bern", "bern_bool", "mask", "drop"]
    for k in range(CALLS):
        for name in exact:
            np.testing.assert_array_equal(got[k][name], want[k][name], err_msg=f"invoke {k}: {name}")
        for name in ("u32", "u32_twin", "u64", "n32", "n64", "nlike"):
            np.testing.assert_allclose(got[k][name], want[k][name], rtol=2e-6, atol=2e-6,
                                       err_msg=f"invoke {k}: {name}")
        for name in ("mult", "mult32"):
            assert np.mean(got[k][name] == want[k][name]) > 0.999, name


@pytest.mark.skipif(_opencl_missing() is not None, reason=str(_opencl_missing()))
@pytest.mark.parametrize("eager", [False, True], ids=["opencl", "opencl-eager"])
def test_opencl_draws_what_c_draws(eager, c_draws, tmp_path):
    out = _compile(tmp_path, target=eager_gpu_target(tmp_path) if eager else "opencl")
    _same_draws_as_c(_draws(out), c_draws)


@pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not installed")
@pytest.mark.parametrize("profile", [False, True], ids=["graph", "profile"])
def test_emulated_cuda_draws_what_c_draws(profile, c_draws, tmp_path):
    """The draw number reaches the kernels of the captured CUDA graph (a copy into the workspace
    before each launch of the graph), and the launches one by one of the profile mode."""
    from tests.test_cuda_emulated import emulated_build
    out = _compile(tmp_path, target="cuda:sm_90", build=emulated_build)
    m = load(out, profile=profile)
    feeds = _feeds()
    _same_draws_as_c([dict(zip(m.output_names, m.run(feeds))) for _ in range(CALLS)], c_draws)


# ------------------------------------------------------------------ the design's promises
def _graph(nodes, inputs=(), outputs=None, inits=()):
    outs = outputs or [o for n in nodes for o in n.output]
    g = helper.make_graph(nodes, "g", list(inputs), [helper.make_empty_tensor_value_info(o) for o in outs],
                          list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def _save(m, tmp_path: Path) -> Path:
    path = tmp_path / "m.onnx"
    onnx.save(m, str(path))
    return path


def test_random_nodes_are_never_folded_and_only_seeded_twins_merge(tmp_path):
    make = helper.make_node
    nodes = [make("RandomUniform", [], [f"s{k}"], shape=[64], seed=9.0) for k in range(2)] + \
        [make("Add", ["s0", "s1"], ["s"])] + \
        [make("RandomUniform", [], [f"t{k}"], shape=[64]) for k in range(2)] + \
        [make("Bernoulli", ["p"], ["b"]), make("RandomNormalLike", ["p"], ["n"]),
         make("Dropout", ["p", "ratio", "training"], ["d"])]      # its mask unused: not an identity
    outputs = ["s", "t0", "t1", "b", "n", "d"]
    inits = [numpy_helper.from_array(np.full(64, 0.5, np.float32), "p"),
             numpy_helper.from_array(np.array(0.5, np.float32), "ratio"),
             numpy_helper.from_array(np.array(True), "training")]
    path = _save(_graph(nodes, outputs=outputs, inits=inits), tmp_path)
    c = compile_program(path, target="c")
    ops = [n.op_type for n in c.graph.nodes]
    assert ops.count("RandomUniform") == 3        # the seeded twins merged, the unseeded ones not
    assert "Bernoulli" in ops and "RandomNormalLike" in ops and "Dropout" in ops
    assert all(not c.graph.values[o].is_const for o in outputs)
    m = load(compile_model(path, output_dir=tmp_path / "out"))
    a, b = m.run({}), m.run({})
    assert all(not np.array_equal(x, y) for x, y in zip(a, b))
    assert not np.array_equal(a[1], a[2])


def test_models_without_random_ops_have_no_draw_number(tmp_path):
    m = _graph([helper.make_node("Relu", ["x"], ["y"])], [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])])
    out = compile_model(_save(m, tmp_path), output_dir=tmp_path / "out")
    assert "draw" not in (out / "m.c").read_text()


def test_stateless_run_is_draw_zero(c_model, c_draws, tmp_path):
    """<name>_run from a C program: two calls, the same values, those of an instance's first
    invoke (draw 0); the instance's second invoke differs."""
    from tests.test_embed_c import build, run
    src = r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "random.h"

static double sum(const float *a, int n) { double s = 0; for (int i = 0; i < n; ++i) s += a[i]; return s; }

int main(void)
{
    static float u[2][%(n)d], v[2][%(n)d];
    random_inputs in;
    random_outputs out;
    random_model *m;
    static unsigned char ws_[RANDOM_WORKSPACE_BYTES + RANDOM_WORKSPACE_ALIGN];
    void *ws = ws_ + (RANDOM_WORKSPACE_ALIGN - (uintptr_t)ws_ %% RANDOM_WORKSPACE_ALIGN) %% RANDOM_WORKSPACE_ALIGN;
    %(alloc)s
    for (int k = 0; k < 2; ++k) {
        out.u01 = u[k];
        if (random_run(&in, &out, ws) != AOTC_OK) return 1;
    }
    if (random_create(NULL, &m) != AOTC_OK) return 2;
    for (int k = 0; k < 2; ++k) {
        out.u01 = v[k];
        if (random_invoke(m, &in, &out) != AOTC_OK) return 3;
    }
    printf("%%d %%d %%d %%.9g\n", !memcmp(u[0], u[1], sizeof u[0]), !memcmp(u[0], v[0], sizeof u[0]),
           !memcmp(v[0], v[1], sizeof v[0]), sum(u[0], %(n)d));
    random_destroy(m);
    return 0;
}
"""
    feeds = _feeds()
    alloc = []
    for name, a in feeds.items():
        alloc.append(f"static {'double' if a.dtype == np.float64 else 'float'} {name}_[{a.size}];")
        alloc.append(f"in.{name} = {name}_;")
    for name, a in c_draws[0].items():
        if name != "u01":
            t = {np.float32: "float", np.float64: "double", np.int64: "int64_t", np.int32: "int32_t",
                 np.bool_: "uint8_t"}[a.dtype.type]
            alloc += [f"static {t} {name}_[{a.size}];", f"out.{name} = {name}_;"]
    text = src % {"n": N, "alloc": "\n    ".join(alloc)}
    exe = build(tmp_path, text, [(c_model, "random")])
    same_runs, run_is_first_invoke, invokes_same, total = run(exe).split()
    assert (same_runs, run_is_first_invoke, invokes_same) == ("1", "1", "0")
    # (the program's inputs are zeros, so only the inputless generators are comparable with c_draws)
    assert abs(float(total) - float(c_draws[0]["u01"].astype(np.float64).sum())) < 1e-3


def test_an_unrolled_loop_draws_a_stream_per_iteration(tmp_path):
    """A Loop unrolled at compile time: each unseeded RandomUniform copy its own stream."""
    body = helper.make_graph(
        [helper.make_node("RandomUniform", [], ["r"], shape=[1000]),
         helper.make_node("Identity", ["cond"], ["cond_out"])], "body",
        [helper.make_tensor_value_info("iter", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("r", TensorProto.FLOAT, [1000])])
    inits = [numpy_helper.from_array(np.array(3, np.int64), "trips"), numpy_helper.from_array(np.array(True), "c0")]
    m = _graph([helper.make_node("Loop", ["trips", "c0"], ["scan"], body=body)], outputs=["scan"], inits=inits)
    scan = load(compile_model(_save(m, tmp_path), output_dir=tmp_path / "out")).run({})[0]
    assert scan.shape == (3, 1000)
    assert not np.array_equal(scan[0], scan[1]) and not np.array_equal(scan[1], scan[2])


def test_float16_outputs(tmp_path):
    nodes = [helper.make_node("RandomNormal", [], ["h"], shape=[N], dtype=TensorProto.FLOAT16, seed=1.0)]
    g = helper.make_graph(nodes, "g", [], [helper.make_tensor_value_info("h", TensorProto.FLOAT16, [N])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    h = load(compile_model(_save(m, tmp_path), output_dir=tmp_path / "out")).run({})[0]
    assert h.dtype == np.float16 and h.shape == (N,)
    _moments_ok(h.astype(np.float64), 0.0, 1.0)


# ------------------------------------------------------------------ ONNX's node cases
def _cases() -> dict:
    """Bernoulli's cases (the expanded ones too, whose first node is RandomUniformLike) and the
    training-mode Dropout ones."""
    import importlib
    for module in ("bernoulli", "dropout"):
        importlib.import_module(f"onnx.backend.test.case.node.{module}")
    from onnx.backend.test.case import node
    return {c.name: c for c in node._NodeTestCases if c.name.startswith(("test_bernoulli", "test_training_dropout"))}


NODE_CASES = ["test_bernoulli", "test_bernoulli_double", "test_bernoulli_double_expanded", "test_bernoulli_expanded",
              "test_bernoulli_seed", "test_bernoulli_seed_expanded", "test_training_dropout",
              "test_training_dropout_default", "test_training_dropout_default_mask", "test_training_dropout_mask",
              "test_training_dropout_zero_ratio", "test_training_dropout_zero_ratio_mask"]


@functools.lru_cache(maxsize=1)
def _node_cases() -> dict:
    return _cases()


def test_the_node_cases_are_all_of_onnxs():
    assert sorted(_node_cases()) == NODE_CASES


@pytest.mark.parametrize("name", NODE_CASES)
def test_onnx_node_case(name, tmp_path):
    """Values drawn by numpy cannot be compared: the outputs' shapes and types, Bernoulli's
    zeros and ones, Dropout's zeros and scaled inputs with a mask that says which; a ratio of
    0 keeps the input exactly."""
    case = _node_cases()[name]
    names = [i.name for i in case.model.graph.input]
    path = _save(case.model, tmp_path)
    for k, (inputs, outputs) in enumerate(case.data_sets):
        feeds = {n: np.asarray(numpy_helper.to_array(a) if isinstance(a, onnx.TensorProto) else a)
                 for n, a in zip(names, inputs)}
        consts = {n: a for n, a in feeds.items() if n in ("r", "t")}
        run = {n: a for n, a in feeds.items() if n not in consts}
        out = compile_model(path, output_dir=tmp_path / f"out{k}", shapes={n: a.shape for n, a in run.items()},
                            consts=consts)
        got = load(out).run(run)
        want = [np.asarray(numpy_helper.to_array(a) if isinstance(a, onnx.TensorProto) else a) for a in outputs]
        assert [(g.shape, g.dtype) for g in got] == [(w.shape, w.dtype) for w in want]
        if name.startswith("test_bernoulli"):
            assert set(np.unique(got[0]).tolist()) <= {0, 1}
            continue
        x = feeds["x"]
        ratio = float(consts["r"]) if "r" in consts else 0.5
        if ratio == 0:
            for g, w in zip(got, want):
                np.testing.assert_array_equal(g, w)
            continue
        y = got[0]
        kept = y != 0
        np.testing.assert_allclose(y[kept], x[kept] / (1 - ratio), rtol=1e-6)
        if len(got) > 1:
            np.testing.assert_array_equal(got[1], kept)


# ------------------------------------------------------------------ what aotc refuses
def _refused(tmp_path, node, inputs=(), inits=()):
    return compile_program(_save(_graph([node], inputs, inits=inits), tmp_path), target="c")


@pytest.mark.parametrize("node, error, match", [
    (helper.make_node("RandomNormal", [], ["y"]), ModelError, "lacks attribute 'shape'"),
    (helper.make_node("RandomUniform", [], ["y"], shape=[2, -1]), ShapeError, "negative dim"),
    (helper.make_node("RandomUniform", [], ["y"], shape=[2], low=1.0, high=0.5), ShapeError, "below low"),
    (helper.make_node("RandomNormal", [], ["y"], shape=[2], dtype=TensorProto.INT32), UnsupportedError,
     "dtype int32"),
    (helper.make_node("RandomNormal", [], ["y"], shape=[2], scale=float("inf")), ShapeError, "finite"),
    (helper.make_node("RandomNormalLike", ["i"], ["y"]), ShapeError, "float dtype attribute"),
    (helper.make_node("Bernoulli", ["i"], ["y"]), ModelError, "allows double, float, float16"),
    (helper.make_node("Multinomial", ["f"], ["y"], dtype=TensorProto.FLOAT), ShapeError, "int32 .6. or int64"),
    (helper.make_node("Multinomial", ["f"], ["y"], sample_size=0), ShapeError, "sample_size 0"),
    (helper.make_node("Multinomial", ["f1"], ["y"]), ShapeError, r"\[batch_size, class_size\]"),
    (helper.make_node("Dropout", ["f", "one", "yes"], ["y"]), ShapeError, r"ratio 1 must be in \[0, 1\)"),
    (helper.make_node("Dropout", ["f", "", "flag"], ["y"]), UnsupportedError, "training_mode known only at run time"),
], ids=lambda v: v.op_type if hasattr(v, "op_type") else None)
def test_bad_attributes_are_refused(node, error, match, tmp_path):
    inputs = [helper.make_tensor_value_info("i", TensorProto.INT32, [3]),
              helper.make_tensor_value_info("f", TensorProto.FLOAT, [2, 3]),
              helper.make_tensor_value_info("f1", TensorProto.FLOAT, [3]),
              helper.make_tensor_value_info("flag", TensorProto.BOOL, [])]
    inits = [numpy_helper.from_array(np.array(1.0, np.float32), "one"), numpy_helper.from_array(np.array(True), "yes")]
    used = set(node.input)
    with pytest.raises(error, match=match):
        _refused(tmp_path, node, [i for i in inputs if i.name in used], [i for i in inits if i.name in used])


def test_the_conformance_runner_says_random():
    """tools/conformance.py: a case that draws gives RANDOM (shapes and dtypes checked, values
    not comparable), one that draws nothing (a zero ratio) still compares its values."""
    from tools.conformance import run_cases
    cases = _node_cases()
    got = {r.name: r for r in run_cases([cases["test_bernoulli_seed"], cases["test_training_dropout_mask"],
                                         cases["test_training_dropout_zero_ratio"]], jobs=1, timeout=120)}
    assert got["test_bernoulli_seed"].status == "RANDOM", got["test_bernoulli_seed"].reason
    assert got["test_training_dropout_mask"].status == "RANDOM"
    assert "y, z drawn at random" in got["test_training_dropout_mask"].reason
    assert got["test_training_dropout_zero_ratio"].status == "PASS_BOUND"


def test_check_compares_random_outputs_by_shape_and_dtype_only(tmp_path):
    """`aotc check` on a model with random ops: the outputs drawn from them are compared by
    shape and dtype (aotc cannot draw ONNX Runtime's numbers) and say so; the others by value,
    as always."""
    from typer.testing import CliRunner
    from aotc.check.runner import junit_xml, run_check
    from aotc.cli import app
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 5])
    nodes = [helper.make_node("RandomNormalLike", ["x"], ["noise"], name="noise_node"),
             helper.make_node("Add", ["x", "noise"], ["noisy"]),
             helper.make_node("Mul", ["x", "x"], ["square"])]
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [3, 5]) for n in ("noisy", "square")]
    model = helper.make_model(helper.make_graph(nodes, "g", [x], outs), opset_imports=[helper.make_opsetid("", 22)])
    path = tmp_path / "noisy.onnx"
    onnx.save(model, str(path))
    res = run_check(path, target="c")
    by = {o.name: o for o in res.outputs}
    assert res.passed
    assert not by["noisy"].values_compared and "RandomNormalLike 'noise_node'" in by["noisy"].note
    assert by["square"].values_compared and by["square"].mismatches == 0
    assert "values not compared" in junit_xml(res)
    r = CliRunner().invoke(app, ["check", str(path), "--target", "c"])
    assert r.exit_code == 0, r.output
    assert "random" in r.output and "PASS" in r.output

