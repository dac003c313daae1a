"""Weights and workspaces of at least 4 MiB are asked for in 2 MiB pages (runtime/aotc_support.h
aotc_aligned_alloc: madvise(MADV_HUGEPAGE) on Linux), which the kernel marks on the mapping
("hg" in /proc/<pid>/smaps' VmFlags) whether or not it then finds huge pages; and the artifact
computes the same with them."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from aotc.check.runner import reference_outputs
from aotc.compiler import compile_model

THP = Path("/sys/kernel/mm/transparent_hugepage/enabled")

# run in a fresh interpreter: numpy asks for huge pages on its own large arrays, so the mappings
# are counted before and after the artifact loads, with no large array made in between
PROBE = textwrap.dedent("""
    import json, sys
    import numpy as np
    from aotc.api import load

    def advised():
        spans, span = [], None
        for line in open("/proc/self/smaps"):
            head = line.split()
            if "-" in head[0] and ":" not in head[0]:
                lo, hi = (int(x, 16) for x in head[0].split("-"))
                span = hi - lo
            elif head[0] == "VmFlags:" and "hg" in head[1:]:
                spans.append(span)
        return sorted(spans)

    x = np.random.default_rng(1).standard_normal((1, 256)).astype(np.float32)
    before = advised()
    m = load(sys.argv[1], threads=1)
    y = m.run({"x": x})
    after = advised()
    y = list(y.values())[0] if isinstance(y, dict) else y
    np.save(sys.argv[2], y[0] if isinstance(y, (list, tuple)) else y)
    print(json.dumps({"before": before, "after": after}))
""")


def _model(tmp_path: Path, k: int, n: int) -> Path:
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array((rng.standard_normal((256, k)) / 16).astype(np.float32), "w1")
    w2 = numpy_helper.from_array((rng.standard_normal((k, n)) / 64).astype(np.float32), "w2")
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("MatMul", ["r", "w2"], ["y"])]
    g = helper.make_graph(nodes, "huge", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 256])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, n])], [w, w2])
    path = tmp_path / "huge.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="madvise(MADV_HUGEPAGE) is Linux's")
def test_large_weights_are_advised_into_huge_pages_and_compute_the_same(tmp_path):
    if not THP.exists() or "[never]" in THP.read_text():
        pytest.skip("this kernel has transparent huge pages off: nothing to advise")
    # 256 x 4096 + 4096 x 512 floats: 12 MiB of weights, read from their file into memory
    path = _model(tmp_path, 4096, 512)
    out = compile_model(path, target="c", output_dir=tmp_path / "out", threads=1, weights="external")
    r = subprocess.run([sys.executable, "-c", PROBE, str(out), str(tmp_path / "y.npy")], capture_output=True,
                       text=True, cwd=Path(__file__).resolve().parents[1], timeout=300)
    assert r.returncode == 0, r.stderr
    spans = json.loads(r.stdout.strip().splitlines()[-1])
    new = list(spans["after"])
    for s in spans["before"]:
        if s in new:
            new.remove(s)
    weights = 4 * (256 * 4096 + 4096 * 512)
    assert any(s >= weights for s in new), f"no advised mapping of the weights' size: {spans}"
    x = np.random.default_rng(1).standard_normal((1, 256)).astype(np.float32)
    ref = reference_outputs(path, {"x": x})[0]          # (ONNX Runtime)
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), ref, rtol=1e-4, atol=1e-5)
