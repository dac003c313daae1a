"""Indices read from the data are checked at run time: an index outside [-n, n) stops the run
with AOTC_ERR_INDEX_OUT_OF_RANGE (a kernel status the run function returns), and the Python
API, `aotc run` and the C API name the kernel and the ONNX node; nothing is clamped into a
plausible-looking answer. In-range negative indices count from the end (the parity tests of
each op cover those); here the same models also run on valid indices, against ONNX Runtime."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from typer.testing import CliRunner

from aotc.api import compile as aotc_compile
from aotc.cli import app
from aotc.errors import RunError
from tests.helpers import assert_parity, rand, single_op_model

I64 = np.int64


def _cases():
    x = rand(10, 4, seed=1)
    yield ("Gather", {"x": x}, {"axis": 0}, "i", np.array([3, 99], I64), np.array([3, -10], I64))
    yield ("Gather", {"x": x}, {"axis": 0}, "i", np.array([[-11, 0]], I64), np.array([[-1, 9]], I64))
    yield ("GatherElements", {"x": x}, {"axis": 1}, "i", np.array([[0, 4]] * 10, I64), np.array([[0, -4]] * 10, I64))
    yield ("GatherND", {"x": x}, {}, "i", np.array([[9, 4]], I64), np.array([[9, 3]], I64))
    u = rand(2, 4, seed=2)
    yield ("ScatterND", {"x": x, "u": u}, {}, "i", np.array([[1], [10]], I64), np.array([[1], [-10]], I64))
    u2 = rand(10, 1, seed=3)
    yield ("ScatterElements", {"x": x, "u": u2}, {"axis": 1}, "i", np.full((10, 1), -5, I64),
           np.full((10, 1), -4, I64))


CASES = list(_cases())


def _model(op, data, attrs, iname, idx):
    inputs = dict(data)
    order = ["x", iname] + [k for k in data if k != "x"]
    inputs[iname] = idx
    return single_op_model(op, inputs, _order=order, **attrs)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("case", range(len(CASES)), ids=[f"{c[0]}-{k}" for k, c in enumerate(CASES)])
def test_index_out_of_range_is_an_error_naming_the_node(case, threads, tmp_path):
    op, data, attrs, iname, bad, good = CASES[case]
    m = _model(op, data, attrs, iname, bad)
    path = tmp_path / "m.onnx"
    onnx.save(m, str(path))
    cm = aotc_compile(path, target="c", output_dir=tmp_path / "out", threads=threads)
    feeds = {**data, iname: bad}
    with pytest.raises(RunError, match=rf"{op}.*index read from the input data is out of range"):
        cm.run(feeds)
    # the same model on valid indices matches ONNX Runtime, and the failed instance is usable again
    (tmp_path / "ok").mkdir()
    feeds = {**data, iname: good}
    assert_parity(_model(op, data, attrs, iname, good), tmp_path / "ok", feeds, target="c", threads=threads)
    cm.run(feeds)


def test_aotc_run_reports_the_failing_node(tmp_path):
    op, data, attrs, iname, bad, _ = CASES[0]
    path = tmp_path / "m.onnx"
    onnx.save(_model(op, data, attrs, iname, bad), str(path))
    runner = CliRunner()
    r = runner.invoke(app, ["compile", str(path), "-o", str(tmp_path / "out"), "--target", "c"])
    assert r.exit_code == 0, r.output
    np.save(tmp_path / "x.npy", data["x"])
    np.save(tmp_path / "i.npy", bad)
    r = runner.invoke(app, ["run", str(tmp_path / "out"), "--input", f"x={tmp_path / 'x.npy'}",
                            "--input", f"i={tmp_path / 'i.npy'}", "--output-dir", str(tmp_path / "res")])
    assert r.exit_code == 2, r.output
    assert "Gather" in r.output and "out of range" in r.output and "internal error" not in r.output


def test_constant_index_out_of_range_is_a_compile_error(tmp_path):
    from aotc.errors import ShapeError
    x = rand(3, 4, seed=4)
    m = single_op_model("Gather", {"x": x}, inits={"i": np.array(7, I64)}, axis=0)
    path = tmp_path / "m.onnx"
    onnx.save(m, str(path))
    with pytest.raises(ShapeError, match="index 7 is out of range for axis 0 of size 3"):
        aotc_compile(path, target="c", output_dir=tmp_path / "out")
