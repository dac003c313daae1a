"""Compare aotc outputs with ONNX Runtime's: per-output max abs / rel error and max ULP."""
from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np


@dataclass
class OutputReport:
    name: str
    dtype: str
    shape: list
    max_abs_err: float
    max_rel_err: float
    max_ulp: float
    mismatches: int
    passed: bool
    note: str = ""

    def as_dict(self) -> dict:
        return asdict(self)


def _ulp_distance(a: np.ndarray, b: np.ndarray) -> float:
    """Largest distance in units in the last place between finite elements of a and b."""
    if a.size == 0 or a.dtype not in (np.float32, np.float64):
        return 0.0
    ints = np.int32 if a.dtype == np.float32 else np.int64
    lowest = np.iinfo(ints).min
    finite = np.isfinite(a) & np.isfinite(b)
    if not finite.any():
        return 0.0

    def line(x):
        # sign-magnitude bit patterns onto one monotonic integer line (+0 and -0 both at 0)
        i = x[finite].view(ints).astype(np.int64)
        return np.where(i < 0, np.int64(lowest) - i, i)
    # float64 distances can exceed int64: take the difference in floating point
    return float(np.max(np.abs(line(a).astype(np.float64) - line(b).astype(np.float64))))


def compare(name: str, got: np.ndarray, ref: np.ndarray, rtol: float, atol: float) -> OutputReport:
    ref = np.asarray(ref)
    if got.shape != ref.shape or got.dtype != ref.dtype:
        return OutputReport(name, str(got.dtype), list(got.shape), float("inf"), float("inf"), float("inf"),
                            int(max(got.size, ref.size)), False,
                            f"expected {ref.dtype}{list(ref.shape)}, got {got.dtype}{list(got.shape)}")
    if got.dtype.kind != "f":
        diff = got != ref
        n = int(diff.sum())
        err = float(np.abs(got.astype(np.float64) - ref.astype(np.float64)).max()) if got.size else 0.0
        return OutputReport(name, str(got.dtype), list(got.shape), err, 0.0 if n == 0 else float("inf"),
                            0.0, n, n == 0)
    g64, r64 = got.astype(np.float64), ref.astype(np.float64)
    same_nan = np.isnan(g64) & np.isnan(r64)
    same_inf = np.isinf(g64) & np.isinf(r64) & (np.sign(g64) == np.sign(r64))
    ok_special = same_nan | same_inf
    with np.errstate(invalid="ignore"):
        abs_err = np.where(ok_special, 0.0, np.abs(g64 - r64))
        abs_err = np.where(np.isnan(abs_err), np.inf, abs_err)
        rel_err = abs_err / np.maximum(np.abs(r64), np.finfo(np.float64).tiny)
    bad = abs_err > atol + rtol * np.abs(np.where(ok_special, 0.0, r64))
    # an infinity or NaN on one side only is wrong whatever the tolerance (rtol * inf is inf)
    bad |= ~ok_special & ~(np.isfinite(g64) & np.isfinite(r64))
    n = int(bad.sum())
    return OutputReport(name, str(got.dtype), list(got.shape),
                        float(abs_err.max()) if got.size else 0.0,
                        float(np.where(abs_err == 0, 0.0, rel_err).max()) if got.size else 0.0,
                        _ulp_distance(got, ref), n, n == 0)
