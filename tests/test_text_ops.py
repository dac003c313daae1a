"""TfIdfVectorizer (aotc/ops/text.py) against ONNX Runtime, bit for bit, on fresh random
integer tokens drawn from a small vocabulary (so that most of the pool's n-grams occur, many of
them several times): every mode, gram lengths 1..3, skips 0..2, with and without weights,
int32 and int64, [C] and [N, C], n-grams of lengths outside min..max in the pool (they keep
their ids), output indexes permuted or shared by several n-grams (where IDF's last hit wins),
on the c target and on opencl. Then ONNX's own node cases, and the models aotc refuses."""
from __future__ import annotations

import functools
import itertools
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from aotc.api import compile as aotc_compile
from aotc.compiler import compile_program
from aotc.errors import ModelError, ShapeError, UnsupportedError
from tests.helpers import (NP2ONNX, eager_gpu_target, eager_threads_target, onnx_node_cases_of,
                           run_onnx_node_case)
from tests.test_opencl import _opencl_missing

MODES = ("TF", "IDF", "TFIDF")
GRAMS = [(1, 1), (1, 2), (1, 3), (2, 2), (2, 3), (3, 3)]
SKIPS = (0, 1, 2)
VOCAB = np.array([-3, 0, 1, 2, 5, 7, 2 ** 35], np.int64)      # 2 ** 35: no int32 token holds it


def _random_pool(rng, weights: bool) -> dict:
    """Attributes of a pool of 1-, 2- and 3-grams over VOCAB (distinct within each length, in
    random order), with output indexes permuted, or drawn with repeats (shared outputs, gaps)."""
    pool, counts, total = [], [], 0
    for n in (1, 2, 3):
        counts.append(len(pool))
        grams: list[tuple] = []
        want = int(rng.integers(3, 7))
        while len(grams) < want:
            g = tuple(int(v) for v in rng.choice(VOCAB if n == 1 else VOCAB[:-1], n))
            if g not in grams:
                grams.append(g)
        pool += [v for g in grams for v in g]
        total += want
    indexes = rng.permutation(total) if rng.random() < 0.5 else rng.integers(0, total + 2, total)
    attrs = dict(ngram_counts=counts, ngram_indexes=[int(i) for i in indexes], pool_int64s=pool)
    if weights:
        attrs["weights"] = [float(w) for w in rng.uniform(0.05, 3.0, total).astype(np.float32)]
    return attrs


def _model(x: np.ndarray, configs: list[dict]) -> onnx.ModelProto:
    """One TfIdfVectorizer node per attribute set, all reading x."""
    nodes = [helper.make_node("TfIdfVectorizer", ["x"], [f"y{k}"], name=f"tfidf{k}", **a)
             for k, a in enumerate(configs)]
    g = helper.make_graph(nodes, "tfidf", [helper.make_tensor_value_info("x", NP2ONNX[x.dtype], x.shape)],
                          [helper.make_empty_tensor_value_info(f"y{k}") for k in range(len(configs))])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def _tokens(rng, shape, dtype) -> np.ndarray:
    vocab = VOCAB if dtype == np.int64 else np.append(VOCAB[:-1], 2 ** 30)     # 2 ** 30: in no pool
    return rng.choice(vocab, shape).astype(dtype)


def _configs(part: int, seed: int) -> list[dict]:
    """Part `part` (of 4) of every (mode, gram lengths, skips, weights): each part has every
    value of each of them, and the 4 parts together have every combination once."""
    rng = np.random.default_rng(seed)
    configs = []
    for (m, mode), (g, (lo, hi)), skip, weights in itertools.product(
            enumerate(MODES), enumerate(GRAMS), SKIPS, (False, True)):
        if (m + g + skip + weights) % 4 == part:
            configs.append(dict(mode=mode, min_gram_length=lo, max_gram_length=hi, max_skip_count=skip,
                                **_random_pool(rng, weights)))
    return configs


def _check_against_ort(x: np.ndarray, configs: list[dict], tmp_path: Path, target: str = "c"):
    path = tmp_path / "tfidf.onnx"
    onnx.save(_model(x, configs), str(path))
    want = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    got = aotc_compile(path, target=target, output_dir=tmp_path / "out").run({"x": x})
    assert len(got) == len(want) == len(configs)
    for k, (g, w) in enumerate(zip(got, want)):
        assert g.dtype == np.float32 and g.shape == w.shape, configs[k]
        np.testing.assert_array_equal(g, w, err_msg=f"node tfidf{k}: {configs[k]}")
    return want


@pytest.mark.parametrize("part, shape, dtype", [(0, (23,), np.int32), (1, (23,), np.int64),
                                               (2, (3, 17), np.int32), (3, (3, 17), np.int64)],
                         ids=["1d-int32", "1d-int64", "2d-int32", "2d-int64"])
def test_every_mode_length_and_skip_matches_onnxruntime(part, shape, dtype, tmp_path):
    seed = 100 + part
    x = _tokens(np.random.default_rng(seed), shape, dtype)
    configs = _configs(part, seed)
    assert {c["mode"] for c in configs} == set(MODES) and {c["max_skip_count"] for c in configs} == set(SKIPS)
    assert {(c["min_gram_length"], c["max_gram_length"]) for c in configs} == set(GRAMS)
    assert {"weights" in c for c in configs} == {False, True}
    want = _check_against_ort(x, configs, tmp_path)
    # not a comparison of zeros: most nodes count something, and some counts exceed 1
    assert sum(1 for w in want if np.count_nonzero(w)) > 0.75 * len(want)
    assert any(w.max() >= 2 for w, c in zip(want, configs) if c["mode"] == "TF")


def test_rows_shorter_than_the_grams_and_pools_with_nothing_loaded(tmp_path):
    rng = np.random.default_rng(5)
    x = _tokens(rng, (4, 2), np.int64)
    pool = _random_pool(rng, True)
    configs = [dict(mode=m, min_gram_length=lo, max_gram_length=hi, max_skip_count=2, **pool)
               for m in MODES for lo, hi in ((1, 3), (3, 3), (2, 3))]
    # 2-grams only, but the pool's are empty (ngram_counts [0, 3] and 3 items in all)
    configs.append(dict(mode="TFIDF", min_gram_length=2, max_gram_length=2, max_skip_count=1,
                        ngram_counts=[0, 3], ngram_indexes=[0, 1, 4], pool_int64s=[1, 2, 5], weights=[1.0, 2.0, 3.0]))
    _check_against_ort(x, configs, tmp_path)


def test_rows_split_among_threads(tmp_path):
    rng = np.random.default_rng(9)
    configs = [dict(mode=m, min_gram_length=1, max_gram_length=3, max_skip_count=1, **_random_pool(rng, True))
               for m in MODES]
    _check_against_ort(_tokens(rng, (7, 13), np.int32), configs, tmp_path, target=eager_threads_target(tmp_path))


@pytest.mark.parametrize("shape", [(2, 0), (0,)])
def test_empty_rows_give_zeros(shape, tmp_path):
    _check_against_ort(np.zeros(shape, np.int64), [GOOD, dict(GOOD, mode="IDF")], tmp_path)


def test_constant_tokens_are_not_folded_by_the_reference(tmp_path):
    """onnx.reference weights output i by weights[i], ONNX Runtime (and the spec) the i-th
    n-gram: on constant tokens the kernel runs, not the reference (passes/infer.py)."""
    x = np.array([[5, 1, 2, 1, 2, 7, 5, 1], [2, 2, 1, 5, 1, 0, 1, 2]], np.int64)
    attrs = dict(min_gram_length=1, max_gram_length=2, max_skip_count=1, ngram_counts=[0, 3],
                 ngram_indexes=[3, 0, 2, 1, 0], pool_int64s=[1, 2, 5, 1, 2, 5, 1], weights=[0.5, 2.0, 3.0, 0.25, 8.0])
    nodes = [helper.make_node("TfIdfVectorizer", ["x"], [f"y{k}"], mode=m, **attrs) for k, m in enumerate(MODES)]
    g = helper.make_graph(nodes, "tfidf", [], [helper.make_empty_tensor_value_info(f"y{k}") for k in range(3)],
                          [onnx.numpy_helper.from_array(x, "x")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    path = tmp_path / "const.onnx"
    onnx.save(m, str(path))
    want = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {})
    got = aotc_compile(path, target="c", output_dir=tmp_path / "out").run({})
    for g_, w in zip(got, want):
        np.testing.assert_array_equal(g_, w)
    reference = ReferenceEvaluator(m).run(None, {})
    assert not np.array_equal(reference[2], want[2])        # TFIDF: the readings differ here


@pytest.mark.skipif(_opencl_missing() is not None, reason=str(_opencl_missing()))
@pytest.mark.parametrize("eager", [False, True], ids=["opencl", "opencl-eager"])
def test_opencl_matches_onnxruntime(eager, tmp_path):
    """A launch of one work-item per row, and ('eager') a work-group per row sharing its loops."""
    rng = np.random.default_rng(31 + eager)
    grams = [(1, 3), (2, 3), (1, 2), (1, 1), (3, 3), (2, 2)]
    configs = [dict(mode=mode, min_gram_length=lo, max_gram_length=hi, max_skip_count=skip,
                    **_random_pool(rng, mode != "TF"))
               for mode, (lo, hi), skip in zip(MODES * 2, grams, (2, 1, 0, 1, 2, 1))]
    x = _tokens(rng, (5, 19), np.int32 if eager else np.int64)
    _check_against_ort(x, configs, tmp_path, target=eager_gpu_target(tmp_path) if eager else "opencl")


NODE_CASES = ["test_tfidfvectorizer_tf_batch_onlybigrams_skip0", "test_tfidfvectorizer_tf_batch_onlybigrams_skip5",
              "test_tfidfvectorizer_tf_batch_uniandbigrams_skip5", "test_tfidfvectorizer_tf_only_bigrams_skip0",
              "test_tfidfvectorizer_tf_onlybigrams_levelempty", "test_tfidfvectorizer_tf_onlybigrams_skip5",
              "test_tfidfvectorizer_tf_uniandbigrams_skip5"]


@functools.lru_cache(maxsize=1)
def _node_cases() -> dict:
    return onnx_node_cases_of("tfidfvectorizer")


def test_the_node_cases_are_all_of_onnxs():
    assert sorted(_node_cases()) == NODE_CASES


@pytest.mark.parametrize("name", NODE_CASES)
def test_onnx_node_case(name, tmp_path):
    """Every data set, the output equal to the expected one."""
    run_onnx_node_case(name, tmp_path, exact=True, case=_node_cases()[name])


# ------------------------------------------------------------------ what aotc refuses
GOOD = dict(mode="TF", min_gram_length=1, max_gram_length=2, max_skip_count=1, ngram_counts=[0, 2],
            ngram_indexes=[0, 1, 2], pool_int64s=[1, 2, 1, 2])


def _analyze(tmp_path, elem=TensorProto.INT64, dims=(6,), **attrs):
    node = helper.make_node("TfIdfVectorizer", ["x"], ["y"], name="n0", **attrs)
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", elem, list(dims))],
                          [helper.make_empty_tensor_value_info("y")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, str(tmp_path / "m.onnx"))
    return compile_program(tmp_path / "m.onnx", target="c")


def test_the_valid_attributes_of_the_refusal_cases_compile(tmp_path):
    c = _analyze(tmp_path, **GOOD)
    assert c.graph.values["y"].shape == (3,)


def test_a_string_pool_is_unsupported_naming_the_node(tmp_path):
    attrs = {k: v for k, v in GOOD.items() if k != "pool_int64s"}
    with pytest.raises(UnsupportedError) as e:
        _analyze(tmp_path, **attrs, pool_strings=["a", "b", "a", "b"])
    assert "TfIdfVectorizer node 'n0'" in str(e.value) and "pool_strings" in str(e.value)


def test_string_tokens_are_unsupported(tmp_path):
    attrs = {k: v for k, v in GOOD.items() if k != "pool_int64s"}
    with pytest.raises(UnsupportedError) as e:
        _analyze(tmp_path, elem=TensorProto.STRING, **attrs, pool_strings=["a", "b", "a", "b"])
    assert "'x'" in str(e.value)


def test_float_tokens_are_refused_by_the_schema(tmp_path):
    with pytest.raises(ModelError) as e:
        _analyze(tmp_path, elem=TensorProto.FLOAT, **GOOD)
    assert "'n0'" in str(e.value) and "int32, int64" in str(e.value)


REFUSED = [
    # attributes replacing GOOD's (None: left out), input dims, words the message must hold
    (dict(min_gram_length=3), (6,), "1 <= min <= max"),
    (dict(min_gram_length=0), (6,), "1 <= min <= max"),
    (dict(max_skip_count=-1), (6,), "max_skip_count -1"),
    (dict(mode="BM25"), (6,), "mode 'BM25'"),
    (dict(max_gram_length=3), (6,), "max_gram_length 3 exceeds"),
    (dict(ngram_counts=[0, 5]), (6,), "outside the pool"),
    (dict(ngram_counts=[3, 2]), (6,), "outside the pool"),
    (dict(ngram_counts=[-1, 2]), (6,), "outside the pool"),
    (dict(ngram_counts=[0, 1]), (6,), "not whole 2-grams"),
    (dict(pool_int64s=[1, 1, 1, 2]), (6,), "the 1-gram [1] is twice"),
    (dict(weights=[1.0, 2.0]), (6,), "2 weights for 3 ngram_indexes"),
    (dict(ngram_indexes=[0, -1, 2]), (6,), "no negative values"),
    (dict(ngram_indexes=[0, 1]), (6,), "2 ngram_indexes for a pool of at least 3"),
    (dict(pool_int64s=None), (6,), "pool_int64s must be given"),
    (dict(), (2, 3, 4), "[C] or [N, C]"),
    (dict(), (0, 4), "no rows"),
]


@pytest.mark.parametrize("case", REFUSED, ids=lambda c: "-".join(f"{k}={v}" for k, v in c[0].items()) or str(c[1]))
def test_inconsistent_attributes_are_a_one_line_shape_error(case, tmp_path):
    change, dims, words = case
    attrs = {k: v for k, v in {**GOOD, **change}.items() if v is not None}
    with pytest.raises(ShapeError) as e:
        _analyze(tmp_path, dims=dims, **attrs)
    msg = str(e.value)
    assert "\n" not in msg and "TfIdfVectorizer node 'n0'" in msg and words in msg, msg
