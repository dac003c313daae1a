"""Attention: the ONNX op (opset 23-25) against the ONNX reference implementation, and the
attention pass (passes/attention.py), which rewrites MatMul -> scale -> mask -> Softmax ->
MatMul into it, against ONNX Runtime, on C with one and several threads, OpenCL (PoCL) and
the CUDA emulation. Fresh random inputs everywhere; masks hide a random part of the keys."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper
from onnx.reference import ReferenceEvaluator

from aotc.api import load
from aotc.compiler import compile_program, compile_model
from tests.helpers import NP2ONNX, assert_parity, eager_cuda_target, eager_gpu_target, eager_threads_target
from tests.test_cuda_emulated import emulated_build
from tests.test_opencl import _opencl_missing

N = helper.make_node
TARGETS = ["c", "threads", "opencl", "cuda-eager"]


def _target(kind: str, tmp_path: Path):
    """(target, build, threads) for a kind of run."""
    if kind == "threads":
        return eager_threads_target(tmp_path), None, 3
    if kind == "opencl":
        if _opencl_missing():
            pytest.skip(_opencl_missing())
        return eager_gpu_target(tmp_path), None, 0
    if kind == "cuda-eager":
        return eager_cuda_target(tmp_path), emulated_build, 0
    if kind == "cuda":
        return "cuda:sm_90", emulated_build, 0
    return "c", None, 1


def attention_model(rank=4, B=2, Hq=4, Hkv=2, Sq=5, Skv=7, D=8, Dv=6, P=0, mask=None, nonpad=False,
                    outputs=1, opset=23, seed=0, **attrs):
    """One Attention node; mask: None, 'bool' or 'float' of shape `attrs.pop('mask_shape')` (or
    (Sq, St)); outputs: how many of Y, present_key, present_value, qk_matmul_output.
    Returns (model, feeds)."""
    rng = np.random.default_rng(seed)
    St = P + Skv
    mshape = attrs.pop("mask_shape", (Sq, St))
    if rank == 4:
        shapes = {"Q": (B, Hq, Sq, D), "K": (B, Hkv, Skv, D), "V": (B, Hkv, Skv, Dv)}
    else:
        shapes = {"Q": (B, Sq, Hq * D), "K": (B, Skv, Hkv * D), "V": (B, Skv, Hkv * Dv)}
        attrs.update(q_num_heads=Hq, kv_num_heads=Hkv)
    feeds = {k: rng.standard_normal(s).astype(np.float32) for k, s in shapes.items()}
    names = ["Q", "K", "V", "", "", "", ""]
    if mask == "bool":
        feeds["mask"] = rng.random(mshape) < 0.7
        names[3] = "mask"
    elif mask == "float":
        m = rng.standard_normal(mshape).astype(np.float32)
        m[rng.random(mshape) < 0.3] = -np.inf
        feeds["mask"] = m
        names[3] = "mask"
    if P:
        feeds["past_key"] = rng.standard_normal((B, Hkv, P, D)).astype(np.float32)
        feeds["past_value"] = rng.standard_normal((B, Hkv, P, Dv)).astype(np.float32)
        names[4:6] = ["past_key", "past_value"]
    if nonpad:
        feeds["nonpad"] = rng.integers(1, Skv + 1, size=(B,)).astype(np.int64)
        names[6] = "nonpad"
    names = names[:max(k for k, n in enumerate(names) if n) + 1]
    outs = ["Y", "present_key", "present_value", "qk"][:outputs]
    node = N("Attention", names, outs, **attrs)
    g_in = [helper.make_tensor_value_info(k, NP2ONNX[v.dtype], v.shape) for k, v in feeds.items()]
    g = helper.make_graph([node], "attention", g_in, [helper.make_empty_tensor_value_info(o) for o in outs])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
    return model, feeds


def _vs_reference(model, feeds, kind, tmp_path, rtol=1e-4, atol=1e-5):
    """Compile for `kind`, run, compare every output with onnx.reference (NaN where it has NaN)."""
    target, build, threads = _target(kind, tmp_path)
    path = tmp_path / "model.onnx"
    onnx.save(model, str(path))
    out = compile_model(path, target=target, output_dir=tmp_path / "out", threads=threads, build=build,
                        shapes={k: v.shape for k, v in feeds.items()})
    m = load(out, threads=threads)
    got = m.run({k: feeds[k] for k in m.input_names})
    want = ReferenceEvaluator(model).run(None, feeds)
    for name, g, w in zip(m.output_names, got, want):
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, err_msg=f"{name} on {kind}")
    return out


CONFIGS = {
    # GQA, causal over a past (offset = past length), the present outputs
    "4d_gqa_causal_past": dict(rank=4, P=3, is_causal=1, outputs=3),
    # 3-D layout, 6 query heads on 2 key/value heads, a bool mask shorter than the keys (padded
    # with "masked"), soft cap
    "3d_bool_mask_softcap": dict(rank=3, Hq=6, mask="bool", mask_shape=(2, 1, 5, 6), softcap=2.0, scale=0.3),
    # float mask with -inf (some rows fully masked: zeros), the probabilities as 4th output
    "4d_float_mask_probs": dict(rank=4, Hkv=4, mask="float", mask_shape=(4, 5, 7), outputs=4,
                                qk_matmul_output_mode=3),
    # an external cache: valid lengths per batch entry, causal frontier from them, a window
    "3d_nonpad_window": dict(rank=3, Hq=2, Hkv=1, Sq=3, Skv=9, nonpad=True, is_causal=1,
                             left_window_size=2, opset=25),
    # scores after soft cap and bias as 4th output, rank-1 bool mask
    "4d_qk_bias": dict(rank=4, Hq=2, Hkv=2, mask="bool", mask_shape=(7,), softcap=1.5, outputs=4,
                       qk_matmul_output_mode=2),
}


@pytest.mark.parametrize("kind", TARGETS)
@pytest.mark.parametrize("config", list(CONFIGS))
def test_attention_op_matches_the_reference(config, kind, tmp_path):
    model, feeds = attention_model(**dict(CONFIGS[config]), seed=len(config))
    out = _vs_reference(model, feeds, kind, tmp_path)
    if kind == "threads":
        src = (out / "model.c").read_text()
        heads = CONFIGS[config].get("Hq", 4)
        per_thread = "scores = aotc_args->scores + (int64_t)aotc_thread * " in src
        if heads % 3 == 0:
            # the heads divide among the 3 threads: they run on the pool, each thread on its
            # own copy of the scores scratch
            assert per_thread
        else:
            # they do not (schedule/cpu.py UNEVEN_ITERATIONS): one after the other, each
            # product split among the threads where it has the row or column panels to split
            assert not per_thread


def _shared_arrays(model, feeds, tmp_path, kind):
    """The model compiled for `kind` (_target's) at the feeds' shapes, loaded; and {output: the
    input whose array it may be, or None} from its manifest."""
    target, build, threads = _target(kind, tmp_path)
    path = tmp_path / "model.onnx"
    onnx.save(model, str(path))
    out = compile_model(path, target=target, output_dir=tmp_path / "out", threads=threads, build=build,
                        shapes={k: v.shape for k, v in feeds.items()})
    m = load(out, threads=threads)
    return m, {p["name"]: p.get("in_place_of") for p in m.manifest["outputs"]}


@pytest.mark.parametrize("rank,kind", [(3, "threads"), (4, "threads"), (4, "opencl"), (4, "cuda")])
def test_past_and_present_may_be_one_array(rank, kind, tmp_path):
    """A past key / value that is a graph input only the Attention reads, with its present a
    graph output, may share the present's array (the header's output_in_place): the array has
    the present's shape, the past's positions at the start of each (batch, head) row, and the
    run writes the new ones after them (the rest of it NaN here: nothing reads them before).
    Y and the presents are the reference's, as with two arrays (CONFIGS' past case).

    On the GPU targets (PoCL, the CUDA emulation) the host copies rows to and from the device's
    array laid out the same way (codegen/host.py CacheCopies); with keep_caches the array stays
    on the device: a second run with the host's array all NaN still gives the reference's Y (it
    read the device's past), the array is written by none of the runs, and keep_caches(False)
    writes the reference's presents into it."""
    model, feeds = attention_model(rank=rank, B=2, Hq=6, Hkv=2, Sq=3, Skv=3, P=4, is_causal=1, outputs=3, seed=rank)
    m, shared = _shared_arrays(model, feeds, tmp_path, kind)
    assert shared == {"Y": None, "present_key": "past_key", "present_value": "past_value"}
    want = ReferenceEvaluator(model).run(None, feeds)
    full = {}

    def run():
        return m.run({**feeds, "past_key": full["present_key"][:, :, :4], "past_value": full["present_value"][:, :, :4]},
                     into=full)
    for past, present, w in (("past_key", "present_key", want[1]), ("past_value", "present_value", want[2])):
        full[present] = np.full(w.shape, np.nan, np.float32)
        full[present][:, :, :4] = feeds[past]
    got = run()
    for name, g, w in zip(m.output_names, got, want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5, err_msg=name)
    assert got[1] is full["present_key"] and got[2] is full["present_value"]
    if kind == "threads":
        # a past inside its present's array but not at its start: copied first (the run writes
        # where it would read)
        inside = full["present_key"].reshape(-1)[7:7 + feeds["past_key"].size].reshape(feeds["past_key"].shape)
        inside[...] = feeds["past_key"]
        got = m.run({**feeds, "past_key": inside}, into={"present_key": full["present_key"]})
        for name, g, w in zip(m.output_names, got, want):
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5, err_msg=name)
        return
    for past, present in (("past_key", "present_key"), ("past_value", "present_value")):
        full[present][...] = np.nan
        full[present][:, :, :4] = feeds[past]
    m.keep_caches(True)
    run()                                  # (the arrays copied in)
    for a in full.values():
        a[...] = np.nan
    np.testing.assert_allclose(run()[0], want[0], rtol=1e-4, atol=1e-5)
    assert all(np.isnan(a).all() for a in full.values())
    m.keep_caches(False)
    np.testing.assert_allclose(full["present_key"], want[1], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(full["present_value"], want[2], rtol=1e-4, atol=1e-5)


def test_a_present_that_is_read_shares_no_array(tmp_path):
    """A present key that another node reads too is not offered as its past's array (that
    reader would take the shared array's longer rows as dense ones); the present value is."""
    model, feeds = attention_model(rank=4, B=1, Hq=4, Hkv=2, Sq=2, Skv=2, P=3, outputs=3, seed=3)
    model.graph.node.append(N("ReduceSum", ["present_key"], ["total"], keepdims=0))
    model.graph.output.append(helper.make_empty_tensor_value_info("total"))
    m, shared = _shared_arrays(model, feeds, tmp_path, "c")
    assert shared == {"Y": None, "present_key": None, "present_value": "past_value", "total": None}
    for name, g, w in zip(m.output_names, m.run(feeds), ReferenceEvaluator(model).run(None, feeds)):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4, err_msg=name)


@pytest.mark.parametrize("causal", [0, 1])
def test_a_concatenated_cache_joins_its_attention(causal, tmp_path):
    """present = Concat(past, new) along the sequence read by an Attention node becomes that
    node's past and present (passes/attention.py caches_into_attention), its meaning kept: Y and
    the presents are the reference's. A causal node stays as it is (its frontier would move by
    the past's length)."""
    rng = np.random.default_rng(7 + causal)
    feeds = {"Q": rng.standard_normal((1, 4, 3, 8)), "k": rng.standard_normal((1, 2, 3, 8)),
             "v": rng.standard_normal((1, 2, 3, 8)), "past_k": rng.standard_normal((1, 2, 5, 8)),
             "past_v": rng.standard_normal((1, 2, 5, 8))}
    feeds = {k: v.astype(np.float32) for k, v in feeds.items()}
    nodes = [N("Concat", ["past_k", "k"], ["present_k"], axis=2), N("Concat", ["past_v", "v"], ["present_v"], axis=-2),
             N("Attention", ["Q", "present_k", "present_v"], ["Y"], is_causal=causal)]
    g_in = [helper.make_tensor_value_info(k, NP2ONNX[v.dtype], v.shape) for k, v in feeds.items()]
    outs = [helper.make_empty_tensor_value_info(o) for o in ("Y", "present_k", "present_v")]
    model = helper.make_model(helper.make_graph(nodes, "cache", g_in, outs), opset_imports=[helper.make_opsetid("", 23)])
    model.ir_version = 10
    path = tmp_path / "model.onnx"
    onnx.save(model, str(path))
    graph = compile_program(path, target="c").graph
    assert [len(n.inputs) for n in graph.nodes if n.op_type == "Attention"] == [3 if causal else 6]
    out = compile_model(path, target="c", output_dir=tmp_path / "out", threads=1)
    got = load(out, threads=1).run(feeds)
    for name, g, w in zip(("Y", "present_k", "present_v"), got, ReferenceEvaluator(model).run(None, feeds)):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5, err_msg=name)


def test_fully_masked_rows_give_zeros(tmp_path):
    """The spec's rule (zeros, not NaN) where a bool mask hides every key of a row, decided on
    the mask: even where the masked scores are NaN (a NaN in the query row)."""
    model, feeds = attention_model(rank=4, B=1, Hq=2, Hkv=2, Sq=3, Skv=4, mask="bool", mask_shape=(3, 4))
    feeds["mask"][1] = False
    feeds["Q"][0, 0, 1, 0] = np.nan
    _vs_reference(model, feeds, "c", tmp_path)
    y = load(tmp_path / "out").run(feeds)[0]
    assert np.all(y[:, :, 1] == 0) and np.all(np.isfinite(y))


def test_attention_refuses_what_it_does_not_compute(tmp_path):
    from aotc.errors import AotcError
    model, feeds = attention_model(rank=4, softmax_precision=10, opset=24)
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    with pytest.raises(AotcError, match="softmax_precision 10"):
        compile_model(path, target="c", output_dir=tmp_path / "out")
    model, feeds = attention_model(rank=3, B=2, Hq=3, Hkv=2, opset=23)      # 3 query heads, 2 kv heads
    onnx.save(model, str(path))
    with pytest.raises(AotcError, match="not a multiple"):
        compile_model(path, target="c", output_dir=tmp_path / "out")


# ----------------------------------------------------------------------------- the pass
def exported_attention(B=2, S=6, H=3, D=4, split=True, merge=True, scale_op="Div", mask="add", order="scale_first",
                       axis=-1, mask_shape=None, seed=0):
    """Attention written node by node as exporters do: q, k, v (batch, seq, hidden) split into
    heads by Reshape + Transpose (split=True; else 4-D graph inputs), scores scaled by a scalar
    (Div or Mul), masked (an Add of a float mask, a Where of a bool mask, or none), Softmax,
    MatMul by V, heads merged back (merge=True). Returns (model, feeds)."""
    rng = np.random.default_rng(seed)
    hidden = H * D
    nodes, feeds, inits = [], {}, {}
    if split:
        for t in "qkv":
            feeds[t] = rng.standard_normal((B, S, hidden)).astype(np.float32)
        inits["split_shape"] = np.array([B, S, H, D], np.int64)
        for t, perm in (("q", [0, 2, 1, 3]), ("k", [0, 2, 3, 1]), ("v", [0, 2, 1, 3])):
            nodes += [N("Reshape", [t, "split_shape"], [f"{t}4"]), N("Transpose", [f"{t}4"], [f"{t}h"], perm=perm)]
    else:
        for t in "qkv":
            feeds[f"{t}h"] = rng.standard_normal((B, H, S, D)).astype(np.float32)
        nodes.append(N("Transpose", ["kh"], ["kt"], perm=[0, 1, 3, 2]))
    nodes.append(N("MatMul", ["qh", "kh" if split else "kt"], ["s0"]))
    inits["c"] = np.array(np.sqrt(D) if scale_op == "Div" else 1 / np.sqrt(D), np.float32)
    scale = N(scale_op, ["x_in", "c"], ["x_out"])
    mshape = mask_shape or (B, 1, 1, S)
    if mask == "add":
        m = np.where(rng.random(mshape) < 0.3, -1e9, 0.0).astype(np.float32)
        feeds["mask"] = m
        masking = N("Add", ["m_in", "mask"], ["m_out"])
    elif mask == "where":
        feeds["mask"] = rng.random(mshape) < 0.7
        inits["fill"] = np.array(-1e4, np.float32)
        masking = N("Where", ["mask", "m_in", "fill"], ["m_out"])
    steps = [scale] + ([masking] if mask else [])
    if order == "mask_first":
        steps = steps[::-1]
    cur = "s0"
    for k, st in enumerate(steps):
        ins = [cur if i in ("x_in", "m_in") else i for i in st.input]
        nodes.append(N(st.op_type, ins, [f"s{k + 1}"]))
        cur = f"s{k + 1}"
    nodes += [N("Softmax", [cur], ["p"], axis=axis), N("MatMul", ["p", "vh"], ["ctx"])]
    outs = ["ctx"]
    if merge:
        inits["merge_shape"] = np.array([B, S, hidden], np.int64)
        nodes += [N("Transpose", ["ctx"], ["ctx_t"], perm=[0, 2, 1, 3]), N("Reshape", ["ctx_t", "merge_shape"], ["y"])]
        outs = ["y"]
    from tests.helpers import graph_model
    return graph_model(nodes, feeds, outs, inits), feeds


def _kernels(model, tmp_path, target="c"):
    path = tmp_path / "pattern.onnx"
    onnx.save(model, str(path))
    c = compile_program(path, target=target, threads=1)
    return [st.group.label for st in c.steps]


@pytest.mark.parametrize("form", ["split_div_add", "split_mul_where", "4d_mul_add", "4d_div_none", "split_no_merge"])
def test_exported_attention_becomes_one_kernel(form, tmp_path):
    split = form.startswith("split")
    kw = dict(split=split, merge=form != "split_no_merge", scale_op="Mul" if "_mul_" in form else "Div",
              mask={"add": "add", "where": "where", "none": None, "merge": "add"}[form.rsplit("_", 1)[1]])
    model, feeds = exported_attention(**kw, seed=len(form))
    labels = _kernels(model, tmp_path)
    assert "Attention" in labels and "Softmax" not in labels and "MatMul" not in labels, labels
    if split and kw["merge"]:
        assert labels == ["Attention"], labels                     # the head transposes are gone too
    for kind in ("c", "threads", "cuda-eager"):
        (tmp_path / kind).mkdir()
        target, build, threads = _target(kind, tmp_path / kind)
        assert_parity(model, tmp_path / kind, feeds, target=target, build=build, threads=threads)


@pytest.mark.parametrize("form", ["mask_first", "softmax_axis_2", "mask_broadcast_keys"])
def test_other_chains_stay_as_they_are(form, tmp_path):
    """A scale after the mask (it would scale the mask), a softmax over another axis, a mask
    broadcast along the keys: no Attention node, same results."""
    kw = {"mask_first": dict(order="mask_first"), "softmax_axis_2": dict(axis=2),
          "mask_broadcast_keys": dict(mask_shape=(2, 1, 6, 1))}[form]
    model, feeds = exported_attention(**kw, seed=3)
    assert "Attention" not in _kernels(model, tmp_path)
    assert_parity(model, tmp_path, feeds, target="c")


def test_rewrite_keeps_softmax_of_a_fully_masked_row(tmp_path):
    """Softmax of a row that an Add mask makes -inf everywhere is NaN (the Softmax op's
    meaning); the rewritten node keeps that, not the Attention op's zeros."""
    model, feeds = exported_attention(B=1, S=4, mask="add", mask_shape=(1, 1, 4, 4), seed=5)
    feeds["mask"] = np.zeros((1, 1, 4, 4), np.float32)
    feeds["mask"][0, 0, 2] = -np.inf
    assert "Attention" in _kernels(model, tmp_path)
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    got = load(compile_model(path, target="c", output_dir=tmp_path / "out")).run(feeds)[0]
    want = ReferenceEvaluator(model).run(None, feeds)[0]
    assert np.isnan(want).any()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)     # NaN where the reference has NaN


def test_zoo_transformers_attention_is_fused(tmp_path):
    """BERT, GPT-2 and ViT (small): one Attention kernel per layer and no Softmax or head
    Transpose left (ViT keeps the patch embedding's)."""
    from models.zoo import ZOO
    for name, layers in (("bert", 2), ("gpt2", 2), ("vit", 2)):
        e = ZOO[name]
        path = tmp_path / f"{name}.onnx"
        onnx.save(e.build("small"), str(path))
        c = compile_program(path, target="c", shapes=e.shapes_for("small"), threads=1)
        labels = [st.group.label for st in c.steps]
        assert labels.count("Attention") == layers and "Softmax" not in labels, (name, labels)
        assert labels.count("Transpose") == (1 if name == "vit" else 0), (name, labels)


# ----------------------------------------------------------------------------- FlexAttention
# ai.onnx.preview's FlexAttention has no definition in aotc: the frontend replaces it by the
# function body ONNX builds for each node (frontend/schema_functions.py), which the attention
# pass then fuses. ONNX Runtime has no kernel for it; numpy says what the result is.

def _modifier(name: str, nodes, inits=()):
    return helper.make_graph(nodes, name, [helper.make_tensor_value_info("s", onnx.TensorProto.FLOAT, None)],
                             [helper.make_tensor_value_info("t", onnx.TensorProto.FLOAT, None)],
                             initializer=[onnx.numpy_helper.from_array(a, k) for k, a in inits])


def _causal_mod(L, S):
    bias = np.where(np.arange(S)[None, :] > np.arange(L)[:, None], -np.inf, 0).astype(np.float32)
    return _modifier("causal", [N("Add", ["s", "bias"], ["t"])], [("bias", bias)]), bias


def _softcap_mod(cap):
    c = np.float32(cap)
    return _modifier("softcap", [N("Div", ["s", "cap"], ["u"]), N("Tanh", ["u"], ["v"]), N("Mul", ["v", "cap"], ["t"])],
                     [("cap", c)]), lambda s: c * np.tanh(s / c)


def _flex_numpy(q, k, v, score_mod=lambda s: s, prob_mod=lambda p: p, scale=None):
    rep = q.shape[1] // k.shape[1]
    k, v = np.repeat(k, rep, axis=1).astype(np.float64), np.repeat(v, rep, axis=1).astype(np.float64)
    s = q.astype(np.float64) @ k.transpose(0, 1, 3, 2) * (scale if scale is not None else 1 / np.sqrt(q.shape[-1]))
    s = score_mod(s)
    p = np.exp(s - s.max(-1, keepdims=True))
    return prob_mod(p / p.sum(-1, keepdims=True)) @ v


def _flex_model(nodes, q, k, v, outputs):
    g = helper.make_graph(nodes, "flex", [helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, a.shape)
                                           for n, a in (("Q", q), ("K", k), ("V", v))],
                          [helper.make_tensor_value_info(o, onnx.TensorProto.FLOAT, None) for o in outputs])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 26), helper.make_opsetid("ai.onnx.preview", 1)])


@pytest.mark.parametrize("kind", ["c", "threads", "opencl"])
def test_flex_attention_gqa_with_score_and_prob_modifiers(kind, tmp_path):
    B, Hq, Hkv, L, S, D, Dv = 2, 4, 2, 5, 7, 8, 6
    rng = np.random.default_rng(11)
    q, k, v = (rng.standard_normal(s).astype(np.float32) for s in ((B, Hq, L, D), (B, Hkv, S, D), (B, Hkv, S, Dv)))
    causal, bias = _causal_mod(L, S)
    twice = _modifier("twice", [N("Add", ["s", "s"], ["t"])])
    node = N("FlexAttention", ["Q", "K", "V"], ["Y"], domain="ai.onnx.preview", score_mod=causal, prob_mod=twice)
    model = _flex_model([node], q, k, v, ["Y"])
    target, build, threads = _target(kind, tmp_path)
    onnx.save(model, str(tmp_path / "flex.onnx"))
    out = compile_model(tmp_path / "flex.onnx", target=target, output_dir=tmp_path / "out", threads=threads, build=build)
    got = load(out, threads=threads).run({"Q": q, "K": k, "V": v})[0]
    want = _flex_numpy(q, k, v, score_mod=lambda s: s + bias, prob_mod=lambda p: 2 * p)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_two_flex_attentions_keep_their_own_modifiers(tmp_path):
    """Each node's body is built for its own attributes: a soft cap in one, a scale and a
    causal mask in the other (a shared body would give both the same modifier)."""
    B, H, L, D = 1, 2, 6, 4
    rng = np.random.default_rng(12)
    q, k, v = (3 * rng.standard_normal((B, H, L, D)).astype(np.float32) for _ in range(3))
    softcap, cap_fn = _softcap_mod(1.5)
    causal, bias = _causal_mod(L, L)
    nodes = [N("FlexAttention", ["Q", "K", "V"], ["Y1"], domain="ai.onnx.preview", score_mod=softcap),
             N("FlexAttention", ["Q", "K", "V"], ["Y2"], domain="ai.onnx.preview", score_mod=causal, scale=0.7)]
    model = _flex_model(nodes, q, k, v, ["Y1", "Y2"])
    onnx.save(model, str(tmp_path / "flex2.onnx"))
    assert "Attention" in _kernels(model, tmp_path)
    m = load(compile_model(tmp_path / "flex2.onnx", target="c", output_dir=tmp_path / "out"))
    y1, y2 = m.run({"Q": q, "K": k, "V": v})
    np.testing.assert_allclose(y1, _flex_numpy(q, k, v, score_mod=cap_fn), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(y2, _flex_numpy(q, k, v, score_mod=lambda s: s + bias, scale=0.7), rtol=1e-4, atol=1e-5)


def test_aotc_check_runs_flex_attention_against_the_onnx_reference(tmp_path):
    from aotc.check.runner import reference_run
    B, H, L, D = 1, 2, 3, 4
    rng = np.random.default_rng(13)
    q, k, v = (rng.standard_normal((B, H, L, D)).astype(np.float32) for _ in range(3))
    model = _flex_model([N("FlexAttention", ["Q", "K", "V"], ["Y"], domain="ai.onnx.preview")], q, k, v, ["Y"])
    onnx.save(model, str(tmp_path / "flex.onnx"))
    outs, source = reference_run(tmp_path / "flex.onnx", {"Q": q, "K": k, "V": v})
    assert source.startswith("the ONNX reference implementation") and "FlexAttention" in source
    np.testing.assert_allclose(outs[0], _flex_numpy(q, k, v), rtol=1e-5, atol=1e-6)
