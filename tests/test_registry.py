"""Adding an operator is one registry entry (aotc/ops/registry.py): operators defined here, in a
test module alone, with nothing else of aotc edited, compile, fuse, are listed in the support
table, and tell `aotc check` which inputs are indices. They are registered in a fresh
interpreter, so the registry every other test sees stays the real one."""
from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

SCRIPT = textwrap.dedent('''
    import numpy as np
    from onnx import TensorProto, helper

    import aotc
    from aotc.check.inputs import sample_inputs
    from aotc.frontend import import_model
    from aotc.kernel.ir import SPATIAL, Load, const
    from aotc.ops.registry import register
    from aotc.support import matrix

    # an elementwise op: the scalar function is all it takes (it fuses like the standard ones)
    @register("ToyScaleShift", pointwise=lambda node, args: args[0] * const(float(node.attr("scale", 1.0)))
              + const(float(node.attr("shift", 0.0))))
    def _scale_shift(node, ins):
        return [(ins[0].dtype, ins[0].shape)]

    # a kernel: rows of the data taken at the indices, each index checked (index_inputs tells
    # `aotc check` to draw the indices within the rows)
    def _lower_take(node, ctx):
        x, idx = ctx.ins
        y = ctx.outs[0]
        rows, cols = ctx.value(0).shape
        b = ctx.b
        with b.loop(idx.size, "r", role=SPATIAL) as r:
            k = b.local("k", Load(idx, r))
            with b.if_(k >= rows):
                b.fail("AOTC_ERR_INDEX_OUT_OF_RANGE")
            with b.loop(cols, "c", role=SPATIAL) as c:
                b.store(y, r * cols + c, Load(x, k * cols + c))

    @register("ToyTake", lower=_lower_take,
              index_inputs=lambda node, ins: {1: ins[0].shape[0]} if ins[0] is not None else {})
    def _take(node, ins):
        return [(ins[0].dtype, (ins[1].shape[0], ins[0].shape[1]))]

    rng = np.random.default_rng(5)
    w = rng.standard_normal((6, 4)).astype(np.float32)
    table = rng.standard_normal((9, 4)).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]),
             helper.make_node("ToyScaleShift", ["m"], ["s"], scale=2.0, shift=0.5),
             helper.make_node("Relu", ["s"], ["r"]),
             helper.make_node("ToyTake", ["table", "idx"], ["t"]),
             helper.make_node("Add", ["r", "t"], ["y"])]
    graph = helper.make_graph(nodes, "toy", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [5, 6]),
                                             helper.make_tensor_value_info("idx", TensorProto.INT64, [5])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [5, 4])],
                              [helper.make_tensor("w", TensorProto.FLOAT, w.shape, w.reshape(-1)),
                               helper.make_tensor("table", TensorProto.FLOAT, table.shape, table.reshape(-1))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path = OUT + "/toy.onnx"
    open(path, "wb").write(model.SerializeToString())

    x = rng.standard_normal((5, 6)).astype(np.float32)
    idx = np.array([8, 0, 3, 3, 1], np.int64)
    m = aotc.compile(path, target="c", output_dir=OUT + "/out", threads=1)
    got = m.run({"x": x, "idx": idx})[0]
    want = np.maximum(x @ w * 2.0 + 0.5, 0) + table[idx]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    try:
        m.run({"x": x, "idx": np.array([0, 1, 9, 3, 4], np.int64)})
        raise SystemExit("an index out of range was not refused")
    except aotc.AotcError as e:
        assert "ToyTake" in str(e), e

    import json
    kernels = json.load(open(OUT + "/out/manifest.json"))["kernels"]
    print("kernels", [k["nodes"] for k in kernels])
    drawn = sample_inputs(import_model(model, "toy"), seed=1)["idx"]
    assert drawn.min() >= 0 and drawn.max() <= 8 and len(set(drawn.tolist())) > 2, drawn
    table = matrix()
    assert "| ToyScaleShift | yes | elementwise (fusable) |" in table and "| ToyTake | yes | kernel |" in table
    print("ok")
''')


def test_an_operator_is_one_registry_entry(tmp_path):
    res = subprocess.run([sys.executable, "-c", f"OUT = {str(tmp_path)!r}\n" + SCRIPT], capture_output=True,
                         text=True, cwd=ROOT, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    assert res.stdout.strip().endswith("ok"), res.stdout
    # the elementwise toy fused into the MatMul's kernel, with the Relu after it
    kernels = eval(res.stdout.splitlines()[0].removeprefix("kernels "))
    assert any(all(op in k for op in ("MatMul", "ToyScaleShift", "Relu")) for k in kernels), kernels
