"""Benchmark: aotc vs ONNX Runtime on zoo models, side by side in one run.

python -m tools.bench [--size small|full] [--models a,b] [--runs 15] [--min-block-ms 20] [--threads 1,2]
                       [--baseline-checkout DIR] [--opencl] [--openvino] [--report docs/PERFORMANCE.md]

For each model, every engine runs on the same inputs: aotc on `--target` (default native)
compiled for each thread count of `--threads` and run with it; ONNX Runtime with the same
intra-op thread counts; optionally OpenVINO's CPU plugin (`--openvino`, the `bench` extra) with
as many inference threads, one stream, the latency hint and float32 precision (its default on
CPUs with bfloat16 instructions is bfloat16, which would not compute the same model);
optionally aotc as built by another checkout (`--baseline-checkout`,
e.g. a worktree of the commit before a change: its artifact runs through its own C API,
`<name>_run_with_weights`, on one thread), and the opencl target (`--opencl`, on whatever
OpenCL device is first: PoCL here, a CPU driver). `--warmup` runs first; then `--rounds`
rounds, in each of which every engine in turn runs `--runs / --rounds` timed runs back to back
(as a serving loop would) after a pause and one untimed run, or more where those would take less
than `--min-block-ms` (20 ms: a model of tens of microseconds runs hundreds of times a round, so
that its median is of a warm core, not of the first runs after the pause, which moved such cells
by 1.5x from run to run). Engines alternate round by round,
so slow drifts of a shared machine hit all alike; runs of one engine are not interleaved with
another's, whose thread pool would still be spinning on the same cores (ONNX Runtime's and
aotc's both spin for a while after a run). Each model is measured in a fresh process.
Reports medians and ratios, and, with OpenVINO, aotc's time over the best other engine's paired
round by round: in each round aotc's median over the faster of ONNX Runtime's and OpenVINO's in
that round, the median of those ratios over the rounds. A slow period of the machine (seconds to
minutes on a shared VM) lasting a round slows every engine of that round alike, so it moves the
paired ratio far less than a ratio of medians, where it may hit one engine's runs more than
another's.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import re
import statistics
import subprocess
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import onnxruntime as ort

from aotc.bench import MIN_BLOCK_MS, BoundInstance, ort_session, time_engines
from aotc.check.inputs import sample_inputs
from aotc.compiler import compile_model
from aotc.frontend import import_model, load_onnx
from aotc.targets import load_target

from models.build import save
from models.zoo import ZOO

BEGIN, END = "<!-- bench:begin -->", "<!-- bench:end -->"


class LegacyArtifact:
    """An artifact run through `<name>_run_with_weights` with a workspace of its own (the ABI
    every aotc version has had), so artifacts of older checkouts run in this process."""

    def __init__(self, directory: Path):
        import cffi
        m = json.loads((directory / "manifest.json").read_text())
        self.ffi = ffi = cffi.FFI()
        p = m["name"]
        fin = "".join(f"const void *{x['c_name']};" for x in m["inputs"]) or "int unused_;"
        fout = "".join(f"void *{x['c_name']};" for x in m["outputs"])
        ffi.cdef(f"typedef struct {{ {fin} }} in_t; typedef struct {{ {fout} }} out_t;"
                 f"int {p}_run_with_weights(const void *w, const in_t *in, out_t *out, void *ws);"
                 f"const void *{p}_embedded_weights(void);")
        self.lib = ffi.dlopen(str(directory / m["library"]))
        self.run_fn = getattr(self.lib, f"{p}_run_with_weights")
        if m["weights"]["mode"] == "external":
            raw = np.fromfile(directory / m["weights"]["file"], np.uint8)
            self._w = np.empty(raw.size + 64, np.uint8)
            off = (-self._w.ctypes.data) % 64
            self._w = self._w[off:off + raw.size]
            self._w[:] = raw
            self.weights = ffi.from_buffer(self._w)
        else:
            self.weights = getattr(self.lib, f"{p}_embedded_weights")()
        ws = np.empty(m["workspace_bytes"] + 128, np.uint8)
        off = (-ws.ctypes.data) % 64
        self._ws = ws[off:off + max(m["workspace_bytes"], 1)]
        self.inputs, self.outputs = m["inputs"], m["outputs"]
        self.cin, self.cout = ffi.new("in_t *"), ffi.new("out_t *")
        self._keep = []

    def bind(self, feeds: dict) -> None:
        self._keep = []
        for x in self.inputs:
            a = np.ascontiguousarray(feeds[x["name"]])
            self._keep.append(a)
            setattr(self.cin, x["c_name"], self.ffi.from_buffer(a))
        for x in self.outputs:
            o = np.empty(x["shape"], np.dtype(x["dtype"]))
            self._keep.append(o)
            setattr(self.cout, x["c_name"], self.ffi.from_buffer(o))

    def run(self) -> None:
        status = self.run_fn(self.weights, self.cin, self.cout, self.ffi.from_buffer(self._ws))
        if status:
            raise RuntimeError(f"baseline artifact failed with status {status}")


def compile_with_checkout(checkout: Path, model: Path, target: str, out: Path, shapes: dict) -> Path:
    """Compile with another checkout's aotc (its own modules, this interpreter)."""
    args = [sys.executable, "-c", "import sys; from aotc.cli import main; sys.argv[0] = 'aotc'; main()",
            "compile", str(model), "-o", str(out), "--target", target]
    for k, v in shapes.items():
        args += ["--shape", f"{k}={'x'.join(map(str, v))}"]
    env = dict(os.environ, PYTHONPATH=str(checkout))
    proc = subprocess.run(args, env=env, capture_output=True, text=True, cwd=checkout)
    if proc.returncode:
        raise RuntimeError(f"baseline compile failed:\n{proc.stderr}")
    return out


def bench_model(name: str, size: str, runs: int, warmup: int, workdir: Path, target: str, threads: list[int],
                baseline: Path | None, opencl: bool, rounds: int = 5, openvino: bool = False,
                min_block_ms: float = 0.0) -> dict:
    e = ZOO[name]
    path = workdir / f"{name}_{size}.onnx"
    save(e.build(size), path)
    shapes = e.shapes_for(size)
    g = import_model(load_onnx(path), name, shapes)
    feeds = sample_inputs(g, seed=1)
    engines, memory = {}, {}
    if baseline is not None:
        art = LegacyArtifact(compile_with_checkout(baseline, path, load_target(target).name,
                                                   workdir / f"{name}_{size}_baseline", shapes))
        art.bind(feeds)
        engines["aotc before, 1 thread"] = art.run
    for t in threads:
        out = compile_model(path, target=target, output_dir=workdir / f"{name}_{size}_{t}t", shapes=shapes, threads=t)
        inst = BoundInstance(out, feeds, threads=t)
        engines[f"aotc, {t} thread{'s' if t > 1 else ''}"] = inst.run
        memory[t] = inst.lib.manifest["memory_plan"]
    if opencl:
        out = compile_model(path, target="opencl", output_dir=workdir / f"{name}_{size}_opencl", shapes=shapes)
        engines["aotc opencl"] = BoundInstance(out, feeds).run
    for t in threads:
        sess = ort_session(path, t)
        engines[f"ORT, {t} thread{'s' if t > 1 else ''}"] = (lambda s=sess: s.run(None, feeds))
    if openvino:
        for t in threads:
            engines[f"OV, {t} thread{'s' if t > 1 else ''}"] = openvino_runner(path, feeds, t)
    # the method of aotc/bench.py's docstring
    samples = time_engines(engines, runs, warmup, rounds, min_block_s=min_block_ms / 1e3)
    med = {k: statistics.median(v) * 1e3 for k, v in samples.items()}
    return {"model": name, "size": size, "median_ms": med, "round_ms": round_medians(samples, rounds),
            "memory": memory}


def round_medians(samples: dict[str, list[float]], rounds: int) -> dict[str, list[float]]:
    """Each engine's median run of each round, in ms (time_engines records a round's runs together)."""
    out = {}
    for k, v in samples.items():
        per = len(v) // rounds
        out[k] = [statistics.median(v[r * per:(r + 1) * per]) * 1e3 for r in range(rounds)]
    return out


def paired_ratio(rounds: dict[str, list[float]], engine: str, others: list[str]) -> float | None:
    """engine's time over the fastest of `others`, paired by round (the module's docstring): the
    median over rounds of engine's round median / the fastest other's of that round; None
    without the engine or any of the others."""
    theirs = [rounds[k] for k in others if k in rounds]
    if engine not in rounds or not theirs:
        return None
    return statistics.median([a / min(o[r] for o in theirs) for r, a in enumerate(rounds[engine])])


def paired_over_best(result: dict, t: int) -> float | None:
    """aotc's time over the best other engine's (ONNX Runtime, OpenVINO) at t threads, paired by
    round; None without the rounds or another engine."""
    suffix = f"{t} thread{'s' if t > 1 else ''}"
    return paired_ratio(result.get("round_ms") or {}, f"aotc, {suffix}", [f"ORT, {suffix}", f"OV, {suffix}"])


def openvino_runner(path: Path, feeds: dict, threads: int):
    """One OpenVINO CPU inference request for the model, float32, `threads` threads, one stream,
    its inputs bound once to `feeds` (shared, not copied, as aotc's are); returns the call that
    runs it."""
    import openvino as ov
    core = ov.Core()
    compiled = core.compile_model(core.read_model(str(path)), "CPU", {
        "INFERENCE_PRECISION_HINT": "f32", "INFERENCE_NUM_THREADS": threads, "NUM_STREAMS": 1,
        "PERFORMANCE_HINT": "LATENCY"})
    req = compiled.create_infer_request()
    for name, a in feeds.items():
        req.set_tensor(name, ov.Tensor(np.ascontiguousarray(a), shared_memory=True))
    return req.infer


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _has_ov(results: list[dict]) -> bool:
    return bool(results) and any(k.startswith("OV, ") for k in results[0]["median_ms"])


def _openvino_version() -> str:
    import openvino as ov
    return ov.__version__.split("-")[0]


def render(results: list[dict], runs: int, warmup: int, target: str, threads: list[int],
           min_block_ms: float = 0.0) -> str:
    tname = load_target(target).name
    L = [BEGIN, "",
         f"Machine: {_cpu_name()}, {os.cpu_count()} cores; target {target} ({tname}); onnxruntime {ort.__version__}; "
         + (f"medians of {runs} runs per engine or more (blocks of back-to-back runs lasting {min_block_ms:g} ms "
            "or more, engines rotated over rounds)" if min_block_ms > 0 else
            f"medians of {runs} runs per engine (blocks of back-to-back runs, engines rotated over rounds)")
         + f" after {warmup} warm-up runs, in ms. Speed-up = the 1-thread median / the 2-thread median of the same "
         "engine; "
         "aotc/ORT = ORT's median / aotc's (> 1: aotc faster)"
         + (f"; aotc/OV the same against OpenVINO {_openvino_version()} (float32); time / best, paired = "
            "the median over rounds of aotc's round median over the faster other engine's in that round "
            "(< 1: aotc faster; issue 32's measure)." if _has_ov(results) else "."), ""]
    cols = list(results[0]["median_ms"]) if results else []
    head = ["model"] + cols
    t1, t2 = (f"{threads[0]} thread", f"{threads[-1]} threads") if len(threads) > 1 else (None, None)
    if t1:
        head += ["aotc speed-up", "ORT speed-up", f"aotc/ORT {threads[0]}T", f"aotc/ORT {threads[-1]}T"]
        if _has_ov(results):
            head += [f"aotc/OV {threads[0]}T", f"aotc/OV {threads[-1]}T"]
    paired = _has_ov(results) and all(r.get("round_ms") for r in results)
    if paired:
        head += [f"time / best, paired {t}T" for t in threads]
    if any("aotc before, 1 thread" in r["median_ms"] for r in results):
        head += ["before/now 1T"]
    L += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    sp_a, sp_o, over = [], [], {t: [] for t in threads}
    for r in results:
        m = r["median_ms"]
        row = [r["model"]] + [f"{m[c]:.2f}" for c in cols]
        if t1:
            a1, a2, o1, o2 = m[f"aotc, {t1}"], m[f"aotc, {t2}"], m[f"ORT, {t1}"], m[f"ORT, {t2}"]
            sp_a.append(a1 / a2)
            sp_o.append(o1 / o2)
            row += [f"{a1 / a2:.2f}x", f"{o1 / o2:.2f}x", f"{o1 / a1:.2f}", f"{o2 / a2:.2f}"]
            if _has_ov(results):
                row += [f"{m[f'OV, {t1}'] / a1:.2f}", f"{m[f'OV, {t2}'] / a2:.2f}"]
        if paired:
            for t in threads:
                over[t].append(paired_over_best(r, t))
                row += [f"{over[t][-1]:.2f}"]
        if "aotc before, 1 thread" in m:
            row += [f"{m['aotc before, 1 thread'] / m[f'aotc, {threads[0]} thread']:.2f}"]
        L.append("| " + " | ".join(row) + " |")
    gm = lambda xs: float(np.exp(np.mean(np.log(xs))))  # noqa: E731
    if sp_a:
        L += ["", f"Geometric mean speed-up from {threads[0]} to {threads[-1]} threads: aotc {gm(sp_a):.2f}x, "
                  f"ORT {gm(sp_o):.2f}x."]
    if paired:
        L += ["", "Time / best other, paired, geometric mean: " + ", ".join(
            f"{gm(over[t]):.3f} at {t} thread{'s' if t > 1 else ''}" for t in threads) + "; above 1: " + (", ".join(
                f"{r['model']} {over[t][i]:.2f} ({t}T)" for t in threads for i, r in enumerate(results)
                if round(over[t][i], 2) > 1.0) or "none") + "."]
    L += ["", END]
    return "\n".join(L)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", default="small", choices=["small", "full"])
    ap.add_argument("--models", default=None, help="comma-separated zoo names (default: all)")
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=5, help="rounds over the engines (runs are split among them)")
    ap.add_argument("--min-block-ms", type=float, default=MIN_BLOCK_MS,
                    help="each engine's block of runs in a round lasts at least this long: engines "
                         f"that run faster get more runs (default {MIN_BLOCK_MS:g}; 0: --runs / --rounds runs)")
    ap.add_argument("--target", default="native")
    ap.add_argument("--threads", default="1,2", help="comma-separated thread counts (default 1,2)")
    ap.add_argument("--baseline-checkout", type=Path, default=None,
                    help="another checkout of aotc whose build of each model runs too (one thread)")
    ap.add_argument("--opencl", action="store_true", help="also time the opencl target")
    ap.add_argument("--openvino", action="store_true",
                    help="also time OpenVINO's CPU plugin, float32 (pip install -e '.[bench]')")
    ap.add_argument("--workdir", type=Path, default=Path("build/bench"))
    ap.add_argument("--report", type=Path, default=None, help="Markdown file to update between bench markers")
    ap.add_argument("--json", type=Path, default=None)
    a = ap.parse_args()
    if a.openvino:
        try:
            import openvino  # noqa: F401
        except ImportError:
            sys.exit("--openvino: OpenVINO is not installed (pip install -e '.[bench]')")
    names = a.models.split(",") if a.models else list(ZOO)
    threads = [int(t) for t in a.threads.split(",")]
    a.workdir.mkdir(parents=True, exist_ok=True)
    results = []
    for n in names:
        # each model in a fresh process: what one model leaves behind (thread pools, sessions,
        # a fragmented heap) measurably changed the next one's 2-thread times
        with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn")) as ex:
            r = ex.submit(bench_model, n, a.size, a.runs, a.warmup, a.workdir.resolve(), a.target, threads,
                          a.baseline_checkout.resolve() if a.baseline_checkout else None, a.opencl,
                          a.rounds, a.openvino, a.min_block_ms).result()
        results.append(r)
        print(f"{n:16} " + "  ".join(f"{k}={v:.3f}ms" for k, v in r["median_ms"].items()), flush=True)
    table = render(results, a.runs, a.warmup, a.target, threads, a.min_block_ms)
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
