"""scikit-learn models as skl2onnx converts them (ai.onnx.ml operators: tree ensembles,
linear models, scalers, SVMs), compiled by aotc and checked against ONNX Runtime on
fresh rows drawn from the training distribution."""
from __future__ import annotations

import warnings

import numpy as np
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


@pytest.mark.parametrize("name", list(_models()))
def test_sklearn_model_matches_onnx_runtime(name, tmp_path):
    from sklearn.base import is_classifier
    from skl2onnx import to_onnx
    kind, model = _models()[name]
    X, y = _data(kind, seed=len(name))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.fit(X[:200], y[:200])
        options = {"zipmap": False} if is_classifier(model) else None      # (ZipMap: a map output)
        onx = to_onnx(model, X[:1], target_opset={"": 17, "ai.onnx.ml": 3}, options=options)
    # the graph input is [None, 8]: the rows kept for testing, never seen in training
    rows = X[200:264]
    name_in = onx.graph.input[0].name
    assert_parity(onx, tmp_path, {name_in: rows}, shapes={name_in: rows.shape})
    assert {n.domain for n in onx.graph.node} & {"ai.onnx.ml"}, "the converter wrote no ai.onnx.ml node"
