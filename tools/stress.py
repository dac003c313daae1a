"""Thread-safety stress of compiled artifacts, with ThreadSanitizer, against ONNX Runtime.

For each model: compile it with aotc (target c, 4 threads, embedded weights; by default with
`min_parallel_work` / `min_parallel_gemm_macs` lowered to 1 in a copy of targets/c.toml, so
that every loop and GEMM the schedule can split goes through the thread pool), draw SETS
fresh seeded random input sets and ONNX Runtime's outputs for them, and build the C harness
tools/stress_harness.c with the artifact's own sources and a generated glue header
(stress_glue.h: the model's entry points behind sg_run / sg_create / sg_invoke ...). The
harness then drives the one artifact from every thread at once:

  - 8 threads calling <name>_run, each with its own workspace;
  - 4 threads each creating its own model instance (a pool of 2 threads each), invoking it,
    destroying it and creating it again (2 rounds);

and compares every result with ONNX Runtime (the zoo's rtol/atol) and, bit for bit, with
the same call made alone before the threads start (any difference is a race, even one
inside the tolerance). Two builds:

  tsan   cc -fsanitize=thread -O1 -g, run with TSAN_OPTIONS=halt_on_error=1: any report fails
         (under `setarch -R` when this kernel's address layout needs it: "unexpected memory
         mapping"; when TSan cannot run here at all the check is skipped, saying why)
  plain  cc -O3 -pthread, the same calls at full speed (more interleavings per second)

    python -m tools.stress                         # every small zoo model, both builds (make stress)
    python -m tools.stress --models mlp,resnet50 --check tsan --calls 1000
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx

ROOT = Path(__file__).resolve().parent.parent
HARNESS = Path(__file__).resolve().parent / "stress_harness.c"
CC = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or "cc"
TSAN_FLAGS = ["-fsanitize=thread", "-O1", "-g", "-fno-omit-frame-pointer"]
PLAIN_FLAGS = ["-O3", "-g"]
TSAN_ENV = {"TSAN_OPTIONS": "halt_on_error=1:exitcode=66:second_deadlock_stack=1:history_size=4"}
TSAN_MARKERS = ("WARNING: ThreadSanitizer", "ERROR: ThreadSanitizer", "FATAL: ThreadSanitizer")
COMPILE_THREADS = 4
SEED = 20261124
# (dtype name in the manifest) -> the harness's element kind (stress_harness.c: SG_F32 ...)
KINDS = {"float32": 1, "float64": 2, "float16": 3, "int64": 4, "int32": 5, "int16": 6, "int8": 7, "uint8": 8,
         "bool": 9}


@dataclass
class Result:
    model: str
    check: str
    passed: bool
    detail: str = ""
    seconds: float = 0.0
    calls: int = 0
    stats: dict = field(default_factory=dict)


# ------------------------------------------------------------------------------------------ can TSan run here
_TSAN_STATUS: tuple[str | None, list[str]] | None = None

RACY_PROBE = r"""
#include <pthread.h>
static int shared;
static void *bump(void *p) { (void)p; shared++; return 0; }
int main(void)
{
    pthread_t t;
    pthread_create(&t, 0, bump, 0);
    shared++;
    pthread_join(t, 0);
    return 0;
}
"""


def tsan_status() -> tuple[str | None, list[str]]:
    """(None, prefix) when a ThreadSanitizer program runs here and reports a planted race
    (prefix: [] or the `setarch -R` command it needs), else (the reason it cannot, [])."""
    global _TSAN_STATUS
    if _TSAN_STATUS is not None:
        return _TSAN_STATUS
    _TSAN_STATUS = _probe_tsan()
    return _TSAN_STATUS


def _probe_tsan() -> tuple[str | None, list[str]]:
    if not shutil.which(CC):
        return f"no C compiler ({CC})", []
    with tempfile.TemporaryDirectory(prefix="aotc_tsan_probe_") as d:
        src, exe = Path(d) / "race.c", Path(d) / "race"
        src.write_text(RACY_PROBE)
        p = subprocess.run([CC, *TSAN_FLAGS, str(src), "-o", str(exe), "-pthread"], capture_output=True, text=True)
        if p.returncode != 0:
            return f"{CC} cannot build with -fsanitize=thread (libtsan missing?): {p.stderr.strip()[-300:]}", []
        tried = []
        prefixes = [[]]
        if shutil.which("setarch"):
            prefixes.append(["setarch", os.uname().machine, "-R"])
        for prefix in prefixes:
            try:
                q = subprocess.run([*prefix, str(exe)], capture_output=True, text=True, timeout=60,
                                   env={**os.environ, **TSAN_ENV})
            except (OSError, subprocess.TimeoutExpired) as e:
                tried.append(f"{' '.join(prefix) or 'plain'}: {e}")
                continue
            if "WARNING: ThreadSanitizer: data race" in q.stderr:
                return None, prefix
            first = next((ln for ln in q.stderr.splitlines() if "ThreadSanitizer" in ln), q.stderr.strip()[-200:])
            tried.append(f"{' '.join(prefix) or 'plain'}: exit {q.returncode}, {first}")
        return "a ThreadSanitizer program does not run here or misses a planted race (" + "; ".join(tried) + ")", []


# ------------------------------------------------------------------------------------------ the glue
def glue_source(name: str, manifest: dict) -> str:
    """stress_glue.h for the artifact `name`: the tables and entry points stress_harness.c uses."""
    ins, outs = manifest["inputs"], manifest["outputs"]
    up = name.upper()
    size = lambda p: np.dtype(p["dtype"]).itemsize
    count = lambda p: int(np.prod(p["shape"], dtype=np.int64))
    ni = max(len(ins), 1)
    lines = [
        f"/* stress_glue.h: generated by tools/stress.py for the artifact {name}. */",
        f'#include "{name}.h"',
        "#include <string.h>",
        f"#define SG_NUM_INPUTS {len(ins)}",
        f"#define SG_NUM_OUTPUTS {len(outs)}",
        f"#define SG_WORKSPACE_BYTES {up}_WORKSPACE_BYTES",
        f"#define SG_WORKSPACE_ALIGN {up}_WORKSPACE_ALIGN",
        f"static const size_t sg_in_bytes[{ni}] = {{{', '.join(f'{count(p) * size(p)}u' for p in ins) or '0'}}};",
        f"static const size_t sg_out_count[] = {{{', '.join(f'{count(p)}u' for p in outs)}}};",
        f"static const size_t sg_out_size[] = {{{', '.join(f'{size(p)}u' for p in outs)}}};",
        f"static const int sg_out_kind[] = {{{', '.join(str(KINDS.get(p['dtype'], 10)) for p in outs)}}};",
        f"static const char *const sg_out_name[] = {{{', '.join(json.dumps(p['name']) for p in outs)}}};",
        "",
        f"static void sg_bind(void *const *x, void *const *y, {name}_inputs *in, {name}_outputs *out)",
        "{",
        "    memset(in, 0, sizeof *in);",
        "    memset(out, 0, sizeof *out);",
        "    (void)x;",
    ]
    lines += [f"    in->{p['c_name']} = x[{k}];" for k, p in enumerate(ins)]
    lines += [f"    out->{p['c_name']} = y[{k}];" for k, p in enumerate(outs)]
    lines += [
        "}",
        "",
        "static int sg_run(void *const *x, void *const *y, void *ws)",
        "{",
        f"    {name}_inputs in;",
        f"    {name}_outputs out;",
        "    sg_bind(x, y, &in, &out);",
        f"    return {name}_run(&in, &out, ws);",
        "}",
        "",
        "static int sg_create(int threads, void **model)",
        "{",
        "    aotc_options o;",
        f"    {name}_model *m = NULL;",
        "    int status;",
        "    memset(&o, 0, sizeof o);",
        "    o.threads = threads;",
        f"    status = {name}_create_with_options(NULL, &o, &m);",
        "    *model = m;",
        "    return status;",
        "}",
        "",
        "static int sg_invoke(void *model, void *const *x, void *const *y)",
        "{",
        f"    {name}_inputs in;",
        f"    {name}_outputs out;",
        "    sg_bind(x, y, &in, &out);",
        f"    return {name}_invoke(({name}_model *)model, &in, &out);",
        "}",
        "",
        f"static int sg_threads(void *model) {{ return {name}_threads(({name}_model *)model); }}",
        f"static void sg_destroy(void *model) {{ {name}_destroy(({name}_model *)model); }}",
        f"static const char *sg_strerror(int status) {{ return {name}_strerror(status); }}",
        "",
    ]
    return "\n".join(lines)


def build_harness(art: Path, name: str, manifest: dict, exe: Path, tsan: bool) -> tuple[bool, str]:
    """The harness for the artifact in `art`, built with its C sources (with -fsanitize=thread
    when `tsan`); (ok, the command and the compiler's messages)."""
    glue_dir = exe.parent / f"{exe.name}_glue"
    glue_dir.mkdir(parents=True, exist_ok=True)
    (glue_dir / "stress_glue.h").write_text(glue_source(name, manifest))
    sources = [str(art / s) for s in manifest["sources"] if s.endswith(".c")]
    flags = ["-std=c99", *(TSAN_FLAGS if tsan else PLAIN_FLAGS), "-pthread"]
    cmd = [CC, *flags, f"-I{glue_dir}", f"-I{art}", str(HARNESS), *sources, "-o", str(exe), "-lm"]
    p = subprocess.run(cmd, capture_output=True, text=True)
    return p.returncode == 0, (" ".join(cmd) + "\n" + p.stderr)[-4000:]


def write_sets(datadir: Path, manifest: dict, sets: list[tuple[dict, list]]) -> None:
    """in_<set>_<k>.bin and ref_<set>_<k>.bin for each (feeds by input name, reference outputs)."""
    datadir.mkdir(parents=True, exist_ok=True)
    for s, (feeds, ref) in enumerate(sets):
        for k, p in enumerate(manifest["inputs"]):
            np.ascontiguousarray(np.asarray(feeds[p["name"]]).astype(np.dtype(p["dtype"]))).tofile(
                datadir / f"in_{s}_{k}.bin")
        for k, (p, want) in enumerate(zip(manifest["outputs"], ref)):
            want = np.asarray(want)
            if list(want.shape) != list(p["shape"]):
                raise ValueError(f"reference output {p['name']} has shape {want.shape}, the artifact {p['shape']}")
            np.ascontiguousarray(want.astype(np.dtype(p["dtype"]))).tofile(datadir / f"ref_{s}_{k}.bin")


@dataclass
class Plan:
    """How hard the harness drives one artifact."""
    run_threads: int = 8
    run_calls: int = 125          # per run thread
    instances: int = 4
    pool: int = 2                 # threads per instance
    invoke_calls: int = 250       # per instance
    rounds: int = 2               # create / invoke / destroy cycles per instance
    sets: int = 8

    @classmethod
    def for_total(cls, calls: int, **kw) -> Plan:
        """About `calls` calls, two thirds through <name>_run, one third through instances."""
        p = cls(**kw)
        p.run_calls = max(1, round(calls * 2 / 3 / max(p.run_threads, 1)))
        p.invoke_calls = max(p.rounds, round(calls / 3 / max(p.instances, 1)))
        return p

    def args(self) -> list[str]:
        return ["-s", str(self.sets), "-t", str(self.run_threads), "-n", str(self.run_calls),
                "-i", str(self.instances), "-p", str(self.pool), "-m", str(self.invoke_calls),
                "-r", str(self.rounds)]


SUMMARY = re.compile(r"^stress: run_threads=.*$", re.MULTILINE)


def run_harness(exe: Path, datadir: Path, plan: Plan, rtol: float, atol: float, tsan: bool,
                timeout: int = 600) -> tuple[int, str, dict, list[str]]:
    """Runs the harness: (exit code, its output, the summary's numbers, the TSan markers seen)."""
    prefix = tsan_status()[1] if tsan else []
    env = {k: v for k, v in os.environ.items() if not k.startswith("TSAN")}
    if tsan:
        env.update(TSAN_ENV)
    cmd = [*prefix, str(exe), *plan.args(), "-R", repr(rtol), "-A", repr(atol), str(datadir)]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
        rc, text = p.returncode, p.stdout + p.stderr
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"") + (e.stderr or b"")
        rc, text = -9, (out.decode(errors="replace") if isinstance(out, bytes) else out) + f"\ntimed out after {timeout}s"
    m = SUMMARY.search(text)
    stats = {}
    if m:
        for kv in m.group(0).split()[1:]:
            k, _, v = kv.partition("=")
            stats[k] = float(v) if "." in v else int(v)
    return rc, text, stats, [mk for mk in TSAN_MARKERS if mk in text]


# ------------------------------------------------------------------------------------------ one model
def stress_target(workdir: Path) -> Path:
    """targets/c.toml with every loop and GEMM big enough for the thread pool."""
    text = (ROOT / "targets" / "c.toml").read_text()
    text = re.sub(r"(?m)^min_parallel_work\s*=.*$", "min_parallel_work = 1", text)
    text = re.sub(r"(?m)^min_parallel_gemm_macs\s*=.*$", "min_parallel_gemm_macs = 1", text)
    path = workdir / "c-stress.toml"
    path.write_text(text)
    return path


def prepare(model: str, workdir: Path, sets: int, all_parallel: bool = True):
    """Builds the zoo model (small) and compiles it; returns (artifact dir, name, manifest, entry,
    [(feeds, ONNX Runtime outputs)] for `sets` fresh seeded random input sets)."""
    from aotc.check.inputs import sample_inputs
    from aotc.check.runner import reference_outputs
    from aotc.compiler import compile_model
    from aotc.frontend import import_model, load_onnx
    from models.zoo import ZOO

    entry = ZOO[model]
    workdir.mkdir(parents=True, exist_ok=True)
    path = workdir / f"{model}.onnx"
    onnx.save(entry.build("small"), str(path))
    name = f"stress_{model}"
    target = str(stress_target(workdir)) if all_parallel else "c"
    art = compile_model(path, target=target, output_dir=workdir / "out", name=name, shapes=entry.shapes_for("small"),
                        weights="embed", threads=COMPILE_THREADS)
    manifest = json.loads((art / "manifest.json").read_text())
    g = import_model(load_onnx(path), "stress", entry.shapes_for("small"))
    data = []
    for s in range(sets):
        feeds = sample_inputs(g, seed=SEED + 1000 * s)
        data.append((feeds, reference_outputs(path, feeds)))
    return art, name, manifest, entry, data


def stress_model(model: str, checks: list[str], workdir: Path, calls: int = 3000, plan: Plan | None = None,
                 timeout: int = 600, all_parallel: bool = True, tsan_calls: int | None = None) -> list[Result]:
    """Stresses one small zoo model under each check ("tsan", "plain"); `tsan_calls` (default
    `calls`) for the TSan build, which runs 5 to 20 times slower."""
    t0 = time.perf_counter()
    plan = plan or Plan.for_total(calls)
    tsan_plan = Plan.for_total(tsan_calls) if tsan_calls else plan
    art, name, manifest, entry, data = prepare(model, workdir / model, plan.sets, all_parallel)
    datadir = workdir / model / "data"
    write_sets(datadir, manifest, data)
    prep = time.perf_counter() - t0
    results = []
    for check in checks:
        t1 = time.perf_counter()
        exe = workdir / model / f"harness_{check}"
        ok, log = build_harness(art, name, manifest, exe, tsan=(check == "tsan"))
        if not ok:
            results.append(Result(model, check, False, f"harness build failed:\n{log}", time.perf_counter() - t1))
            continue
        rc, text, stats, reports = run_harness(exe, datadir, tsan_plan if check == "tsan" else plan, entry.rtol,
                                               entry.atol, check == "tsan", timeout)
        secs = time.perf_counter() - t1 + (prep if not results else 0.0)
        bad = rc != 0 or reports or not stats or any(stats.get(k) for k in
                                                      ("errors", "mismatches", "differences", "golden_mismatches"))
        detail = "" if not bad else f"exit {rc}; TSan reports: {reports}\n{text[-8000:]}"
        results.append(Result(model, check, not bad, detail, secs, int(stats.get("calls", 0)), stats))
    return results


def main(argv=None) -> int:
    from models.zoo import ZOO
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default=",".join(ZOO), help="comma-separated zoo names (default: all)")
    ap.add_argument("--check", choices=["tsan", "plain", "both"], default="both")
    ap.add_argument("--calls", type=int, default=3000, help="calls per model and build (default 3000)")
    ap.add_argument("--tsan-calls", type=int, default=None, help="calls under TSan (default: --calls)")
    ap.add_argument("--default-schedule", action="store_true",
                    help="compile for targets/c.toml as is (only big loops on the pool)")
    ap.add_argument("--workdir", type=Path, default=ROOT / "build" / "stress")
    args = ap.parse_args(argv)
    why, prefix = tsan_status()
    checks = ["tsan", "plain"] if args.check == "both" else [args.check]
    if why and "tsan" in checks:
        print(f"tsan: SKIPPED: {why}", flush=True)
        checks.remove("tsan")
    elif prefix:
        print(f"tsan: runs under `{' '.join(prefix)}` (this kernel's address layout)", flush=True)
    if not checks:
        return 1
    failed = ran = total_calls = 0
    t0 = time.perf_counter()
    for model in [m for m in args.models.split(",") if m]:
        for r in stress_model(model, checks, args.workdir, calls=args.calls, all_parallel=not args.default_schedule,
                              tsan_calls=args.tsan_calls):
            check = r.check
            ran += 1
            failed += not r.passed
            total_calls += r.calls
            s = r.stats
            print(f"{model:16} {check:6} {'ok' if r.passed else 'FAILED'} ({r.seconds:.1f}s)  calls {r.calls} "
                  f"(run {s.get('run_calls', 0)} on {s.get('run_threads', 0)} threads, invoke {s.get('invoke_calls', 0)} "
                  f"on {s.get('instances', 0)} instances x {s.get('pool', 0)} threads)  mismatches "
                  f"{s.get('mismatches', '?')}  differences {s.get('differences', '?')}  errors {s.get('errors', '?')}",
                  flush=True)
            if not r.passed:
                print(r.detail, flush=True)
    print(f"{ran - failed} passed, {failed} failed; {total_calls} calls in {time.perf_counter() - t0:.0f}s"
          + ("" if "tsan" in checks or args.check == "plain" else " (tsan skipped)"))
    return 1 if failed or ran == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
