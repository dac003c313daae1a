"""aotc against ONNX Runtime on one model, the method of `make bench` (tools/bench.py), in the package
so that an installed aotc has it (`aotc bench`).

Every engine runs on the same inputs: aotc compiled for each thread count and run with it, ONNX
Runtime with as many intra-op threads (one inter-op thread). Each engine first runs `warmup`
times; then come `rounds` rounds, in each of which every engine in turn runs its share of `runs`
timed runs back to back (as a serving loop would) after a pause and one untimed run. Engines
alternate round by round, the first one changing too, so that slow drifts of a shared machine
hit all alike; one engine's runs are not interleaved with another's, whose thread pool would
still be spinning on the same cores (ONNX Runtime's and aotc's both spin for a while after a
run). Reported: each engine's median, and ONNX Runtime's median over aotc's.
"""
from __future__ import annotations

import math
import statistics
import tempfile
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Callable, Mapping, Optional, Sequence

import numpy as np

from .errors import AotcError

# Before an engine's block of runs: the previous engine's pool threads stop spinning first.
SETTLE_S = 0.2
# Each engine's block of runs in a round lasts at least this long (aotc bench, make bench)
MIN_BLOCK_MS = 20.0


class BoundInstance:
    """A model instance (create / invoke) with its inputs and outputs bound once, so a timed run
    is the invoke call and nothing else."""

    def __init__(self, directory: Path, feeds: Mapping[str, np.ndarray], threads: int = 0):
        from .build.loader import Library
        self.lib = Library(directory)
        self.inst = self.lib.create(threads=threads)
        ffi, p = self.lib.ffi, self.lib.prefix
        self.cin, self.cout = ffi.new(f"{p}_inputs *"), ffi.new(f"{p}_outputs *")
        self._keep = []
        for name, field, dt, shape in self.lib.inputs:
            a = np.ascontiguousarray(feeds[name])
            self._keep.append(a)
            setattr(self.cin, field, ffi.from_buffer(a))
            if name in self.lib.input_dims:         # run-time dimensions: this run's sizes
                getattr(self.cin, self.lib.input_dims[name][1])[0:a.ndim] = list(a.shape)
        self.outputs = []
        for name, field, dt, shape in self.lib.outputs:
            o = np.empty(shape, dt)
            self.outputs.append(o)
            setattr(self.cout, field, ffi.from_buffer(o))
        self.invoke = self.lib._fn("invoke")

    def run(self) -> None:
        status = self.invoke(self.inst, self.cin, self.cout)
        if status:
            raise RuntimeError(f"invoke failed with status {status}: {self.lib.error(status)}")


def time_engines(engines: Mapping[str, Callable[[], object]], runs: int, warmup: int, rounds: int,
                 settle_s: float = SETTLE_S, min_block_s: float = 0.0) -> dict[str, list[float]]:
    """Seconds of each timed run of each engine, by the method in this module's docstring: every
    engine gets ceil(runs / rounds) timed runs a round, or more where that many would take less
    than `min_block_s`: then as many as its median warm-up run says fill that time (the same
    count in every round, so each round's median is over as many runs). A block of a few runs of
    a model that takes tens of microseconds is over before the core has left the pause behind,
    and its median moved run to run by 1.5x; blocks of milliseconds time what a serving loop
    sees."""
    per_round = max(1, -(-runs // rounds))
    counts: dict[str, int] = {}
    for k, fn in engines.items():
        warm = []
        for _ in range(warmup):
            t0 = time.perf_counter()
            fn()
            warm.append(time.perf_counter() - t0)
        if min_block_s > 0 and not warm:         # (no warm-up asked for: one run to size the blocks)
            t0 = time.perf_counter()
            fn()
            warm.append(time.perf_counter() - t0)
        counts[k] = per_round
        if min_block_s > 0:
            counts[k] = max(per_round, math.ceil(min_block_s / max(statistics.median(warm), 1e-7)))
    samples: dict[str, list[float]] = {k: [] for k in engines}
    for r in range(rounds):
        order = list(engines.items())
        order = order[r % len(order):] + order[:r % len(order)]      # who goes first changes too
        for k, fn in order:
            time.sleep(settle_s)
            fn()
            for _ in range(counts[k]):
                t0 = time.perf_counter()
                fn()
                samples[k].append(time.perf_counter() - t0)
    return samples


def publish_report(text: str, path, begin: str, end: str) -> None:
    """A benchmark's report printed and, where `path` is given, put (from its `begin` marker to
    its `end` marker) in place of that section of the Markdown file there, or appended where
    the file has none."""
    from pathlib import Path
    print(text)
    if path is None:
        return
    path = Path(path)
    doc = path.read_text() if path.exists() else ""
    if begin in doc:
        doc = doc[:doc.index(begin)] + text + doc[doc.index(end) + len(end):]
    else:
        doc += "\n" + text + "\n"
    path.write_text(doc)


def ort_session(path, threads: int):
    """ONNX Runtime's CPU session with `threads` intra-op threads (0: its default) and one
    inter-op thread."""
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


class OrtDecoder:
    """ONNX Runtime's CPU session behind the interface aotc.Generator drives (`run(feeds,
    into=None)`, `manifest`, `output_names`), with an artifact's manifest for the ports, so that
    aotc and ONNX Runtime run the same decoding loop. `into` is ignored: ONNX Runtime returns
    its own arrays."""

    def __init__(self, path, manifest: dict, threads: int = 0):
        self.sess = ort_session(path, threads)
        self.manifest = manifest
        self.output_names = [o.name for o in self.sess.get_outputs()]

    def run(self, feeds, into=None):
        return self.sess.run(None, feeds)


def bench_model(path, target: str = "native", threads: Sequence[int] = (1,), shapes: Optional[Mapping] = None,
                consts: Optional[Mapping] = None, inputs: Optional[Mapping[str, np.ndarray]] = None,
                runs: int = 30, warmup: int = 5, rounds: int = 5, seed: int = 0, progress=None,
                min_block_ms: float = MIN_BLOCK_MS) -> dict:
    """Time aotc and ONNX Runtime on the model at `path`, at each thread count, on `inputs` (or
    seeded random ones, as `aotc check` draws them), each engine's block of a round lasting
    `min_block_ms` or more (time_engines). Returns the medians in milliseconds by
    engine, ONNX Runtime's median over aotc's by thread count, every sample, and the largest
    difference between aotc's outputs and ONNX Runtime's (by thread count)."""
    from .check.inputs import sample_inputs
    from .compiler import compile_model
    from .frontend import import_model, load_onnx
    if not threads or any(t < 1 for t in threads):
        raise AotcError(f"--threads {','.join(map(str, threads))}: thread counts must be 1 or more",
                        "example: --threads 1,2")
    if runs < 1 or warmup < 0 or rounds < 1 or min_block_ms < 0:
        raise AotcError("--runs and --rounds must be 1 or more, --warmup and --min-block-ms 0 or more")
    step = progress or (lambda s: nullcontext())
    shapes, consts = dict(shapes or {}), dict(consts or {})
    for k, v in (inputs or {}).items():
        shapes.setdefault(k, tuple(np.asarray(v).shape))
    g = import_model(load_onnx(path), "bench", shapes, consts)
    if g.symbols:
        raise AotcError("aotc bench times fixed shapes: give each input's sizes with --shape (or --input)",
                        "a ranged artifact takes any size in its range; bench it at the sizes you care about")
    feeds = dict(inputs) if inputs else sample_inputs(g, seed)
    missing = [k for k in g.inputs if k not in feeds]
    if missing:
        raise AotcError(f"no --input given for {', '.join(map(repr, missing))}",
                        "give every input with --input (or none, to draw seeded random inputs)")
    from .targets import load_target
    if load_target(target).language != "c":
        raise AotcError(f"aotc bench times CPU targets; {target!r} is not one",
                        "pick a CPU target (native, c, c-avx2, c-avx512): `aotc targets` lists them")
    engines, target_name, diff = {}, None, {}
    with tempfile.TemporaryDirectory(prefix="aotc-bench-") as work:
        keep = []
        for t in threads:
            out = compile_model(path, target=target, output_dir=Path(work) / f"t{t}", shapes=shapes, consts=consts,
                                progress=progress, threads=t)
            inst = BoundInstance(out, feeds, threads=t)
            target_name = inst.lib.manifest["target"]
            keep.append(inst)
            engines[f"aotc, {t}"] = inst.run
        ort_feeds = {**{k: np.asarray(v) for k, v in feeds.items()}, **{k: np.asarray(v) for k, v in consts.items()}}
        for t in threads:
            try:
                sess = ort_session(path, t)
                sess.run(None, ort_feeds)
            except Exception as e:
                raise AotcError(f"ONNX Runtime cannot run {Path(path).name}: {str(e).splitlines()[0]}",
                                "aotc bench needs ONNX Runtime to run the model too") from None
            engines[f"ORT, {t}"] = (lambda s=sess: s.run(None, ort_feeds))
        with step(f"timing {len(engines)} engines: {rounds} rounds, {runs} runs each or more"):
            samples = time_engines(engines, runs, warmup, rounds, min_block_s=min_block_ms / 1e3)
        # what was timed computes the model: the outputs of aotc's last run against ONNX Runtime's
        ref = engines[f"ORT, {threads[0]}"]()
        for t, inst in zip(threads, keep):
            diff[t] = max((float(np.max(np.abs(a.astype(np.float64) - np.asarray(b, np.float64)))) if a.size else 0.0
                           for a, b in zip(inst.outputs, ref)), default=0.0)
    med = {k: statistics.median(v) * 1e3 for k, v in samples.items()}
    return {"model": str(path), "target": target_name, "threads": list(threads), "runs": runs, "warmup": warmup,
            "rounds": rounds, "min_block_ms": min_block_ms, "median_ms": med,
            "ort_over_aotc": {t: med[f"ORT, {t}"] / med[f"aotc, {t}"] for t in threads},
            "max_abs_diff": diff,
            "samples_ms": {k: [s * 1e3 for s in v] for k, v in samples.items()}}
