"""Every zoo model (small variant) compiles and matches ONNX Runtime."""
import onnx
import pytest

from aotc.check.runner import run_check
from models.zoo import ZOO


@pytest.mark.parametrize("name", sorted(ZOO))
def test_zoo_model_parity(name, tmp_path):
    e = ZOO[name]
    path = tmp_path / f"{name}.onnx"
    onnx.save(e.build("small"), str(path))
    res = run_check(path, shapes=e.shapes_for("small"), rtol=e.rtol, atol=e.atol, output_dir=tmp_path / "out",
                    seed=3)
    assert res.outputs
    for o in res.outputs:
        assert o.passed, f"{name}/{o.name}: max_abs={o.max_abs_err:.3g} max_rel={o.max_rel_err:.3g} {o.note}"
