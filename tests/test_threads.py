"""Threads on CPU targets: parallel loops and split GEMMs compute what one thread computes.

With the thresholds of a target file set to 1, the schedule puts every spatial loop and every
GEMM on the pool, so these models exercise the outlined task functions of every op family
(elementwise, reductions, softmax / layernorm, pooling, gather, conv, matmul, RNN) on 2 and 3
threads, against ONNX Runtime on fresh random inputs. Also: the API's thread counts, and the
schedule's own decisions on the real thresholds."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper

from aotc.api import compile as aotc_compile, load
from aotc.compiler import compile_program
from aotc.errors import ArtifactError
from aotc.kernel.ir import PARALLEL, Gemm, Loop, walk_stmts
from models.zoo import ZOO
from tests.helpers import assert_parity, eager_threads_target, graph_model, rand

N = helper.make_node


@pytest.fixture(scope="module")
def eager_target(tmp_path_factory) -> str:
    return eager_threads_target(tmp_path_factory.mktemp("target"))


def _parallel_parts(c) -> tuple[int, int]:
    loops = sum(1 for st in c.steps for s in walk_stmts(st.kernel.body) if isinstance(s, Loop) and s.kind == PARALLEL)
    gemms = sum(1 for st in c.steps for s in walk_stmts(st.kernel.body) if isinstance(s, Gemm) and s.parallel)
    return loops, gemms


@pytest.mark.parametrize("threads", [2, 3])
@pytest.mark.parametrize("name", ["lenet5", "mobilenetv2", "bert", "gpt2", "lstm", "gru", "legacy_opset13"])
def test_zoo_with_everything_parallel(name, threads, eager_target, tmp_path):
    e = ZOO[name]
    path = tmp_path / f"{name}.onnx"
    onnx.save(e.build("small"), str(path))
    c = compile_program(path, target=eager_target, shapes=e.shapes_for("small"), threads=threads)
    loops, gemms = _parallel_parts(c)
    assert loops > 0 and gemms > 0, "the eager target should parallelize"
    from aotc.check.runner import run_check
    res = run_check(path, target=eager_target, shapes=e.shapes_for("small"), rtol=e.rtol, atol=e.atol,
                    output_dir=tmp_path / "out", seed=11, threads=threads)
    for o in res.outputs:
        assert o.passed, f"{name}/{o.name} on {threads} threads: max_abs={o.max_abs_err:.3g} {o.note}"


def test_op_families_with_everything_parallel(eager_target, tmp_path):
    """Reductions over inner and outer axes, LogSumExp, ArgMax, TopK, pooling with padding,
    Resize, Pad, Gather, InstanceNorm, ConvTranspose and depthwise conv, in one graph."""
    x = rand(2, 6, 9, 10, seed=1)
    ids = np.random.default_rng(2).integers(-6, 6, size=(4,)).astype(np.int64)
    nodes = [N("ReduceSum", ["x", "ax1"], ["r1"], keepdims=1), N("ReduceMax", ["x", "ax23"], ["r2"], keepdims=0),
             N("ReduceLogSumExp", ["x", "ax0"], ["r3"], keepdims=1), N("ArgMax", ["x"], ["am"], axis=2),
             N("TopK", ["x", "k"], ["tv", "ti"], axis=3), N("MaxPool", ["x"], ["mp"], kernel_shape=[3, 3],
                                                            pads=[1, 1, 1, 1], strides=[2, 2]),
             N("AveragePool", ["x"], ["ap"], kernel_shape=[2, 3], count_include_pad=0, pads=[0, 1, 0, 1]),
             N("Resize", ["x", "", "sc"], ["rs"], mode="linear"), N("Pad", ["x", "pads"], ["pd"], mode="reflect"),
             N("Gather", ["x", "ids"], ["ga"], axis=1), N("InstanceNormalization", ["x", "s6", "b6"], ["inn"]),
             N("ConvTranspose", ["x", "wt"], ["ct"], strides=[2, 2]),
             N("Conv", ["x", "wd"], ["dw"], group=6, pads=[1, 1, 1, 1]),
             N("Softmax", ["x"], ["sm"], axis=1), N("LayerNormalization", ["x", "s10", "b10"], ["ln"], axis=-1)]
    inits = {"ax1": np.array([1]), "ax23": np.array([2, 3]), "ax0": np.array([0]), "k": np.array([3]),
             "sc": np.array([1, 1, 2, 1.5], np.float32), "pads": np.array([0, 0, 2, 1, 0, 0, 1, 2]),
             "s6": rand(6, seed=3), "b6": rand(6, seed=4), "wt": rand(6, 4, 3, 3, seed=5) * 0.2,
             "wd": rand(6, 1, 3, 3, seed=6), "s10": rand(10, seed=7), "b10": rand(10, seed=8)}
    outs = ["r1", "r2", "r3", "am", "tv", "ti", "mp", "ap", "rs", "pd", "ga", "inn", "ct", "dw", "sm", "ln"]
    m = graph_model(nodes, {"x": x, "ids": ids}, outs, inits, opset=18)
    assert_parity(m, tmp_path, {"x": x, "ids": ids}, target=eager_target, threads=2)


def test_threads_at_run_time(tmp_path):
    """An artifact compiled for 2 threads runs on 1 or 2 (same answer); more is refused."""
    e = ZOO["mlp"]
    path = tmp_path / "mlp.onnx"
    onnx.save(e.build("small"), str(path))
    m2 = aotc_compile(path, target="c", output_dir=tmp_path / "out", shapes=e.shapes_for("small"), threads=2)
    assert m2.manifest["threads"] == 2 and m2.threads == 2
    x = rand(1, 64, seed=9)
    y2 = m2.run([x])[0]
    m1 = load(tmp_path / "out", threads=1)
    assert m1.threads == 1
    np.testing.assert_array_equal(m1.run([x])[0], y2)
    with pytest.raises(ArtifactError, match="threads above the compiled maximum") as err:
        load(tmp_path / "out", threads=3)
    assert "compiled for at most 2 threads" in err.value.hint


def test_small_models_stay_on_one_thread(tmp_path):
    """With the real thresholds, the MLP and LeNet have nothing worth a hand-off to the pool;
    ResNet-50 at 224x224 puts its big GEMMs and im2col loops on it."""
    for name, size, expect in (("mlp", "small", False), ("lenet5", "full", False), ("resnet50", "full", True)):
        e = ZOO[name]
        path = tmp_path / f"{name}.onnx"
        onnx.save(e.build(size), str(path))
        c = compile_program(path, target="c", shapes=e.shapes_for(size), threads=2)
        loops, gemms = _parallel_parts(c)
        assert (loops + gemms > 0) == expect, f"{name}: {loops} parallel loops, {gemms} split GEMMs"


def test_a_gemm_streaming_a_huge_operand_splits_it(tmp_path, monkeypatch):
    """A few rows times a B larger than the last-level cache (a language model's head): threads
    split B's columns, so that each reads its part of B from memory, not all of it; when B
    fits, this shape splits rows (60 rows are 10 whole row panels of the c target's 6, 2056
    columns 257 panels of 8). Both splits compute what ONNX Runtime does."""
    import aotc.schedule.gemm_cpu as gemm_cpu
    rng = np.random.default_rng(12)
    w = (rng.standard_normal((128, 2056)) * 0.1).astype(np.float32)
    x = rand(60, 128, seed=13)
    m = graph_model([N("MatMul", ["x", "w"], ["y"])], {"x": x}, ["y"], {"w": w})
    path = tmp_path / "m.onnx"
    onnx.save(m, str(path))

    def split():
        c = compile_program(path, target="c", threads=2)
        return [s.split for st in c.steps for s in walk_stmts(st.kernel.body) if isinstance(s, Gemm)]
    assert split() == ["rows"]
    (tmp_path / "rows").mkdir()
    (tmp_path / "cols").mkdir()
    assert_parity(m, tmp_path / "rows", {"x": x}, target="c", threads=2)
    monkeypatch.setattr(gemm_cpu, "STREAMED_BYTES", 1 << 19)         # B's 1 MiB counts as streamed
    assert split() == ["cols"]
    assert_parity(m, tmp_path / "cols", {"x": x}, target="c", threads=2)


@pytest.mark.parametrize("threads, heads_in_parallel", [(2, False), (3, True)])
def test_attention_heads_that_do_not_divide_among_threads(threads, heads_in_parallel, tmp_path):
    """3 attention heads on 2 threads: the heads run one after the other, each product split
    among the threads (3 heads as parallel iterations kept one thread idle a third of the time);
    on 3 threads the heads are the parallel loop. Both against ONNX Runtime."""
    q, k, v = (rand(1, 3, 128, 64, seed=s) for s in (21, 22, 23))
    nodes = [N("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]), N("MatMul", ["q", "kt"], ["s"]),
             N("Mul", ["s", "scale"], ["ss"]), N("Softmax", ["ss"], ["p"], axis=-1), N("MatMul", ["p", "v"], ["y"])]
    m = graph_model(nodes, {"q": q, "k": k, "v": v}, ["y"], {"scale": np.array(0.125, np.float32)})
    path = tmp_path / "attn.onnx"
    onnx.save(m, str(path))
    c = compile_program(path, target="c", threads=threads)
    bodies = [st.kernel.body for st in c.steps if st.kernel.name.endswith("attention")]
    assert len(bodies) == 1, [st.kernel.name for st in c.steps]
    head_loops = [s for s in walk_stmts(bodies[0]) if isinstance(s, Loop) and s.kind == PARALLEL
                  and any(isinstance(x, Gemm) for x in walk_stmts(s.body))]
    split = [s for s in walk_stmts(bodies[0]) if isinstance(s, Gemm) and s.parallel]
    assert (len(head_loops), len(split)) == ((1, 0) if heads_in_parallel else (0, 2))
    assert_parity(m, tmp_path, {"q": q, "k": k, "v": v}, target="c", threads=threads)
