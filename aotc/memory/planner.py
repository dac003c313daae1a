"""Static memory plan: where every value lives.

Storage kinds: `input` / `output` (the caller's pointers), `weight` (offset in the
read-only weights blob), `arena` (offset in the one workspace; the run's draw number too, when
random ops read it: the host writes it there before the first kernel, kernel/context.py DRAW;
and the counts of bounded values, which live to the end of the run: passes/bounded.py).
Views (Reshape & co.) share their source's storage; an elementwise kernel may write its
output over an input that dies there (in-place); a Concat's inputs may be computed straight
into their slices of its output, and the Concat is then no kernel (elide_concats). Offsets: size-descending first
fit over lifetimes, improved by a bounded search when it misses the lower bound
(plan_offsets); then the validator checks the result on every compile.
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass, field

import numpy as np

from ..fusion.groups import Group
from ..ir.dims import is_static
from ..ir.graph import Graph
from ..ir.internal import is_carry
from ..kernel.context import DRAW
from ..kernel.ir import scratch_bytes
from ..lowering.lower import KernelStep
from ..passes.branches import guard_values
from .liveness import Interval, peak_live_bytes
from .validator import validate


@dataclass
class Location:
    kind: str            # input | output | weight | arena
    name: str = ""       # input/output name
    offset: int = 0      # bytes into the weights blob or the arena


@dataclass
class MemoryPlan:
    locations: dict[str, Location]
    scratch: dict[tuple[int, str], int]          # (step index, buffer name) -> arena offset
    arena_bytes: int
    weights_bytes: int
    weight_order: list[str]                      # constants in blob order (each bytes once)
    intermediates_bytes: int                     # sum of all arena buffers, no reuse
    lower_bound_bytes: int                       # peak simultaneously-live bytes
    alignment: int
    inplace: list[tuple[str, str]] = field(default_factory=list)   # (output, reused input)
    slices: dict[str, tuple[str, int]] = field(default_factory=dict)  # value -> (its Concat's output, byte offset)
    # the arena's buffers as placed: (storage set or scratch id, offset, bytes, first step, last step)
    buffers: list[tuple[str, int, int, int, int]] = field(default_factory=list)

    def summary(self) -> dict:
        return {
            "arena_bytes": self.arena_bytes,
            "intermediates_bytes": self.intermediates_bytes,
            "lower_bound_bytes": self.lower_bound_bytes,
            "weights_bytes": self.weights_bytes,
            "alignment": self.alignment,
            "inplace_reuses": len(self.inplace),
            "concat_slices": len(self.slices),
        }


def _round(n: int, a: int) -> int:
    return max(a, (n + a - 1) // a * a)


class _Sets:
    """Union-find over value names: members of one set share storage."""

    def __init__(self):
        self.parent: dict[str, str] = {}

    def find(self, x: str) -> str:
        self.parent.setdefault(x, x)
        while self.parent[x] != x:
            self.parent[x] = self.parent[self.parent[x]]
            x = self.parent[x]
        return x

    def union(self, a: str, b: str) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[rb] = ra


def _view_sets(groups: list[Group]) -> _Sets:
    """Values joined with the values they are views of (Reshape & co.: one storage), and a host
    loop's state with the values its end copies over it (passes/loops.py: one storage, which
    holds the loop's results once it is done)."""
    sets = _Sets()
    for grp in groups:
        if grp.view:
            sets.union(grp.anchor.inputs[0], grp.anchor.outputs[0])
        elif grp.anchor is not None and is_carry(grp.anchor, end=True):
            for state, out in zip(grp.anchor.attrs["state"], grp.anchor.outputs):
                sets.union(state, out)
    return sets


def loop_spans(steps: list[KernelStep]) -> list[tuple[int, int]]:
    """(first, last) step of every host loop: its begin and end Carry kernels."""
    begin, spans = {}, []
    for t, st in enumerate(steps):
        a = st.group.anchor
        if a is not None and is_carry(a, end=False):
            begin[a.attrs["loop"]] = t
        elif a is not None and is_carry(a, end=True):
            spans.append((begin[a.attrs["loop"]], t))
    return spans


def elide_concats(g: Graph, groups: list[Group], steps: list[KernelStep], align: int = 64
                  ) -> tuple[list[KernelStep], dict]:
    """Concats whose inputs can be computed straight into their slices of the output: the
    steps without those Concat kernels, and {input value: (concat output, byte offset)} for
    plan_memory. A Concat qualifies when it is a kernel of its own (nothing fused after it),
    every dim before its axis is 1 (each input is then one contiguous slice of the output),
    every slice starts a multiple of `align` bytes in (every buffer stays aligned), and
    neither its output nor any input is (a view of) a graph input, output or constant, or
    takes part in another such Concat, or appears twice.

    Inputs of such a Concat that are, in order, all the parts of one Split along the same
    axis (YOLOv8's C2f blocks: a 1x1 convolution, split in two, both halves and the branch
    grown from the second concatenated) are its input cut as it lies: the Split's input is
    placed at their slice too, and the Split, then a copy of it onto itself, goes as well."""
    sets = _view_sets(groups)
    external = set(g.inputs) | set(g.outputs) | {n for n, v in g.values.items() if v.const is not None}
    members: dict[str, list[str]] = {}
    for v in g.values:
        members.setdefault(sets.find(v), []).append(v)
    taken: set[str] = set()
    slices: dict[str, tuple[str, int]] = {}
    writer = {v: st for st in steps for v in st.writes}
    dropped: set[int] = set()        # (Split steps, by id)
    kept = []
    for st in steps:
        node = st.group.anchor
        if node is None or node.op_type != "Concat" or st.group.chain or any(not i for i in node.inputs):
            kept.append(st)
            continue
        out = g.values[node.outputs[0]]
        axis = int(node.attr("axis"))
        axis = axis + len(out.shape) if axis < 0 else axis
        values = [g.values[i] for i in node.inputs] + [out]
        roots = [sets.find(v.name) for v in values]
        if any(not is_static(v.shape) for v in values):      # slices placed at run-time sizes: not yet
            kept.append(st)
            continue
        if any(int(d) != 1 for d in out.shape[:axis]) or len(set(roots)) != len(roots) or taken & set(roots) \
                or any(m in external for r in roots for m in members[r]) or any(v.nbytes == 0 for v in values) \
                or any(sum(v.nbytes for v in values[:k]) % align for k in range(1, len(values) - 1)):
            kept.append(st)
            continue
        taken |= set(roots)
        at = 0
        for v in values[:-1]:
            slices[v.name] = (out.name, at)
            at += v.nbytes
        for split, first in _splits_in_place(g, node, axis, writer, sets, members, external, taken):
            taken.add(sets.find(split.inputs[0]))
            slices[split.inputs[0]] = slices[first]
            dropped.add(id(writer[first]))
    return [st for st in kept if id(st) not in dropped], slices


def _splits_in_place(g: Graph, concat, axis: int, writer: dict, sets, members: dict, external: set, taken: set):
    """(Split node, its first output) for each Split of the Concat's inputs that elide_concats
    can drop (its docstring): a kernel of its own whose outputs are consecutive inputs of the
    Concat in their order, cut along the same axis, from a value that is nothing else's
    storage (not external, not in a slice or another Concat)."""
    ins = list(concat.inputs)
    k = 0
    while k < len(ins):
        st = writer.get(ins[k])
        node = st.group.anchor if st is not None else None
        if node is None or node.op_type != "Split" or st.group.chain or ins[k] != node.outputs[0]:
            k += 1
            continue
        parts = list(node.outputs)
        src = g.values[node.inputs[0]]
        sax = int(node.attr("axis", 0))
        sax = sax + len(src.shape) if sax < 0 else sax
        root = sets.find(src.name)
        if ins[k:k + len(parts)] == parts and sax == axis and len(src.shape) == len(g.values[concat.outputs[0]].shape) \
                and is_static(src.shape) and root not in taken \
                and not any(m in external for m in members[root]) \
                and src.nbytes == sum(g.values[v].nbytes for v in parts):
            yield node, parts[0]
        k += len(parts) if ins[k:k + len(parts)] == parts else 1


def plan_memory(g: Graph, groups: list[Group], steps: list[KernelStep], align: int = 64,
                inplace: bool = True, threads: int = 1, slices: dict | None = None) -> MemoryPlan:
    """Where every value and every kernel's scratch lives; per-thread scratch takes `threads`
    copies (thread t's at offset + t * its size). `slices` (elide_concats): values that live
    inside another value's storage, at a byte offset (a Concat's inputs in its output)."""
    slices = slices or {}
    sets = _view_sets(groups)

    inputs, outputs = set(g.inputs), set(g.outputs)
    consts = {n for n, v in g.values.items() if v.const is not None}

    def external(root_members: list[str]) -> bool:
        return any(m in inputs or m in outputs or m in consts for m in root_members)

    # uses per value: step indices that read / write it
    first_def: dict[str, int] = {}
    last_use: dict[str, int] = {}
    for t, st in enumerate(steps):
        for v in st.writes:
            first_def.setdefault(v, t)
            last_use[v] = max(last_use.get(v, t), t)
        for v in st.reads + guard_values(st.group.guard):     # (the host tests a guard's values)
            last_use[v] = max(last_use.get(v, -1), t)
    # what a loop's body reads from before the loop stays until its last iteration is done
    for b, e in loop_spans(steps):
        for t in range(b + 1, e + 1):
            for v in steps[t].reads + guard_values(steps[t].group.guard):
                if first_def.get(v, -1) < b:
                    last_use[v] = max(last_use[v], e)
    if DRAW in last_use:
        first_def[DRAW] = 0       # the host writes the draw number before the first kernel
    for c in g.counts():          # run-time sizes, which the host program reads after the last kernel
        if c in first_def:
            last_use[c] = max(last_use[c], len(steps) - 1)

    members: dict[str, list[str]] = {}
    for v in dict.fromkeys(list(first_def) + list(last_use) + list(g.values)):
        members.setdefault(sets.find(v), []).append(v)

    def set_span(mem):
        firsts = [first_def[v] for v in mem if v in first_def]
        lasts = [last_use[v] for v in mem if v in last_use]
        if not firsts:
            return None
        return min(firsts), max(lasts + firsts)

    # values in a Concat's output take no part in in-place reuse: their storage is the
    # output's, which outlives them
    pinned = set(slices) | {o for o, _ in slices.values()} | {DRAW} | set(g.counts())

    # in-place: an elementwise kernel's output takes over an input that dies in it
    reused: list[tuple[str, str]] = []
    if inplace:
        for t, st in enumerate(steps):
            if st.group.anchor is not None:
                continue      # the anchor writes its whole output before the chain reads
            for o in st.writes:
                ro = sets.find(o)
                if external(members[ro]) or pinned & set(members[ro]):
                    continue
                ov = g.values[o]
                for i in st.reads:
                    ri = sets.find(i)
                    if ri == ro or external(members[ri]) or pinned & set(members[ri]):
                        continue
                    iv = g.values[i]
                    if tuple(iv.shape) != tuple(ov.shape) or iv.nbytes != ov.nbytes:
                        continue
                    span = set_span(members[ri])
                    if span is None or span[1] != t:
                        continue
                    # the input must not also be (a view of) something this kernel writes
                    if any(sets.find(w) == ri for w in st.writes):
                        continue
                    sets.union(i, o)
                    merged = members.pop(ri) + members.pop(ro)
                    members[sets.find(i)] = merged
                    reused.append((o, i))
                    break

    # storage sets inside another one's: root -> (the enclosing root, byte offset)
    inner = {sets.find(i): (sets.find(o), at) for i, (o, at) in slices.items()}
    held: dict[str, list[str]] = {}
    for r, (outer, _) in inner.items():
        held.setdefault(outer, []).append(r)

    locations: dict[str, Location] = {}
    intervals: list[Interval] = []
    for root, mem in members.items():
        if root in inner:
            continue              # placed with the storage that holds it, below
        outs = [m for m in mem if m in outputs]
        ins = [m for m in mem if m in inputs]
        cs = [m for m in mem if m in consts]
        if len(outs) + len(ins) + len(cs) > 1:
            raise AssertionError(f"storage set {mem} mixes several external buffers; "
                                 "materialize_outputs should have inserted a copy")
        if outs:
            loc = Location("output", outs[0])
        elif ins:
            loc = Location("input", ins[0])
        elif cs:
            loc = Location("weight", cs[0])
        else:
            # its lifetime spans the values it holds (a Concat's output: from its first
            # input's kernel on)
            span = set_span(mem + [m for r in held.get(root, []) for m in members[r]])
            if span is None:
                continue
            size = max(g.values[m].nbytes for m in mem)
            intervals.append(Interval(root, _round(size, align), span[0], span[1]))
            loc = Location("arena", root)
        for m in mem:
            locations[m] = loc

    scratch_keys: dict[tuple[int, str], str] = {}
    for t, st in enumerate(steps):
        for buf in st.scratch:
            key = f"scratch:{t}:{buf.name}"
            scratch_keys[(t, buf.name)] = key
            intervals.append(Interval(key, _round(scratch_bytes(buf, threads), align), t, t))

    offsets, arena = plan_offsets(intervals, align)
    validate(intervals, offsets, arena, align)
    for v, loc in locations.items():
        if loc.kind == "arena":
            locations[v] = Location("arena", loc.name, offsets[loc.name])
    for r, (outer, at) in inner.items():
        for m in members[r]:
            locations[m] = Location("arena", outer, offsets[outer] + at)

    # weights blob: constants that kernels read, each aligned; constants whose arrays are the
    # same bytes in memory (a folded Reshape of a weight another node reads as it is: tied
    # embeddings) stored once
    readers, woff = [], 0
    for st in steps:
        for v in st.reads:
            loc = locations.get(v)
            if loc is not None and loc.kind == "weight" and loc.name not in readers:
                readers.append(loc.name)
    wofs: dict[str, int] = {}
    first: dict[tuple[int, int], str] = {}
    weight_order = []
    for name in readers:
        arr = g.values[name].const
        key = (arr.ctypes.data, arr.nbytes) if isinstance(arr, np.ndarray) and arr.flags.c_contiguous else None
        if key is not None and key in first:
            wofs[name] = wofs[first[key]]
            continue
        if key is not None:
            first[key] = name
        weight_order.append(name)
        wofs[name] = woff
        woff += _round(g.values[name].nbytes, align)
    for v, loc in locations.items():
        if loc.kind == "weight":
            locations[v] = Location("weight", loc.name, wofs.get(loc.name, 0))

    return MemoryPlan(
        locations=locations,
        scratch={k: offsets[key] for k, key in scratch_keys.items()},
        arena_bytes=arena,
        weights_bytes=woff,
        weight_order=weight_order,
        intermediates_bytes=sum(iv.size for iv in intervals),
        lower_bound_bytes=peak_live_bytes(intervals),
        alignment=align,
        inplace=reused,
        slices=dict(slices),
        buffers=[(iv.key, offsets[iv.key], iv.size, iv.first, iv.last) for iv in intervals],
    )


def first_fit(intervals: list[Interval], align: int) -> tuple[dict[str, int], int]:
    """Place the largest buffers first, each at the lowest offset that does not collide
    with an already placed buffer whose lifetime overlaps."""
    placed: list[tuple[int, Interval]] = []
    offsets: dict[str, int] = {}
    arena = 0
    for iv in sorted(intervals, key=lambda x: (-x.size, x.first, x.key)):
        busy = sorted((off, off + p.size) for off, p in placed if p.overlaps(iv))
        off = 0
        for lo, hi in busy:
            if off + iv.size <= lo:
                break
            off = max(off, (hi + align - 1) // align * align)
        offsets[iv.key] = off
        placed.append((off, iv))
        arena = max(arena, off + iv.size)
    return offsets, arena


def plan_offsets(intervals: list[Interval], align: int, search_work: int = 200_000) -> tuple[dict[str, int], int]:
    """Offsets for every buffer. Size-descending first fit is the baseline; when it leaves the
    arena above the lower bound (peak live bytes), a bounded search that places buffers in
    time order under a cap (the bound first, then bisecting towards the baseline) keeps any
    smaller arena it finds. First fit alone ping-pongs long-lived buffers (residual streams)
    across the big short-lived ones: 10-20% above the bound on ResNet-50, BERT, GPT-2, which
    the search brings to the bound. Deterministic: the same intervals give the same offsets."""
    offsets, arena = first_fit(intervals, align)
    lo, hi = peak_live_bytes(intervals), arena
    for attempt in range(4):
        if lo >= hi:
            break
        cap = lo if attempt == 0 else (lo + hi) // 2 // align * align
        found = fit_under_cap(intervals, cap, align, search_work)
        if found is None:
            lo = cap + align
        else:
            offsets = found
            hi = max((found[iv.key] + iv.size for iv in intervals), default=0)
    return offsets, hi


def fit_under_cap(intervals: list[Interval], cap: int, align: int, work: int) -> dict[str, int] | None:
    """Depth-first search for offsets that keep every buffer below `cap`: buffers in order of
    their first step (larger first on ties), each tried at the offsets where it rests on the
    floor, the ceiling, or against a time-overlapping buffer already placed (on top of it or
    just under it). Gives up (None) once it has looked at `work` placed neighbours in all."""
    order = sorted(intervals, key=lambda x: (x.first, -x.size, x.key))
    n = len(order)
    # earlier buffers (in this order) whose lifetimes overlap each buffer, by a sweep
    earlier: list[list[int]] = []
    active: list[int] = []
    for i, iv in enumerate(order):
        active = [j for j in active if order[j].last >= iv.first]
        earlier.append(list(active))
        active.append(i)
    offs = [0] * n

    def candidates(i: int) -> list[int]:
        size = order[i].size
        segs: list[list[int]] = []            # occupied byte ranges, merged and sorted
        for lo, hi in sorted((offs[j], offs[j] + order[j].size) for j in earlier[i]):
            if segs and lo <= segs[-1][1]:
                segs[-1][1] = max(segs[-1][1], hi)
            else:
                segs.append([lo, hi])
        starts = [a for a, _ in segs]
        spots = {0, (cap - size) // align * align}
        for lo, hi in segs:
            spots.add((hi + align - 1) // align * align)
            spots.add((lo - size) // align * align)
        out = []
        for c in sorted(spots):
            if c < 0 or c + size > cap:
                continue
            k = bisect.bisect_left(starts, c + size)      # segments starting below our end
            if k == 0 or segs[k - 1][1] <= c:
                out.append(c)
        return out

    tried: list[tuple[list[int], int]] = []      # per depth: candidate offsets, next to try
    i = 0
    while i < n:
        if len(tried) <= i:
            work -= len(earlier[i]) + 1
            if work < 0:
                return None
            tried.append((candidates(i), 0))
        spots, k = tried[i]
        if k < len(spots):
            offs[i] = spots[k]
            tried[i] = (spots, k + 1)
            i += 1
        else:
            tried.pop()
            i -= 1
            if i < 0:
                return None
    return {order[k].key: offs[k] for k in range(n)}


def mark_aliased(g: Graph, steps: list[KernelStep], plan: MemoryPlan) -> None:
    """Record on every kernel which parameters may share bytes with another parameter one of
    them writes (an elementwise kernel writing over its input in place): the printers give
    every other pointer `restrict`."""
    for st in steps:
        spans = []
        for p in st.kernel.params:
            loc = plan.locations.get(st.binds[p.name])
            if loc is None:
                continue
            key = (loc.kind, loc.name) if loc.kind in ("input", "output") else (loc.kind, "")
            start = loc.offset if loc.kind in ("arena", "weight") else 0
            spans.append((p, key, start, start + g.values[st.binds[p.name]].nbytes))
        aliased = set()
        for i, (p, k, a0, a1) in enumerate(spans):
            for q, k2, b0, b1 in spans[i + 1:]:
                if k == k2 and a0 < b1 and b0 < a1 and (p.role == "out" or q.role == "out"):
                    aliased |= {p.name, q.name}
        st.kernel.aliased = frozenset(aliased)
