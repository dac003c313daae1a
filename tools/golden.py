"""Hashes of the generated sources (.c/.cl/.cu/.h, not the runtime headers copied in) of a fixed
set of compiles: every zoo model at small size on c (1 and 2 threads), native (2 threads), opencl,
cuda and option and eager-threshold variants of them (ZOO_RUNS), and every ONNX backend node test
case on c (1 and 2 threads), cuda and an eager opencl (its first data set's shapes; the constants
tools/conformance.py binds where the case needs them). A compile that fails records its error's
first line instead. Nothing is built or run: about 3 minutes on 2 cores.

A change meant to keep what aotc generates (a refactoring) keeps every hash; one that changes it
on purpose says which hashes moved and why, and records the new ones (`make golden-update`).

python -m tools.golden --check tools/golden_sources.json   # compare: exit 1 on a difference
python -m tools.golden --write tools/golden_sources.json   # record (refused where a compile that
                                                          # had a hash now fails: --accept-failures)
  [--only zoo|conformance] [--filter REGEX] [--jobs N]

`native` is whichever CPU target this machine picks; its hashes are compared only where the
reference was recorded with the same one.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import multiprocessing as mp
import os
import re
import sys
import tempfile
import warnings
from pathlib import Path

ZOO_RUNS = [("c", 1), ("c", 2), ("native", 2), ("opencl", 1), ("cuda", 1),
            ("c,direct_conv", 2), ("native,winograd4", 1), ("cuda,tf32", 1), ("eager-threads", 2), ("eager-gpu", 1)]
CASE_RUNS = [("c", 1), ("c", 2), ("cuda", 1), ("eager-gpu", 1)]
# target files made here from the shipped ones, with every threshold at its most eager, so that
# small models take the paths big ones do: every loop and GEMM on the thread pool (c); a
# work-group for every spatial iteration, GEMMs in the smallest tiles and split along K (opencl)
EAGER = {"eager-threads": ("c", {"min_parallel_work": 1, "min_parallel_gemm_macs": 1}),
         "eager-gpu": ("opencl", {"group_min_work": 1, "min_groups": 4096, "split_min_k": 16})}


def _eager_file(name: str, workdir) -> str:
    import re
    from aotc.paths import TARGETS_DIR
    base, values = EAGER[name]
    text = (TARGETS_DIR / f"{base}.toml").read_text().replace(f'name = "{base}"', f'name = "{name}"', 1)
    for key, value in values.items():
        text, n = re.subn(rf"^{key} = .*$", f"{key} = {value}", text, flags=re.M)
        if not n:
            text = text.replace("[gpu]\n", f"[gpu]\n{key} = {value}\n", 1)
    path = Path(workdir) / f"{name}-{os.getpid()}.toml"     # (one per worker: they run at once)
    path.write_text(text)
    return str(path)
SOURCE_SUFFIXES = (".c", ".cl", ".cu", ".h")


def _no_build(*_a, **_k):
    return None


def _digest(out: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(out.iterdir()):
        if p.suffix in SOURCE_SUFFIXES and not p.name.startswith("aotc_"):   # runtime headers: copies
            h.update(p.name.encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()[:20]


def _compile(path, target, threads, shapes, consts=None) -> str:
    from aotc.compiler import compile_model
    if target in EAGER:
        target = _eager_file(target, Path(path).parent)
    with tempfile.TemporaryDirectory() as d:
        try:
            out = compile_model(path, target=target, output_dir=Path(d) / "out", name="m", shapes=shapes,
                                consts=consts, threads=threads, build=_no_build)
        except Exception as ex:  # noqa: BLE001 - an error is a result too
            first = (getattr(ex, "message", None) or str(ex)).strip().splitlines()
            return f"error {type(ex).__name__}: {first[0] if first else ''}"[:200]
        return _digest(out)


def _build_zoo(names, workdir):
    from models.build import save
    from models.zoo import ZOO
    for name in sorted(names):
        save(ZOO[name].build("small"), Path(workdir) / f"{name}.onnx")


def _zoo_job(args):
    kind, name, target, threads, workdir = args
    from models.zoo import ZOO
    return _compile(Path(workdir) / f"{name}.onnx", target, threads, ZOO[name].shapes_for("small"))


def _case_job(args):
    kind, name, target, threads, workdir = args
    import numpy as np
    import onnx
    from tools.conformance import _bindable, _tensor, collect
    case = collect(f"^{re.escape(name)}$")[0]
    path = Path(workdir) / f"{name}.onnx"
    onnx.save(case.model, str(path))
    inits = {t.name for t in case.model.graph.initializer}
    names = [i.name for i in case.model.graph.input if i.name not in inits]
    inputs = [_tensor(a) for a in case.data_sets[0][0]] if case.data_sets else []
    feeds = dict(zip(names, inputs))
    shapes = {n: tuple(a.shape) for n, a in feeds.items() if isinstance(a, np.ndarray)}
    h = _compile(path, target, threads, shapes)
    if h.startswith("error") and re.search(r"known at compile time|known only at run time|--const", h):
        consts = _bindable(feeds)
        if consts:
            h = _compile(path, target, threads, {n: v for n, v in shapes.items() if n not in consts}, consts)
    return h


def _run(job):
    kind, name, target, threads, _ = job
    h = (_zoo_job if kind == "zoo" else _case_job)(job)
    return f"{kind}/{name}/{target}:{threads}", h


def _init():
    warnings.simplefilter("ignore")


def collect_jobs(only, filt, workdir):
    jobs = []
    if only in (None, "zoo"):
        from models.zoo import ZOO
        jobs += [("zoo", n, t, th, workdir) for n in ZOO for t, th in ZOO_RUNS]
    if only in (None, "conformance"):
        from tools.conformance import collect
        jobs += [("case", c.name, t, th, workdir) for c in collect() for t, th in CASE_RUNS]
    if filt:
        rx = re.compile(filt)
        jobs = [j for j in jobs if rx.search(f"{j[0]}/{j[1]}/{j[2]}:{j[3]}")]
    return jobs


def newly_failing(before: dict, after: dict) -> list[str]:
    """The compiles recorded with a hash in `before` whose entry in `after` is an error (a
    write would otherwise record the error as if it were the new code)."""
    return sorted(k for k, h in after.items()
                  if h.startswith("error") and k in before and not before[k].startswith("error"))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--write", type=Path, help="record the hashes (into the file's others, when it exists)")
    g.add_argument("--check", type=Path, help="compare with the hashes of this file")
    ap.add_argument("--only", choices=["zoo", "conformance"])
    ap.add_argument("--filter", help="regular expression on KIND/NAME/TARGET:THREADS (e.g. zoo/bert)")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--accept-failures", action="store_true",
                    help="with --write: record compiles that fail where the file has a hash")
    a = ap.parse_args(argv)
    from aotc.targets import native_target
    native = native_target()
    with tempfile.TemporaryDirectory() as workdir:
        jobs = collect_jobs(a.only, a.filter, workdir)
        _build_zoo({j[1] for j in jobs if j[0] == "zoo"}, workdir)   # once, before the workers read them
        results = {}
        with mp.get_context("fork").Pool(a.jobs, initializer=_init, maxtasksperchild=50) as pool:
            for k, (key, h) in enumerate(pool.imap_unordered(_run, jobs, chunksize=4), 1):
                results[key] = h
                if k % 500 == 0:
                    print(f"{k}/{len(jobs)}", file=sys.stderr, flush=True)
    if a.write:
        old = json.loads(a.write.read_text()) if a.write.exists() else {"native": native, "hashes": {}}
        if old["native"] != native and any("/native:" in k for k in results):
            print(f"the file's native hashes are {old['native']}'s, this machine's native is {native}", file=sys.stderr)
            return 2
        broken = newly_failing(old["hashes"], results)
        for k in broken:
            print(f"NOW FAILS {k}: {results[k]}", file=sys.stderr)
        if broken and not a.accept_failures:
            print(f"{len(broken)} compiles that had a hash now fail: nothing written "
                  "(--accept-failures records them)", file=sys.stderr)
            return 1
        merged = dict(sorted({**old["hashes"], **results}.items()))
        a.write.write_text(json.dumps({"native": old["native"], "hashes": merged}, indent=0) + "\n")
        print(f"{len(results)} hashes written to {a.write}")
        return 0
    ref = json.loads(a.check.read_text())
    same_native = ref["native"] == native
    diff = [k for k, h in sorted(results.items())
            if k in ref["hashes"] and ref["hashes"][k] != h and (same_native or "/native:" not in k)]
    missing = [k for k in sorted(results) if k not in ref["hashes"]]
    broken = set(newly_failing(ref["hashes"], results))
    for k in diff:
        print(f"{'NOW FAILS' if k in broken else 'DIFFERS'} {k}: {ref['hashes'][k]} -> {results[k]}")
    for k in missing:
        print(f"NEW {k}: {results[k]}")
    print(f"{len(results)} compiles, {len(diff)} differ, {len(missing)} not in the reference"
          + ("" if same_native else f" (native is {native} here, {ref['native']} there: not compared)"))
    return 1 if diff else 0


if __name__ == "__main__":
    sys.exit(main())
