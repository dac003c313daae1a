"""Lower fusion groups to kernels (kernel IR), recording which graph values each reads and writes."""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Optional

import numpy as np

from ..fusion.groups import Group, group_shapes
from ..ir import dtypes
from ..ir.dims import RunTimeDim
from ..ir.graph import Graph, Value
from ..ir.internal import CARRY
from ..kernel.context import LowerCtx
from ..kernel.ir import (SPATIAL, Buffer, Builder, Const, Decl, Expr, Fail, Finished, Gemm, Kernel, Load, Loop, Rewriter,
                         Store, Var, cast, const, stmt_exprs, walk_buffers, walk_expr, walk_stmts, wrap)
from ..kernel.names import c_ident
from ..kernel.space import IndexSpace
from ..ops import registry
from ..passes.branches import guard_values


@dataclass
class KernelStep:
    """A kernel and the graph values its parameters are bound to; on a GPU target, after the
    schedule, also its device program: the launches (schedule/gpu.py DeviceLaunch) and host
    loops (DeviceLoop) that run it, which the host program binds to the memory plan."""
    kernel: Kernel
    group: Group
    binds: dict[str, str]                    # kernel param name -> graph value name
    device: Optional[list] = None            # the GPU schedule's launches and host loops

    @property
    def scratch(self) -> list[Buffer]:
        return self.kernel.scratch

    @property
    def reads(self) -> list[str]:
        return [v for p, v in self.binds.items() if self._param(p).role == "in"]

    @property
    def writes(self) -> list[str]:
        return [v for p, v in self.binds.items() if self._param(p).role == "out"]

    def _param(self, name: str) -> Buffer:
        for p in self.kernel.params:
            if p.name == name:
                return p
        raise KeyError(name)

    def param_for(self, v: Value) -> Buffer:
        """The input parameter bound to graph value `v`, added when the kernel has none (a
        constant the schedule made, say)."""
        for p in self.kernel.params:
            if self.binds.get(p.name) == v.name and p.role == "in":
                return p
        buf = value_buffer(self.kernel.fresh(c_ident(v.name)), v, tuple(v.shape), "in")
        n_in = sum(1 for p in self.kernel.params if p.role == "in")
        self.kernel.params.insert(n_in, buf)
        self.binds[buf.name] = v.name
        return buf

    def drop_unused_params(self) -> None:
        """Inputs the body no longer reads (a weight replaced by its packed copy) leave the kernel."""
        used = {id(b) for b in walk_buffers(self.kernel.body)}
        keep = [p for p in self.kernel.params if p.role != "in" or id(p) in used]
        for p in self.kernel.params:
            if p not in keep:
                del self.binds[p.name]
        self.kernel.params = keep


class _Params:
    """Names kernel parameters after the graph values they hold, unique within a kernel."""

    def __init__(self, b: Builder):
        self.by_value: dict[str, Buffer] = {}
        self.b = b

    def get(self, v: Value, role: str, shape=None, name: Optional[str] = None) -> Buffer:
        """The parameter holding value v (seen under `shape` when given: a value of the same size
        that the kernel writes under another shape, the anchor's result into its chain's output),
        named after v, or after `name` when given."""
        buf = self.by_value.get(v.name)
        if buf is not None:
            return buf
        name = self.b.fresh(c_ident(name or v.name))
        buf = value_buffer(name, v, tuple(v.shape if shape is None else shape), role)
        self.by_value[v.name] = buf
        return buf


def lower_groups(g: Graph, groups: list[Group]) -> list[KernelStep]:
    """Every fusion group as a kernel that says what to compute (no target decisions)."""
    consumers = g.consumers()
    # what the host program reads: run-time sizes (after the run), If conditions, the state of
    # loops it runs (their flags, and what their ends copy over it for the next iteration)
    host_reads = set(g.counts())
    for grp in groups:
        host_reads.update(guard_values(grp.guard))
        for n in grp.nodes:
            if n.op_type == CARRY:
                host_reads.update(o for o in n.outputs if o)
    steps = []
    for grp in groups:
        if grp.view:
            continue
        steps.append(_lower_group(g, grp, consumers, len(steps), host_reads))
    return steps


def _view_sources(g: Graph) -> dict[str, str]:
    """View output -> its source, for every Reshape-family node."""
    return {n.outputs[0]: n.inputs[0] for n in g.nodes if registry.get(n.op_type).view}


def _stored(g: Graph, grp: Group, consumers, host_reads: set) -> list[str]:
    """Values made in the group that something outside it needs: a graph output, a value the
    host reads (`host_reads`: run-time sizes, conditions, loop state), a node of another
    kernel, or a view that one of those reads."""
    inside = {id(n) for n in grp.nodes}

    def needed(v: str) -> bool:
        if v in g.outputs or v in host_reads:
            return True
        for c in consumers.get(v, []):
            if id(c) in inside:
                continue
            if not registry.get(c.op_type).view or needed(c.outputs[0]):
                return True
        return False

    return [o for n in grp.nodes for o in n.outputs if o and needed(o)]


def _lower_group(g: Graph, grp: Group, consumers, k: int, host_reads: set) -> KernelStep:
    stored = _stored(g, grp, consumers, host_reads)
    b = Builder()
    params = _Params(b)
    scratch: list[Buffer] = []
    anchor_buf: dict[str, Buffer] = {}      # value -> buffer holding it inside this kernel

    if grp.anchor is not None:
        node = grp.anchor
        op = registry.get(node.op_type)
        ins = [params.get(g.values[i], "in") if i else None for i in node.inputs]
        outs = []
        for o in node.outputs:
            if not o:
                outs.append(None)
                continue
            v = g.values[o]
            if o in stored:
                buf = params.get(v, "out")
            else:
                # an internal value: the anchor writes it into the chain's stored output
                # when that has the same type, else into scratch
                home = _chain_home(g, grp, stored, v)
                if home is not None:
                    buf = params.get(g.values[home], "out", shape=v.shape)
                else:
                    buf = value_buffer(b.fresh(c_ident(o)), v, tuple(v.shape), "scratch")
                    scratch.append(buf)
            anchor_buf[o] = buf
            outs.append(buf)
        if op.lower is None:
            from ..errors import UnsupportedError
            raise UnsupportedError([f"{node.op_type} node {node.name!r}: no code generation for this case "
                                    "(its inputs were expected to be compile-time constants)"],
                                   "bind the inputs that feed it with --const or --shape")
        ctx = LowerCtx(node, g, ins, outs, b, lambda v, name: params.get(v, "in", name=name))
        try:
            op.lower(node, ctx)
        except RunTimeDim as e:          # name the node whose code needed a fixed size
            if f"node {node.name!r}" in e.message:
                raise
            raise RunTimeDim(f"{node.op_type} node {node.name!r}: {e.message}", e.hint) from e
        scratch.extend(ctx.scratch_buffers)

    if grp.chain:
        chain = _Chain(g, grp, stored, params, anchor_buf, _view_sources(g))
        gemms = chain.gemm_producers(b.body)
        if gemms is not None:
            b.body[:] = chain.into_gemms(b.body, gemms, b)
        elif chain.positioned_producers(b.body):
            b.body[:] = _finish_gemms(chain.into_stores(b.body, b))
        elif chain.finished_producers(b.body):
            b.body[:] = _finish_gemms(chain.into_finished(b.body, b))
        else:
            b.body[:] = _finish_gemms(b.body)
            chain.loop_nest(b)
    else:
        b.body[:] = _finish_gemms(b.body)
    b.body[:] = _DropFinished().stmts(b.body)          # (the parts no chain took)

    label = "_".join(n.op_type.lower().replace(".", "_") for n in grp.nodes)
    name = f"k{k:03d}_{label}"[:60]
    names = ", ".join(f"{n.op_type} '{n.name}'" if n.name else n.op_type for n in grp.nodes)
    used = walk_buffers(b.body)
    ordered = [p for p in used if p.role == "in"] + [p for p in used if p.role == "out"]
    for p in params.by_value.values():          # outputs always appear, even if unused
        if p.role == "out" and p not in ordered:
            ordered.append(p)
    scratch_used = [p for p in used if p.role == "scratch"]
    kern = Kernel(name, names, ordered, b.body, scratch_used, names_used=b.names)
    binds = {p.name: v for v, p in params.by_value.items() if p in ordered}
    return KernelStep(kern, grp, binds)


def value_buffer(name: str, v: Value, shape: tuple, role: str) -> Buffer:
    """The buffer holding graph value v: values of a narrow type (a graph's inputs and outputs:
    16-, 8- and 4-bit floats, 4- and 2-bit integers) are stored in their type and computed in
    a wider one."""
    return Buffer(name, v.dtype, shape, role,
                  compute=dtypes.compute_dtype(v.dtype) if dtypes.is_narrow(v.dtype) else None)


class _FinishGemms(Rewriter):
    """A Gemm whose op gave a result expression (bias, alpha/beta) stores it in its epilogue."""

    def visit_Gemm(self, s: Gemm) -> Gemm:
        if s.result is not None and not s.epilogue:
            return replace(s, epilogue=[Store(s.c.buf, s.c.at(s.i, s.j), s.result)])
        return s


class _DropFinished(Rewriter):
    def visit_Finished(self, s: Finished):
        return None


def _finish_gemms(stmts: list) -> list:
    return _FinishGemms().stmts(stmts)


def _chain_home(g: Graph, grp: Group, stored: list[str], v: Value) -> Optional[str]:
    chain_outs = [o for n in grp.chain for o in n.outputs if o in stored]
    if len(chain_outs) == 1 and g.values[chain_outs[0]].dtype == v.dtype:
        return chain_outs[0]
    return None


class _Chain:
    """A group's elementwise chain: one value per position of the group's index space
    (kernel/space.py), computed either in its own loop nest over the anchor's stored output, or
    in the epilogue of the GEMMs that produce the anchor's output, as each tile is finished."""

    def __init__(self, g: Graph, grp: Group, stored, params: _Params, anchor_buf, view_src: dict):
        self.g, self.grp, self.params, self.anchor_buf = g, grp, params, anchor_buf
        self.space = IndexSpace(group_shapes(g, grp))
        produced = {o for n in grp.nodes for o in n.outputs if o}
        self.chain_made = {o for n in grp.chain for o in n.outputs if o}

        def resolve(v: str) -> str:       # a view of a value made here is that value
            s_ = v
            while s_ in view_src:
                s_ = view_src[s_]
            return s_ if s_ in produced else v

        self.resolve = resolve
        # operands read from memory, keyed by (value, strides over the loop dims)
        self.operands: dict[tuple, tuple[Buffer, list[int]]] = {}
        self.scalars: dict[str, Expr] = {}
        for n in grp.chain:
            nshape = g.values[n.outputs[0]].shape
            for i in n.inputs:
                if not i:
                    continue
                src = resolve(i)
                if src in self.chain_made or src in self.scalars:
                    continue
                v = g.values[src]
                if v.const is not None and v.size == 1:
                    self.scalars[src] = _scalar(v)
                    continue
                if src in anchor_buf:
                    buf = anchor_buf[src]
                    strides = list(self.space.strides)          # the anchor's output, position by position
                else:
                    buf = params.get(g.values[i], "in")
                    strides = self.space.operand_strides(nshape, g.values[i].shape)
                self.operands[(src, tuple(strides))] = (buf, strides)
        self.outs = {o: params.get(g.values[o], "out") for o in stored if o in self.chain_made}
        self.anchor_out = next((o for o in (grp.anchor.outputs if grp.anchor else []) if o), None)
        self.anchor_stored = self.anchor_out in stored if self.anchor_out else False

    # ------------------------------------------------------------------ the chain's values
    def _compute(self, b: Builder, load) -> dict[str, Expr]:
        """Every chain value at one position; load(key) -> the Expr reading an operand (a key of
        self.operands) there. Each value goes into a local before anything is stored, so an
        output written over an operand (in place) cannot change what a later node reads."""
        env: dict[str, Expr] = dict(self.scalars)
        cache: dict[tuple, Expr] = {}
        for n in self.grp.chain:
            nshape = self.g.values[n.outputs[0]].shape
            args = []
            for i in n.inputs:
                if not i:
                    args.append(None)
                    continue
                src = self.resolve(i)
                if src in env:
                    args.append(env[src])
                    continue
                if src in self.anchor_buf:
                    key = (src, tuple(self.space.strides))
                else:
                    key = (src, tuple(self.space.operand_strides(nshape, self.g.values[i].shape)))
                if key not in cache:
                    cache[key] = load(key)
                args.append(cache[key])
            fn = registry.get(n.op_type).pointwise
            # a `checked` function may emit run-time checks (Builder.fail) into b first
            val = fn(n, args, b) if getattr(fn, "checked", False) else fn(n, args)
            if not isinstance(val, (Const, Var)):
                val = b.local("t", val)
            env[n.outputs[0]] = val
        return env

    # ------------------------------------------------------------------ its own loop nest
    def loop_nest(self, b: Builder) -> None:
        """One loop nest over the index space, dims merged where every operand walks them
        contiguously."""
        space = self.space
        all_strides = [st for _, st in self.operands.values()] + [list(space.strides)]
        dims = _merge_dims(space.extents, all_strides)
        with b.loops([d for d, _ in dims], [f"i{k}" for k in range(len(dims))], role=SPATIAL) as idx:
            def offset(st_full):
                off = const(0)
                for (extent, members), var in zip(dims, idx):
                    off = off + var * st_full[members[-1]]
                return off

            env = self._compute(b, lambda key: Load(self.operands[key][0], offset(list(key[1]))))
            out_off = offset(list(space.strides))
            for o, buf in self.outs.items():
                b.store(buf, out_off, env[o])

    # ------------------------------------------------------------------ in GEMM epilogues
    def gemm_producers(self, body) -> Optional[list[Gemm]]:
        """The GEMMs that produce the anchor's output, when nothing else in the kernel writes
        or reads it (then the chain can run in their epilogues); else None."""
        if self.anchor_out is None or self._can_fail():
            return None
        buf = self.anchor_buf[self.anchor_out]
        gemms = []
        for s in walk_stmts(body):
            if isinstance(s, Gemm) and s.dest is not None and s.dest.buf is buf:
                gemms.append(s)
                continue
            if isinstance(s, Gemm) and buf in (s.a.buf, s.b.buf, s.c.buf):
                return None
            if isinstance(s, Store) and s.buf is buf:
                return None
            for e in stmt_exprs(s):
                if any(isinstance(x, Load) and x.buf is buf for x in walk_expr(e)):
                    return None
        return gemms or None

    # ------------------------------------------------------------------ at positioned stores
    def positioned_producers(self, body) -> bool:
        """Does the anchor write its output only by stores that give their multi-index
        (Builder.store_at), with nothing else in the kernel reading it? Then the chain runs at
        each of those stores, on the value while it is in a register."""
        if self.anchor_out is None or self._can_fail():
            return False
        buf = self.anchor_buf[self.anchor_out]
        found = False
        for s in walk_stmts(body):
            exprs = stmt_exprs(s)
            if isinstance(s, Store) and s.buf is buf:
                if s.at is None or len(s.at) != len(buf.shape):
                    return False
                found = True
                exprs = [s.index, s.value]          # (not the store's own target)
            elif isinstance(s, Gemm) and buf in (s.a.buf, s.b.buf, s.c.buf):
                return False
            if any(isinstance(x, Load) and x.buf is buf for e in exprs for x in walk_expr(e)):
                return False
        return found

    def into_stores(self, body, b: Builder) -> list:
        """body with every positioned store of the anchor's output replaced by the chain at
        that element (operands addressed from the store's multi-index)."""
        buf = self.anchor_buf[self.anchor_out]
        chain = self

        class Into(Rewriter):
            def visit_Store(self, s: Store):
                return chain._at_store(s, b) if s.buf is buf else s

            def visit_Gemm(self, s: Gemm) -> Gemm:
                return s

        return Into().stmts(body)

    # ------------------------------------------------------------------ on finished parts
    def finished_producers(self, body) -> bool:
        """Does the anchor say which parts of its output are final (Builder.finished), and no
        GEMM write or read it? Then the chain runs on each part as it is finished, while it
        is in cache, instead of in a loop nest of its own after the anchor's."""
        if self.anchor_out is None or self._can_fail():
            return False
        buf = self.anchor_buf[self.anchor_out]
        found = False
        for s in walk_stmts(body):
            if isinstance(s, Finished) and s.buf is buf:
                found = True
            elif isinstance(s, Gemm) and buf in (s.a.buf, s.b.buf, s.c.buf, s.dest.buf if s.dest else None):
                return False
        return found

    def into_finished(self, body, b: Builder) -> list:
        """body with every Finished part of the anchor's output replaced by a loop running
        the chain over it, reading each element from where the anchor left it. (Not a
        rerun loop: the chain may write its result over the element it read.)"""
        buf = self.anchor_buf[self.anchor_out]
        chain, space = self, self.space
        runs = space.runs(buf.shape)

        class Into(Rewriter):
            def visit_Finished(self, s: Finished):
                if s.buf is not buf:
                    return s
                q, lead = Var(b.fresh("q")), len(s.at)
                inner = [k for d in range(lead, len(buf.shape)) for k in runs[d]]
                first = buf.flat(tuple(s.at) + (0,) * (len(buf.shape) - lead))

                def at(strides) -> Expr:
                    off = space.dim_offset(inner, q, strides)
                    for d in range(lead):
                        off = off + space.dim_offset(runs[d], s.at[d], strides)
                    return off

                sub = _Sub(b)
                chain._run_at(sub, sub.local("y", Load(buf, first + q)), at)
                return Loop(q, s.end, sub.body, start=s.start, role=SPATIAL)

        return Into().stmts(body)

    def _at_store(self, st: Store, b: Builder) -> list:
        space, sub = self.space, _Sub(b)
        runs = space.runs(st.buf.shape)

        def at(strides) -> Expr:
            off = const(0)
            for d, ix in enumerate(st.at):
                off = off + space.dim_offset(runs[d], ix, strides)
            return off

        value = st.value if isinstance(st.value, (Const, Var)) else sub.local("y", st.value)
        self._run_at(sub, value, at, anchor=(st.buf, st.index) if self.anchor_stored else None)
        return sub.body

    def _run_at(self, sub: "_Sub", value: Expr, at, anchor=None) -> None:
        """The chain at one element: `value` the anchor's there, `at(strides)` an operand's
        offset there; its outputs stored, and the anchor's value where `anchor` (buffer,
        index) is given."""
        env = self._compute(sub, lambda key: value if key[0] == self.anchor_out
                            else Load(self.operands[key][0], at(key[1])))
        if anchor is not None:
            sub.store(anchor[0], anchor[1], value)
        out_at = at(self.space.strides)
        for o, buf in self.outs.items():
            sub.store(buf, out_at, env[o])

    def _can_fail(self) -> bool:
        """Does a link check its values at run time (integer Div by zero)? GEMM epilogues cannot
        fail: such a chain runs in its own loop nest."""
        dry = Builder()
        self._compute(dry, lambda key: Load(self.operands[key][0], const(0)))
        return any(isinstance(s, Fail) for s in walk_stmts(dry.body))

    def into_gemms(self, body, gemms: list[Gemm], b: Builder) -> list:
        """The body with the chain in the epilogue of each of `gemms`."""
        targets = {id(gm) for gm in gemms}
        chain = self

        class Into(Rewriter):
            def visit_Gemm(self, s: Gemm) -> Gemm:
                return chain._epilogue(s, b) if id(s) in targets else s

        return Into().stmts(body)

    def _epilogue(self, gm: Gemm, b: Builder) -> Gemm:
        """The chain at C(i, j): operand offsets split into a per-row part (hoisted) and a
        per-column part, from where the GEMM's C lands in the anchor's output (gm.dest)."""
        dest, space = gm.dest, self.space
        runs = space.runs(dest.buf.shape)
        row_b, elem_b = _Sub(b), _Sub(b)
        row_cache: dict[tuple, Expr] = {}

        def split(strides) -> tuple[Expr, Expr]:
            """A walk over several dims starts at 0 in each (the ops' GEMMs do): the variable is
            then one index over the walk's loop dims, merged where the operand is contiguous."""
            parts = []
            for walk, var in ((dest.rows, gm.i), (dest.cols, gm.j)):
                if len(walk) == 1:
                    parts.append(space.dim_offset(runs[walk[0]], wrap(dest.index[walk[0]]) + var, strides))
                else:
                    parts.append(space.dim_offset([k for d in walk for k in runs[d]], var, strides))
            rpart, cpart = parts
            for d in range(len(dest.buf.shape)):
                if d not in dest.rows and d not in dest.cols:
                    rpart = rpart + space.dim_offset(runs[d], dest.index[d], strides)
            return rpart, cpart

        def at(strides) -> Expr:
            key = tuple(strides)
            rpart, cpart = split(strides)
            if key not in row_cache:
                row_cache[key] = rpart if isinstance(rpart, (Const, Var)) else row_b.local("row", rpart)
            return row_cache[key] + cpart

        value = gm.value if gm.result is None else elem_b.local("y", gm.result)
        env = self._compute(elem_b, lambda key: value if key[0] == self.anchor_out
                            else Load(self.operands[key][0], at(key[1])))
        out_at = at(space.strides)
        if self.anchor_stored:
            elem_b.store(self.anchor_buf[self.anchor_out], out_at, value)
        for o, buf in self.outs.items():
            elem_b.store(buf, out_at, env[o])
        return replace(gm, row_epilogue=_used_decls(row_b.body, elem_b.body), epilogue=elem_b.body)


def _used_decls(decls: list, users: list) -> list:
    """The Decls of `decls` whose variable `users` (or a later kept Decl) reads: a row offset
    made for an operand no value reads in the end (CastLike's second input, read for its type
    alone) is dropped, as C compilers warn of unused variables."""
    read = {x.name for s in walk_stmts(users) for e in stmt_exprs(s) for x in walk_expr(e) if isinstance(x, Var)}
    kept = []
    for d in reversed(decls):
        if not isinstance(d, Decl) or d.var.name in read:
            kept.append(d)
            read |= {x.name for e in stmt_exprs(d) for x in walk_expr(e) if isinstance(x, Var)}
    return kept[::-1]


class _Sub:
    """A Builder writing into its own statement list, sharing the kernel's names."""

    def __init__(self, b: Builder):
        self.body: list = []
        self._b = b

    def local(self, hint: str, init) -> Var:
        v = Var(self._b.fresh(hint), init.dtype)
        self.body.append(Decl(v, init))
        return v

    def store(self, buf: Buffer, idx, value) -> None:
        self.body.append(Store(buf, idx, cast(wrap(value, None), buf.value_dtype)))


def _merge_dims(shape, strides_list):
    """Collapse adjacent dims that every operand walks contiguously; drop size-1 dims.
    Returns [(extent, [original dims])]."""
    dims = [(d, [k]) for k, d in enumerate(shape) if d != 1]
    merged: list = []
    for extent, members in dims:
        if merged:
            pe, pm = merged[-1]
            a, c = pm[-1], members[0]
            if all(st[a] == st[c] * extent for st in strides_list):
                merged[-1] = (pe * extent, pm + members)
                continue
        merged.append((extent, members))
    return merged


def _scalar(v: Value) -> Expr:
    x = np.asarray(v.const).reshape(-1)[0]
    return const(x.item(), v.dtype)
