"""What the GPU languages' printers share (OpenCL C, CUDA C++): device kernels from the GPU
schedule take the storages they touch as arguments (the workspace and the weights as byte
buffers, each planned buffer then a typed pointer at its fixed offset; graph inputs and outputs
as buffers of their own), host loop indices as scalars, and a status buffer when they can fail
(the first failure wins, and records which kernel it was). A language subclass gives the
spellings: qualifiers, the index type, GPU indices, barriers, the atomic compare-and-swap.
"""
from __future__ import annotations

from ..kernel.ir import Buffer, Fail, Kernel
from ..program.ir import storage_args
from .cstyle import CStylePrinter


class GpuPrinter(CStylePrinter):
    kernel_qualifier = "void"       # "__kernel void", 'extern "C" __global__ void'
    index_type = "long"             # the 64-bit integer type of scalar arguments
    atomic_cas = "atomic_cmpxchg"

    def __init__(self):
        super().__init__()
        self.slots: dict = {}       # buffer name -> program Slot, for the kernel being printed

    def pointer(self, type_name: str, const: bool) -> str:
        """The declaration prefix of a pointer to device memory (`__global const float *`)."""
        return f"{'const ' if const else ''}{type_name} *"

    def param_decl(self, buf: Buffer) -> str:
        return ""

    def fail(self, s: Fail) -> list[str]:
        why = f"  /* {s.detail} */" if s.detail else ""
        return [f"if ({self.atomic_cas}(aotc_status, 0, {s.status}) == 0) aotc_status[1] = {self.kernel_.index};{why}",
                "return;"]

    def kernel_header(self, k: Kernel, params: list[str]) -> list[str]:
        decls = []
        for slot, b in storage_args(k, self.slots):
            if b is None:
                decls.append(f"{self.pointer('unsigned char', slot.kind == 'weight')}{self.restrict} "
                             f"aotc_{'w' if slot.kind == 'weight' else 'ws'}")
            else:
                decls.append(f"{self.pointer(self.type_name(b.dtype), b.role == 'in')}{self.restrict} {b.name}")
        decls += [f"{self.index_type} {v.name}" for v in k.scalars]
        decls += [f"{self.index_type} {v.name}" for v in k.size_vars]      # the run's sizes
        if k.can_fail:
            decls.append(f"{self.pointer('int', False)}aotc_status")
        return [f"{self.kernel_qualifier} {k.name}({', '.join(decls) or 'void'})"]

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
            const = slot.kind == "weight"
            base = "aotc_w" if const else "aotc_ws"
            r = "" if b.name in k.aliased else f"{self.restrict} "
            ptr = self.pointer(self.type_name(b.dtype), const)
            views.append(f"    {ptr}{r}{b.name} = ({ptr})({base} + {slot.offset});")
        return "\n".join(lines[:at] + views + lines[at:])
