"""Host code every backend shares, printed once (the backends give only their spellings):

  * `host_statements`: the host program (program/ir.py) as C-family statements: counted loops,
    while loops on a flag, guards as `if` blocks; a backend spells a loop head, a launch and the
    read of a bool the kernels computed;
  * `DeviceHost`: the GPU backends' invoke and ABI functions, with hooks for the device API;
  * the pieces all three print alike: `strerror_function`, `c_string`, `port_bytes`,
    `fusion_kernel_names`."""
from __future__ import annotations

import numpy as np

from ..program.ir import HostLoop, HostWhile, Launch, Program
from .abi import bounded_epilogue, count_offsets


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


def strerror_function(prefix: str) -> list[str]:
    """<name>_strerror: the runtime header's messages (runtime/aotc_runtime.h AOTC_STRERROR_CASES)."""
    return [f"const char *{prefix}_strerror(int status)", "{", "    switch (status) {", "    AOTC_STRERROR_CASES",
            "    default: return \"unknown status code\";", "    }", "}", ""]


def c_string(s: str, limit: int | None = None) -> str:
    """s inside a C string literal (backslashes and quotes escaped, newlines as spaces), cut to
    `limit` characters."""
    s = s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", " ")
    return s if limit is None else s[:limit]


def port_bytes(p) -> int:
    """The bytes of a graph input or output (codegen/abi.py Port) at its full shape."""
    return int(np.prod(p.shape, dtype=np.int64)) * np.dtype(p.dtype).itemsize


def fusion_kernel_names(program: Program) -> dict[int, str]:
    """Fusion kernel number -> "<kernel>: <its ONNX nodes>", from a device program's launches
    (their kernels are named `<fusion kernel>_<part>`): what <name>_failure reports."""
    names: dict[int, str] = {}
    for ln in program.launches():
        names.setdefault(ln.index, f"{ln.kernel.name.rsplit('_', 1)[0]}: {ln.kernel.comment.split(': ')[0]}")
    return names


class DeviceHost:
    """The host code a GPU backend shares with the others, as one skeleton: the invoke (inputs
    copied to the device, the draw number written, the host program run, outputs and run-time
    sizes copied back, the kernels' status read) and the ABI functions the artifact's header
    declares for every target (run / run_with_weights, which a device artifact refuses,
    embedded_weights, strerror, threads, profile, failure). A backend subclass gives only the
    device's spellings: the hooks below. (create / destroy, which differ most, are its own.)"""

    extern = ""                      # what precedes an exported definition ('extern "C" ' in C++)
    count_type = "int64_t"           # the host type of a run-time size read back

    def invoke_locals(self) -> list[str]:
        raise NotImplementedError

    def invoke_prelude(self) -> list[str]:
        return []

    def write_draw(self, offset: int) -> str:
        raise NotImplementedError

    def copy_in(self, i: int, p) -> str:
        raise NotImplementedError

    def run(self, prefix: str) -> list[str]:
        """Reset the status word and run the host program."""
        raise NotImplementedError

    def copy_out(self, i: int, p) -> str:
        raise NotImplementedError

    def read_count(self, j: int, offset: int) -> str:
        raise NotImplementedError

    def read_status(self) -> list[str]:
        """Read the status word back and wait for everything queued."""
        raise NotImplementedError

    def profile_body(self, prefix: str, n_launches: int) -> list[str]:
        raise NotImplementedError

    def invoke(self, prefix: str, ins, outs, program: Program) -> list[str]:
        draw, offsets = program.draw, count_offsets(program)
        checks = ["!m", "!in", "!out"] + [f"!in->{p.field}" for p in ins] + [f"!out->{p.field}" for p in outs]
        L = [f"{self.extern}int {prefix}_invoke({prefix}_model *m, const {prefix}_inputs *in, {prefix}_outputs *out)",
             "{", *self.invoke_locals(),
             *([f"    {self.count_type} counts[{len(offsets)}];      /* run-time sizes of outputs */"] if offsets else []),
             f"    if ({' || '.join(checks)})", "        return AOTC_ERR_NULL_ARGUMENT;", "    m->failed = -1;",
             *self.invoke_prelude()]
        if draw is not None:
            L += ["    m->draw = m->draws++;        /* the draw number the random ops read */", self.write_draw(draw)]
        L += [self.copy_in(i, p) for i, p in enumerate(ins) if port_bytes(p)]
        L += self.run(prefix)
        L += [self.copy_out(i, p) for i, p in enumerate(outs) if port_bytes(p)]
        L += [self.read_count(j, off) for j, off in enumerate(offsets)]
        L += self.read_status()
        L += ["    if (st[0] != AOTC_OK) {", "        m->failed = st[1];", "        return st[0];", "    }"]
        L += ["    " + line for line in bounded_epilogue(program, outs, lambda off: f"counts[{offsets.index(off)}]")]
        L += ["    return AOTC_OK;", "}", ""]
        return L

    def abi_functions(self, prefix: str, external: bool, n_fusion: int, n_launches: int) -> list[str]:
        L = [f"int {prefix}_run_with_weights(const void *weights, const {prefix}_inputs *in, {prefix}_outputs *out,",
             "    void *workspace)", "{", "    (void)weights;", "    (void)in;", "    (void)out;", "    (void)workspace;",
             "    return AOTC_ERR_NOT_SUPPORTED;", "}", "",
             f"int {prefix}_run(const {prefix}_inputs *in, {prefix}_outputs *out, void *workspace)", "{",
             f"    return {prefix}_run_with_weights(NULL, in, out, workspace);", "}", "",
             f"const void *{prefix}_embedded_weights(void)", "{",
             "    return NULL;" if external else f"    return {prefix}_weights_data;", "}", ""]
        L += strerror_function(prefix)
        L += [f"int {prefix}_threads(const {prefix}_model *model)", "{", "    return model ? 1 : 0;", "}", "",
              f"int {prefix}_profile(const {prefix}_model *model, const double **ms, const char *const **names)", "{",
              *self.profile_body(prefix, n_launches), "}", "",
              f"const char *{prefix}_failure(const {prefix}_model *model)", "{",
              f"    if (!model || model->failed < 0 || model->failed >= {n_fusion}) return NULL;",
              f"    return {prefix}_kernel_names[model->failed];", "}", ""]
        return L
