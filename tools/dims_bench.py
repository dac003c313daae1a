"""Run-time dimensions (issue 28): what one ranged artifact costs against builds fixed to a size.

python -m tools.dims_bench [--models mlp,bert,gpt2] [--threads 1,2] [--runs 40] [--rounds 8]
                           [--report docs/PERFORMANCE.md]

For each zoo model (models/zoo.py, its small size, random weights) and each thread count, in one
process: a *ranged* build (its batch or sequence dim given a range with --dim), a build *fixed*
to the range's middle size, and one fixed to its largest size. Timed with aotc.bench's method
(warm-up, rounds in which each engine runs its share back to back, engines alternating):
  * ranged at the middle size over fixed at the middle size (the issue's target: geomean <= 1.10,
    worst <= 1.25);
  * ranged at the smallest size over fixed at the largest (what a user padding every input to
    the largest size pays, against what the ranged artifact costs);
  * compile seconds (ranged over fixed) and workspace bytes (ranged, fixed at the largest).
ONNX Runtime at the middle size is timed beside them. Medians in milliseconds, and ratios.
"""
from __future__ import annotations

import argparse
import math
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from aotc.bench import BoundInstance, ort_session, time_engines
from aotc.compiler import compile_model

from models.build import save
from models.zoo import ZOO

BEGIN, END = "<!-- dims-bench:begin -->", "<!-- dims-bench:end -->"

# model -> ({the dim given a range: (lo, hi)}, the middle size, the model's other dims, fixed)
CASES = {
    "mlp": ({"batch": (1, 64)}, 32, {}),
    "bert": ({"sequence": (1, 32)}, 16, {"batch": 1}),     # (its small size has 32 positions)
    "gpt2": ({"sequence": (1, 32)}, 16, {"batch": 1}),
}


def _feeds(path: Path, sizes: dict, seed: int) -> dict:
    """Random inputs at `sizes` (dim_param -> size; other symbolic dims 1), ints as token ids
    below 50 and masks of ones."""
    import onnx
    rng = np.random.default_rng(seed)
    m = onnx.load(str(path), load_external_data=False)
    inits = {t.name for t in m.graph.initializer}
    feeds = {}
    for i in m.graph.input:
        if i.name in inits:
            continue
        shape = [d.dim_value if d.HasField("dim_value") else sizes.get(d.dim_param, 1)
                 for d in i.type.tensor_type.shape.dim]
        if i.type.tensor_type.elem_type == onnx.TensorProto.INT64:
            feeds[i.name] = np.ones(shape, np.int64) if "mask" in i.name else rng.integers(0, 50, shape)
        else:
            feeds[i.name] = rng.standard_normal(shape).astype(np.float32)
    return feeds


def _shapes(feeds: dict) -> dict:
    return {k: tuple(v.shape) for k, v in feeds.items()}


def bench_model(name: str, threads: int, runs: int, rounds: int, work: Path) -> dict:
    rng_dims, mid, other = CASES[name]
    (dim, (lo, hi)), = rng_dims.items()
    path = work / f"{name}.onnx"
    if not path.exists():
        save(ZOO[name].build("small"), path)
    at = {k: _feeds(path, {**other, dim: n}, seed) for seed, (k, n) in enumerate((("lo", lo), ("mid", mid), ("hi", hi)))}
    compile_s, outs = {}, {}
    for key, kw in (("ranged", {"dims": {**rng_dims, **{k: (v, v) for k, v in other.items()}}}), ("fixed_mid", {"shapes": _shapes(at["mid"])}),
                    ("fixed_hi", {"shapes": _shapes(at["hi"])})):
        t0 = time.perf_counter()
        outs[key] = compile_model(path, target="native", output_dir=work / f"{name}_{key}_{threads}", name=name,
                                  threads=threads, **kw)
        compile_s[key] = time.perf_counter() - t0
    engines = {
        "ranged@mid": BoundInstance(outs["ranged"], at["mid"], threads).run,
        "fixed@mid": BoundInstance(outs["fixed_mid"], at["mid"], threads).run,
        "ranged@lo": BoundInstance(outs["ranged"], at["lo"], threads).run,
        "fixed@hi": BoundInstance(outs["fixed_hi"], at["hi"], threads).run,
    }
    sess = ort_session(path, threads)
    engines["ORT@mid"] = lambda: sess.run(None, at["mid"])
    samples = time_engines(engines, runs, warmup=5, rounds=rounds)
    med = {k: statistics.median(v) * 1e3 for k, v in samples.items()}
    import json
    ws = {k: json.loads((outs[k] / "manifest.json").read_text())["workspace_bytes"] for k in outs}
    return {"model": name, "dim": f"{dim} {lo}..{hi}", "mid": mid, "threads": threads, "ms": med,
            "ranged_over_fixed": med["ranged@mid"] / med["fixed@mid"],
            "small_over_padded": med["ranged@lo"] / med["fixed@hi"],
            "compile_ratio": compile_s["ranged"] / compile_s["fixed_mid"], "compile_s": compile_s,
            "workspace": ws}


def report(results: list[dict]) -> str:
    L = [BEGIN, "",
         f"`python -m tools.dims_bench` on {platform.machine()}, {len(set(r['threads'] for r in results))} thread "
         "count(s), target native; medians in ms.", "",
         "| model (range) | threads | ranged @ mid | fixed @ mid | ranged / fixed | ranged @ lo | fixed @ hi | "
         "lo / padded | ORT @ mid | compile ranged / fixed | workspace ranged / fixed@hi |",
         "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        ms = r["ms"]
        L.append(f"| {r['model']} ({r['dim']}, mid {r['mid']}) | {r['threads']} | {ms['ranged@mid']:.3f} | "
                 f"{ms['fixed@mid']:.3f} | **{r['ranged_over_fixed']:.2f}** | {ms['ranged@lo']:.3f} | "
                 f"{ms['fixed@hi']:.3f} | {r['small_over_padded']:.2f} | {ms['ORT@mid']:.3f} | "
                 f"{r['compile_ratio']:.2f} | {r['workspace']['ranged']} / {r['workspace']['fixed_hi']} |")
    for t in sorted({r["threads"] for r in results}):
        ratios = [r["ranged_over_fixed"] for r in results if r["threads"] == t]
        geo = math.exp(sum(math.log(x) for x in ratios) / len(ratios))
        L.append("")
        L.append(f"{t} thread(s): ranged over fixed at the middle size, geomean {geo:.2f}, worst {max(ratios):.2f}.")
    L += ["", END]
    return "\n".join(L)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default=",".join(CASES))
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--runs", type=int, default=40)
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--report", type=Path, help="replace the dims-bench section of this markdown file")
    a = ap.parse_args(argv)
    results = []
    with tempfile.TemporaryDirectory(prefix="aotc-dims-bench-") as work:
        for name in a.models.split(","):
            for t in (int(x) for x in a.threads.split(",")):
                r = bench_model(name, t, a.runs, a.rounds, Path(work))
                results.append(r)
                print(f"{name} t={t}: ranged/fixed {r['ranged_over_fixed']:.2f}, lo/padded "
                      f"{r['small_over_padded']:.2f}, compile x{r['compile_ratio']:.2f}", file=sys.stderr)
    text = report(results)
    print(text)
    if a.report:
        doc = a.report.read_text()
        if BEGIN in doc:
            doc = doc[:doc.index(BEGIN)] + text + doc[doc.index(END) + len(END):]
        else:
            doc += "\n" + text + "\n"
        a.report.write_text(doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
