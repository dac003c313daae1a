"""The status codes Python reads are the ones runtime/aotc_runtime.h defines (aotc/build/status.py
parses them from it), and every one has a message the generated <name>_strerror returns."""
import re

from aotc.build.status import STATUS
from aotc.paths import RUNTIME_DIR


def test_status_codes_come_from_the_runtime_header():
    header = (RUNTIME_DIR / "aotc_runtime.h").read_text()
    defined = dict(re.findall(r"^#define (AOTC_(?:OK|ERR_\w+)) (\d+)", header, re.M))
    assert STATUS == {k: int(v) for k, v in defined.items()}
    assert STATUS["AOTC_OK"] == 0 and len(set(STATUS.values())) == len(STATUS)
    cases = set(re.findall(r"case (AOTC_\w+):", header))
    assert cases == set(STATUS), set(STATUS) ^ cases
