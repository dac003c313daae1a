"""ONNX Runtime's contrib operators (aotc/frontend/contrib.py), one node at a time against ONNX
Runtime's CPU kernels on random inputs: every attribute and optional input, and the refusals.
The models its real tools write are tests/test_contrib_models.py's."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from aotc.errors import UnsupportedError
from tests.helpers import NP2ONNX, assert_parity, rand

MS = "com.microsoft"


def contrib_model(op: str, inputs: dict, inits: dict | None = None, order: list | None = None, n_out: int = 1,
                  outs: list | None = None, domain: str = MS, onnx_opset: int = 17, **attrs) -> onnx.ModelProto:
    """One contrib node: `inputs` are graph inputs, `inits` initializers; the node reads `order`
    (names, "" for an absent optional input) or inputs then initializers."""
    order = order if order is not None else list(inputs) + list(inits or {})
    outs = outs or [f"y{k}" for k in range(n_out)]
    node = helper.make_node(op, order, outs, domain=domain, name="n0", **attrs)
    g = helper.make_graph([node], "contrib",
                          [helper.make_tensor_value_info(k, NP2ONNX[v.dtype], v.shape) for k, v in inputs.items()],
                          [helper.make_empty_tensor_value_info(o) for o in outs if o],
                          [numpy_helper.from_array(v, k) for k, v in (inits or {}).items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", onnx_opset), helper.make_opsetid(MS, 1)])
    m.ir_version = 8
    return m


def check(m, tmp_path, feeds, **kw):
    return assert_parity(m, tmp_path, feeds, **kw)


def run_aotc(m, tmp_path, feeds) -> list:
    """aotc's outputs, for the operators ONNX Runtime has no CPU kernel for (checked against
    their definitions instead)."""
    import aotc
    onnx.save(m, tmp_path / "m.onnx")
    aotc.compile(tmp_path / "m.onnx", target="c", output_dir=tmp_path / "out")
    return aotc.load(tmp_path / "out").run(feeds)


# ------------------------------------------------------------------------------- activations
@pytest.mark.parametrize("op,extra,attrs", [
    ("Gelu", {}, {}), ("BiasGelu", {"b": rand(16, seed=2)}, {}), ("FastGelu", {}, {}),
    ("FastGelu", {"b": rand(16, seed=3)}, {}), ("QuickGelu", {}, {}), ("QuickGelu", {}, {"alpha": 1.1}),
])
def test_gelu_family(op, extra, attrs, tmp_path):
    x = rand(2, 5, 16, seed=1) * 3
    check(contrib_model(op, {"x": x}, extra, **attrs), tmp_path, {"x": x})


def test_bias_add_against_its_definition(tmp_path):
    """(BiasAdd is a CUDA operator in ONNX Runtime: no CPU kernel to compare with.)"""
    x, skip, b = rand(2, 4, 8, seed=1), rand(2, 4, 8, seed=2), rand(8, seed=3)
    got, = run_aotc(contrib_model("BiasAdd", {"x": x, "skip": skip}, {"b": b}, order=["x", "b", "skip"]),
                    tmp_path, {"x": x, "skip": skip})
    np.testing.assert_allclose(got, x + b + skip, rtol=1e-6, atol=1e-6)


def test_bias_split_gelu_is_left_times_gelu_of_right(tmp_path):
    """ONNX Runtime has no CPU kernel for BiasSplitGelu (a CUDA operator): checked against its
    definition, left half * Gelu(right half) of x + bias."""
    import math
    x, b = rand(2, 6, 16, seed=1), rand(16, seed=2)
    got, = run_aotc(contrib_model("BiasSplitGelu", {"x": x}, {"b": b}), tmp_path, {"x": x})
    s = (x + b).astype(np.float64)
    erf = np.vectorize(math.erf)
    want = s[..., :8] * 0.5 * s[..., 8:] * (1 + erf(s[..., 8:] / math.sqrt(2)))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------------------- normalizations
@pytest.mark.parametrize("beta,bias,sum_out", [(True, True, True), (False, False, False), (True, False, True)])
def test_skip_layer_normalization(beta, bias, sum_out, tmp_path):
    x, skip = rand(2, 5, 16, seed=1), rand(2, 5, 16, seed=2)
    inits = {"gamma": rand(16, seed=3)}
    order = ["x", "skip", "gamma", "beta" if beta else "", "bias" if bias else ""]
    if beta:
        inits["beta"] = rand(16, seed=4)
    if bias:
        inits["bias"] = rand(16, seed=5)
    outs = ["y", "mean", "inv_std", "sum"] if sum_out else ["y"]
    check(contrib_model("SkipLayerNormalization", {"x": x, "skip": skip}, inits, order=order, outs=outs,
                        epsilon=1e-5), tmp_path, {"x": x, "skip": skip})


@pytest.mark.parametrize("bias", [True, False])
def test_skip_simplified_layer_normalization(bias, tmp_path):
    x, skip = rand(2, 5, 16, seed=1), rand(2, 5, 16, seed=2)
    inits = {"gamma": rand(16, seed=3)}
    if bias:
        inits["bias"] = rand(16, seed=5)
    check(contrib_model("SkipSimplifiedLayerNormalization", {"x": x, "skip": skip}, inits,
                        outs=["y", "", "", "sum"], epsilon=1e-6), tmp_path, {"x": x, "skip": skip})


def test_simplified_layer_normalization_in_the_default_domain(tmp_path):
    x = rand(3, 4, 16, seed=1)
    check(contrib_model("SimplifiedLayerNormalization", {"x": x}, {"s": rand(16, seed=2)}, domain="",
                        outs=["y", "inv"], epsilon=1e-5), tmp_path, {"x": x})


def test_layer_normalization_1_in_an_opset_14_model(tmp_path):
    """ONNX Runtime's LayerNormalization-1 of the default domain (as its transformers optimizer
    writes into an opset-14 model), with its mean and inverse deviation outputs."""
    x = rand(2, 3, 16, seed=1)
    check(contrib_model("LayerNormalization", {"x": x}, {"s": rand(16, seed=2), "b": rand(16, seed=3)}, domain="",
                        onnx_opset=14, outs=["y", "mean", "inv"], epsilon=1e-5), tmp_path, {"x": x})


@pytest.mark.parametrize("segments,mask,pos_ids", [(True, True, False), (False, False, False), (True, False, True)])
def test_embed_layer_normalization(segments, mask, pos_ids, tmp_path):
    rng = np.random.default_rng(1)
    B, S, H = 2, 6, 16
    feeds = {"ids": rng.integers(0, 30, (B, S)).astype(np.int32)}
    inits = {"words": rand(30, H, seed=2), "pos": rand(10, H, seed=3)}
    order = ["ids", "seg" if segments else "", "words", "pos", "segs" if segments else "", "gamma", "beta"]
    if segments:
        feeds["seg"] = rng.integers(0, 2, (B, S)).astype(np.int32)
        inits["segs"] = rand(2, H, seed=4)
    inits.update(gamma=rand(H, seed=5), beta=rand(H, seed=6))
    if mask:
        feeds["mask"] = np.array([[1] * S, [1] * 4 + [0] * 2], np.int32)
    if mask or pos_ids:
        order.append("mask" if mask else "")
    if pos_ids:
        feeds["pos_ids"] = rng.integers(0, 10, (B, S)).astype(np.int32)
        order.append("pos_ids")
    outs = ["y", "mask_index", "emb_sum"]
    check(contrib_model("EmbedLayerNormalization", feeds, inits, order=order, outs=outs, epsilon=1e-5),
          tmp_path, feeds)


# ------------------------------------------------------------------------ matmul, gemm, conv
@pytest.mark.parametrize("a_shape,b_shape,attrs", [
    ((3, 4, 5), (3, 5, 6), {"alpha": 0.5}),
    ((3, 5, 4), (5, 6), {"transA": 1, "transB": 0}),
    ((2, 4, 5), (2, 6, 5), {"transB": 1, "alpha": 2.0}),
    ((3, 4, 5), (4, 5, 6), {"transBatchA": 1}),
    ((2, 3, 4, 5), (6, 2, 3, 5), {"transBatchB": 1, "transB": 1}),
    ((4, 5, 3, 2), (5, 3, 4, 6), {"transBatchA": 1, "transA": 1}),
])
def test_fused_matmul(a_shape, b_shape, attrs, tmp_path):
    a, b = rand(*a_shape, seed=1), rand(*b_shape, seed=2)
    check(contrib_model("FusedMatMul", {"a": a, "b": b}, **attrs), tmp_path, {"a": a, "b": b})


@pytest.mark.parametrize("act,attrs", [("Relu", {}), ("LeakyRelu", {"activation_alpha": 0.2}),
                                       ("HardSigmoid", {"activation_alpha": 0.3, "activation_beta": 0.4}),
                                       ("Tanh", {})])
def test_fused_gemm(act, attrs, tmp_path):
    a = rand(4, 8, seed=1)
    check(contrib_model("FusedGemm", {"a": a}, {"w": rand(6, 8, seed=2), "c": rand(6, seed=3)}, transB=1, alpha=0.7,
                        beta=1.3, activation=act, **attrs), tmp_path, {"a": a})


@pytest.mark.parametrize("act,params,z", [("Relu", [], False), ("LeakyRelu", [0.1], True), ("Clip", [-0.5, 0.7], False),
                                          ("Sigmoid", [], True), ("HardSigmoid", [0.3, 0.6], False)])
def test_fused_conv(act, params, z, tmp_path):
    x = rand(1, 3, 8, 8, seed=1)
    feeds = {"x": x}
    order = ["x", "w", "b"]
    if z:
        feeds["z"] = rand(1, 4, 8, 8, seed=4)
        order.append("z")
    kw = {"activation_params": params} if params else {}
    check(contrib_model("FusedConv", feeds, {"w": rand(4, 3, 3, 3, seed=2), "b": rand(4, seed=3)}, order=order,
                        activation=act, pads=[1, 1, 1, 1], **kw), tmp_path, feeds)


@pytest.mark.parametrize("swish,last", [(0, 1), (1, 1), (1, 0)])
def test_group_norm_against_its_definition(swish, last, tmp_path):
    """GroupNorm has no CPU kernel in ONNX Runtime (a CUDA operator): checked against its definition."""
    N, H, W, C, G = 2, 3, 4, 8, 2
    x = rand(N, H, W, C, seed=1) if last else rand(N, C, H, W, seed=1)
    gamma, beta = rand(C, seed=2), rand(C, seed=3)
    m = contrib_model("GroupNorm", {"x": x}, {"g": gamma, "b": beta}, activation=swish, channels_last=last,
                      groups=G, epsilon=1e-5)
    got, = run_aotc(m, tmp_path, {"x": x})
    nchw = (x.transpose(0, 3, 1, 2) if last else x).astype(np.float64)
    grp = nchw.reshape(N, G, -1)
    norm = ((grp - grp.mean(-1, keepdims=True)) / np.sqrt(grp.var(-1, keepdims=True) + 1e-5)).reshape(nchw.shape)
    y = norm * gamma[None, :, None, None] + beta[None, :, None, None]
    if swish:
        y = y / (1 + np.exp(-y))
    np.testing.assert_allclose(got, y.transpose(0, 2, 3, 1) if last else y, rtol=1e-4, atol=1e-5)


# ---------------------------------------------------------------------------------- attention
B, S, HID, NH = 2, 5, 16, 4


def _attention_case(mask=None, past=None, bias_in=None, extra=None, **attrs):
    x = rand(B, S, HID, seed=1)
    inits = {"w": rand(HID, 3 * HID, seed=2) * 0.5, "b": rand(3 * HID, seed=3)}
    feeds = {"x": x}
    order = ["x", "w", "b", "", "", ""]
    if mask is not None:
        feeds["mask"] = mask
        order[3] = "mask"
    if past is not None:
        feeds["past"] = past
        order[4] = "past"
    if bias_in is not None:
        feeds["abias"] = bias_in
        order[5] = "abias"
    while order and not order[-1]:
        order.pop()
    outs = ["y", "present"] if past is not None else ["y"]
    return contrib_model("Attention", feeds, inits, order=order, outs=outs, num_heads=NH, **attrs), feeds


@pytest.mark.parametrize("form", ["none", "lengths", "end_start", "raw2d", "raw3d", "dummy"])
def test_attention_mask_index_forms(form, tmp_path):
    rng = np.random.default_rng(7)
    mask = {"none": None,
            "lengths": np.array([S, 3], np.int32),
            "end_start": np.array([S, 4, 0, 2], np.int32),
            "raw2d": np.array([[1, 1, 0, 1, 1], [1, 1, 1, 0, 0]], np.int32),
            "raw3d": rng.integers(0, 2, (B, S, S)).astype(np.int32),
            "dummy": np.ones((B, 1), np.int32)}[form]
    m, feeds = _attention_case(mask)
    check(m, tmp_path, feeds)


def test_attention_unidirectional_with_past_and_present(tmp_path):
    past = rand(2, B, NH, 3, HID // NH, seed=9)
    m, feeds = _attention_case(np.ones((B, 3 + S), np.int32), past=past, unidirectional=1)
    check(m, tmp_path, feeds)


def test_attention_bias_scale_mask_filter_and_qkv_hidden_sizes(tmp_path):
    x = rand(B, S, HID, seed=1)
    sizes = [16, 16, 8]
    inits = {"w": rand(HID, sum(sizes), seed=2) * 0.5, "b": rand(sum(sizes), seed=3)}
    feeds = {"x": x, "mask": np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], np.int32),
             "abias": rand(1, NH, S, S, seed=4)}
    m = contrib_model("Attention", feeds, inits, order=["x", "w", "b", "mask", "", "abias"], num_heads=NH,
                      qkv_hidden_sizes=sizes, scale=0.3, mask_filter_value=-500.0, unidirectional=1)
    check(m, tmp_path, feeds)


@pytest.mark.parametrize("attrs,mask,what", [({"do_rotary": 1}, None, "do_rotary"),
                                             ({}, np.ones((B, 1, 8, 8), np.int32), "Megatron")])
def test_attention_refusals_name_what(attrs, mask, what, tmp_path):
    m, _ = _attention_case(mask, **attrs)
    with pytest.raises(UnsupportedError, match=what):
        run_aotc(m, tmp_path, {})


def _mha_feeds(L=S, kv_form="3d"):
    D = HID
    q = rand(B, S, D, seed=1)
    if kv_form == "3d":
        return {"q": q, "k": rand(B, L, D, seed=2), "v": rand(B, L, D, seed=3)}
    if kv_form == "packed_kv":
        return {"q": q, "k": rand(B, L, NH, 2, D // NH, seed=2)}
    if kv_form == "4d":
        return {"q": q, "k": rand(B, NH, L, D // NH, seed=2), "v": rand(B, NH, L, D // NH, seed=3)}
    if kv_form == "packed_qkv":
        return {"q": rand(B, S, NH, 3, D // NH, seed=1)}


def _mha_model(feeds, bias, mask, uni):
    order = list(feeds) + [""] * (3 - len(feeds))
    inits = {"bias": rand(3 * HID, seed=5)} if bias else {}
    order.append("bias" if bias else "")
    order.append("kpm" if mask is not None else "")
    feeds = {**feeds, **({"kpm": mask} if mask is not None else {})}
    while not order[-1]:
        order.pop()
    return contrib_model("MultiHeadAttention", feeds, inits, order=order, num_heads=NH, unidirectional=uni), feeds


@pytest.mark.parametrize("kv_form,bias,mask,uni", [
    ("3d", True, "raw2d", 0), ("3d", False, "lengths", 1), ("4d", False, "raw2d", 0)])
def test_multi_head_attention(kv_form, bias, mask, uni, tmp_path):
    L = S if uni else 7
    kpm = None
    if mask == "raw2d":
        kpm = (np.random.default_rng(3).random((B, L)) > 0.3).astype(np.int32)
        kpm[:, 0] = 1
    elif mask == "lengths":
        kpm = np.array([L, 2], np.int32)
    m, feeds = _mha_model(_mha_feeds(L, kv_form), bias, kpm, uni)
    check(m, tmp_path, feeds)


@pytest.mark.parametrize("packed", ["packed_kv", "packed_qkv"])
def test_multi_head_attention_packed_forms_equal_the_unpacked(packed, tmp_path):
    """ONNX Runtime's CPU kernel refuses packed key / value ("not implemented for CPU"): aotc's
    result on the packed inputs against ONNX Runtime's on the same tensors unpacked."""
    import onnxruntime as ort
    H = HID // NH
    feeds = _mha_feeds(S, packed)
    bias = packed == "packed_qkv"
    uni = int(packed == "packed_qkv")
    got, = run_aotc(_mha_model(feeds, bias, None, uni)[0], tmp_path, feeds)
    if packed == "packed_kv":
        kv = feeds["k"]
        plain = {"q": feeds["q"], "k": kv[:, :, :, 0].reshape(B, S, HID), "v": kv[:, :, :, 1].reshape(B, S, HID)}
    else:
        qkv = feeds["q"]
        plain = {n: qkv[:, :, :, i].reshape(B, S, HID) for i, n in enumerate("qkv")}
    del H
    m, plain = _mha_model(plain, bias, None, uni)
    want, = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, plain)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_multi_head_attention_with_past_and_attention_bias(tmp_path):
    P, H = 3, HID // NH
    feeds = {**_mha_feeds(S), "ab": rand(B, 1, S, P + S, seed=6), "pk": rand(B, NH, P, H, seed=7),
             "pv": rand(B, NH, P, H, seed=8)}
    m = contrib_model("MultiHeadAttention", feeds, order=["q", "k", "v", "", "", "ab", "pk", "pv"],
                      outs=["y", "present_k", "present_v"], num_heads=NH, scale=0.4)
    check(m, tmp_path, feeds)


# -------------------------------------------------------------------------------- rotary
@pytest.mark.parametrize("layout,interleaved,offset,rot", [("3d", 0, False, 0), ("3d", 1, True, 0),
                                                           ("4d", 0, True, 0), ("4d", 1, False, 0),
                                                           ("3d", 0, False, 2)])
def test_rotary_embedding(layout, interleaved, offset, rot, tmp_path):
    H = 8
    x = rand(B, S, NH * H, seed=1) if layout == "3d" else rand(B, NH, S, H, seed=1)
    r = rot or H
    inits = {"cos": rand(16, r // 2, seed=2), "sin": rand(16, r // 2, seed=3)}
    pos = np.array([4], np.int64) if offset else np.random.default_rng(2).integers(0, 16, (B, S)).astype(np.int64)
    attrs = {"interleaved": interleaved}
    if layout == "3d" or rot:
        attrs["num_heads"] = NH
    if rot:
        attrs["rotary_embedding_dim"] = rot
    check(contrib_model("RotaryEmbedding", {"x": x, "pos": pos}, inits, **attrs), tmp_path, {"x": x, "pos": pos})


def test_unsupported_contrib_operator_names_it_and_says_why(tmp_path):
    m = contrib_model("Inverse", {"x": rand(2, 3, 3, seed=1)})
    with pytest.raises(UnsupportedError, match="Inverse.*com.microsoft") as ex:
        run_aotc(m, tmp_path, {})
    assert "contrib" in ex.value.hint


def test_rotary_embedding_refuses_a_scale(tmp_path):
    """ONNX Runtime's CPU kernel ignores `scale` (checked: 2.0 gives what 1.0 gives), while the
    specification says it is used: refused rather than guessed."""
    x, pos = rand(B, S, 32, seed=1), np.zeros((B, S), np.int64)
    m = contrib_model("RotaryEmbedding", {"x": x, "pos": pos}, {"cos": rand(16, 4, seed=2), "sin": rand(16, 4, seed=3)},
                      num_heads=4, scale=2.0)
    with pytest.raises(UnsupportedError, match="scale 2"):
        run_aotc(m, tmp_path, {})
