"""8- and 4-bit floats (float8 E4M3FN, E4M3FNUZ, E5M2, E5M2FNUZ, E8M0; float4 E2M1) and 4- and
2-bit integers (int4, uint4, int2, uint2): stored one per byte at a graph's edges, computed in
float32 / int8 / uint8 inside (aotc/frontend/narrow.py, ops/narrow.py, runtime/aotc_support.h).

Every conversion is checked bit for bit against ml_dtypes and ONNX's numpy helpers (which make
the ONNX test data): at the stores of outputs, at the loads of inputs (every code), and inside a
graph (aotc.RoundFloat, aotc.WrapInt), on fresh random values and the special ones (ties,
subnormals, overflow, infinities, NaN, -0). Also: QuantizeLinear / DequantizeLinear to and from
these types, blocked quantization, constant folding against the kernels, the Python API's and
the C header's handling of such ports, `aotc check`'s reference for them."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper
from onnx.numpy_helper import saturate_cast, to_float8e8m0

from aotc.api import load
from aotc.check.runner import run_check
from aotc.compiler import compile_model
from aotc.errors import InputError, ShapeError
from tests.helpers import rand, typed_model

N = helper.make_node
FLOAT8 = [T.FLOAT8E4M3FN, T.FLOAT8E4M3FNUZ, T.FLOAT8E5M2, T.FLOAT8E5M2FNUZ]
SMALL_INTS = [T.INT4, T.UINT4, T.INT2, T.UINT2]


def _np(code):
    return np.dtype(helper.tensor_dtype_to_np_dtype(code))


def _vi(name, code, shape):
    return helper.make_tensor_value_info(name, code, list(shape))


def _run(nodes, inputs, outputs, feeds, tmp_path, inits=(), opset=25, target="c"):
    """aotc's outputs (a list, in graph order) of the model, compiled for `target`."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "m.onnx"
    onnx.save(typed_model(nodes, inputs, outputs, inits, opset), str(path))
    m = load(compile_model(path, target=target, output_dir=tmp_path / "out"))
    res = m.run(feeds)
    return [res[o.name] for o in outputs] if isinstance(res, dict) else list(res)


def _floats(n, seed):
    """Fresh normal values over many binades, and the values the formats treat specially."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(n) * np.exp2(rng.integers(-24, 18, n))
    special = [0.0, -0.0, np.inf, -np.inf, np.nan, 464.0, 480.0, 500.0, 240.0, 248.0, 57344.0, 61440.0,
               1e6, -1e6, 1e-7, -1e-7, 2 ** -9, 3 * 2 ** -10, 2 ** -16, 5.5, 6.5, 0.25, 0.75, 2.5, 3.5]
    return np.concatenate([x, special]).astype(np.float32)


def _same_signs(a, b):
    """Zeros' signs equal (-0 is a value of most formats); NaNs' signs are not compared."""
    keep = ~np.isnan(a)
    np.testing.assert_array_equal(np.signbit(a[keep]), np.signbit(b[keep]))


def _bits(a):
    return np.asarray(a).view(np.uint8)


# ----------------------------------------------------------------------------- floats
@pytest.mark.parametrize("code,saturate", [(c, s) for c in FLOAT8 for s in (1, 0)] + [(T.FLOAT4E2M1, 1)],
                         ids=lambda v: T.DataType.Name(v) if v > 1 else f"saturate{v}")
def test_cast_to_small_float_bit_exact(code, saturate, tmp_path):
    """Cast to the type at an output (the store's encoding) and inside the graph, then back to
    float (aotc.RoundFloat), as ml_dtypes rounds (after a clip when saturating; E2M1, to which
    Cast's saturate does not apply, always saturates)."""
    dt = _np(code)
    x = _floats(400, seed=code * 10 + saturate)
    want = saturate_cast(x, dt) if saturate and code != T.FLOAT4E2M1 else x.astype(dt)
    kw = {"saturate": saturate} if code != T.FLOAT4E2M1 else {}
    y, back = _run([N("Cast", ["x"], ["y"], to=code, **kw), N("Cast", ["y"], ["back"], to=T.FLOAT)],
                   [_vi("x", T.FLOAT, x.shape)], [_vi("y", code, x.shape), _vi("back", T.FLOAT, x.shape)],
                   {"x": x}, tmp_path)
    assert y.dtype == dt
    np.testing.assert_array_equal(_bits(y), _bits(want))
    ref = want.astype(np.float32)
    np.testing.assert_array_equal(back, ref)                  # (NaN positions equal too)
    _same_signs(back, ref)


@pytest.mark.parametrize("code", FLOAT8 + [T.FLOAT8E8M0, T.FLOAT4E2M1], ids=lambda c: T.DataType.Name(c))
def test_small_float_inputs_decode_every_code(code, tmp_path):
    dt = _np(code)
    codes = np.arange(16 if code == T.FLOAT4E2M1 else 256, dtype=np.uint8).view(dt)
    (y,) = _run([N("Cast", ["x"], ["y"], to=T.FLOAT)], [_vi("x", code, codes.shape)],
                [_vi("y", T.FLOAT, codes.shape)], {"x": codes}, tmp_path)
    ref = codes.astype(np.float32)
    np.testing.assert_array_equal(y, ref)
    _same_signs(y, ref)


@pytest.mark.parametrize("mode", ["up", "down", "nearest"])
@pytest.mark.parametrize("saturate", [1, 0])
def test_cast_to_e8m0(mode, saturate, tmp_path):
    rng = np.random.default_rng(7)
    x = (np.exp2(rng.integers(-130, 128, 300)) * rng.uniform(1.0, 2.0, 300)).astype(np.float32)
    x = np.concatenate([x, np.float32([0.0, 1.0, 1.5, 1.75, 1.25, 2 ** 127 * 1.5, np.inf, np.nan, 2 ** -127])])
    want = to_float8e8m0(x, bool(saturate), mode)
    y, back = _run([N("Cast", ["x"], ["y"], to=T.FLOAT8E8M0, saturate=saturate, round_mode=mode),
                    N("Cast", ["y"], ["back"], to=T.FLOAT)],
                   [_vi("x", T.FLOAT, x.shape)], [_vi("y", T.FLOAT8E8M0, x.shape), _vi("back", T.FLOAT, x.shape)],
                   {"x": x}, tmp_path)
    np.testing.assert_array_equal(_bits(y), _bits(want))
    np.testing.assert_array_equal(back, want.astype(np.float32))


# ----------------------------------------------------------------------------- integers
@pytest.mark.parametrize("code", SMALL_INTS, ids=lambda c: T.DataType.Name(c))
def test_small_ints_wrap_and_widen(code, tmp_path):
    """float -> the type truncates and wraps (as ml_dtypes, ONNX's reference); inside the graph
    (aotc.WrapInt) too; the type's values widen exactly to int8 / uint8 and float."""
    dt = _np(code)
    rng = np.random.default_rng(code)
    x = np.concatenate([np.arange(-9, 17), rng.uniform(-40, 40, 100)]).astype(np.float32)
    want = x.astype(dt)
    wide = T.INT8 if code in (T.INT4, T.INT2) else T.UINT8
    y, back, ints = _run([N("Cast", ["x"], ["y"], to=code), N("Cast", ["y"], ["back"], to=T.FLOAT),
                          N("Cast", ["y"], ["ints"], to=wide)],
                         [_vi("x", T.FLOAT, x.shape)],
                         [_vi("y", code, x.shape), _vi("back", T.FLOAT, x.shape), _vi("ints", wide, x.shape)],
                         {"x": x}, tmp_path)
    assert y.dtype == dt
    np.testing.assert_array_equal(_bits(y), _bits(want))      # (the value in the low bits, as ml_dtypes)
    np.testing.assert_array_equal(back, want.astype(np.float32))
    np.testing.assert_array_equal(ints, want.astype(_np(wide)))
    # an input of the type, read back through int32 arithmetic
    z = rng.integers(*(lambda i: (int(i.min), int(i.max) + 1))(ml_dtypes.iinfo(dt)), 50).astype(dt)
    (s,) = _run([N("Cast", ["z"], ["zi"], to=T.INT32), N("Add", ["zi", "zi"], ["s"])],
                [_vi("z", code, z.shape)], [_vi("s", T.INT32, z.shape)], {"z": z}, tmp_path)
    np.testing.assert_array_equal(s, 2 * z.astype(np.int32))


@pytest.mark.parametrize("code", [T.FLOAT8E4M3FN, T.FLOAT8E5M2FNUZ, T.FLOAT4E2M1, T.INT4, T.UINT2],
                         ids=lambda c: T.DataType.Name(c))
def test_constant_folding_agrees_with_the_kernels(code, tmp_path):
    """The same casts folded at compile time (numpy, ml_dtypes) and computed by the kernels."""
    x = (_floats(120, seed=3) if code not in SMALL_INTS else rand(120, seed=3) * 20).astype(np.float32)
    nodes = [N("Cast", ["x"], ["y"], to=code), N("Cast", ["y"], ["z"], to=T.FLOAT), N("Identity", ["z"], ["out"])]
    out = [_vi("out", T.FLOAT, x.shape)]
    (run_time,) = _run(nodes, [_vi("x", T.FLOAT, x.shape)], out, {"x": x}, tmp_path / "a")
    (folded,) = _run(nodes, [], out, {}, tmp_path / "b", inits=[("x", x)])
    np.testing.assert_array_equal(run_time, folded)
    _same_signs(run_time, folded)


# ----------------------------------------------------------------------------- quantization
@pytest.mark.parametrize("code", [T.INT4, T.UINT4, T.INT2, T.UINT2], ids=lambda c: T.DataType.Name(c))
def test_quantize_to_small_ints_saturates_to_their_range(code, tmp_path):
    dt = _np(code)
    x = rand(6, 10, seed=code) * 6
    scale = np.float32([0.5, 0.25, 1.0, 0.7, 0.3, 2.0])
    lo, hi = int(ml_dtypes.iinfo(dt).min), int(ml_dtypes.iinfo(dt).max)
    zp = np.array([lo + 1, 0, hi, 1, 0, lo], np.int64).clip(lo, hi).astype(dt)
    y, back = _run([N("QuantizeLinear", ["x", "s", "zp"], ["y"], axis=0),
                    N("DequantizeLinear", ["y", "s", "zp"], ["back"], axis=0)],
                   [_vi("x", T.FLOAT, x.shape)], [_vi("y", code, x.shape), _vi("back", T.FLOAT, x.shape)],
                   {"x": x}, tmp_path, inits=[("s", scale), ("zp", zp)])
    q = np.clip(np.rint(x / scale[:, None]) + zp.astype(np.float32)[:, None], lo, hi)
    np.testing.assert_array_equal(y.astype(np.float32), q)
    np.testing.assert_allclose(back, (q - zp.astype(np.float32)[:, None]) * scale[:, None], rtol=1e-6)


@pytest.mark.parametrize("code", [T.FLOAT8E4M3FN, T.FLOAT8E5M2], ids=lambda c: T.DataType.Name(c))
def test_quantize_to_float8(code, tmp_path):
    """QuantizeLinear to float8 (x / scale + zero point, rounded), then DequantizeLinear:
    saturating (the default) beside ONNX Runtime (float8 ports through OrtValues); not saturating
    against ml_dtypes, as ONNX's reference implementation rounds. (ONNX Runtime differs there
    between the largest finite value and the next power of two's rounding boundary: 486 / 1
    to E4M3FN is 448 for it, NaN for ml_dtypes, which rounds it to 480, past the largest.)"""
    dt = _np(code)
    x = np.concatenate([rand(4, 30, seed=code) * 300, np.float32([[1e6, -1e6, np.inf, 3.0] * 7 + [0.5, 1]] * 4)],
                       axis=1)
    scale = np.float32([0.5, 0.01, 2.0, 1.0])
    zp = np.zeros(4, np.float32).astype(dt)
    for saturate in (1, 0):
        path = tmp_path / f"m{saturate}.onnx"
        onnx.save(typed_model([N("QuantizeLinear", ["x", "s", "zp"], ["y"], axis=0, saturate=saturate),
                               N("DequantizeLinear", ["y", "s", "zp"], ["back"], axis=0)],
                              [_vi("x", T.FLOAT, x.shape)], [_vi("y", code, x.shape), _vi("back", T.FLOAT, x.shape)],
                              [("s", scale), ("zp", zp)], 21), str(path))
        out = tmp_path / f"out{saturate}"
        if saturate:
            res = run_check(path, target="c", inputs={"x": x}, rtol=0, atol=0, output_dir=out)
            assert res.reference.startswith("ONNX Runtime"), res.reference
            assert res.passed, [(o.name, o.mismatches, o.note) for o in res.outputs]
        else:
            y, back = load(compile_model(path, target="c", output_dir=out)).run({"x": x})
            want = (x / scale[:, None]).astype(dt)
            np.testing.assert_array_equal(_bits(y), _bits(want))
            np.testing.assert_array_equal(back, want.astype(np.float32) * scale[:, None])


def test_int4_weights_blocked_against_onnx_runtime_and_numpy(tmp_path):
    """A weight-only quantized MatMul: int4 weights in blocks of 16 along K, each block its own
    scale and zero point (DequantizeLinear folds them at compile time), beside ONNX Runtime and
    numpy. (`aotc check` asks ONNX Runtime for float32 products in the MatMulNBits it fuses the
    pair into: by default it quantizes x to int8, 0.03 off here.)"""
    K, Nn, B = 64, 24, 16
    rng = np.random.default_rng(5)
    w = rng.integers(-8, 8, (K, Nn)).astype(ml_dtypes.int4)
    scale = rng.uniform(0.01, 0.1, (K // B, Nn)).astype(np.float32)
    zp = rng.integers(-2, 3, (K // B, Nn)).astype(ml_dtypes.int4)
    path = tmp_path / "m.onnx"
    onnx.save(typed_model([N("DequantizeLinear", ["w", "s", "zp"], ["wf"], axis=0, block_size=B),
                           N("MatMul", ["x", "wf"], ["y"])],
                          [_vi("x", T.FLOAT, (3, K))], [_vi("y", T.FLOAT, (3, Nn))],
                          [("w", w), ("s", scale), ("zp", zp)], 21), str(path))
    x = rand(3, K, seed=6)
    res = run_check(path, target="c", inputs={"x": x}, output_dir=tmp_path / "out")
    assert res.reference.startswith("ONNX Runtime"), res.reference
    assert res.passed, [(o.name, o.max_abs_err) for o in res.outputs]
    (got,) = load(tmp_path / "out").run({"x": x})
    want = x @ ((w.astype(np.float32) - np.repeat(zp.astype(np.float32), B, 0)) * np.repeat(scale, B, 0))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("axis", [0, 1])
def test_blocked_quantization_with_a_partial_last_block(axis, tmp_path):
    """QuantizeLinear and DequantizeLinear at run time, blocks of 4 along an axis of 10 (the last
    block holds 2), against numpy."""
    x = rand(10, 10, seed=axis) * 3
    shape = (3, 10) if axis == 0 else (10, 3)
    rng = np.random.default_rng(axis)
    scale = rng.uniform(0.02, 0.05, shape).astype(np.float32)
    zp = rng.integers(100, 150, shape).astype(np.uint8)
    y, back = _run([N("QuantizeLinear", ["x", "s", "zp"], ["y"], axis=axis, block_size=4),
                    N("DequantizeLinear", ["y", "s", "zp"], ["back"], axis=axis, block_size=4)],
                   [_vi("x", T.FLOAT, x.shape)], [_vi("y", T.UINT8, x.shape), _vi("back", T.FLOAT, x.shape)],
                   {"x": x}, tmp_path, inits=[("s", scale), ("zp", zp)], opset=21)
    full_s = np.repeat(scale, 4, axis)[:10] if axis == 0 else np.repeat(scale, 4, axis)[:, :10]
    full_z = (np.repeat(zp, 4, axis)[:10] if axis == 0 else np.repeat(zp, 4, axis)[:, :10]).astype(np.float32)
    q = np.clip(np.rint(x / full_s) + full_z, 0, 255)
    np.testing.assert_array_equal(y, q.astype(np.uint8))
    np.testing.assert_allclose(back, (q - full_z) * full_s, rtol=1e-6)


def test_blocked_quantization_checks_the_scale_shape(tmp_path):
    path = tmp_path / "m.onnx"
    onnx.save(typed_model([N("DequantizeLinear", ["x", "s"], ["y"], axis=1, block_size=4)],
                          [_vi("x", T.INT8, (4, 10))], [_vi("y", T.FLOAT, (4, 10))],
                          [("s", rand(4, 2, seed=1, low=0.1, high=1))], 21), str(path))
    with pytest.raises(ShapeError, match=r"block_size 4 along axis 1 .* \(4, 3\), not \(4, 2\)"):
        compile_model(path, target="c", output_dir=tmp_path / "out")


# ----------------------------------------------------------------------------- the artifact
def test_ports_in_the_header_api_and_check(tmp_path):
    """A float8 input and an int4 output: uint8_t in the C header, ml_dtypes arrays in Python
    (raw '<V1' arrays as np.load gives them back taken too, float32 refused with a hint),
    `aotc check` against the ONNX reference (ONNX Runtime's Python API has no int4 arrays)."""
    path = tmp_path / "m.onnx"
    onnx.save(typed_model([N("Cast", ["x"], ["xf"], to=T.FLOAT), N("Mul", ["xf", "xf"], ["sq"]),
                           N("Cast", ["sq"], ["y"], to=T.INT4)],
                          [_vi("x", T.FLOAT8E4M3FN, (2, 8))], [_vi("y", T.INT4, (2, 8))], (), 21), str(path))
    out = compile_model(path, target="c", output_dir=tmp_path / "out")
    header = (out / "m.h").read_text()
    assert "const uint8_t *x;" in header and "float8_e4m3fn[2, 8]" in header and "int4[2, 8]" in header
    x = (rand(2, 8, seed=9) * 2).astype(ml_dtypes.float8_e4m3fn)
    m = load(out)
    (y,) = m.run({"x": x})
    assert y.dtype == np.dtype(ml_dtypes.int4)
    np.testing.assert_array_equal(y, np.square(x.astype(np.float32)).astype(ml_dtypes.int4))
    np.testing.assert_array_equal(m.run({"x": x.view("V1")})[0], y)
    with pytest.raises(InputError, match="expects float8_e4m3fn") as e:
        m.run({"x": x.astype(np.float32)})
    assert "x.astype(ml_dtypes.float8_e4m3fn)" in e.value.hint
    res = run_check(path, target="c", output_dir=tmp_path / "check")
    assert res.passed and "reference implementation" in res.reference and "4- or 2-bit" in res.reference


def _all_types_model():
    """Every 8-, 4- and 2-bit type at an input or output and in a Cast inside the graph."""
    nodes = [N("Cast", ["f8"], ["f8f"], to=T.FLOAT), N("Cast", ["i4"], ["i4f"], to=T.FLOAT),
             N("Add", ["f8f", "i4f"], ["s"]), N("Mul", ["s", "x"], ["t"])]
    outputs = []
    for k, code in enumerate(FLOAT8 + [T.FLOAT8E8M0, T.FLOAT4E2M1] + SMALL_INTS):
        nodes += [N("Cast", ["t"], [f"y{k}"], to=code), N("Cast", [f"y{k}"], [f"z{k}"], to=T.FLOAT)]
        outputs += [_vi(f"y{k}", code, (64,)), _vi(f"z{k}", T.FLOAT, (64,))]
    return typed_model(nodes, [_vi("f8", T.FLOAT8E5M2, (64,)), _vi("i4", T.INT4, (64,)), _vi("x", T.FLOAT, (64,))],
                       outputs, (), 25)


def _all_types_feeds():
    rng = np.random.default_rng(21)
    return {"f8": (rng.standard_normal(64) * 40).astype(ml_dtypes.float8_e5m2),
            "i4": rng.integers(-8, 8, 64).astype(ml_dtypes.int4),
            "x": np.concatenate([rng.standard_normal(56) * np.exp2(rng.integers(-8, 8, 56)),
                                 [np.nan, np.inf, -np.inf, 1e6, -0.0, 0.0, 1e-9, 3.0]]).astype(np.float32)}


def _same_as_c(got, want):
    for g, w in zip(got, want):
        assert g.dtype == w.dtype
        if g.dtype.itemsize == 1:
            np.testing.assert_array_equal(_bits(g), _bits(w))
        else:
            np.testing.assert_array_equal(g, w)


def test_small_types_on_opencl_as_on_c(tmp_path):
    """The OpenCL kernels copy the C runtime's conversions: the same bits as the C target."""
    from tests.test_opencl import _opencl_missing
    if _opencl_missing():
        pytest.skip(_opencl_missing())
    path = tmp_path / "m.onnx"
    onnx.save(_all_types_model(), str(path))
    feeds = _all_types_feeds()
    want = load(compile_model(path, target="c", output_dir=tmp_path / "c")).run(feeds)
    out = compile_model(path, target="opencl", output_dir=tmp_path / "cl")
    assert "typedef uchar uint8_t;" in (out / "m.cl").read_text()
    _same_as_c(load(out).run(feeds), want)


def test_small_types_on_emulated_cuda_as_on_c(tmp_path):
    """CUDA calls the C runtime's conversions on the device (host and device functions there):
    the emulated build gives the C target's bits; nvcc compiles it for sm_90 where installed."""
    import shutil

    from tests.test_cuda_emulated import emulated_build
    path = tmp_path / "m.onnx"
    onnx.save(_all_types_model(), str(path))
    feeds = _all_types_feeds()
    want = load(compile_model(path, target="c", output_dir=tmp_path / "c")).run(feeds)
    out = compile_model(path, target="cuda:sm_90", output_dir=tmp_path / "cu", build=emulated_build)
    assert "aotc_f8e5m2_to_float(f8[" in (out / "m.cu").read_text()
    _same_as_c(load(out).run(feeds), want)
    if shutil.which("nvcc"):
        compile_model(path, target="cuda:sm_90", output_dir=tmp_path / "nvcc")
