"""The external weights file's integrity check, shared by the C, OpenCL and CUDA hosts.

`<name>_create` reads `<name>.weights` with runtime/aotc_support.h's `aotc_read_weights`,
which checks its size and recomputes its CRC-32 (zlib's: IEEE polynomial, as `zlib.crc32`)
while reading, against `<NAME>_WEIGHTS_CRC32` in the artifact's header (codegen/abi.py; the
compiler computes it once, from the blob it writes). The manifest records the same value
(`weights.crc32`), so the Python loader can say which way a file is wrong.
"""
from __future__ import annotations

import zlib


def crc32(blob: bytes) -> int:
    """The CRC-32 `aotc_read_weights` computes over the weights file."""
    return zlib.crc32(blob) & 0xFFFFFFFF


def read_weights_call(prefix: str, raw: str, weights: str) -> str:
    """The create() statement that reads and checks the file (status: AOTC_OK,
    AOTC_ERR_WEIGHTS_FILE, AOTC_ERR_WEIGHTS_CHECKSUM, AOTC_ERR_NULL_ARGUMENT or
    AOTC_ERR_OUT_OF_MEMORY)."""
    P = prefix.upper()
    return (f"    status = aotc_read_weights(weights_path, {P}_WEIGHTS_BYTES, {P}_WEIGHTS_CRC32, "
            f"&{raw}, &{weights});")
