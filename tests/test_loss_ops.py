"""NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss against ONNX Runtime on random scores
and targets: every reduction, class weights, ignore_index (also on a negative value and on
every element), spatial dims, the optional log_prob output, negative targets (which ONNX
Runtime reads from the end of the class axis), and an out-of-range target (a run-time error,
no read outside the input)."""
import numpy as np
import pytest
from onnx import helper

from aotc.api import load
from aotc.compiler import compile_model
from aotc.errors import RunError
from tests.helpers import assert_parity, graph_model, rand


def _targets(shape, classes, seed, ignore=None, share=0.3):
    rng = np.random.default_rng(seed)
    t = rng.integers(0, classes, size=shape).astype(np.int64)
    if ignore is not None:
        t[rng.random(shape) < share] = ignore
    return t


def _model(op, x, t, w=None, n_out=1, opset=13, **attrs):
    names = ["x", "t"] + (["w"] if w is not None else [])
    outs = ["loss", "log_prob"][:n_out]
    feeds = {"x": x, "t": t, **({"w": w} if w is not None else {})}
    return graph_model([helper.make_node(op, names, outs, **attrs)], feeds, outs, opset=opset), feeds


@pytest.mark.parametrize("op", ["NegativeLogLikelihoodLoss", "SoftmaxCrossEntropyLoss"])
@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
@pytest.mark.parametrize("shape", [(5, 7), (3, 4, 6), (2, 3, 4, 5)])
def test_loss_matches_onnxruntime(op, reduction, shape, tmp_path):
    x = rand(*shape, seed=1) * 2
    if op == "NegativeLogLikelihoodLoss":
        x = x - 3.0                      # log-probability-like values
    t = _targets((shape[0],) + shape[2:], shape[1], seed=2)
    m, feeds = _model(op, x, t, reduction=reduction)
    assert_parity(m, tmp_path, feeds)


@pytest.mark.parametrize("op", ["NegativeLogLikelihoodLoss", "SoftmaxCrossEntropyLoss"])
@pytest.mark.parametrize("reduction", ["none", "mean"])
def test_weights_and_ignore_index(op, reduction, tmp_path):
    x = rand(6, 5, 3, seed=3)
    t = _targets((6, 3), 5, seed=4, ignore=2)
    w = rand(5, seed=5, low=0.2, high=2.0)
    m, feeds = _model(op, x, t, w, reduction=reduction, ignore_index=2)
    assert_parity(m, tmp_path, feeds)


def test_negative_ignore_index_and_log_prob(tmp_path):
    x = rand(4, 6, 5, seed=6) * 3
    t = _targets((4, 5), 6, seed=7, ignore=-100)
    w = rand(6, seed=8, low=0.5, high=1.5)
    m, feeds = _model("SoftmaxCrossEntropyLoss", x, t, w, n_out=2, reduction="sum", ignore_index=-100)
    assert_parity(m, tmp_path, feeds)


def test_negative_targets_read_from_the_end(tmp_path):
    x = rand(5, 4, seed=9)
    t = np.array([-1, 0, -4, 3, -2], dtype=np.int64)
    m, feeds = _model("NegativeLogLikelihoodLoss", x, t, reduction="none")
    assert_parity(m, tmp_path, feeds)


def test_int32_targets(tmp_path):
    x = rand(3, 5, 2, seed=10)
    t = _targets((3, 2), 5, seed=11).astype(np.int32)
    m, feeds = _model("SoftmaxCrossEntropyLoss", x, t, reduction="mean")
    assert_parity(m, tmp_path, feeds)


def test_every_target_ignored_gives_nan_mean(tmp_path):
    x = rand(3, 4, seed=12)
    t = np.full(3, 1, dtype=np.int64)
    m, feeds = _model("NegativeLogLikelihoodLoss", x, t, reduction="mean", ignore_index=1)
    path = tmp_path / "m.onnx"
    path.write_bytes(m.SerializeToString())
    out = load(compile_model(path, output_dir=tmp_path / "out")).run(feeds)
    loss = out["loss"] if isinstance(out, dict) else out[0]
    assert np.isnan(loss), "0 / 0: ONNX Runtime gives NaN too"


def test_target_out_of_range_fails_at_run_time(tmp_path):
    x = rand(3, 4, seed=13)
    m, feeds = _model("NegativeLogLikelihoodLoss", x, np.array([1, 4, 0], dtype=np.int64), reduction="sum")
    path = tmp_path / "m.onnx"
    path.write_bytes(m.SerializeToString())
    model = load(compile_model(path, output_dir=tmp_path / "out"))
    with pytest.raises(RunError, match="INDEX|index"):
        model.run(feeds)
    good = dict(feeds, t=np.array([1, 3, 0], dtype=np.int64))
    expected = -(x[0, 1] + x[1, 3] + x[2, 0])
    out = model.run(good)
    loss = out["loss"] if isinstance(out, dict) else out[0]
    np.testing.assert_allclose(loss, expected, rtol=1e-6)


def test_on_opencl(tmp_path):
    """The same kernel IR on the GPU schedule (PoCL): nested class reductions inside the
    reduction over targets, the log_prob output, weights and ignore_index."""
    from tests.test_opencl import _opencl_missing
    if _opencl_missing() is not None:
        pytest.skip(_opencl_missing())
    x = rand(4, 6, 5, seed=14) * 2
    t = _targets((4, 5), 6, seed=15, ignore=3)
    w = rand(6, seed=16, low=0.5, high=1.5)
    m, feeds = _model("SoftmaxCrossEntropyLoss", x, t, w, n_out=2, reduction="mean", ignore_index=3)
    assert_parity(m, tmp_path, feeds, target="opencl")
