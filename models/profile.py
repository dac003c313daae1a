"""Per-kernel time of a zoo model compiled by aotc, for each thread count, side by side.

python -m models.profile MODEL [--size full] [--target native] [--threads 1,2] [--runs 10] [--top 25]
                           [--by-strategy]

Each artifact is loaded with kernel timing on (aotc.load(..., profile=True)); after warm-up
runs, `--runs` runs are timed; the table lists the kernels taking most of the first thread
count's time, each with its ms per run and, for the others, the speed-up over the first.
`--by-strategy` adds the time summed by how each kernel was lowered (the first comment of its
body in the generated C: "1x1 convolution", "direct convolution", "im2col", ...).
"""
from __future__ import annotations

import argparse
import re
from pathlib import Path

from aotc.api import load
from aotc.check.inputs import sample_inputs
from aotc.compiler import compile_model
from aotc.frontend import import_model, load_onnx

from .build import save
from .zoo import ZOO


def zoo_model(name: str, size: str, workdir: Path) -> tuple[Path, dict, dict]:
    """Zoo model `name` saved under workdir: (its path, its input shapes, seeded inputs)."""
    e = ZOO[name]
    workdir.mkdir(parents=True, exist_ok=True)
    path = workdir / f"{name}_{size}.onnx"
    save(e.build(size), path)
    shapes = e.shapes_for(size)
    return path, shapes, sample_inputs(import_model(load_onnx(path), name, shapes), seed=1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("--size", default="full", choices=["small", "full"])
    ap.add_argument("--target", default="native")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--workdir", type=Path, default=Path("build/profile"))
    ap.add_argument("--by-strategy", action="store_true", help="also sum the time by lowering strategy")
    a = ap.parse_args()
    path, shapes, feeds = zoo_model(a.model, a.size, a.workdir)
    per: dict[int, dict[str, float]] = {}
    for t in [int(x) for x in a.threads.split(",")]:
        out = compile_model(path, target=a.target, output_dir=a.workdir / f"{a.model}_{a.size}_{t}", threads=t,
                            shapes=shapes)
        m = load(out, threads=t, profile=True)
        for _ in range(3):
            m.run(feeds)
        before = dict(m.profile())
        for _ in range(a.runs):
            m.run(feeds)
        per[t] = {k: (v - before[k]) / a.runs for k, v in m.profile()}
        sources = [f for f in out.glob("*.c") if not f.name.endswith("_weights.c")]
    first, *others = per
    total = {t: sum(d.values()) for t, d in per.items()}
    print(f"{a.model} ({a.size}, {a.target}): " + ", ".join(f"{t} thread(s) {total[t]:.2f} ms in kernels"
                                                            for t in per))
    head = f"{'kernel':90} {first}T ms  share" + "".join(f"  {t}T ms  speed-up" for t in others)
    print(head)
    for k, v in sorted(per[first].items(), key=lambda kv: -kv[1])[:a.top]:
        row = f"{k[:90]:90} {v:7.3f} {100 * v / total[first]:5.1f}%"
        for t in others:
            w = per[t].get(k, float("nan"))
            row += f"  {w:7.3f} {v / w if w else float('nan'):7.2f}x"
        print(row)
    if a.by_strategy:
        _by_strategy(per, sources)


def _strategy(comment: str) -> str:
    """A kernel's lowering, from its body's first comment, without the sizes in it."""
    text = re.sub(r"\(.*?\)|\b\d+( x \d+)*\b", "", comment.split(":")[0])
    return re.sub(r"\s+", " ", text).strip(" ,") or "?"


def _by_strategy(per: dict, sources: list[Path]) -> None:
    first_comment = {}
    for src in sources:
        for m in re.finditer(r"^static (?:void|int) (k\d+\w*)\(.*?\n\{\n\s*/\* (.*?) \*/", src.read_text(), re.M):
            first_comment[m.group(1)] = _strategy(m.group(2))
    sums: dict[str, dict[int, float]] = {}
    for t, d in per.items():
        for k, v in d.items():
            kind = first_comment.get(k.split(":")[0], "(no comment)")
            sums.setdefault(kind, {}).setdefault(t, 0.0)
            sums[kind][t] += v
    first = next(iter(per))
    print()
    print(f"{'lowering':60}" + "".join(f"  {t}T ms" for t in per))
    for kind, d in sorted(sums.items(), key=lambda kv: -kv[1].get(first, 0.0)):
        print(f"{kind[:60]:60}" + "".join(f"  {d.get(t, 0.0):6.3f}" for t in per))


if __name__ == "__main__":
    main()
