"""The OpenCL backend: the GPU schedule, OpenCL C kernels, C host code linked with -lOpenCL."""
from __future__ import annotations

from pathlib import Path

from ...build.toolchain import build_shared
from ...program.ir import Program, build_device_program
from ...schedule.gpu import schedule_gpu
from . import emitter


class OpenCLBackend:
    language = "opencl"
    host_threads = False          # the device runs the kernels: --threads does not apply

    def default_threads(self) -> int:
        return 1

    def schedule(self, graph, steps, target: dict, threads: int) -> None:
        schedule_gpu(graph, steps, target)

    def program(self, graph, steps, plan, target: dict) -> Program:
        return build_device_program(steps, plan)

    def runtime_headers(self, program: Program) -> list[str]:
        return ["aotc_runtime.h", "aotc_support.h", "aotc_opencl.h"]

    def sources(self, prefix: str, graph, program: Program, plan, external: bool, target: dict,
                threads: int) -> dict[str, str]:
        cl = emitter.kernel_source(prefix, graph, program)
        return {f"{prefix}.cl": cl,
                f"{prefix}.c": emitter.emit_host(prefix, graph, program, plan, external, target, cl)}

    def build(self, sources: list[Path], lib: Path, target: dict, include_dirs: list[Path]) -> None:
        build_shared(sources, lib, target, include_dirs)


BACKEND = OpenCLBackend()
