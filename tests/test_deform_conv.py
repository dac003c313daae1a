"""DeformConv against ONNX Runtime on random inputs, offsets random in [-3, 3] so that taps
fall between pixels and outside the image: with and without mask and bias, groups, offset
groups (inside one group, spanning several, straddling two), strides, pads, dilations,
non-square kernels, float32 and float64, opsets 19 and 22; ONNX's node cases; shape errors;
OpenCL."""
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from aotc.compiler import compile_model
from aotc.errors import ShapeError, UnsupportedError
from tests.helpers import assert_parity, eager_gpu_target, graph_model, rand, run_onnx_node_case


def _model(n=2, c=4, h=7, w=6, m=6, k=(3, 3), group=1, og=1, strides=(1, 1), pads=(1, 1, 1, 1),
           dil=(1, 1), bias=True, mask=True, dtype=np.float32, seed=0, opset=22, w_input=False, offsets=None):
    """A one-node DeformConv model and its feeds; `offsets(shape, rng)` replaces the uniform
    [-3, 3] offsets."""
    kh, kw = k
    oh = (h + pads[0] + pads[2] - ((kh - 1) * dil[0] + 1)) // strides[0] + 1
    ow = (w + pads[1] + pads[3] - ((kw - 1) * dil[1] + 1)) // strides[1] + 1
    rng = np.random.default_rng(seed)
    oshape = (n, og * kh * kw * 2, oh, ow)
    off = rng.uniform(-3, 3, size=oshape) if offsets is None else offsets(oshape, rng)
    feeds = {"x": rand(n, c, h, w, seed=seed + 1, dtype=dtype), "off": off.astype(dtype)}
    inits = {}
    (feeds if w_input else inits)["w"] = rand(m, c // group, kh, kw, seed=seed + 2, dtype=dtype)
    names = ["x", "w", "off", "", ""]
    if bias:
        inits["b"] = rand(m, seed=seed + 3, dtype=dtype)
        names[3] = "b"
    if mask:
        feeds["mask"] = rand(n, og * kh * kw, oh, ow, seed=seed + 4, dtype=dtype, low=0.1, high=1.0)
        names[4] = "mask"
    while names[-1] == "":
        names.pop()
    node = helper.make_node("DeformConv", names, ["y"], name="dc", kernel_shape=list(k), group=group,
                            offset_group=og, strides=list(strides), pads=list(pads), dilations=list(dil))
    return graph_model([node], feeds, ["y"], inits, opset=opset), feeds


CONFIGS = {
    "mask_bias": {},
    "plain": {"bias": False, "mask": False},
    "mask_only": {"bias": False},
    "bias_only": {"mask": False},
    "group2": {"group": 2, "m": 4},
    "offset_group2": {"og": 2},
    "group2_offset_group2": {"group": 2, "og": 2, "m": 4},
    "group2_offset_group4": {"group": 2, "og": 4, "m": 2},          # a group spans two offset groups
    "group4_offset_group2": {"group": 4, "og": 2, "m": 8},          # an offset group spans two groups
    "offset_groups_straddle": {"c": 6, "group": 2, "og": 3, "m": 4},  # channels 2, 3: groups 0 | 1
    "strides_uneven_pads": {"strides": (2, 1), "pads": (0, 1, 2, 0)},
    "dilation_2x3": {"dil": (2, 1), "k": (2, 3), "pads": (1, 0, 1, 0)},
    "stride_dilation_3x2": {"h": 9, "w": 8, "k": (3, 2), "strides": (2, 3), "dil": (2, 2), "pads": (2, 1, 0, 2),
                            "og": 2, "group": 2, "m": 4},
    "1x1": {"k": (1, 1), "pads": (0, 0, 0, 0), "c": 3, "m": 2},
    "one_image": {"n": 1, "c": 2, "h": 4, "w": 5, "m": 1},
    "opset19": {"opset": 19, "group": 2, "og": 2, "m": 4},
    "weights_input": {"w_input": True, "og": 2},
}

_TOL = {np.float32: {"rtol": 1e-4, "atol": 1e-5}, np.float64: {"rtol": 1e-10, "atol": 1e-12}}


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("cfg", list(CONFIGS))
def test_deform_conv(cfg, dtype, tmp_path):
    m, feeds = _model(dtype=dtype, **CONFIGS[cfg])
    assert_parity(m, tmp_path, feeds, **_TOL[dtype])


def _far_and_whole(shape, rng):
    """Offsets far outside the image (+-1e30), whole pixels (samples exactly on a pixel, on the
    image's edges and one past them) and fractions, mixed."""
    off = rng.uniform(-3, 3, size=shape)
    pick = rng.integers(0, 3, size=shape)
    off[pick == 1] = np.round(off[pick == 1])
    far = rng.choice([-1e30, 1e30], size=shape)
    return np.where(pick == 2, np.where(rng.uniform(size=shape) < 0.3, far, np.round(off * 2)), off)


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
def test_far_and_whole_pixel_offsets(dtype, tmp_path):
    m, feeds = _model(dtype=dtype, og=2, offsets=_far_and_whole)
    assert_parity(m, tmp_path, feeds, **_TOL[dtype])


def test_float16_model(tmp_path):
    """A float16 model computes in float32 inside (frontend/narrow.py): DeformConv included."""
    m, feeds = _model(dtype=np.float16, group=2, og=2, m=4)
    m.graph.output[0].CopyFrom(helper.make_tensor_value_info("y", TensorProto.FLOAT16, None))
    assert_parity(m, tmp_path, feeds, rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize("name", ["test_basic_deform_conv_with_padding", "test_basic_deform_conv_without_padding",
                                  "test_deform_conv_with_mask_bias", "test_deform_conv_with_multiple_offset_groups"])
def test_onnx_node_cases(name, tmp_path):
    run_onnx_node_case(name, tmp_path)


def _compile(model, tmp_path):
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    return compile_model(path, output_dir=tmp_path / "out")


def _with_feed(fix, **kw):
    """_model(**kw) with its feeds changed by fix(feeds) (the graph inputs follow them)."""
    m, feeds = _model(**kw)
    fix(feeds)
    inits = {i.name: onnx.numpy_helper.to_array(i) for i in m.graph.initializer}
    return graph_model([m.graph.node[0]], feeds, ["y"], inits, opset=22)


@pytest.mark.parametrize("fix, kw, match", [
    (lambda f: f.update(off=f["off"][:, :9]), {"og": 2}, r"offset \(2, 9, 7, 6\) must be \(2, 36, 7, 6\)"),
    (lambda f: f.update(off=f["off"][:, :, :5]), {}, r"offset \(2, 18, 5, 6\) must be \(2, 18, 7, 6\)"),
    (lambda f: f.update(mask=f["mask"][:, :4]), {}, r"mask \(2, 4, 7, 6\) must be \(2, 9, 7, 6\)"),
    (lambda f: None, {"c": 6, "og": 4}, r"offset_group 4 must divide the 6 input channels"),
])
def test_shape_errors_name_the_node(fix, kw, match, tmp_path):
    with pytest.raises(ShapeError, match=r"DeformConv node 'dc': " + match):
        _compile(_with_feed(fix, **kw), tmp_path)


def test_weights_not_fitting_the_groups(tmp_path):
    m, feeds = _model(group=2, m=4)
    m.graph.initializer[0].CopyFrom(onnx.numpy_helper.from_array(rand(4, 4, 3, 3, seed=5), "w"))
    with pytest.raises(ShapeError, match="DeformConv node 'dc'"):
        _compile(m, tmp_path)


def test_1d_input_is_unsupported(tmp_path):
    x, w, off = rand(1, 2, 8, seed=1), rand(2, 2, 3, seed=2), rand(1, 6, 6, seed=3)
    node = helper.make_node("DeformConv", ["x", "w", "off"], ["y"], name="dc", kernel_shape=[3])
    m = graph_model([node], {"x": x, "off": off}, ["y"], {"w": w}, opset=22)
    with pytest.raises(UnsupportedError, match="DeformConv node 'dc' on a 1-D input"):
        _compile(m, tmp_path)


@pytest.mark.parametrize("kind", ["opencl", "eager"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
def test_deform_conv_on_opencl(kind, dtype, tmp_path):
    """The same kernel IR printed as OpenCL C (PoCL here); 'eager': the GPU schedule at its
    most eager thresholds, so the small GEMM takes the tiled, K-split paths."""
    from tests.test_opencl import _opencl_missing
    if _opencl_missing():
        pytest.skip(_opencl_missing())
    m, feeds = _model(dtype=dtype, **CONFIGS["offset_groups_straddle"])
    assert_parity(m, tmp_path, feeds, target="opencl" if kind == "opencl" else eager_gpu_target(tmp_path),
                  **_TOL[dtype])
