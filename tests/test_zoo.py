"""Every zoo model (small variant) compiles for the native target and matches ONNX Runtime, on
one thread and on two (the opencl target's run is in test_opencl.py; full size: make zoo-full)."""
import onnx
import pytest

from aotc.check.runner import run_check
from models.zoo import ZOO


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("name", sorted(ZOO))
def test_zoo_model_parity(name, threads, tmp_path):
    e = ZOO[name]
    path = tmp_path / f"{name}.onnx"
    onnx.save(e.build("small"), str(path))
    res = run_check(path, shapes=e.shapes_for("small"), rtol=e.rtol, atol=e.atol, output_dir=tmp_path / "out",
                    seed=3, threads=threads)
    assert res.outputs
    for o in res.outputs:
        assert o.passed, (f"{name}/{o.name} on {threads} thread(s): max_abs={o.max_abs_err:.3g} "
                          f"max_rel={o.max_rel_err:.3g} {o.note}")
