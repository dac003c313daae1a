"""Reduced precision on the CPU: aotc's `,bf16` option (float32 GEMMs with bfloat16 operands, on
AMX tiles or by AVX512-BF16's dot products) against aotc float32, ONNX Runtime and OpenVINO in float32 and in its bfloat16 mode.

python -m tools.bf16_bench [--models resnet50,bert] [--threads 1,2] [--runs 30] [--rounds 10]
                           [--report docs/PERFORMANCE.md]

Each zoo model (full size) runs in one process, the engines timed in alternating rounds
(aotc/bench.py time_engines): aotc on `native` and on `native,bf16`, ONNX Runtime (float32),
OpenVINO's CPU plugin with INFERENCE_PRECISION_HINT f32 and bf16 (bf16 is its default on CPUs
with AMX or AVX512-BF16), each at every thread count. It reports medians, aotc's bf16 speed-up
over its float32 and aotc bf16 / OpenVINO bf16, and how far the bf16 outputs are from float32
ONNX Runtime's (largest absolute difference over the largest magnitude); the bf16 ratio to
OpenVINO also paired round by round, as tools/bench.py's (the median over rounds of each round's
ratio of medians: this VM's slow periods move a ratio of whole-run medians). Needs a CPU with
AVX512-BF16 (elsewhere aotc's bf16 build runs float32, and the bench says so and stops); the
table's heading says which way the products ran (AMX where the CPU has AMX-BF16).
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import numpy as np

from aotc.bench import BoundInstance, ort_session, publish_report, time_engines
from aotc.check.inputs import sample_inputs
from aotc.compiler import compile_model
from aotc.frontend import import_model, load_onnx
from aotc.targets import bf16_by_dot_products, cpu_flags

from models.build import save
from tools.bench import paired_ratio, round_medians
from models.zoo import ZOO

BEGIN, END = "<!-- bf16-bench:begin -->", "<!-- bf16-bench:end -->"


def openvino_request(path: Path, feeds: dict, threads: int, precision: str):
    """An OpenVINO CPU inference request at `precision` (f32 / bf16), inputs bound once."""
    import openvino as ov
    core = ov.Core()
    compiled = core.compile_model(core.read_model(str(path)), "CPU", {
        "INFERENCE_PRECISION_HINT": precision, "INFERENCE_NUM_THREADS": threads, "NUM_STREAMS": 1,
        "PERFORMANCE_HINT": "LATENCY"})
    req = compiled.create_infer_request()
    for name, a in feeds.items():
        req.set_tensor(name, ov.Tensor(np.ascontiguousarray(a), shared_memory=True))
    return req


def _spread(got: list, want: list) -> float:
    """Largest |got - want| over the largest |want|, over every float output."""
    worst = 0.0
    for g, w in zip(got, want):
        g, w = np.asarray(g, np.float64), np.asarray(w, np.float64)
        if w.dtype.kind == "f" and w.size:
            worst = max(worst, float(np.abs(g - w).max() / max(np.abs(w).max(), 1e-30)))
    return worst


def bench_model(name: str, threads: list[int], runs: int, rounds: int, warmup: int, workdir: Path) -> dict:
    e = ZOO[name]
    path = workdir / f"{name}_full.onnx"
    save(e.build("full"), path)
    shapes = e.shapes_for("full")
    feeds = sample_inputs(import_model(load_onnx(path), name, shapes), seed=1)
    engines, spread = {}, {}
    reference = ort_session(path, 1).run(None, feeds)
    for t in threads:
        for variant, target in (("aotc f32", "native"), ("aotc bf16", "native,bf16")):
            out = compile_model(path, target=target, output_dir=workdir / f"{name}_{target}_{t}t", shapes=shapes,
                                threads=t)
            inst = BoundInstance(out, feeds, threads=t)
            inst.run()
            names = [o.name for o in load_onnx(path).graph.output]
            spread[variant] = _spread(inst.outputs, [reference[names.index(o[0])] for o in inst.lib.outputs])
            engines[f"{variant}, {t}t"] = inst.run
        sess = ort_session(path, t)
        engines[f"ORT f32, {t}t"] = (lambda s=sess: s.run(None, feeds))
        for p in ("f32", "bf16"):
            req = openvino_request(path, feeds, t, p)
            engines[f"OV {p}, {t}t"] = req.infer
    samples = time_engines(engines, runs, warmup, rounds)
    return {"model": name, "median_ms": {k: statistics.median(v) * 1e3 for k, v in samples.items()},
            "round_ms": round_medians(samples, rounds), "spread": spread}


def report(results: list[dict], threads: list[int]) -> str:
    import openvino as ov
    from tools.bench import _cpu_name
    way = "AVX512-BF16, no AMX" if bf16_by_dot_products() else "AMX"
    L = [BEGIN, "", f"### Reduced precision: `native,bf16` ({way})", "",
         "`python -m tools.bf16_bench` (`make bench-bf16`): medians in ms, engines alternating in one process; "
         f"{_cpu_name()}; OpenVINO {ov.get_version().split('-')[0]}. bf16 speed-up = aotc f32 / aotc bf16; "
         "vs OV bf16 = aotc bf16 / OpenVINO bf16 (below 1: aotc faster), of the medians and paired (the median "
         "over rounds of each round's ratio). Error: largest difference from ONNX Runtime float32 over the "
         "output's largest magnitude.", "",
         "| model | threads | aotc f32 | aotc bf16 | ORT f32 | OV f32 | OV bf16 | bf16 speed-up | vs OV bf16 | "
         "vs OV bf16, paired | bf16 error |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        m = r["median_ms"]
        for t in threads:
            f, b = m[f"aotc f32, {t}t"], m[f"aotc bf16, {t}t"]
            paired = paired_ratio(r["round_ms"], f"aotc bf16, {t}t", [f"OV bf16, {t}t"])
            L.append(f"| {r['model']} | {t} | {f:.2f} | {b:.2f} | {m[f'ORT f32, {t}t']:.2f} | {m[f'OV f32, {t}t']:.2f} "
                     f"| {m[f'OV bf16, {t}t']:.2f} | {f / b:.2f}x | {b / m[f'OV bf16, {t}t']:.2f} | {paired:.2f} | "
                     f"{r['spread']['aotc bf16']:.1e} |")
    L += ["", END]
    return "\n".join(L)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="resnet50,bert")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--workdir", type=Path, default=Path("build/bf16_bench"))
    ap.add_argument("--report", type=Path, default=None, help="Markdown file to update between its markers")
    a = ap.parse_args()
    if "avx512_bf16" not in cpu_flags():
        sys.exit("this CPU has no AVX512-BF16: aotc's bf16 build would run float32 here (nothing to measure)")
    a.workdir.mkdir(parents=True, exist_ok=True)
    threads = [int(x) for x in a.threads.split(",")]
    results = []
    for name in a.models.split(","):
        if name not in ZOO:
            sys.exit(f"unknown zoo model {name!r}")
        results.append(bench_model(name, threads, a.runs, a.rounds, a.warmup, a.workdir))
    publish_report(report(results, threads), a.report, BEGIN, END)


if __name__ == "__main__":
    main()
