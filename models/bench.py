"""Benchmark: aotc vs ONNX Runtime on zoo models, side by side in one run.

python -m models.bench [--size small|full] [--models a,b] [--runs 30] [--report docs/PERFORMANCE.md]

For each model: compile with aotc (target c and the best SIMD target this CPU has), run both
engines on the same inputs, `--warmup` runs first, then `--runs` timed runs each, interleaved
so machine noise hits both alike. Reports median latency and the ratio ORT/aotc (> 1 means
aotc is faster). ORT runs with 1 intra-op thread (aotc is single-threaded today) and with its
default thread count. Memory: aotc's arena vs the lower bound, and its weights.
"""
from __future__ import annotations

import argparse
import json
import platform
import re
import statistics
import time
from pathlib import Path

import onnxruntime as ort

from aotc.api import CompiledModel
from aotc.check.inputs import sample_inputs
from aotc.compiler import compile_model
from aotc.frontend import import_model, load_onnx

from .build import save
from .zoo import ZOO

BEGIN, END = "<!-- bench:begin -->", "<!-- bench:end -->"


def _cpu_flags() -> set[str]:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def best_simd_target() -> str | None:
    f = _cpu_flags()
    if {"avx512f", "avx512bw", "avx512dq", "avx512vl"} <= f:
        return "c-avx512"
    if {"avx2", "fma"} <= f:
        return "c-avx2"
    return None


def _time(fn, warmup: int) -> None:
    for _ in range(warmup):
        fn()


def bench_model(name: str, size: str, runs: int, warmup: int, workdir: Path, targets: list[str]) -> dict:
    e = ZOO[name]
    path = workdir / f"{name}_{size}.onnx"
    save(e.build(size), path)
    shapes = e.shapes_for(size)
    g = import_model(load_onnx(path), name, shapes)
    feeds = sample_inputs(g, seed=1)
    engines = {}
    info = {}
    for t in targets:
        out = compile_model(path, target=t, output_dir=workdir / f"{name}_{size}_{t}", shapes=shapes)
        m = CompiledModel(out)
        arrays = [feeds[k] for k in m.input_names]
        engines[f"aotc[{t}]"] = (lambda m=m, a=arrays: m.run(a))
        info[t] = m.manifest["memory_plan"]
    for threads in (1, 0):
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.log_severity_level = 3
        sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
        label = "ort[1 thread]" if threads == 1 else "ort[default threads]"
        engines[label] = (lambda s=sess: s.run(None, feeds))
    for fn in engines.values():
        _time(fn, warmup)
    samples = {k: [] for k in engines}
    for _ in range(runs):
        for k, fn in engines.items():       # interleaved: noise hits every engine alike
            t0 = time.perf_counter()
            fn()
            samples[k].append(time.perf_counter() - t0)
    med = {k: statistics.median(v) * 1e3 for k, v in samples.items()}
    return {"model": name, "size": size, "median_ms": med, "memory": info,
            "weights_bytes": next(iter(info.values()))["weights_bytes"]}


def render(results: list[dict], runs: int, warmup: int) -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    L = [BEGIN, "", f"Machine: {cpu}; onnxruntime {ort.__version__}; medians of {runs} interleaved runs after "
         f"{warmup} warm-up runs. Ratio = ORT median / aotc median (> 1: aotc faster).", "",
         "| model | size | engine | median ms | ORT(1 thread)/aotc | arena KiB | lower bound KiB | arena/LB |",
         "|---|---|---|---|---|---|---|---|"]
    for r in results:
        ort1 = r["median_ms"]["ort[1 thread]"]
        for k, v in r["median_ms"].items():
            if k.startswith("aotc"):
                t = k[5:-1]
                mp = r["memory"][t]
                lb = mp["lower_bound_bytes"]
                L.append(f"| {r['model']} | {r['size']} | {k} | {v:.3f} | {ort1 / v:.2f} | "
                         f"{mp['arena_bytes'] / 1024:.1f} | {lb / 1024:.1f} | "
                         f"{(mp['arena_bytes'] / lb if lb else 1):.3f} |")
            else:
                L.append(f"| {r['model']} | {r['size']} | {k} | {v:.3f} | | | | |")
    L += ["", END]
    return "\n".join(L)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", default="small", choices=["small", "full"])
    ap.add_argument("--models", default=None, help="comma-separated zoo names (default: all)")
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--workdir", type=Path, default=Path("build/bench"))
    ap.add_argument("--report", type=Path, default=None, help="Markdown file to update between bench markers")
    ap.add_argument("--json", type=Path, default=None)
    a = ap.parse_args()
    names = a.models.split(",") if a.models else list(ZOO)
    targets = ["c"] + ([best_simd_target()] if best_simd_target() else [])
    a.workdir.mkdir(parents=True, exist_ok=True)
    results = []
    for n in names:
        r = bench_model(n, a.size, a.runs, a.warmup, a.workdir, targets)
        results.append(r)
        print(f"{n:16} " + "  ".join(f"{k}={v:.3f}ms" for k, v in r["median_ms"].items()), flush=True)
    table = render(results, a.runs, a.warmup)
    print(table)
    if a.json:
        a.json.write_text(json.dumps(results, indent=2))
    if a.report:
        text = a.report.read_text() if a.report.exists() else f"# Performance\n\n{BEGIN}\n{END}\n"
        if BEGIN in text and END in text:
            text = re.sub(re.escape(BEGIN) + ".*?" + re.escape(END), lambda _: table, text, flags=re.S)
        else:
            text += "\n" + table + "\n"
        a.report.write_text(text)


if __name__ == "__main__":
    main()
