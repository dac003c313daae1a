"""Subnormal weights and activations: what computing them as zero saves (issue 32's first item).

python -m tools.subnormal_bench [--runs 30] [--rounds 5] [--share 0.1]

Two 1x1 convolutions 768 -> 384 -> 768 channels on a 20 x 20 plane (the shape that took 73% of
an OCR text detector's time, with about a tenth of its trained weights subnormal), with that
share of each weight tensor drawn among the subnormals. Compiled three ways for this machine's
native target at 1 thread: as aotc does by default (subnormal weights made zero, the run
flushing subnormal results), with `,ieee_subnormals` (IEEE numbers, the x86 slow path), and the
model with those weights zeroed by hand (the speed without subnormals). Each artifact runs
`--runs` times per round, the three alternating over `--rounds` rounds in one process; prints
medians in ms and the ratios to the zeroed model.
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def model(share: float, zeroed: bool, seed: int = 0) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    tiny = np.finfo(np.float32).tiny
    inits = []
    for name, shape in (("w1", (384, 768, 1, 1)), ("w2", (768, 384, 1, 1))):
        w = (rng.standard_normal(shape) / np.sqrt(shape[1])).astype(np.float32)
        sub = rng.random(shape) < share
        w[sub] = 0 if zeroed else (rng.uniform(0.1, 1.0, int(sub.sum())) * tiny).astype(np.float32)
        inits.append(numpy_helper.from_array(w, name))
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"]), helper.make_node("Relu", ["a"], ["r"]),
             helper.make_node("Conv", ["r", "w2"], ["y"])]
    g = helper.make_graph(nodes, "subnormal_convs", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                                  [1, 768, 20, 20])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 768, 20, 20])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--share", type=float, default=0.1)
    a = ap.parse_args(argv)
    from aotc.api import load
    from aotc.compiler import compile_model
    from aotc.targets import native_target
    native = native_target()
    x = np.random.default_rng(1).standard_normal((1, 768, 20, 20)).astype(np.float32)
    arts = {}
    with tempfile.TemporaryDirectory() as d:
        for label, zeroed, target in (("subnormal weights, aotc's default", False, native),
                                      ("subnormal weights, ,ieee_subnormals", False, f"{native},ieee_subnormals"),
                                      ("weights zeroed by hand", True, native)):
            path = Path(d) / f"{len(arts)}.onnx"
            onnx.save(model(a.share, zeroed), str(path))
            arts[label] = load(compile_model(path, target=target, output_dir=Path(d) / f"out{len(arts)}", threads=1),
                               threads=1)
        times = {k: [] for k in arts}
        for m in arts.values():
            for _ in range(3):
                m.run({"x": x})
        for r in range(a.rounds):
            order = list(arts) if r % 2 == 0 else list(reversed(arts))
            for k in order:
                for _ in range(a.runs // a.rounds or 1):
                    t0 = time.perf_counter()
                    arts[k].run({"x": x})
                    times[k].append((time.perf_counter() - t0) * 1e3)
    base = statistics.median(times["weights zeroed by hand"])
    print(f"target {native}, 1 thread, {a.share:.0%} of each weight tensor subnormal; medians of {a.runs} runs")
    for k, t in times.items():
        med = statistics.median(t)
        print(f"  {k:40} {med:8.3f} ms   {med / base:6.2f}x the zeroed model")


if __name__ == "__main__":
    main()
