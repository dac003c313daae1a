"""ai.onnx.ml operators (the classic machine-learning ops scikit-learn converters write) as
graphs of ai.onnx operators, so that they compile as those do: each such node is replaced,
when the model is read, by nodes of the default domain that compute the same numbers (the
numbers ONNX Runtime gives, where it and the ONNX reference differ).

    Binarizer              Cast(X > threshold)
    Scaler                 (X - offset) * scale
    Normalizer             X / the row's max, sum |x| or sqrt(sum x^2)
    LinearRegressor        Gemm
    LinearClassifier       Gemm, post_transform, ArgMax -> class label
    ArrayFeatureExtractor  Gather on the last axis
    Imputer                Where(missing, imputed, X)
    OneHotEncoder          Equal against the categories
    LabelEncoder           Equal against the keys -> Gather of the values
    FeatureVectorizer      Concat of the inputs as rows
    SVMRegressor           the kernel (linear, poly, rbf, sigmoid) against the support vectors, MatMul
    SVMClassifier          the same kernels, one-versus-one votes (no probability estimates)
    TreeEnsemble, TreeEnsembleRegressor, TreeEnsembleClassifier: ml_trees.py

Only numeric tensors: string inputs, outputs and labels stay unsupported (the operator check
names the node).

The builders (BUILDERS; the tree ensembles' are ml_trees.py's) write the nodes through
frontend/emit.py's Emit; frontend/rewrite.py runs them when the model is read.
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper

from ..errors import ModelError
from .emit import Emit, text

ML = "ai.onnx.ml"


def _floats(a: dict, key: str, default=None) -> np.ndarray | None:
    v = a.get(key, default)
    return None if v is None else np.asarray(v, np.float32)


# ---------------------------------------------------------------------------------- the operators
def _binarizer(e: Emit, a: dict):
    x, = e.node.input
    t = e.elem_type(x)
    thr = e.const(np.array(a.get("threshold", 0.0), onnx.helper.tensor_dtype_to_np_dtype(t)), "threshold")
    e.op("Cast", [e.op("Greater", [x, thr])], out=e.node.output[0], to=t)


def _scaler(e: Emit, a: dict):
    x = e.float32(e.node.input[0])
    offset, scale = _floats(a, "offset", [0.0]), _floats(a, "scale", [1.0])
    e.op("Mul", [e.op("Sub", [x, e.const(offset, "offset")]), e.const(scale, "scale")], out=e.node.output[0])


def _normalizer(e: Emit, a: dict):
    norm = text(a.get("norm", "MAX"))
    x = e.float32(e.node.input[0])
    if e.rank(e.node.input[0]) not in (1, 2):
        e.refuse("normalizes rows of a 1-D or 2-D input only")
    if norm == "MAX":
        div = e.reduce("ReduceMax", x, -1)
    elif norm == "L1":
        div = e.reduce("ReduceSum", e.op("Abs", [x]), -1)
    elif norm == "L2":
        div = e.op("Sqrt", [e.reduce("ReduceSum", e.op("Mul", [x, x]), -1)])
    else:
        raise ModelError(f"{e.label}: norm {norm!r} is not MAX, L1 or L2")
    e.op("Div", [x, div], out=e.node.output[0])


def _coefficients(e: Emit, a: dict, rows: int):
    """The (rows x features) coefficients and the intercepts of a linear model."""
    coef = _floats(a, "coefficients")
    if coef is None or coef.size == 0:
        raise ModelError(f"{e.label} has no coefficients")
    if coef.size % rows:
        raise ModelError(f"{e.label}: {coef.size} coefficients do not split into {rows} rows")
    icpt = _floats(a, "intercepts")
    if icpt is not None and icpt.size not in (0, rows):
        raise ModelError(f"{e.label}: {icpt.size} intercepts for {rows} outputs")
    return coef.reshape(rows, -1), (icpt if icpt is not None and icpt.size else np.zeros(rows, np.float32))


def _linear_regressor(e: Emit, a: dict):
    post = text(a.get("post_transform", "NONE"))
    if post != "NONE":
        e.refuse(f"post_transform {post}", "LinearRegressor's post transforms other than NONE are not implemented")
    coef, icpt = _coefficients(e, a, int(a.get("targets", 1)))
    x = e.float32(e.node.input[0])
    e.op("Gemm", [x, e.const(coef, "coef"), e.const(icpt, "intercepts")], out=e.node.output[0], transB=1)


def post_transform(e: Emit, scores: str, how: str, out: str | None = None) -> str:
    """The ML ops' post_transform of a 2-D score tensor, as ONNX Runtime computes it."""
    if how == "NONE":
        return e.op("Identity", [scores], out=out)
    if how == "LOGISTIC":
        return e.op("Sigmoid", [scores], out=out)
    if how == "SOFTMAX":
        return e.op("Softmax", [scores], out=out, axis=1)
    if how == "SOFTMAX_ZERO":
        # ONNX Runtime's: the row's max m over all scores; a score within 1e-7 of 0 becomes
        # s * exp(-m) and stays out of the sum, the others exp(s - m); each divided by the sum
        # (a row of such near-zero scores only: 0 / 0)
        top = e.reduce("ReduceMax", scores, -1)
        counted = e.op("Greater", [e.op("Abs", [scores]), e.const(np.float32(1e-7))])
        ex = e.op("Where", [counted, e.op("Exp", [e.op("Sub", [scores, top])]),
                            e.op("Mul", [scores, e.op("Exp", [e.op("Neg", [top])])])])
        total = e.reduce("ReduceSum", e.op("Where", [counted, ex, e.const(np.float32(0))]), -1)
        return e.op("Div", [ex, total], out=out)
    if how == "PROBIT":
        # sqrt(2) * erfinv(2p - 1), as ORT's (Giles-style) rational approximation is not a
        # graph of ai.onnx ops: refused rather than approximated otherwise
        e.refuse("post_transform PROBIT")
    raise ModelError(f"{e.label}: unknown post_transform {how!r}")


def class_labels(e: Emit, a: dict) -> np.ndarray:
    if a.get("classlabels_strings"):
        e.refuse("string class labels", "aotc computes numeric tensors only: relabel the classes as int64s")
    labels = a.get("classlabels_ints", a.get("classlabels_int64s"))     # (linear models' name, trees')
    if not labels:
        raise ModelError(f"{e.label} has no class labels")
    return np.asarray(labels, np.int64)


def _linear_classifier(e: Emit, a: dict):
    labels = class_labels(e, a)
    coef, icpt = _coefficients(e, a, len(a.get("intercepts") or []) or len(labels))
    post = text(a.get("post_transform", "NONE"))
    x = e.float32(e.node.input[0])
    raw = e.op("Gemm", [x, e.const(coef, "coef"), e.const(icpt, "intercepts")], transB=1)
    y, z = e.node.output[0], (e.node.output[1] if len(e.node.output) > 1 else "")
    if coef.shape[0] == 1 and len(labels) == 2:
        # one score s for two classes: ONNX Runtime gives the scores [1 - v, v], v = s or (LOGISTIC)
        # sigmoid(s), and the second label where s > 0
        if post not in ("NONE", "LOGISTIC"):
            e.refuse(f"a binary classifier with post_transform {post}")
        v = e.op("Sigmoid", [raw]) if post == "LOGISTIC" else raw
        scores = e.op("Concat", [e.op("Sub", [e.const(np.float32(1)), v]), v], axis=1)
        positive = e.op("Greater", [raw, e.const(np.float32(0))])
        if z:
            e.op("Identity", [scores], out=z)
        label = e.op("Where", [positive, e.const(labels[1:2]), e.const(labels[0:1])])
        e.op("Reshape", [label, e.const(np.array([-1], np.int64))], out=y)
        return
    if coef.shape[0] != len(labels):
        raise ModelError(f"{e.label}: {coef.shape[0]} score rows for {len(labels)} class labels")
    scores = post_transform(e, raw, post, out=z or None)
    e.op("Gather", [e.const(labels, "labels"), e.op("ArgMax", [scores], axis=1, keepdims=0)], out=y, axis=0)


def _array_feature_extractor(e: Emit, a: dict):
    x, idx = e.node.input
    r = e.rank(x)
    flat = e.op("Reshape", [idx, e.const(np.array([-1], np.int64))])
    got = e.op("Gather", [x, flat], axis=r - 1)
    if r == 1:                 # (ONNX Runtime gives a 1-D input's features as one row)
        e.unsqueeze(got, 0, out=e.node.output[0])
    else:
        e.op("Identity", [got], out=e.node.output[0])


def _imputer(e: Emit, a: dict):
    x, = e.node.input
    t = e.elem_type(x)
    if a.get("imputed_value_floats"):
        values, replaced = np.asarray(a["imputed_value_floats"], np.float32), np.float32(a.get("replaced_value_float", 0.0))
    elif a.get("imputed_value_int64s"):
        values, replaced = np.asarray(a["imputed_value_int64s"], np.int64), np.int64(a.get("replaced_value_int64", 0))
    else:
        raise ModelError(f"{e.label} has no imputed values")
    dt = onnx.helper.tensor_dtype_to_np_dtype(t)
    if np.isnan(replaced):
        missing = e.op("IsNaN", [x])
    else:
        missing = e.op("Equal", [x, e.const(np.asarray(replaced).astype(dt), "replaced")])
    e.op("Where", [missing, e.const(values.astype(dt), "imputed"), x], out=e.node.output[0])


def _one_hot_encoder(e: Emit, a: dict):
    if a.get("cats_strings"):
        e.refuse("string categories", "aotc computes numeric tensors only")
    cats = a.get("cats_int64s")
    if not cats:
        raise ModelError(f"{e.label} has no categories")
    if int(a.get("zeros", 1)) == 0:
        e.refuse("zeros=0 (an error for a value outside the categories, at run time)",
                 "set zeros=1: such a value then encodes as all zeros")
    x = e.node.input[0]
    if e.elem_type(x) != TensorProto.INT64:
        x = e.op("Cast", [x], to=TensorProto.INT64)   # (ONNX Runtime truncates floats to int64 too)
    col = e.unsqueeze(x, -1)
    e.op("Cast", [e.op("Equal", [col, e.const(np.asarray(cats, np.int64), "cats")])], out=e.node.output[0],
         to=TensorProto.FLOAT)


_LE_TYPES = {"int64s": np.int64, "floats": np.float32}


def _label_encoder(e: Emit, a: dict):
    def table(side: str):
        if f"{side}_tensor" in a:
            return numpy_helper.to_array(a[f"{side}_tensor"])
        for suffix, dt in _LE_TYPES.items():
            if a.get(f"{side}_{suffix}"):
                return np.asarray(a[f"{side}_{suffix}"], dt)
        if a.get(f"{side}_strings"):
            e.refuse("string keys or values", "aotc computes numeric tensors only")
        raise ModelError(f"{e.label} has no {side}")
    keys, values = table("keys"), table("values")
    if keys.dtype.kind in "OSU" or values.dtype.kind in "OSU":
        e.refuse("string keys or values", "aotc computes numeric tensors only")
    if keys.size != values.size:
        raise ModelError(f"{e.label}: {keys.size} keys for {values.size} values")
    if "default_tensor" in a:
        default = numpy_helper.to_array(a["default_tensor"]).reshape(-1)[:1].astype(values.dtype)
    else:
        default = np.asarray([a.get("default_float", -0.0) if values.dtype.kind == "f" else a.get("default_int64", -1)],
                             values.dtype)
    x = e.node.input[0]
    col = e.unsqueeze(x, -1)
    keyc = e.const(keys.reshape(-1).astype(onnx.helper.tensor_dtype_to_np_dtype(e.elem_type(x))), "keys")
    hit = e.op("Equal", [col, keyc])
    # NaN keys match NaN inputs (as ONNX Runtime's hash map does)
    if keys.dtype.kind == "f" and np.isnan(keys).any():
        hit = e.op("Or", [hit, e.op("And", [e.op("IsNaN", [col]), e.op("IsNaN", [keyc])])])
    found = e.op("Cast", [hit], to=TensorProto.INT32)
    first = e.op("ArgMax", [found], axis=-1, keepdims=0)
    anyhit = e.op("Cast", [e.reduce("ReduceMax", found, -1, keepdims=0)], to=TensorProto.BOOL)
    e.op("Where", [anyhit, e.op("Gather", [e.const(values.reshape(-1), "values"), first], axis=0),
                   e.const(default, "default")], out=e.node.output[0])


def _feature_vectorizer(e: Emit, a: dict):
    dims = [int(d) for d in a.get("inputdimensions", [])]
    if len(dims) != len(e.node.input):
        raise ModelError(f"{e.label}: {len(dims)} inputdimensions for {len(e.node.input)} inputs")
    parts = []
    for x, d in zip(e.node.input, dims):
        if e.rank(x) not in (1, 2):
            e.refuse("inputs of rank other than 1 or 2")
        v = e.float32(x)
        if e.rank(x) == 1:
            v = e.unsqueeze(v, 0)
        t = e.types[x].tensor_type.shape.dim[-1]
        width = t.dim_value if t.HasField("dim_value") else None
        if width is None:
            e.refuse("an input whose feature count is not known")
        if width > d:
            v = e.op("Slice", [v, e.const(np.array([0], np.int64)), e.const(np.array([d], np.int64)),
                               e.const(np.array([1], np.int64))])
        elif width < d:                # (ONNX Runtime pads a short input with zeros)
            pads = np.array([0, 0, 0, d - width], np.int64)
            v = e.op("Pad", [v, e.const(pads, "pads")])
        parts.append(v)
    e.op("Concat", parts, out=e.node.output[0], axis=1)


def _svm_kernel(e: Emit, a: dict, x: str, sv: np.ndarray) -> str:
    """[N, V]: the kernel of every row of x against every support vector (rows of sv)."""
    kernel = text(a.get("kernel_type", "LINEAR")).upper()
    gamma, coef0, degree = (list(a.get("kernel_params", [])) + [0.0, 0.0, 0.0])[:3]
    if kernel == "RBF":
        diff = e.op("Sub", [e.unsqueeze(x, 1), e.const(sv, "support_vectors")])
        dist = e.reduce("ReduceSum", e.op("Mul", [diff, diff]), -1, keepdims=0)
        return e.op("Exp", [e.op("Mul", [dist, e.const(np.float32(-gamma))])])
    dot = e.op("MatMul", [x, e.const(np.ascontiguousarray(sv.T), "support_vectors")])
    if kernel == "LINEAR":
        return dot
    if kernel in ("POLY", "SIGMOID"):
        t = e.op("Add", [e.op("Mul", [dot, e.const(np.float32(gamma))]), e.const(np.float32(coef0))])
        return e.op("Tanh", [t]) if kernel == "SIGMOID" else e.op("Pow", [t, e.const(np.float32(int(degree)))])
    raise ModelError(f"{e.label}: unknown kernel_type {kernel!r}")


def _svm_regressor(e: Emit, a: dict):
    post = text(a.get("post_transform", "NONE"))
    if post != "NONE" or int(a.get("n_targets", 1)) != 1:
        e.refuse(f"post_transform {post} or n_targets {a.get('n_targets', 1)} (NONE and 1 only)")
    coef = _floats(a, "coefficients")
    rho = _floats(a, "rho", [0.0])
    if coef is None or not coef.size or rho.size < 1:
        raise ModelError(f"{e.label} has no coefficients or rho")
    x = e.float32(e.node.input[0])
    S = int(a.get("n_supports", 0))
    if S == 0:                       # a linear model: the coefficients are the weights
        s = e.op("MatMul", [x, e.const(coef.reshape(-1, 1), "weights")])
    else:
        sv = _floats(a, "support_vectors")
        if sv is None or sv.size % S or coef.size != S:
            raise ModelError(f"{e.label}: {0 if sv is None else sv.size} support vector values and "
                             f"{coef.size} coefficients for {S} supports")
        s = e.op("MatMul", [_svm_kernel(e, a, x, sv.reshape(S, -1)), e.const(coef.reshape(-1, 1), "coefficients")])
    s = e.op("Add", [s, e.const(rho[:1], "rho")])
    if int(a.get("one_class", 0)):
        e.op("Where", [e.op("Greater", [s, e.const(np.float32(0))]), e.const(np.float32(1)), e.const(np.float32(-1))],
             out=e.node.output[0])
    else:
        e.op("Identity", [s], out=e.node.output[0])


def _svm_classifier(e: Emit, a: dict):
    """One-versus-one voting over the pairs of classes (libsvm's order: (0, 1), (0, 2), ...,
    (1, 2), ...): pair (i, j)'s decision is rho + the coefficients of class i's vectors in row
    j - 1 and of class j's in row i, times their kernels; i gets the vote when it is > 0. The
    pairs' decisions are one MatMul of the kernels with a (vectors x pairs) matrix."""
    labels = class_labels(e, a)
    C = len(labels)
    if a.get("prob_a"):
        e.refuse("probability estimates (prob_a, prob_b: libsvm's pairwise coupling)")
    post = text(a.get("post_transform", "NONE"))
    coef, rho = _floats(a, "coefficients"), _floats(a, "rho", [0.0])
    per_class = [int(v) for v in a.get("vectors_per_class", [])]
    V = sum(per_class)
    x = e.float32(e.node.input[0])
    y, z = e.node.output[0], (e.node.output[1] if len(e.node.output) > 1 else "")
    if V == 0 or C < 2:
        e.refuse("a linear SVMClassifier (no support vectors)", "kernel SVMs only")
    if len(per_class) != C or coef is None or coef.size != (C - 1) * V or rho.size != C * (C - 1) // 2:
        raise ModelError(f"{e.label}: vectors_per_class, coefficients and rho do not fit {C} classes")
    sv = _floats(a, "support_vectors")
    if sv is None or sv.size % V:
        raise ModelError(f"{e.label}: {0 if sv is None else sv.size} support vector values for {V} vectors")
    coef = coef.reshape(C - 1, V)
    start = np.concatenate([[0], np.cumsum(per_class)])
    pairs = [(i, j) for i in range(C) for j in range(i + 1, C)]
    W = np.zeros((V, len(pairs)), np.float32)
    win_i, win_j = np.zeros((len(pairs), C), np.float32), np.zeros((len(pairs), C), np.float32)
    for p, (i, j) in enumerate(pairs):
        W[start[i]:start[i + 1], p] = coef[j - 1, start[i]:start[i + 1]]
        W[start[j]:start[j + 1], p] = coef[i, start[j]:start[j + 1]]
        win_i[p, i] = win_j[p, j] = 1
    k = _svm_kernel(e, a, x, sv.reshape(V, -1))
    decision = e.op("Add", [e.op("MatMul", [k, e.const(W, "pair_weights")]), e.const(rho, "rho")])
    i_wins = e.op("Cast", [e.op("Greater", [decision, e.const(np.float32(0))])], to=TensorProto.FLOAT)
    votes = e.op("Add", [e.op("MatMul", [i_wins, e.const(win_i, "first_of_pair")]),
                         e.op("MatMul", [e.op("Sub", [e.const(np.float32(1)), i_wins]), e.const(win_j, "second_of_pair")])])
    e.op("Gather", [e.const(labels, "labels"), e.op("ArgMax", [votes], axis=1, keepdims=0)], out=y, axis=0)
    if C == 2 and (coef >= 0).all():
        e.refuse("a two-class SVMClassifier whose coefficients are all >= 0 (ONNX Runtime's rule for it is not known)")
    if z and C == 2:
        # one decision d: the scores [-d, d] (LOGISTIC: [sigmoid(-d), sigmoid(d)]), as ONNX Runtime
        if post not in ("NONE", "LOGISTIC"):
            e.refuse(f"a two-class SVMClassifier with post_transform {post}")
        pair = e.op("Concat", [e.op("Neg", [decision]), decision], axis=1)
        post_transform(e, pair, post, out=z)
    elif z:
        post_transform(e, decision, post, out=z)


BUILDERS = {
    "Binarizer": _binarizer, "Scaler": _scaler, "Normalizer": _normalizer,
    "LinearRegressor": _linear_regressor, "LinearClassifier": _linear_classifier,
    "ArrayFeatureExtractor": _array_feature_extractor, "Imputer": _imputer,
    "OneHotEncoder": _one_hot_encoder, "LabelEncoder": _label_encoder,
    "FeatureVectorizer": _feature_vectorizer, "SVMRegressor": _svm_regressor,
    "SVMClassifier": _svm_classifier,
}



