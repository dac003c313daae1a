"""Run-time dimensions: a shape entry that is a range of sizes, not one size.

A `Symbol` is one size the caller chooses at run time within [lo, hi] (and a multiple of
`multiple`): a `dim_param` of the model bound with `--dim seq=1..512`, or an anonymous one
from a ranged `--shape x=1x3x32..960x32..960` (named after the input and the axis, `x.2`).
A `Dim` is a polynomial in symbols with integer coefficients (`seq`, `2*seq`, `batch*seq`),
each symbol standing for its size divided by its multiple (so that a side of 32..960%32 is
32 * (side / 32), and halving it twice stays exact: 8 * (side / 32)),
which is what shape inference makes of them: most infer functions only copy, multiply, add or
compare dims, and a Dim does all of that; a shape entry is an `int` or a `Dim`, never a Dim
that is a constant (`Dim` arithmetic gives back an `int` then).

What a Dim cannot do is become a number: `int()`, `range()`, indexing with it raise
`RunTimeDim`, a ShapeError that says which dimension reached a computation that needs a
fixed size, so code that has not been taught run-time sizes fails loudly instead of
computing with a wrong number. Comparisons answer when the bounds decide them (`seq >= 1`)
and raise otherwise. `hi` is the capacity (the memory plan's size), `lo` the least size.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence, Union

from ..errors import AotcError, ShapeError


class RunTimeDim(AotcError):
    """A run-time dimension reached code that needs a fixed size (not a ShapeError: that would
    make an If's branch a run-time failure instead of a compile limit)."""


@dataclass(frozen=True, order=True)
class Symbol:
    name: str               # what the user calls it: a dim_param, or "<input>.<axis>"
    lo: int
    hi: int
    multiple: int = 1       # the size is a multiple of this

    def __post_init__(self):
        if not (isinstance(self.lo, int) and isinstance(self.hi, int) and isinstance(self.multiple, int)):
            raise ShapeError(f"dimension {self.name!r}: bounds must be integers")
        if self.lo < 0 or self.hi < max(self.lo, 1):
            raise ShapeError(f"dimension {self.name!r}: the range {self.lo}..{self.hi} is empty or starts below 0",
                             "a run-time dimension is LO..HI with 0 <= LO <= HI, HI >= 1 (0: an empty past, "
                             "say)")
        if self.multiple < 1 or self.lo % self.multiple or self.hi % self.multiple:
            raise ShapeError(f"dimension {self.name!r}: {self.lo}..{self.hi} must start and end on multiples "
                             f"of {self.multiple}")

    def __str__(self) -> str:
        return self.spec()

    def spec(self) -> str:
        """The range as the CLI writes it: 1..512, 32..960%32."""
        return f"{self.lo}..{self.hi}" + (f"%{self.multiple}" if self.multiple > 1 else "")

    def sizes(self) -> list[int]:
        """The sizes `aotc check` tries by default: both ends and one in the middle."""
        m = self.multiple
        mid = ((self.lo + self.hi) // 2 // m) * m
        return sorted({self.lo, max(self.lo, mid), self.hi})


Monomial = tuple       # sorted tuple of Symbols (a symbol repeated for a power)


class Dim:
    """sum of coefficient * product of symbols; immutable, hashable, compared by value."""

    __slots__ = ("terms",)

    def __init__(self, terms: Mapping[Monomial, int]):
        self.terms = tuple(sorted((m, c) for m, c in terms.items() if c))

    # ------------------------------------------------------------------ construction
    @staticmethod
    def of(sym: Symbol) -> "Dim":
        """The symbol's size: `multiple` times the polynomial variable, which is size / multiple."""
        return Dim({(sym,): sym.multiple})

    @staticmethod
    def _make(terms: dict) -> Union["Dim", int]:
        terms = {m: c for m, c in terms.items() if c}
        if not terms:
            return 0
        if list(terms) == [()]:
            return terms[()]
        return Dim(terms)

    def _dict(self) -> dict:
        return dict(self.terms)

    @staticmethod
    def _terms_of(x) -> dict:
        if isinstance(x, Dim):
            return x._dict()
        if isinstance(x, bool) or not isinstance(x, int):
            import numpy as np
            if isinstance(x, np.integer):
                return {(): int(x)} if int(x) else {}
            raise TypeError(f"cannot combine a dimension with {x!r}")
        return {(): x} if x else {}

    # ------------------------------------------------------------------ arithmetic
    def __add__(self, o):
        try:
            t = Dim._terms_of(o)
        except TypeError:
            return NotImplemented
        out = self._dict()
        for m, c in t.items():
            out[m] = out.get(m, 0) + c
        return Dim._make(out)

    __radd__ = __add__

    def __neg__(self):
        return Dim._make({m: -c for m, c in self.terms})

    def __sub__(self, o):
        try:
            t = Dim._terms_of(o)
        except TypeError:
            return NotImplemented          # (an index expression: it subtracts a Dim itself)
        return self + Dim._make({m: -c for m, c in t.items()})

    def __rsub__(self, o):
        return (-self) + o

    def __mul__(self, o):
        try:
            t = Dim._terms_of(o)
        except TypeError:
            return NotImplemented
        out: dict = {}
        for m1, c1 in self.terms:
            for m2, c2 in t.items():
                m = tuple(sorted(m1 + m2))
                out[m] = out.get(m, 0) + c1 * c2
        return Dim._make(out)

    __rmul__ = __mul__

    def divide(self, o) -> Union["Dim", int, None]:
        """self / o when it is exact for every value of the symbols (o an int or a Dim), else
        None."""
        if isinstance(o, Dim):
            if len(o.terms) != 1:
                return 1 if o == self else self._divide_polynomial(o)
            mono, coef = o.terms[0]
        else:
            mono, coef = (), int(o)
        if coef == 0:
            return None
        out = {}
        for m, c in self.terms:
            q = _term_quotient(m, c, mono, coef)
            if q is None:
                return None
            out[q[0]] = q[1]
        return Dim._make(out)

    def _divide_polynomial(self, o: "Dim") -> Union["Dim", int, None]:
        """self / o for a divisor of several terms, by long division in graded order (the
        leading term of what is left over the divisor's, until nothing is left): the quotient
        where it is a polynomial with integer coefficients, else None. (h-4)*(w-4) / (w-4) is
        h-4: an output plane's size over its row's.)"""
        syms = sorted({x for m, _ in self.terms + o.terms for x in m})

        def order(term):
            m = term[0]
            return len(m), tuple(m.count(x) for x in syms)

        lead, lead_coef = max(o.terms, key=order)
        left, out = dict(self.terms), {}
        for _ in range(len(self.terms) * (1 + max(len(m) for m, _ in self.terms)) + 1):
            if not left:
                return Dim._make(out)
            quotient = _term_quotient(*max(left.items(), key=order), lead, lead_coef)
            if quotient is None:
                return None
            q, k = quotient
            out[q] = out.get(q, 0) + k
            for dm, dc in o.terms:
                t = tuple(sorted(q + dm))
                left[t] = left.get(t, 0) - k * dc
                if not left[t]:
                    del left[t]
        return None

    def estimate_div(self, k: int):
        """Each coefficient floor-divided by k: an estimate (of work, say), not an exact size."""
        return Dim._make({m: c // k for m, c in self.terms})

    def __floordiv__(self, o):
        """Floor division: exact, or by an int k that divides every term but the constant (then
        those terms are a multiple of k for every size, and only the constant rounds down)."""
        q = self.divide(o)
        if q is None and isinstance(o, int) and o > 0 and all(c % o == 0 for m, c in self.terms if m):
            q = Dim._make({m: (c // o) for m, c in self.terms})
        if q is None:
            raise RunTimeDim(f"{self} // {o} is not a whole number for every size of the run-time dimension "
                             f"{_symbols_text(self)}")
        return q

    def __rfloordiv__(self, o):
        raise RunTimeDim(f"{o} // {self}: dividing by a run-time dimension ({_symbols_text(self)})")

    def __mod__(self, o):
        if self.divide(o) is not None:
            return 0
        if isinstance(o, int) and o > 0 and all(c % o == 0 for m, c in self.terms if m):
            return dict(self.terms).get((), 0) % o        # every symbolic term is a multiple of o
        raise RunTimeDim(f"{self} % {o} depends on the size of the run-time dimension {_symbols_text(self)}")

    # ------------------------------------------------------------------ bounds and values
    def symbols(self) -> list[Symbol]:
        return sorted({s for m, _ in self.terms for s in m})

    def evaluate(self, sizes: Mapping[str, int]) -> int:
        """The value at the sizes given by symbol name (each a multiple of its symbol's)."""
        total = 0
        for m, c in self.terms:
            p = c
            for s in m:
                p *= sizes[s.name] // s.multiple
            total += p
        return total

    def _corners(self) -> list[int]:
        syms = self.symbols()
        return [self.evaluate({s.name: v for s, v in zip(syms, corner)})
                for corner in itertools.product(*[(s.lo, s.hi) for s in syms])]

    @property
    def lo(self) -> int:
        return min(self._corners())

    @property
    def hi(self) -> int:
        return max(self._corners())

    # ------------------------------------------------------------------ comparisons
    def __eq__(self, o):
        if isinstance(o, Dim):
            return self.terms == o.terms
        return False            # a Dim is never a constant (those are ints)

    def __ne__(self, o):
        return not self == o

    def __hash__(self):
        return hash(("Dim", self.terms))

    def _decide(self, op: str, o) -> bool:
        c = decide(self, op, o)
        if c is None:
            raise RunTimeDim(f"whether {self} {op} {o} depends on the size of the run-time dimension "
                             f"{_symbols_text(self)}")
        return c

    def __lt__(self, o): return self._decide("<", o)
    def __le__(self, o): return self._decide("<=", o)
    def __gt__(self, o): return self._decide(">", o)
    def __ge__(self, o): return self._decide(">=", o)

    # ------------------------------------------------------------------ no number
    def __int__(self):
        raise RunTimeDim(f"the run-time dimension {_symbols_text(self)} reached a computation that needs a "
                         "fixed size")

    __index__ = __int__

    def __float__(self):
        raise RunTimeDim(f"the run-time dimension {_symbols_text(self)} reached a computation that needs a "
                         "fixed size")

    def __bool__(self):
        """Nonzero at every size (a Dim is never the constant 0, but `n - 1` is 0 where n is 1)."""
        return not self._decide("==", 0)

    # ------------------------------------------------------------------ text
    def __str__(self) -> str:
        parts = []
        for m, c in reversed(self.terms):
            scale = 1
            for s in m:
                scale *= s.multiple
            names = "*".join(s.name for s in m)
            if not names:
                parts.append(str(c))
                continue
            k = math.gcd(c, scale)
            c, scale = c // k, scale // k
            head = names if c == 1 else "-" + names if c == -1 else f"{c}*{names}"
            parts.append(head if scale == 1 else f"{head}/{scale}")     # a fraction of the sizes: x/2
        return "+".join(parts).replace("+-", "-")

    __repr__ = __str__


def _term_quotient(m: Monomial, c: int, mono: Monomial, coef: int):
    """(monomial, coefficient) of c*m / (coef*mono) where it is a term with an integer
    coefficient, else None."""
    rest = list(m)
    for s in mono:
        if s not in rest:
            return None
        rest.remove(s)
    return (tuple(rest), c // coef) if c % coef == 0 else None


def _symbols_text(d: Dim) -> str:
    return ", ".join(f"{s.name} in {s.spec()}" for s in d.symbols())


# ---------------------------------------------------------------------- shapes
def is_dim(x) -> bool:
    return isinstance(x, Dim)


def is_static(shape: Iterable) -> bool:
    return not any(isinstance(d, Dim) for d in shape)


def upper(x) -> int:
    """The largest value of a dim or a size (its capacity), an int as it is."""
    return x.hi if isinstance(x, Dim) else int(x)


def lower(x) -> int:
    return x.lo if isinstance(x, Dim) else int(x)


def upper_shape(shape) -> tuple[int, ...]:
    return tuple(upper(d) for d in shape)


def shape_symbols(shape) -> list[Symbol]:
    return sorted({s for d in shape if isinstance(d, Dim) for s in d.symbols()})


# where in their ranges the schedule looks at run-time sizes when a choice depends on them
# (schedule/gpu.py's GEMM variants, schedule/gemm_cpu.py's orientation): every symbol at the
# same fraction of its range, geometrically
RANGE_POINTS = (0.0, 0.25, 0.5, 0.75, 1.0)


def size_at(s: Symbol, f: float) -> int:
    """Symbol s's size at fraction f of its range, geometrically, on a multiple of its multiple."""
    m = s.multiple
    lo = max(s.lo, m)              # (a range from 0: its points from the first nonzero size)
    v = lo * (s.hi / lo) ** f
    return min(s.hi, max(s.lo, int(round(v / m)) * m))


def range_points(values: Sequence) -> list[tuple[int, ...]]:
    """values (ints and Dims) at each of RANGE_POINTS (in order; the same value where no Dim
    has a symbol): what a build fixed to a few sizes across the range would see."""
    syms = shape_symbols(values)
    if not syms:
        return [tuple(int(v) for v in values)]
    out = []
    for f in RANGE_POINTS:
        sizes = {s.name: size_at(s, f) for s in syms}
        out.append(tuple(v.evaluate(sizes) if isinstance(v, Dim) else int(v) for v in values))
    return out


def shape_text(shape) -> str:
    return "x".join(str(d) for d in shape) if shape else "scalar"


def parse_range(text: str):
    """'32..960%32' -> (32, 960, 32), '1..512' -> (1, 512), '7' -> 7 (the CLI's spelling of a
    dim); ValueError when it is none of these."""
    body, pct, mult = text.partition("%")
    lo, dots, hi = body.partition("..")
    if not dots:
        if pct:
            raise ValueError(text)
        return int(text)
    r = (int(lo), int(hi)) + ((int(mult),) if pct else ())
    return r


def decide(a, op: str, b):
    """a op b (one of < <= > >= ==) for every size of the run-time dims in it: True, False, or
    None where it depends on the size."""
    d = a - b
    if not isinstance(d, Dim):
        return {"<": d < 0, "<=": d <= 0, ">": d > 0, ">=": d >= 0, "==": d == 0}[op]
    lo, hi = d.lo, d.hi
    yes = {"<": hi < 0, "<=": hi <= 0, ">": lo > 0, ">=": lo >= 0, "==": False}[op]
    no = {"<": lo >= 0, "<=": lo > 0, ">": hi <= 0, ">=": hi < 0, "==": lo > 0 or hi < 0}[op]
    return True if yes else False if no else None
