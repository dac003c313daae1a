"""The OpenCL backend: the GPU schedule, OpenCL C kernels, C host code linked with -lOpenCL."""
from __future__ import annotations

from pathlib import Path

from ...build.toolchain import build_shared
from ...program.ir import Program
from ...targets import Target
from ..gpu_backend import GpuBackend
from . import emitter


class OpenCLBackend(GpuBackend):
    language = "opencl"
    device_header = "aotc_opencl.h"

    def sources(self, prefix: str, graph, program: Program, plan, external: bool, target: Target,
                threads: int) -> dict[str, str]:
        cl = emitter.kernel_source(prefix, graph, program)
        return {f"{prefix}.cl": cl,
                f"{prefix}.c": emitter.emit_host(prefix, graph, program, plan, external, target, cl)}

    def build(self, sources: list[Path], lib: Path, target: Target, include_dirs: list[Path]) -> None:
        build_shared(sources, lib, target, include_dirs)


BACKEND = OpenCLBackend()
