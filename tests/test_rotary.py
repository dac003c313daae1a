"""RotaryEmbedding (opset 23) against ONNX Runtime on random inputs and caches: 3-D and 4-D
inputs, halves and interleaved pairs, a partial rotary dim, with and without position_ids
(including negative positions, read from the end), and an out-of-range position (a run-time
error, no read outside the caches)."""
import numpy as np
import pytest
from onnx import helper

from aotc.api import load
from aotc.compiler import compile_model
from aotc.errors import RunError
from tests.helpers import assert_parity, graph_model, rand


def _model(x, cos, sin, pos=None, **attrs):
    feeds = {"x": x, "cos": cos, "sin": sin, **({"pos": pos} if pos is not None else {})}
    node = helper.make_node("RotaryEmbedding", list(feeds), ["y"], **attrs)
    return graph_model([node], feeds, ["y"], opset=23), feeds


@pytest.mark.parametrize("interleaved", [0, 1])
@pytest.mark.parametrize("rank", [3, 4])
@pytest.mark.parametrize("rot", [0, 4])
def test_with_position_ids(interleaved, rank, rot, tmp_path):
    batch, heads, seq, head, max_pos = 2, 3, 5, 8, 11
    x = rand(batch, heads, seq, head, seed=1) if rank == 4 else rand(batch, seq, heads * head, seed=1)
    half = (rot or head) // 2
    cos, sin = rand(max_pos, half, seed=2), rand(max_pos, half, seed=3)
    pos = np.random.default_rng(4).integers(0, max_pos, size=(batch, seq)).astype(np.int64)
    attrs = {"interleaved": interleaved, "rotary_embedding_dim": rot}
    if rank == 3:
        attrs["num_heads"] = heads
    m, feeds = _model(x, cos, sin, pos, **attrs)
    assert_parity(m, tmp_path, feeds)


@pytest.mark.parametrize("interleaved", [0, 1])
def test_caches_per_token(interleaved, tmp_path):
    batch, heads, seq, head = 2, 2, 4, 6
    x = rand(batch, heads, seq, head, seed=5)
    cos, sin = rand(batch, seq, head // 2, seed=6), rand(batch, seq, head // 2, seed=7)
    m, feeds = _model(x, cos, sin, interleaved=interleaved)
    assert_parity(m, tmp_path, feeds)


def _compiled(tmp_path, m):
    path = tmp_path / "m.onnx"
    path.write_bytes(m.SerializeToString())
    return load(compile_model(path, output_dir=tmp_path / "out"))


def test_negative_positions_and_out_of_range(tmp_path):
    x = rand(1, 2, 3, 4, seed=8)
    cos, sin = rand(6, 2, seed=9), rand(6, 2, seed=10)
    m, feeds = _model(x, cos, sin, np.array([[0, -1, 5]], dtype=np.int64))
    model = _compiled(tmp_path, m)
    out = model.run(feeds)
    y = out["y"] if isinstance(out, dict) else out[0]
    # numpy's reading of the same positions: -1 is the last one
    p = np.array([0, 5, 5])
    c, s = cos[p][None, None], sin[p][None, None]
    x1, x2 = x[..., :2], x[..., 2:]
    np.testing.assert_allclose(y, np.concatenate([c * x1 - s * x2, s * x1 + c * x2], -1), rtol=1e-6, atol=1e-6)
    with pytest.raises(RunError, match="INDEX|index"):
        model.run(dict(feeds, pos=np.array([[0, 6, 1]], dtype=np.int64)))


def test_bad_rotary_dim_is_a_shape_error(tmp_path):
    from aotc.errors import ShapeError
    x = rand(1, 2, 3, 6, seed=11)
    m, _ = _model(x, rand(4, 2, seed=12), rand(4, 2, seed=13), np.zeros((1, 3), np.int64), rotary_embedding_dim=5)
    path = tmp_path / "m.onnx"
    path.write_bytes(m.SerializeToString())
    with pytest.raises(ShapeError, match="rotary_embedding_dim"):
        compile_model(path, output_dir=tmp_path / "out")
