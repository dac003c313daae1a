"""scikit-learn models as skl2onnx converts them (ai.onnx.ml operators: tree ensembles,
linear models, scalers, SVMs), compiled by aotc and checked against ONNX Runtime on
fresh rows drawn from the training distribution."""
from __future__ import annotations

import warnings

import numpy as np
import onnx
import pytest

from tests.helpers import assert_parity



def _data(kind: str, seed: int):
    from sklearn.datasets import make_classification, make_regression
    if kind == "multi":
        X, y = make_classification(300, 8, n_informative=5, n_classes=3, random_state=seed)
    elif kind == "binary":
        X, y = make_classification(300, 8, random_state=seed)
    else:
        X, y = make_regression(300, 8, random_state=seed)
    return X.astype(np.float32), y


def _models():
    from sklearn.ensemble import (GradientBoostingClassifier, GradientBoostingRegressor, RandomForestClassifier,
                                  RandomForestRegressor)
    from sklearn.linear_model import LogisticRegression, Ridge
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import MinMaxScaler, Normalizer, StandardScaler
    from sklearn.svm import SVC, SVR
    from sklearn.tree import DecisionTreeClassifier
    return {
        "random_forest_3_classes": ("multi", RandomForestClassifier(12, max_depth=7, random_state=0)),
        "random_forest_2_classes": ("binary", RandomForestClassifier(12, max_depth=7, random_state=0)),
        "gradient_boosting_2_classes": ("binary", GradientBoostingClassifier(n_estimators=12, random_state=0)),
        "gradient_boosting_3_classes": ("multi", GradientBoostingClassifier(n_estimators=8, random_state=0)),
        "decision_tree_deep": ("multi", DecisionTreeClassifier(max_depth=12, random_state=0)),
        "random_forest_regressor": ("reg", RandomForestRegressor(12, max_depth=7, random_state=0)),
        "gradient_boosting_regressor": ("reg", GradientBoostingRegressor(n_estimators=12, random_state=0)),
        "scaled_logistic_regression": ("multi", make_pipeline(StandardScaler(), LogisticRegression())),
        "normalized_binary_logistic": ("binary", make_pipeline(MinMaxScaler(), Normalizer(), LogisticRegression())),
        "ridge": ("reg", Ridge()),
        "scaled_rbf_svr": ("reg", make_pipeline(StandardScaler(), SVR())),
        "rbf_svc_3_classes": ("multi", SVC()),
        "poly_svc_3_classes": ("multi", make_pipeline(StandardScaler(), SVC(kernel="poly", degree=3))),
        "linear_svc_2_classes": ("binary", SVC(kernel="linear")),
    }


# recent opsets, and old ones (ai.onnx 9, as skl2onnx writes some models by default)
OPSETS = {"recent": {"": 17, "ai.onnx.ml": 3}, "old": {"": 9, "ai.onnx.ml": 1}}
OLD_OPSET_MODELS = ["random_forest_2_classes", "gradient_boosting_3_classes", "scaled_logistic_regression",
                    "scaled_rbf_svr", "rbf_svc_3_classes"]


@pytest.mark.parametrize("name,opsets", [(n, "recent") for n in _models()] +
                         [(n, "old") for n in OLD_OPSET_MODELS])
def test_sklearn_model_matches_onnx_runtime(name, opsets, tmp_path):
    """(At ai.onnx opset 9 the nodes aotc writes in place of the ML ones are in opset 17's
    forms all the same, frontend/emit.py EMIT_OPSET.)"""
    from sklearn.base import is_classifier
    from skl2onnx import to_onnx
    kind, model = _models()[name]
    X, y = _data(kind, seed=len(name))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.fit(X[:200], y[:200])
        options = {"zipmap": False} if is_classifier(model) else None      # (ZipMap: a map output)
        onx = to_onnx(model, X[:1], target_opset=OPSETS[opsets], options=options)
    # the graph input is [None, 8]: the rows kept for testing, never seen in training
    rows = X[200:264]
    name_in = onx.graph.input[0].name
    assert_parity(onx, tmp_path, {name_in: rows}, shapes={name_in: rows.shape})
    assert {n.domain for n in onx.graph.node} & {"ai.onnx.ml"}, "the converter wrote no ai.onnx.ml node"


def test_a_classifier_converted_with_zipmap_is_refused_with_the_way_out(tmp_path):
    import aotc
    from sklearn.linear_model import LogisticRegression
    from skl2onnx import to_onnx
    from aotc.errors import UnsupportedError
    X, y = _data("multi", seed=3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        onx = to_onnx(LogisticRegression().fit(X, y), X[:1], target_opset={"": 17, "ai.onnx.ml": 3})
    onnx.save(onx, str(tmp_path / "zip.onnx"))
    # (its input's batch size is unbound too: the operator is what to say first)
    with pytest.raises(UnsupportedError, match="ZipMap") as info:
        aotc.compile(tmp_path / "zip.onnx", output_dir=tmp_path / "out")
    assert "options={'zipmap': False}" in info.value.hint
