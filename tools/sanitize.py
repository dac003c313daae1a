"""Memory checking of compiled artifacts: AddressSanitizer + UndefinedBehaviorSanitizer, and
valgrind memcheck.

For each model: compile it with aotc (target c), write a small standalone C driver, and build
it together with the artifact's own C sources (every `.c` in manifest.json "sources"):

  asan      cc -std=c99 -g -O1 -fsanitize=address,undefined -fno-sanitize-recover=all
            inputs, outputs and the workspace are heap blocks of exactly the size the manifest
            and <NAME>_WORKSPACE_BYTES give, so any access past one of them is a report; the
            workspace starts filled with 0xFF bytes (NaN for floats), so a read of scratch
            memory before it is written shows up as a mismatch with ONNX Runtime
  valgrind  the same driver built without sanitizers, run under
            valgrind --error-exitcode=1 --leak-check=full --errors-for-leak-kinds=all; when the
            header has <name>_create, it also goes through create (loading external weights
            from a file) / invoke / destroy, the embedding API

The driver reads each input from a binary file, runs, checks the status, and writes each
output to a binary file; the outputs are compared with ONNX Runtime on the same inputs
(fresh seeded random ones, token ids within range). Any sanitizer or valgrind report, a
non-zero status or a mismatch fails the model.

The driver relies only on the artifact contract: <name>.h declares
<name>_run(const <name>_inputs *, <name>_outputs *, void *workspace),
<NAME>_WORKSPACE_BYTES / <NAME>_WORKSPACE_ALIGN and the structs with one field per manifest
input/output (c_name).

    python -m tools.sanitize                       # every small zoo model, both checks (make sanitize, ~90 s)
    python -m tools.sanitize --models mlp,lenet5 --check asan
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
CC = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or "cc"
SANITIZE_FLAGS = ["-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-fno-omit-frame-pointer"]
ASAN_ENV = {"ASAN_OPTIONS": "detect_leaks=1:halt_on_error=1:abort_on_error=0:detect_stack_use_after_return=1",
            "UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=1"}
VALGRIND = ["valgrind", "--error-exitcode=99", "--leak-check=full", "--show-leak-kinds=all",
            "--errors-for-leak-kinds=all", "--track-origins=yes", "-q"]
REPORT_MARKERS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:", "== ERROR", "Invalid read",
                  "Invalid write", "uninitialised", "definitely lost", "indirectly lost")


@dataclass
class Result:
    model: str
    check: str
    passed: bool
    detail: str = ""
    seconds: float = 0.0
    max_abs_err: dict = field(default_factory=dict)


def tool_status() -> dict[str, str | None]:
    """None when a check can run here, else the reason it cannot."""
    status: dict[str, str | None] = {"asan": None, "valgrind": None}
    if not shutil.which(CC):
        status["asan"] = status["valgrind"] = f"no C compiler ({CC})"
        return status
    with tempfile.TemporaryDirectory(prefix="aotc_sanitize_probe_") as d:   # (one per process: test workers)
        probe = Path(d)
        (probe / "p.c").write_text("#include <stdlib.h>\nint main(void){void *p = malloc(4); free(p); return 0;}\n")
        p = subprocess.run([CC, *SANITIZE_FLAGS, str(probe / "p.c"), "-o", str(probe / "p")], capture_output=True,
                           text=True)
        if p.returncode != 0:
            status["asan"] = f"{CC} cannot build with -fsanitize=address,undefined (libasan/libubsan missing?)"
        elif subprocess.run([str(probe / "p")], capture_output=True).returncode != 0:
            status["asan"] = "a sanitized program does not run here (ptrace/ASLR restrictions?)"
    if not shutil.which("valgrind"):
        status["valgrind"] = "valgrind is not installed (apt-get install valgrind)"
    return status


# ------------------------------------------------------------------------------------------ the driver
def driver_source(name: str, manifest: dict, with_create: bool) -> str:
    """A C99 program: argv = [weights path or "-", input files..., output files...]."""
    ins, outs = manifest["inputs"], manifest["outputs"]
    up = name.upper()
    nbytes = lambda p: int(np.prod(p["shape"], dtype=np.int64)) * np.dtype(p["dtype"]).itemsize  # noqa: E731
    lines = [
        "#define _POSIX_C_SOURCE 200112L",
        "#include <stdio.h>", "#include <stdlib.h>", "#include <string.h>",
        f'#include "{name}.h"', "",
        "static void *load(const char *path, size_t n)",
        "{",
        "    FILE *f = fopen(path, \"rb\");",
        "    void *p = malloc(n ? n : 1);",
        "    size_t got;",
        "    if (!f || !p) { fprintf(stderr, \"cannot open %s\\n\", path); exit(10); }",
        "    got = fread(p, 1, n, f);",
        "    fclose(f);",
        "    if (got != n) { fprintf(stderr, \"%s: %lu of %lu bytes\\n\", path, (unsigned long)got, (unsigned long)n); exit(11); }",
        "    return p;",
        "}", "",
        "static void save(const char *path, const void *p, size_t n)",
        "{",
        "    FILE *f = fopen(path, \"wb\");",
        "    if (!f || fwrite(p, 1, n, f) != n || fclose(f) != 0) { fprintf(stderr, \"cannot write %s\\n\", path); exit(12); }",
        "}", "",
        "int main(int argc, char **argv)",
        "{",
        f"    {name}_inputs in;",
        f"    {name}_outputs out;",
        "    void *ws = NULL;",
        "    int status;",
        f"    void *x[{max(len(ins), 1)}], *y[{max(len(outs), 1)}];",
        f"    if (argc != {2 + len(ins) + len(outs)}) return 2;",
        "    memset(&in, 0, sizeof in);",
        "    memset(&out, 0, sizeof out);",
    ]
    for k, p in enumerate(ins):
        lines.append(f"    x[{k}] = load(argv[{2 + k}], {nbytes(p)}u);")
        lines.append(f"    in.{p['c_name']} = x[{k}];")
    for k, p in enumerate(outs):
        lines.append(f"    y[{k}] = malloc({max(nbytes(p), 1)}u);")
        lines.append(f"    if (!y[{k}]) return 3;")
        lines.append(f"    memset(y[{k}], 0xFF, {nbytes(p)}u);")
        lines.append(f"    out.{p['c_name']} = y[{k}];")
    lines += [
        f"    if (posix_memalign(&ws, {up}_WORKSPACE_ALIGN, {up}_WORKSPACE_BYTES ? {up}_WORKSPACE_BYTES : 1) != 0) return 4;",
        f"    memset(ws, 0xFF, {up}_WORKSPACE_BYTES ? {up}_WORKSPACE_BYTES : 1);   /* NaN garbage: no read before write */",
        "    if (strcmp(argv[1], \"-\") == 0) {",
        f"        status = {name}_run(&in, &out, ws);",
        f"        if (status != 0) {{ fprintf(stderr, \"run: %d %s\\n\", status, {name}_strerror(status)); return 5; }}",
        "    }",
    ]
    if with_create:
        lines += [
            "    else {",
            f"        {name}_model *model = NULL;",
            f"        status = {name}_create(strcmp(argv[1], \"embedded\") == 0 ? NULL : argv[1], &model);",
            f"        if (status != 0) {{ fprintf(stderr, \"create: %d %s\\n\", status, {name}_strerror(status)); return 6; }}",
            f"        status = {name}_invoke(model, &in, &out);",
            f"        {name}_destroy(model);",
            f"        if (status != 0) {{ fprintf(stderr, \"invoke: %d %s\\n\", status, {name}_strerror(status)); return 7; }}",
            "    }",
        ]
    else:
        lines.append("    else return 8;")
    for k, p in enumerate(outs):
        lines.append(f"    save(argv[{2 + len(ins) + k}], y[{k}], {nbytes(p)}u);")
    for k in range(len(ins)):
        lines.append(f"    free(x[{k}]);")
    for k in range(len(outs)):
        lines.append(f"    free(y[{k}]);")
    lines += ["    free(ws);", "    return 0;", "}", ""]
    return "\n".join(lines)


def build_driver(art: Path, name: str, manifest: dict, exe: Path, sanitize: bool) -> tuple[bool, str]:
    header = (art / manifest["header"]).read_text()
    with_create = re.search(rf"\b{name}_create\s*\(", header) is not None
    src = exe.with_suffix(".c")
    src.write_text(driver_source(name, manifest, with_create))
    sources = [str(art / s) for s in manifest["sources"] if s.endswith(".c")]
    flags = ["-std=c99", "-g", "-O1"] + (SANITIZE_FLAGS if sanitize else [])
    cmd = [CC, *flags, f"-I{art}", str(src), *sources, "-o", str(exe), "-lm", "-lpthread"]
    p = subprocess.run(cmd, capture_output=True, text=True)
    return p.returncode == 0, (" ".join(cmd) + "\n" + p.stderr)[-4000:]


# ------------------------------------------------------------------------------------------ one model
def _reference(path: Path, feeds: dict) -> list[np.ndarray]:
    from aotc.check.runner import reference_outputs
    return reference_outputs(path, feeds)


def prepare(model: str, workdir: Path, weights: str = "embed", entry=None):
    """Build the zoo model (small; `entry`: another model with a zoo entry's build, shapes_for,
    rtol and atol), compile it; returns (onnx path, artifact dir, name, manifest, feeds, entry)."""
    from aotc.check.inputs import sample_inputs
    from aotc.compiler import compile_model
    from aotc.frontend import import_model, load_onnx
    from models.zoo import ZOO

    entry = entry or ZOO[model]
    workdir.mkdir(parents=True, exist_ok=True)
    path = workdir / f"{model}.onnx"
    onnx.save(entry.build("small"), str(path))
    name = f"san_{model}"
    art = compile_model(path, target="c", output_dir=workdir / f"out_{weights}", name=name,
                        shapes=entry.shapes_for("small"), weights=weights)
    manifest = json.loads((art / "manifest.json").read_text())
    g = import_model(load_onnx(path), "sanitize", entry.shapes_for("small"))
    feeds = sample_inputs(g, seed=20261123)
    return path, art, name, manifest, feeds, entry


def run_driver(cmd: list[str], env: dict, timeout: int) -> tuple[int, str]:
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                       env={**{k: v for k, v in os.environ.items() if not k.startswith(("ASAN", "UBSAN"))}, **env})
    return p.returncode, p.stdout + p.stderr


def check_model(model: str, check: str, workdir: Path, timeout: int = 600, entry=None) -> Result:
    t0 = time.perf_counter()
    weights = "external" if check == "valgrind" else "embed"
    path, art, name, manifest, feeds, entry = prepare(model, workdir / model, weights, entry)
    exe = workdir / model / f"driver_{check}"
    ok, log = build_driver(art, name, manifest, exe, sanitize=(check == "asan"))
    if not ok:
        return Result(model, check, False, f"driver build failed:\n{log}", time.perf_counter() - t0)
    in_files, out_files = [], []
    for p in manifest["inputs"]:
        f = workdir / model / f"in_{p['c_name']}.bin"
        np.ascontiguousarray(feeds[p["name"]].astype(np.dtype(p["dtype"]))).tofile(f)
        in_files.append(str(f))
    for p in manifest["outputs"]:
        out_files.append(str(workdir / model / f"out_{check}_{p['c_name']}.bin"))
    modes = ["-"]
    if check == "valgrind" and manifest["weights"]["mode"] == "external":
        header = (art / manifest["header"]).read_text()
        if re.search(rf"\b{name}_create\s*\(", header):
            modes.append(str(art / manifest["weights"]["file"]))
    ref = _reference(path, feeds)
    errs = {}
    for mode in modes:
        if check == "asan":
            cmd, env = [str(exe), mode, *in_files, *out_files], ASAN_ENV
        else:
            cmd, env = [*VALGRIND, str(exe), mode, *in_files, *out_files], {}
        if mode == "-" and manifest["weights"]["mode"] == "external":
            continue                       # _run needs the weights linked in; external ones go through create
        try:
            rc, text = run_driver(cmd, env, timeout)
        except subprocess.TimeoutExpired:
            return Result(model, check, False, f"timed out after {timeout}s", time.perf_counter() - t0)
        reports = [m for m in REPORT_MARKERS if m in text]
        if rc != 0 or reports:
            return Result(model, check, False, f"{exe.name} {mode} exited {rc}; reports: {reports}\n{text[-6000:]}",
                          time.perf_counter() - t0)
        for p, f, want in zip(manifest["outputs"], out_files, ref):
            got = np.fromfile(f, dtype=np.dtype(p["dtype"])).reshape(p["shape"])
            want = np.asarray(want)
            if got.shape != want.shape or not np.allclose(got, want, rtol=entry.rtol, atol=entry.atol, equal_nan=False):
                err = float(np.max(np.abs(got.astype(np.float64) - want.astype(np.float64)))) \
                    if got.shape == want.shape else float("inf")
                return Result(model, check, False, f"output {p['name']} differs from ONNX Runtime (max abs {err:.3g})",
                              time.perf_counter() - t0)
            errs[p["name"]] = float(np.max(np.abs(got.astype(np.float64) - want.astype(np.float64)))) if got.size else 0.0
    if check == "valgrind" and len(modes) == 1 and manifest["weights"]["mode"] == "external":
        return Result(model, check, False, "external weights but no <name>_create in the header", time.perf_counter() - t0)
    return Result(model, check, True, "", time.perf_counter() - t0, errs)


def main(argv=None) -> int:
    from models.zoo import ZOO
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default=",".join(ZOO), help="comma-separated zoo names (default: all)")
    ap.add_argument("--check", choices=["asan", "valgrind", "both"], default="both")
    ap.add_argument("--valgrind-models", default=None,
                    help="models for the valgrind check when --check both (default: those of --models)")
    ap.add_argument("--workdir", type=Path, default=ROOT / "build" / "sanitize")
    args = ap.parse_args(argv)
    status = tool_status()
    plan = []
    models = [m for m in args.models.split(",") if m]
    if args.check in ("asan", "both"):
        plan += [(m, "asan") for m in models]
    if args.check == "valgrind":
        plan += [(m, "valgrind") for m in models]
    elif args.check == "both":
        vg = models if args.valgrind_models is None else [m for m in args.valgrind_models.split(",") if m]
        plan += [(m, "valgrind") for m in vg]
    failed = ran = 0
    for model, check in plan:
        if status[check]:
            print(f"{model:16} {check:9} SKIPPED: {status[check]}", flush=True)
            continue
        r = check_model(model, check, args.workdir)
        ran += 1
        failed += not r.passed
        errs = ", ".join(f"{k} {v:.2g}" for k, v in r.max_abs_err.items())
        print(f"{model:16} {check:9} {'ok' if r.passed else 'FAILED'} ({r.seconds:.1f}s){'  max abs err: ' + errs if errs else ''}",
              flush=True)
        if not r.passed:
            print(r.detail, flush=True)
    skipped = [c for c, why in status.items() if why]
    print(f"{ran - failed} passed, {failed} failed" + (f" ({', '.join(skipped)} skipped)" if skipped else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
