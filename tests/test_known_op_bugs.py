"""Malformed models that the fuzzer (tests/fuzz_onnx.py) found getting past aotc: each is an
invalid model that ONNX Runtime refuses, and that aotc either crashes on (an internal error)
or compiles without a word. The checks belong in the operators' inference (aotc/ops), so
each test is a strict xfail until that is fixed: it asserts the behaviour we want (a one-line
AotcError), and turns into a failure the day the fix lands, so the mark is removed then.
The crash signatures are listed in tests/fuzz_onnx.py: KNOWN_CRASHES (prune them too)."""
from __future__ import annotations

import onnx
import pytest
from onnx import TensorProto, helper

from aotc.compiler import compile_program
from aotc.errors import AotcError

N = helper.make_node


def _vi(name, dims, elem=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, elem, dims)


def _model(node, inputs, tmp_path):
    m = helper.make_model(helper.make_graph([node], "g", inputs, [_vi("y", None)]),
                          opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    p = tmp_path / "model.onnx"
    onnx.save(m, str(p))
    return p


def refuses(path):
    with pytest.raises(AotcError):
        compile_program(path)


OPS_BUG = "aotc/ops: the operator's inference does not check this (see the module docstring)"


def test_conv_transpose_zero_stride(tmp_path):
    """strides=[1, 1, 0]: ZeroDivisionError in ops/window.py tap_range; strides=[0, 1] compiles."""
    x, w = _vi("x", [1, 1, 3, 3]), _vi("w", [1, 1, 2, 2])
    refuses(_model(N("ConvTranspose", ["x", "w"], ["y"], strides=[1, 1, 0]), [x, w], tmp_path))


def test_conv_transpose_zero_stride_compiles_silently(tmp_path):
    x, w = _vi("x", [1, 1, 3, 3]), _vi("w", [1, 1, 2, 2])
    refuses(_model(N("ConvTranspose", ["x", "w"], ["y"], strides=[0, 1]), [x, w], tmp_path))


def test_conv_transpose_pads_of_the_wrong_length(tmp_path):
    """pads=[1, 1] on a 2-D ConvTranspose (4 needed): IndexError in ops/conv.py _lower_convt."""
    x, w = _vi("x", [1, 1, 3, 3]), _vi("w", [1, 1, 2, 2])
    refuses(_model(N("ConvTranspose", ["x", "w"], ["y"], pads=[1, 1]), [x, w], tmp_path))


def test_conv_transpose_strides_of_the_wrong_length(tmp_path):
    x, w = _vi("x", [1, 1, 3, 3]), _vi("w", [1, 1, 2, 2])
    refuses(_model(N("ConvTranspose", ["x", "w"], ["y"], strides=[2]), [x, w], tmp_path))


def test_scatter_elements_updates_of_another_rank(tmp_path):
    """updates (1, 2, 1) for indices (1, 2): ValueError from kernel/ir.py flat() in
    ops/tensor.py _lower_scatter_elements."""
    ins = [_vi("d", [1, 5]), _vi("i", [1, 2], TensorProto.INT64), _vi("u", [1, 2, 1])]
    refuses(_model(N("ScatterElements", ["d", "i", "u"], ["y"], axis=1), ins, tmp_path))


def test_scatter_elements_updates_of_another_shape(tmp_path):
    """updates (1, 3) for indices (1, 2): compiles, and reads updates at the wrong places."""
    ins = [_vi("d", [1, 5]), _vi("i", [1, 2], TensorProto.INT64), _vi("u", [1, 3])]
    refuses(_model(N("ScatterElements", ["d", "i", "u"], ["y"], axis=1), ins, tmp_path))


@pytest.mark.parametrize("batch_dims", [2, -1, -2**62])
def test_gather_nd_batch_dims_out_of_range(batch_dims, tmp_path):
    """batch_dims must be in [0, rank(indices)): 2 and -1 compile; -2**62 raises IndexError
    in ops/tensor.py _lower_gather_nd."""
    ins = [_vi("d", [2, 2, 2]), _vi("i", [2, 1], TensorProto.INT64)]
    refuses(_model(N("GatherND", ["d", "i"], ["y"], batch_dims=batch_dims), ins, tmp_path))


def test_gather_elements_indices_larger_than_data(tmp_path):
    """indices (3, 2) for data (1, 5) along axis 1: compiles, and the kernel reads rows 1 and
    2 of a one-row buffer (outside it)."""
    ins = [_vi("d", [1, 5]), _vi("i", [3, 2], TensorProto.INT64)]
    refuses(_model(N("GatherElements", ["d", "i"], ["y"], axis=1), ins, tmp_path))


DIVIDE_BY_ZERO = r"""
import sys
import numpy as np
from aotc.api import CompiledModel
from aotc.errors import AotcError
m = CompiledModel(sys.argv[1])
try:
    m.run({"a": np.array([5, 7, -3, 9], np.int64), "b": np.array([2, 0, 1, -1], np.int64)})
except AotcError as e:          # a status code turned into an error is fine: the process lives
    print("status:", e.message)
print("alive")
"""


@pytest.mark.parametrize("op", ["Div", "Mod"])
def test_integer_division_by_zero_does_not_kill_the_process(op, tmp_path):
    """Run in a child process: a divide that traps would take the whole process down; the run
    returns AOTC_ERR_DIVIDE_BY_ZERO instead (tests/test_nan_semantics.py checks the message)."""
    import subprocess
    import sys
    from pathlib import Path

    from aotc.compiler import compile_model
    vi = _vi("a", [4], TensorProto.INT64), _vi("b", [4], TensorProto.INT64)
    m = helper.make_model(helper.make_graph([N(op, ["a", "b"], ["y"])], "g", list(vi),
                                            [_vi("y", [4], TensorProto.INT64)]),
                          opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, str(tmp_path / "m.onnx"))
    art = compile_model(tmp_path / "m.onnx", output_dir=tmp_path / "out")
    root = Path(__file__).resolve().parent.parent
    p = subprocess.run([sys.executable, "-c", DIVIDE_BY_ZERO, str(art)], capture_output=True, text=True,
                       timeout=120, cwd=root)
    assert p.returncode == 0 and "alive" in p.stdout, f"exit {p.returncode}: {p.stderr[-500:]}"


@pytest.mark.parametrize("min_shape", [[2], [7]])
def test_clip_bounds_that_are_not_scalars(min_shape, tmp_path):
    """Clip's min/max must be scalars: a (2,) min on a (3, 4, 5) input used to compile, and the
    kernel read min[0..4] (past the 2-element buffer); now a ShapeError at compile time."""
    ins = [_vi("x", [3, 4, 5]), _vi("min", min_shape)]
    refuses(_model(N("Clip", ["x", "min"], ["y"]), ins, tmp_path))
