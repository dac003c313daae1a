"""Per-kernel time of a zoo model compiled by aotc, for each thread count, side by side.

python -m tools.profile MODEL [--size full] [--target native] [--threads 1,2] [--runs 10] [--top 25]
                           [--by-strategy] [--ort] [--qdq]

Each artifact is loaded with kernel timing on (aotc.load(..., profile=True)); after warm-up
runs, `--runs` runs are timed; the table lists the kernels taking most of the first thread
count's time, each with its ms per run and, for the others, the speed-up over the first.
`--by-strategy` adds the time summed by how each kernel was lowered (the first comment of its
body in the generated C: "1x1 convolution", "direct convolution", "im2col", ...).
`--ort` adds ONNX Runtime's per-node time at the first thread count (its own profiler, same
inputs and run counts) beside each kernel: the ORT nodes whose names hold one of the kernel's
node names (ORT names a fused or re-laid-out node after one of its sources), and lists the ORT
nodes no kernel claimed (layout reorders, nodes aotc folded away).
`--qdq` profiles the model statically quantized in the QDQ format (tools/qdq_bench.py; full
size only).
"""
from __future__ import annotations

import argparse
import json
import re
from collections import defaultdict
from pathlib import Path

from aotc.api import load
from aotc.check.inputs import sample_inputs
from aotc.compiler import compile_model
from aotc.frontend import import_model, load_onnx

from models.build import save
from models.zoo import ZOO


def zoo_model(name: str, size: str, workdir: Path, qdq: bool = False) -> tuple[Path, dict, dict]:
    """Zoo model `name` saved under workdir: (its path, its input shapes, seeded inputs); with
    `qdq`, statically quantized (QDQ format, as tools/qdq_bench.py makes it)."""
    e = ZOO[name]
    workdir.mkdir(parents=True, exist_ok=True)
    path = workdir / f"{name}_{size}.onnx"
    save(e.build(size), path)
    shapes = e.shapes_for(size)
    if qdq:
        import numpy as np
        from .qdq_bench import quantized
        path = quantized(name, workdir / "qdq", np.random.default_rng(0))[1]
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
    ap.add_argument("--ort", action="store_true", help="also ONNX Runtime's per-node time beside each kernel")
    ap.add_argument("--qdq", action="store_true", help="the model statically quantized, QDQ format (full size)")
    a = ap.parse_args()
    path, shapes, feeds = zoo_model(a.model, a.size, a.workdir, a.qdq)
    per: dict[int, dict[str, float]] = {}
    for t in [int(x) for x in a.threads.split(",")]:
        out = compile_model(path, target=a.target, output_dir=a.workdir / f"{path.stem}_{a.size}_{t}", threads=t,
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
    ort_of: dict[str, float] = {}
    unclaimed: dict[str, float] = {}
    if a.ort:
        ort_of, unclaimed = _ort_beside(path, feeds, first, a.runs, list(per[first]), a.workdir)
    print(f"{a.model} ({a.size}, {a.target}): " + ", ".join(f"{t} thread(s) {total[t]:.2f} ms in kernels"
                                                            for t in per)
          + (f"; ORT {first} thread(s) {sum(ort_of.values()) + sum(unclaimed.values()):.2f} ms in nodes"
             if a.ort else ""))
    head = f"{'kernel':90} {first}T ms  share" + "".join(f"  {t}T ms  speed-up" for t in others)
    print(head + ("  ORT ms  ORT/aotc" if a.ort else ""))
    for k, v in sorted(per[first].items(), key=lambda kv: -kv[1])[:a.top]:
        row = f"{k[:90]:90} {v:7.3f} {100 * v / total[first]:5.1f}%"
        for t in others:
            w = per[t].get(k, float("nan"))
            row += f"  {w:7.3f} {v / w if w else float('nan'):7.2f}x"
        if a.ort:
            o = ort_of.get(k, 0.0)
            row += f"  {o:6.3f}  {o / v if v else float('nan'):6.2f}"
        print(row)
    if unclaimed:
        print(f"\nORT nodes no kernel claimed: {sum(unclaimed.values()):.3f} ms")
        for n, v in sorted(unclaimed.items(), key=lambda kv: -kv[1])[:a.top]:
            print(f"  {n[:88]:88} {v:7.3f}")
    if a.by_strategy:
        _by_strategy(per, sources)


def _ort_beside(path: Path, feeds: dict, threads: int, runs: int, kernels: list[str],
                workdir: Path) -> tuple[dict[str, float], dict[str, float]]:
    """ONNX Runtime's per-node ms per run, summed onto the aotc kernels that compute the same nodes.

    A kernel's label names its nodes ("Conv 'conv_29', Clip 'clip_37'"); an ORT node is matched
    to a kernel by name (see _owner).
    Returns (ms per kernel label, ms per ORT node that no kernel claimed)."""
    import onnx
    import onnxruntime as ort

    producers = {o: n for n in onnx.load(str(path), load_external_data=False).graph.node for o in n.output}

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.enable_profiling = True
    so.profile_file_prefix = str(workdir / "ort_profile")
    sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    for _ in range(3 + runs):
        sess.run(None, feeds)
    events = json.loads(Path(sess.end_profiling()).read_text())
    per_node: dict[str, list[float]] = defaultdict(list)
    for e in events:
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
            per_node[e["name"][:-len("_kernel_time")]].append(e["dur"] / 1000.0)
    ms = {n: sum(v[-runs:]) / len(v[-runs:]) for n, v in per_node.items()}
    owner_of = {n: k for k in kernels for n in re.findall(r"'([^']+)'", k)}
    claimed: dict[str, float] = defaultdict(float)
    unclaimed: dict[str, float] = {}
    for node, v in ms.items():
        owner = _owner(node, owner_of, producers)
        if owner is None:
            unclaimed[node] = v
        else:
            claimed[owner] += v
    return dict(claimed), unclaimed


def _owner(ort_node: str, owner_of: dict[str, str], producers: dict) -> str | None:
    """The aotc kernel that computes ORT node `ort_node`, or None.

    ORT keeps a node's name, or names a node it made (a fused or re-laid-out one) after a tensor
    of the source model ("clip_37_out_nchwc") or a node ("conv_2_token_1", a QDQ island, which
    aotc's rewrite names "conv_2/qlinear/..."). Either names an ONNX node; when no kernel label
    holds that node (aotc folded it into its producer, as a BatchNormalization into a Conv),
    its first input's producer is tried, a few steps up."""
    if ort_node in owner_of:
        return owner_of[ort_node]
    # a node ORT made from a QDQ island ("conv_2_token_1") for one aotc rewrote ("conv_2/qlinear/...")
    base = re.sub(r"_token_\d+$", "", ort_node)
    for name, kernel in owner_of.items():
        if name == base or name.startswith(base + "/"):
            return kernel
    tensors = [t for t in producers if ort_node.startswith(t)]
    if not tensors:
        return None
    node = producers[max(tensors, key=len)]
    for _ in range(4):
        if node.name in owner_of:
            return owner_of[node.name]
        if not node.input or node.input[0] not in producers:
            return None
        node = producers[node.input[0]]
    return None


def _strategy(comment: str) -> str:
    """A kernel's lowering, from its body's first comment, without the sizes in it (a list of
    them in brackets: [...])."""
    text = re.sub(r"\[[^\]]*\]", "[...]", comment.split(":")[0])
    text = re.sub(r"\(.*?\)|\b\d+( x \d+)*\b", "", text)
    return re.sub(r"\s+", " ", text).strip(" ,") or "?"


# comments the C printer writes at the top of a kernel's body, before the lowering's own
_PRINTER_NOTES = ("bounds of max / min selects",)


def _by_strategy(per: dict, sources: list[Path]) -> None:
    first_comment = {}
    for src in sources:
        text = src.read_text()
        for m in re.finditer(r"^static (?:void|int) (k\d+\w*)\(.*?\n\{\n", text, re.M):
            body = text[m.end():text.find("\n}\n", m.end())]
            # (the kernel's own statements' comments, not those of the loops inside them)
            comments = [c for c in re.findall(r"^ {4}/\* (.*?) \*/", body, re.M) if not c.startswith(_PRINTER_NOTES)]
            if not comments:
                continue
            # (the schedule, not the lowering, chooses a convolution's sums by broadcast)
            broadcast = ".conv_broadcast = 1" in body
            first_comment[m.group(1)] = "convolution summed by broadcast" if broadcast else _strategy(comments[0])
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
