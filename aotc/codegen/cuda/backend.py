"""The CUDA backend: the GPU schedule, CUDA C++ kernels and host code, built by nvcc."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from ...build.toolchain import build_shared
from ...program.ir import Program
from ...targets import Target
from ..gpu_backend import GpuBackend
from . import emitter


class CudaBackend(GpuBackend):
    language = "cuda"
    device_header = "aotc_cuda.h"

    def sources(self, prefix: str, graph, program: Program, plan, external: bool, target: Target,
                threads: int) -> dict[str, str]:
        return {f"{prefix}.cu": emitter.emit_cuda(prefix, graph, program, plan, external, target)}

    def build(self, sources: list[Path], lib: Path, target: Target, include_dirs: list[Path]) -> None:
        gencode = []
        for i, arch in enumerate(target.arch):
            cc = arch.replace("sm_", "")
            # the first (oldest) architecture also as PTX, so newer GPUs can compile it at load time
            gencode += ["-gencode", f"arch=compute_{cc},code=sm_{cc}"]
            if i == 0:
                gencode += ["-gencode", f"arch=compute_{cc},code=compute_{cc}"]
        # float32 operations flush subnormal inputs and results to zero, as the CPU targets' runs
        # do (passes/subnormals.py), unless the target keeps IEEE subnormals
        ftz = ["-ftz=true"] if target.flushes_subnormals else []
        build_shared(sources, lib, replace(target, cflags=tuple(target.cflags) + tuple(gencode) + tuple(ftz)),
                     include_dirs)


BACKEND = CudaBackend()
