"""Kernel IR as CUDA C++: the GPU printer (codegen/gpu.py) with CUDA's spellings:
`extern "C" __global__` kernels, `__restrict__`, `__shared__` arrays, C types and C math names
(expf; CUDA's device math library has the C99 set), blockIdx / threadIdx, __syncthreads(),
__half conversions, atomicCAS.
"""
from __future__ import annotations

import numpy as np

from ...kernel.ir import UNROLLED, Barrier, Buffer, Loop
from ..abi import ctype
from ..gpu import GpuPrinter

_DIMS = "xyz"


class CudaPrinter(GpuPrinter):
    language = "CUDA C++"
    restrict = "__restrict__"
    kernel_qualifier = 'extern "C" __global__ void'
    index_type = "int64_t"
    atomic_cas = "atomicCAS"

    def type_name(self, dt) -> str:
        dt = np.dtype(dt)
        return "__half" if dt.name == "float16" else ctype(dt)

    def load(self, buf: Buffer, index: str) -> str:
        if buf.dtype.name == "float16" and buf.value_dtype != buf.dtype:
            return f"__half2float({buf.name}[{index}])"
        return f"{buf.name}[{index}]"

    def store(self, buf: Buffer, index: str, value: str) -> str:
        if buf.dtype.name == "float16" and buf.value_dtype != buf.dtype:
            return f"{buf.name}[{index}] = __float2half({value});"
        return f"{buf.name}[{index}] = {value};"

    def gpu_index(self, axis: str) -> str:
        kind, dim = axis.split(".")
        d = _DIMS[int(dim)]
        if kind == "global":
            return f"((int64_t)blockIdx.{d} * blockDim.{d} + threadIdx.{d})"
        return f"(int64_t){'blockIdx' if kind == 'group' else 'threadIdx'}.{d}"

    def barrier(self, s: Barrier) -> list[str]:
        return ["__syncthreads();"]

    def loop_pragma(self, s: Loop) -> str:
        return "#pragma unroll" if s.kind == UNROLLED else ""

    def local_decl(self, buf: Buffer) -> str:
        q = "__shared__ " if buf.space == "local" else ""
        return f"{q}{self.type_name(buf.dtype)} {buf.name}[{buf.size}];"
