"""Quantized products beside ONNX Runtime: ConvInteger and QLinearConv on 56 x 56 (uint8 x,
int8 w), 64 -> 64 channels, 3x3 with pad 1 (576 products per output: an integer Gemm) and 1x1
(64 products: summed in float32, exactly); MatMulInteger and QLinearMatMul of a uint8 [128, 768]
by int8 weights [768, 768] and [768, 3072] (BERT-base's projections at sequence 128, as ONNX
Runtime's dynamic or static quantization writes them). aotc (1 thread) beside ONNX Runtime (1
thread), medians of 15 runs after 3 warm-up runs, and whether the outputs are equal.

python -m tools.qconv_bench [--workdir DIR] [--target native]
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto as TP
from onnx import helper, numpy_helper

from aotc.api import load
from aotc.compiler import compile_model


def model(op: str, k: int, rng) -> onnx.ModelProto:
    w = rng.integers(-127, 127, size=(64, 64, k, k)).astype(np.int8)
    inits = [numpy_helper.from_array(w, "w")]
    if op == "ConvInteger":
        ins, out_t = ["x", "w", "xz", "wz"], TP.INT32
        inits += [numpy_helper.from_array(np.array(128, np.uint8), "xz"),
                  numpy_helper.from_array(np.array(0, np.int8), "wz")]
    else:
        ins, out_t = ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"], TP.UINT8
        inits += [numpy_helper.from_array(np.array(0.02, np.float32), "xs"),
                  numpy_helper.from_array(np.array(128, np.uint8), "xz"),
                  numpy_helper.from_array(rng.uniform(0.001, 0.01, 64).astype(np.float32), "ws"),
                  numpy_helper.from_array(np.zeros(64, np.int8), "wz"),
                  numpy_helper.from_array(np.array(0.5, np.float32), "ys"),
                  numpy_helper.from_array(np.array(100, np.uint8), "yz"),
                  numpy_helper.from_array(rng.integers(-1000, 1000, 64).astype(np.int32), "b")]
    pad = (k - 1) // 2
    g = helper.make_graph([helper.make_node(op, ins, ["y"], pads=[pad] * 4)], "g",
                          [helper.make_tensor_value_info("x", TP.UINT8, (1, 64, 56, 56))],
                          [helper.make_tensor_value_info("y", out_t, None)], initializer=inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


def matmul_model(op: str, K: int, N: int, rng) -> onnx.ModelProto:
    inits = [numpy_helper.from_array(rng.integers(-127, 127, size=(K, N)).astype(np.int8), "w"),
             numpy_helper.from_array(np.array(128, np.uint8), "az"), numpy_helper.from_array(np.array(0, np.int8), "wz")]
    if op == "MatMulInteger":
        ins, out_t = ["a", "w", "az", "wz"], TP.INT32
    else:
        ins, out_t = ["a", "as", "az", "w", "ws", "wz", "ys", "yz"], TP.UINT8
        inits += [numpy_helper.from_array(np.array(0.02, np.float32), "as"),
                  numpy_helper.from_array(rng.uniform(0.0005, 0.002, N).astype(np.float32), "ws"),
                  numpy_helper.from_array(np.array(0.5, np.float32), "ys"),
                  numpy_helper.from_array(np.array(100, np.uint8), "yz")]
    g = helper.make_graph([helper.make_node(op, ins, ["y"])], "g",
                          [helper.make_tensor_value_info("a", TP.UINT8, (128, K))],
                          [helper.make_tensor_value_info("y", out_t, None)], initializer=inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


def median_ms(f, runs: int = 15) -> float:
    for _ in range(3):
        f()
    ts = []
    for _ in range(runs):
        t0 = time.perf_counter()
        f()
        ts.append(time.perf_counter() - t0)
    return float(np.median(ts)) * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workdir", default="/tmp/aotc-qconv")
    ap.add_argument("--target", default="native")
    a = ap.parse_args()
    work = Path(a.workdir)
    work.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    x = rng.integers(0, 255, size=(1, 64, 56, 56)).astype(np.uint8)
    cases = [(f"{op} {k}x{k}", model(op, k, rng), {"x": x}) for k in (3, 1) for op in ("ConvInteger", "QLinearConv")]
    for K, N in ((768, 768), (768, 3072)):
        feeds = {"a": rng.integers(0, 255, size=(128, K)).astype(np.uint8)}
        cases += [(f"{op} 128x{K}x{N}", matmul_model(op, K, N, rng), feeds) for op in ("MatMulInteger", "QLinearMatMul")]
    for label, m, feeds in cases:
        p = work / (label.replace(" ", "_") + ".onnx")
        onnx.save(m, str(p))
        art = load(compile_model(p, target=a.target, output_dir=p.with_suffix("")), threads=1)
        so = ort.SessionOptions()
        so.intra_op_num_threads = 1
        s = ort.InferenceSession(str(p), so, providers=["CPUExecutionProvider"])
        same = np.array_equal(art.run(feeds)[0], s.run(None, feeds)[0])
        ta, tr = median_ms(lambda: art.run(feeds)), median_ms(lambda: s.run(None, feeds))
        print(f"{label}: aotc {ta:.2f} ms, ORT {tr:.2f} ms, ORT/aotc {tr / ta:.2f}, equal {same}")


if __name__ == "__main__":
    main()
