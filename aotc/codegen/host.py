"""The host program (program/ir.py) printed as C-family statements: what every backend's run
function shares (counted loops, while loops on a flag, guards as `if` blocks, the launches
themselves spelled by the backend). The backends give the spellings that differ: a loop head,
a launch's lines and how a bool the kernels computed is read."""
from __future__ import annotations

from ..program.ir import HostLoop, HostWhile, Launch, Program


def host_statements(program: Program, loop_head, launch, test, depth: int = 1, read_once: bool = False) -> list[str]:
    """The host program as statements of a C-family host language: `loop_head(var, extent)` spells the
    head of a counted loop (the body is indented under it and closed with a brace),
    `launch(op)` the lines of one launch, and `test(slot)` the truth of the bool a guard or
    a while loop reads (consecutive operations under one guard share one `if`).

    `read_once` (a device the host reads back from, each read a copy and a wait): a guard's
    bool is read into a local (`aotc_condN`) and the next guards read the local, an If's
    else-block after its then-block say, while it still holds: until a launch that its
    guard does not cover (the memory plan keeps a guard's value in place through every
    launch it guards; any other launch may reuse that memory), or a host loop begins or
    ends (a loop's body recomputes its values each iteration)."""
    lines: list[str] = []
    held: dict = {}                  # slot -> the local holding its bool, while valid
    count = [0]

    def read(slot, pad) -> str:
        if not read_once:
            return test(slot)
        if slot not in held:
            held[slot] = f"aotc_cond{count[0]}"
            count[0] += 1
            lines.append(f"{pad}const int {held[slot]} = {test(slot)};")
        return held[slot]

    def condition(guard, pad) -> str:
        alts = []
        def order(lits):
            return sorted(lits, key=lambda lit: (str(lit[0]), lit[1]))
        for alt in sorted(guard, key=lambda a: [(str(s), pos) for s, pos in order(a)]):
            lits = [read(s, pad) if pos else f"!{read(s, pad)}" for s, pos in order(alt)]
            alts.append(" && ".join(lits) if len(alt) == 1 or len(guard) == 1 else f"({' && '.join(lits)})")
        return " || ".join(alts)

    def one(op, depth):
        pad = "    " * depth
        if isinstance(op, (HostLoop, HostWhile)):
            held.clear()
            head = loop_head(op.var, op.extent) if isinstance(op, HostLoop) else f"while ({test(op.test)})"
            lines.append(f"{pad}{head} {{")
            walk(op.body, depth + 1)
            lines.append(f"{pad}}}")
            held.clear()
        else:
            assert isinstance(op, Launch), op
            covered = {s for alt in op.guard or () for s, _ in alt}
            for slot in [s for s in held if s not in covered]:
                del held[slot]
            lines.extend(pad + line for line in launch(op))

    def walk(ops, depth):
        k = 0
        while k < len(ops):
            guard = ops[k].guard
            if guard is None:
                one(ops[k], depth)
                k += 1
                continue
            pad = "    " * depth
            lines.append(f"{pad}if ({condition(guard, pad)}) {{")
            while k < len(ops) and ops[k].guard == guard:
                one(ops[k], depth + 1)
                k += 1
            lines.append(f"{pad}}}")

    walk(program.body, depth)
    return lines
