"""DepthToSpace, SpaceToDepth, CumSum, CumProd and EyeLike against ONNX Runtime (CumProd, opset
26, against numpy) on random inputs."""
import numpy as np
import pytest
from onnx import TensorProto, helper

from aotc.api import load
from aotc.compiler import compile_model
from aotc.errors import ShapeError
from tests.helpers import assert_parity, graph_model, rand, single_op_model


@pytest.mark.parametrize("mode", ["DCR", "CRD"])
@pytest.mark.parametrize("bs, shape", [(2, (2, 8, 3, 5)), (3, (1, 18, 2, 2))])
def test_depth_to_space(mode, bs, shape, tmp_path):
    x = rand(*shape, seed=1)
    assert_parity(single_op_model("DepthToSpace", {"x": x}, blocksize=bs, mode=mode, opset=13), tmp_path, {"x": x})


@pytest.mark.parametrize("bs, shape", [(2, (2, 3, 4, 6)), (3, (1, 2, 9, 3))])
def test_space_to_depth_and_back(bs, shape, tmp_path):
    x = rand(*shape, seed=2)
    nodes = [helper.make_node("SpaceToDepth", ["x"], ["d"], blocksize=bs),
             helper.make_node("DepthToSpace", ["d"], ["y"], blocksize=bs, mode="DCR")]
    res = assert_parity(graph_model(nodes, {"x": x}, ["d", "y"], opset=13), tmp_path, {"x": x})
    assert res.outputs


@pytest.mark.parametrize("mode", ["DCR", "CRD"])
def test_space_to_depth_modes_against_numpy(mode, tmp_path):
    """SpaceToDepth's mode attribute is opset 28, newer than ONNX Runtime here: numpy's
    reshape/transpose of the spec."""
    x = rand(2, 3, 4, 6, seed=8)
    m = single_op_model("SpaceToDepth", {"x": x}, blocksize=2, mode=mode, opset=28)
    y = _run(tmp_path, m, {"x": x})[0]
    t = x.reshape(2, 3, 2, 2, 3, 2)                    # n, c, h', i, w', j
    perm = (0, 3, 5, 1, 2, 4) if mode == "DCR" else (0, 1, 3, 5, 2, 4)
    np.testing.assert_array_equal(y, t.transpose(perm).reshape(2, 12, 2, 3))


@pytest.mark.parametrize("exclusive", [0, 1])
@pytest.mark.parametrize("reverse", [0, 1])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_cumsum(exclusive, reverse, axis, tmp_path):
    x = rand(4, 5, 6, seed=3)
    m = single_op_model("CumSum", {"x": x}, inits={"axis": np.array(axis, np.int64)}, exclusive=exclusive,
                        reverse=reverse, opset=14)
    assert_parity(m, tmp_path, {"x": x})


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_cumsum_integers(dtype, tmp_path):
    x = np.random.default_rng(4).integers(-50, 50, size=(3, 7)).astype(dtype)
    m = single_op_model("CumSum", {"x": x}, inits={"axis": np.array([1], np.int32)}, opset=14)
    assert_parity(m, tmp_path, {"x": x})


def _run(tmp_path, m, feeds):
    path = tmp_path / "m.onnx"
    path.write_bytes(m.SerializeToString())
    out = load(compile_model(path, output_dir=tmp_path / "out")).run(feeds)
    return out if isinstance(out, (list, tuple)) else list(out.values())


@pytest.mark.parametrize("exclusive", [0, 1])
@pytest.mark.parametrize("reverse", [0, 1])
def test_cumprod_against_numpy(exclusive, reverse, tmp_path):
    """ONNX Runtime has no CumProd (opset 26): numpy's cumprod with the same flips and shift."""
    x = rand(3, 6, 4, seed=5, low=0.5, high=1.5)
    m = single_op_model("CumProd", {"x": x}, inits={"axis": np.array(1, np.int64)}, exclusive=exclusive,
                        reverse=reverse, opset=26)
    y = _run(tmp_path, m, {"x": x})[0]
    v = x[:, ::-1] if reverse else x
    want = np.cumprod(v.astype(np.float64), axis=1)
    if exclusive:
        want = np.concatenate([np.ones_like(want[:, :1]), want[:, :-1]], axis=1)
    want = want[:, ::-1] if reverse else want
    np.testing.assert_allclose(y, want, rtol=1e-5)


def test_cumsum_axis_must_be_constant(tmp_path):
    x = rand(2, 3, seed=6)
    m = single_op_model("CumSum", {"x": x, "axis": np.array(0, np.int64)}, opset=14)
    path = tmp_path / "m.onnx"
    path.write_bytes(m.SerializeToString())
    with pytest.raises(ShapeError, match="axis must be known at compile time"):
        compile_model(path, output_dir=tmp_path / "out")


@pytest.mark.parametrize("k", [0, 2, -1, 7])
@pytest.mark.parametrize("dtype", [None, TensorProto.INT64])
def test_eyelike(k, dtype, tmp_path):
    x = rand(4, 6, seed=7)
    attrs = {"k": k, **({"dtype": dtype} if dtype is not None else {})}
    nodes = [helper.make_node("EyeLike", ["x"], ["e"], **attrs)]
    assert_parity(graph_model(nodes, {"x": x}, ["e"], opset=9), tmp_path, {"x": x})


@pytest.mark.parametrize("time_axis", [0, 1])
def test_reverse_sequence(time_axis, tmp_path):
    x = rand(5, 4, 3, seed=9) if time_axis == 0 else rand(4, 5, 3, seed=9)
    lens = np.array([5, 1, 3, 0], np.int64)
    m = graph_model([helper.make_node("ReverseSequence", ["x", "l"], ["y"], time_axis=time_axis,
                                      batch_axis=1 - time_axis)], {"x": x, "l": lens}, ["y"], opset=10)
    assert_parity(m, tmp_path, {"x": x, "l": lens})


def test_reverse_sequence_length_out_of_range_fails(tmp_path):
    from aotc.errors import RunError
    x, lens = rand(3, 2, seed=10), np.array([3, 4], np.int64)
    m = graph_model([helper.make_node("ReverseSequence", ["x", "l"], ["y"])], {"x": x, "l": lens}, ["y"], opset=10)
    with pytest.raises(RunError, match="INDEX|index"):
        _run(tmp_path, m, {"x": x, "l": lens})


@pytest.mark.parametrize("shape, axes", [([3, 8], None), ([5, 2], None), ([4, 9, 3], None),
                                         ([7], [-1]), ([2, 6], [0, 2])])
def test_center_crop_pad(shape, axes, tmp_path):
    x = rand(3, 6, 5, seed=11)[..., :5] if axes != [0, 2] else rand(3, 4, 5, seed=11)
    if axes is None and len(shape) == 2:
        x = rand(6, 5, seed=12)
    attrs = {} if axes is None else {"axes": axes}
    m = graph_model([helper.make_node("CenterCropPad", ["x", "s"], ["y"], **attrs)], {"x": x}, ["y"],
                    {"s": np.array(shape, np.int64)}, opset=18)
    assert_parity(m, tmp_path, {"x": x})
