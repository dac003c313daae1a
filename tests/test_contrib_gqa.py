"""ONNX Runtime's GroupQueryAttention (aotc/frontend/contrib.py) against its CPU kernel, at
fixed shapes and over run-time batch and sequence: prompts (padded or not), decoding steps
into the shared max-length KV buffer and into a past that grows, rotary embedding, the local
window, soft cap, packed QKV. The present buffers
are compared where ONNX Runtime defines them (each entry's first seqlens_k + 1 positions)."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import aotc
from aotc.errors import UnsupportedError
from tests.test_contrib_ops import contrib_model, rand, run_aotc

B, N, KV, H = 2, 4, 2, 16      # (ONNX Runtime's CPU kernel wants head sizes that are multiples of 16)


def _case(S, P, seqlens, total, rot=False, window=-1, packed=False, softcap=0.0, grow=False):
    feeds = {}
    if packed:
        feeds["q"] = rand(B, S, (N + 2 * KV) * H, seed=1)
        order = ["q", "", ""]
    else:
        feeds.update(q=rand(B, S, N * H, seed=1), k=rand(B, S, KV * H, seed=2), v=rand(B, S, KV * H, seed=3))
        order = ["q", "k", "v"]
    if P:
        feeds.update(pk=rand(B, KV, P, H, seed=4), pv=rand(B, KV, P, H, seed=5))
        order += ["pk", "pv"]
    else:
        order += ["", ""]
    feeds.update(sl=np.array(seqlens, np.int32), tot=np.array(total, np.int32))
    order += ["sl", "tot"]
    inits = {}
    attrs = dict(num_heads=N, kv_num_heads=KV, local_window_size=window)
    if softcap:
        attrs["softcap"] = softcap
    if rot:
        inits = {"cos": rand(32, H // 2, seed=6), "sin": rand(32, H // 2, seed=7)}
        order += ["cos", "sin"]
        attrs["do_rotary"] = 1
    m = contrib_model("GroupQueryAttention", feeds, inits, order=order, outs=["y", "pk_out", "pv_out"], **attrs)
    if grow:
        # the model says the present is past + S long (a past that grows by each step)
        del m.graph.output[1:]
        m.graph.output.extend(helper.make_tensor_value_info(n, TensorProto.FLOAT, [B, KV, P + S, H])
                              for n in ("pk_out", "pv_out"))
    return m, feeds


@pytest.mark.parametrize("name,kw", [
    ("prompt", dict(S=6, P=0, seqlens=[5, 5], total=6)),
    ("padded_prompt", dict(S=6, P=0, seqlens=[5, 3], total=6, window=2)),
    ("decode_shared_buffer", dict(S=1, P=16, seqlens=[7, 4], total=8)),
    ("decode_rotary_window_softcap", dict(S=1, P=16, seqlens=[9, 6], total=10, rot=True, window=3, softcap=3.0)),
    ("packed_prompt_rotary", dict(S=6, P=0, seqlens=[5, 5], total=6, packed=True, rot=True)),
    ("decode_growing_past", dict(S=1, P=7, seqlens=[7, 7], total=8, grow=True)),
])
def test_group_query_attention(name, kw, tmp_path):
    m, feeds = _case(**kw)
    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    got = run_aotc(m, tmp_path, feeds)
    assert [g.shape for g in got] == [w.shape for w in want]
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=2e-6)
    for i in (1, 2):
        for b, n in enumerate(kw["seqlens"]):
            np.testing.assert_allclose(got[i][b, :, :n + 1], want[i][b, :, :n + 1], rtol=1e-5, atol=1e-6)


def test_group_query_attention_refuses_smooth_softmax(tmp_path):
    m, feeds = _case(S=1, P=16, seqlens=[7, 4], total=8)
    m.graph.node[0].attribute.append(helper.make_attribute("smooth_softmax", 1))
    with pytest.raises(UnsupportedError, match="smooth_softmax"):
        run_aotc(m, tmp_path, feeds)


def _symbolic(m, names: dict) -> None:
    """The model's inputs with dims named: names[input] lists a dim_param (or None: kept) per axis."""
    for vi in m.graph.input:
        for d, p in zip(vi.type.tensor_type.shape.dim, names.get(vi.name, [])):
            if p is not None:
                d.dim_param = p


@pytest.mark.parametrize("packed,rot", [(False, False), (True, True)])
def test_group_query_attention_over_run_time_sizes(packed, rot, tmp_path):
    """One artifact over batch 1..2 and sequence 1..8 (the shared max-length buffer of 16):
    prompts of several lengths and a one-token step, each against ONNX Runtime."""
    m, _ = _case(S=6, P=16, seqlens=[5, 5], total=6, packed=packed, rot=rot)
    seq = ["batch", "seq", None]
    _symbolic(m, {"q": seq, "k": seq, "v": seq, "pk": ["batch"], "pv": ["batch"], "sl": ["batch"]})
    path = tmp_path / "m.onnx"
    onnx.save(m, path)
    art = aotc.compile(path, target="c", output_dir=tmp_path / "out", dims={"batch": (1, 2), "seq": (1, 8)})
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    for b, S, seqlens, total in ((2, 6, [5, 3], 6), (1, 8, [7], 8), (2, 1, [9, 4], 10), (1, 3, [6], 7)):
        # a prompt when S is the total, else S new tokens after seqlens + 1 - S past ones
        feeds = {"q": rand(b, S, (N + 2 * KV) * H if packed else N * H, seed=S),
                 "pk": rand(b, KV, 16, H, seed=4), "pv": rand(b, KV, 16, H, seed=5),
                 "sl": np.array(seqlens, np.int32), "tot": np.array(total, np.int32)}
        if not packed:
            feeds.update(k=rand(b, S, KV * H, seed=2), v=rand(b, S, KV * H, seed=3))
        feeds = {i.name: feeds[i.name] for i in m.graph.input}
        want = sess.run(None, feeds)
        got = art.run(feeds)
        np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=2e-6, err_msg=f"b={b} S={S}")
        for i in (1, 2):
            for e, n in enumerate(seqlens):
                np.testing.assert_allclose(got[i][e, :, :n + 1], want[i][e, :, :n + 1], rtol=1e-5, atol=1e-6)
