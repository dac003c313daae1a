"""Resize with antialias=1 (opset 18 on; aotc/ops/resize_filters.py): linear and cubic
downsampling by a kernel stretched by 1/scale, against ONNX Runtime on fresh random inputs:
2-D, 3-D, 4-D (NCHW and NHWC) and 5-D inputs, scales (integer and non-integer factors) and
sizes, the coordinate transformation modes, exclude_outside, cubic_coeff_a, a crop box, axes;
an upsample (plain resize), an axis whose length stays (copied, as ONNX Runtime does), nearest
mode (the attribute ignored); ONNX's four antialias node cases; the OpenCL target; and a filter
that is not stretched, which must fail these comparisons."""
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper

from aotc.api import load
from aotc.compiler import compile_model
from tests.helpers import assert_parity, eager_gpu_target, graph_model, rand, run_onnx_node_case

OPSET = 19


def _resize(x_name: str, y: str, inits: dict, scales=None, sizes=None, roi=None, **attrs):
    """A Resize node reading `scales` or `sizes` (and `roi`), which it adds to `inits`."""
    ins = [x_name, ""]
    if roi is not None:
        inits[f"{y}_roi"] = np.array(roi, np.float32)
        ins[1] = f"{y}_roi"
    if scales is not None:
        inits[f"{y}_scales"] = np.array(scales, np.float32)
        ins.append(f"{y}_scales")
    else:
        inits[f"{y}_sizes"] = np.array(sizes, np.int64)
        ins += ["", f"{y}_sizes"]
    return helper.make_node("Resize", ins, [y], **attrs)


def _model(x, resizes: list[dict], antialias: int = 1):
    """One Resize of x per dict in `resizes` (its scales/sizes/roi and attributes), each an output."""
    inits, nodes, outs = {}, [], []
    for k, r in enumerate(resizes):
        outs.append(f"y{k}")
        nodes.append(_resize("x", outs[-1], inits, antialias=antialias, **r))
    return graph_model(nodes, {"x": x}, outs, inits, opset=OPSET)


def _ort(model, x):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": x})


_CT = ["half_pixel", "asymmetric", "pytorch_half_pixel", "half_pixel_symmetric", "align_corners",
       "tf_half_pixel_for_nn"]


@pytest.mark.parametrize("mode", ["linear", "cubic"])
def test_downsample_nchw(mode, tmp_path):
    """The two inner axes of an NCHW input shrunk by non-integer and integer factors and to
    sizes (one of them to a single element), under every coordinate transformation."""
    x = rand(2, 3, 9, 11, seed=1)
    resizes = []
    for ct in _CT:
        attrs = dict(mode=mode, coordinate_transformation_mode=ct)
        resizes += [dict(scales=[1, 1, 0.6, 0.8], **attrs), dict(scales=[1, 1, 0.5, 0.25], **attrs),
                    dict(sizes=[2, 3, 4, 1], **attrs)]
    assert_parity(_model(x, resizes), tmp_path, {"x": x})


@pytest.mark.parametrize("mode", ["linear", "cubic"])
def test_downsample_2d(mode, tmp_path):
    """A 2-D input: strong and uneven factors, a factor of 1/3 with cubic_coeff_a -0.5, sizes
    down to one element, exclude_outside (the window cut to the input, weights renormalized)."""
    x = rand(17, 23, seed=2)
    m = _model(x, [dict(mode=mode, scales=[0.13, 0.37]),
                   dict(mode=mode, scales=[1 / 3, 0.6], cubic_coeff_a=-0.5),
                   dict(mode=mode, sizes=[1, 1]),
                   dict(mode=mode, scales=[0.6, 0.3], exclude_outside=1),
                   dict(mode=mode, sizes=[4, 7], exclude_outside=1, coordinate_transformation_mode="asymmetric")])
    assert_parity(m, tmp_path, {"x": x})


@pytest.mark.parametrize("mode", ["linear", "cubic"])
def test_downsample_nhwc_and_axes(mode, tmp_path):
    """An NHWC input (its middle axes shrunk), and the opset-18 axes attribute with sizes."""
    x = rand(2, 9, 11, 3, seed=3)
    m = _model(x, [dict(mode=mode, scales=[1, 0.6, 0.5, 1]),
                   dict(mode=mode, sizes=[5, 4], axes=[1, 2]),
                   dict(mode=mode, sizes=[4, 7], axes=[1, 2], keep_aspect_ratio_policy="not_larger")])
    assert_parity(m, tmp_path, {"x": x})


def test_linear_downsample_3d_and_5d(tmp_path):
    """Trilinear: a 3-D input shrunk on every axis, a 5-D one on its three inner axes."""
    x3, x5 = rand(9, 11, 6, seed=4), rand(2, 2, 7, 10, 6, seed=5)
    inits = {}
    nodes = [_resize("x3", "y3", inits, scales=[0.6, 0.5, 0.5], mode="linear", antialias=1),
             _resize("x5", "y5", inits, scales=[1, 1, 0.6, 0.45, 0.8], mode="linear", antialias=1)]
    m = graph_model(nodes, {"x3": x3, "x5": x5}, ["y3", "y5"], inits, opset=OPSET)
    assert_parity(m, tmp_path, {"x3": x3, "x5": x5})


@pytest.mark.parametrize("mode", ["linear", "cubic"])
def test_upsample_is_plain_resize(mode, tmp_path):
    """antialias changes nothing where an axis grows: the upsample equals ONNX Runtime's plain
    resize, and an axis that grows beside one that shrinks is interpolated plainly."""
    x = rand(1, 2, 6, 7, seed=6)
    resizes = [dict(mode=mode, scales=[1, 1, 2, 1.5]), dict(mode=mode, scales=[1, 1, 0.6, 1.7])]
    m = _model(x, resizes)
    assert_parity(m, tmp_path, {"x": x})
    got = load(tmp_path / "out").run({"x": x})
    plain = _ort(_model(x, resizes, antialias=0), x)
    np.testing.assert_allclose(got[0], plain[0], rtol=1e-5, atol=1e-5)
    assert not np.allclose(got[1], plain[1], atol=1e-2), "the shrunk axis must be filtered"


@pytest.mark.parametrize("mode", ["linear", "cubic"])
def test_length_kept_is_copied(mode, tmp_path):
    """An axis whose output length is its input's (5 at scale 1.1) is copied, as ONNX Runtime
    does (the reference implementation resamples it), beside one that shrinks."""
    x = rand(5, 5, seed=7)
    m = _model(x, [dict(mode=mode, scales=[1.1, 0.6])])
    assert_parity(m, tmp_path, {"x": x})


@pytest.mark.parametrize("mode", ["linear", "cubic"])
def test_tf_crop_and_resize(mode, tmp_path):
    """A crop box inside the input, and one across its edges (those outputs take
    extrapolation_value), each shrunk."""
    x = rand(9, 11, seed=8)
    m = _model(x, [dict(mode=mode, sizes=[5, 4], roi=[0.2, 0.1, 0.9, 0.8],
                        coordinate_transformation_mode="tf_crop_and_resize"),
                   dict(mode=mode, sizes=[5, 4], roi=[-0.2, 0.1, 1.3, 0.8], extrapolation_value=7.0,
                        coordinate_transformation_mode="tf_crop_and_resize")])
    assert_parity(m, tmp_path, {"x": x})


def test_nearest_ignores_antialias(tmp_path):
    """Nearest mode with antialias=1 (which ONNX Runtime refuses) is nearest mode."""
    x = rand(1, 2, 9, 11, seed=9)
    resizes = [dict(mode="nearest", scales=[1, 1, 0.6, 0.5]), dict(mode="nearest", sizes=[1, 2, 4, 13])]
    onnx.save(_model(x, resizes), str(tmp_path / "model.onnx"))
    got = load(compile_model(tmp_path / "model.onnx", output_dir=tmp_path / "out")).run({"x": x})
    for g, want in zip(got, _ort(_model(x, resizes, antialias=0), x)):
        np.testing.assert_array_equal(g, want)


@pytest.mark.parametrize("name", ["test_resize_downsample_scales_cubic_antialias",
                                  "test_resize_downsample_scales_linear_antialias",
                                  "test_resize_downsample_sizes_cubic_antialias",
                                  "test_resize_downsample_sizes_linear_antialias"])
def test_onnx_node_cases(name, tmp_path):
    run_onnx_node_case(name, tmp_path, {"scales", "sizes"})


def test_an_unstretched_filter_fails(tmp_path, monkeypatch):
    """The comparisons above can fail: with the kernel left at its width (antialias ignored),
    the downsample no longer matches ONNX Runtime."""
    from aotc.ops import resize_filters as rf
    real = rf.FilterShape.of

    def unstretched(mode, scale):
        return real(mode, 1.0)
    monkeypatch.setattr(rf.FilterShape, "of", staticmethod(unstretched))
    x = rand(1, 1, 9, 11, seed=10)
    m = _model(x, [dict(mode="cubic", scales=[1, 1, 0.6, 0.8])])
    with pytest.raises(AssertionError, match="parity failed"):
        assert_parity(m, tmp_path, {"x": x})


@pytest.mark.parametrize("kind", ["opencl", "eager"])
def test_on_opencl(kind, tmp_path):
    """The tables' loops and the filtered sums as OpenCL kernels (PoCL): linear, cubic with
    exclude_outside, and an axis filtered beside one upsampled."""
    from tests.test_opencl import _opencl_missing
    if _opencl_missing():
        pytest.skip(_opencl_missing())
    x = rand(1, 2, 9, 11, seed=11)
    m = _model(x, [dict(mode="linear", scales=[1, 1, 0.6, 0.8]),
                   dict(mode="cubic", scales=[1, 1, 0.5, 0.6], exclude_outside=1),
                   dict(mode="cubic", scales=[1, 1, 0.45, 1.7], coordinate_transformation_mode="asymmetric")])
    assert_parity(m, tmp_path, {"x": x}, target="opencl" if kind == "opencl" else eager_gpu_target(tmp_path))
