"""RMSNormalization, GroupNormalization, MeanVarianceNormalization, LpNormalization, LpPool and
GlobalLpPool against ONNX Runtime on random inputs; BatchNormalization in training mode against
numpy."""
import numpy as np
import onnx
import pytest
from onnx import helper

from aotc.compiler import compile_model
from aotc.errors import UnsupportedError
from tests.helpers import assert_parity, graph_model, rand, single_op_model


@pytest.mark.parametrize("axis, scale_shape", [(-1, (16,)), (1, (5, 16)), (-2, (1, 16)), (0, (3, 5, 16))])
def test_rms_normalization(axis, scale_shape, tmp_path):
    x = rand(3, 5, 16, seed=1) * 3
    s = rand(*scale_shape, seed=2)
    m = single_op_model("RMSNormalization", {"x": x}, inits={"s": s}, axis=axis, epsilon=1e-4, opset=23)
    assert_parity(m, tmp_path, {"x": x})


@pytest.mark.parametrize("opset, groups", [(21, 2), (21, 6), (18, 3), (18, 1)])
def test_group_normalization(opset, groups, tmp_path):
    x = rand(2, 6, 5, 4, seed=3) * 2 + 1
    n = 6 if opset == 21 else groups
    s, bias = rand(n, seed=4), rand(n, seed=5)
    m = single_op_model("GroupNormalization", {"x": x}, inits={"s": s, "b": bias}, num_groups=groups,
                        epsilon=1e-3, opset=opset)
    assert_parity(m, tmp_path, {"x": x})


@pytest.mark.parametrize("axes", [None, [2, 3], [0, 1, 2, 3], [1], [-1, 0]])
def test_mean_variance_normalization(axes, tmp_path):
    x = rand(3, 4, 5, 6, seed=6) * 2 + 0.5
    attrs = {} if axes is None else {"axes": axes}
    assert_parity(single_op_model("MeanVarianceNormalization", {"x": x}, opset=13, **attrs), tmp_path, {"x": x})


@pytest.mark.parametrize("p", [1, 2])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_lp_normalization(p, axis, tmp_path):
    x = rand(4, 5, 6, seed=7)
    x[1, 2, :] = 0.0                    # a zero norm along the last axis: 0, not NaN
    assert_parity(single_op_model("LpNormalization", {"x": x}, p=p, axis=axis), tmp_path, {"x": x})


@pytest.mark.parametrize("p", [1, 2, 3])
@pytest.mark.parametrize("case", [
    dict(kernel_shape=[3, 3]),
    dict(kernel_shape=[2, 3], strides=[2, 1], pads=[1, 0, 0, 1]),
    dict(kernel_shape=[3, 2], strides=[2, 2], dilations=[2, 1], ceil_mode=1),
    dict(kernel_shape=[3, 3], auto_pad="SAME_UPPER", strides=[2, 2]),
], ids=["plain", "strides_pads", "dilated_ceil", "same_upper"])
def test_lp_pool_2d(p, case, tmp_path):
    x = rand(2, 3, 7, 8, seed=8)
    assert_parity(single_op_model("LpPool", {"x": x}, p=p, opset=18, **case), tmp_path, {"x": x})


def test_lp_pool_1d(tmp_path):
    x = rand(2, 3, 11, seed=9)
    assert_parity(single_op_model("LpPool", {"x": x}, p=2, kernel_shape=[4], strides=[3], pads=[1, 2], opset=18),
                  tmp_path, {"x": x})


@pytest.mark.parametrize("p", [1, 2, 3])
def test_global_lp_pool(p, tmp_path):
    x = rand(2, 4, 5, 6, seed=10)
    assert_parity(single_op_model("GlobalLpPool", {"x": x}, p=p), tmp_path, {"x": x})


def test_group_norm_feeding_a_conv(tmp_path):
    """In a graph: the normalization's output consumed by a Conv (a UNet block's pattern)."""
    x = rand(1, 8, 6, 6, seed=11)
    w = rand(4, 8, 3, 3, seed=12) * 0.2
    nodes = [helper.make_node("GroupNormalization", ["x", "s", "b"], ["g"], num_groups=4),
             helper.make_node("Conv", ["g", "w"], ["y"], pads=[1, 1, 1, 1])]
    m = graph_model(nodes, {"x": x}, ["y"], {"s": rand(8, seed=13), "b": rand(8, seed=14), "w": w}, opset=21)
    assert_parity(m, tmp_path, {"x": x})


def test_lp_normalization_p3_is_unsupported(tmp_path):
    x = rand(2, 3, seed=15)
    path = tmp_path / "m.onnx"
    path.write_bytes(single_op_model("LpNormalization", {"x": x}, p=3).SerializeToString())
    with pytest.raises(UnsupportedError, match="LpNormalization"):
        compile_model(path, output_dir=tmp_path / "out")


@pytest.mark.parametrize("shape", [(4, 3, 5, 6), (6, 2, 7)])
def test_batchnorm_training_mode_against_numpy(shape, tmp_path):
    """training_mode = 1 (frontend/training.py): the batch's statistics normalize, and the
    running mean and variance come out updated with the momentum. Run-time statistics inputs."""
    import aotc
    from onnx import TensorProto, helper
    C = shape[1]
    x = rand(*shape, seed=31) * 3 + 1
    scale, bias, mean, var = rand(C, seed=32), rand(C, seed=33), rand(C, seed=34), np.abs(rand(C, seed=35)) + 0.5
    node = helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y", "rm", "rv"], training_mode=1,
                            epsilon=1e-3, momentum=0.8)
    g = helper.make_graph([node], "bn", [helper.make_tensor_value_info(k, TensorProto.FLOAT, a.shape) for k, a in
                                         (("x", x), ("s", scale), ("b", bias), ("m", mean), ("v", var))],
                          [helper.make_tensor_value_info(k, TensorProto.FLOAT, None) for k in ("y", "rm", "rv")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 15)])
    onnx.save(m, str(tmp_path / "bn.onnx"))
    y, rm, rv = aotc.compile(tmp_path / "bn.onnx", output_dir=tmp_path / "out").run(
        {"x": x, "s": scale, "b": bias, "m": mean, "v": var})
    axes = (0,) + tuple(range(2, len(shape)))
    bm, bv = x.astype(np.float64).mean(axis=axes), x.astype(np.float64).var(axis=axes)
    b = (slice(None),) + (None,) * (len(shape) - 2)
    want = (x - bm[b]) / np.sqrt(bv[b] + 1e-3) * scale[b] + bias[b]
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(rm, mean * 0.8 + bm * 0.2, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(rv, var * 0.8 + bv * 0.2, rtol=1e-5, atol=1e-6)
