"""ai.onnx.ml operators (frontend/ml.py, frontend/ml_trees.py): each rewritten into ai.onnx
operators when the model is read, against ONNX Runtime's ai.onnx.ml kernels on fresh random
inputs (rows with NaN where the operator treats missing values)."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from aotc.errors import UnsupportedError
from tests.helpers import assert_parity, rand

ML = "ai.onnx.ml"


def ml_model(nodes, inputs: dict, outputs: list, ml_opset: int = 3, opset: int = 17, out_types=None):
    g_in = [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape) for k, v in inputs.items()]
    g_out = [helper.make_tensor_value_info(o, out_types[o], None) if o in (out_types or {})
             else helper.make_empty_tensor_value_info(o) for o in outputs]
    m = helper.make_model(helper.make_graph(nodes, "ml", g_in, g_out),
                          opset_imports=[helper.make_opsetid("", opset), helper.make_opsetid(ML, ml_opset)])
    m.ir_version = 8
    return m


def N(op, ins, outs, **kw):
    return helper.make_node(op, ins, outs, domain=ML, **kw)


def test_binarizer(tmp_path):
    x = rand(5, 7, seed=1)
    assert_parity(ml_model([N("Binarizer", ["x"], ["y"], threshold=0.3)], {"x": x}, ["y"]), tmp_path, {"x": x})


@pytest.mark.parametrize("dtype", [np.float32, np.int64])
def test_scaler(dtype, tmp_path):
    x = (rand(6, 4, seed=2) * 10).astype(dtype)
    node = N("Scaler", ["x"], ["y"], offset=[0.5, -1.0, 2.0, 0.0], scale=[2.0, 0.5, -1.5, 3.0])
    assert_parity(ml_model([node], {"x": x}, ["y"]), tmp_path, {"x": x})


@pytest.mark.parametrize("norm", ["MAX", "L1", "L2"])
def test_normalizer(norm, tmp_path):
    x = rand(6, 5, seed=3)
    x[2] = -np.abs(x[2])                      # a row whose max is negative
    assert_parity(ml_model([N("Normalizer", ["x"], ["y"], norm=norm)], {"x": x}, ["y"]), tmp_path, {"x": x})


def test_linear_regressor(tmp_path):
    x = rand(8, 5, seed=4)
    node = N("LinearRegressor", ["x"], ["y"], coefficients=rand(15, seed=5).tolist(), intercepts=[0.1, -0.2, 0.3],
             targets=3)
    assert_parity(ml_model([node], {"x": x}, ["y"]), tmp_path, {"x": x})


@pytest.mark.parametrize("post", ["NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO"])
def test_linear_classifier_multiclass(post, tmp_path):
    x = rand(9, 4, seed=6)
    x[3] = 0                        # a row scoring its intercepts, one of them 0 (SOFTMAX_ZERO's case)
    node = N("LinearClassifier", ["x"], ["label", "scores"], coefficients=rand(12, seed=7).tolist(),
             intercepts=[0.1, 0.0, -0.3], classlabels_ints=[3, 7, 11], post_transform=post)
    assert_parity(ml_model([node], {"x": x}, ["label", "scores"]), tmp_path, {"x": x})


@pytest.mark.parametrize("post", ["NONE", "LOGISTIC"])
def test_linear_classifier_binary(post, tmp_path):
    x = rand(16, 3, seed=8)
    node = N("LinearClassifier", ["x"], ["label", "scores"], coefficients=[0.5, -1.0, 0.25], intercepts=[0.05],
             classlabels_ints=[0, 1], post_transform=post)
    assert_parity(ml_model([node], {"x": x}, ["label", "scores"]), tmp_path, {"x": x})


@pytest.mark.parametrize("shape", [(4, 6), (2, 3, 6), (6,)])
def test_array_feature_extractor(shape, tmp_path):
    x = rand(*shape, seed=9)
    idx = np.array([4, 0, 4, 2], np.int64)
    m = ml_model([N("ArrayFeatureExtractor", ["x", "idx"], ["y"])], {"x": x, "idx": idx}, ["y"])
    assert_parity(m, tmp_path, {"x": x, "idx": idx})


def test_imputer_nan_and_value(tmp_path):
    x = rand(6, 3, seed=10)
    x[1, 0] = x[4, 2] = np.nan
    m = ml_model([N("Imputer", ["x"], ["y"], imputed_value_floats=[1.5, -2.0, 7.0], replaced_value_float=np.nan)],
                 {"x": x}, ["y"])
    assert_parity(m, tmp_path, {"x": x})
    xi = np.random.default_rng(11).integers(-2, 3, (5, 4)).astype(np.int64)
    m = ml_model([N("Imputer", ["x"], ["y"], imputed_value_int64s=[9], replaced_value_int64=0)], {"x": xi}, ["y"])
    (tmp_path / "i").mkdir()
    assert_parity(m, tmp_path / "i", {"x": xi})


def test_one_hot_encoder(tmp_path):
    x = np.random.default_rng(12).integers(0, 6, (4, 3)).astype(np.int64)
    m = ml_model([N("OneHotEncoder", ["x"], ["y"], cats_int64s=[1, 3, 4, 5], zeros=1)], {"x": x}, ["y"])
    assert_parity(m, tmp_path, {"x": x})


def test_label_encoder_numeric(tmp_path):
    x = np.random.default_rng(13).integers(0, 8, (3, 5)).astype(np.int64)
    m = ml_model([N("LabelEncoder", ["x"], ["y"], keys_int64s=[1, 2, 5, 7], values_floats=[0.5, -1.0, 2.5, 9.0],
                    default_float=-3.0)], {"x": x}, ["y"], ml_opset=2)
    assert_parity(m, tmp_path, {"x": x})
    keys = helper.make_tensor("k", TensorProto.INT32, [3], [4, 0, 6])
    vals = helper.make_tensor("v", TensorProto.INT32, [3], [40, 100, 60])
    default = helper.make_tensor("d", TensorProto.INT32, [1], [-5])
    xi = x.astype(np.int32)
    m = ml_model([N("LabelEncoder", ["x"], ["y"], keys_tensor=keys, values_tensor=vals, default_tensor=default)],
                 {"x": xi}, ["y"], ml_opset=4)
    (tmp_path / "t").mkdir()
    assert_parity(m, tmp_path / "t", {"x": xi})


def test_feature_vectorizer(tmp_path):
    a, b, c = rand(4, 3, seed=14), rand(4, 5, seed=15), rand(4, 2, seed=17)
    m = ml_model([N("FeatureVectorizer", ["a", "b", "c"], ["y"], inputdimensions=[3, 2, 4])],
                 {"a": a, "b": b, "c": c}, ["y"])
    assert_parity(m, tmp_path, {"a": a, "b": b, "c": c})


def test_string_labels_are_refused(tmp_path):
    import aotc
    x = rand(3, 2, seed=16)
    node = N("LinearClassifier", ["x"], ["label", "scores"], coefficients=[1.0, 2.0, 3.0, 4.0], intercepts=[0.0, 0.0],
             classlabels_strings=["a", "b"])
    p = tmp_path / "m.onnx"
    onnx.save(ml_model([node], {"x": x}, ["label", "scores"]), str(p))
    with pytest.raises(UnsupportedError, match="string class labels"):
        aotc.compile(p, output_dir=tmp_path / "out")


# ----------------------------------------------------------------------------- tree ensembles
MODES = ["BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT", "BRANCH_EQ", "BRANCH_NEQ"]


def random_forest(rng, trees: int, features: int, outputs: int, max_depth: int, modes=MODES, missing=False,
                  positive=False):
    """Version 1-3 attributes of a random ensemble: (nodes_* dict, weight tuples (tree, node, output, w))."""
    cols = {k: [] for k in ("nodes_treeids", "nodes_nodeids", "nodes_featureids", "nodes_values", "nodes_modes",
                            "nodes_truenodeids", "nodes_falsenodeids", "nodes_missing_value_tracks_true")}
    weights = []
    for t in range(trees):
        count = [0]

        def build(depth):
            k = count[0]
            count[0] += 1
            row = len(cols["nodes_treeids"])
            for key in cols:
                cols[key].append(0)
            cols["nodes_treeids"][row], cols["nodes_nodeids"][row] = t, k
            if depth == max_depth or (depth > 0 and rng.random() < 0.25):
                cols["nodes_modes"][row] = "LEAF"
                cols["nodes_values"][row] = 0.0
                cols["nodes_featureids"][row] = 1000        # not read for a leaf (converters write anything)
                for o in rng.choice(outputs, size=rng.integers(1, outputs + 1), replace=False):
                    w = rng.uniform(0, 1) if positive else rng.standard_normal()
                    weights.append((t, k, int(o), float(w)))
                return k
            cols["nodes_modes"][row] = str(rng.choice(modes))
            cols["nodes_featureids"][row] = int(rng.integers(features))
            cols["nodes_values"][row] = float(np.round(rng.standard_normal() * 2) / 2)
            cols["nodes_missing_value_tracks_true"][row] = int(missing and rng.random() < 0.5)
            cols["nodes_truenodeids"][row] = build(depth + 1)
            cols["nodes_falsenodeids"][row] = build(depth + 1)
            return k
        build(0)
    return cols, weights


def _tree_inputs(rng, n, features, nan=False):
    x = (np.round(rng.standard_normal((n, features)) * 2) / 2).astype(np.float32)   # ties with thresholds
    x += (rng.random((n, features)) < 0.5) * rng.standard_normal((n, features)).astype(np.float32) * 0.1
    if nan:
        x[rng.random((n, features)) < 0.15] = np.nan
    return x


@pytest.mark.parametrize("aggregate", ["SUM", "AVERAGE", "MIN", "MAX"])
def test_tree_ensemble_regressor(aggregate, tmp_path):
    rng = np.random.default_rng(20 + len(aggregate))
    cols, weights = random_forest(rng, trees=6, features=5, outputs=2, max_depth=5, missing=True)
    t, nd, o, w = zip(*weights)
    node = N("TreeEnsembleRegressor", ["x"], ["y"], n_targets=2, aggregate_function=aggregate, base_values=[0.25, -1.0],
             target_treeids=list(t), target_nodeids=list(nd), target_ids=list(o), target_weights=list(w), **cols)
    x = _tree_inputs(rng, 40, 5, nan=True)
    assert_parity(ml_model([node], {"x": x}, ["y"]), tmp_path, {"x": x})


@pytest.mark.parametrize("kind", ["threads", "opencl", "cuda-eager"])
def test_tree_ensemble_classifier_on_other_targets(kind, tmp_path):
    """The rewritten graph (gathers, compares, selects, reductions) on the thread pool, OpenCL
    (PoCL) and the CUDA emulation, against ONNX Runtime."""
    from tests.test_attention import _target
    rng = np.random.default_rng(25)
    cols, weights = random_forest(rng, trees=5, features=4, outputs=3, max_depth=5, missing=True)
    t, nd, o, w = zip(*weights)
    node = N("TreeEnsembleClassifier", ["x"], ["label", "scores"], classlabels_int64s=[2, 4, 6], post_transform="SOFTMAX",
             class_treeids=list(t), class_nodeids=list(nd), class_ids=list(o), class_weights=list(w), **cols)
    x = _tree_inputs(rng, 37, 4, nan=True)
    target, build, threads = _target(kind, tmp_path)
    assert_parity(ml_model([node], {"x": x}, ["label", "scores"]), tmp_path, {"x": x}, target=target, build=build,
                  threads=threads)


@pytest.mark.parametrize("post", ["NONE", "SOFTMAX", "LOGISTIC"])
def test_tree_ensemble_classifier_multiclass(post, tmp_path):
    rng = np.random.default_rng(30 + len(post))
    cols, weights = random_forest(rng, trees=4, features=3, outputs=3, max_depth=4)
    t, nd, o, w = zip(*weights)
    node = N("TreeEnsembleClassifier", ["x"], ["label", "scores"], classlabels_int64s=[10, 20, 30],
             post_transform=post, class_treeids=list(t), class_nodeids=list(nd), class_ids=list(o),
             class_weights=list(w), **cols)
    x = _tree_inputs(rng, 30, 3)
    assert_parity(ml_model([node], {"x": x}, ["label", "scores"]), tmp_path, {"x": x})


@pytest.mark.parametrize("scored", [0, 1, 2])
@pytest.mark.parametrize("form", ["positive", "mixed", "positive_logistic", "mixed_logistic"])
def test_tree_ensemble_classifier_binary(form, scored, tmp_path):
    """Two classes, the trees scoring the first (scored=0), the second (1) or both (2), with
    weights all positive (probabilities) or not: ONNX Runtime's rules differ for each."""
    rng = np.random.default_rng(40 + len(form) + 7 * scored)
    cols, weights = random_forest(rng, trees=3, features=4, outputs=2 if scored == 2 else 1, max_depth=4,
                                  positive=form.startswith("positive"))
    if scored < 2:
        weights = [(t, nd, scored, w / 3) for t, nd, o, w in weights]
    t, nd, o, w = zip(*weights)
    node = N("TreeEnsembleClassifier", ["x"], ["label", "scores"], classlabels_int64s=[4, 9],
             post_transform="LOGISTIC" if form.endswith("logistic") else "NONE",
             **({"base_values": [-0.25]} if scored == 0 else {}),
             class_treeids=list(t), class_nodeids=list(nd), class_ids=list(o), class_weights=list(w), **cols)
    x = _tree_inputs(rng, 30, 4)
    model = ml_model([node], {"x": x}, ["label", "scores"])
    if scored < 2:
        assert_parity(model, tmp_path, {"x": x})
        return
    # both classes scored: ONNX Runtime's scores, but its label is 1 where the second score is
    # > 0, else 0, not one of the class labels; aotc gives the top class's label
    import aotc
    import onnxruntime as ort
    onnx.save(model, str(tmp_path / "m.onnx"))
    label, scores = aotc.compile(tmp_path / "m.onnx", output_dir=tmp_path / "out").run({"x": x})
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[1]
    np.testing.assert_allclose(scores, want, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(label, np.array([4, 9])[np.argmax(want, axis=1)])
    # `aotc check` reports the label as a mismatch, with a note saying why
    from aotc.check.runner import run_check
    res = run_check(tmp_path / "m.onnx", inputs={"x": x}, output_dir=tmp_path / "check")
    by_name = {o.name: o for o in res.outputs}
    assert by_name["scores"].passed and not by_name["label"].passed
    assert "whatever the class labels" in by_name["label"].note


def _v5_from(cols, weights, K):
    """The same ensemble in TreeEnsemble-5's layout (interior nodes and leaves apart)."""
    rows = range(len(cols["nodes_treeids"]))
    leaf = {(cols["nodes_treeids"][r], cols["nodes_nodeids"][r]) for r in rows if cols["nodes_modes"][r] == "LEAF"}
    inner = [r for r in rows if cols["nodes_modes"][r] != "LEAF"]
    inner_at = {(cols["nodes_treeids"][r], cols["nodes_nodeids"][r]): k for k, r in enumerate(inner)}
    leaf_rows = [(t, nd, o, w) for t, nd, o, w in weights]
    leaf_at = {}
    for k, (t, nd, o, w) in enumerate(leaf_rows):
        leaf_at.setdefault((t, nd), k)      # a branch goes to a leaf's first weight; one weight per leaf here

    def ref(r, key):
        tgt = (cols["nodes_treeids"][r], cols[key][r])
        return (leaf_at[tgt], 1) if tgt in leaf else (inner_at[tgt], 0)
    tr, fa = [ref(r, "nodes_truenodeids") for r in inner], [ref(r, "nodes_falsenodeids") for r in inner]
    codes = {m: i for i, m in enumerate(MODES)}
    roots = [inner_at[(t, 0)] for t in sorted(set(cols["nodes_treeids"]))]
    return dict(nodes_featureids=[cols["nodes_featureids"][r] for r in inner],
                nodes_splits=helper.make_tensor("s", TensorProto.FLOAT, [len(inner)],
                                                [cols["nodes_values"][r] for r in inner]),
                nodes_modes=helper.make_tensor("m", TensorProto.UINT8, [len(inner)],
                                               [codes[cols["nodes_modes"][r]] for r in inner]),
                nodes_truenodeids=[a for a, _ in tr], nodes_trueleafs=[b for _, b in tr],
                nodes_falsenodeids=[a for a, _ in fa], nodes_falseleafs=[b for _, b in fa],
                nodes_missing_value_tracks_true=[cols["nodes_missing_value_tracks_true"][r] for r in inner],
                tree_roots=roots, leaf_targetids=[o for _, _, o, _ in leaf_rows],
                leaf_weights=helper.make_tensor("w", TensorProto.FLOAT, [len(leaf_rows)],
                                                [w for _, _, _, w in leaf_rows]), n_targets=K)


@pytest.mark.parametrize("aggregate", [0, 1, 3])
def test_tree_ensemble_5(aggregate, tmp_path):
    rng = np.random.default_rng(50 + aggregate)
    cols, weights = random_forest(rng, trees=5, features=4, outputs=1, max_depth=5, missing=True)
    for r in range(len(cols["nodes_treeids"])):     # trees of depth >= 1 (TreeEnsemble-5 roots are interior)
        if cols["nodes_nodeids"][r] == 0 and cols["nodes_modes"][r] == "LEAF":
            pytest.skip("a one-leaf tree")
    weights = [(t, nd, int(rng.integers(2)), w) for t, nd, o, w in weights]
    node = N("TreeEnsemble", ["x"], ["y"], aggregate_function=aggregate, **_v5_from(cols, weights, 2))
    x = _tree_inputs(rng, 40, 4, nan=True)
    assert_parity(ml_model([node], {"x": x}, ["y"], ml_opset=5, opset=21), tmp_path, {"x": x})


@pytest.mark.parametrize("kernel", ["LINEAR", "POLY", "RBF", "SIGMOID", "none", "one_class"])
def test_svm_regressor(kernel, tmp_path):
    rng = np.random.default_rng(60 + len(kernel))
    F, S = 4, 7
    x = rand(12, F, seed=61)
    kw = dict(coefficients=rng.standard_normal(S).tolist(), rho=[0.3], n_supports=S,
              support_vectors=rng.standard_normal(S * F).tolist(), kernel_params=[0.4, 0.5, 3.0],
              kernel_type="RBF" if kernel == "one_class" else kernel)
    if kernel == "none":           # a linear model: no support vectors, the coefficients are weights
        kw = dict(coefficients=rng.standard_normal(F).tolist(), rho=[-0.2], n_supports=0, kernel_type="LINEAR",
                  kernel_params=[0.0, 0.0, 0.0])
    if kernel == "one_class":
        kw["one_class"] = 1
    m = ml_model([N("SVMRegressor", ["x"], ["y"], **kw)], {"x": x}, ["y"])
    assert_parity(m, tmp_path, {"x": x})


# ----------------------------------------------------------------------------- optimizer steps
# ai.onnx.preview.training (frontend/training.py); ONNX Runtime's CPU build has no kernels for
# them: numpy computes the spec's formulas, R and T stay run-time inputs (T = 0 and T > 0).
def _train_model(op, n_groups, names, outs, **attrs):
    shapes = {k: (3, 4) if k not in ("R", "T") else () for k in names}
    types = {k: TensorProto.INT64 if k == "T" else TensorProto.FLOAT for k in names}
    g = helper.make_graph([helper.make_node(op, names, outs, domain="ai.onnx.preview.training", **attrs)], "t",
                          [helper.make_tensor_value_info(k, types[k], shapes[k]) for k in names],
                          [helper.make_tensor_value_info(o, TensorProto.FLOAT, (3, 4)) for o in outs])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                               helper.make_opsetid("ai.onnx.preview.training", 1)])


@pytest.mark.parametrize("step", [0, 3])
def test_adam_two_tensors(step, tmp_path):
    import aotc
    names = ["R", "T", "X1", "X2", "G1", "G2", "V1", "V2", "H1", "H2"]
    outs = ["X1n", "X2n", "V1n", "V2n", "H1n", "H2n"]
    alpha, beta, eps, norm, post = 0.8, 0.95, 1e-4, 0.01, 0.05
    m = _train_model("Adam", 4, names, outs, alpha=alpha, beta=beta, epsilon=eps, norm_coefficient=norm,
                     norm_coefficient_post=post)
    feeds = {k: rand(3, 4, seed=70 + i) for i, k in enumerate(names[2:])}
    feeds["H1"], feeds["H2"] = np.abs(feeds["H1"]), np.abs(feeds["H2"])
    feeds["R"], feeds["T"] = np.float32(0.1), np.int64(step)
    onnx.save(m, str(tmp_path / "adam.onnx"))
    got = dict(zip(outs, aotc.compile(tmp_path / "adam.onnx", output_dir=tmp_path / "out").run(feeds)))
    rate = 0.1 * np.sqrt(1 - beta ** step) / (1 - alpha ** step) if step > 0 else 0.1
    for k in ("1", "2"):
        x, g, v, h = (feeds[p + k].astype(np.float64) for p in "XGVH")
        gr = norm * x + g
        v_new, h_new = alpha * v + (1 - alpha) * gr, beta * h + (1 - beta) * gr * gr
        x_new = (1 - post) * (x - rate * v_new / (np.sqrt(h_new) + eps))
        for name, want in ((f"X{k}n", x_new), (f"V{k}n", v_new), (f"H{k}n", h_new)):
            np.testing.assert_allclose(got[name], want, rtol=1e-5, atol=1e-6, err_msg=name)


@pytest.mark.parametrize("mode", ["standard", "nesterov"])
def test_momentum_first_and_later_steps(mode, tmp_path):
    import aotc
    names, outs = ["R", "T", "X", "G", "V"], ["Xn", "Vn"]
    m = _train_model("Momentum", 3, names, outs, alpha=0.9, beta=0.5, mode=mode, norm_coefficient=0.02)
    onnx.save(m, str(tmp_path / "mom.onnx"))
    art = aotc.compile(tmp_path / "mom.onnx", output_dir=tmp_path / "out")
    x, g, v = rand(3, 4, seed=80), rand(3, 4, seed=81), rand(3, 4, seed=82)
    for step in (0, 5):
        xn, vn = art.run({"R": np.float32(0.2), "T": np.int64(step), "X": x, "G": g, "V": v})
        gr = 0.02 * x + g
        v_new = 0.9 * v + (0.5 if step > 0 else 1.0) * gr
        x_new = x - 0.2 * (v_new if mode == "standard" else gr + 0.9 * v_new)
        np.testing.assert_allclose(vn, v_new, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(xn, x_new, rtol=1e-5, atol=1e-6)


def test_adagrad(tmp_path):
    import aotc
    names, outs = ["R", "T", "X", "G", "H"], ["Xn", "Hn"]
    m = _train_model("Adagrad", 3, names, outs, decay_factor=0.1, epsilon=1e-5, norm_coefficient=0.001)
    onnx.save(m, str(tmp_path / "ada.onnx"))
    x, g, h = rand(3, 4, seed=90), rand(3, 4, seed=91), np.abs(rand(3, 4, seed=92))
    xn, hn = aotc.compile(tmp_path / "ada.onnx", output_dir=tmp_path / "out").run(
        {"R": np.float32(0.3), "T": np.int64(4), "X": x, "G": g, "H": h})
    gr = 0.001 * x + g
    h_new = h + gr * gr
    np.testing.assert_allclose(hn, h_new, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(xn, x - 0.3 / (1 + 4 * 0.1) * gr / (np.sqrt(h_new) + 1e-5), rtol=1e-5, atol=1e-6)


def test_mutated_attribute_tables_compile_or_are_refused(tmp_path):
    """Seeded mutations of ML nodes' attributes (entries out of range, lists cut short, NaN,
    unknown modes, attributes dropped): each model compiles or is refused with an AotcError,
    never another exception."""
    import copy
    import random

    from aotc.compiler import compile_program
    from aotc.errors import AotcError
    rng = np.random.default_rng(0)
    cols, weights = random_forest(rng, 3, 4, 2, 4)
    t, nd, o, w = zip(*weights)
    seeds = [
        N("TreeEnsembleRegressor", ["x"], ["y"], n_targets=2, target_treeids=list(t), target_nodeids=list(nd),
          target_ids=list(o), target_weights=list(w), **cols),
        N("LinearClassifier", ["x"], ["l", "s"], coefficients=list(np.arange(12.0)), intercepts=[0.0, 1.0, 2.0],
          classlabels_ints=[1, 2, 3]),
        N("LabelEncoder", ["x"], ["y"], keys_floats=[1.0, 2.0], values_int64s=[3, 4]),
        N("SVMRegressor", ["x"], ["y"], coefficients=[1.0, 2.0], support_vectors=list(np.arange(8.0)), n_supports=2,
          rho=[0.1], kernel_type="RBF", kernel_params=[0.1, 0.0, 3.0]),
    ]
    outcomes = {"compiled": 0, "refused": 0}
    for k in range(120):
        node = copy.deepcopy(seeds[k % len(seeds)])
        r = random.Random(k)
        a = r.choice(list(node.attribute))
        if a.type == onnx.AttributeProto.INTS and len(a.ints):
            a.ints[r.randrange(len(a.ints))] = r.choice([-1, 0, 99, 2 ** 40])
            if r.random() < 0.3:
                del a.ints[-1]
        elif a.type == onnx.AttributeProto.FLOATS and len(a.floats):
            if r.random() < 0.5:
                del a.floats[-1]
            else:
                a.floats[0] = float("nan")
        elif a.type == onnx.AttributeProto.STRINGS and len(a.strings):
            a.strings[r.randrange(len(a.strings))] = r.choice([b"BOGUS", b"LEAF", b"BRANCH_MEMBER"])
        else:
            node.attribute.remove(a)
        path = tmp_path / f"m{k}.onnx"
        onnx.save(ml_model([node], {"x": np.zeros((3, 4), np.float32)}, list(node.output)), str(path))
        try:
            compile_program(path, target="c", threads=1)
            outcomes["compiled"] += 1
        except AotcError:
            outcomes["refused"] += 1
    assert outcomes["compiled"] and outcomes["refused"], outcomes      # both kinds of mutants occur
