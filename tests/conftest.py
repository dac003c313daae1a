import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


@pytest.fixture(scope="session", autouse=True)
def _compile_cache_of_this_run(tmp_path_factory):
    """`aotc compile` (and aotc.compile(cache=True)) in tests use a compile cache of this run's
    (aotc/cache.py), never the user's; tests/test_cache.py makes its own."""
    os.environ["AOTC_CACHE_DIR"] = str(tmp_path_factory.mktemp("aotc-compile-cache"))
