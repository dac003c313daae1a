"""The GPU schedule: how a kernel runs on a device with a grid of work-items (OpenCL, CUDA).

A fusion kernel becomes a short host program of device launches (`DeviceLaunch`) and host
loops (`DeviceLoop`), formed from the op's loop roles:
  * a `spatial` loop nest with constant extents is one launch: the nest is collapsed into one
    index space bound to the grid (axis global.0), one work-item per iteration, guarded
    against the rounded-up grid; what is inside the nest runs serially per work-item;
  * an ordered loop that holds a GEMM (a Conv's batch / group loop reusing its im2col scratch,
    an LSTM's time steps) is a host loop: its index reaches the launches inside as a scalar
    argument;
  * a `Gemm` is a tiled kernel written in the IR itself (`gemm_kernel`): a work-group per TM x
    TN tile of C, A and B tiles staged in `local` memory between barriers, each work-item
    accumulating RM x RN results in `private` registers, then the Gemm's epilogue (bias,
    activation, residual: whatever fusion put there) at each of its elements;
  * scalar statements between loops are recomputed inside each launch that uses them;
    anything else (an ordered loop without a GEMM, a lone store) runs as a one-work-item launch.
Tiles and work-group sizes are the target's [gpu] table; accumulation precision its [numerics].
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from ..kernel.ir import (BOUND, F32, I64, LOCAL, PRIVATE, REDUCTION, SPATIAL, UNROLLED, Assign, Barrier, Buffer,
                         Builder, Comment, Const, Decl, Gemm, GpuIndex, Kernel, Load, Loop, Stmt, Var, binop,
                         const, free_variables, select, walk_stmts)
from ..kernel.retype import widen_accumulators


@dataclass
class DeviceLaunch:
    kernel: Kernel
    scalars: list[Var]            # host loop indices the kernel takes, after its buffers
    grid: tuple                   # work-items per axis (a multiple of block)
    block: tuple                  # work-group size per axis


@dataclass
class DeviceLoop:
    var: Var
    extent: int
    body: list = field(default_factory=list)


@dataclass(frozen=True)
class GpuParams:
    block: int = 256              # work-items per group of an elementwise launch
    tm: int = 64                  # GEMM tile: rows of C per work-group
    tn: int = 64                  # columns of C per work-group
    tk: int = 16                  # K step staged in local memory
    rm: int = 4                   # rows of C per work-item
    rn: int = 4                   # columns of C per work-item
    host_loop_max: int = 4096     # an ordered loop with launches inside runs on the host up to this many times

    @classmethod
    def of(cls, target: dict) -> "GpuParams":
        t = target.get("gpu", {})
        p = cls(**{k: int(v) for k, v in t.items() if k in cls.__dataclass_fields__})
        if p.tm % p.rm or p.tn % p.rn or (p.tm * p.tk) % p.threads() or (p.tn * p.tk) % p.threads():
            raise ValueError(f"target {target.get('name')!r}: [gpu] tiles {t} do not divide evenly")
        return p

    def threads(self) -> int:
        return (self.tm // self.rm) * (self.tn // self.rn)


def schedule_gpu(graph, steps, target: dict) -> None:
    """Give every step a `device` program (a list of DeviceLaunch / DeviceLoop)."""
    params = GpuParams.of(target)
    acc = target.get("numerics", {}).get("accumulate_float32", "float32")
    for t, st in enumerate(steps):
        k = st.kernel
        k.body = widen_accumulators(k.body, F32, acc)
        former = _Former(k, t, params)
        st.device = former.form(k.body, [], [])


def _units(stmts: list[Stmt]) -> list[list[Stmt]]:
    """The statements of one level in runs that must stay in one launch: every run spans from
    the first to the last statement touching some local that is assigned (not only declared)
    at this level or below; other statements are runs of their own."""
    from ..kernel.ir import stmt_exprs, walk_expr
    # assigned locals, and locals declared from them (a softmax's 1/sum), to a fixpoint
    mutable = {x.var.name for x in walk_stmts(stmts) if isinstance(x, Assign)}
    decls = [x for x in walk_stmts(stmts) if isinstance(x, Decl)]
    grew = True
    while grew:
        grew = False
        for x in decls:
            if x.var.name not in mutable and any(isinstance(v, Var) and v.name in mutable for v in walk_expr(x.init)):
                mutable.add(x.var.name)
                grew = True
    touched = []
    for s in stmts:
        names = set()
        for x in walk_stmts([s]):
            if isinstance(x, (Decl, Assign)) and x.var.name in mutable:
                names.add(x.var.name)
            for e in stmt_exprs(x):
                names |= {v.name for v in walk_expr(e) if isinstance(v, Var) and v.name in mutable}
        touched.append(names)
    span: dict[str, list[int]] = {}
    for i, names in enumerate(touched):
        for n in names:
            span.setdefault(n, [i, i])[1] = i
    reach = list(range(len(stmts)))          # reach[i]: the last statement i must run with
    for first, last in span.values():
        for i in range(first, last + 1):
            reach[i] = max(reach[i], last)
    units, i = [], 0
    while i < len(stmts):
        end = reach[i]
        j = i
        while j <= end:
            end = max(end, reach[j])
            j += 1
        units.append(stmts[i:j])
        i = j
    return units


def _const_extent(lp: Loop) -> int | None:
    if isinstance(lp.extent, Const) and isinstance(lp.start, Const):
        return lp.extent.value - lp.start.value
    return None


def _has_gemm(stmts) -> bool:
    return any(isinstance(s, Gemm) for s in walk_stmts(stmts))


def _has_spatial_loop(stmts) -> bool:
    return any(isinstance(s, Loop) and s.role == SPATIAL and _const_extent(s) for s in walk_stmts(stmts))


class _Former:
    def __init__(self, kernel: Kernel, index: int, params: GpuParams):
        self.k, self.index, self.p = kernel, index, params
        self.count = 0
        order = kernel.params + kernel.scratch
        self.rank = {id(b): i for i, b in enumerate(order)}

    def form(self, stmts: list[Stmt], host_vars: list[Var], pending: list[Stmt]) -> list:
        ops: list = []
        pending = list(pending)
        for unit in _units(stmts):
            if len(unit) > 1:
                # statements that pass values through a mutable local (a softmax row's max and
                # sum when its outer loops are gone) run together, in one work-item
                ops.append(self.single(unit, host_vars, pending))
                pending += [x for x in unit if isinstance(x, Decl)]
                continue
            s = unit[0]
            if isinstance(s, (Decl, Assign)):
                pending.append(s)
            elif isinstance(s, Comment):
                continue
            elif isinstance(s, Gemm):
                ops.append(self.gemm(s, host_vars, pending))
            elif isinstance(s, Loop):
                ext = _const_extent(s)
                if ext is not None and s.role != SPATIAL and (_has_gemm(s.body) or _has_spatial_loop(s.body)) \
                        and ext <= self.p.host_loop_max and isinstance(s.start, Const):
                    body = self.form(s.body, host_vars + [s.var], pending)
                    if s.start.value:
                        raise NotImplementedError("host loops start at 0")
                    ops.append(DeviceLoop(s.var, ext, body))
                elif ext is not None and s.role == SPATIAL and _has_gemm(s.body) and ext <= self.p.host_loop_max:
                    ops.append(DeviceLoop(s.var, ext, self.form(s.body, host_vars + [s.var], pending)))
                elif ext is not None and s.role == SPATIAL and not _has_gemm(s.body):
                    ops.append(self.spatial(s, host_vars, pending))
                else:
                    ops.append(self.single([s], host_vars, pending))
            else:
                ops.append(self.single([s], host_vars, pending))
        return ops

    # ------------------------------------------------------------------ launches
    def _kernel(self, body: list[Stmt], host_vars: list[Var], pending: list[Stmt], what: str):
        """A device kernel running `body` after the pending scalar statements it needs."""
        needed = self._needed(body, pending)
        full = needed + body
        bufs, free = free_variables(full)
        host = {v.name for v in host_vars}
        stray = [v.name for v in free if v.name not in host]
        if stray:
            raise AssertionError(f"{self.k.name}: {stray} defined outside the launch")
        bufs = [b for b in sorted(bufs, key=lambda b: self.rank.get(id(b), 1 << 30)) if b.role != "local"]
        name = f"{self.k.name}_{self.count}"
        self.count += 1
        kern = Kernel(name, f"{self.k.comment}: {what}", bufs, full, names_used=set(self.k.names_used))
        kern.index = self.index
        kern.scalars = [v for v in host_vars if v.name in {f.name for f in free}]
        return kern, kern.scalars

    def _needed(self, body, pending: list[Stmt]) -> list[Stmt]:
        """The pending scalar statements `body` depends on (transitively), in order."""
        _, free = free_variables(body, strict=False)
        want = {v.name for v in free}
        keep = []
        for s in reversed(pending):
            if s.var.name in want:
                keep.append(s)
                _, more = free_variables([s if isinstance(s, Decl) else Decl(s.var, s.value)], strict=False)
                want |= {v.name for v in more}
        return keep[::-1]

    def single(self, body, host_vars, pending) -> DeviceLaunch:
        kern, scalars = self._kernel(body, host_vars, pending, "one work-item")
        return DeviceLaunch(kern, scalars, (1,), (1,))

    def spatial(self, s: Loop, host_vars, pending) -> DeviceLaunch:
        """The spatial nest starting at s, collapsed onto the grid."""
        nest = [s]
        body = s.body
        while len(body) == 1 and isinstance(body[0], Loop) and body[0].role == SPATIAL \
                and _const_extent(body[0]) is not None and not _has_gemm(body[0].body):
            nest.append(body[0])
            body = body[0].body
        extents = [_const_extent(lp) for lp in nest]
        total = 1
        for e in extents:
            total *= e
        flat = Var(self.k.fresh("gid"), I64)
        decls: list[Stmt] = []
        inner = 1
        for lp, e in zip(reversed(nest), reversed(extents)):
            idx = flat / inner if inner != 1 else flat
            if lp is not nest[0]:
                idx = idx % e
            decls.insert(0, Decl(lp.var, lp.start + idx if not (isinstance(lp.start, Const) and lp.start.value == 0)
                                 else idx))
            inner *= e
        bound = Loop(flat, const(total), decls + list(body), BOUND, const(0), SPATIAL, "global.0")
        kern, scalars = self._kernel([bound], host_vars, pending, f"{total} work-items")
        blk = min(self.p.block, max(total, 1))
        return DeviceLaunch(kern, scalars, (-(-total // blk) * blk,), (blk,))

    def gemm(self, g: Gemm, host_vars, pending) -> DeviceLaunch:
        body, grid, block = gemm_kernel(g, self.p, self.k)
        kern, scalars = self._kernel(body, host_vars, pending, f"GEMM {g.M}x{g.N}x{g.K}")
        return DeviceLaunch(kern, scalars, grid, block)


def gemm_kernel(g: Gemm, p: GpuParams, k: Kernel) -> tuple[list[Stmt], tuple, tuple]:
    """A tiled GEMM as kernel IR: work-group (bm, bn) computes C[bm*TM:, bn*TN:]; each of its
    T work-items an RM x RN block at (tr*RM, tc*RN) of that tile."""
    b = Builder()
    b.names = set(k.names_used) | b.names
    T = p.threads()
    cols = p.tn // p.rn
    n_bm, n_bn = -(-g.M // p.tm), -(-g.N // p.tn)
    As = Buffer(b.fresh("a_tile"), F32, (p.tk * p.tm,), "local", LOCAL)
    Bs = Buffer(b.fresh("b_tile"), F32, (p.tk * p.tn,), "local", LOCAL)
    acc = Buffer(b.fresh("acc"), F32, (p.rm * p.rn,), "local", PRIVATE)
    ar = Buffer(b.fresh("a_reg"), F32, (p.rm,), "local", PRIVATE)
    br = Buffer(b.fresh("b_reg"), F32, (p.rn,), "local", PRIVATE)
    A, B, C = g.a, g.b, g.c
    b.comment(f"C[{g.M}, {g.N}] = A[{g.M}, {g.K}] . B[{g.K}, {g.N}]: {p.tm}x{p.tn} tiles, K in steps of {p.tk}, "
              f"{p.rm}x{p.rn} per work-item")
    # the launch is exactly n_bn x n_bm groups of T work-items: no guards, so that every
    # work-item of a group reaches every barrier
    bn = b.local("bn", GpuIndex("group.0"))
    bm = b.local("bm", GpuIndex("group.1"))
    tid = b.local("tid", GpuIndex("local.0"))
    tr = b.local("tr", tid / cols)
    tc = b.local("tc", tid % cols)
    with b.loop(p.rm * p.rn, "z", role=SPATIAL) as z:
        b.store(acc, z, const(0.0, F32))
    with b.loop(-(-max(g.K, 0) // p.tk), "kt", role=REDUCTION) as kt:
        k0 = b.local("k0", kt * p.tk)
        with b.loop(p.tm * p.tk // T, "l", role=SPATIAL) as l_:
            e = b.local("e", tid + l_ * T)
            r, c = b.local("r", e / p.tk), b.local("c", e % p.tk)
            gi, gk = b.local("gi", bm * p.tm + r), b.local("gk", k0 + c)
            ok = binop("&&", gi < g.M, gk < g.K)
            b.store(As, c * p.tm + r, select(ok, Load(A.buf, A.offset + gi * A.rs + gk * A.cs), const(0.0, F32)))
        with b.loop(p.tn * p.tk // T, "l", role=SPATIAL) as l_:
            e = b.local("e", tid + l_ * T)
            r, c = b.local("r", e / p.tn), b.local("c", e % p.tn)
            gk, gj = b.local("gk", k0 + r), b.local("gj", bn * p.tn + c)
            ok = binop("&&", gk < g.K, gj < g.N)
            b.store(Bs, r * p.tn + c, select(ok, Load(B.buf, B.offset + gk * B.rs + gj * B.cs), const(0.0, F32)))
        b.emit(Barrier("local"))
        with b.loop(p.tk, "kk", role=REDUCTION) as kk:
            ri_loop = Loop(Var(b.fresh("ri"), I64), const(p.rm), [], UNROLLED, const(0), SPATIAL)
            b.emit(ri_loop)
            b._stack.append(ri_loop.body)
            b.store(ar, ri_loop.var, As[kk * p.tm + tr * p.rm + ri_loop.var])
            b._stack.pop()
            rj_loop = Loop(Var(b.fresh("rj"), I64), const(p.rn), [], UNROLLED, const(0), SPATIAL)
            b.emit(rj_loop)
            b._stack.append(rj_loop.body)
            b.store(br, rj_loop.var, Bs[kk * p.tn + tc * p.rn + rj_loop.var])
            b._stack.pop()
            ri2 = Loop(Var(b.fresh("ri"), I64), const(p.rm), [], UNROLLED, const(0), SPATIAL)
            b.emit(ri2)
            b._stack.append(ri2.body)
            rj2 = Loop(Var(b.fresh("rj"), I64), const(p.rn), [], UNROLLED, const(0), SPATIAL)
            b.emit(rj2)
            b._stack.append(rj2.body)
            at = ri2.var * p.rn + rj2.var
            b.store(acc, at, acc[at] + ar[ri2.var] * br[rj2.var])
            b._stack.pop()
            b._stack.pop()
        b.emit(Barrier("local"))
    # epilogue: each of the work-item's results, where C has it
    ri3 = Loop(Var(b.fresh("ri"), I64), const(p.rm), [], UNROLLED, const(0), SPATIAL)
    b.emit(ri3)
    b._stack.append(ri3.body)
    b.emit(Decl(g.i, bm * p.tm + tr * p.rm + ri3.var))
    with b.if_(g.i < g.M):
        for s in g.row_epilogue:
            b.emit(s)
        rj3 = Loop(Var(b.fresh("rj"), I64), const(p.rn), [], UNROLLED, const(0), SPATIAL)
        b.emit(rj3)
        b._stack.append(rj3.body)
        b.emit(Decl(g.j, bn * p.tn + tc * p.rn + rj3.var))
        with b.if_(g.j < g.N):
            v = acc[ri3.var * p.rn + rj3.var]
            if g.accumulate:
                v = v + Load(C.buf, C.at(g.i, g.j))
            b.emit(Decl(g.value, v))
            if g.epilogue:
                for s in g.epilogue:
                    b.emit(s)
            else:
                b.store(C.buf, C.at(g.i, g.j), g.value)
        b._stack.pop()
    b._stack.pop()
    k.names_used |= b.names
    return b.body, (n_bn * T, n_bm), (T, 1)


def device_launches(ops) -> list[DeviceLaunch]:
    out = []
    for op in ops:
        if isinstance(op, DeviceLaunch):
            out.append(op)
        else:
            out += device_launches(op.body)
    return out


__all__ = ["schedule_gpu", "gemm_kernel", "GpuParams", "DeviceLaunch", "DeviceLoop", "device_launches", "replace"]
