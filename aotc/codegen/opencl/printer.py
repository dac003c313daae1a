"""Kernel IR as OpenCL C (1.2). What differs from C99, and nothing else:
  * kernels are `__kernel void`, buffers `__global` (or `__local` / private arrays declared at
    the top of the kernel), and every kernel reads the memory plan through the storage it was
    bound to: an offset into the workspace or the weights, fixed at compile time, or a
    graph input / output buffer of its own;
  * types are OpenCL's (long, uchar, half...), math builtins are overloaded (exp, not expf);
  * bound loops are work-item / work-group indices (get_global_id...), barriers are barrier();
  * a failing kernel records its status (and which kernel) in a small status buffer the host
    reads after the run: the first failure wins (atomic_cmpxchg).
"""
from __future__ import annotations

import numpy as np

from ...kernel.ir import UNROLLED, Barrier, Buffer, Fail, Kernel, Loop
from ...program.ir import storage_args
from ..cstyle import CStylePrinter

_TYPES = {"float32": "float", "float64": "double", "float16": "half", "int8": "char", "int16": "short",
          "int32": "int", "int64": "long", "uint8": "uchar", "uint16": "ushort", "uint32": "uint",
          "uint64": "ulong", "bool": "uchar"}
_AXES = {"global": "get_global_id", "group": "get_group_id", "local": "get_local_id"}


class OpenCLPrinter(CStylePrinter):
    language = "OpenCL C"

    def __init__(self):
        super().__init__()
        self.slots: dict = {}         # buffer name -> program Slot, for the kernel being printed

    def type_name(self, dt) -> str:
        return _TYPES[np.dtype(dt).name]

    def int_literal(self, v: int, dt) -> str:
        dt = np.dtype(dt)
        if dt == np.int64 and abs(v) > 2**31 - 1:
            return f"{v}L"
        if dt == np.uint64:
            return f"{v}UL"
        return str(v)

    def math_name(self, fn: str, dt) -> str:
        return "fabs" if fn == "abs" else fn          # overloaded builtins

    def minmax(self, op: str, dt, a: str, b: str) -> str:
        if np.dtype(dt).kind == "f":
            return f"{'fmax' if op == 'max' else 'fmin'}({a}, {b})"
        return super().minmax(op, dt, a, b)      # the integer max() overloads need equal types

    def load(self, buf: Buffer, index: str) -> str:
        if buf.dtype.name == "float16" and buf.value_dtype != buf.dtype:
            return f"vload_half({index}, {buf.name})"
        return f"{buf.name}[{index}]"

    def store(self, buf: Buffer, index: str, value: str) -> str:
        if buf.dtype.name == "float16" and buf.value_dtype != buf.dtype:
            return f"vstore_half({value}, {index}, {buf.name});"
        return f"{buf.name}[{index}] = {value};"

    def gpu_index(self, axis: str) -> str:
        kind, dim = axis.split(".")
        return f"(long){_AXES[kind]}({dim})"

    def barrier(self, s: Barrier) -> list[str]:
        return ["barrier(CLK_LOCAL_MEM_FENCE);" if s.scope == "local" else "barrier(CLK_GLOBAL_MEM_FENCE);"]

    def fail(self, s: Fail) -> list[str]:
        why = f"  /* {s.detail} */" if s.detail else ""
        return [f"if (atomic_cmpxchg(aotc_status, 0, {s.status}) == 0) aotc_status[1] = {self.kernel_.index};{why}",
                "return;"]

    def loop_pragma(self, s: Loop) -> str:
        return "#pragma unroll" if s.kind == UNROLLED else ""

    def local_decl(self, buf: Buffer) -> str:
        q = "__local " if buf.space == "local" else ""
        return f"{q}{self.type_name(buf.dtype)} {buf.name}[{buf.size}];"

    # ------------------------------------------------------------------ signature
    def param_decl(self, buf: Buffer) -> str:
        return ""

    def kernel_header(self, k: Kernel, params: list[str]) -> list[str]:
        decls = []
        for slot, b in storage_args(k, self.slots):
            if b is None:
                decls.append("__global uchar *aotc_ws" if slot.kind == "arena" else "__global const uchar *aotc_w")
            else:
                q = "const " if b.role == "in" else ""
                decls.append(f"__global {q}{self.type_name(b.dtype)} *restrict {b.name}")
        decls += [f"long {v.name}" for v in k.scalars]
        if k.can_fail:
            decls.append("__global int *aotc_status")
        return [f"__kernel void {k.name}({', '.join(decls) or 'void'})"]

    def kernel(self, k: Kernel) -> str:
        text = super().kernel(k)
        # the planned buffers: each a typed pointer at its fixed offset, right after the brace
        lines = text.split("\n")
        at = lines.index("{") + 1
        views = []
        for b in k.params:
            slot = self.slots[b.name]
            if slot.kind not in ("arena", "weight"):
                continue
            base, q = ("aotc_w", "const ") if slot.kind == "weight" else ("aotc_ws", "")
            r = "" if b.name in k.aliased else "restrict "
            t = self.type_name(b.dtype)
            views.append(f"    __global {q}{t} *{r}{b.name} = (__global {q}{t} *)({base} + {slot.offset});")
        return "\n".join(lines[:at] + views + lines[at:])
