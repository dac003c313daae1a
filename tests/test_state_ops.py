"""TensorScatter and CausalConvWithState against ONNX Runtime (and numpy) on random inputs;
TensorScatter's run-time index checks; both on OpenCL."""
import numpy as np
import onnx
import pytest
from onnx import helper

from aotc.api import load
from aotc.compiler import compile_model
from aotc.errors import RunError, ShapeError
from tests.helpers import assert_parity, eager_gpu_target, graph_model, rand
from tests.test_embed_c import ort_run


def _scatter(past, upd, widx, **attrs):
    feeds = {"p": past, "u": upd}
    names = ["p", "u"]
    if widx is not None:
        feeds["w"] = widx
        names.append("w")
    return graph_model([helper.make_node("TensorScatter", names, ["y"], **attrs)], feeds, ["y"], opset=24), feeds


@pytest.mark.parametrize("mode", ["linear", "circular"])
@pytest.mark.parametrize("past_shape, seq, axis, widx", [
    ((2, 3, 8, 4), 3, None, [1, 5]),          # the default axis, -2
    ((2, 3, 8, 4), 1, 2, [0, 7]),             # one decode step, at the cache's first and last slot
    ((3, 6, 5), 2, 1, [4, 0, 2]),
    ((2, 4, 3, 6), 6, -1, [0, 0]),            # the whole cache rewritten
    ((2, 3, 8, 4), 2, -2, None),              # no write_indices: from 0
])
def test_tensor_scatter(mode, past_shape, seq, axis, widx, tmp_path):
    rank = len(past_shape)
    ax = (axis if axis is not None else -2) % rank
    if mode == "linear" and widx is not None:       # keep the window inside the cache
        widx = [min(w, past_shape[ax] - seq) for w in widx]
    upd_shape = tuple(seq if k == ax else n for k, n in enumerate(past_shape))
    attrs = {"mode": mode} | ({"axis": axis} if axis is not None else {})
    w = np.array(widx, np.int64) if widx is not None else None
    m, feeds = _scatter(rand(*past_shape, seed=1), rand(*upd_shape, seed=2), w, **attrs)
    assert_parity(m, tmp_path, feeds)


@pytest.mark.parametrize("target", ["c", "native"])
@pytest.mark.parametrize("mode, widx", [("linear", [1, 5]), ("circular", [6, 3])])
def test_tensor_scatter_updates_a_cache_in_place(target, mode, widx, tmp_path):
    """A cache the caller passes as the input and as the output (the manifest says the output
    may be the input's array): the run writes only the update's positions into it, and the
    result is ONNX Runtime's; then the same with two arrays."""
    past, upd = rand(2, 3, 8, 4, seed=5), rand(2, 3, 3, 4, seed=6)
    m, feeds = _scatter(past, upd, np.array(widx, np.int64), mode=mode)
    path = tmp_path / "m.onnx"
    onnx.save(m, str(path))
    art = load(compile_model(path, target=target, output_dir=tmp_path / "out"))
    assert [o.get("in_place_of") for o in art.manifest["outputs"]] == ["p"]
    want = ort_run(path, feeds)[0]
    cache = past.copy()
    (got,) = art.run(feeds | {"p": cache}, into={"y": cache})
    assert got is cache
    np.testing.assert_array_equal(cache, want)
    np.testing.assert_array_equal(art.run(feeds)[0], want)


def test_tensor_scatter_circular_wraps_around(tmp_path):
    """The window from index 6 of a cache of 8 wraps to slots 6, 7, 0; an index of 9 starts at 1."""
    past, upd = rand(2, 8, 3, seed=3), rand(2, 3, 3, seed=4)
    m, feeds = _scatter(past, upd, np.array([6, 9], np.int64), mode="circular", axis=1)
    path = tmp_path / "m.onnx"
    onnx.save(m, str(path))
    y = load(compile_model(path, output_dir=tmp_path / "out")).run(feeds)[0]
    want = past.copy()
    for b, start in enumerate([6, 9]):
        for s in range(3):
            want[b, (start + s) % 8] = upd[b, s]
    np.testing.assert_array_equal(y, want)


@pytest.mark.parametrize("mode, widx", [("linear", [2, 6]), ("linear", [-1, 0]), ("circular", [0, -3])])
def test_tensor_scatter_bad_write_index_fails_the_run(mode, widx, tmp_path):
    m, feeds = _scatter(rand(2, 8, 3, seed=5), rand(2, 3, 3, seed=6), np.array(widx, np.int64), mode=mode, axis=1)
    path = tmp_path / "m.onnx"
    onnx.save(m, str(path))
    art = load(compile_model(path, output_dir=tmp_path / "out"))
    with pytest.raises(RunError, match="INDEX|index"):
        art.run(feeds)


@pytest.mark.parametrize("upd_shape, axis, msg", [((2, 9, 3), 1, "do not fit"), ((2, 3, 4), 1, "every dim but"),
                                                   ((2, 8, 3), 0, "after the batch")])
def test_tensor_scatter_shape_errors(upd_shape, axis, msg, tmp_path):
    m, _ = _scatter(rand(2, 8, 3, seed=7), rand(*upd_shape, seed=8), None, axis=axis)
    path = tmp_path / "m.onnx"
    onnx.save(m, str(path))
    with pytest.raises(ShapeError, match=msg):
        compile_model(path, output_dir=tmp_path / "out")


# ----------------------------------------------------------------------------- CausalConvWithState
def _causal(n, c, length, k, bias=True, past=True, activation=None, seed=10):
    feeds = {"x": rand(n, c, length, seed=seed), "w": rand(c, 1, k, seed=seed + 1)}
    names = ["x", "w"]
    if bias:
        feeds["b"] = rand(c, seed=seed + 2)
    names.append("b" if bias else "")
    if past:
        feeds["s"] = rand(n, c, k - 1, seed=seed + 3)
        names.append("s")
    while names[-1] == "":
        names.pop()
    attrs = {"activation": activation} if activation else {}
    node = helper.make_node("CausalConvWithState", names, ["y", "state"], **attrs)
    return graph_model([node], feeds, ["y", "state"], opset=27), feeds


def _causal_numpy(feeds, k, activation):
    x = feeds["x"].astype(np.float64)
    n, c, length = x.shape
    past = feeds["s"].astype(np.float64) if "s" in feeds else np.zeros((n, c, k - 1))
    xp = np.concatenate([past, x], axis=2)
    w = feeds["w"].astype(np.float64)[:, 0, :]
    y = np.stack([(xp[:, :, t:t + k] * w).sum(-1) for t in range(length)], axis=2)
    if "b" in feeds:
        y += feeds["b"][None, :, None]
    if activation in ("silu", "swish"):
        y = y / (1 + np.exp(-y))
    return y, xp[:, :, xp.shape[2] - (k - 1):]


@pytest.mark.parametrize("n, c, length, k, bias, past, activation", [
    (2, 4, 10, 4, True, True, None),
    (1, 8, 1, 4, True, True, "silu"),             # a decode step: the state holds 2 past values and the new one
    (2, 3, 2, 5, False, True, "swish"),           # fewer new positions than the state holds
    (2, 3, 7, 3, True, False, "none"),            # no past state: zeros
    (1, 5, 6, 1, False, False, None),             # k = 1: no state at all
])
def test_causal_conv_with_state(n, c, length, k, bias, past, activation, tmp_path):
    m, feeds = _causal(n, c, length, k, bias, past, activation)
    assert_parity(m, tmp_path, feeds)
    path = tmp_path / "m.onnx"
    onnx.save(m, str(path))
    y, state = load(compile_model(path, output_dir=tmp_path / "np")).run(feeds)
    want_y, want_state = _causal_numpy(feeds, k, activation)
    np.testing.assert_allclose(y, want_y, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(state, want_state.astype(np.float32))


def test_causal_conv_steps_chain_like_one_long_run(tmp_path):
    """Three decode steps, each fed the state the last one returned, give the outputs one
    prefill over the three positions gives."""
    n, c, k = 2, 3, 4
    m1, f1 = _causal(n, c, 1, k, seed=20)
    m3, _ = _causal(n, c, 3, k, seed=20)
    for m, name in ((m1, "one"), (m3, "three")):
        onnx.save(m, str(tmp_path / f"{name}.onnx"))
    step = load(compile_model(tmp_path / "one.onnx", output_dir=tmp_path / "o1"))
    whole = load(compile_model(tmp_path / "three.onnx", output_dir=tmp_path / "o3"))
    xs = rand(n, c, 3, seed=21)
    state, ys = f1["s"], []
    for t in range(3):
        y, state = step.run({**f1, "x": xs[:, :, t:t + 1], "s": state})
        ys.append(y)
    y3, state3 = whole.run({**f1, "x": xs, "s": f1["s"]})
    np.testing.assert_allclose(np.concatenate(ys, axis=2), y3, rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(state, state3)


def test_causal_conv_bad_weight_is_a_shape_error(tmp_path):
    feeds = {"x": rand(1, 4, 5, seed=1), "w": rand(4, 2, 3, seed=2)}
    m = graph_model([helper.make_node("CausalConvWithState", ["x", "w"], ["y", "s"])], feeds, ["y", "s"], opset=27)
    path = tmp_path / "m.onnx"
    onnx.save(m, str(path))
    with pytest.raises(ShapeError, match=r"weight \(4, 2, 3\) must be \(channels, 1, k\)"):
        compile_model(path, output_dir=tmp_path / "out")


@pytest.mark.parametrize("kind", ["opencl", "eager"])
def test_state_ops_on_opencl(kind, tmp_path):
    from tests.test_opencl import _opencl_missing
    if _opencl_missing():
        pytest.skip(_opencl_missing())
    target = "opencl" if kind == "opencl" else eager_gpu_target(tmp_path)
    for d in ("conv", "scatter"):
        (tmp_path / d).mkdir()
    m, feeds = _causal(2, 4, 5, 3, activation="silu")
    assert_parity(m, tmp_path / "conv", feeds, target=target)
    m, feeds = _scatter(rand(2, 3, 8, 4, seed=1), rand(2, 3, 3, 4, seed=2), np.array([6, 1], np.int64),
                        mode="circular")
    assert_parity(m, tmp_path / "scatter", feeds, target=target)


# ----------------------------------------------------------------------------- LinearAttention
def _linear_attention(rule, n=2, t=5, hq=4, hkv=2, dk=8, dv=6, past=True, decay_per_dim=False, beta_heads=None,
                      scale=None, seed=30):
    rng = np.random.default_rng(seed)
    q = rand(n, t, hq * dk, seed=seed)
    k = rand(n, t, hkv * dk, seed=seed + 1)
    if rule in ("delta", "gated_delta"):          # the delta rules expect L2-normalized keys
        k4 = k.reshape(n, t, hkv, dk)
        k = (k4 / np.linalg.norm(k4, axis=-1, keepdims=True)).reshape(n, t, hkv * dk).astype(np.float32)
    feeds = {"q": q, "k": k, "v": rand(n, t, hkv * dv, seed=seed + 2)}
    names = ["q", "k", "v", ""]
    if past:
        feeds["s"] = rand(n, hkv, dk, dv, seed=seed + 3) * 0.5
        names[3] = "s"
    if rule in ("gated", "gated_delta"):
        feeds["g"] = -rng.uniform(0.01, 0.5, size=(n, t, hkv * dk if decay_per_dim else hkv)).astype(np.float32)
        names.append("g")
    if rule in ("delta", "gated_delta"):
        if len(names) == 4:
            names.append("")
        feeds["beta"] = rng.uniform(0.1, 0.9, size=(n, t, beta_heads or hkv)).astype(np.float32)
        names.append("beta")
    while names[-1] == "":
        names.pop()
    attrs = {"update_rule": rule, "q_num_heads": hq, "kv_num_heads": hkv} | ({"scale": scale} if scale else {})
    node = helper.make_node("LinearAttention", names, ["o", "state"], **attrs)
    return graph_model([node], feeds, ["o", "state"], opset=27), feeds


@pytest.mark.parametrize("rule, kw", [
    ("linear", {}),
    ("linear", {"past": False, "hq": 2, "scale": 0.3}),
    ("gated", {"decay_per_dim": True}),
    ("gated", {"hq": 2, "hkv": 2}),                       # one decay per head
    ("delta", {"beta_heads": 1}),                          # one beta for all heads
    ("gated_delta", {}),
    ("gated_delta", {"t": 1, "hq": 6, "hkv": 2, "decay_per_dim": True}),   # a decode step, groups of 3
    ("gated_delta", {"past": False, "t": 9, "dk": 4, "dv": 16}),
])
def test_linear_attention(rule, kw, tmp_path):
    m, feeds = _linear_attention(rule, **kw)
    assert_parity(m, tmp_path, feeds, rtol=1e-4, atol=1e-5)


def test_linear_attention_decode_steps_chain_like_prefill(tmp_path):
    """Feeding each step the state the last one returned gives the prefill's outputs."""
    m1, f1 = _linear_attention("gated_delta", t=1, seed=40)
    m4, f4 = _linear_attention("gated_delta", t=4, seed=40)
    onnx.save(m1, str(tmp_path / "one.onnx"))
    onnx.save(m4, str(tmp_path / "four.onnx"))
    step = load(compile_model(tmp_path / "one.onnx", output_dir=tmp_path / "o1"))
    whole = load(compile_model(tmp_path / "four.onnx", output_dir=tmp_path / "o4"))
    o4, s4 = whole.run(f4)
    state, outs = f4["s"], []
    for i in range(4):
        o, state = step.run({k: (v if k == "s" else v[:, i:i + 1]) for k, v in {**f4, "s": state}.items()})
        outs.append(o)
    np.testing.assert_allclose(np.concatenate(outs, axis=1), o4, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(state, s4, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("change, msg", [
    ({"hq": 3, "hkv": 2}, "positive multiple"),
])
def test_linear_attention_shape_errors(change, msg, tmp_path):
    m, _ = _linear_attention("linear", **change)
    path = tmp_path / "m.onnx"
    onnx.save(m, str(path))
    with pytest.raises(ShapeError, match=msg):
        compile_model(path, output_dir=tmp_path / "out")


@pytest.mark.parametrize("kind", ["opencl", "eager"])
def test_linear_attention_on_opencl(kind, tmp_path):
    from tests.test_opencl import _opencl_missing
    if _opencl_missing():
        pytest.skip(_opencl_missing())
    target = "opencl" if kind == "opencl" else eager_gpu_target(tmp_path)
    m, feeds = _linear_attention("gated_delta", decay_per_dim=True)
    assert_parity(m, tmp_path, feeds, target=target)
