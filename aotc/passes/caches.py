"""Decoders' steps on CPU targets: the KV cache updated in place, and the int4 products by the
runtime's kernel.

Caches updated in place: a decoder's KV cache as onnxruntime-genai's model builder passes it
(the shared max-length buffer) is a graph input that a TensorScatter alone reads, writing the
new positions into a copy that is a graph output of the same shape. Marked IN_PLACE, the
caller may pass one array as both, as the genai runtime does: the kernel then writes only the
update's positions (ops/state.py), where a copy would read and write the whole cache every
step; given two arrays, it copies the cache first, as before. The header says which outputs
may share their input's array (codegen/abi.py, `<name>_output_in_place`)."""
from __future__ import annotations

import numpy as np

from ..ir.graph import Graph
from ..ir.internal import IN_PLACE, MATMUL_NBITS, NBITS_KERNEL


def caches_in_place(g: Graph) -> Graph:
    consumers = g.consumers()
    for n in g.nodes:
        if n.op_type != "TensorScatter" or not n.inputs or not n.outputs:
            continue
        past, present = n.inputs[0], n.outputs[0]
        if past not in g.inputs or present not in g.outputs or g.outputs.count(present) != 1:
            continue
        if [id(c) for c in consumers.get(past, [])] != [id(n)]:
            continue          # (another node reads the cache: it would see the new positions)
        a, b = g.values[past], g.values[present]
        if a.dtype == b.dtype and tuple(a.shape) == tuple(b.shape):
            n.attrs[IN_PLACE] = 1
    return g


def runtime_kernels(g: Graph, quads: bool) -> Graph:
    """On a target whose runtime has the int8-activation product of block-quantized weights
    (`[gemm] nbits_kernel`), each aotc.MatMulNBits that computes it calls the runtime
    (NBITS_KERNEL; ops/nbits.py): a decoder's one-token steps are that product's weight stream.
    With `quads` (an AVX-512 build, whose VNNI product reads them), 4-bit weights in blocks of 32
    (the onnxruntime-genai builder's int4, and its MatMulNBits quantizer's default blocks, with
    zero points or not) also get their constant scales relaid by column quads as a fifth input (runtime/aotc_nbits.h aotc_nbits_quad_vnni loads
    four columns' scales for two blocks at once); the scales stay as they are too, for the
    columns past the last quad, an odd last block and CPUs without VNNI. Constant uint8 zero
    points also give a sixth input, the scales times the zero points, which the products read
    instead of unpacking the zero points and multiplying them each call (as many operations as
    a one-row product)."""
    for n in g.nodes:
        if n.op_type == MATMUL_NBITS and int(n.attrs.get("int8_activations", 0)):
            n.attrs[NBITS_KERNEL] = 1
            scales = g.const(n.inputs[2])
            if scales is None:
                continue
            N, bits = int(n.attrs["N"]), int(n.attrs.get("bits", 0))
            extra = ["", ""]          # inputs 4 and 5
            if quads and bits == 4 and int(n.attrs.get("block_size", 0)) == 32:
                rows = np.zeros((-(-N // 4) * 4, scales.size // N), np.float32)
                rows[:N] = scales.reshape(N, -1)
                by_quads = rows.reshape(-1, 4, rows.shape[1]).transpose(0, 2, 1).reshape(-1)
                extra[0] = g.add_const(np.ascontiguousarray(by_quads), f"{n.inputs[2]}_quads")
            packed = g.const(n.inputs[3]) if len(n.inputs) > 3 and n.inputs[3] else None
            if packed is not None and packed.dtype == np.uint8:
                extra[1] = g.add_const(_zero_scaled(scales.reshape(N, -1), packed.reshape(N, -1), bits),
                                       f"{n.inputs[2]}_zero_scaled")
            if any(extra):
                zero_points = n.inputs[3] if len(n.inputs) > 3 else ""
                n.inputs = n.inputs[:3] + [zero_points] + extra
    return g


def _zero_scaled(scales: np.ndarray, packed: np.ndarray, bits: int) -> np.ndarray:
    """scales [N, blocks] x the zero points packed in `packed` [N, bytes] (low bits first), float32
    as the runtime multiplies them (runtime/aotc_nbits.h aotc_nbits_zero_scaled)."""
    per = 8 // bits
    values = np.stack([(packed >> (bits * t)) & ((1 << bits) - 1) for t in range(per)], axis=-1)
    zeros = values.reshape(packed.shape[0], -1)[:, :scales.shape[1]]
    return np.ascontiguousarray((scales * zeros.astype(np.float32)).astype(np.float32).reshape(-1))
