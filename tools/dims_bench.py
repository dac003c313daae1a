"""Run-time dimensions (issue 28): what one ranged artifact costs against builds fixed to a size.

python -m tools.dims_bench [--models mlp,bert,gpt2,cnn,resnet50,mobilenetv2,ocr_det,ocr_rec]
                           [--threads 1,2] [--runs 40] [--rounds 8] [--size small|full]
                           [--target native] [--report docs/PERFORMANCE.md]

For each model (the zoo's small MLP, BERT and GPT-2 over their batch or sequence dim, its small
ResNet-50 and MobileNetV2 over height and width, models/zoo.py; a small CNN and a text detector
and recognizer exported by torch.onnx over their sides, models/dynamic_cnn.py and
dynamic_ocr.py; random weights) and each
thread count, in one process: a *ranged* build (--dim, or a ranged --shape), a build *fixed* to
the range's middle size, and one fixed to its largest size. Timed with aotc.bench's method
(warm-up, rounds in which each engine runs its share back to back, engines alternating):
  * ranged at the middle size over fixed at the middle size (the issue's target: geomean <= 1.10,
    worst <= 1.25);
  * ranged at the smallest size over fixed at the largest (what a user padding every input to
    the largest size pays, against what the ranged artifact costs), and over a build fixed to
    the smallest size (what the small input still pays for the range);
  * compile seconds (ranged over fixed) and workspace bytes (ranged, fixed at the largest).
ONNX Runtime (CPU) at the middle size is timed beside them on a CPU target. Medians in
milliseconds, and ratios. --target cuda:sm_90 (on a GPU: tools/gpu_lease.sh) times the cuda
artifacts instead, one thread.
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

from aotc.bench import BoundInstance, ort_session, publish_report, time_engines
from aotc.compiler import compile_model
from aotc.targets import load_target

from models.build import save, symbolic_input
from models.dynamic_cnn import export_cnn
from models.dynamic_ocr import export_detector, export_recognizer
from models.zoo import ZOO

BEGIN, END = "<!-- dims-bench:begin -->", "<!-- dims-bench:end -->"

# model -> (how the ranged build is compiled, {point: shapes of the inputs there}): the zoo's
# small models over their batch or sequence dim; a CNN over its height and width
CASES = {
    "mlp": ({"dims": {"batch": (1, 64)}}, {"lo": {"x": (1, 64)}, "mid": {"x": (32, 64)}, "hi": {"x": (64, 64)}}),
    "bert": ({"dims": {"sequence": (1, 32), "batch": (1, 1)}},            # (its small size has 32 positions)
             {p: {"input_ids": (1, n), "attention_mask": (1, n)} for p, n in (("lo", 1), ("mid", 16), ("hi", 32))}),
    "gpt2": ({"dims": {"sequence": (1, 32), "batch": (1, 1)}},
             {p: {"input_ids": (1, n)} for p, n in (("lo", 1), ("mid", 16), ("hi", 32))}),
    "cnn": ({"shapes": {"x": (1, 3, (32, 128, 16), (32, 128, 16))}},
            {p: {"x": (1, 3, n, n)} for p, n in (("lo", 32), ("mid", 64), ("hi", 128))}),
}
CASES.update({
    # the zoo's small CNNs with their input made symbolic (models/build.py symbolic_input)
    "resnet50": ({"shapes": {"x": (1, 3, (32, 128, 32), (32, 128, 32))}},
                 {p: {"x": (1, 3, n, n)} for p, n in (("lo", 32), ("mid", 64), ("hi", 128))}),
    "mobilenetv2": ({"shapes": {"x": (1, 3, (32, 128, 32), (32, 128, 32))}},
                    {p: {"x": (1, 3, n, n)} for p, n in (("lo", 32), ("mid", 64), ("hi", 128))}),
    # models/dynamic_ocr.py: pages and text lines
    "ocr_det": ({"shapes": {"x": (1, 3, (32, 256, 32), (32, 256, 32))}},
                {p: {"x": (1, 3, n, n)} for p, n in (("lo", 32), ("mid", 128), ("hi", 256))}),
    "ocr_rec": ({"shapes": {"x": (1, 3, 48, (8, 320, 4))}},
                {p: {"x": (1, 3, 48, n)} for p, n in (("lo", 8), ("mid", 160), ("hi", 320))}),
})
RANGES = {"mlp": "batch 1..64", "bert": "sequence 1..32", "gpt2": "sequence 1..32", "cnn": "H, W 32..128%16",
          "resnet50": "H, W 32..128%32", "mobilenetv2": "H, W 32..128%32", "ocr_det": "H, W 32..256%32",
          "ocr_rec": "W 8..320%4"}
# --size full: the zoo's full-size models (BERT-base over 1..128 positions, GPT-2 small over 1..64,
# ResNet-50 and MobileNetV2 over sides of 128..320)
FULL = {
    "bert": ({"dims": {"sequence": (1, 128), "batch": (1, 1)}},
             {p: {"input_ids": (1, n), "attention_mask": (1, n)} for p, n in (("lo", 1), ("mid", 64), ("hi", 128))}),
    "gpt2": ({"dims": {"sequence": (1, 64), "batch": (1, 1)}},
             {p: {"input_ids": (1, n)} for p, n in (("lo", 1), ("mid", 32), ("hi", 64))}),
}
FULL.update({
    # the full-size CNNs over height and width around their 224 x 224
    name: ({"shapes": {"x": (1, 3, (128, 320, 32), (128, 320, 32))}},
           {p: {"x": (1, 3, n, n)} for p, n in (("lo", 128), ("mid", 224), ("hi", 320))})
    for name in ("resnet50", "mobilenetv2")})
FULL_RANGES = {"bert": "sequence 1..128", "gpt2": "sequence 1..64", "resnet50": "H, W 128..320%32",
               "mobilenetv2": "H, W 128..320%32"}


def _feeds(shapes: dict, seed: int) -> dict:
    """Random inputs of these shapes: token ids below 50 and masks of ones for int64 inputs."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, shape in shapes.items():
        if name == "attention_mask":
            out[name] = np.ones(shape, np.int64)
        elif name == "input_ids":
            out[name] = rng.integers(0, 50, shape)
        else:
            out[name] = rng.standard_normal(shape).astype(np.float32)
    return out


def bench_model(name: str, threads: int, runs: int, rounds: int, work: Path, size: str = "small",
                target: str = "native") -> dict:
    ranged_kw, points = (FULL if size == "full" else CASES)[name]
    path = work / f"{name}_{size}.onnx"
    if not path.exists():
        if name == "cnn":
            export_cnn(path, width=32)
        elif name == "ocr_det":
            export_detector(path)
        elif name == "ocr_rec":
            export_recognizer(path)
        elif name in ("resnet50", "mobilenetv2"):
            save(symbolic_input(ZOO[name].build(size), ["batch", None, "h", "w"]), path)
        else:
            save(ZOO[name].build(size), path)
    at = {k: _feeds(points[k], seed) for seed, k in enumerate(("lo", "mid", "hi"))}
    compile_s, outs = {}, {}
    for key, kw in (("ranged", ranged_kw), ("fixed_mid", {"shapes": points["mid"]}), ("fixed_hi", {"shapes": points["hi"]}),
                    ("fixed_lo", {"shapes": points["lo"]})):
        t0 = time.perf_counter()
        outs[key] = compile_model(path, target=target, output_dir=work / f"{name}_{key}_{threads}", name=name,
                                  threads=threads, **kw)
        compile_s[key] = time.perf_counter() - t0
    engines = {
        "ranged@mid": BoundInstance(outs["ranged"], at["mid"], threads).run,
        "fixed@mid": BoundInstance(outs["fixed_mid"], at["mid"], threads).run,
        "ranged@lo": BoundInstance(outs["ranged"], at["lo"], threads).run,
        "fixed@hi": BoundInstance(outs["fixed_hi"], at["hi"], threads).run,
        "fixed@lo": BoundInstance(outs["fixed_lo"], at["lo"], threads).run,
    }
    if not load_target(target).is_gpu:
        sess = ort_session(path, threads)
        engines["ORT@mid"] = lambda: sess.run(None, at["mid"])
    samples = time_engines(engines, runs, warmup=5, rounds=rounds)
    med = {k: statistics.median(v) * 1e3 for k, v in samples.items()}
    import json
    ws = {k: json.loads((outs[k] / "manifest.json").read_text())["workspace_bytes"] for k in outs}
    mid = "x".join(str(d) for d in next(iter(points["mid"].values())))
    return {"model": name + (" (full)" if size == "full" else ""), "target": target,
            "dim": (FULL_RANGES if size == "full" else RANGES)[name], "mid": mid, "threads": threads, "ms": med,
            "ranged_over_fixed": med["ranged@mid"] / med["fixed@mid"],
            "small_over_padded": med["ranged@lo"] / med["fixed@hi"],
            "small_over_fixed": med["ranged@lo"] / med["fixed@lo"],
            "compile_ratio": compile_s["ranged"] / compile_s["fixed_mid"], "compile_s": compile_s,
            "workspace": ws}


def report(results: list[dict]) -> str:
    L = [BEGIN, "",
         f"`python -m tools.dims_bench` on {platform.machine()}, {len(set(r['threads'] for r in results))} thread "
         f"count(s), target {results[0]['target'] if results else 'native'}; medians in ms.", "",
         "| model (range) | threads | ranged @ mid | fixed @ mid | ranged / fixed | ranged @ lo | fixed @ lo | "
         "lo: ranged / fixed | fixed @ hi | lo / padded | ORT @ mid | compile ranged / fixed | "
         "workspace ranged / fixed@hi |",
         "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        ms = r["ms"]
        L.append(f"| {r['model']} ({r['dim']}; mid {r['mid']}) | {r['threads']} | {ms['ranged@mid']:.3f} | "
                 f"{ms['fixed@mid']:.3f} | **{r['ranged_over_fixed']:.2f}** | {ms['ranged@lo']:.3f} | "
                 f"{ms['fixed@lo']:.3f} | {r['small_over_fixed']:.2f} | "
                 f"{ms['fixed@hi']:.3f} | {r['small_over_padded']:.2f} | "
                 f"{format(ms['ORT@mid'], '.3f') if 'ORT@mid' in ms else '-'} | "
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
    ap.add_argument("--size", choices=("small", "full"), default="small",
                    help="the zoo's small models (and the CNN), or its full-size BERT-base, GPT-2, ResNet-50 "
                         "and MobileNetV2")
    ap.add_argument("--target", default="native", help="the target compiled for (cuda:sm_90 on a GPU: one thread)")
    ap.add_argument("--report", type=Path, help="replace the dims-bench section of this markdown file")
    a = ap.parse_args(argv)
    results = []
    models = a.models if a.size == "small" or a.models != ",".join(CASES) else ",".join(FULL)
    with tempfile.TemporaryDirectory(prefix="aotc-dims-bench-") as work:
        for name in models.split(","):
            for t in (int(x) for x in a.threads.split(",")):
                r = bench_model(name, t, a.runs, a.rounds, Path(work), a.size, a.target)
                results.append(r)
                print(f"{name} t={t}: ranged/fixed {r['ranged_over_fixed']:.2f}, at lo ranged/fixed "
                      f"{r['small_over_fixed']:.2f}, lo/padded {r['small_over_padded']:.2f}, "
                      f"compile x{r['compile_ratio']:.2f}", file=sys.stderr)
    text = report(results)
    publish_report(text, a.report, BEGIN, END)
    return 0


if __name__ == "__main__":
    sys.exit(main())
