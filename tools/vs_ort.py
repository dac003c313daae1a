"""Where a zoo model's time goes in aotc and in ONNX Runtime, kernel by kernel, in one run.

python -m tools.vs_ort MODEL [--size full] [--target native] [--threads 1] [--runs 20] [--top 25]

aotc runs with kernel timing on (aotc.load(..., profile=True)), ONNX Runtime with its profiler
(SessionOptions.enable_profiling; the same intra-op thread count), alternately on the same
inputs. ONNX Runtime fuses nodes too, and names a fused node after the output of its last
node (relu_371_out_nchwc, or "fused gemm_14"): each of its nodes is charged to the aotc kernel holding that
ONNX node, or the node feeding it where aotc folded the node away (a BatchNormalization into
its Conv). The table lists the kernels by how much longer aotc takes than ONNX Runtime's
nodes for the same work; a negative difference: aotc is faster there.
"""
from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import onnx

from aotc.api import load
from aotc.compiler import compile_model

from .profile import zoo_model


def ort_node_times(path: Path, feeds: dict, threads: int, runs: int, run_aotc, workdir: Path) -> dict[str, float]:
    """ms per run of each node ONNX Runtime ran (its profiler's kernel times), `run_aotc()`
    called after each of its runs (so that both see the same machine state)."""
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.enable_profiling = True
    so.profile_file_prefix = str(workdir / "ort_profile")
    s = ort.InferenceSession(str(path), so)
    warm = 3
    for _ in range(warm + runs):
        s.run(None, feeds)
        run_aotc()
    events = json.loads(Path(s.end_profiling()).read_text())
    times: dict[str, float] = {}
    for e in events:
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
            n = e["name"][:-len("_kernel_time")]
            times[n] = times.get(n, 0.0) + e["dur"] / 1000.0
    return {n: t / (warm + runs) for n, t in times.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("--size", default="full", choices=["small", "full"])
    ap.add_argument("--target", default="native")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--workdir", type=Path, default=Path("build/vs_ort"))
    a = ap.parse_args()
    path, shapes, feeds = zoo_model(a.model, a.size, a.workdir)
    out = compile_model(path, target=a.target, output_dir=a.workdir / f"{a.model}_{a.size}", threads=a.threads,
                        shapes=shapes)
    m = load(out, threads=a.threads, profile=True)
    for _ in range(3):
        m.run(feeds)
    before = dict(m.profile())
    ort_t = ort_node_times(path, feeds, a.threads, a.runs, lambda: m.run(feeds), a.workdir)
    # aotc ran warm-up + runs times alongside; count the same runs as ONNX Runtime's average
    mine = [(k, (t - before.get(k, 0.0)) / (3 + a.runs), re.findall(r"'([^']+)'", k)) for k, t in m.profile()]

    g = onnx.load(str(path)).graph
    by_name = {n.name: n for n in g.node}
    producer = {o: n for n in g.node for o in n.output}
    owner = {n: i for i, (_, _, nodes) in enumerate(mine) for n in nodes}
    theirs = [0.0] * len(mine)
    unmatched: dict[str, float] = {}
    for name, t in ort_t.items():
        node = re.sub(r"(_out)?(_nchwc)?$", "", re.sub(r"^fused ", "", name))
        for _ in range(8):          # a node aotc folded away: charge the node feeding it
            if node in owner or node not in by_name:
                break
            src = producer.get(by_name[node].input[0]) if by_name[node].input else None
            node = src.name if src is not None else ""
        if node in owner:
            theirs[owner[node]] += t
        else:
            unmatched[name] = t
    total_mine, total_theirs = sum(t for _, t, _ in mine), sum(ort_t.values())
    print(f"{a.model} ({a.size}, {a.target}, {a.threads} thread(s)): aotc {total_mine:.3f} ms in kernels, "
          f"ONNX Runtime {total_theirs:.3f} ms in nodes ({sum(unmatched.values()):.3f} ms not matched to a kernel)")
    print(f"{'kernel':<60} {'aotc ms':>8} {'ORT ms':>8} {'diff':>8}")
    rows = sorted(zip(mine, theirs), key=lambda r: -(r[0][1] - r[1]))
    for (k, t, _), o in rows[:a.top]:
        print(f"{k[:60]:<60} {t:8.3f} {o:8.3f} {t - o:+8.3f}")
    if unmatched:
        top = sorted(unmatched.items(), key=lambda x: -x[1])[:8]
        print("ONNX Runtime nodes not matched:", ", ".join(f"{n} {t:.3f}" for n, t in top))


if __name__ == "__main__":
    main()
