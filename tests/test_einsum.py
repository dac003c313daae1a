"""Einsum against ONNX Runtime (and numpy.einsum) on random operands: transposes, traces,
diagonals, sums, outer products, matrix products (batched, attention-shaped), three operands,
ellipses with broadcasting, implicit outputs, integer and double operands; the matrix-product
equations as Gemm statements, checked against the plain loop nest too."""
import numpy as np
import onnx
import pytest
from onnx import helper

import aotc.ops.einsum as einsum_op
from aotc.compiler import compile_program, compile_model
from aotc.errors import ShapeError, UnsupportedError
from aotc.kernel.ir import Gemm, walk_stmts
from tests.helpers import assert_parity, graph_model, rand

# (equation, operand shapes, lowered as a Gemm statement)
CASES = [
    ("ij->ji", [(3, 4)], False),
    ("ii->", [(5, 5)], False),
    ("ii->i", [(4, 4)], False),
    ("ij->", [(3, 7)], False),
    ("ij->j", [(3, 7)], False),
    ("ijk->kji", [(2, 3, 4)], False),
    ("i,j->ij", [(3,), (4,)], False),
    ("i,i->", [(6,)] * 2, False),
    ("ij,ij->ij", [(3, 4)] * 2, False),
    ("ij,jk->ik", [(3, 5), (5, 4)], True),
    ("ij,kj->ik", [(3, 5), (4, 5)], True),
    ("ji,jk->ki", [(5, 3), (5, 4)], True),
    ("ij,j->i", [(3, 5), (5,)], True),
    ("j,jk->k", [(5,), (5, 4)], True),
    ("ij,jk->i", [(3, 5), (5, 4)], False),          # k summed over one operand alone
    ("bij,bjk->bik", [(2, 3, 5), (2, 5, 4)], True),
    ("bij,jk->bik", [(2, 3, 5), (5, 4)], True),     # b and i: one row walk
    ("bij,bjk->ikb", [(2, 3, 5), (2, 5, 4)], True),
    ("bhid,bhjd->bhij", [(2, 3, 4, 8), (2, 3, 5, 8)], True),
    ("bhij,bhjd->bhid", [(2, 3, 4, 5), (2, 3, 5, 8)], True),
    ("bhid,hjd->bhij", [(2, 3, 4, 8), (3, 5, 8)], True),
    ("abcd,cde->abe", [(2, 3, 4, 5), (4, 5, 6)], True),      # two summed labels, one walk
    ("abcd,dce->abe", [(2, 3, 4, 5), (5, 4, 6)], False),     # summed labels in opposite orders
    ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)], False),
    ("i,ij,j->", [(3,), (3, 4), (4,)], False),
    ("...ij,...jk->...ik", [(2, 3, 4, 5), (2, 3, 5, 6)], True),
    ("...ij,...jk->...ik", [(2, 1, 4, 5), (1, 3, 5, 6)], True),
    ("...ii->...i", [(2, 3, 3)], False),
    ("i...,i...->...", [(4, 2, 3), (4, 2, 3)], False),   # dot products, one per output
    ("...,...->...", [(2, 3), (2, 3)], False),
    ("ij,jk", [(3, 5), (5, 4)], True),
    ("ba,ca", [(3, 4), (5, 4)], True),              # implicit: 'bc'
    ("ij,jk", [(3, 1), (4, 5)], False),             # j of 1 broadcasts (as numpy and ONNX Runtime)
    ("Ab,bC->CA", [(3, 4), (4, 5)], True),
    ("bii->bi", [(2, 3, 3)], False),
    ("ii", [(3, 3)], False),                        # implicit trace
    ("...", [(2, 3)], False),
    ("i...i", [(3, 2, 3)], False),
    (" ij , jk -> ik ", [(3, 5), (5, 4)], True),
]


def _model(eq, feeds, opset=12):
    return graph_model([helper.make_node("Einsum", list(feeds), ["y"], equation=eq)], feeds, ["y"], opset=opset)


def _gemms(model, tmp_path) -> int:
    path = tmp_path / "g.onnx"
    onnx.save(model, str(path))
    return sum(isinstance(s, Gemm) for st in compile_program(path, target="c", threads=1).steps
               for s in walk_stmts(st.kernel.body))


@pytest.mark.parametrize("eq, shapes, gemm", CASES, ids=[c[0].replace(" ", "_") for c in CASES])
def test_einsum(eq, shapes, gemm, tmp_path):
    feeds = {f"x{k}": rand(*s, seed=k + 1) for k, s in enumerate(shapes)}
    m = _model(eq, feeds)
    assert_parity(m, tmp_path, feeds)
    assert (_gemms(m, tmp_path) > 0) == gemm
    # numpy reads the equation as ONNX Runtime does (a check of the test itself)
    import onnxruntime as ort
    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    np.testing.assert_allclose(np.einsum(eq.replace(" ", ""), *feeds.values()), want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("eq, shapes", [(eq, s) for eq, s, g in CASES if g])
def test_gemm_path_matches_loop_nest(eq, shapes, tmp_path, monkeypatch):
    """The Gemm lowering and the plain loop nest of the same equation agree."""
    from aotc.api import load
    feeds = {f"x{k}": rand(*s, seed=k + 7) for k, s in enumerate(shapes)}
    path = tmp_path / "m.onnx"
    onnx.save(_model(eq, feeds), str(path))
    got = {}
    for flag in (True, False):
        monkeypatch.setattr(einsum_op, "GEMM_PATH", flag)
        out = load(compile_model(path, output_dir=tmp_path / f"out{flag}")).run(feeds)
        got[flag] = out["y"] if isinstance(out, dict) else out[0]
    np.testing.assert_allclose(got[True], got[False], rtol=1e-5, atol=1e-5)


def test_gemm_with_fused_epilogue_and_constant_operand(tmp_path):
    """An attention-shaped Einsum on a constant weight, then a scale and a residual add: the
    elementwise ops run in the GEMM's epilogue."""
    x, r = rand(2, 6, 16, seed=1), rand(2, 6, 4, 8, seed=2)
    w = rand(16, 4, 8, seed=3)
    nodes = [helper.make_node("Einsum", ["x", "w"], ["p"], equation="bsd,dhk->bshk"),
             helper.make_node("Mul", ["p", "s"], ["q"]),
             helper.make_node("Add", ["q", "r"], ["y"])]
    m = graph_model(nodes, {"x": x, "r": r}, ["y"], inits={"w": w, "s": np.array(0.5, np.float32)})
    assert_parity(m, tmp_path, {"x": x, "r": r})
    path = tmp_path / "g.onnx"
    onnx.save(m, str(path))
    c = compile_program(path, target="c", threads=1)
    gemms = [s for st in c.steps for s in walk_stmts(st.kernel.body) if isinstance(s, Gemm)]
    assert len(c.steps) == 1 and len(gemms) == 1 and gemms[0].epilogue


def test_ellipsis_of_different_ranks_against_numpy(tmp_path):
    """Ellipses of different ranks broadcast right-aligned (numpy's reading; ONNX Runtime
    requires equal ranks, so numpy.einsum is the reference here)."""
    from aotc.api import load
    a, b = rand(2, 3, 4, 5, seed=8), rand(3, 5, 6, seed=9)
    for eq in ("...ij,...jk->...ik", "...ij,...jk"):
        path = tmp_path / "m.onnx"
        onnx.save(_model(eq, {"a": a, "b": b}), str(path))
        out = load(compile_model(path, output_dir=tmp_path / "out")).run({"a": a, "b": b})
        y = out["y"] if isinstance(out, dict) else out[0]
        np.testing.assert_allclose(y, np.einsum(eq, a, b), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.float64])
def test_einsum_other_types(dtype, tmp_path):
    rng = np.random.default_rng(3)
    a = rng.integers(-20, 20, size=(2, 3, 4)).astype(dtype)
    b = rng.integers(-20, 20, size=(2, 4, 5)).astype(dtype)
    if np.dtype(dtype).kind == "f":
        a, b = a + rng.random(a.shape), b + rng.random(b.shape)
    m = _model("bij,bjk->bik", {"a": a, "b": b})
    assert_parity(m, tmp_path, {"a": a, "b": b})
    assert _gemms(m, tmp_path) == 0


def test_opset_13(tmp_path):
    feeds = {"a": rand(2, 3, 4, seed=4), "b": rand(2, 5, 4, seed=5)}
    assert_parity(_model("bid,bjd->bij", feeds, opset=13), tmp_path, feeds)


@pytest.mark.parametrize("eq, shapes, msg", [
    ("ij,jk->ik", [(3, 4), (5, 2)], "label 'j'"),
    ("ij->k", [(3, 4)], "output label 'k'"),
    ("ijk->i", [(3, 4)], "3 labels for rank 2"),
    ("...i->i", [(2, 3)], "no '...'"),
    ("ii->i", [(2, 3)], "diagonal"),
    ("ij->ii", [(3, 3)], "output label repeats"),
])
def test_bad_equations_are_shape_errors(eq, shapes, msg, tmp_path):
    feeds = {f"x{k}": rand(*s, seed=k) for k, s in enumerate(shapes)}
    path = tmp_path / "m.onnx"
    onnx.save(_model(eq, feeds), str(path))
    with pytest.raises(ShapeError, match=msg):
        compile_model(path, output_dir=tmp_path / "out")


@pytest.mark.parametrize("eq", ["i1,i->", "ij->j->i"])
def test_unsupported_equation_names_it(eq, tmp_path):
    feeds = {f"x{k}": rand(3, 3, seed=k) for k in range(eq.split("->")[0].count(",") + 1)}
    feeds = {k: v[0] if eq.startswith("i1") else v for k, v in feeds.items()}
    path = tmp_path / "m.onnx"
    onnx.save(_model(eq, feeds), str(path))
    with pytest.raises(UnsupportedError, match=r"Einsum.*" + eq.replace(">", ".")):
        compile_model(path, output_dir=tmp_path / "out")
