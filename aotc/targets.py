"""Target descriptions: data files under targets/, one per target, plus `native`.

`native` is not a file: it is the best CPU target this machine runs, picked by the ISA
extensions each target file `requires` (from /proc/cpuinfo) and its `native_rank`.
"""
from __future__ import annotations

import platform
import re
import tomllib
from functools import lru_cache
from pathlib import Path

from .errors import AotcError
from .paths import TARGETS_DIR

NATIVE = "native"
# the languages aotc prints and builds (a backend each: codegen/__init__.py)
LANGUAGES = ("c", "cuda", "opencl")


def available() -> list[str]:
    """Target names: the files under targets/, and native."""
    return sorted(p.stem for p in TARGETS_DIR.glob("*.toml")) + [NATIVE]


def _read(name: str) -> dict:
    """A target by name (targets/<name>.toml) or by the path of a .toml file of one's own."""
    p = Path(name) if name.endswith(".toml") else TARGETS_DIR / f"{name}.toml"
    if not p.is_file():
        raise AotcError(f"unknown target {name!r}",
                        f"available targets: {', '.join(available())}, or the path of a target .toml file")
    try:
        with open(p, "rb") as f:
            t = tomllib.load(f)
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise AotcError(f"cannot read target file {p}: {e}") from None
    if not isinstance(t.get("name"), str) or not isinstance(t.get("language"), str):
        raise AotcError(f"target file {p} needs a name and a language")
    return t


@lru_cache(maxsize=1)
def cpu_flags() -> frozenset:
    """The ISA extensions of this CPU (x86 flags from /proc/cpuinfo; empty elsewhere)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


def runs_here(t: dict) -> bool:
    """Can this machine run code built for target t?"""
    req = set(t.get("requires", []))
    if req and platform.machine() not in ("x86_64", "AMD64", "i686", "i386"):
        return False
    return req <= cpu_flags()


def native_target() -> str:
    """The best CPU target this machine runs."""
    best, rank = "c", -1
    for p in sorted(TARGETS_DIR.glob("*.toml")):
        t = _read(p.stem)
        if t.get("language") == "c" and "native_rank" in t and runs_here(t) and t["native_rank"] > rank:
            best, rank = p.stem, t["native_rank"]
    return best


def load_target(name: str) -> dict:
    """A target description, by name or .toml path; `native` resolves to the best CPU target of
    this machine (its `requested` field then says native). `name:arch` picks one architecture
    of a target that has several (cuda:sm_90); `,option` turns on one of the target's
    [options] (cuda,tf32), each a switch in its [numerics] table."""
    requested = name
    spec, *options = [name] if name.endswith(".toml") else name.split(",")   # cuda:sm_90,tf32: with options
    if spec == NATIVE:                         # native,winograd4: the native target with an option
        spec = native_target()
        name = ",".join([spec, *options])
    base, _, arch = spec.partition(":")        # cuda:sm_90: the cuda target for one architecture
    t = _read(base if arch else spec)
    if arch:
        if "arch" not in t or not re.fullmatch(r"sm_\d+a?", arch):
            raise AotcError(f"target {name!r}: {base!r} takes no architecture {arch!r}",
                            "write it as cuda:sm_80, cuda:sm_90...")
        t["arch"] = [arch]
    allowed = t.get("options", {})
    for opt in options:
        if opt not in allowed:
            raise AotcError(f"target {name!r}: {base!r} has no option {opt!r}",
                            f"its options: {', '.join(allowed) or 'none'}")
        t.setdefault("numerics", {})[opt] = True
    if arch or options:
        t["name"] = name
    t["requested"] = requested
    if t.get("language") not in LANGUAGES:
        raise AotcError(f"target {t['name']!r} has language {t.get('language')!r}, which aotc has no backend for",
                        f"backends: {', '.join(LANGUAGES)}")
    return t
