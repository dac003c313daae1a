"""The C backend: the CPU schedule, C99 kernels with a thread pool, one launch per kernel."""
from __future__ import annotations

import os
from pathlib import Path

from ...build.toolchain import build_shared
from ...program.ir import Program, build_program
from ...schedule.cpu import schedule_cpu
from ...targets import Target
from . import emitter


class CBackend:
    language = "c"
    host_threads = True          # kernels run on the host's cores: --threads applies

    def default_threads(self) -> int:
        return os.cpu_count() or 1

    def schedule(self, graph, steps, target: Target, threads: int) -> None:
        schedule_cpu(graph, steps, target, threads)

    def program(self, graph, steps, plan, target: Target) -> Program:
        return build_program(steps, plan)

    def runtime_headers(self, program: Program) -> list[str]:
        return emitter.runtime_headers(program)

    def sources(self, prefix: str, graph, program: Program, plan, external: bool, target: Target,
                threads: int) -> dict[str, str]:
        return {f"{prefix}.c": emitter.emit_source(prefix, graph, program, plan, external, target, threads)}

    def build(self, sources: list[Path], lib: Path, target: Target, include_dirs: list[Path]) -> None:
        build_shared(sources, lib, target, include_dirs)


BACKEND = CBackend()
