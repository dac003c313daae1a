"""Kernel IR as CUDA C++: the GPU printer (codegen/gpu.py) with CUDA's spellings:
`extern "C" __global__` kernels, `__restrict__`, `__shared__` arrays, C types and C math names
(expf; CUDA's device math library has the C99 set), blockIdx / threadIdx, __syncthreads(),
__half and __nv_bfloat16 conversions (cuda_fp16.h, cuda_bf16.h), atomicCAS; and what only CUDA
has here: warp shuffles (__shfl_xor_sync) and tensor-core steps (`Mma`) as wmma fragments (mma.h,
`wmma` naming nvcuda::wmma).
"""
from __future__ import annotations

import numpy as np

from ...kernel.ir import MMA_A, MMA_B, MMA_C, MMA_K, MMA_M, MMA_N, UNROLLED, Barrier, Buffer, Loop, Mma, Stmt
from ..abi import ctype
from ..cstyle import SMALL_TYPE_CONVERSIONS
from ..gpu import GpuPrinter

_FRAGMENT = {MMA_A: "wmma::matrix_a", MMA_B: "wmma::matrix_b", MMA_C: "wmma::accumulator"}

_DIMS = "xyz"
_NARROW_TYPES = {"float16": "__half", "bfloat16": "__nv_bfloat16"}


class CudaPrinter(GpuPrinter):
    language = "CUDA C++"
    restrict = "__restrict__"
    kernel_qualifier = 'extern "C" __global__ void'
    index_type = "int64_t"
    atomic_cas = "atomicCAS"

    # (__float2half and __float2bfloat16 round to nearest even; a NaN stays a NaN; the 8-, 4- and
    # 2-bit types: runtime/aotc_support.h's functions, host and device there)
    narrow_conversions = {"float16": ("__half2float", "__float2half"),
                          "bfloat16": ("__bfloat162float", "__float2bfloat16"), **SMALL_TYPE_CONVERSIONS}

    def type_name(self, dt) -> str:
        return _NARROW_TYPES.get(np.dtype(dt).name) or ctype(dt)

    def gpu_index(self, axis: str) -> str:
        kind, dim = axis.split(".")
        d = _DIMS[int(dim)]
        if kind == "global":
            return f"((int64_t)blockIdx.{d} * blockDim.{d} + threadIdx.{d})"
        return f"(int64_t){'blockIdx' if kind == 'group' else 'threadIdx'}.{d}"

    def bitcast(self, x: str, src, dst) -> str:
        return f"aotc_bitcast<{self.type_name(dst)}>({x})"       # (runtime/aotc_cuda.h)

    def warp_xor(self, value: str, lane_mask: str) -> str:
        return f"__shfl_xor_sync(0xffffffffu, {value}, {lane_mask})"

    def barrier(self, s: Barrier) -> list[str]:
        return ["__syncwarp();" if s.scope == "warp" else "__syncthreads();"]

    def loop_pragma(self, s: Loop) -> str:
        return "#pragma unroll" if s.kind == UNROLLED else ""

    def local_decl(self, buf: Buffer) -> str:
        if buf.space in _FRAGMENT:
            shape = f"{MMA_M}, {MMA_N}, {MMA_K}"
            kind = "float" if buf.space == MMA_C else "wmma::precision::tf32, wmma::row_major"
            return f"wmma::fragment<{_FRAGMENT[buf.space]}, {shape}, {kind}> {buf.name}[{buf.size}];"
        q = "__shared__ __align__(32) " if buf.space == "local" else ""   # (wmma loads need 32 bytes)
        return f"{q}{self.type_name(buf.dtype)} {buf.name}[{buf.size}];"

    def stmt(self, s: Stmt, ind: int) -> None:
        if not isinstance(s, Mma):
            return super().stmt(s, ind)
        pad = self.indent * ind
        frag = f"{s.frag.name}[{self.expr(s.at)}]"
        if s.op == "zero":
            self.out(f"{pad}wmma::fill_fragment({frag}, 0.0f);")
        elif s.op == "load":
            self.out(f"{pad}wmma::load_matrix_sync({frag}, {self.expr(s.offset_ptr())}, {s.ld});")
            self.out(f"{pad}for (int q = 0; q < {frag}.num_elements; ++q) "
                     f"{frag}.x[q] = wmma::__float_to_tf32({frag}.x[q]);")
        elif s.op == "mma":
            a = f"{s.a[0].name}[{self.expr(s.a[1])}]"
            b = f"{s.b[0].name}[{self.expr(s.b[1])}]"
            self.out(f"{pad}wmma::mma_sync({frag}, {a}, {b}, {frag});")
        elif s.op == "store":
            self.out(f"{pad}wmma::store_matrix_sync({self.expr(s.offset_ptr())}, {frag}, {s.ld}, wmma::mem_row_major);")
        else:
            raise ValueError(f"unknown Mma op {s.op!r}")
