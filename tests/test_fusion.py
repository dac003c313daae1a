"""Fusion structure: which nodes end up in one kernel, and that elementwise ops after a GEMM run
in its epilogue (on each finished tile, no second pass over memory), across Reshape-family
views; the index-space math that makes it possible; parity with ONNX Runtime for every shape
of epilogue (rows folded over a batch with a broadcast operand, the product computed
transposed, a residual add)."""
from __future__ import annotations

import itertools

import numpy as np
import onnx
import pytest
from onnx import helper

from aotc.compiler import compile_program
from aotc.kernel.ir import Gemm, Load, Loop, Store, evaluate, stmt_exprs, walk_expr, walk_stmts
from aotc.kernel.space import IndexSpace
from models.zoo import ZOO
from tests.helpers import assert_parity, graph_model, rand

N = helper.make_node


def _analyze(model, tmp_path, **kw):
    path = tmp_path / "model.onnx"
    onnx.save(model, str(path))
    return compile_program(path, **kw)


def _kernels(c) -> list[str]:
    """Each kernel as 'Op+Op+...' (its fused ONNX nodes)."""
    return [st.group.label for st in c.steps]


def _epilogue_stores(st) -> int:
    return sum(1 for g in walk_stmts(st.kernel.body) if isinstance(g, Gemm)
               for s in walk_stmts(g.epilogue) if isinstance(s, Store))


def _outer_loops(st) -> int:
    return sum(1 for s in st.kernel.body if isinstance(s, Loop))


# ----------------------------------------------------------------------------- index space
def test_index_space_refines_nesting_shapes_and_refuses_crossing_ones():
    sp = IndexSpace([(16, 3072), (1, 16, 3072)])
    assert sp.extents == [16, 3072] and sp.strides == [3072, 1]
    assert sp.runs((1, 16, 3072)) == [[], [0], [1]]
    sp = IndexSpace([(6, 4), (3, 8)])            # boundaries 4 | 8 | 24 nest
    assert sp.extents == [3, 2, 4]
    assert sp.runs((6, 4)) == [[0, 1], [2]] and sp.runs((3, 8)) == [[0], [1, 2]]
    assert not IndexSpace.fits([(6, 4), (4, 6)])    # 4 and 6 cross
    assert not IndexSpace.fits([(6, 4), (5, 4)])    # sizes differ


def test_dim_offset_matches_broadcast_indexing():
    """The offset fusion computes for a dim index equals numpy's broadcast indexing, for
    operands that walk the dim's loop dims contiguously, with gaps, or not at all."""
    rng = np.random.default_rng(0)
    cases = [((6, 4), (3, 8), (3, 1)), ((6, 4), (3, 8), (1, 8)), ((2, 3, 4), (6, 4), (6, 1)),
             ((2, 3, 4), (6, 4), (1, 4)), ((4, 6), (2, 2, 6), (2, 1, 6)), ((4, 6), (2, 2, 6), (1, 2, 1))]
    for anchor, shape, operand in cases:
        sp = IndexSpace([anchor, shape])
        strides = sp.operand_strides(shape, operand)
        data = rng.standard_normal(operand).astype(np.float32)
        want = np.broadcast_to(data, shape).reshape(anchor)         # operand seen at anchor positions
        runs = sp.runs(anchor)
        from aotc.kernel.ir import Var
        xs = [Var(f"x{d}") for d in range(len(anchor))]
        exprs = [sp.dim_offset(runs[d], xs[d], strides) for d in range(len(anchor))]
        flat = data.reshape(-1)
        for idx in itertools.product(*[range(d) for d in anchor]):
            env = {f"x{d}": v for d, v in enumerate(idx)}
            off = sum(int(evaluate(e, env)) for e in exprs)
            assert flat[off] == want[idx], (anchor, shape, operand, idx)


# ----------------------------------------------------------------------------- structure
def test_transformer_block_fuses_into_gemm_epilogues(tmp_path):
    """GPT-2 (small zoo variant): the QKV Gemm keeps its bias in the epilogue; the MLP's
    Gemm -> Reshape -> tanh-GELU (8 elementwise nodes) and each projection's residual Add run
    in the GEMM's epilogue; attention is one Attention kernel per layer (passes/attention.py),
    reading q, k and v in their (batch, seq, hidden) layout: no Transpose is left."""
    e = ZOO["gpt2"]
    c = _analyze(e.build("small"), tmp_path, shapes=e.shapes_for("small"), target="c", threads=1)
    labels = _kernels(c)
    gelu = "Gemm+Pow+Mul+Add+Mul+Tanh+Mul+Add+Mul"
    layers = 2
    assert labels.count(gelu) == layers, labels
    assert labels.count("Gemm+Add") == 2 * layers, labels      # attention and MLP projections + residual
    assert labels.count("Attention") == layers and "Softmax" not in labels and "Transpose" not in labels, labels
    for st in c.steps:
        if st.group.label in (gelu, "Gemm+Add"):
            assert _epilogue_stores(st) == 1, f"{st.group.label}: one store, of the chain's last value"
            assert _outer_loops(st) == 0, f"{st.group.label}: no loop nest besides the GEMM"
    # 39 before chains crossed the Reshape after each Gemm, 31 before attention was one kernel
    assert len(c.steps) == 19, labels


def test_conv_block_fuses_bias_relu_and_residual(tmp_path):
    """ResNet-50 (small): every Conv's bias, ReLU and the bottleneck's residual Add + ReLU run in
    the GEMM epilogue; the only loop nests next to GEMMs are im2col. A 3 x 3 convolution the
    Winograd pass took runs its chain at its output transform's stores, not in a second pass."""
    e = ZOO["resnet50"]
    c = _analyze(e.build("small"), tmp_path, shapes=e.shapes_for("small"), target="c", threads=1)
    labels = _kernels(c)
    assert labels.count("Conv+Add+Relu") == 5, labels           # one per bottleneck
    assert labels.count("Conv+Relu") + labels.count("aotc.WinogradConv+Relu") == 11, labels
    assert labels.count("aotc.WinogradConv+Relu") >= 1, labels  # the 3 x 3 one on the largest plane
    assert len(c.steps) == 23, labels
    for st in c.steps:
        if st.group.label == "aotc.WinogradConv+Relu":
            out = [p for p in st.kernel.params if p.role == "out"]
            assert len(out) == 1
            reads_out = [t for t in walk_stmts(st.kernel.body) if any(
                isinstance(x, Load) and x.buf is out[0]
                for e in ([t.index, t.value] if isinstance(t, Store) else stmt_exprs(t)) for x in walk_expr(e))]
            assert not reads_out, f"{st.kernel.name}: the chain runs in a second pass"
    for st in c.steps:
        if st.group.anchor is not None and st.group.anchor.op_type == "Conv" and st.group.chain:
            gemms = [g for g in walk_stmts(st.kernel.body) if isinstance(g, Gemm)]
            assert gemms and all(g.epilogue for g in gemms), st.group.label
            assert not any(isinstance(s, Loop) and s.body and isinstance(s.body[-1], Store)
                           and s.body[-1].buf is gemms[0].c.buf for s in st.kernel.body), \
                f"{st.kernel.name}: the chain runs in a second pass"


def test_chain_does_not_cross_a_view_whose_shapes_cross(tmp_path):
    x = rand(6, 4, seed=1)
    w = rand(4, 4, seed=2)
    nodes = [N("MatMul", ["x", "w"], ["a"]), N("Reshape", ["a", "s"], ["b"]), N("Relu", ["b"], ["y"])]
    m = graph_model(nodes, {"x": x}, ["y"], {"w": w, "s": np.array([4, 6])})
    assert _kernels(_analyze(m, tmp_path, target="c")) == ["MatMul", "Relu"]
    m = graph_model(nodes, {"x": x}, ["y"], {"w": w, "s": np.array([3, 8])})
    assert _kernels(_analyze(m, tmp_path, target="c")) == ["MatMul+Relu"]
    assert_parity(m, tmp_path, {"x": x}, target="c")


# ----------------------------------------------------------------------------- parity
@pytest.mark.parametrize("threads", [1, 2])
def test_epilogue_with_rows_folded_over_a_batch(threads, tmp_path):
    """MatMul [2, 3, 8] x [8, 5]: one GEMM of 6 rows; the mask [1, 3, 5] is broadcast over the
    batch (row i reads mask row i % 3), the bias over rows, the residual everywhere; then a
    Reshape to [6, 5] and a Sigmoid, still in the epilogue; the MatMul's own output is a graph
    output too (stored by the epilogue as well)."""
    x = rand(2, 3, 8, seed=3)
    inits = {"w": rand(8, 5, seed=4), "mask": rand(1, 3, 5, seed=5), "bias": rand(5, seed=6),
             "s": np.array([6, 5])}
    res = rand(2, 3, 5, seed=7)
    nodes = [N("MatMul", ["x", "w"], ["a"]), N("Mul", ["a", "mask"], ["b"]), N("Add", ["b", "bias"], ["c"]),
             N("Add", ["c", "res"], ["d"]), N("Reshape", ["d", "s"], ["e"]), N("Sigmoid", ["e"], ["y"])]
    m = graph_model(nodes, {"x": x, "res": res}, ["y", "a"], inits)
    c = _analyze(m, tmp_path, target="c", threads=threads)
    assert _kernels(c) == ["MatMul+Mul+Add+Add+Sigmoid"]
    assert _epilogue_stores(c.steps[0]) == 2
    assert_parity(m, tmp_path, {"x": x, "res": res}, target="c", threads=threads)


@pytest.mark.parametrize("target", ["c", "native"])
def test_epilogue_when_the_product_is_computed_transposed(target, tmp_path):
    """A conv with a 3x3 output (9 positions pad badly to a tile's width) and a long K is computed
    as Yᵀ = colᵀ.Wᵀ (the schedule swaps the GEMM's orientation); its bias, the residual Add and
    the ReLU still land where they belong."""
    from aotc.schedule.gemm_cpu import GemmTiles
    from aotc.targets import load_target
    x = rand(1, 256, 3, 3, seed=8)
    res = rand(1, 48, 3, 3, seed=9)
    w = rand(48, 256, 3, 3, seed=10) * 0.05
    nodes = [N("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]), N("Add", ["c", "res"], ["d"]),
             N("Relu", ["d"], ["y"])]
    m = graph_model(nodes, {"x": x, "res": res}, ["y"], {"w": w, "b": rand(48, seed=11)})
    tiles = GemmTiles.of(load_target(target))
    assert tiles.prefers_transposed(48, 9, 256 * 9)
    c = _analyze(m, tmp_path, target=target)
    assert _kernels(c) == ["Conv+Add+Relu"]
    g = next(s for s in walk_stmts(c.steps[0].kernel.body) if isinstance(s, Gemm))
    assert (g.M, g.N) == (9, 48) and g.c.rs == 1, "computed transposed, written through strides"
    assert_parity(m, tmp_path, {"x": x, "res": res}, target=target)


# ----------------------------------------------------------------------------- direct convolutions
def _depthwise_block(stored_conv: bool):
    """Depthwise 3x3 stride 2 -> Add(per-channel tensor) -> Add(residual-like input) -> Clip:
    the chain reads two operands besides the conv, one broadcast per channel."""
    x = rand(2, 6, 9, 11, seed=11)
    r = rand(2, 6, 5, 6, seed=12)
    chan = rand(6, 1, 1, seed=15)          # an input, so that no pass folds it into the bias
    inits = {"w": rand(6, 1, 3, 3, seed=13), "b": rand(6, seed=14),
             "lo": np.array(-0.5, np.float32), "hi": np.array(0.75, np.float32)}
    nodes = [N("Conv", ["x", "w", "b"], ["c"], group=6, pads=[1, 1, 1, 1], strides=[2, 2]),
             N("Add", ["c", "chan"], ["a"]), N("Add", ["a", "r"], ["s"]), N("Clip", ["s", "lo", "hi"], ["y"])]
    outs = ["y", "c"] if stored_conv else ["y"]
    feeds = {"x": x, "r": r, "chan": chan}
    return graph_model(nodes, feeds, outs, inits, opset=13), feeds


@pytest.mark.parametrize("stored_conv", [False, True], ids=["in_place", "conv_also_stored"])
@pytest.mark.parametrize("target", ["c", "opencl"])
def test_direct_conv_with_a_chain_of_operands(stored_conv, target, tmp_path):
    """A direct (depthwise) convolution's fused chain, with operands besides the conv (one
    broadcast per channel), written over the conv's output or beside it."""
    if target == "opencl":
        from tests.test_opencl import _opencl_missing
        if _opencl_missing() is not None:
            pytest.skip(str(_opencl_missing()))
    model, feeds = _depthwise_block(stored_conv)
    c = _analyze(model, tmp_path, target="c", threads=1)
    assert _kernels(c) == ["Conv+Add+Add+Clip"]
    (tmp_path / target).mkdir()
    assert_parity(model, tmp_path / target, feeds, target=target)


# (input plane, kernel, stride, pads): each path of ops/conv_direct.py for a depthwise
# convolution of fixed size (run-time planes: tests/test_run_time_dims.py)
DIRECT_PATHS = {
    "padded_plane": ((14, 14), (3, 3), 1, (1, 1)),        # a small plane through the zero-padded copy
    "padded_phases": ((17, 15), (5, 5), 2, (2, 2)),       # strided with many taps: the phase planes
    "one_pass": ((60, 58), (3, 3), 1, (1, 1)),            # a large plane, one pass over its rows
    "one_pass_strided": ((13, 16), (3, 3), 2, (1, 1)),
    "rows": ((48, 50), (1, 13), 1, (0, 6)),               # a kernel too wide for those: row by row
}


@pytest.mark.parametrize("stored_conv", [False, True], ids=["in_place", "conv_also_stored"])
@pytest.mark.parametrize("path", list(DIRECT_PATHS))
def test_direct_conv_chain_runs_on_each_finished_plane(path, stored_conv, tmp_path):
    """The chain after a direct convolution runs inside its loop over output planes, on each
    plane once the convolution has finished it (Builder.finished), not in a pass of its own
    over the whole output: one top-level loop in the kernel. The chain adds a residual and a
    per-channel input and clips, so that an element run through it twice would show."""
    (H, W), (kh, kw), s, (ph, pw) = DIRECT_PATHS[path]
    C = 8
    OH, OW = (H + 2 * ph - kh) // s + 1, (W + 2 * pw - kw) // s + 1
    x, r, chan = rand(2, C, H, W, seed=21), rand(2, C, OH, OW, seed=22), rand(C, 1, 1, seed=23)
    inits = {"w": rand(C, 1, kh, kw, seed=24), "b": rand(C, seed=25),
             "lo": np.array(-0.5, np.float32), "hi": np.array(0.75, np.float32)}
    nodes = [N("Conv", ["x", "w", "b"], ["c"], group=C, pads=[ph, pw, ph, pw], strides=[s, s]),
             N("Add", ["c", "chan"], ["a"]), N("Add", ["a", "r"], ["t"]), N("Clip", ["t", "lo", "hi"], ["y"])]
    feeds = {"x": x, "r": r, "chan": chan}
    model = graph_model(nodes, feeds, ["y", "c"] if stored_conv else ["y"], inits, opset=13)
    c = _analyze(model, tmp_path, target="c", threads=1)
    assert _kernels(c) == ["Conv+Add+Add+Clip"]
    assert _outer_loops(c.steps[0]) == 1, "the chain in a loop nest of its own"
    assert_parity(model, tmp_path, feeds, target="c", threads=2)


def test_castlike_in_a_gemm_epilogue_reads_its_second_input_for_the_type_only(tmp_path):
    """CastLike(MatMul + R, L): L is read for its type alone, so the row offset the epilogue
    would hoist for it is not emitted (the C compiler's -Werror=unused-variable failed the
    build: ONNX's expanded LinearAttention cases)."""
    a, b_, r, like = rand(2, 4, 8, seed=1), rand(2, 8, 6, seed=2), rand(2, 4, 6, seed=3), rand(2, 4, 1, seed=4)
    nodes = [helper.make_node("MatMul", ["a", "b"], ["p"]), helper.make_node("Add", ["p", "r"], ["s"]),
             helper.make_node("CastLike", ["s", "like"], ["y"])]
    m = graph_model(nodes, {"a": a, "b": b_, "r": r, "like": like}, ["y"], opset=15)
    assert_parity(m, tmp_path, {"a": a, "b": b_, "r": r, "like": like})
