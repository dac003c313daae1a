"""What the cuda target's kernels compile to, without a GPU: per device kernel, ptxas's registers,
spills and shared memory, and the machine instructions that matter for speed, counted in the
SASS (all of them, then fused multiply-adds, tensor-core MMAs, shared and global loads,
shuffles, barriers).

python -m tools.sass_stats MODEL [--size small|full] [--target cuda:sm_90] [--shape x=1x3x224x224]
                                  [--match GEMM] [--cuobjdump PATH]

MODEL is a zoo name or an .onnx file. Needs nvcc, and cuobjdump (not in every toolkit install:
`make sass-deps` puts PyPI's nvidia-cuda-cuobjdump and -nvdisasm in the venv). Counts are static (each
instruction once, loops not unrolled by the count): compare kernels' inner loops, not run times.
"""
from __future__ import annotations

import argparse
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

import onnx

from aotc.codegen import get_backend
from aotc.compiler import compile_program

COUNTED = ["FFMA", "HMMA", "LDS", "LDS.64", "LDS.128", "STS", "LDG", "STG", "SHFL", "BAR"]


def find_cuobjdump(given: str | None) -> str | None:
    if given:
        return given
    found = shutil.which("cuobjdump")
    if found:
        return found
    venv = glob.glob(str(Path(sys.prefix) / "lib" / "python*" / "site-packages" / "nvidia" / "*" / "bin" / "cuobjdump"))
    return venv[0] if venv else None


def kernel_stats(cu: Path, arch: str, cuobjdump: str) -> dict:
    """{kernel: {'registers', 'spill', 'smem', and a count per COUNTED mnemonic}}"""
    cubin = cu.with_suffix(".cubin")
    proc = subprocess.run(["nvcc", "-O3", "-std=c++17", f"-arch={arch}", "-cubin", "-Xptxas", "-v",
                           "-I", str(cu.parent), str(cu), "-o", str(cubin)], capture_output=True, text=True)
    if proc.returncode:
        raise SystemExit(proc.stderr[-3000:])
    stats: dict = {}
    name = None
    for line in proc.stderr.splitlines():
        m = re.search(r"Compiling entry function '(\w+)'", line) or re.search(r"Function properties for (\w+)", line)
        if m:
            name = m.group(1)
            stats.setdefault(name, Counter())
        elif name and "spill" in line:
            stats[name]["spill"] = sum(int(x) for x in re.findall(r"(\d+) bytes spill", line))
        elif name and "registers" in line:
            stats[name]["registers"] = int(re.search(r"Used (\d+) registers", line).group(1))
            smem = re.search(r"(\d+) bytes smem", line)
            stats[name]["smem"] = int(smem.group(1)) if smem else 0
    env = dict(os.environ, PATH=f"{Path(cuobjdump).parent}{os.pathsep}{os.environ.get('PATH', '')}")  # its nvdisasm
    done = subprocess.run([cuobjdump, "-sass", str(cubin)], capture_output=True, text=True, env=env)
    if done.returncode:
        raise SystemExit(done.stderr[-2000:])
    sass = done.stdout
    for chunk in re.split(r"\n\s*Function : ", sass)[1:]:
        fn = chunk.split("\n", 1)[0].strip()
        c = stats.setdefault(fn, Counter())
        for op in re.findall(r"/\*[0-9a-f]{4}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)", chunk):
            c["all"] += 1
            base, *mods = op.split(".")
            width = next((m for m in mods if m in ("64", "128")), None)
            if base == "LDS" and width:
                c[f"LDS.{width}"] += 1          # (LDS: the 32-bit ones)
            elif base in COUNTED:
                c[base] += 1
    return stats


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("model")
    ap.add_argument("--size", default="small", choices=["small", "full"])
    ap.add_argument("--target", default="cuda:sm_90")
    ap.add_argument("--shape", action="append", default=[], help="NAME=1x3x224x224 (an .onnx model's inputs)")
    ap.add_argument("--match", default="", help="only kernels whose name or comment contains this")
    ap.add_argument("--cuobjdump", default=None)
    a = ap.parse_args(argv)
    cuobjdump = find_cuobjdump(a.cuobjdump)
    if cuobjdump is None or shutil.which("nvcc") is None:
        raise SystemExit("needs nvcc, and cuobjdump with nvdisasm (make sass-deps installs them from PyPI)")
    work = Path(tempfile.mkdtemp(prefix="aotc-sass-"))
    if a.model.endswith(".onnx"):
        path, name = Path(a.model), Path(a.model).stem
        shapes = {k: tuple(int(d) for d in v.split("x")) for k, v in (s.split("=", 1) for s in a.shape)}
    else:
        from models.zoo import ZOO
        e, name = ZOO[a.model], a.model
        path = work / f"{name}.onnx"
        onnx.save(e.build(a.size), str(path))
        shapes = e.shapes_for(a.size)
    c = compile_program(path, a.target, name, shapes)
    if c.target.language != "cuda":
        raise SystemExit(f"{a.target} is not a cuda target")
    backend = get_backend("cuda")
    for fn, text in backend.sources(name, c.graph, c.program, c.plan, True, c.target, c.threads).items():
        (work / fn).write_text(text)
    from aotc.compiler import abi
    from aotc.paths import RUNTIME_DIR
    (work / f"{name}.h").write_text(abi.emit_header(name, c.graph, c.plan, True, c.threads, c.target, 0))
    for h in backend.runtime_headers(c.program):
        shutil.copyfile(RUNTIME_DIR / h, work / h)
    comments = {ln.kernel.name: ln.kernel.comment for ln in c.program.launches()}
    stats = kernel_stats(work / f"{name}.cu", c.target.arch[-1], cuobjdump)
    cols = ["registers", "spill", "smem", "all"] + COUNTED
    print("| kernel | " + " | ".join(cols) + " |")
    print("|---" * (len(cols) + 1) + "|")
    for k, comment in comments.items():
        if a.match and a.match not in k and a.match not in comment:
            continue
        s = stats.get(k, Counter())
        print(f"| {k}: {comment[:60]} | " + " | ".join(str(s.get(col, 0)) for col in cols) + " |")


if __name__ == "__main__":
    main()
