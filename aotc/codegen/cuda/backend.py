"""The CUDA backend: the GPU schedule, CUDA C++ kernels and host code, built by nvcc."""
from __future__ import annotations

from pathlib import Path

from ...build.toolchain import build_shared
from ...program.ir import Program, build_device_program
from ...schedule.gpu import schedule_gpu
from . import emitter


class CudaBackend:
    language = "cuda"
    host_threads = False          # the device runs the kernels: --threads does not apply

    def default_threads(self) -> int:
        return 1

    def schedule(self, graph, steps, target: dict, threads: int) -> None:
        schedule_gpu(graph, steps, target)

    def program(self, graph, steps, plan, target: dict) -> Program:
        return build_device_program(steps, plan)

    def runtime_headers(self, program: Program) -> list[str]:
        return ["aotc_runtime.h", "aotc_support.h", "aotc_cuda.h"]

    def sources(self, prefix: str, graph, program: Program, plan, external: bool, target: dict,
                threads: int) -> dict[str, str]:
        return {f"{prefix}.cu": emitter.emit_cuda(prefix, graph, program, plan, external, target)}

    def build(self, sources: list[Path], lib: Path, target: dict, include_dirs: list[Path]) -> None:
        gencode = []
        for i, arch in enumerate(target["arch"]):
            cc = arch.replace("sm_", "")
            # the first (oldest) architecture also as PTX, so newer GPUs can compile it at load time
            gencode += ["-gencode", f"arch=compute_{cc},code=sm_{cc}"]
            if i == 0:
                gencode += ["-gencode", f"arch=compute_{cc},code=compute_{cc}"]
        build_shared(sources, lib, dict(target, cflags=list(target.get("cflags", [])) + gencode), include_dirs)


BACKEND = CudaBackend()
