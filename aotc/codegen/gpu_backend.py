"""What the GPU backends (OpenCL, CUDA) share: the GPU schedule and a device host program.

A subclass names its language and its runtime header, and prints and builds its sources."""
from __future__ import annotations

from ..program.ir import Program, build_device_program
from ..schedule.gpu import schedule_gpu
from ..targets import Target


class GpuBackend:
    language = ""
    device_header = ""            # runtime/aotc_<language>.h: device choice, error mapping
    host_threads = False          # the device runs the kernels: --threads does not apply

    def default_threads(self) -> int:
        return 1

    def schedule(self, graph, steps, target: Target, threads: int) -> None:
        schedule_gpu(graph, steps, target)

    def program(self, graph, steps, plan, target: Target) -> Program:
        return build_device_program(steps, plan)

    def runtime_headers(self, program: Program) -> list[str]:
        return ["aotc_runtime.h", "aotc_support.h", self.device_header]
