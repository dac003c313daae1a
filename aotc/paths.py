"""Where aotc finds its runtime sources and target descriptions: the package's data directory.

In the checkout, aotc/data/runtime and aotc/data/targets are links to runtime/ and targets/ at its
top level (where the docs and the code's comments cite them); a wheel or sdist built from it holds
the files themselves there (pyproject.toml's package-data), so an installed aotc finds them the
same way, with no checkout. Resolved, so that paths printed in the checkout stay runtime/... .
"""
from __future__ import annotations

from pathlib import Path

DATA_DIR = Path(__file__).resolve().parent / "data"
RUNTIME_DIR = (DATA_DIR / "runtime").resolve()
TARGETS_DIR = (DATA_DIR / "targets").resolve()
