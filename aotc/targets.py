"""Target descriptions: data files under targets/, one per target."""
from __future__ import annotations

import tomllib

from .errors import AotcError
from .paths import TARGETS_DIR


def available() -> list[str]:
    return sorted(p.stem for p in TARGETS_DIR.glob("*.toml"))


def load_target(name: str) -> dict:
    p = TARGETS_DIR / f"{name}.toml"
    if not p.is_file():
        raise AotcError(f"unknown target {name!r}", f"available targets: {', '.join(available())}")
    with open(p, "rb") as f:
        t = tomllib.load(f)
    if t.get("language") != "c":
        raise AotcError(f"target {name!r} ({t.get('language')}) has no emitter yet", "use --target c")
    return t
