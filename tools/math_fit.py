"""How the polynomial coefficients in runtime/aotc_math.h were made (vectorizable float32 exp,
tanh and erf for the C targets), reproducibly: near-minimax fits in relative error, by
weighted least squares on Chebyshev nodes with Lawson's reweighting, in float64 against
Python's math module, then rounded to float32.

    python -m tools.math_fit            # prints the coefficients as runtime/aotc_math.h has them

Each fit is of a smooth factor of the function over a reduced range (see aotc_math.h for the
range reductions): the fitted error is far below float32's epsilon, so the result's error is
the float32 evaluation's (tests/test_math.py measures it against libm in ULP).
"""
from __future__ import annotations

import math

import numpy as np


def fit(f, lo: float, hi: float, degree: int, basis=lambda t, k: t ** k, nodes: int = 4000, iters: int = 60):
    """Coefficients c (low order first) minimizing max |sum c_k basis(t, k) / f(t) - 1| over
    [lo, hi], and that maximum."""
    t = (lo + hi) / 2 + (hi - lo) / 2 * np.cos(np.pi * (np.arange(nodes) + 0.5) / nodes)
    y = np.array([f(v) for v in t])
    A = np.stack([basis(t, k) for k in range(degree + 1)], axis=1) / y[:, None]
    w = np.ones(nodes) / nodes
    for _ in range(iters):
        sw = np.sqrt(w)
        c, *_ = np.linalg.lstsq(A * sw[:, None], sw, rcond=None)
        err = np.abs(A @ c - 1)
        w = w * err
        w /= w.sum()
    c32 = np.array([np.float32(v) for v in c], dtype=np.float64)
    return c32, float(np.max(np.abs(A @ c32 - 1)))


def exp_poly():
    """(exp(r) - 1) / r on |r| <= ln2/2, so that exp(r) = 1 + r * q(r)."""
    h = math.log(2) / 2
    return fit(lambda r: math.expm1(r) / r if r else 1.0, -h, h, 5)


def tanh_poly():
    """tanh(x) / x as q(x*x) for |x| <= 0.625."""
    return fit(lambda s: math.tanh(math.sqrt(s)) / math.sqrt(s) if s else 1.0, 0.0, 0.625 ** 2, 6)


def erf_poly():
    """erf(x) / x as q(x*x) for |x| <= 1."""
    return fit(lambda s: math.erf(math.sqrt(s)) / math.sqrt(s) if s else 2 / math.sqrt(math.pi), 0.0, 1.0, 7)


def erfc_poly():
    """log(erfc(x)) + x*x as q(x - 2) for 1 <= x <= 3.92 (beyond, erf(x) rounds to 1), so that
    erfc(x) = exp(q(x - 2) - x*x): a polynomial and an exp, no division. (Centred on 2: in
    powers of x itself the float32 evaluation loses about five times more.)"""
    return fit(lambda x: math.log(math.erfc(x)) + x * x, 1.0, 3.92, 8, basis=lambda x, k: (x - 2) ** k)


def main() -> None:
    for name, (c, err) in (("exp", exp_poly()), ("tanh", tanh_poly()), ("erf", erf_poly()),
                           ("erfc", erfc_poly())):
        print(f"/* {name}: max relative error of the fit {err:.2e} */")
        print(", ".join(f"{float(v)!r}f" for v in c))


if __name__ == "__main__":
    main()
