"""One MatMulNBits (ONNX Runtime's block-quantized weights) timed in aotc and in ONNX Runtime,
alternating in one process (aotc.bench.time_engines: rounds of back-to-back runs per engine,
medians): aotc's packed kernel (aotc.MatMulNBits, ops/nbits.py) at accuracy_level 0 (float32
activations, exact) and 4 (int8 activations, runtime/aotc_nbits.h), against the float32 MatMul of
the same dequantized weights (what aotc compiled before the weights stayed packed), ONNX
Runtime on the node at accuracy_level 0 (float32 activations: the numbers aotc computes) and
at 4 (int8 activations, its CPU default in onnxruntime-genai's models), and ONNX Runtime's
float32 MatMul. Also each artifact's weight bytes.

python -m tools.nbits_bench [--k 4096] [--n 4096] [--m 1] [--bits 4] [--block 32] [--asymmetric]
                            [--threads 1] [--runs 60] [--rounds 6] [--target native]
"""
from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def _pack(vals: np.ndarray, bits: int) -> np.ndarray:
    """Values of `bits` bits along the last axis -> bytes, low bits first."""
    per = 8 // bits
    v = vals.astype(np.uint8).reshape(*vals.shape[:-1], -1, per)
    return sum((v[..., i] << (i * bits)) for i in range(per)).astype(np.uint8)


def models(k: int, n: int, m: int, bits: int, block: int, symmetric: bool, rng) -> tuple[dict, np.ndarray]:
    """{level 0 node, level 4 node, float32 MatMul} as ModelProtos, and an input."""
    kb = -(-k // block)
    q = rng.integers(0, 1 << bits, (n, kb * block))
    q[:, k:] = 0
    scales = rng.uniform(0.01, 0.1, (n, kb)).astype(np.float32)
    zero = np.full((n, kb), 1 << (bits - 1))
    inits = {"B": _pack(q, bits).reshape(n, kb, block * bits // 8), "scales": scales.reshape(-1)}
    if not symmetric:
        zero = rng.integers(0, 1 << bits, (n, kb))
        per = 8 // bits
        inits["zp"] = _pack(np.pad(zero, ((0, 0), (0, -(-kb // per) * per - kb))), bits).reshape(-1)
    w = ((q - np.repeat(zero, block, axis=1)).astype(np.float32) * np.repeat(scales, block, axis=1))[:, :k]
    a = rng.standard_normal((m, k)).astype(np.float32)
    a_info = helper.make_tensor_value_info("a", TensorProto.FLOAT, [m, k])
    y_info = helper.make_tensor_value_info("y", TensorProto.FLOAT, [m, n])
    out = {}
    for level in (0, 4):
        node = helper.make_node("MatMulNBits", ["a"] + list(inits), ["y"], domain="com.microsoft", K=k, N=n,
                                bits=bits, block_size=block, accuracy_level=level)
        g = helper.make_graph([node], "nbits", [a_info], [y_info],
                              [numpy_helper.from_array(v, name) for name, v in inits.items()])
        out[f"level{level}"] = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                                                   helper.make_opsetid("com.microsoft", 1)])
    g = helper.make_graph([helper.make_node("MatMul", ["a", "w"], ["y"])], "float", [a_info], [y_info],
                          [numpy_helper.from_array(np.ascontiguousarray(w.T), "w")])
    out["float32"] = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    for mp in out.values():
        mp.ir_version = 8
    return out, a


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--k", type=int, default=4096)
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--m", type=int, default=1)
    ap.add_argument("--bits", type=int, default=4)
    ap.add_argument("--block", type=int, default=32)
    ap.add_argument("--asymmetric", action="store_true", help="packed zero points (default: symmetric)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--runs", type=int, default=60)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--target", default="native")
    args = ap.parse_args()

    from aotc.bench import BoundInstance, ort_session, time_engines
    from aotc.compiler import compile_model
    mps, a = models(args.k, args.n, args.m, args.bits, args.block, not args.asymmetric, np.random.default_rng(0))
    with tempfile.TemporaryDirectory(prefix="nbits-bench-") as work:
        paths = {}
        for name, mp in mps.items():
            paths[name] = Path(work) / f"{name}.onnx"
            onnx.save(mp, str(paths[name]))
        engines, outputs, weights = {}, {}, {}
        for name, label in (("level0", "aotc packed"), ("level4", "aotc level 4"), ("float32", "aotc float32")):
            out = compile_model(paths[name], target=args.target, output_dir=Path(work) / name, threads=args.threads)
            inst = BoundInstance(out, {"a": a}, threads=args.threads)
            weights[label] = json.loads((out / "manifest.json").read_text())["weights"]["bytes"]
            engines[label], outputs[label] = inst.run, inst.outputs[0]
            target = inst.lib.manifest["target"]
        for name, label in (("level0", "ORT level 0"), ("level4", "ORT level 4"), ("float32", "ORT float32")):
            sess = ort_session(paths[name], args.threads)
            engines[label] = (lambda s=sess, lb=label: outputs.__setitem__(lb, s.run(None, {"a": a})[0]))
        samples = time_engines(engines, args.runs, 5, args.rounds)
    med = {k: 1e3 * statistics.median(v) for k, v in samples.items()}
    form = f"{'symmetric' if not args.asymmetric else 'asymmetric'} {args.bits}-bit blocks of {args.block}"
    print(f"MatMulNBits {args.m} x {args.k} . {args.k} x {args.n}, {form}; target {target}, {args.threads} "
          f"thread(s); medians of {args.runs} runs per engine in {args.rounds} rounds (ms)")
    for k, v in med.items():
        ref = "ORT level 4" if "level 4" in k else "ORT level 0"      # (each against its own numerics)
        diff = float(np.abs(outputs[k] - outputs[ref]).max())
        print(f"  {k:14s} {v:9.3f}   {ref} / it {med[ref] / v:5.2f}   largest difference from {ref} {diff:.2e}")
    for k, v in weights.items():
        print(f"  {k} weights: {v} bytes")
    print(f"  float32 / packed weight bytes: {weights['aotc float32'] / weights['aotc packed']:.2f}")


if __name__ == "__main__":
    main()
