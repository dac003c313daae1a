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
    TN tile of C, A and B tiles staged in `local` memory between barriers (a convolution's B,
    its im2col matrix, staged straight from the input: no im2col buffer), each work-item
    accumulating RM x RN results in `private` registers, then the Gemm's epilogue (bias,
    activation, residual: whatever fusion put there) at each of its elements; where the target
    allows TF32, warps of the work-group sum 16 x 16 fragments on tensor cores instead
    (`mma_kernel`, `Mma` statements only the CUDA printer prints);
  * scalar statements between loops are recomputed inside each launch that uses them;
    anything else (an ordered loop without a GEMM, a lone store) runs as a one-work-item launch.
Tiles and work-group sizes are the target's [gpu] table; accumulation precision its [numerics].
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from ..errors import AotcError
from ..kernel.ir import (BOUND, F32, I64, LOCAL, MMA_A, MMA_B, MMA_C, MMA_K, MMA_M, MMA_N, PRIVATE, REDUCTION, SPATIAL,
                         UNROLLED, Assign, Barrier, BufPtr, Buffer, Builder, Comment, Const, Decl, Expr, Gemm, GemmDest,
                         GpuIndex, Kernel, Load, Loop, Matrix, Mma, Rewriter, Stmt, Store, Var, binop, const,
                         free_variables, select, walk_stmts)
from ..kernel.integer_gemm import expand_integer_gemms
from ..kernel.retype import widen_accumulators
from ..targets import GpuConfig, Target
from .direct import drop_unused_scratch, read_im2col_directly
from .gpu_group import cooperate


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


def schedule_gpu(graph, steps, target: Target) -> None:
    """Give every step a `device` program (a list of DeviceLaunch / DeviceLoop)."""
    params = target.gpu
    if params is None:
        raise AotcError(f"target {target.name!r} has no [gpu] table", "a GPU target's file gives its tiles")
    acc = target.numerics.accumulate_float32 or "float32"
    tf32 = target.numerics.tf32
    im2col = target.gemm.im2col_packing
    for t, st in enumerate(steps):
        k = st.kernel
        k.body = expand_integer_gemms(k.body, k.fresh)      # 8-bit products: plain loops here
        k.body = read_im2col_directly(k.body, lambda g: im2col)
        drop_unused_scratch(k)
        k.body = widen_accumulators(k.body, F32, acc)
        # a kernel without an anchor may write over its input in place (memory/planner.py):
        # its work-items never share loops, whose ownership of elements assumes no aliasing
        former = _Former(k, t, params, groups=st.group.anchor is not None, tf32=tf32)
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


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


SMALL_GROUP_WORK = 32        # see _Former.group_work
EXPAND_MAX_BYTES = 1 << 30   # private scratch copies for a whole nest at once, at most this much


class _Rebase(Rewriter):
    """Every access to `old` going to `new` at `offset` further on."""

    def __init__(self, old: Buffer, new: Buffer, offset: Expr):
        self.old, self.new, self.offset = old, new, offset

    def expr_hook(self, e):
        if isinstance(e, Load) and e.buf.name == self.old.name:
            return Load(self.new, self.offset + e.index)
        if isinstance(e, BufPtr) and e.buf.name == self.old.name:
            return BufPtr(self.new, self.offset + e.offset)
        return e

    def visit_Store(self, s: Store) -> Store:
        s = self.generic(s)
        return replace(s, buf=self.new, index=self.offset + s.index) if s.buf.name == self.old.name else s

    def visit_Matrix(self, m: Matrix) -> Matrix:
        if m.buf.name != self.old.name:
            return self.generic(m)
        return Matrix(self.new, self.offset + self.expr(m.offset), m.rs, m.cs, m.layout)

    def visit_GemmDest(self, d: GemmDest):
        return d

    def visit_Mma(self, s: Mma) -> Mma:
        s = self.generic(s)
        if s.mem is not None and s.mem.name == self.old.name:
            return replace(s, mem=self.new, offset=self.offset + s.offset)
        return s

    def visit_Gemm(self, g: Gemm) -> Gemm:
        g = self.generic(g)
        return replace(g, dest=None) if g.dest is not None and g.dest.buf.name == self.old.name else g


def _rebase(stmts: list[Stmt], old: Buffer, new: Buffer, offset: Expr) -> list[Stmt]:
    """The statements with every access to `old` going to `new` at `offset` further on."""
    return _Rebase(old, new, offset).stmts(stmts)




def _const_extent(lp: Loop) -> int | None:
    if isinstance(lp.extent, Const) and isinstance(lp.start, Const):
        return lp.extent.value - lp.start.value
    return None


def _has_gemm(stmts) -> bool:
    return any(isinstance(s, Gemm) for s in walk_stmts(stmts))


def _has_spatial_loop(stmts) -> bool:
    return any(isinstance(s, Loop) and s.role == SPATIAL and _const_extent(s) for s in walk_stmts(stmts))


class _Former:
    def __init__(self, kernel: Kernel, index: int, params: GpuConfig, groups: bool = True, tf32: bool = False):
        self.k, self.index, self.p = kernel, index, params
        self.groups, self.tf32 = groups, tf32
        self.shuffle_warp = params.warp if params.shuffle else 0
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
                ops += self.gemm(s, host_vars, pending)
            elif isinstance(s, Loop):
                ext = _const_extent(s)
                spread = self.distribute(s) if ext is not None and s.role == SPATIAL and _has_gemm(s.body) \
                    and self.gemm_batch(s) is None else None
                if ext is not None and s.role != SPATIAL and (_has_gemm(s.body) or _has_spatial_loop(s.body)) \
                        and ext <= self.p.host_loop_max and isinstance(s.start, Const):
                    body = self.form(s.body, host_vars + [s.var], pending)
                    if s.start.value:
                        raise NotImplementedError("host loops start at 0")
                    ops.append(DeviceLoop(s.var, ext, body))
                elif ext is not None and s.role == SPATIAL and self.gemm_batch(s) is not None:
                    batch, g = self.gemm_batch(s)
                    ops += self.gemm(g, host_vars, pending, batch)
                elif spread is not None:
                    ops += self.form(spread, host_vars, pending)
                elif ext is not None and s.role == SPATIAL and _has_gemm(s.body) and ext <= self.p.host_loop_max:
                    ops.append(DeviceLoop(s.var, ext, self.form(s.body, host_vars + [s.var], pending)))
                elif ext is not None and s.role == SPATIAL and not _has_gemm(s.body) \
                        and (copied := self.with_private_copies(s)) is not None:
                    ops.append(self.spatial(copied, host_vars, pending))
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

    def group_work(self, items: int) -> int:
        """The least loop work per spatial iteration for which a work-group shares it: the
        target's group_min_work, or (a launch too small to fill the device) a warp's worth."""
        if self.p.min_items and items < self.p.min_items:
            return min(self.p.group_min_work, SMALL_GROUP_WORK)
        return self.p.group_min_work

    def single(self, body, host_vars, pending) -> DeviceLaunch:
        coop = cooperate(body, self.k.fresh, self.p.block, self.group_work(1), self.shuffle_warp) \
            if self.groups else None
        if coop is not None:
            stmts, T, _ = coop
            kern, scalars = self._kernel(stmts, host_vars, pending, f"one work-group of {T}")
            return DeviceLaunch(kern, scalars, (T,), (T,))
        kern, scalars = self._kernel(body, host_vars, pending, "one work-item")
        return DeviceLaunch(kern, scalars, (1,), (1,))

    def spatial(self, s: Loop, host_vars, pending, share: bool = True) -> DeviceLaunch:
        """The spatial nest starting at s, collapsed onto the grid (`share`: a work-group per
        iteration where the work inside is worth sharing)."""
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
        coop = cooperate(list(body), self.k.fresh, self.p.block, self.group_work(total), self.shuffle_warp) \
            if self.groups and share else None
        if coop is not None:
            # a work-group per iteration, its work-items sharing the loops inside
            # (exactly `total` groups: no guard around the body, whose barriers every
            # work-item of the group must reach)
            stmts, T, _ = coop
            body = [stmts[0], Decl(flat, GpuIndex("group.0"))] + decls + stmts[1:]
            kern, scalars = self._kernel(body, host_vars, pending, f"{total} work-groups of {T}")
            return DeviceLaunch(kern, scalars, (total * T,), (T,))
        bound = Loop(flat, const(total), decls + list(body), BOUND, const(0), SPATIAL, "global.0")
        kern, scalars = self._kernel([bound], host_vars, pending, f"{total} work-items")
        blk = min(self.p.block, max(total, 1))
        return DeviceLaunch(kern, scalars, (-(-total // blk) * blk,), (blk,))

    def gemm(self, g: Gemm, host_vars, pending, batch: tuple = ()) -> list[DeviceLaunch]:
        """A GEMM launch (over `batch`, spatial loops around the Gemm, on grid axis 2); a
        split-K GEMM also a second launch summing its chunks. Where the target allows TF32
        ([numerics] tf32) a float32 GEMM runs on tensor cores (`mma_kernel`)."""
        if not batch and g.M <= self.p.gemv_rows and g.K <= GEMV_MAX_K and not (g.a.packed or g.b.packed):
            return [self.spatial(gemv_loop(g, self.k), host_vars, pending, share=False)]
        tensor = self.tf32 and g.a.buf.value_dtype == F32 and g.b.buf.value_dtype == F32
        shape = (mma_shape if tensor else gemm_shape)(g, self.p, batch)
        depth = "".join(f"{e}x" for _, e in batch)
        partial = None
        if shape.split > 1:
            partial = Buffer(self.k.fresh("partial"), F32, (shape.split * g.M * g.N,), "scratch")
            self.k.scratch.append(partial)
        body, grid, block = (mma_kernel if tensor else gemm_kernel)(g, shape, self.k, partial)
        kern, scalars = self._kernel(body, host_vars, pending, f"GEMM {depth}{g.M}x{g.N}x{g.K}")
        out = [DeviceLaunch(kern, scalars, grid, block)]
        if partial is not None:
            out.append(self.spatial(split_sum_kernel(g, shape, partial, self.k), host_vars, pending))
        return out

    def _nest(self, s: Loop) -> tuple[list[Loop], list[Stmt]]:
        """The spatial loops of constant extent from s inward, as long as each holds just the
        next, and the statements inside the innermost."""
        nest, body = [], [s]
        while len(body) == 1 and isinstance(body[0], Loop) and body[0].role == SPATIAL \
                and _const_extent(body[0]) and isinstance(body[0].start, Const) and body[0].start.value == 0:
            nest.append(body[0])
            body = [x for x in body[0].body if not isinstance(x, Comment)]
        return nest, body

    def _private_per_iteration(self, nest: list[Loop], body: list[Stmt]) -> list[Stmt] | None:
        """`body` with each private scratch of the nest (Loop.private: filled and used by one
        iteration alone) given a copy per iteration of the nest, since the device runs the
        iterations at once; None when the copies would take more than EXPAND_MAX_BYTES."""
        private = {n for lp in nest for n in lp.private}
        by_name = {b.name: b for b in self.k.scratch}
        depth, z = 1, const(0)
        for lp in reversed(nest):
            z = z + lp.var * depth
            depth *= _const_extent(lp)
        if not private <= set(by_name) or sum(by_name[n].nbytes for n in private) * depth > EXPAND_MAX_BYTES:
            return None
        for name in private:
            old = by_name[name]
            new = Buffer(old.name, old.dtype, (depth * old.size,), old.role, old.space, old.compute)
            self.k.scratch[self.k.scratch.index(old)] = new
            body = _rebase(body, old, new, z * old.size)
        return body

    def with_private_copies(self, s: Loop) -> Loop | None:
        """The spatial nest s, its private scratch given a copy per iteration (work-items run
        the iterations at once and would share one copy); s itself when it has none; None when
        the copies would not fit."""
        nest, body = self._nest(s)
        if not any(lp.private for lp in nest):
            return s
        body = self._private_per_iteration(nest, body)
        if body is None:
            return None
        for lp in reversed(nest):
            body = [Loop(lp.var, lp.extent, body, lp.kind, lp.start, SPATIAL, lp.axis)]
        return body[0]

    def distribute(self, s: Loop) -> list[Stmt] | None:
        """A spatial nest around several loops and GEMMs (a Conv's batch and group loops around
        its im2col and GEMM) as one nest around each of them, so that every launch covers all
        iterations at once (launches over the whole nest instead of host loops). Each private
        scratch gets a copy per iteration. None when a statement at the nest's level passes
        values on (a local), or the copies would take more than EXPAND_MAX_BYTES."""
        nest, body = self._nest(s)
        if len(body) < 2 or not all(isinstance(x, (Loop, Gemm)) for x in body):
            return None
        body = self._private_per_iteration(nest, body)
        if body is None:
            return None
        out = []
        for x in body:
            for lp in reversed(nest):
                x = Loop(lp.var, lp.extent, [x], lp.kind, lp.start, SPATIAL, lp.axis)
            out.append(x)
        return out

    def gemm_batch(self, s: Loop) -> tuple | None:
        """((Var, extent), ...) of a spatial nest around a lone Gemm, and the Gemm; else None."""
        nest, body = self._nest(s)
        if not nest or len(body) != 1 or not isinstance(body[0], Gemm):
            return None
        depth = 1
        for lp in nest:
            depth *= _const_extent(lp)
        if depth > self.p.max_grid_z:
            return None
        return tuple((lp.var, _const_extent(lp)) for lp in nest), body[0]


@dataclass(frozen=True)
class GemmShape:
    """How one GEMM launch is cut: the tile (a copy of the target's, or halved for a small
    product), `batch` spatial loops over independent products on grid axis 2, or `split` K
    chunks of `chunk` on grid axis 2 whose partial products a second launch sums."""
    p: GpuConfig
    batch: tuple = ()             # ((Var, extent), ...) outermost first
    split: int = 1
    chunk: int = 0

    @property
    def depth(self) -> int:
        n = self.split
        for _, e in self.batch:
            n *= e
        return n


def gemm_shape(g: Gemm, p: GpuConfig, batch: tuple = ()) -> GemmShape:
    """The target's tile, halved while the launch would have fewer than `min_groups` groups (a
    small product leaves most of the device idle) down to `min_results` results per work-item,
    then K split while it still would. A product that even so has fewer than `floor_groups`
    groups (K too short to split) gets tiles halved further, down to 2 x 2 results. Halved
    tiles stage K `small_tk` at a time where that is set (fewer barriers per multiply-add)."""
    depth = 1
    for _, e in batch:
        depth *= e

    def groups(q):
        return -(-g.M // q.tm) * -(-g.N // q.tn) * depth

    def halved(q, least):
        # (2 x 2 at least: one loads two operands per multiply-add)
        while q.min_groups and groups(q) < q.min_groups and q.rm % 2 == 0 and q.rn % 2 == 0 \
                and q.rm * q.rn // 4 >= max(least, 4):
            tk = q.small_tk or q.tk
            if (q.tm // 2 * tk) % q.threads() or (q.tn // 2 * tk) % q.threads():
                break
            q = replace(q, tm=q.tm // 2, tn=q.tn // 2, rm=q.rm // 2, rn=q.rn // 2, tk=tk)
        return q

    def split_of(q):
        if q.min_groups and not batch and groups(q) < q.min_groups:
            return max(1, min(-(-q.min_groups // groups(q)), g.K // max(q.split_min_k, q.tk)))
        return 1

    p = halved(p, p.min_results)
    split = split_of(p)
    if groups(p) * split < p.floor_groups:
        p = halved(p, 4)
        split = split_of(p)
    if split < 2:
        return GemmShape(p, batch)
    chunk = _ceil(_ceil(g.K, split), p.tk) * p.tk           # a whole number of K steps
    return GemmShape(p, (), _ceil(g.K, chunk), chunk)


BANKS = 32                   # local-memory banks, 4 bytes wide (NVIDIA's shared memory)


def tile_pad(p: "GpuConfig") -> int:
    """Words added to each row of a staged GEMM tile, on a device with warps, so that a warp
    storing a tile walked along K (tk consecutive K, 32/tk rows or columns) hits 32 banks, and
    rows stay 16-byte aligned for 128-bit reads."""
    return max(VECTOR, BANKS // p.tk) if p.warp else 0


VECTOR = 4                   # floats in a 128-bit local-memory read


def _vector(n: int) -> int:
    """The widest read (1, 2 or 4 floats) that a work-item's n rows or columns split into."""
    return next(v for v in (VECTOR, 2, 1) if n % v == 0)


def _tile_walk(m: Matrix, along_k: str, extent: int, tk: int, e: Expr) -> tuple[Expr, Expr]:
    """(k, other) of element e of a staged tile of extent x tk, so that consecutive work-items
    read consecutive addresses of the operand (coalesced): along K when K is the operand's unit
    stride, else along the other dim. `along_k` names the stride of K ('cs' for A, 'rs' for B)."""
    k_unit = getattr(m, along_k) == 1
    other_unit = getattr(m, "rs" if along_k == "cs" else "cs") == 1
    if k_unit and not other_unit:
        return e % tk, e / tk
    return e / extent, e % extent


class _GemmFrame:
    """What the tiled GEMM kernels share: the work-group's place (group.0: the tile's column
    block bn, group.1: its row block bm, group.2: the batch entry or K chunk), the work-item's
    index, and the K loop that stages A's and B's next TK-slices through registers into local
    tiles (a register prefetch: the next slice is loaded from global memory while this one is
    used), each operand walked along its unit stride so that the loads are coalesced."""

    def __init__(self, b: Builder, g: Gemm, shape: GemmShape, tm: int, tn: int, tk: int, T: int):
        self.b, self.g, self.shape, self.tm, self.tn, self.tk, self.T = b, g, shape, tm, tn, tk, T
        # the launch is exactly n_bn x n_bm (x depth) groups of T work-items: no guards, so
        # that every work-item of a group reaches every barrier
        self.bn = b.local("bn", GpuIndex("group.0"))
        self.bm = b.local("bm", GpuIndex("group.1"))
        if shape.batch:
            flat = b.local("z", GpuIndex("group.2"))
            inner = 1
            for var, e in reversed(shape.batch):
                idx = flat / inner if inner != 1 else flat
                b.emit(Decl(var, idx % e if var is not shape.batch[0][0] else idx))
                inner *= e
        self.k_lo, self.k_hi, self.z = const(0), const(g.K), None
        if shape.split > 1:
            self.z = b.local("z", GpuIndex("group.2"))
            self.k_lo = b.local("k_lo", self.z * shape.chunk)
            self.k_hi = b.local("k_hi", binop("min", self.k_lo + shape.chunk, const(g.K)))
        self.tid = b.local("tid", GpuIndex("local.0"))

    @property
    def grid(self) -> tuple:
        g = self.g
        return (-(-g.N // self.tn) * self.T, -(-g.M // self.tm), self.shape.depth), (self.T, 1, 1)

    def k_loop(self, a_at, b_at, As: Buffer, Bs: Buffer, body) -> None:
        """for each TK-slice of K: stage it (A's element (r, k) of the slice at As[a_at(k, r)],
        B's (k, c) at Bs[b_at(k, c)]), barrier, fetch the next, body(), barrier."""
        b, g, T, tk = self.b, self.g, self.T, self.tk
        A, B = g.a, g.b
        na, nb = self.tm * tk // T, self.tn * tk // T          # elements each work-item stages
        a_next = Buffer(b.fresh("a_next"), F32, (na,), "local", PRIVATE)
        b_next = Buffer(b.fresh("b_next"), F32, (nb,), "local", PRIVATE)

        def fetch(k0: Expr) -> None:
            with _unrolled(b, na, "l") as l_:
                kc, r = _tile_walk(A, "cs", self.tm, tk, self.tid + l_ * T)
                gi, gk = b.local("gi", self.bm * self.tm + r), b.local("gk", k0 + kc)
                ok = binop("&&", gi < g.M, gk < self.k_hi)
                b.store(a_next, l_, select(ok, A.element(gi, gk, b.local), const(0.0, F32)))
            with _unrolled(b, nb, "l") as l_:
                kc, c = _tile_walk(B, "rs", self.tn, tk, self.tid + l_ * T)
                gk, gj = b.local("gk", k0 + kc), b.local("gj", self.bn * self.tn + c)
                ok = binop("&&", gk < self.k_hi, gj < g.N)
                b.store(b_next, l_, select(ok, B.element(gk, gj, b.local), const(0.0, F32)))

        steps = -(-(self.shape.chunk if self.shape.split > 1 else max(g.K, 0)) // tk)
        if steps:
            fetch(self.k_lo)
        with b.loop(steps, "kt", role=REDUCTION) as kt:
            with _unrolled(b, na, "l") as l_:
                kc, r = _tile_walk(A, "cs", self.tm, tk, self.tid + l_ * T)
                b.store(As, a_at(kc, r), a_next[l_])
            with _unrolled(b, nb, "l") as l_:
                kc, c = _tile_walk(B, "rs", self.tn, tk, self.tid + l_ * T)
                b.store(Bs, b_at(kc, c), b_next[l_])
            b.emit(Barrier("local"))
            if steps > 1:
                with b.if_(kt + 1 < steps):
                    fetch(self.k_lo + (kt + 1) * tk)
            body()
            b.emit(Barrier("local"))

    def result(self, i: Expr, j: Expr, value, partial: Buffer | None) -> None:
        """C's element at tile row i, column j (where C has it): the Gemm's epilogue of
        value(), or the K chunk's partial sum."""
        b, g = self.b, self.g
        b.emit(Decl(g.i, self.bm * self.tm + i))
        with b.if_(g.i < g.M):
            if partial is None:
                for s in g.row_epilogue:
                    b.emit(s)
            b.emit(Decl(g.j, self.bn * self.tn + j))
            with b.if_(g.j < g.N):
                v = value()
                if partial is not None:
                    b.store(partial, (self.z * g.M + g.i) * g.N + g.j, v)
                else:
                    _epilogue(b, g, v)


def _describe(g: Gemm, shape: GemmShape, tm: int, tn: int, tk: int) -> str:
    what = f" of {shape.depth} products" if shape.batch else \
        f", K in {shape.split} chunks of {shape.chunk} summed by the next launch" if shape.split > 1 else ""
    return f"C[{g.M}, {g.N}] = A[{g.M}, {g.K}] . B[{g.K}, {g.N}]{what}: {tm}x{tn} tiles, K in steps of {tk}"


def gemm_kernel(g: Gemm, shape: GemmShape, k: Kernel, partial: Buffer | None = None
                ) -> tuple[list[Stmt], tuple, tuple]:
    """A tiled GEMM as kernel IR: work-group (bn, bm, z) computes C[bm*TM:, bn*TN:] of product z
    (a batch entry, or a K chunk whose sums land in `partial`), a TM x TN tile, with T work-items;
    A and B go through local memory a TK-slice at a time (`_GemmFrame`).

    Work-item (tr, tc) owns RM x RN results of the tile (ri < RM, rj < RN). On a device with
    warps (`warp`) they come in runs of 4 (`_vector`) strided across the tile, columns
    tc*4 + rj%4 + (rj/4)*4*(TN/RN) (rows alike), so that each run is one 128-bit read of the
    staged tile and the work-items of a warp read consecutive runs (no bank conflicts); each
    staged row is padded (`tile_pad`) so that the stores, walked along the operand's unit
    stride, do not conflict either. Elsewhere (a CPU driver, which vectorizes a work-item's own
    loops) they are a block, rows tr*RM + ri and columns tc*RN + rj."""
    p = shape.p
    b = Builder()
    b.names = set(k.names_used) | b.names
    T = p.threads()
    rows, cols = p.tm // p.rm, p.tn // p.rn          # work-items down and across the tile
    pad = tile_pad(p)
    va, vb = _vector(p.rm), _vector(p.rn)

    def row(r: Expr, ri: Expr) -> Expr:            # the tile row of a work-item's ri-th result
        return (ri / va) * (rows * va) + r * va + ri % va if p.warp else r * p.rm + ri

    def col(c: Expr, rj: Expr) -> Expr:
        return (rj / vb) * (cols * vb) + c * vb + rj % vb if p.warp else c * p.rn + rj
    lda, ldb = p.tm + pad, p.tn + pad                 # staged: As[k * lda + r], Bs[k * ldb + c]
    As = Buffer(b.fresh("a_tile"), F32, (p.tk * lda,), "local", LOCAL)
    Bs = Buffer(b.fresh("b_tile"), F32, (p.tk * ldb,), "local", LOCAL)
    acc = Buffer(b.fresh("acc"), F32, (p.rm * p.rn,), "local", PRIVATE)
    ar = Buffer(b.fresh("a_reg"), F32, (p.rm,), "local", PRIVATE)
    br = Buffer(b.fresh("b_reg"), F32, (p.rn,), "local", PRIVATE)
    b.comment(_describe(g, shape, p.tm, p.tn, p.tk) + f", {p.rm}x{p.rn} per work-item" +
              (f" in runs of {va}x{vb} strided across the tile" if p.warp else ""))
    f = _GemmFrame(b, g, shape, p.tm, p.tn, p.tk, T)
    tr = b.local("tr", f.tid / cols)
    tc = b.local("tc", f.tid % cols)
    with _unrolled(b, p.rm * p.rn, "z") as zz:
        b.store(acc, zz, const(0.0, F32))

    def products() -> None:
        with b.loop(p.tk, "kk", role=REDUCTION) as kk:
            with _unrolled(b, p.rm, "ri") as ri:
                b.store(ar, ri, As[kk * lda + row(tr, ri)])
            with _unrolled(b, p.rn, "rj") as rj:
                b.store(br, rj, Bs[kk * ldb + col(tc, rj)])
            with _unrolled(b, p.rm, "ri") as ri:
                with _unrolled(b, p.rn, "rj") as rj:
                    at = ri * p.rn + rj
                    b.store(acc, at, acc[at] + ar[ri] * br[rj])
    f.k_loop(lambda kc, r: kc * lda + r, lambda kc, c: kc * ldb + c, As, Bs, products)
    # each of the work-item's results, where C has it: the epilogue, or the chunk's partial sum
    with _unrolled(b, p.rm, "ri") as ri:
        with _unrolled(b, p.rn, "rj") as rj:
            f.result(row(tr, ri), col(tc, rj), lambda: acc[ri * p.rn + rj], partial)
    k.names_used |= b.names
    grid, block = f.grid
    return b.body, grid, block


MMA_WARPS = (4, 2)           # a TF32 GEMM work-group's warps, down and across its tile
MMA_TK = 16                  # K staged per step (two tensor-core steps)


def mma_shape(g: Gemm, p: GpuConfig, batch: tuple = ()) -> GemmShape:
    """The tile of a TF32 tensor-core GEMM: 128 x 128 (64 x 64 where the target's tiles are
    smaller), halved down to 64 x 64 while the launch would have fewer than min_groups groups,
    then K split as for `gemm_shape`."""
    depth = 1
    for _, e in batch:
        depth *= e
    q = replace(p, tk=MMA_TK, tm=128 if p.tm >= 128 else 64, tn=128 if p.tn >= 128 else 64)

    def groups(q):
        return -(-g.M // q.tm) * -(-g.N // q.tn) * depth
    while q.min_groups and groups(q) < q.min_groups and q.tm > 64 and q.tn > 64:
        q = replace(q, tm=q.tm // 2, tn=q.tn // 2)
    split = 1
    if q.min_groups and not batch and groups(q) < q.min_groups:
        split = min(-(-q.min_groups // groups(q)), g.K // max(q.split_min_k, q.tk))
    if split < 2:
        return GemmShape(q, batch)
    chunk = _ceil(_ceil(g.K, split), q.tk) * q.tk
    return GemmShape(q, (), _ceil(g.K, chunk), chunk)


def mma_kernel(g: Gemm, shape: GemmShape, k: Kernel, partial: Buffer | None = None
               ) -> tuple[list[Stmt], tuple, tuple]:
    """A GEMM on tensor cores (TF32 inputs, float32 sums), as kernel IR with `Mma` steps: the
    work-group's 8 warps (4 x 2) each compute a (TM/4) x (TN/2) block of the tile as 16 x 16
    fragments; A and B are staged row-major (As[r * lda + k], Bs[k * ldb + c], rows padded by
    8 floats so that fragments start 32-byte aligned), each warp loads its fragments from
    there. The results go fragment by fragment through a 16 x 16 scratch of the warp's in local
    memory, from which each of its work-items takes 8 elements to the Gemm's epilogue."""
    p = shape.p
    wr_n, wc_n = MMA_WARPS
    T = 32 * wr_n * wc_n
    wm, wn = p.tm // wr_n, p.tn // wc_n            # a warp's block of the tile
    fm, fn = wm // MMA_M, wn // MMA_N              # its fragments down and across
    if wm % MMA_M or wn % MMA_N or not fm or not fn:
        raise ValueError(f"tensor-core tile {p.tm}x{p.tn} does not split into 16 x 16 fragments of {wr_n}x{wc_n} warps")
    tk = p.tk
    b = Builder()
    b.names = set(k.names_used) | b.names
    lda, ldb = tk + 8, p.tn + 8
    As = Buffer(b.fresh("a_tile"), F32, (p.tm * lda,), "local", LOCAL)
    Bs = Buffer(b.fresh("b_tile"), F32, (tk * ldb,), "local", LOCAL)
    Cs = Buffer(b.fresh("c_frag"), F32, (wr_n * wc_n * MMA_M * MMA_N,), "local", LOCAL)
    fa = Buffer(b.fresh("a_frag"), F32, (fm,), "local", MMA_A)
    fb = Buffer(b.fresh("b_frag"), F32, (fn,), "local", MMA_B)
    fc = Buffer(b.fresh("c_acc"), F32, (fm * fn,), "local", MMA_C)
    b.comment(_describe(g, shape, p.tm, p.tn, tk) + f", on tensor cores in TF32: {wr_n}x{wc_n} warps of "
              f"{fm}x{fn} fragments of {MMA_M}x{MMA_N}")
    f = _GemmFrame(b, g, shape, p.tm, p.tn, tk, T)
    warp = b.local("warp", f.tid / 32)
    lane = b.local("lane", f.tid % 32)
    wr = b.local("wr", warp / wc_n)
    wc = b.local("wc", warp % wc_n)
    for x in range(fm * fn):
        b.emit(Mma("zero", fc, const(x)))

    def products() -> None:
        for ks in range(0, tk, MMA_K):
            for x in range(fm):
                b.emit(Mma("load", fa, const(x), As, (wr * wm + x * MMA_M) * lda + ks, lda))
            for y in range(fn):
                b.emit(Mma("load", fb, const(y), Bs, ks * ldb + wc * wn + y * MMA_N, ldb))
            for x in range(fm):
                for y in range(fn):
                    b.emit(Mma("mma", fc, const(x * fn + y), a=(fa, const(x)), b=(fb, const(y))))
    f.k_loop(lambda kc, r: r * lda + kc, lambda kc, c: kc * ldb + c, As, Bs, products)
    scratch = warp * (MMA_M * MMA_N)
    for x in range(fm):
        for y in range(fn):
            b.emit(Mma("store", fc, const(x * fn + y), Cs, scratch, MMA_N))
            b.emit(Barrier("warp"))
            with _unrolled(b, MMA_M * MMA_N // 32, "t") as t:
                e = b.local("e", lane + t * 32)
                f.result(wr * wm + x * MMA_M + e / MMA_N, wc * wn + y * MMA_N + e % MMA_N,
                         lambda: Cs[scratch + e], partial)
            b.emit(Barrier("warp"))
    k.names_used |= b.names
    grid, block = f.grid
    return b.body, grid, block


def _epilogue(b: Builder, g: Gemm, v: Expr) -> None:
    """What the Gemm makes of its element (g.i, g.j) whose product is v."""
    if g.accumulate:
        v = v + Load(g.c.buf, g.c.at(g.i, g.j))
    b.emit(Decl(g.value, v))
    if g.epilogue:
        for s in g.epilogue:
            b.emit(s)
    else:
        b.store(g.c.buf, g.c.at(g.i, g.j), g.value)


GEMV_MAX_K = 2048            # a longer dot product per work-item is worth a tiled, split launch


def _nest_over_c(g: Gemm, k: Kernel, hint: str, init, extent: int, start: int, term) -> Loop:
    """A spatial nest over C(i, j) whose body sums init(i, j) and term(i, j, r) for r in
    [start, extent), then runs the Gemm's epilogue on the sum."""
    b = Builder()
    b.names = set(k.names_used) | b.names
    with b.loops([g.M, g.N], ["i", "j"], role=SPATIAL) as (i, j):
        b.emit(Decl(g.i, i))
        for s in g.row_epilogue:
            b.emit(s)
        b.emit(Decl(g.j, j))
        total = b.accumulator(hint, init(i, j))
        with b.loop(extent, "r", role=REDUCTION, start=start) as r:
            b.assign(total, total + term(i, j, r))
        _epilogue(b, g, total)
    k.names_used |= b.names
    if not isinstance(b.body[0], Loop):         # a 1 x 1 C: b.loops made no loop, the launch needs one
        return Loop(Var(k.fresh("i")), const(1), b.body, role=SPATIAL)
    return b.body[0]


def gemv_loop(g: Gemm, k: Kernel) -> Loop:
    """A GEMM with few rows (a batch-1 layer, an LSTM step) as a spatial nest over C with each
    result's dot product inside: one work-item per result, consecutive work-items reading
    consecutive columns of B (coalesced) and the same row of A, then the Gemm's epilogue. No
    local memory, no barriers: tiles of 32 rows would mostly compute rows C does not have."""
    return _nest_over_c(g, k, "dot", lambda i, j: const(0.0, F32), g.K, 0,
                        lambda i, j, r: g.a.element(i, r) * g.b.element(r, j))


def split_sum_kernel(g: Gemm, shape: GemmShape, partial: Buffer, k: Kernel) -> Loop:
    """The K chunks' partial products summed, then the Gemm's epilogue: a spatial nest over C."""
    return _nest_over_c(g, k, "sum", lambda i, j: Load(partial, i * g.N + j), shape.split, 1,
                        lambda i, j, z: Load(partial, (z * g.M + i) * g.N + j))


class _unrolled:
    """`with _unrolled(b, n, "ri") as ri:` an unrolled spatial loop of n iterations."""

    def __init__(self, b: Builder, n: int, name: str):
        self.b = b
        self.loop = Loop(Var(b.fresh(name), I64), const(n), [], UNROLLED, const(0), SPATIAL)

    def __enter__(self) -> Var:
        self.b.emit(self.loop)
        self.b._stack.append(self.loop.body)
        return self.loop.var

    def __exit__(self, *exc) -> None:
        self.b._stack.pop()


def device_launches(ops) -> list[DeviceLaunch]:
    out = []
    for op in ops:
        if isinstance(op, DeviceLaunch):
            out.append(op)
        else:
            out += device_launches(op.body)
    return out


__all__ = ["schedule_gpu", "gemm_kernel", "DeviceLaunch", "DeviceLoop", "device_launches", "replace"]
