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
