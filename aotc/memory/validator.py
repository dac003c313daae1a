"""Checks a memory plan: no two buffers alive at once overlap, all aligned, all inside the arena."""
from __future__ import annotations

from .liveness import Interval


class PlanError(AssertionError):
    pass


def validate(intervals: list[Interval], offsets: dict[str, int], arena_bytes: int, align: int) -> None:
    for iv in intervals:
        off = offsets.get(iv.key)
        if off is None:
            raise PlanError(f"buffer {iv.key} has no offset")
        if off % align:
            raise PlanError(f"buffer {iv.key} at offset {off} is not {align}-byte aligned")
        if off < 0 or off + iv.size > arena_bytes:
            raise PlanError(f"buffer {iv.key} [{off}, {off + iv.size}) lies outside the arena of {arena_bytes} bytes")
    ordered = sorted(intervals, key=lambda iv: offsets[iv.key])
    # sweep by offset: any pair overlapping in memory must not overlap in time
    active: list[Interval] = []
    for iv in ordered:
        start = offsets[iv.key]
        active = [a for a in active if offsets[a.key] + a.size > start]
        for a in active:
            if a.overlaps(iv):
                raise PlanError(f"buffers {a.key} and {iv.key} are alive at the same time and overlap in memory")
        active.append(iv)
