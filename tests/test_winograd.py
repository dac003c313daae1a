"""Winograd 3 x 3 convolutions (aotc/ops/winograd.py, aotc/passes/winograd.py): the transforms
are exact, the compiled convolutions match ONNX Runtime (and the direct convolution, the simple
path), they are used where the cost model says, and their float32 errors stay near a direct
sum's."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper

from aotc.api import load
from aotc.compiler import compile_program, compile_model
from aotc.ops.winograd import TRANSFORMS, transform_weights
from aotc.passes.winograd import allowed_tiles, block_rows, choose_tile
from aotc.targets import load_target

from .helpers import assert_parity, graph_model, opencl_target_with, rand
from .test_opencl import _opencl_missing


def _corr2d(d: np.ndarray, g: np.ndarray) -> np.ndarray:
    """Valid 2-D cross-correlation (what Conv computes), float64."""
    oh, ow = d.shape[0] - 2, d.shape[1] - 2
    return np.array([[np.sum(d[i:i + 3, j:j + 3] * g) for j in range(ow)] for i in range(oh)])


@pytest.mark.parametrize("m", sorted(TRANSFORMS))
def test_transform_matrices_compute_a_tile_exactly(m):
    BT, G, AT = (np.array(x, dtype=np.float64) for x in TRANSFORMS[m])
    rng = np.random.default_rng(m)
    for _ in range(5):
        d, g = rng.standard_normal((m + 2, m + 2)), rng.standard_normal((3, 3))
        y = AT @ ((G @ g @ G.T) * (BT @ d @ BT.T)) @ AT.T
        np.testing.assert_allclose(y, _corr2d(d, g), rtol=1e-12, atol=1e-12)


def test_weight_transform_layout():
    w = rand(5, 4, 3, 3, seed=3)
    u = transform_weights(w, 2)
    G = np.array(TRANSFORMS[2][1], dtype=np.float64)
    assert u.shape == (16, 5, 4) and u.dtype == np.float32
    ref = G @ w[3, 2].astype(np.float64) @ G.T
    np.testing.assert_allclose(u[:, 3, 2].reshape(4, 4), ref, rtol=1e-6)


def _conv_net(C, M, H, W, pads=(1, 1, 1, 1), N=1, bias=True, tail="relu", seed=0):
    """Conv (+ bias) then Relu, or + a residual input then Relu, or nothing."""
    rng = np.random.default_rng(seed)
    inits = {"w": (rng.standard_normal((M, C, 3, 3)) * (2.0 / (9 * C)) ** 0.5).astype(np.float32)}
    if bias:
        inits["b"] = rng.standard_normal(M).astype(np.float32)
    OH, OW = H + pads[0] + pads[2] - 2, W + pads[1] + pads[3] - 2
    inputs = {"x": rand(N, C, H, W, seed=seed + 1)}
    conv_out = "y" if tail == "none" else "c"
    nodes = [helper.make_node("Conv", ["x", "w"] + (["b"] if bias else []), [conv_out], pads=list(pads))]
    if tail == "relu":
        nodes.append(helper.make_node("Relu", ["c"], ["y"]))
    elif tail == "residual":
        inputs["r"] = rand(N, M, OH, OW, seed=seed + 2)
        nodes += [helper.make_node("Add", ["c", "r"], ["s"]), helper.make_node("Relu", ["s"], ["y"])]
    return graph_model(nodes, inputs, ["y"], inits), inputs


def _winograd_tiles(path, target) -> list[int]:
    g = compile_program(path, target).graph
    return [n.attrs["tile"] for n in g.nodes if n.op_type == "aotc.WinogradConv"]


CASES = [
    # (C, M, H, W, pads, N, bias, tail)
    (32, 32, 28, 28, (1, 1, 1, 1), 1, True, "relu"),        # whole tiles, fused Relu
    (24, 40, 13, 11, (1, 1, 1, 1), 1, True, "residual"),    # odd sizes: partial edge tiles, residual add
    (16, 24, 9, 17, (0, 0, 0, 0), 2, False, "none"),        # no padding, batch 2, no bias
    (16, 16, 10, 7, (2, 0, 1, 2), 1, True, "relu"),         # asymmetric padding
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}x{c[1]}_{c[2]}x{c[3]}_{c[7]}")
@pytest.mark.parametrize("target", ["c", "native,winograd4"])
def test_matches_onnxruntime(tmp_path, case, target, monkeypatch):
    import aotc.passes.winograd as pw
    monkeypatch.setattr(pw, "MIN_GAIN", 0.0)          # every eligible convolution, whatever it costs
    monkeypatch.setattr(pw, "MIN_SIDE_TILES_4", 1)
    C, M, H, W, pads, N, bias, tail = case
    model, feeds = _conv_net(C, M, H, W, pads, N, bias, tail)
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    tiles = _winograd_tiles(path, target)
    assert tiles == [4 if "winograd4" in target else 2]
    rtol, atol = (1e-4, 1e-5) if "winograd4" not in target else (1e-3, 1e-4)
    assert_parity(model, tmp_path, feeds=feeds, target=target, rtol=rtol, atol=atol)


def test_same_as_direct_convolution_with_threads(tmp_path, monkeypatch):
    """The fast path against the simple one, both compiled by aotc, on 2 threads."""
    import aotc.passes.winograd as pw
    monkeypatch.setattr(pw, "MIN_GAIN", 0.0)
    model, feeds = _conv_net(32, 48, 20, 20, tail="residual", N=2)
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    got = {}
    for t in ("c", "c,direct_conv"):
        out = compile_model(path, target=t, output_dir=tmp_path / t.replace(",", "_"), threads=2)
        got[t] = load(out, threads=2).run(feeds)[0]
    assert _winograd_tiles(path, "c") == [2] and _winograd_tiles(path, "c,direct_conv") == []
    np.testing.assert_allclose(got["c"], got["c,direct_conv"], rtol=1e-4, atol=1e-5)


def _errors(tmp_path, C, M, S, targets) -> dict[str, float]:
    """Max abs error of each target's output against a float64 convolution."""
    import aotc.passes.winograd as pw
    model, feeds = _conv_net(C, M, S, S, tail="none")
    path = tmp_path / f"m{C}.onnx"
    onnx.save(model, str(path))
    w = onnx.numpy_helper.to_array(model.graph.initializer[0]).astype(np.float64)
    bias = onnx.numpy_helper.to_array(model.graph.initializer[1]).astype(np.float64)
    x = np.pad(feeds["x"].astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    cols = np.stack([x[0, :, i:i + S, j:j + S] for i in range(3) for j in range(3)], axis=1)   # C, 9, S, S
    ref = np.einsum("mck,cks->ms", w.reshape(M, C, 9), cols.reshape(C, 9, S * S)).reshape(1, M, S, S)
    ref += bias[None, :, None, None]
    errs = {}
    old = pw.MIN_GAIN, pw.MIN_SIDE_TILES_4
    pw.MIN_GAIN, pw.MIN_SIDE_TILES_4 = 0.0, 1
    try:
        for t in targets:
            out = compile_model(path, target=t, output_dir=tmp_path / f"{C}_{t.replace(',', '_')}", threads=1)
            errs[t] = float(np.max(np.abs(load(out, threads=1).run(feeds)[0] - ref)))
    finally:
        pw.MIN_GAIN, pw.MIN_SIDE_TILES_4 = old
    return errs


@pytest.mark.parametrize("C", [64, 256])
def test_errors_stay_near_a_direct_sums(tmp_path, C):
    """F(2x2) (the default) within 2x of the direct convolution's float32 error, F(4x4) (asked
    for with winograd4) within 40x; the scale: outputs have unit variance per input term."""
    errs = _errors(tmp_path, C, C, 16, ["native,direct_conv", "native", "native,winograd4"])
    direct = errs["native,direct_conv"]
    assert 0 < direct < 1e-4
    assert errs["native"] <= 2 * direct, errs
    assert errs["native,winograd4"] <= 40 * direct, errs


def test_cost_model():
    assert choose_tile(1, 64, 64, 56, 56) == 2                  # ResNet's first stage
    assert choose_tile(1, 64, 64, 56, 56, (2, 4)) == 4
    assert choose_tile(1, 256, 256, 14, 14, (2, 4)) == 2        # F(4x4) on too few tiles
    assert choose_tile(1, 3, 16, 224, 224) is None              # 3 input channels: the transforms dominate
    assert choose_tile(1, 16, 32, 160, 160) is None             # measured no faster
    assert allowed_tiles(load_target("c")) == (2,)
    assert allowed_tiles(load_target("c,winograd4")) == (2, 4)
    assert allowed_tiles(load_target("c,direct_conv")) == ()
    assert allowed_tiles(load_target("opencl")) == ()
    # blocks: the largest divisor of the tile rows whose tiles fit, while the weights fit too
    assert block_rows(64, 64, 2, 28, 28, 524288) == 2
    assert block_rows(512, 512, 2, 4, 4, 524288) == 4             # 16 MB of weights: one block
    assert block_rows(64, 64, 2, 28, 28, 0) == 28


def test_not_used_where_it_does_not_apply(tmp_path):
    """Strided, dilated, grouped and 5 x 5 convolutions keep the direct lowering."""
    rng = np.random.default_rng(0)
    x = rand(1, 32, 24, 24)
    for attrs, wshape in [({"strides": [2, 2]}, (32, 32, 3, 3)), ({"dilations": [2, 2]}, (32, 32, 3, 3)),
                          ({"group": 2}, (32, 16, 3, 3)), ({}, (32, 32, 5, 5))]:
        w = rng.standard_normal(wshape).astype(np.float32)
        model = graph_model([helper.make_node("Conv", ["x", "w"], ["y"], **attrs)], {"x": x}, ["y"], {"w": w})
        path = tmp_path / "m.onnx"
        onnx.save(model, str(path))
        assert _winograd_tiles(path, "c") == [], attrs


@pytest.mark.skipif(_opencl_missing() is not None, reason=str(_opencl_missing()))
def test_opencl_printer_runs_the_same_kernel(tmp_path, monkeypatch):
    """The Winograd kernel is plain kernel IR (loops, loads, stores, GEMMs): a target that turns
    it on gets it on OpenCL too."""
    import aotc.passes.winograd as pw
    monkeypatch.setattr(pw, "MIN_GAIN", 0.0)
    target = opencl_target_with(tmp_path, "opencl-winograd", {})
    text = Path(target).read_text().replace("[numerics]\n", "[numerics]\nwinograd = true\n", 1)
    Path(target).write_text(text)
    model, feeds = _conv_net(16, 24, 13, 11, tail="residual")
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    assert _winograd_tiles(path, target) == [2]
    assert_parity(model, tmp_path, feeds=feeds, target=target)


def _visited(lp) -> list[int]:
    """The iterations a loop nest made by _vector_runs runs, in order (its Store's index)."""
    from aotc.kernel.ir import Decl, Loop, Store, evaluate
    (decl, inner) = lp.body
    assert isinstance(decl, Decl) and isinstance(inner, Loop) and isinstance(inner.body[0], Store)
    out = []
    for r in range(lp.extent.value):
        first = evaluate(decl.init, {lp.var.name: r})
        out += [evaluate(inner.body[0].index, {decl.var.name: first, inner.var.name: i})
                for i in range(inner.extent.value)]
    return out


def test_schedule_walks_rerun_loops_in_whole_vector_runs():
    """The CPU schedule's vector runs (schedule/cpu.py): a rerun-safe loop of 28 iterations on a
    16-lane target runs [0, 16) then [12, 28); every iteration runs, the extra ones within 25%;
    loops not marked rerun, of whole vectors already, or too long a body stay as they are."""
    from aotc.kernel.ir import F32, SPATIAL, Buffer, Loop, Store, Var, const
    from aotc.schedule.cpu import _vector_runs
    buf = Buffer("y", F32, (64,), "scratch")
    names = iter(f"v{k}" for k in range(100))

    def loop(n, rerun=True, stmts=1):
        t = Var("t")
        return Loop(t, const(n), [Store(buf, t, const(1.0, F32))] * stmts, role=SPATIAL, rerun=rerun)

    for n, run, inner in [(28, 16, 16), (14, 16, 8), (7, 16, 4), (10, 16, 4), (30, 8, 8)]:
        (lp,) = _vector_runs([loop(n)], run, 64, lambda h: next(names))
        assert lp.body[1].extent.value == inner, (n, run)
        seen = _visited(lp)
        assert sorted(set(seen)) == list(range(n)) and len(seen) <= 1.25 * n, (n, seen)
    for lp in (loop(28, rerun=False), loop(32), loop(28, stmts=65), loop(3)):
        (out,) = _vector_runs([lp], 16, 64, lambda h: next(names))
        assert out.extent.value == lp.extent.value and out.body == lp.body


@pytest.mark.parametrize("block_bytes,rows", [(62000, 1), (100000, 2)])
def test_blocks_of_tile_rows_match_the_direct_convolution(tmp_path, monkeypatch, block_bytes, rows):
    """Blocks of one or two rows of tiles ([winograd] block_bytes: the 61,440 bytes of
    transformed weights fit, and 45,056 bytes of tiles a row), taken by 2 threads, on a plane
    whose last row and column of tiles are partial, with a residual Add and Relu fused."""
    import aotc.passes.winograd as pw
    from aotc.paths import TARGETS_DIR
    monkeypatch.setattr(pw, "MIN_GAIN", 0.0)
    text = (TARGETS_DIR / "c.toml").read_text().replace('name = "c"', 'name = "c-blocks"', 1)
    text = text.replace("block_bytes = 524288", f"block_bytes = {block_bytes}")
    target = tmp_path / "c-blocks.toml"
    target.write_text(text)
    model, feeds = _conv_net(24, 40, 15, 21, N=2, tail="residual")
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    (node,) = [n for n in compile_program(path, str(target)).graph.nodes if n.op_type == "aotc.WinogradConv"]
    assert node.attrs["block_rows"] == rows                   # of 8 rows of 2 x 2 tiles
    got = {}
    for t in (str(target), "c,direct_conv"):
        out = compile_model(path, target=t, output_dir=tmp_path / Path(t).stem.replace(",", "_"), threads=2)
        got[t] = load(out, threads=2).run(feeds)[0]
    np.testing.assert_allclose(got[str(target)], got["c,direct_conv"], rtol=1e-4, atol=1e-5)
