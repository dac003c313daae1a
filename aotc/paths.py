"""Where aotc finds its runtime sources and target descriptions (top level of the checkout)."""
from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RUNTIME_DIR = ROOT / "runtime"
TARGETS_DIR = ROOT / "targets"
