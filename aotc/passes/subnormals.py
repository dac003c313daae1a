"""Subnormal weights as zero, on the targets that compute subnormal floats as zero at run time.

A float32 below float32's least normal magnitude (1.17549435e-38) is subnormal; x86 cores take a
microcode assist, tens of times slower than the operation, whenever one is an input or the
result, and trained weights hold them (a text detector shipped by an OCR package: a tenth of
its weights). A CPU target's run function computes with them as zero (flush-to-zero and
denormals-are-zero for the run, runtime/aotc_support.h aotc_fpenv), which is what ONNX
Runtime's `session.set_denormal_as_zero` does too; the constants themselves are made zero here,
at compile time, so that folding and packing see the numbers the run computes with. `PassContext
.subnormals` counts them per constant (`aotc inspect` and the manifest say so). A target with
`[numerics] ieee_subnormals` (the option `,ieee_subnormals`) keeps them; so does an OpenCL one,
whose device decides (OpenCL only permits flushing). A CUDA target flushes as a CPU one does:
nvcc builds its kernels with -ftz=true (codegen/cuda/backend.py).

The pass runs before shape inference (the model's own weights, which it counts) and after
folding (constants folding made, which it does not count apart: a fold of zeros made from the
weights is what the run computes)."""
from __future__ import annotations

import numpy as np

from ..frontend.mapped import drop_pages
from ..ir.graph import Graph, Value

TINY = np.finfo(np.float32).tiny
_PIECE = 1 << 20                 # values a subnormal count reads at a time


def _count(a: np.ndarray) -> int:
    """How many of a's values are subnormal, read in pieces (no temporaries the size of a
    large weight)."""
    flat = a.reshape(-1)
    n = 0
    for at in range(0, flat.size, _PIECE):
        piece = flat[at:at + _PIECE]
        n += int(np.count_nonzero((piece != 0) & (np.abs(piece) < TINY)))
    return n


def flush_subnormals(g: Graph, counts: dict) -> Graph:
    """Every float32 constant of g with its subnormal values made (signed) zeros; `counts`
    gains, per constant, how many were."""
    for name, v in list(g.values.items()):
        a = v.const
        if a is None or a.dtype != np.float32 or not a.size:
            continue
        n = _count(a)
        drop_pages(a)
        if n:
            a = a.copy()
            tiny = (a != 0) & (np.abs(a) < TINY)
            a[tiny] = np.copysign(np.float32(0), a[tiny])
            g.values[name] = Value(name, v.dtype, v.shape, a)
            counts[name] = counts.get(name, 0) + n
    return g
