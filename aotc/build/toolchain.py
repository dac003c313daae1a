"""Invokes the C compiler named by the target description."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from ..errors import BuildError


def build_shared(sources: list[Path], out: Path, target, include_dirs: list[Path]) -> None:
    """lib `out` from the sources, with the target's compiler and flags (a targets.Target)."""
    cc = target.cc
    if shutil.which(cc) is None:
        raise BuildError(f"C compiler {cc!r} not found", "install gcc or clang, or set cc in the target file")
    cmd = [cc, *target.cflags, *[f"-I{d}" for d in include_dirs],
           *[str(s) for s in sources], "-o", str(out), *target.ldflags]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = "\n".join(proc.stderr.strip().splitlines()[-20:])
        raise BuildError(f"the C compiler failed on the generated code:\n{tail}",
                         "this is a bug in aotc: please report it with the model")
