"""Lifetimes of buffers over the final kernel order."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Interval:
    key: str          # storage-set name or scratch id
    size: int         # bytes, already rounded up to the alignment
    first: int        # first kernel step that writes it
    last: int         # last kernel step that reads it (inclusive)

    def overlaps(self, other: "Interval") -> bool:
        return self.first <= other.last and other.first <= self.last


def peak_live_bytes(intervals: list[Interval]) -> int:
    """Largest total size of buffers alive at the same step: no plan can use less."""
    if not intervals:
        return 0
    events: dict[int, int] = {}
    for iv in intervals:
        events[iv.first] = events.get(iv.first, 0) + iv.size
        events[iv.last + 1] = events.get(iv.last + 1, 0) - iv.size
    peak = cur = 0
    for t in sorted(events):
        cur += events[t]
        peak = max(peak, cur)
    return peak
