"""Kernel IR as C99, for CPU targets.

What C needs beyond the shared C-style printer:
  * parallel loops are outlined: the loop body becomes a task function over a range of the
    loop's iterations, its free variables travel in an args struct, and the kernel hands it
    to the model's thread pool (`aotc_parallel_for`, runtime/aotc_threads.h);
  * a Gemm is a call of the runtime's packed GEMM (`aotc_sgemm`, runtime/aotc_gemm_packed.h)
    whose epilogue, when it has one, is outlined the same way and called on every finished
    tile while the tile is still in cache;
  * vectorized / unrolled loops get the pragmas of runtime/aotc_runtime.h;
  * float16 / bfloat16 buffers are stored as uint16_t and converted at every access;
  * float32 exp, tanh and erf are runtime/aotc_math.h's, which loops vectorize (libm's are
    calls, one element at a time).
"""
from __future__ import annotations

import math
import re
from typing import Optional

import numpy as np

from ..abi import ctype
from ...kernel.ir import (PARALLEL, UNROLLED, VECTORIZED, BinOp, Buffer, BufPtr, Const, Fail, Gemm, Kernel, Load, Loop,
                          Select, Stmt, Store, Var, free_variables, same_expr, walk_stmts, wrap)
from ..cstyle import SMALL_TYPE_CONVERSIONS, CStylePrinter, PrintError


def uses_pool(k: Kernel) -> bool:
    """Does the kernel hand work to the thread pool (parallel loops or parallel GEMMs)?"""
    return any((isinstance(s, Loop) and s.kind == PARALLEL) or (isinstance(s, Gemm) and s.parallel)
               for s in walk_stmts(k.body))


# float32 math with a vectorizable version in runtime/aotc_math.h
VECTOR_MATH = {"exp": "aotc_expf", "tanh": "aotc_tanhf", "erf": "aotc_erff"}

# A select that is a maximum or a minimum with a constant, `x < c ? c : x` (Relu, Clip's
# bounds, HardSigmoid's and HardSwish's clamp), is what x86's MAXPS / MINPS compute, NaN and
# signed zeros included, and GCC emits a select of vectors of that form as one of them. With
# both bounds of a clamp constant, though, it first merges the two selects (knowing 0 < 6, it
# reads `(y < 0 ? 0 : y) > 6` as `y > 6`) into one select under a mix of comparisons: on
# AVX-512 seven instructions a vector, on mask registers, where two would do (a ReLU6 epilogue
# took 30% of a 1x1 convolution's tile at 16 input channels; MobileNetV2 7% of its run). So the
# C printer reads each such constant from a local whose value the compiler cannot see
# (runtime/aotc_math.h `aotc_opaque_f32`, once at the top of the function that uses it).
_MINMAX_CMP = ("<", ">", "<=", ">=")
_OPAQUE_FN = {np.dtype(np.float32): ("f32", "aotc_opaque_f32"), np.dtype(np.float64): ("f64", "aotc_opaque_f64")}


# a Gemm operand read from a convolution's input as its im2col matrix (A transposed, or B): the
# call's aim2col / bim2col, which aotc_gemm_packed.h compiles in for a source defining
# AOTC_GEMM_IM2COL (emitter.py)
IM2COL_LAYOUTS = {"a": "im2col_t", "b": "im2col"}


def reads_im2col(s: Gemm) -> bool:
    return s.a.layout == IM2COL_LAYOUTS["a"] or s.b.layout == IM2COL_LAYOUTS["b"]


def minmax_bound(e: Select) -> Optional[Const]:
    """The constant c of a select that is max(x, c) or min(x, c) (`x < c ? c : x` and the other
    orders: the arms are the comparison's two operands); None for any other select."""
    c = e.cond
    if not (isinstance(c, BinOp) and c.op in _MINMAX_CMP and e.dtype in _OPAQUE_FN):
        return None
    bound = c.b if isinstance(c.b, Const) else c.a if isinstance(c.a, Const) else None
    if bound is None or bound.dtype != e.dtype or not math.isfinite(bound.value):
        return None
    arms = (same_expr(e.a, c.a) and same_expr(e.b, c.b)) or (same_expr(e.a, c.b) and same_expr(e.b, c.a))
    return bound if arms else None


class CPrinter(CStylePrinter):
    language = "C99"

    def __init__(self):
        super().__init__()
        self._task = 0
        self._in_task: list[str] = []       # names of the args structs of the tasks being printed
        self._opaque: list[dict[str, str]] = []   # per function being printed: hidden bound -> its declaration

    # ----------------------------------------------------------------- types and accesses
    # 16-bit floats are uint16_t bits, 8- and 4-bit floats and 4- and 2-bit integers uint8_t
    # bits (C has no such types): runtime/aotc_support.h converts
    narrow_conversions = {"float16": ("aotc_half_to_float", "aotc_half_from_float"),
                          "bfloat16": ("aotc_bf16_to_float", "aotc_bf16_from_float"), **SMALL_TYPE_CONVERSIONS}

    def type_name(self, dt) -> str:
        return ctype(dt)

    def math_name(self, fn: str, dt) -> str:
        if np.dtype(dt) == np.float32 and fn in VECTOR_MATH:
            return VECTOR_MATH[fn]
        return super().math_name(fn, dt)

    def sigmoid(self, x: str, dt) -> str:
        if np.dtype(dt) == np.float32:
            return f"aotc_sigmoidf({x})"
        return super().sigmoid(x, dt)

    # ----------------------------------------------------------------- hidden bounds
    def select(self, e: Select) -> str:
        bound = minmax_bound(e) if self._opaque else None
        if bound is None:
            return super().select(e)
        literal = self.literal(bound.value, bound.dtype)
        kind, fn = _OPAQUE_FN[bound.dtype]
        digits = literal.strip("()").rstrip("f").replace("-", "m").replace(".", "p").replace("+", "")
        if not re.fullmatch(r"[0-9a-z]+", digits):
            return super().select(e)
        name = f"aotc_{kind}_{digits}"
        self._opaque[-1][name] = f"const {self.type_name(bound.dtype)} {name} = {fn}({literal});"
        hidden = Var(name, bound.dtype)

        def hide(x):
            return hidden if same_expr(x, bound) else x
        c = e.cond
        return super().select(Select(BinOp(c.op, hide(c.a), hide(c.b), c.dtype), hide(e.a), hide(e.b), e.dtype))

    def begin_function(self) -> None:
        self._opaque.append({})

    def end_function(self, body: list[str]) -> list[str]:
        hidden = self._opaque.pop()
        used = [n for n in sorted(hidden) if any(re.search(rf"\b{n}\b", line) for line in body)]
        if not used:
            return []
        return [f"{self.indent}/* bounds of max / min selects, their values hidden from the C compiler (aotc_math.h) */"] + \
            [self.indent + hidden[n] for n in used]

    def param_decl(self, buf: Buffer) -> str:
        q = "const " if buf.role == "in" else ""
        r = "" if buf.name in self.kernel_.aliased else f"{self.restrict} "
        return f"{q}{self.type_name(buf.dtype)} *{r}{buf.name}"

    def field_decl(self, buf: Buffer) -> str:
        q = "const " if buf.role == "in" else ""
        return f"{q}{self.type_name(buf.dtype)} *{buf.name}"

    def kernel_header(self, k: Kernel, params: list[str]) -> list[str]:
        params = params + [f"int64_t {v.name}" for v in k.size_vars]      # run-time sizes
        if uses_pool(k):
            params = params + ["aotc_pool *pool"]
        ret = "int" if k.can_fail else "void"
        return [f"static {ret} {k.name}({', '.join(params) or 'void'})"]

    def kernel_epilogue(self, k: Kernel) -> None:
        if k.can_fail:
            self.out(f"{self.indent}return AOTC_OK;")

    def loop_pragma(self, s: Loop) -> str:
        if s.kind == VECTORIZED and s.reductions:
            clauses = " ".join(f"reduction({op}:{name})" for name, op in s.reductions)
            return f"AOTC_VECTORIZE_REDUCTION({clauses})"
        if s.kind == VECTORIZED:
            return "AOTC_VECTORIZE"
        if s.kind == UNROLLED:
            return "AOTC_UNROLL"
        return ""

    def fail(self, s: Fail) -> list[str]:
        why = f"  /* {s.detail} */" if s.detail else ""
        if self._in_task:
            return [f"aotc_set_status(&aotc_args->status, {s.status});{why}", "return;"]
        return [f"return {s.status};{why}"]

    # ----------------------------------------------------------------- parallel loops
    def loop_open(self, s: Loop, ind: int) -> None:
        if s.kind != PARALLEL:
            return super().loop_open(s, ind)
        self._parallel(s, ind)

    def loop_close(self, s: Loop, ind: int) -> None:
        if s.kind != PARALLEL:
            super().loop_close(s, ind)

    def stmt(self, s: Stmt, ind: int) -> None:
        if isinstance(s, Loop) and s.kind == PARALLEL:
            self._parallel(s, ind)
            return
        super().stmt(s, ind)

    def _outline(self, stem: str, body_stmts: list[Stmt], bound: list[Var], signature: str, prologue: list[str],
                 print_body, can_fail: bool, task: bool = False) -> tuple[str, list[str], list[str]]:
        """Print a helper function for `body_stmts` (whose variables `bound` are defined by the
        helper itself); returns (args struct name, initializer values) for the call site, and the
        lines that unpack the struct (for another helper taking the same struct).
        `task`: a parallel loop's task, which takes the copy of each per-thread buffer that
        belongs to the thread running it (`aotc_thread`). The helper's own names (its
        parameters, `aotc_args`) have the runtime's aotc_ prefix, which no IR name has."""
        bufs, vars_ = free_variables(body_stmts, bound)
        name = f"{self.kernel_.name}_{stem}"
        struct = f"{name}_args"
        fields = [f"    {self.field_decl(b)};" for b in bufs]
        fields += [f"    {self.type_name(v.dtype)} {v.name};" for v in vars_]
        if can_fail:
            fields.append("    int status;")
        unpack = [f"    {self.param_decl(b)} = aotc_args->{b.name}" +
                  (f" + (int64_t)aotc_thread * {b.thread_stride};" if task and b.per_thread else ";") for b in bufs]
        unpack += [f"    const {self.type_name(v.dtype)} {v.name} = aotc_args->{v.name};" for v in vars_]
        body = self._function_body(print_body, struct)
        text = ["typedef struct {"] + (fields or ["    int unused;"]) + [f"}} {struct};", "",
                f"static void {name}({signature})", "{",
                f"    {struct} *aotc_args = ({struct} *)aotc_task;"] + unpack + prologue + body + ["}"]
        self.helpers.append("\n".join(text))
        init = [b.name for b in bufs] + [v.name for v in vars_] + (["0"] if can_fail else [])
        return struct, init, unpack

    def _function_body(self, print_body, struct: str) -> list[str]:
        """The lines `print_body()` prints as a helper function's body, in the task whose args
        struct is `struct`, with the declarations it needs at their top."""
        self._in_task.append(struct)
        self.begin_function()
        try:
            body = self.capture(print_body)
        finally:
            self._in_task.pop()
            top = self.end_function(body)
        return top + body

    def _parallel(self, s: Loop, ind: int) -> None:
        """A parallel loop: its body as a task over [begin, end) of the iterations."""
        pad = self.indent * ind
        self._task += 1
        task = f"{self.kernel_.name}_task{self._task}"      # before the body's own helpers
        can_fail = any(isinstance(x, Fail) for x in walk_stmts(s.body))
        v = s.var

        def body():
            self.out(f"    for ({self.type_name(v.dtype)} {v.name} = aotc_begin; {v.name} < aotc_end; ++{v.name}) {{")
            self.stmts(s.body, 2)
            self.out("    }")

        struct, init, _ = self._outline(
            task[len(self.kernel_.name) + 1:], s.body, [v], "void *aotc_task, int64_t aotc_begin, int64_t aotc_end, int aotc_thread",
            ["    (void)aotc_thread;"], body, can_fail, task=True)
        start = self.expr(s.start)
        if start != "0":
            raise PrintError(f"parallel loop {v.name!r} must start at 0 (the schedule normalizes it)")
        self.out(f"{pad}{{")
        self.out(f"{pad}    {struct} args = {{ {', '.join(init)} }};")
        pool = "pool" if s.when is None else f"{self.expr(s.when)} ? pool : NULL"    # (enough work at this size)
        self.out(f"{pad}    aotc_parallel_for({pool}, {self.expr(s.extent)}, {task}, &args);")
        if can_fail:
            self.out(f"{pad}    if (args.status != AOTC_OK)")
            self.out(f"{pad}        {self._propagate('args.status')}")
        self.out(f"{pad}}}")

    def _propagate(self, status: str) -> str:
        if self._in_task:
            return f"{{ aotc_set_status(&aotc_args->status, {status}); return; }}"
        return f"return {status};"

    # ----------------------------------------------------------------- GEMM
    def gemm(self, s: Gemm, ind: int) -> None:
        """A call of the runtime's float GEMM (aotc_sgemm) or, for an integer Gemm the schedule
        kept as one (8-bit operands, its constant one packed), of aotc_igemm."""
        pad = self.indent * ind
        A, B, C = s.a, s.b, s.c
        def num(x) -> str:               # an int, or an expression of run-time sizes (or a Dim of them)
            return str(x) if isinstance(x, int) else self.expr(wrap(x))

        fields = [("M", num(s.M)), ("N", num(s.N)), ("K", num(s.K)),
                  ("A", self.expr(_ptr(A))), ("rsa", num(A.rs)), ("csa", num(A.cs)),
                  ("B", self.expr(_ptr(B))), ("rsb", num(B.rs)), ("csb", num(B.cs)),
                  ("C", self.expr(_ptr(C))), ("rsc", num(C.rs)), ("csc", num(C.cs)),
                  ("accumulate", "1" if s.accumulate else "0"),
                  ("split", f"AOTC_GEMM_SPLIT_{s.split.upper()}" if s.parallel else "AOTC_GEMM_SPLIT_NONE")]
        for name, m in (("A", A), ("B", B)):          # a constant stored as bfloat16 tiles (the option bf16)
            if m.bf16:
                at = [k for k, _ in fields].index(name)
                fields[at] = (name, "NULL")
                fields.append((f"{name}h", self.expr(_ptr(m))))
        if s.integer:
            if s.a_zero is not None or s.b_zero is not None or not (A.packed or B.packed):
                raise PrintError("an integer Gemm reaches the C printer with its zero points folded and one "
                                 "operand packed (schedule/cpu.py), or as loops")
            fields.insert(9, ("a_unsigned", "1" if A.buf.value_dtype.kind == "u" else "0"))
        if s.conv_broadcast:
            fields.append(("conv_broadcast", "1"))
        if s.work is not None:
            # per thread: a split GEMM's thread t packs at work + t * work_floats; in a parallel
            # loop's task, `work` is already the task's thread's part (_outline). The integer
            # GEMM packs bytes into the same float scratch.
            if s.integer:
                fields += [("work", f"(uint8_t *){s.work.name}"), ("work_bytes", str(4 * s.work.thread_stride))]
            else:
                fields += [("work", s.work.name), ("work_floats", str(s.work.thread_stride))]
        view, role = None, None
        for m, at, name, role_text in ((A, 3, "a", "A: the transposed"), (B, 6, "b", "B: the")):
            if m.layout == IM2COL_LAYOUTS[name]:       # a convolution's im2col matrix, packed from its input
                w = m.window
                view = [("x", self.expr(_ptr(m)))] + [
                    (k, num(v)) for k, v in zip(("H", "W", "KH", "KW", "SH", "SW", "DH", "DW", "PH", "PW", "OH", "OW"),
                                                (*w.size, *w.kernel, *w.strides, *w.dilations, *w.pads, *w.out))]
                fields[at:at + 3] = [(name.upper(), "NULL"), (f"rs{name}", "0"), (f"cs{name}", "0"),
                                     (f"{name}im2col", "&im2col")]
                role = role_text
        struct = None
        if s.epilogue:
            self._task += 1
            stem = f"epilogue{self._task}"
            struct, init, unpack = self._epilogue(s, stem)
            fields += [("epilogue", f"{self.kernel_.name}_{stem}"), ("epilogue_args", "&epilogue")]
            if s.tile_epilogue:
                make = self._integer_tile_epilogue if s.integer else self._tile_epilogue
                fields.append(("tile", make(s, self._task, struct, unpack)))
        self.out(f"{pad}{{")
        if view:
            if s.conv_broadcast:
                self.out(f"{pad}    /* the convolution of {view[0][1]} (its im2col matrix, B), summed with the output channels "
                         "in vector lanes, each input element broadcast to them (aotc_conv_broadcast) */")
            else:
                self.out(f"{pad}    /* {role} im2col matrix of {view[0][1]}, packed from it block by block */")
            self.out(f"{pad}    const aotc_im2col im2col = {{ {', '.join(f'.{k} = {v}' for k, v in view)} }};")
        if struct:
            self.out(f"{pad}    {struct} epilogue = {{ {', '.join(init)} }};")
        text = ", ".join(f".{k} = {v}" for k, v in fields)
        kind = "igemm" if s.integer else "sgemm"
        self.out(f"{pad}    const aotc_{kind}_call gemm = {{ {text} }};")
        pool = ("pool" if s.when is None else f"{self.expr(s.when)} ? pool : NULL") if s.parallel else "NULL"
        self.out(f"{pad}    aotc_{kind}({pool}, &gemm);")
        self.out(f"{pad}}}")

    def _epilogue(self, s: Gemm, stem: str):
        C = s.c
        value_at = C.at(s.i, s.j)

        def body():
            i, j = s.i.name, s.j.name
            self.out(f"    for (int64_t {i} = aotc_i0; {i} < aotc_i1; ++{i}) {{")
            self.stmts(s.row_epilogue, 2)
            self.out("        AOTC_VECTORIZE       /* elements are independent (their tile is final) */")
            self.out(f"        for (int64_t {j} = aotc_j0; {j} < aotc_j1; ++{j}) {{")
            value = self.load(C.buf, self.expr(value_at))
            self.out(f"            const {self.type_name(s.value.dtype)} {s.value.name} = {value};")
            self.stmts(s.epilogue, 3)
            self.out("        }")
            self.out("    }")

        reads_c = [Store(C.buf, value_at, Load(C.buf, value_at))]     # the epilogue reads C too
        return self._outline(stem, s.row_epilogue + s.epilogue + reads_c, [s.i, s.j, s.value],
                             "void *aotc_task, int64_t aotc_i0, int64_t aotc_i1, int64_t aotc_j0, int64_t aotc_j1", [],
                             body, False)

    def _tile_epilogue(self, s: Gemm, n: int, struct: str, unpack: list[str]) -> str:
        """The GEMM's whole micro-tile with the epilogue run on its sums (aotc_whole_tile_fn,
        schedule/gemm_cpu.py epilogue_in_tile): the runtime's aotc_sgemm_tile_sums, then the
        epilogue over the lanes of one vector of sums at a time, a loop the compiler turns into
        vector operations; only the epilogue stores. The lanes are a row's consecutive columns
        where C's columns are contiguous, else (a product computed transposed) a column's
        consecutive rows, the tile transposed by aotc_sgemm_tile_columns. It takes the args
        struct of epilogue n (`struct`, unpacked by `unpack`), which the edge tiles run."""
        name = f"{self.kernel_.name}_tile{n}"
        C, i, j, acc = s.c, s.i, s.j, s.value
        by_rows = C.cs == 1
        # the lanes walk `inner` from its first value `first`; `outer` is fixed per vector
        outer, inner = (i, j) if by_rows else (j, i)
        first = Var("aotc_first", inner.dtype)

        def body():
            self.out("    aotc_tile_vec aotc_sums[AOTC_GEMM_MR][AOTC_TILE_V];")
            self.out(f"    aotc_sgemm_prefetch_c(aotc_c, {self.expr(wrap(C.rs))}, {self.expr(wrap(C.cs))}, "
                     "AOTC_GEMM_MR, AOTC_GEMM_NR);")
            self.out("    aotc_sgemm_tile_sums(AOTC_GEMM_MR, aotc_kc, aotc_a, aotc_b, aotc_sums, aotc_next);")
            if by_rows:          # for each row r, each vector v of its columns
                self.out("    AOTC_UNROLL_FULLY")
                self.out("    for (int aotc_r = 0; aotc_r < AOTC_GEMM_MR; ++aotc_r) {")
                self.out(f"        const {self.type_name(i.dtype)} {i.name} = aotc_i0 + aotc_r;")
                self.out(f"        (void){i.name};")
                self.stmts(s.row_epilogue, 2)
                self.out("        AOTC_UNROLL_FULLY")
                self.out("        for (int aotc_v = 0; aotc_v < AOTC_TILE_V; ++aotc_v) {")
                self.out(f"            const {self.type_name(j.dtype)} {first.name} = aotc_j0 + aotc_v * AOTC_TILE_VW;")
                vec, load, lanes, width, ind = "aotc_sums[aotc_r][aotc_v]", "aotc_tile_load", "AOTC_TILE_LANES", \
                    "AOTC_TILE_VW", 3
            else:                # the tile's columns, each a vector of its MR rows
                self.out("    aotc_tile_col aotc_cols[AOTC_GEMM_NR];")
                self.out("    aotc_sgemm_tile_columns(aotc_sums, aotc_cols);")
                self.out("    AOTC_UNROLL_FULLY")
                self.out("    for (int aotc_q = 0; aotc_q < AOTC_GEMM_NR; ++aotc_q) {")
                self.out(f"        const {self.type_name(j.dtype)} {j.name} = aotc_j0 + aotc_q;")
                self.out(f"        (void){j.name};")
                self.out(f"        const {self.type_name(i.dtype)} {first.name} = aotc_i0;")
                vec, load, lanes, width, ind = "aotc_cols[aotc_q]", "aotc_tile_load_col", "AOTC_TILE_COLUMN_LANES", \
                    "AOTC_GEMM_MR", 2
            pad = self.indent * ind
            old = self.expr(C.at(*((outer, first) if by_rows else (first, outer))))
            self.out(f"{pad}const {'aotc_tile_vec' if by_rows else 'aotc_tile_col'} aotc_sum = aotc_accumulate")
            self.out(f"{pad}    ? {load}(&{C.buf.name}[{old}]) + {vec} : {vec};")
            self.out(f"{pad}{lanes}       /* the lanes: consecutive {'columns' if by_rows else 'rows'} of C */")
            self.out(f"{pad}for (int aotc_l = 0; aotc_l < {width}; ++aotc_l) {{")
            self.out(f"{pad}    const {self.type_name(inner.dtype)} {inner.name} = {first.name} + aotc_l;")
            self.out(f"{pad}    const float {acc.name} = aotc_sum[aotc_l];")
            self.out(f"{pad}    (void){inner.name};")
            if not by_rows:
                self.stmts(s.row_epilogue, ind + 1)
            self.stmts(s.epilogue, ind + 1)
            for level in range(ind - 1, -1, -1):
                self.out(self.indent * (level + 1) + "}")

        lines = self._function_body(body, struct)
        guard = "AOTC_TILE_EPILOGUES" if by_rows else "AOTC_TILE_COLUMN_EPILOGUES"
        text = [f"#if {guard}",
                f"/* a whole tile of the GEMM, its epilogue run on the sums (edge tiles: the runtime's tile, "
                f"then {self.kernel_.name}_epilogue{n}) */",
                f"AOTC_NOINLINE static void {name}(void *aotc_task, int64_t aotc_kc, const float *aotc_a, "
                "const float *aotc_b, float *aotc_c, int64_t aotc_i0, int64_t aotc_j0, int aotc_accumulate, "
                "aotc_ahead aotc_next)",
                "{",
                f"    {struct} *aotc_args = ({struct} *)aotc_task;"] + unpack + lines + ["}", "#endif"]
        self.helpers.append("\n".join(text))
        return f"{'AOTC_WHOLE_TILE' if by_rows else 'AOTC_WHOLE_TILE_COLUMNS'}({name})"


    def _integer_tile_epilogue(self, s: Gemm, n: int, struct: str, unpack: list[str]) -> str:
        """An integer GEMM's whole micro-tile with the epilogue run on its sums
        (aotc_whole_itile_fn, runtime/aotc_igemm.h): the runtime's aotc_igemm_tile_sums into a
        local MR x NR array, then the epilogue over each row's lanes (consecutive columns of
        C), a loop the compiler turns into vector operations. C itself is not stored (nothing
        reads it after the epilogue: schedule/cpu.py _c_dead) but for the earlier K blocks'
        sums it holds, which an accumulating tile adds."""
        name = f"{self.kernel_.name}_tile{n}"
        C, i, j, acc = s.c, s.i, s.j, s.value
        a_unsigned = "1" if s.a.buf.value_dtype.kind == "u" else "0"

        def body():
            self.out(f"    (void){C.buf.name};       /* (C: the edge tiles' and the other K blocks') */")
            self.out("    int32_t aotc_sums[AOTC_GEMM_MR][AOTC_GEMM_NR];")
            self.out(f"    aotc_igemm_tile_sums({a_unsigned}, aotc_kind, aotc_quads, aotc_a, aotc_b, aotc_sums);")
            # (the earlier K blocks' sums added first: a load under a condition in the lane loop
            # keeps GCC from vectorizing it)
            self.out("    if (aotc_accumulate)")
            self.out("        for (int aotc_r = 0; aotc_r < AOTC_GEMM_MR; ++aotc_r)")
            self.out("            for (int aotc_l = 0; aotc_l < AOTC_GEMM_NR; ++aotc_l)")
            self.out(f"                aotc_sums[aotc_r][aotc_l] += aotc_c[aotc_r * {self.expr(wrap(C.rs))} + aotc_l];")
            self.out("    for (int aotc_r = 0; aotc_r < AOTC_GEMM_MR; ++aotc_r) {")
            self.out(f"        const {self.type_name(i.dtype)} {i.name} = aotc_i0 + aotc_r;")
            self.out(f"        (void){i.name};")
            self.stmts(s.row_epilogue, 2)
            self.out("        AOTC_ITILE_LANES     /* the lanes: consecutive columns of C */")
            self.out("        for (int aotc_l = 0; aotc_l < AOTC_GEMM_NR; ++aotc_l) {")
            self.out(f"            const {self.type_name(j.dtype)} {j.name} = aotc_j0 + aotc_l;")
            self.out(f"            const {self.type_name(acc.dtype)} {acc.name} = aotc_sums[aotc_r][aotc_l];")
            self.out(f"            (void){j.name};")
            self.stmts(s.epilogue, 3)
            self.out("        }")
            self.out("    }")

        lines = self._function_body(body, struct)
        text = ["#if AOTC_ITILE_EPILOGUES",
                f"/* a whole tile of the integer GEMM, its epilogue run on the sums (edge tiles: the runtime's "
                f"tile, then {self.kernel_.name}_epilogue{n}) */",
                f"AOTC_NOINLINE static void {name}(void *aotc_task, int aotc_kind, int64_t aotc_quads, "
                "const uint8_t *aotc_a, const uint8_t *aotc_b, int32_t *aotc_c, int64_t aotc_i0, int64_t aotc_j0, "
                "int aotc_accumulate)",
                "{",
                f"    {struct} *aotc_args = ({struct} *)aotc_task;"] + unpack + lines + ["}", "#endif"]
        self.helpers.append("\n".join(text))
        return f"AOTC_WHOLE_ITILE({name})"


def _ptr(m) -> BufPtr:
    return BufPtr(m.buf, m.offset)
