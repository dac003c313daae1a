"""Kernel IR as OpenCL C (1.2): the GPU printer (codegen/gpu.py) with OpenCL's spellings:
`__kernel void`, `__global` pointers and `__local` arrays, OpenCL's types (long, uchar,
half...), overloaded math builtins (exp, not expf), work-item indices (get_global_id...),
barrier(), vload_half / vstore_half, atomic_cmpxchg. bfloat16 has no OpenCL type: it is
stored as ushort bits and converted by two small functions the source defines where it uses
them (`prelude`); the 8-, 4- and 2-bit types are uchar bits, converted by the C runtime's
functions, which the source copies where it uses them.
"""
from __future__ import annotations

import numpy as np

from ...errors import UnsupportedError
from ...kernel.ir import UNROLLED, Barrier, Buffer, Loop
from ...paths import RUNTIME_DIR
from ..cstyle import SMALL_TYPE_CONVERSIONS
from ..gpu import GpuPrinter

_TYPES = {"float32": "float", "float64": "double", "float16": "half", "int8": "char", "int16": "short",
          "int32": "int", "int64": "long", "uint8": "uchar", "uint16": "ushort", "uint32": "uint",
          "uint64": "ulong", "bool": "uchar", "bfloat16": "ushort",
          **{name: "uchar" for name in SMALL_TYPE_CONVERSIONS}}
# bfloat16 is a float32's upper 16 bits: widened exactly; narrowed to nearest even, a NaN kept a
# (quiet) NaN, as runtime/aotc_support.h does for C
_BF16_FUNCTIONS = """\
float aotc_bf16_to_float(ushort b)
{
    return as_float((uint)b << 16);
}

ushort aotc_bf16_from_float(float f)
{
    uint u = as_uint(f);
    return isnan(f) ? (ushort)((u >> 16) | 0x40u) : (ushort)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
"""
_AXES = {"global": "get_global_id", "group": "get_group_id", "local": "get_local_id"}


def _small_type_functions() -> str:
    """The 8-, 4- and 2-bit types' conversions: the C runtime's own code (runtime/aotc_support.h,
    between its aotc:small-types marks), with C99's fixed-width type names as OpenCL's."""
    text = (RUNTIME_DIR / "aotc_support.h").read_text()
    begin, end = text.index("/* aotc:small-types-begin"), text.index("/* aotc:small-types-end */")
    return ("#define AOTC_ELEMENT_FN static inline\n"
            "typedef uchar uint8_t;\ntypedef char int8_t;\ntypedef uint uint32_t;\n"
            + text[begin:end])


class OpenCLPrinter(GpuPrinter):
    language = "OpenCL C"
    kernel_qualifier = "__kernel void"
    index_type = "long"
    atomic_cas = "atomic_cmpxchg"

    def type_name(self, dt) -> str:
        name = np.dtype(dt).name
        if name not in _TYPES:
            raise UnsupportedError([f"{name} inputs and outputs in {self.language} kernels"])
        return _TYPES[name]

    def pointer(self, type_name: str, const: bool) -> str:
        return f"__global {'const ' if const else ''}{type_name} *"

    def int_literal(self, v: int, dt) -> str:
        dt = np.dtype(dt)
        if dt == np.int64 and abs(v) > 2**31 - 1:
            return f"{v}L"
        if dt == np.uint64:
            return f"{v}UL"
        if dt == np.uint32:
            return f"{v}u"
        return str(v)

    def math_name(self, fn: str, dt) -> str:
        return "fabs" if fn == "abs" else fn          # overloaded builtins

    def bitcast(self, x: str, src, dst) -> str:
        return f"as_{self.type_name(dst)}({x})"

    def minmax(self, op: str, dt, a: str, b: str) -> str:
        if np.dtype(dt).kind == "f":
            return f"{'fmax' if op == 'max' else 'fmin'}({a}, {b})"
        return super().minmax(op, dt, a, b)      # the integer max() overloads need equal types

    narrow_conversions = {"bfloat16": ("aotc_bf16_to_float", "aotc_bf16_from_float"), **SMALL_TYPE_CONVERSIONS}

    def narrow_load(self, buf: Buffer, index: str) -> str:
        if buf.dtype.name == "float16":
            return f"vload_half({index}, {buf.name})"
        return super().narrow_load(buf, index)

    def narrow_store(self, buf: Buffer, index: str, value: str) -> str:
        if buf.dtype.name == "float16":
            return f"vstore_half({value}, {index}, {buf.name});"       # (rounds to nearest even)
        return super().narrow_store(buf, index, value)

    @staticmethod
    def prelude(source: str) -> str:
        """Definitions the kernels in `source` call that OpenCL C has not: the bfloat16
        conversions, those of the 8-, 4- and 2-bit types ('' when no kernel uses them)."""
        out = _BF16_FUNCTIONS if "aotc_bf16_" in source else ""
        if any(f in source for pair in SMALL_TYPE_CONVERSIONS.values() for f in pair):
            out += _small_type_functions()
        return out

    def gpu_index(self, axis: str) -> str:
        kind, dim = axis.split(".")
        return f"(long){_AXES[kind]}({dim})"

    def barrier(self, s: Barrier) -> list[str]:
        if s.scope == "warp":
            raise ValueError("OpenCL C 1.2 has no warp barrier")
        return ["barrier(CLK_LOCAL_MEM_FENCE);" if s.scope == "local" else "barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);"]

    def loop_pragma(self, s: Loop) -> str:
        return "#pragma unroll" if s.kind == UNROLLED else ""

    def local_decl(self, buf: Buffer) -> str:
        q = "__local " if buf.space == "local" else ""
        return f"{q}{self.type_name(buf.dtype)} {buf.name}[{buf.size}];"
