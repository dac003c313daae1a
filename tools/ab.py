"""A / B of artifacts of one model, compiled two (or more) ways: which is faster, and do they agree.

python -m tools.ab DIR_A DIR_B [DIR ...] [--threads 1] [--rounds 12] [--runs 20]
                   [--input NAME=FILE.npy ...] [--int-high 100] [--seed 0]

Measured as the A/Bs in docs/journal/performance.md are: in every round each artifact gets a
fresh instance (on this kind of VM, where an instance's memory lands moves memory-bound kernels
by 5-10% from one instance to the next, so one instance per artifact for a whole run misleads),
the artifacts run in an order rotated from round to round, each `--runs` timed invokes after
three untimed ones and a short pause. Inputs are the `--input` arrays, else random: normal
floats, integers in [0, --int-high) (token ids: keep it below the vocabulary), one set for the
whole run. Prints each artifact's median time and its ratio to the first's, and how its outputs
compare with the first's (bit-equal, or the largest difference). Exit status 1 when an
artifact's outputs differ from the first's in shape or by NaN placement (timing goes on).
"""
from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np


def _feeds(manifest: dict, given: dict, int_high: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    unknown = set(given) - {i["name"] for i in manifest["inputs"]}
    if unknown:
        raise SystemExit(f"--input {sorted(unknown)}: the artifacts have no such input "
                         f"({', '.join(i['name'] for i in manifest['inputs'])})")
    feeds = {}
    for i in manifest["inputs"]:
        name, dt = i["name"], np.dtype(i["dtype"])
        if name in given:
            feeds[name] = np.ascontiguousarray(given[name], dtype=dt)
            want = i["shape"]
            if len(want) != feeds[name].ndim or any(isinstance(w, int) and w != g for w, g in zip(want, feeds[name].shape)):
                raise SystemExit(f"--input {name}: shape {feeds[name].shape}, the artifact takes {want}")
        elif any(not isinstance(d, int) for d in i["shape"]):
            raise SystemExit(f"input {name!r} has run-time dimensions {i['shape']}: give it with --input")
        elif dt.kind in "iu":
            feeds[name] = rng.integers(0, int_high, i["shape"]).astype(dt)
        elif dt.kind == "b":
            feeds[name] = rng.integers(0, 2, i["shape"]).astype(dt)
        else:
            feeds[name] = rng.standard_normal(i["shape"]).astype(dt)
    return feeds


def _compare(a: list, b: list) -> tuple[str, bool]:
    """How outputs b compare with a: (text, whether they are comparable at all)."""
    worst, equal = 0.0, True
    for x, y in zip(a, b):
        if x.shape != y.shape or x.dtype != y.dtype:
            return f"output shapes differ ({x.shape} {x.dtype} vs {y.shape} {y.dtype})", False
        if np.array_equal(x, y, equal_nan=x.dtype.kind == "f"):
            continue
        equal = False
        if x.dtype.kind == "f":
            if not np.array_equal(np.isnan(x), np.isnan(y)):
                return "NaNs in different places", False
            worst = max(worst, float(np.nanmax(np.abs(x.astype(np.float64) - y.astype(np.float64)))))
        else:
            worst = max(worst, float(np.max(np.abs(x.astype(np.int64) - y.astype(np.int64)))))
    return ("bit-equal" if equal else f"largest difference {worst:.3g}"), True


def main(argv=None) -> int:
    from aotc.bench import BoundInstance
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dirs", nargs="+", type=Path, help="artifact directories (the first is the baseline)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--runs", type=int, default=20, help="timed runs per artifact per round")
    ap.add_argument("--input", action="append", default=[], metavar="NAME=FILE.npy")
    ap.add_argument("--int-high", type=int, default=100, help="random integer inputs lie in [0, this)")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    if len(a.dirs) < 2:
        ap.error("give at least two artifact directories")
    manifests = [json.loads((d / "manifest.json").read_text()) for d in a.dirs]
    specs = [[(i["name"], i["dtype"], list(i["shape"])) for i in m["inputs"]] for m in manifests]
    if any(sp != specs[0] for sp in specs):
        raise SystemExit("the artifacts take different inputs:\n" + "\n".join(f"  {d}: {sp}" for d, sp in zip(a.dirs, specs)))
    given = {}
    for spec in a.input:
        name, _, path = spec.partition("=")
        if not path:
            ap.error(f"--input {spec!r}: NAME=FILE.npy")
        given[name] = np.load(path)
    feeds = _feeds(manifests[0], given, a.int_high, a.seed)

    status, outputs = 0, []
    for d in a.dirs:
        inst = BoundInstance(d, feeds, threads=a.threads)
        inst.run()
        outputs.append([o.copy() for o in inst.outputs])
        del inst
    samples = {d: [] for d in a.dirs}
    for r in range(a.rounds):
        order = a.dirs[r % len(a.dirs):] + a.dirs[:r % len(a.dirs)]
        instances = {d: BoundInstance(d, feeds, threads=a.threads) for d in a.dirs}
        for d in order:
            run = instances[d].run
            for _ in range(3):
                run()
            time.sleep(0.05)
            for _ in range(a.runs):
                t = time.perf_counter()
                run()
                samples[d].append(time.perf_counter() - t)
        del instances
        gc.collect()
    base = statistics.median(samples[a.dirs[0]])
    print(f"{a.threads} thread(s), {a.rounds} rounds of {a.runs} runs, a fresh instance per artifact per round")
    for d, out in zip(a.dirs, outputs):
        m = statistics.median(samples[d])
        text, comparable = _compare(outputs[0], out)
        status |= 0 if comparable else 1
        print(f"{str(d):40s} {m * 1e3:9.3f} ms  ratio {m / base:.3f}  {text if d != a.dirs[0] else '(baseline)'}")
    return status


if __name__ == "__main__":
    sys.exit(main())
