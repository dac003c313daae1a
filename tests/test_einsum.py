"""Einsum against ONNX Runtime (and numpy.einsum) on random operands: transposes, traces,
diagonals, sums, outer products, matrix products (batched, attention-shaped), three operands,
ellipses with broadcasting, implicit outputs, integer operands."""
import numpy as np
import pytest
from onnx import helper

from aotc.compiler import compile_model
from aotc.errors import ShapeError
from tests.helpers import assert_parity, graph_model, rand

CASES = [
    ("ij->ji", [(3, 4)]),
    ("ii->", [(5, 5)]),
    ("ii->i", [(4, 4)]),
    ("ij->", [(3, 7)]),
    ("ij->j", [(3, 7)]),
    ("i,j->ij", [(3,), (4,)]),
    ("ij,jk->ik", [(3, 5), (5, 4)]),
    ("bij,bjk->bik", [(2, 3, 5), (2, 5, 4)]),
    ("bhid,bhjd->bhij", [(2, 3, 4, 8), (2, 3, 5, 8)]),
    ("bhij,bhjd->bhid", [(2, 3, 4, 5), (2, 3, 5, 8)]),
    ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)]),
    ("...ij,...jk->...ik", [(2, 3, 4, 5), (2, 3, 5, 6)]),
    ("...ij,...jk->...ik", [(2, 1, 4, 5), (1, 3, 5, 6)]),
    ("i...,i...->...", [(4, 2, 3), (4, 2, 3)]),
    ("ij,jk", [(3, 5), (5, 4)]),
    ("ba,ca", [(3, 4), (5, 4)]),
    ("bii->bi", [(2, 3, 3)]),
    (" ij , jk -> ik ", [(3, 5), (5, 4)]),
]


@pytest.mark.parametrize("eq, shapes", CASES, ids=[c[0].replace(" ", "_") for c in CASES])
def test_einsum(eq, shapes, tmp_path):
    feeds = {f"x{k}": rand(*s, seed=k + 1) for k, s in enumerate(shapes)}
    m = graph_model([helper.make_node("Einsum", list(feeds), ["y"], equation=eq)], feeds, ["y"], opset=12)
    assert_parity(m, tmp_path, feeds)
    # and numpy's reading of the same equation agrees with ONNX Runtime's (a check of the test)
    np.einsum(eq.replace(" ", ""), *feeds.values())


def test_ellipsis_of_different_ranks_against_numpy(tmp_path):
    """Ellipses of different ranks broadcast right-aligned (numpy's reading; ONNX Runtime
    requires equal ranks)."""
    from aotc.api import load
    a, b = rand(2, 3, 4, 5, seed=8), rand(3, 5, 6, seed=9)
    m = graph_model([helper.make_node("Einsum", ["a", "b"], ["y"], equation="...ij,...jk->...ik")],
                    {"a": a, "b": b}, ["y"], opset=12)
    path = tmp_path / "m.onnx"
    path.write_bytes(m.SerializeToString())
    out = load(compile_model(path, output_dir=tmp_path / "out")).run({"a": a, "b": b})
    y = out["y"] if isinstance(out, dict) else out[0]
    np.testing.assert_allclose(y, np.einsum("...ij,...jk->...ik", a, b), rtol=1e-5, atol=1e-5)


def test_einsum_integers(tmp_path):
    rng = np.random.default_rng(3)
    a, b = rng.integers(-20, 20, size=(3, 4)).astype(np.int64), rng.integers(-20, 20, size=(4, 2)).astype(np.int64)
    m = graph_model([helper.make_node("Einsum", ["a", "b"], ["y"], equation="ij,jk->ik")], {"a": a, "b": b}, ["y"],
                    opset=12)
    assert_parity(m, tmp_path, {"a": a, "b": b})


@pytest.mark.parametrize("eq, shapes, msg", [
    ("ij,jk->ik", [(3, 4), (5, 2)], "label 'j'"),
    ("ij->k", [(3, 4)], "output label 'k'"),
    ("ijk->i", [(3, 4)], "3 labels for rank 2"),
])
def test_bad_equations_are_shape_errors(eq, shapes, msg, tmp_path):
    feeds = {f"x{k}": rand(*s, seed=k) for k, s in enumerate(shapes)}
    m = graph_model([helper.make_node("Einsum", list(feeds), ["y"], equation=eq)], feeds, ["y"], opset=12)
    path = tmp_path / "m.onnx"
    path.write_bytes(m.SerializeToString())
    with pytest.raises(Exception, match=msg) as e:
        compile_model(path, output_dir=tmp_path / "out")
    assert isinstance(e.value, ShapeError) or "ShapeError" in type(e.value).__name__ or "Model" in type(e.value).__name__
