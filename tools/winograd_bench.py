"""3 x 3 convolutions (+ bias + ReLU): aotc's direct lowering (im2col GEMM), Winograd F(2x2, 3x3)
and F(4x4, 3x3), beside ONNX Runtime, on the shapes CNNs spend their time in.

python -m tools.winograd_bench [--target native] [--runs 15] [--threads 1] [--workdir build/winograd_bench]

Each form is forced on every shape (the cost model of aotc/passes/winograd.py, which picks one
in a real compile, is bypassed), so that its MIN_GAIN and TRANSFORM_COST can be checked against
these numbers. Medians of `--runs` runs after 3 warm-up runs, the engines taking turns, in ms.
"""
from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import aotc.passes.winograd as pw
from aotc.api import load
from aotc.compiler import compile_model

# (input channels, output channels, plane side): ResNet-50's four stages, YOLO-style wide planes
SHAPES = [(64, 64, 56), (128, 128, 28), (256, 256, 14), (512, 512, 7), (32, 32, 80), (16, 32, 160),
          (128, 64, 40)]


def conv_relu(path: Path, C: int, M: int, S: int) -> None:
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((M, C, 3, 3)) * (2.0 / (9 * C)) ** 0.5).astype(np.float32)
    b = rng.standard_normal(M).astype(np.float32)
    g = helper.make_graph(
        [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["y"])],
        "conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, C, S, S])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, M, S, S])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, str(path))


def main() -> None:
    import onnxruntime as ort
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default="native")
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--workdir", type=Path, default=Path("build/winograd_bench"))
    a = ap.parse_args()
    a.workdir.mkdir(parents=True, exist_ok=True)
    forms = [("direct", f"{a.target},direct_conv", None), ("F(2x2)", a.target, 2), ("F(4x4)", f"{a.target},winograd4", 4)]
    choose = pw.choose_tile
    rows = []
    for C, M, S in SHAPES:
        path = a.workdir / f"conv_{C}_{M}_{S}.onnx"
        conv_relu(path, C, M, S)
        x = np.random.default_rng(1).standard_normal((1, C, S, S)).astype(np.float32)
        run = {}
        for label, target, m in forms:
            pw.choose_tile = (lambda *_, m=m, **__: m) if m else choose
            try:
                out = compile_model(path, target=target, output_dir=a.workdir / f"{path.stem}_{m or 'direct'}",
                                    threads=a.threads)
            finally:
                pw.choose_tile = choose
            run[label] = load(out, threads=a.threads).run
        so = ort.SessionOptions()
        so.intra_op_num_threads = a.threads
        sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
        run["ORT"] = lambda feeds, s=sess: s.run(None, feeds)
        times: dict[str, list[float]] = {k: [] for k in run}
        for f in run.values():
            for _ in range(3):
                f({"x": x})
        for _ in range(a.runs):
            for k, f in run.items():
                t0 = time.perf_counter()
                f({"x": x})
                times[k].append((time.perf_counter() - t0) * 1e3)
        med = {k: statistics.median(v) for k, v in times.items()}
        picked = choose(1, C, M, S, S, (2, 4))
        rows.append((C, M, S, med, choose(1, C, M, S, S), picked))
        print(f"{C:4} -> {M:4}, {S:3} x {S:<3}" + "".join(f"  {k} {v:7.3f}" for k, v in med.items()), flush=True)
    print()
    print("| channels | plane | direct | F(2x2) | F(4x4) | ONNX Runtime | direct / F(2x2) | direct / F(4x4) "
          "| cost model: default, with winograd4 |")
    print("|---|---|---|---|---|---|---|---|---|")
    for C, M, S, med, d, w4 in rows:
        name = {None: "direct", 2: "F(2x2)", 4: "F(4x4)"}
        print(f"| {C} -> {M} | {S} x {S} | {med['direct']:.3f} | {med['F(2x2)']:.3f} | {med['F(4x4)']:.3f} | "
              f"{med['ORT']:.3f} | {med['direct'] / med['F(2x2)']:.2f} | {med['direct'] / med['F(4x4)']:.2f} | "
              f"{name[d]}, {name[w4]} |")


if __name__ == "__main__":
    main()
