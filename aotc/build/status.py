"""The status codes of the generated code, read from runtime/aotc_runtime.h (the one place they
are defined): STATUS maps each name (AOTC_OK, AOTC_ERR_...) to its number, so that Python
names the same codes the C does."""
from __future__ import annotations

import re

from ..paths import RUNTIME_DIR


def _read() -> dict[str, int]:
    text = (RUNTIME_DIR / "aotc_runtime.h").read_text()
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"^#define (AOTC_(?:OK|ERR_\w+)) (\d+)\b", text, re.M)}


STATUS = _read()
