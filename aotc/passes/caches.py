"""Decoders' steps: the KV cache updated in place (every target), and the int4 products by the CPU
runtime's kernel, their weights relaid for it.

Caches updated in place: a decoder's KV cache as onnxruntime-genai's model builder passes it
(the shared max-length buffer) is a graph input that a TensorScatter alone reads, writing the
new positions into a copy that is a graph output of the same shape. Marked IN_PLACE, the
caller may pass one array as both, as the genai runtime does: the kernel then writes only the
update's positions (ops/state.py), where a copy would read and write the whole cache every
step; given two arrays, it copies the cache first, as before. A Hugging Face export's cache
(past_key_values.* in, present.* out, one run longer: passes/attention.py joins it into its
Attention node) is the same where the caller passes one array of the present's largest shape
for both: past and present are then laid out at that shape's strides, each head's positions
from the start of its rows (ops/attention.py). The header says which outputs may share their
input's array (codegen/abi.py, `<name>_output_in_place`).

On GPU targets the same pairs are marked, with ONE_ARRAY: there the kernels see the device's
arrays, and the host makes the input's always its output's (codegen/host.py CacheCopies: a
caller's two arrays are copied between layouts around the run, one array only where it must
be). So a step's kernel writes only the new positions, and with `<name>_keep_caches` the cache
stays on the device between invokes, never crossing to the host."""
from __future__ import annotations

import numpy as np

from ..frontend.mapped import drop_pages
from ..ir.graph import Graph
from ..ir.internal import (GATHER_NBITS, IN_PLACE, LERP_ROWS, MATMUL_NBITS, NBITS_KERNEL, NBITS_TILES, ONE_ARRAY,
                           SOFTMAX_ROWS)


# op -> the (output, input) positions of its caches: a TensorScatter's result and cache, an
# Attention's present and past key and value
_CACHES = {"TensorScatter": ((0, 0),), "Attention": ((1, 4), (2, 5))}


def caches_in_place(g: Graph, one_array: bool = False) -> Graph:
    consumers = g.consumers()
    for n in g.nodes:
        pairs = []
        for o, i in _CACHES.get(n.op_type, ()):
            if len(n.inputs) <= i or len(n.outputs) <= o or not n.inputs[i] or not n.outputs[o]:
                continue
            past, present = n.inputs[i], n.outputs[o]
            if past not in g.inputs or present not in g.outputs or g.outputs.count(present) != 1:
                continue
            if [id(c) for c in consumers.get(past, [])] != [id(n)]:
                continue          # (another node reads the cache: it would see the new positions)
            if n.op_type != "TensorScatter" and present in consumers:
                continue          # (a reader would take a shared array's rows as dense)
            a, b = g.values[past], g.values[present]
            same = tuple(a.shape) == tuple(b.shape) if n.op_type == "TensorScatter" else len(a.shape) == 4
            if a.dtype == b.dtype and same:
                pairs.append((o, i))
        if pairs:
            n.attrs[IN_PLACE] = tuple(pairs)
            if one_array:
                n.attrs[ONE_ARRAY] = 1
    return g


def runtime_kernels(g: Graph, nbits: bool, avx512: bool) -> Graph:
    """Nodes of a CPU target that call the C runtime's functions rather than kernel loops.

    Every Resize may interpolate its rows with runtime/aotc_lerp.h (LERP_ROWS; ops/resize.py
    decides where its taps fit).

    In an AVX-512 build (`avx512`), every Softmax and Attention may compute its rows' softmax with
    runtime/aotc_softmax.h (SOFTMAX_ROWS; ops/reduce.py softmax_row decides which rows: float32,
    contiguous, nothing more per probability); elsewhere the kernels' loops do as well.

    With `nbits` (a runtime that has the int8-activation product of block-quantized weights,
    `[gemm] nbits_kernel`), each aotc.MatMulNBits that computes it calls the runtime
    (NBITS_KERNEL; ops/nbits.py): a decoder's one-token steps are that product's weight stream.

    In an AVX-512 build (`avx512`: its VNNI product reads them), constant weights are relaid
    at compile time in the order that product consumes them (NBITS_TILES; `_tiles`): 16 columns
    x 4 bytes per 64 (4, 8 or 16 positions), their scales by the same 16 columns, so that one
    vpdpbusd makes 16 columns' sums with no lanes to add up; the relaid weights and scales
    replace the file's (the artifact holds one copy, the same size where N is a multiple of 16).
    Constant uint8 zero points become the scales times the zero points, made here (input 4)
    rather than unpacked and multiplied each call (as many operations as a one-row product); in
    tiles too, which then need no zero points."""
    for n in g.nodes:
        if n.op_type == "Resize":
            n.attrs[LERP_ROWS] = 1
        if avx512 and n.op_type in ("Softmax", "Attention") and n.domain in ("", "ai.onnx"):
            n.attrs[SOFTMAX_ROWS] = 1
        if not nbits or n.op_type != MATMUL_NBITS or not int(n.attrs.get("int8_activations", 0)):
            continue
        n.attrs[NBITS_KERNEL] = 1
        scales = g.const(n.inputs[2])
        if scales is None:
            continue
        N, bits = int(n.attrs["N"]), int(n.attrs.get("bits", 0))
        scales = scales.reshape(N, -1)
        zero_points = n.inputs[3] if len(n.inputs) > 3 else ""
        packed = g.const(zero_points)
        zero_scaled = (_zero_scaled(scales, packed.reshape(N, -1), bits)
                       if packed is not None and packed.dtype == np.uint8 else None)
        weights = g.const(n.inputs[1])
        if avx512 and weights is not None and (not zero_points or zero_scaled is not None):
            inputs = [n.inputs[0], g.add_const(_tiles(weights.reshape(N, -1), bits), f"{n.inputs[1]}_tiles"),
                      g.add_const(_by_tiles(scales), f"{n.inputs[2]}_tiles")]
            drop_pages(weights)       # (the file's bytes: read once, here)
            if zero_scaled is not None:
                inputs += ["", g.add_const(_by_tiles(zero_scaled), f"{n.inputs[2]}_zero_scaled_tiles")]
            _gathers_read_tiles(g, n, weights, scales, inputs[1], inputs[2], zero_points)
            n.inputs = inputs
            n.attrs[NBITS_TILES] = 1
        elif zero_scaled is not None:
            n.inputs = n.inputs[:4] + [g.add_const(zero_scaled.reshape(-1), f"{n.inputs[2]}_zero_scaled")]
    return g


def _gathers_read_tiles(g: Graph, n, weights: np.ndarray, scales: np.ndarray, tiles: str, tile_scales: str,
                        zero_points: str) -> None:
    """aotc.GatherBlockQuantized nodes whose table is the same bytes in memory as the weights of
    MatMulNBits `n` (the genai builder's tied embeddings gather from a folded Reshape of the LM
    head's weights), with the same scales and no zero points, gather from its tiles instead
    (NBITS_TILES, ops/nbits.py), so that the artifact holds the table once."""
    if zero_points:
        return
    same = (weights.ctypes.data, weights.nbytes)
    for m in g.nodes:
        if m.op_type != GATHER_NBITS or len([i for i in m.inputs if i]) != 3 or m.attrs.get(NBITS_TILES):
            continue
        table, their_scales = g.const(m.inputs[0]), g.const(m.inputs[2])
        if (table is None or their_scales is None or not table.flags.c_contiguous
                or (table.ctypes.data, table.nbytes) != same or their_scales.size != scales.size
                or not np.array_equal(their_scales.reshape(scales.shape), scales)
                or int(m.attrs.get("bits", 4)) != int(n.attrs.get("bits", 0))
                or int(m.attrs.get("block_size", 128)) != int(n.attrs.get("block_size", 0))
                or table.ndim != 2 or table.shape[0] != int(n.attrs["N"])):
            continue
        m.inputs = [tiles, m.inputs[1], tile_scales]
        # (K: the table's columns, the blocks' padding included, as the gather wrote them)
        m.attrs.update({NBITS_TILES: 1, "K": table.shape[1] * 8 // int(m.attrs.get("bits", 4)),
                        "N": int(n.attrs["N"])})


def _zero_scaled(scales: np.ndarray, packed: np.ndarray, bits: int) -> np.ndarray:
    """scales [N, blocks] x the zero points packed in `packed` [N, bytes] (low bits first), float32
    [N, blocks] as the runtime multiplies them (runtime/aotc_nbits.h aotc_nbits_zero_scaled)."""
    per = 8 // bits
    values = np.stack([(packed >> (bits * t)) & ((1 << bits) - 1) for t in range(per)], axis=-1)
    zeros = values.reshape(packed.shape[0], -1)[:, :scales.shape[1]]
    return np.ascontiguousarray((scales * zeros.astype(np.float32)).astype(np.float32))


def _tiles(packed: np.ndarray, bits: int) -> np.ndarray:
    """Weights [N, blocks * blob] as the quantizer packs them (per = 8 / bits values a byte, low
    bits first: value per * j + t of a block in value t of its byte j) relaid as
    runtime/aotc_nbits.h's tiles: columns in tiles of 16 (the last one padded with zero
    weights), each tile's positions in groups of 4 x per, a group's 64 bytes holding in value t
    of byte 4c + i position 4t + i of column c."""
    N, per = packed.shape[0], 8 // bits
    mask = (1 << bits) - 1
    values = np.zeros((-(-N // 16) * 16, packed.shape[1] * per), np.uint8)
    for t in range(per):
        values[:N, t::per] = (packed >> (t * bits)) & mask
    v = values.reshape(values.shape[0] // 16, 16, -1, per, 4)        # tile, column, group, value, position
    out = np.zeros((v.shape[0], v.shape[2], 16, 4), np.uint8)         # tile, group, column, position
    for t in range(per):
        out |= (v[:, :, :, t, :] << (t * bits)).transpose(0, 2, 1, 3)
    return out.reshape(-1)


def _by_tiles(per_block: np.ndarray) -> np.ndarray:
    """[N, blocks] floats relaid by tiles of 16 columns ([tiles, blocks, 16], zero past N)."""
    N, blocks = per_block.shape
    rows = np.zeros((-(-N // 16) * 16, blocks), np.float32)
    rows[:N] = per_block
    return np.ascontiguousarray(rows.reshape(-1, 16, blocks).transpose(0, 2, 1)).reshape(-1)
