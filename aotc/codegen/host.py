"""Host code every backend shares, printed once (the backends give only their spellings):

  * `host_statements`: the host program (program/ir.py) as C-family statements: counted loops,
    while loops on a flag, guards as `if` blocks; a backend spells a loop head, a launch and the
    read of a bool the kernels computed;
  * `DeviceHost`: the GPU backends' invoke and ABI functions, with hooks for the device API;
  * `RunTimeDims`: the reading and checking of the inputs' run-time dimensions at the start of
    a run and the outputs' shapes at its end (`DeviceDims`: as a GPU invoke keeps them);
  * the pieces all three print alike: `strerror_function`, `port_bytes`,
    `fusion_kernel_names`."""
from __future__ import annotations

import numpy as np

from ..errors import AotcError
from ..ir.dims import Dim
from ..kernel.ir import BinOp, Const, SizeVar, dim_ident
from ..program.ir import HostLoop, HostWhile, Launch, Program
from .abi import Port, bounded_epilogue, c_string, count_offsets
from .weights_check import read_weights_call


def c_dim(d) -> str:
    """A graph dimension as C over the run's sizes: 64, aotc_dim_seq, 2 * aotc_dim_seq + 1."""
    if not isinstance(d, Dim):
        return str(int(d))
    parts = []
    for mono, coef in reversed(d.terms):
        factors = [dim_ident(sym.name, sym.multiple) for sym in mono]
        if coef != 1 or not factors:
            factors.insert(0, str(coef))
        parts.append(" * ".join(factors))
    return " + ".join(parts).replace("+ -", "- ")


def c_expr(e) -> str:
    """A kernel-IR index expression of run-time sizes (a grid over them, say) as host C."""
    from .c.printer import CPrinter
    return CPrinter().expr(e)


def launch_groups(grid, block: int) -> str:
    """Work-groups on one axis of a launch (program/ir.py Launch): the grid's work-items, an int
    (a multiple of the block) or an expression of the run's sizes, over the block, rounded up."""
    if isinstance(grid, int):
        return str(-(-grid // block))
    n = c_expr(grid)
    return n if block == 1 else f"({n} + {block - 1}) / {block}"


def _may_be_zero(grid) -> bool:
    """Whether a launch's work-items on one axis, an expression of the run's sizes, can be 0 at
    some size in the ranges."""
    if isinstance(grid, int):
        return False            # (a fixed empty grid: host_statements leaves its launch out)
    low = _lowest(grid)
    return low is None or low <= 0


def _lowest(e):
    """The least value of a launch grid's expression over the run-time sizes' ranges, where it is
    built of sizes and positive constants by +, * and / (each step non-decreasing in the sizes,
    so the least sizes give it); None for any other expression."""
    if isinstance(e, Const) and isinstance(e.value, int):
        return e.value
    if isinstance(e, SizeVar):
        return e.lo
    if isinstance(e, BinOp) and e.op in ("+", "*", "/"):
        a, b = _lowest(e.a), _lowest(e.b)
        if a is None or b is None or a < 0 or b < 0:
            return None
        if e.op == "/":
            return a // b if isinstance(e.b, Const) and b > 0 else None
        return a + b if e.op == "+" else a * b
    return None


def port_may_be_empty(p) -> bool:
    """Whether a port's run-time dims may make it empty (a range from 0): OpenCL 1.2 refuses a
    copy of 0 bytes, so its host copies such a port only where it has bytes."""
    return any(isinstance(d, Dim) and d.lo == 0 for _, d in p.dims)


def port_run_bytes(p) -> str:
    """The bytes of a graph input or output in this run, as C: its full shape's, or over its
    run-time dimensions the product of the run's sizes (the caller's array is dense at them)."""
    if not p.dims:
        return str(port_bytes(p))
    ranged = dict(p.dims)
    sizes = [ranged.get(a, d) for a, d in enumerate(p.shape)]
    fixed = int(np.prod([d for d in sizes if not isinstance(d, Dim)], dtype=np.int64)) * np.dtype(p.dtype).itemsize
    return " * ".join([f"(size_t)({c_dim(d)})" for d in sizes if isinstance(d, Dim)] + [str(fixed)])


class RunTimeDims:
    """What a run does with run-time dimensions (ir/dims.py) on the host, before and after its
    launches: `prologue` reads each dimension's size from the first input shape that names it
    (`const int64_t aotc_dim_<name> = in-><input>_shape[k];`, the name kernels take it by) and
    checks every entry of every such input's shape: a fixed dim its size, a run-time one its
    range and multiple, a repeated or derived one its agreement with the size read first. A
    failed check returns AOTC_ERR_SHAPE, setting the failure index to `first_check + k` for the
    k-th check, whose words are `messages[k]`; `epilogue` writes the outputs' shapes."""

    def __init__(self, in_ports: list[Port], out_ports: list[Port], fail, first_check: int):
        self.prologue: list[str] = []
        self.messages: list[str] = []
        self.epilogue: list[str] = []
        self.idents: list[str] = []          # the sizes' C names, sorted
        ranged_in = [p for p in in_ports if p.dims]
        ranged_out = [p for p in out_ports if p.dims]
        if not ranged_in and not ranged_out:
            return
        read: dict[str, tuple[Port, int]] = {}       # symbol -> (port, axis) it is read from
        idents: list[str] = []
        L, checks = self.prologue, []
        L.append("/* the run-time dimensions: this run's sizes, from the inputs' shapes */")
        for p in ranged_in:
            for a, d in p.dims:
                syms = d.symbols()
                if len(syms) == 1 and d == Dim.of(syms[0]) and syms[0].name not in read:
                    s = syms[0]
                    read[s.name] = (p, a)
                    var, size = dim_ident(s.name, s.multiple), f"in->{p.shape_field}[{a}]"
                    idents.append(var)
                    L.append(f"const int64_t {var} = {size}" + (f" / {s.multiple};" if s.multiple > 1 else ";"))
                    cond = f"{size} < {s.lo} || {size} > {s.hi}"
                    if s.multiple > 1:
                        cond += f" || {size} % {s.multiple} != 0"
                    checks.append((cond, f"input '{p.name}' dim {a} ({s.name}) must be in {s.spec()}"))
        for p in ranged_in:
            ranged = dict(p.dims)
            for a, size in enumerate(p.shape):
                d = ranged.get(a, size)
                if isinstance(d, Dim):
                    missing = [s.name for s in d.symbols() if s.name not in read]
                    if missing:
                        raise AotcError(f"input {p.name!r}: dim {a} is {d}, and no input has {missing[0]!r} as a "
                                        "dim of its own to read its size from",
                                        "give that dimension a name of its own (--dim) on an input that has it")
                    src, sa = read[d.symbols()[0].name]
                    if (src, sa) == (p, a):
                        continue
                    checks.append((f"in->{p.shape_field}[{a}] != {c_dim(d)}",
                                   f"input '{p.name}' dim {a} must be {d}"
                                   + (f" (the size of input '{src.name}' dim {sa})" if d == Dim.of(d.symbols()[0])
                                      else "")))
                else:
                    checks.append((f"in->{p.shape_field}[{a}] != {d}", f"input '{p.name}' dim {a} must be {d}"))
        self.idents = sorted(idents)
        for var in self.idents:
            L.append(f"(void){var};")
        for k, (cond, message) in enumerate(checks):
            L.append(f"if ({cond}) {fail(first_check + k)}")
            self.messages.append(message)
        for p in ranged_out:
            ranged = dict(p.dims)
            for a, size in enumerate(p.shape):
                self.epilogue.append(f"out->{p.shape_field}[{a}] = {c_dim(ranged.get(a, size))};")


class DeviceDims(RunTimeDims):
    """RunTimeDims in a GPU backend's invoke: a failed check records its index after the fusion
    kernels' (the names table holds its words there, `names`), and the run's sizes are kept in
    the instance (`field`, `store`), where the host program (`load`) finds them for the
    launches' grids and arguments."""

    def __init__(self, in_ports: list[Port], out_ports: list[Port], n_fusion: int):
        super().__init__(in_ports, out_ports, lambda k: f"{{ m->failed = {k}; return AOTC_ERR_SHAPE; }}", n_fusion)

    def names(self) -> list[str]:
        return [f'    "shape check: {c_string(m, 200)}",' for m in self.messages]

    def field(self) -> list[str]:
        return [f"    int64_t dims[{len(self.idents)}];         /* this run's sizes, for the host program */"] \
            if self.idents else []

    def store(self) -> list[str]:
        return [f"    m->dims[{k}] = {v};" for k, v in enumerate(self.idents)]

    def load(self) -> list[str]:
        return [line for k, v in enumerate(self.idents)
                for line in (f"    const int64_t {v} = m->dims[{k}];", f"    (void){v};")]


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
            head = loop_head(op.var, c_dim(op.extent)) if isinstance(op, HostLoop) else f"while ({test(op.test)})"
            lines.append(f"{pad}{head} {{")
            walk(op.body, depth + 1)
            lines.append(f"{pad}}}")
            held.clear()
        else:
            assert isinstance(op, Launch), op
            covered = {s for alt in op.guard or () for s, _ in alt}
            for slot in [s for s in held if s not in covered]:
                del held[slot]
            # a variant for some of the run's sizes; a grid that is empty (an empty tensor), or
            # that the run's sizes may make empty (a dim from 0), which OpenCL 1.2 and CUDA
            # refuse to launch, is left out or skipped
            tests = ([c_expr(op.when)] if op.when is not None else []) + \
                [f"{c_expr(g)} > 0" for g in op.grid if _may_be_zero(g)]
            if any(isinstance(g, int) and g == 0 for g in op.grid):
                lines.append(f"{pad}/* {op.kernel.name}: no work-items (an empty tensor) */")
            elif tests:
                lines.append(f"{pad}if ({' && '.join(tests)}) {{")
                lines.extend(pad + "    " + line for line in launch(op))
                lines.append(f"{pad}}}")
            else:
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


def _c_product(sizes, itemsize: int) -> str:
    """The bytes of sizes (ints and run-time Dims) times itemsize, as C of type size_t."""
    fixed = int(np.prod([d for d in sizes if not isinstance(d, Dim)], dtype=np.int64)) * itemsize
    return " * ".join([f"(size_t)({c_dim(d)})" for d in sizes if isinstance(d, Dim)] + [f"(size_t){fixed}"])


class CacheCopies:
    """A cache updated in place (passes/caches.py: output `o` may be input `i`'s array) on a GPU
    target, where the kernels always find the input in the output's device array (ONE_ARRAY),
    laid out as a caller's one array is: the output's largest shape along the first axis where
    the two shapes differ (the length of a cache that grows), each of `rows` rows `pitch` bytes
    apart, the input's `past_row` bytes at its start and the output's `present_row` bytes
    after this run (C expressions of the run's sizes). Without such an axis (one shape), one
    row of the whole array.

    Around a run the host copies rows: where the caller passes one array, the input's part in
    and the part the run added out (the whole where nothing grows); where two, each dense array
    to or from those rows. An instance that keeps caches (`<name>_keep_caches`) copies one array
    neither way while the caller passes it run after run, and back when told to stop keeping."""

    def __init__(self, o: int, i: int, past, present):
        self.o, self.i, self.past, self.present = o, i, past, present
        a, b = _run_sizes(past), _run_sizes(present)
        item = np.dtype(present.dtype).itemsize
        axis = next((k for k, (x, y) in enumerate(zip(a, b)) if c_dim(x) != c_dim(y)), None)
        self.grows = axis is not None
        if axis is None:
            self.rows, self.pitch = "(size_t)1", port_run_bytes(present)
            self.past_row = self.present_row = self.pitch
        else:
            self.rows = _c_product(b[:axis], 1)
            self.past_row, self.present_row = _c_product(a[axis:], item), _c_product(b[axis:], item)
            self.pitch = _c_product([present.shape[axis], *b[axis + 1:]], item)

    def same(self) -> str:
        """Whether the caller passed one array for both, as C."""
        return f"(const void *)in->{self.past.field} == (const void *)out->{self.present.field}"


def _run_sizes(p) -> list:
    ranged = dict(p.dims)
    return [ranged.get(a, d) for a, d in enumerate(p.shape)]


def cache_copies(ins, outs, shared: dict[int, int]) -> list[CacheCopies]:
    """The in-place caches (codegen/abi.py in_place) as a GPU host copies them."""
    return [CacheCopies(o, i, ins[i], outs[o]) for o, i in sorted(shared.items())]


def strerror_function(prefix: str) -> list[str]:
    """<name>_strerror: the runtime header's messages (runtime/aotc_runtime.h AOTC_STRERROR_CASES)."""
    return [f"const char *{prefix}_strerror(int status)", "{", "    switch (status) {", "    AOTC_STRERROR_CASES",
            "    default: return \"unknown status code\";", "    }", "}", ""]


def port_bytes(p) -> int:
    """The bytes of a graph input or output (codegen/abi.py Port) at its full shape."""
    return int(np.prod(p.shape, dtype=np.int64)) * np.dtype(p.dtype).itemsize


def fusion_kernel_names(program: Program) -> dict[int, str]:
    """Fusion kernel number -> "<kernel>: <its ONNX nodes>", from a device program's launches
    (their kernels are named `<fusion kernel>_<part>`): what <name>_failure reports."""
    names: dict[int, str] = {}
    for ln in program.launches():
        names.setdefault(ln.index, f"{ln.kernel.name.rsplit('_', 1)[0]}: {ln.kernel.comment.rsplit(': ', 1)[0]}")
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
    caches: list[CacheCopies] = []   # the caches updated in place (a subclass's constructor sets them)

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

    def copy_rows(self, to_device: bool, o: int, host: str, host_pitch: str, pitch: str, at: str, width: str,
                  rows: str) -> str:
        """A copy of `rows` rows of `width` bytes between the host array `host` (rows
        `host_pitch` apart) and output o's device array (`pitch` apart), each from byte `at` of
        its row in both, queued like copy_in / copy_out (a statement, through the runtime's
        aotc_cl_rows / aotc_cuda_rows: nothing copied where width or rows is 0)."""
        raise NotImplementedError

    def finish(self) -> str:
        """A statement that waits for everything queued."""
        raise NotImplementedError

    def read_count(self, j: int, offset: int) -> str:
        raise NotImplementedError

    def read_status(self) -> list[str]:
        """Read the status word back and wait for everything queued."""
        raise NotImplementedError

    def profile_body(self, prefix: str, n_launches: int) -> list[str]:
        raise NotImplementedError

    def invoke(self, prefix: str, ins, outs, program: Program, dims: DeviceDims) -> list[str]:
        draw, offsets = program.draw, count_offsets(program)
        checks = ["!m", "!in", "!out"] + [f"!in->{p.field}" for p in ins] + [f"!out->{p.field}" for p in outs]
        L = [f"{self.extern}int {prefix}_invoke({prefix}_model *m, const {prefix}_inputs *in, {prefix}_outputs *out)",
             "{", *self.invoke_locals(),
             *([f"    {self.count_type} counts[{len(offsets)}];      /* run-time sizes of outputs */"] if offsets else []),
             f"    if ({' || '.join(checks)})", "        return AOTC_ERR_NULL_ARGUMENT;", "    m->failed = -1;",
             *self.invoke_prelude()]
        L += ["    " + line for line in dims.prologue] + dims.store()
        if draw is not None:
            L += ["    m->draw = m->draws++;        /* the draw number the random ops read */", self.write_draw(draw)]
        cache_in = {c.i: c for c in self.caches}
        cache_out = {c.o: c for c in self.caches}
        for i, p in enumerate(ins):
            L += self._cache_in(cache_in[i]) if i in cache_in else [self.copy_in(i, p)] if port_bytes(p) else []
        L += self.run(prefix)
        for o, p in enumerate(outs):
            L += self._cache_out(cache_out[o]) if o in cache_out else [self.copy_out(o, p)] if port_bytes(p) else []
        L += [self.read_count(j, off) for j, off in enumerate(offsets)]
        L += self.read_status()
        L += ["    if (st[0] != AOTC_OK) {", "        m->failed = st[1];", "        return st[0];", "    }"]
        L += ["    " + line for line in bounded_epilogue(program, outs, lambda off: f"counts[{offsets.index(off)}]")]
        L += ["    " + line for line in dims.epilogue]
        L += ["    return AOTC_OK;", "}", ""]
        return L

    def _cache_in(self, c: CacheCopies) -> list[str]:
        past, present = f"in->{c.past.field}", f"out->{c.present.field}"
        return [f"    /* '{c.past.name}' is read from the device array of '{c.present.name}' (CacheCopies):",
                "       the caller's one array copied in unless this instance keeps it, two arrays between",
                "       layouts */",
                f"    if ({c.same()}) {{",
                f"        if (!m->keep || m->kept[{c.o}] != (void *){present})",
                "        " + self.copy_rows(True, c.o, past, c.pitch, c.pitch, "0", c.past_row, c.rows),
                f"        m->kept[{c.o}] = m->keep ? (void *){present} : NULL;",
                f"        m->kept_rows[{c.o}][0] = {c.rows};",
                f"        m->kept_rows[{c.o}][1] = {c.present_row};",
                f"        m->kept_rows[{c.o}][2] = {c.pitch};",
                "    } else {", f"        m->kept[{c.o}] = NULL;",
                "    " + self.copy_rows(True, c.o, past, c.past_row, c.pitch, "0", c.past_row, c.rows), "    }"]

    def _cache_out(self, c: CacheCopies) -> list[str]:
        present = f"out->{c.present.field}"
        new = (c.past_row, f"{c.present_row} - {c.past_row}") if c.grows else ("0", c.present_row)
        return [f"    if ({c.same()}) {{          /* the positions this run wrote, unless kept */",
                "        if (!m->keep)",
                "        " + self.copy_rows(False, c.o, present, c.pitch, c.pitch, *new, c.rows),
                "    } else {",
                "    " + self.copy_rows(False, c.o, present, c.present_row, c.pitch, "0", c.present_row, c.rows),
                "    }"]

    def read_from_outputs(self) -> dict:
        """Graph input value -> the output value whose device array the kernels read it from
        (the caches: CacheCopies), for a backend's launch arguments."""
        return {c.past.value: c.present.value for c in self.caches}

    def cache_fields(self) -> list[str]:
        """The instance's fields for caches kept on the device (none without caches)."""
        if not self.caches:
            return []
        n = max(c.o for c in self.caches) + 1
        return ["    int keep;                 /* <name>_keep_caches: caches stay on the device */",
                f"    void *kept[{n}];           /* per output: the caller's array the device holds */",
                f"    size_t kept_rows[{n}][3];  /* and its rows at the last run: count, bytes, pitch */"]

    def keep_caches(self, prefix: str) -> list[str]:
        L = [f"{self.extern}int {prefix}_keep_caches({prefix}_model *m, int keep)", "{",
             "    if (!m) return AOTC_ERR_NULL_ARGUMENT;"]
        if not self.caches:
            return L + ["    (void)keep;             /* no cache is updated in place */", "    return AOTC_OK;", "}", ""]
        L += ["    if (!keep) {             /* each kept cache back into its array */", *self.invoke_prelude()]
        for c in self.caches:
            k = f"m->kept_rows[{c.o}]"
            L += [f"        if (m->kept[{c.o}]) {{",
                  "        " + self.copy_rows(False, c.o, f"m->kept[{c.o}]", f"{k}[2]", f"{k}[2]", "0", f"{k}[1]",
                                              f"{k}[0]"),
                  f"            m->kept[{c.o}] = NULL;", "        }"]
        L += ["        " + self.finish(), "    }", "    m->keep = keep != 0;", "    return AOTC_OK;", "}", ""]
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
        return L + self.keep_caches(prefix)

    # ------------------------------------------------------------------ create / destroy
    def release(self, n_in: int, n_out: int) -> list[str]:
        """destroy's statements freeing the device resources of instance m (m is not NULL)."""
        raise NotImplementedError

    def or_fail_macro(self) -> str:
        """The macro create uses to fail on a device call's error."""
        raise NotImplementedError

    def create_declarations(self, prefix: str) -> list[str]:
        raise NotImplementedError

    def before_alloc(self, prefix: str) -> list[str]:
        """What create checks before allocating the instance (a device it cannot run on)."""
        return []

    def device_setup(self, prefix: str) -> list[str]:
        """The device, its queue or stream, its kernels (after the instance is allocated)."""
        raise NotImplementedError

    def upload_weights(self, prefix: str) -> tuple[list[str], list[str]]:
        """The weights to the device: (before the host copy is freed, after)."""
        raise NotImplementedError

    def alloc_workspace(self, prefix: str) -> list[str]:
        """The memory plan's workspace and the status word."""
        raise NotImplementedError

    def alloc_port(self, i: int, p, output: bool) -> list[str]:
        raise NotImplementedError

    def finish_create(self, prefix: str) -> list[str]:
        """From the last allocation to the end of create, its `fail:` path included."""
        raise NotImplementedError

    def create(self, prefix: str, external: bool, ins, outs) -> list[str]:
        L = [f"void {prefix}_destroy({prefix}_model *m)", "{", "    int i;", "    if (!m) return;",
             *self.release(len(ins), len(outs)), "    free(m);", "}", "",
             "#define AOTC_FAIL(s) do { status = (s); goto fail; } while (0)", self.or_fail_macro(), "",
             f"{self.extern}int {prefix}_create_with_options(const char *weights_path, const aotc_options *options, "
             f"{prefix}_model **model)",
             "{", *self.create_declarations(prefix),
             "    if (!model) return AOTC_ERR_NULL_ARGUMENT;", "    *model = NULL;",
             "    if (options && options->threads > 1) return AOTC_ERR_BAD_OPTION;   /* the device runs it all */",
             *self.before_alloc(prefix),
             f"    m = ({prefix}_model *)calloc(1, sizeof *m);", "    if (!m) return AOTC_ERR_OUT_OF_MEMORY;",
             "    m->failed = -1;", *self.device_setup(prefix)]
        if external:
            L += [read_weights_call(prefix, "weights_raw", "weights"), "    if (status != AOTC_OK) AOTC_FAIL(status);"]
        else:
            L += ["    (void)weights_path;", f"    weights = {prefix}_weights_data;"]
        before, after = self.upload_weights(prefix)
        L += before + ["    free(weights_raw);", "    weights_raw = NULL;"] + after
        L += self.alloc_workspace(prefix)
        read_in_place = {c.i for c in self.caches}      # (from their outputs' arrays)
        for i, p in enumerate(ins):
            L += self.alloc_port(i, p, False) if i not in read_in_place else []
        for i, p in enumerate(outs):
            L += self.alloc_port(i, p, True)
        L += self.finish_create(prefix) + ["}", "",
              f"{self.extern}int {prefix}_create(const char *weights_path, {prefix}_model **model)", "{",
              f"    return {prefix}_create_with_options(weights_path, NULL, model);", "}", ""]
        return L
