"""A dynamically quantized BERT-base (the zoo's BERT through ONNX Runtime's quantize_dynamic,
int8 weights: DynamicQuantizeLinear + MatMulInteger + scale multiplies, as its tooling writes
it) compiled by aotc, beside ONNX Runtime on the same file: latency (medians of --runs runs,
in 3 rounds of back-to-back runs per engine, each after an untimed one) at each thread count, and how far each engine's
output is from the float model's (the quantization error) and from the other's.

The two engines' outputs are not equal, and cannot be: each layer quantizes its input with a
scale computed from that input's range (DynamicQuantizeLinear), and a LayerNormalization
output that differs in its last bit between the engines (7e-7) moves that scale by an ulp, so
some values round to the neighbouring 8-bit value and the difference propagates. What is
compared is that both are as far from the float model as each other.

python -m tools.qbert_bench [--runs 10] [--threads 1,2] [--seq 128] [--workdir DIR]
"""
from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import numpy as np
import onnx


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--target", default="native")
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/aotc-qbert"))
    a = ap.parse_args()
    import onnxruntime as ort
    from onnxruntime.quantization import QuantType, quantize_dynamic

    from aotc.api import load
    from aotc.compiler import compile_model

    from models.zoo import ZOO
    a.workdir.mkdir(parents=True, exist_ok=True)
    fp, q = a.workdir / "bert.onnx", a.workdir / "bert_int8.onnx"
    onnx.save(ZOO["bert"].build("full"), str(fp))
    quantize_dynamic(str(fp), str(q), weight_type=QuantType.QInt8)
    shapes = {"input_ids": (1, a.seq), "attention_mask": (1, a.seq)}
    rng = np.random.default_rng(0)
    feeds = {"input_ids": rng.integers(0, 1000, (1, a.seq)).astype(np.int64),
             "attention_mask": np.ones((1, a.seq), np.int64)}
    ref = ort.InferenceSession(str(fp)).run(None, feeds)[0]
    print(f"BERT-base, sequence {a.seq}, int8 weights (quantize_dynamic), target {a.target}")
    for threads in (int(t) for t in a.threads.split(",")):
        art = load(compile_model(q, target=a.target, output_dir=a.workdir / f"out{threads}", threads=threads,
                                 shapes=shapes), threads=threads)
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        s = ort.InferenceSession(str(q), so)
        engines = {"aotc": lambda: art.run(feeds), "ORT": lambda: s.run(None, feeds)}
        times: dict[str, list] = {k: [] for k in engines}
        # rounds in which each engine runs back to back (one engine's threads still spinning
        # after its run would slow the other's, as tools/bench.py notes)
        rounds = 3
        for r in range(rounds):
            for k, f in engines.items():
                f()
                for _ in range(-(-a.runs // rounds)):
                    t0 = time.perf_counter()
                    f()
                    times[k].append(time.perf_counter() - t0)
        med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
        ya, yo = np.asarray(art.run(feeds)[0]), np.asarray(s.run(None, feeds)[0])
        print(f"{threads} thread(s): aotc {med['aotc']:.1f} ms, ORT {med['ORT']:.1f} ms, ORT/aotc "
              f"{med['ORT'] / med['aotc']:.2f}; max |int8 - float|: aotc {np.abs(ya - ref).max():.3f}, ORT "
              f"{np.abs(yo - ref).max():.3f}; max |aotc - ORT| {np.abs(ya - yo).max():.3f}")


if __name__ == "__main__":
    main()
