"""Memory of the largest language model this machine takes, compiled and run: onnxruntime-genai's
model builder on a random-weight LLaMA-style model of about a billion parameters
(models/decoders.py GENAI_1B: 4 GB of float32 weights in the ONNX file's external data).

- aotc's compile in a child process: seconds, and peak resident memory against the weights' bytes
  (each child reads its own VmHWM: a child's ru_maxrss starts from its parent's size at the fork).
- A prompt of --prompt tokens and --steps greedy tokens, each engine in its own process: the example
  app in C (examples/llm/generate.c, built against the artifact), aotc's Python runtime
  (aotc.load and aotc.Generator) and ONNX Runtime (an InferenceSession under the same loop): peak
  resident memory, decode tokens per second (one run), and whether the tokens are ONNX Runtime's.

python -m tools.llm_memory [--config 1b|small] [--precision fp32] [--prompt 16] [--steps 16]
                           [--threads 2] [--work DIR] [--report docs/PERFORMANCE.md]
"""
from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

from aotc.bench import publish_report

BEGIN, END = "<!-- llm-memory:begin -->", "<!-- llm-memory:end -->"
EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "llm" / "generate.c"

# the peak resident memory of the command in argv[1:], as a clean child reports it: spawned from
# this small process (so that its ru_maxrss does not start from the caller's size), its own
# output passed through, then its peak in kB on the last line of stderr
_SPAWN = """
import os, sys
pid = os.posix_spawn(sys.argv[1], sys.argv[1:], os.environ)
_, status, usage = os.wait4(pid, 0)
print(usage.ru_maxrss, file=sys.stderr)
sys.exit(os.waitstatus_to_exitcode(status))
"""

# a decoding loop in a child: aotc's Python runtime or ONNX Runtime behind aotc.Generator, timed as
# llm-bench times it (tools/llm_bench.py loop_timing)
_LOOP = """
import json, sys
import aotc
from aotc.bench import OrtDecoder
from tools.llm_bench import loop_timing
engine, artifact, model, threads, steps = sys.argv[1:6]
if engine == "aotc":
    dec = aotc.load(artifact, threads=int(threads))
else:                       # (the manifest only: the artifact's weights are not loaded)
    dec = OrtDecoder(model, json.load(open(artifact + "/manifest.json")), int(threads))
_, times, ids = loop_timing(aotc.Generator(dec), json.loads(sys.argv[6]), int(steps) - 1)
hwm = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM:"))
print(json.dumps({"ids": ids, "tokens_per_s": len(times) / sum(times), "peak": 1024 * hwm}))
"""


def c_example(artifact: Path, work: Path) -> Path:
    exe = work / "generate"
    cc = shutil.which("cc") or shutil.which("gcc")
    subprocess.run([cc, "-std=c99", "-O2", f"-I{artifact}", str(EXAMPLE), f"-L{artifact}", "-lllm",
                    f"-Wl,-rpath,{artifact.resolve()}", "-o", str(exe)], check=True)
    return exe


def run_c(exe: Path, weights: Path, prompt: list, steps: int) -> dict:
    run = subprocess.run([sys.executable, "-c", _SPAWN, str(exe), "-w", str(weights), "-n", str(steps),
                          *map(str, prompt)],
                         capture_output=True, text=True, check=True)
    ids, speed = run.stdout.splitlines()[-2:]
    m = re.search(r"decode: \d+ tokens in [0-9.]+ ms, ([0-9.]+) tokens/s", speed)
    return {"ids": [int(t) for t in ids.split()], "tokens_per_s": float(m.group(1)),
            "peak": 1024 * int(run.stderr.split()[-1])}


def run_loop(engine: str, artifact: Path, model: Path, threads: int, prompt: list, steps: int) -> dict:
    run = subprocess.run([sys.executable, "-c", _LOOP, engine, str(artifact), str(model), str(threads), str(steps),
                          json.dumps(prompt)], capture_output=True, text=True, check=True, cwd=EXAMPLE.parents[2])
    return json.loads(run.stdout.splitlines()[-1])


def measure(config: str, precision: str, threads: int, prompt_len: int, steps: int, root: Path) -> dict:
    from models.decoders import GENAI_1B, GENAI_SMALL, genai_build, genai_dims, genai_source, parameters
    from tools.llm_bench import compile_measured
    cfg = {"1b": GENAI_1B, "small": GENAI_SMALL}[config]
    head = cfg["hidden_size"] // cfg["num_attention_heads"]
    folder = root / f"{config}_{precision}"
    if not (folder / "model.onnx").exists():
        source = root / f"{config}_source"
        if not source.exists():
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                genai_source("llama", source, cfg)
        genai_build(source, folder, precision, root / "cache")
        shutil.rmtree(source)                   # (4 GB the disk needs back)
    path = folder / "model.onnx"
    weights = sum(f.stat().st_size for f in folder.glob("model.onnx*"))
    out = root / f"aotc_{config}_{precision}"
    longest = prompt_len + steps + 1
    secs, peak = compile_measured(path, out, genai_dims(longest, head), threads)
    print(f"compiled in {secs:.0f} s, peak {peak / 1e9:.2f} GB for {weights / 1e9:.2f} GB of weights",
          file=sys.stderr)
    prompt = [int(t) for t in np.random.default_rng(3).integers(0, cfg["vocab_size"] - 3, prompt_len)]
    runs = {"C example": run_c(c_example(out, root), out / "llm.weights", prompt, steps),
            "aotc (Python)": run_loop("aotc", out, path, threads, prompt, steps),
            "ORT": run_loop("ort", out, path, threads, prompt, steps)}
    for k, r in runs.items():
        print(f"{k}: peak {r['peak'] / 1e9:.2f} GB, {r['tokens_per_s']:.2f} tokens/s", file=sys.stderr)
    return {"config": config, "precision": precision, "params": parameters(cfg), "weights": weights, "threads": threads,
            "compile_s": secs, "compile_peak": peak, "prompt": prompt_len, "steps": steps, "runs": runs,
            "same": {k: r["ids"] == runs["ORT"]["ids"] for k, r in runs.items()}}


def report(r: dict) -> str:
    L = [BEGIN, "",
         f"Memory of a {r['params'] / 1e9:.2f}B-parameter decoder (tools/llm_memory.py, `make llm-memory`): "
         f"onnxruntime-genai's builder on a random-weight LLaMA-style model ({r['precision']}, "
         f"{r['weights'] / 1e9:.2f} GB in the ONNX file and its external data), compiled by aotc for the "
         f"native target at {r['threads']} threads, then a {r['prompt']}-token prompt and {r['steps']} greedy "
         "tokens in each engine, each in its own process. Peak: the process's peak resident memory.", "",
         "| compile s | compile peak memory | peak / weights |", "|---|---|---|",
         f"| {r['compile_s']:.0f} | {r['compile_peak'] / 1e9:.2f} GB | {r['compile_peak'] / r['weights']:.2f} |", "",
         "| engine | peak memory | peak / weights | tokens/s (one run: the speed tables are llm-bench's) | "
         "tokens as ORT's |", "|---|---|---|---|---|"]
    for k, x in r["runs"].items():
        L.append(f"| {k} | {x['peak'] / 1e9:.2f} GB | {x['peak'] / r['weights']:.2f} | {x['tokens_per_s']:.2f} | "
                 f"{'yes' if r['same'][k] else 'no'} |")
    L += ["", END]
    return "\n".join(L)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", choices=["1b", "small"], default="1b")
    ap.add_argument("--precision", default="fp32", choices=["fp32", "int4"])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prompt", type=int, default=16)
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--work", type=Path, default=None, help="where the models are built (default: a temporary folder)")
    ap.add_argument("--report", type=Path, default=None, help="a Markdown file whose llm-memory section to replace")
    a = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        root = a.work or Path(tmp)
        root.mkdir(parents=True, exist_ok=True)
        t = time.perf_counter()
        r = measure(a.config, a.precision, a.threads, a.prompt, a.steps, root)
        print(f"({time.perf_counter() - t:.0f} s in all)", file=sys.stderr)
    publish_report(report(r), a.report, BEGIN, END)
    return 0


if __name__ == "__main__":
    sys.exit(main())
