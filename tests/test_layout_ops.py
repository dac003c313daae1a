"""Layout and scan operators (aotc/ops/layout.py): DepthToSpace, SpaceToDepth, CumSum, CumProd,
EyeLike, ReverseSequence, CenterCropPad, and the deprecated Scatter and Upsample (which the opset
normalization rewrites into ScatterElements and Resize), against ONNX Runtime on random inputs;
against numpy where ONNX Runtime has no kernel (CumProd, SpaceToDepth's opset-28 mode, integer
DepthToSpace, boolean EyeLike); and ONNX's own node test cases whose constant inputs the
conformance runner cannot bind, with those inputs bound as constants."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from aotc.api import load
from aotc.compiler import compile_model
from aotc.errors import RunError, ShapeError, UnsupportedError
from tests.helpers import (assert_parity, eager_gpu_target, graph_model, onnx_node_cases, rand, run_onnx_node_case,
                           single_op_model)


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


# ----------------------------------------------------------------------------- more cases per op
def _ints(*shape, seed, dtype=np.int64):
    return np.random.default_rng(seed).integers(-100, 100, size=shape).astype(dtype)


@pytest.mark.parametrize("mode", ["DCR", "CRD"])
def test_depth_to_space_integers_against_numpy(mode, tmp_path):
    """ONNX Runtime has no int64 DepthToSpace: numpy's reshape/transpose of the spec."""
    x = _ints(2, 12, 2, 3, seed=20)
    y = _run(tmp_path, single_op_model("DepthToSpace", {"x": x}, blocksize=2, mode=mode, opset=13), {"x": x})[0]
    if mode == "DCR":
        want = x.reshape(2, 2, 2, 3, 2, 3).transpose(0, 3, 4, 1, 5, 2)
    else:
        want = x.reshape(2, 3, 2, 2, 2, 3).transpose(0, 1, 4, 2, 5, 3)
    np.testing.assert_array_equal(y, want.reshape(2, 3, 4, 6))


def test_depth_to_space_of_blocksize_1_is_a_copy(tmp_path):
    x = rand(1, 3, 2, 4, seed=21)
    assert_parity(single_op_model("DepthToSpace", {"x": x}, blocksize=1, opset=13), tmp_path, {"x": x})


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("exclusive, reverse", [(0, 0), (1, 1)])
def test_cumsum_long_axis_is_sequential_like_onnxruntime(dtype, exclusive, reverse, tmp_path):
    """3000 steps: the running sum is added one step after the other in the input type, as ONNX
    Runtime does, so the results agree to the last bit or so (a pairwise or wider sum would not)."""
    x = rand(2, 3000, seed=22, dtype=dtype)
    m = single_op_model("CumSum", {"x": x}, inits={"axis": np.array(-1, np.int32)}, exclusive=exclusive,
                        reverse=reverse, opset=14)
    assert_parity(m, tmp_path, {"x": x}, rtol=1e-6, atol=0)


@pytest.mark.parametrize("op", ["CumSum", "CumProd"])
def test_scan_over_an_axis_of_one(op, tmp_path):
    x = rand(3, 1, 4, seed=23)
    m = single_op_model(op, {"x": x}, inits={"axis": np.array(1, np.int64)}, exclusive=1, opset=26)
    y = _run(tmp_path, m, {"x": x})[0]
    np.testing.assert_array_equal(y, np.zeros_like(x) if op == "CumSum" else np.ones_like(x))


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_cumprod_integers_against_numpy(dtype, tmp_path):
    x = np.random.default_rng(24).integers(-3, 4, size=(4, 5)).astype(dtype)
    x[x == 0] = 2
    m = single_op_model("CumProd", {"x": x}, inits={"axis": np.array(-2, np.int64)}, reverse=1, opset=26)
    y = _run(tmp_path, m, {"x": x})[0]
    np.testing.assert_array_equal(y, np.cumprod(x[::-1], axis=0)[::-1])


def test_eyelike_integer_input_to_double(tmp_path):
    x = _ints(5, 3, seed=25, dtype=np.int32)
    m = graph_model([helper.make_node("EyeLike", ["x"], ["e"], k=-2, dtype=TensorProto.DOUBLE)], {"x": x}, ["e"],
                    opset=9)
    assert_parity(m, tmp_path, {"x": x})


def test_eyelike_bool_against_numpy(tmp_path):
    """ONNX Runtime has no boolean EyeLike."""
    x = rand(3, 5, seed=26)
    m = graph_model([helper.make_node("EyeLike", ["x"], ["e"], k=1, dtype=TensorProto.BOOL)], {"x": x}, ["e"],
                    opset=9)
    np.testing.assert_array_equal(_run(tmp_path, m, {"x": x})[0], np.eye(3, 5, k=1, dtype=bool))


def test_unsupported_variants_raise(tmp_path):
    x = rand(3, 4, seed=27)
    m = graph_model([helper.make_node("EyeLike", ["x"], ["e"], dtype=TensorProto.COMPLEX64)], {"x": x}, ["e"], opset=9)
    path = tmp_path / "eye.onnx"
    path.write_bytes(m.SerializeToString())
    with pytest.raises(UnsupportedError, match="EyeLike node .* dtype 14"):
        compile_model(path, output_dir=tmp_path / "o1")
    x = rand(1, 4, 2, 2, seed=27)
    m = single_op_model("DepthToSpace", {"x": x}, blocksize=2, mode="RCD", opset=13)
    path = tmp_path / "d2s.onnx"
    path.write_bytes(m.SerializeToString())
    with pytest.raises(UnsupportedError, match="DepthToSpace node .* mode 'RCD'"):
        compile_model(path, output_dir=tmp_path / "o2")


def test_reverse_sequence_4d_with_empty_and_full_lengths(tmp_path):
    x = rand(4, 3, 2, 5, seed=28)
    lens = np.array([4, 0, 2], np.int64)
    m = graph_model([helper.make_node("ReverseSequence", ["x", "l"], ["y"], time_axis=0, batch_axis=1)],
                    {"x": x, "l": lens}, ["y"], opset=10)
    assert_parity(m, tmp_path, {"x": x, "l": lens})


def test_reverse_sequence_negative_length_fails_and_good_lengths_run(tmp_path):
    """ONNX Runtime refuses a length outside [0, T] too; the same artifact then runs good ones."""
    x = rand(2, 6, seed=29)
    m = graph_model([helper.make_node("ReverseSequence", ["x", "l"], ["y"], time_axis=1, batch_axis=0)],
                    {"x": x, "l": np.array([1, 1], np.int64)}, ["y"], opset=10)
    path = tmp_path / "m.onnx"
    path.write_bytes(m.SerializeToString())
    cm = load(compile_model(path, output_dir=tmp_path / "out"))
    with pytest.raises(RunError, match="out of range"):
        cm.run({"x": x, "l": np.array([3, -1], np.int64)})
    y = cm.run({"x": x, "l": np.array([6, 2], np.int64)})[0]
    np.testing.assert_array_equal(y, np.stack([x[0, ::-1], np.r_[x[1, 1::-1], x[1, 2:]]]))


def test_center_crop_pad_integers_negative_axes(tmp_path):
    x = _ints(5, 7, seed=30)
    m = graph_model([helper.make_node("CenterCropPad", ["x", "s"], ["y"], axes=[-1, 0])], {"x": x}, ["y"],
                    {"s": np.array([10, 2], np.int64)}, opset=18)
    assert_parity(m, tmp_path, {"x": x})


# ----------------------------------------------------------------------------- Scatter (opset 9-10)
@pytest.mark.parametrize("opset, axis", [(9, 0), (10, 1), (10, -1)])
def test_scatter(opset, axis, tmp_path):
    x, u = rand(4, 5, seed=31), rand(3, 5, seed=32)
    idx = np.array([[1, 0, 3, 2, 1], [3, 2, 0, 0, 2], [0, 1, 2, 3, 3]], np.int64)   # a permutation per column...
    if axis != 0:                                              # ...or per row
        idx = np.array([[4, 0, 2, 1, 3], [0, 1, 2, 3, 4], [2, 3, 4, 0, 1]], np.int64)
        x = rand(3, 5, seed=31)
    m = graph_model([helper.make_node("Scatter", ["x", "i", "u"], ["y"], axis=axis)], {"x": x, "i": idx, "u": u},
                    ["y"], opset=opset)
    assert_parity(m, tmp_path, {"x": x, "i": idx, "u": u})


def test_scatter_int32_indices_negative_and_integer_data(tmp_path):
    """Negative indices count from the end (ONNX Runtime's Scatter-10 accepts them as
    ScatterElements does); an index out of range fails the run as it does there."""
    x, u = _ints(3, 4, seed=33), _ints(3, 2, seed=34)
    idx = np.array([[-1, 0], [1, -3], [3, 2]], np.int32)
    m = graph_model([helper.make_node("Scatter", ["x", "i", "u"], ["y"], axis=1)], {"x": x, "i": idx, "u": u},
                    ["y"], opset=10)
    assert_parity(m, tmp_path, {"x": x, "i": idx, "u": u})
    path = tmp_path / "m.onnx"
    path.write_bytes(m.SerializeToString())
    cm = load(compile_model(path, output_dir=tmp_path / "out2"))
    with pytest.raises(RunError, match="out of range"):
        cm.run({"x": x, "i": np.array([[0, 1], [4, 2], [3, 2]], np.int32), "u": u})


# ----------------------------------------------------------------------------- Upsample (opset 7-9)
def _upsample(x, mode, scales, opset):
    if opset < 9:                                   # scales is an attribute
        node = helper.make_node("Upsample", ["x"], ["y"], mode=mode, scales=[float(s) for s in scales])
        return graph_model([node], {"x": x}, ["y"], opset=opset)
    node = helper.make_node("Upsample", ["x", "s"], ["y"], mode=mode)
    return graph_model([node], {"x": x}, ["y"], {"s": np.array(scales, np.float32)}, opset=opset)


@pytest.mark.parametrize("opset, mode, shape, scales", [
    (7, "nearest", (1, 2, 3, 4), [1, 1, 2, 3]),
    (7, "linear", (1, 2, 3, 4), [1, 1, 2, 2.5]),
    (8, "nearest", (2, 3, 3, 4), [2, 3, 1.5, 2.7]),       # non-integer scales: floor of x / scale
    (8, "linear", (5, 3), [1.5, 2.2]),
    (9, "nearest", (1, 3, 5), [1, 2, 1.9]),
    (9, "linear", (1, 2, 3, 4), [1, 1, 1.7, 3.2]),
    (9, "linear", (1, 1, 2, 3, 2), [1, 1, 2, 1.5, 3]),
])
def test_upsample(opset, mode, shape, scales, tmp_path):
    x = rand(*shape, seed=35)
    assert_parity(_upsample(x, mode, scales, opset), tmp_path, {"x": x})


def test_upsample_integer_data_nearest(tmp_path):
    x = _ints(1, 2, 3, 3, seed=36, dtype=np.int32)
    assert_parity(_upsample(x, "nearest", [1, 1, 2.5, 2], 9), tmp_path, {"x": x})


def test_upsample_scales_must_be_constant(tmp_path):
    x = rand(1, 1, 2, 2, seed=37)
    m = single_op_model("Upsample", {"x": x, "s": np.array([1, 1, 2, 2], np.float32)}, mode="nearest", opset=9)
    path = tmp_path / "m.onnx"
    path.write_bytes(m.SerializeToString())
    with pytest.raises(ShapeError, match="scales must be known at compile time"):
        compile_model(path, output_dir=tmp_path / "out")


@pytest.mark.parametrize("shape, scales", [((1, 1, 3, 4), [1, 1, 2, 2]), ((1, 2, 4, 3), [1, 1, 1.5, 3])])
def test_upsample_cubic_as_onnxruntime(shape, scales, tmp_path):
    """Mode 'cubic' is outside Upsample's spec, yet ONNX Runtime computes it (asymmetric
    coordinates, a = -0.75): aotc computes the same, never nearest in its place."""
    x = rand(*shape, seed=38)
    assert_parity(_upsample(x, "cubic", scales, 7), tmp_path, {"x": x})


def test_upsample_unknown_mode_is_refused(tmp_path):
    x = rand(1, 1, 3, 4, seed=38)
    path = tmp_path / "m.onnx"
    onnx.save(_upsample(x, "trilinear", [1, 1, 2, 2], 7), str(path))
    with pytest.raises(UnsupportedError, match="mode 'trilinear'"):
        compile_model(path, output_dir=tmp_path / "out")


# ----------------------------------------------------------------------------- on the GPU printers
def _gpu_model():
    x = rand(2, 8, 4, 6, seed=39)
    N = helper.make_node
    nodes = [N("DepthToSpace", ["x"], ["d2s"], blocksize=2, mode="CRD"),
             N("SpaceToDepth", ["x"], ["s2d"], blocksize=2),
             N("CumSum", ["x", "ax"], ["cs"], exclusive=1, reverse=1),
             N("Flatten", ["x"], ["f"], axis=2),
             N("EyeLike", ["f"], ["eye"], k=1),
             N("CenterCropPad", ["x", "shp"], ["ccp"], axes=[2, 3]),
             N("Reshape", ["x", "rs"], ["x3"]),
             N("ReverseSequence", ["x3", "lens"], ["rsq"], time_axis=1, batch_axis=0)]
    inits = {"ax": np.array(2, np.int64), "shp": np.array([6, 3], np.int64), "rs": np.array([2, 8, 24], np.int64),
             "lens": np.array([5, 8], np.int64)}
    return graph_model(nodes, {"x": x}, ["d2s", "s2d", "cs", "eye", "ccp", "rsq"], inits, opset=18), x


@pytest.mark.parametrize("kind", ["opencl", "eager"])
def test_layout_ops_on_opencl(kind, tmp_path):
    """The same kernel IR printed as OpenCL C (PoCL here); 'eager': every spatial loop given a
    work-group."""
    from tests.test_opencl import _opencl_missing
    if _opencl_missing():
        pytest.skip(_opencl_missing())
    m, x = _gpu_model()
    assert_parity(m, tmp_path, {"x": x}, target="opencl" if kind == "opencl" else eager_gpu_target(tmp_path))


# ----------------------------------------------------------------------------- ONNX's node test cases
# The conformance runner binds input shapes only; these cases feed a value aotc needs at compile
# time (CumSum's axis, CenterCropPad's shape, Upsample's scales) as a graph input. Here that
# input is bound as a constant and the case's expected outputs are compared.
_CONST_INPUTS = {"CumSum": 1, "CumProd": 1, "CenterCropPad": 1, "Upsample": 1}
_CASES = ([f"test_center_crop_pad_{c}{e}" for c in ["crop", "crop_and_pad", "crop_axes_chw", "crop_axes_hwc",
                                                     "crop_negative_axes_hwc", "pad"] for e in ["", "_expanded"]]
          + [f"test_{op}_{c}" for op in ["cumsum", "cumprod"] for c in
             ["1d", "1d_exclusive", "1d_int32_exclusive", "1d_reverse", "1d_reverse_exclusive", "2d_axis_0",
              "2d_axis_1", "2d_int32", "2d_negative_axis"]]
          + ["test_upsample_nearest"])


@pytest.mark.parametrize("name", _CASES)
def test_onnx_node_case_with_constants_bound(name, tmp_path):
    g = onnx_node_cases()[name].model.graph
    bound = {n.input[_CONST_INPUTS[n.op_type]] for n in g.node if n.op_type in _CONST_INPUTS}
    # an expanded CenterCropPad's nodes are ops of its function body: its `shape` input is bound
    if name.endswith("_expanded"):
        bound.add("shape")
    run_onnx_node_case(name, tmp_path, bound)
