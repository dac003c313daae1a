"""Host program IR: the run function as data, which every backend prints.

A Program is a list of operations on the memory plan's storage:
  * Launch: run one kernel, with every parameter bound to a Slot (a caller's input or
    output, an offset in the weights, an offset in the workspace); a kernel that can fail
    returns a status, and the run stops there and reports which kernel it was;
  * HostLoop: repeat a body with a loop index the launches inside receive as an argument
    (a GPU schedule splits a kernel whose stages cannot be one launch into such loops);
  * HostWhile: repeat a body while a bool in storage holds (a Loop whose number of iterations
    is known only at run time, passes/loops.py: the kernels of its body, the last of which
    writes the flag for the next test).
An operation may have a guard (a branch of an If decided at run time, passes/branches.py): it
runs only when one of the guard's alternatives holds, each a set of (Slot of a bool, polarity).
On CPU targets a program is one Launch per kernel, in the kernel order the memory plan was
made for; the kernel itself hands its parallel loops to the thread pool. Before the first
launch, a program with random ops writes the run's draw number into the workspace (`draw`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator, Optional, Union

import numpy as np

from ..errors import UnsupportedError
from ..ir.internal import is_carry
from ..kernel.context import DRAW
from ..kernel.ir import Buffer, Kernel


@dataclass(frozen=True)
class Slot:
    """Where a kernel argument lives during a run."""
    kind: str            # input | output | weight | arena
    name: str = ""       # input / output: the graph value
    offset: int = 0      # weight / arena: bytes from the start

    def __str__(self) -> str:
        return f"{self.kind}:{self.name or self.offset}"


@dataclass
class Launch:
    index: int                       # the kernel's number in the program (failure reports)
    kernel: Kernel
    args: list[Slot]                 # one per kernel parameter, then one per scratch buffer
    scalars: list[str] = field(default_factory=list)    # host loop indices it receives
    grid: tuple = ()                 # GPU: work-items per axis (global size)
    block: tuple = ()                # GPU: work-group size per axis (empty: the driver's choice)
    slots: dict = field(default_factory=dict)    # GPU: buffer name -> Slot, for the device printer
    guard: Optional[frozenset] = None            # when it runs (see above); None: always
    when: Optional[object] = None    # GPU: a test of the run's sizes (a kernel-IR Expr): one of a GEMM's variants


@dataclass
class HostLoop:
    var: str
    extent: int
    body: list = field(default_factory=list)
    guard: Optional[frozenset] = None            # when it runs, as a Launch's


@dataclass
class HostWhile:
    test: Slot                                   # the bool tested before each iteration
    body: list = field(default_factory=list)
    guard: Optional[frozenset] = None            # when it runs, as a Launch's


Op = Union[Launch, HostLoop, HostWhile]


@dataclass
class BoundedOutput:
    """A graph output whose size along some axes is known only at run time (passes/bounded.py).
    After the last launch the host program writes its shape into the outputs struct, from the
    counts the kernels left in the workspace, and, unless `dense_prefix`, moves its elements
    from the capacity layout into the dense layout of that shape (aotc_compact)."""
    value: str                # the graph output
    capacity: tuple           # its static shape: the most it can hold
    counts: dict              # axis -> byte offset of the int64 count in the workspace
    itemsize: int
    dense_prefix: bool        # the capacity layout already starts with the dense one


@dataclass
class Program:
    body: list[Op]
    # where the run's draw number lives in the workspace (bytes; kernel/context.py DRAW), which
    # the host writes before the first launch; None: no random op reads one
    draw: Optional[int] = None
    # graph outputs of run-time size, which the host finishes after the last launch
    bounded: list = field(default_factory=list)

    def launches(self) -> Iterator[Launch]:
        def walk(ops):
            for op in ops:
                if isinstance(op, Launch):
                    yield op
                else:
                    yield from walk(op.body)
        return walk(self.body)

    def reads_back(self) -> bool:
        """Does the host read values the kernels computed (guards, while loops' flags)?"""
        def walk(ops):
            return any(op.guard is not None or isinstance(op, HostWhile) or
                       (isinstance(op, HostLoop) and walk(op.body)) for op in ops)
        return walk(self.body)

    def kernels(self) -> list[Kernel]:
        """Every kernel the program launches, each once, in first-launch order."""
        seen: dict[int, Kernel] = {}
        for ln in self.launches():
            seen.setdefault(id(ln.kernel), ln.kernel)
        return list(seen.values())


def slot_of(plan, value: str) -> Slot:
    loc = plan.locations[value]
    if loc.kind in ("input", "output"):
        return Slot(loc.kind, loc.name)
    return Slot(loc.kind, "", loc.offset)


def build_program(steps, plan) -> Program:
    """One launch per kernel step, its parameters bound to where the plan put their values."""
    def launch(t, st):
        args = [slot_of(plan, st.binds[p.name]) for p in st.kernel.params]
        args += [Slot("arena", "", plan.scratch[(t, s.name)]) for s in st.kernel.scratch]
        return [Launch(t, st.kernel, args, guard=guard_slots(st.group.guard, plan))]
    return Program(nest_loops(steps, plan, launch), draw_offset(plan))


def nest_loops(steps, plan, ops_of) -> list[Op]:
    """The operations `ops_of(t, step)` gives for every step, in order, with each host loop's
    body (the steps after its begin Carry, to its end Carry) inside a HostWhile on its flag. An
    operation in a loop under the loop's own guard needs no guard of its own."""
    body: list[Op] = []
    stack: list[tuple[list, HostWhile]] = []
    for t, st in enumerate(steps):
        ops = ops_of(t, st)
        if stack:
            for op in ops:
                if op.guard == stack[-1][1].guard:
                    op.guard = None
        body.extend(ops)
        a = st.group.anchor
        if a is not None and is_carry(a, end=False):
            w = HostWhile(slot_of(plan, a.outputs[0]), [], guard_slots(st.group.guard, plan))
            body.append(w)
            stack.append((body, w))
            body = w.body
        elif a is not None and is_carry(a, end=True):
            body = stack.pop()[0]
    assert not stack, "a host loop without its end"
    return body


def guard_slots(guard: Optional[frozenset], plan) -> Optional[frozenset]:
    """A group's guard over graph values as the same guard over the slots they live in."""
    if guard is None:
        return None
    return frozenset(frozenset((slot_of(plan, v), pos) for v, pos in alt) for alt in guard)


def dense_prefix(cap: tuple, axes: dict) -> bool:
    """Is the dense layout of every run-time shape the start of the capacity layout (so that
    the output needs no moving)? True when the only run-time axis has no axis of size > 1
    before it."""
    return len(axes) == 1 and all(d == 1 for d in cap[:next(iter(axes))])


def bounded_outputs(g, plan) -> list[BoundedOutput]:
    """The graph outputs of run-time size (g.bounded), with where their counts are."""
    out = []
    for o in g.outputs:
        axes = g.bounded.get(o)
        if axes:
            v = g.values[o]
            prefix = dense_prefix(tuple(v.shape), axes)
            if len(v.shape) > 16 and not prefix:
                raise UnsupportedError([f"output {o!r} of rank {len(v.shape)} whose size is known only at run time"],
                                       "aotc_compact moves outputs of rank 16 at most")
            out.append(BoundedOutput(o, tuple(v.shape), {a: plan.locations[c].offset for a, c in sorted(axes.items())},
                                     np.dtype(v.dtype).itemsize, prefix))
    return out


def draw_offset(plan) -> Optional[int]:
    """The draw number's place in the workspace, if the plan has one."""
    loc = plan.locations.get(DRAW)
    return None if loc is None else loc.offset


def step_slots(t: int, st, plan) -> dict[str, Slot]:
    """Where each buffer of kernel step t lives: its parameters' values and its scratch."""
    slots = {p.name: slot_of(plan, st.binds[p.name]) for p in st.kernel.params}
    slots.update({s.name: Slot("arena", "", plan.scratch[(t, s.name)]) for s in st.kernel.scratch})
    return slots


def storage_args(kernel: Kernel, slots: dict[str, Slot]) -> list[tuple[Slot, Buffer | None]]:
    """The storages a device kernel is given, in order: the workspace and the weights (each
    once, as a whole: the kernel knows its buffers' offsets), and each graph input or output
    one of its buffers is bound to (with that buffer)."""
    out, seen = [], set()
    for b in kernel.params:
        s = slots[b.name]
        if s.kind in ("arena", "weight"):
            if s.kind not in seen:
                seen.add(s.kind)
                out.append((Slot(s.kind), None))
        else:
            out.append((s, b))
    return out


def build_device_program(steps, plan) -> Program:
    """The host program of a GPU target: every step's device launches and host loops (from the
    GPU schedule), in kernel order; each launch's args are the storages its kernel takes."""
    def convert(ops, t, slots, guard=None):
        out = []
        for op in ops:
            if hasattr(op, "grid"):
                args = [s for s, _ in storage_args(op.kernel, slots)]
                out.append(Launch(t, op.kernel, args, [v.name for v in op.scalars], op.grid, op.block, slots,
                                  guard, op.when))
            else:
                out.append(HostLoop(op.var.name, op.extent, convert(op.body, t, slots), guard))
        return out

    def ops_of(t, st):
        slots = step_slots(t, st, plan)
        st.slots = slots
        return convert(st.device, t, slots, guard_slots(st.group.guard, plan))
    return Program(nest_loops(steps, plan, ops_of), draw_offset(plan))
