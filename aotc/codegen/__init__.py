"""Backends: one per target language, chosen by the target description's `language`.

A backend takes the lowered kernels (what to compute) and makes them run on its machine:
    schedule(graph, steps, target, threads)   how each kernel runs (aotc/schedule)
    program(graph, steps, plan, target)       the host program: launches on the memory plan
    sources(...)                              the generated files besides header and weights
    runtime_headers(program)                  runtime/ headers the artifact includes
    build(...)                                the toolchain call that makes lib<name>.so
Every backend's kernels are printed by a subclass of the one C-style printer (cstyle.py).
"""
from __future__ import annotations

import importlib

from ..errors import AotcError
from ..targets import LANGUAGES

# language -> module implementing the Backend interface (codegen/<language>/backend.py)
_BACKENDS = {lang: f"{__name__}.{lang}.backend" for lang in LANGUAGES}


def languages() -> list[str]:
    return sorted(_BACKENDS)


def get_backend(language: str):
    mod = _BACKENDS.get(language)
    if mod is None:
        raise AotcError(f"no backend for target language {language!r}", f"aotc knows: {', '.join(languages())}")
    return importlib.import_module(mod).BACKEND
