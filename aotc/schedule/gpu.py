"""The GPU schedule: how a kernel runs on a device with a grid of work-items (OpenCL, CUDA).

A fusion kernel becomes a short host program of device launches (`DeviceLaunch`) and host
loops (`DeviceLoop`), formed from the op's loop roles:
  * a `spatial` loop nest whose extents are numbers, or polynomials of run-time sizes (the grid
    then an expression of the run's sizes), is one launch: the nest is collapsed into one
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
A GEMM whose sizes are run-time ones comes in variants, each cut as a build fixed to a size in
its part of the range would cut it and launched where the run's sizes fall there
(`LaunchFormer.gemm_variants`, `DeviceLaunch.when`). Tiles and work-group sizes are the
target's [gpu] table; accumulation precision its [numerics].
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from ..errors import AotcError
from ..ir.dims import Dim, lower, range_points, upper
from ..kernel.ir import (BOUND, F32, I64, SPATIAL, Assign, BinOp, BufPtr, Buffer, Comment, Const, Decl, Expr, Gemm, GemmDest,
                         GpuIndex, If, Kernel, Load, Loop, Matrix, Mma, Rewriter, SizeVar, Stmt, Store, Var, as_dim, binop,
                         const, free_variables, upper_bound, walk_expr, walk_stmts, wrap)
from ..kernel.integer_gemm import expand_integer_gemms
from ..kernel.retype import widen_accumulators
from ..targets import GpuConfig, Target
from .direct import drop_unused_scratch, read_im2col_directly
from .gpu_gemm import gemm_kernel, gemm_shape, gemv_loop, mma_kernel, mma_shape, split_sum_kernel
from .gpu_group import work_group_form


@dataclass
class DeviceLaunch:
    """One launch: `grid` gives the work-items per axis, an int (a multiple of the block) or, over
    run-time dimensions, an index expression of their sizes that the host rounds up to whole
    work-groups; the kernel takes the host loop indices `scalars` after its buffers, then the
    run-time sizes it reads (Kernel.size_vars)."""
    kernel: Kernel
    scalars: list[Var]            # host loop indices the kernel takes, after its buffers
    grid: tuple                   # work-items per axis (an int, a multiple of block; or an Expr)
    block: tuple                  # work-group size per axis
    when: Expr | None = None      # a test of the run's sizes: launched only where it holds (a variant)


@dataclass
class DeviceLoop:
    var: Var
    extent: object                # an int, or a Dim (ir/dims.py) over the run's sizes
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
        former = LaunchFormer(k, t, params, groups=st.group.anchor is not None, tf32=tf32)
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


SMALL_GROUP_WORK = 32        # see LaunchFormer.group_work
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

    def visit_Gemm(self, gm: Gemm) -> Gemm:
        gm = self.generic(gm)
        return replace(gm, dest=None) if gm.dest is not None and gm.dest.buf.name == self.old.name else gm


def _rebase(stmts: list[Stmt], old: Buffer, new: Buffer, offset: Expr) -> list[Stmt]:
    """The statements with every access to `old` going to `new` at `offset` further on."""
    return _Rebase(old, new, offset).stmts(stmts)




def _loop_count(lp: Loop):
    """A loop's iteration count: an int, or a Dim (ir/dims.py) where its extent is a polynomial
    of run-time sizes (the grid then covers the run's count, the schedule's choices are made
    for the largest); None for any other extent, or a loop not starting at a constant."""
    if not isinstance(lp.start, Const):
        return None
    n = as_dim(lp.extent)
    return None if n is None else n - lp.start.value


def _positive(n) -> bool:
    """An iteration count (int or Dim) that is more than 0 at its largest."""
    return n is not None and upper(n) > 0


def _has_gemm(stmts) -> bool:
    return any(isinstance(s, Gemm) for s in walk_stmts(stmts))


def _reads_sizes_only(e: Expr, host_vars: list[Var]) -> bool:
    """Whether the host can evaluate `e`: it reads the run's sizes and host loop indices only."""
    host = {v.name for v in host_vars}
    return all(isinstance(v, SizeVar) or v.name in host for v in walk_expr(e) if isinstance(v, Var))


_OPPOSITE = {"<": ">=", ">=": "<", ">": "<=", "<=": ">", "==": "!=", "!=": "=="}


def _negated(cond: Expr) -> Expr:
    """not cond, as a comparison the other way where it is one."""
    if isinstance(cond, BinOp) and cond.op in _OPPOSITE:
        return binop(_OPPOSITE[cond.op], cond.a, cond.b)
    return binop("==", cond, const(0))


def _launched_when(ops: list, cond: Expr) -> list:
    """`ops` with every launch in them (host loops' too) run only where `cond` holds."""
    for op in ops:
        if isinstance(op, DeviceLoop):
            _launched_when(op.body, cond)
        else:
            op.when = cond if op.when is None else binop("&&", cond, op.when)
    return ops


def _has_spatial_loop(stmts) -> bool:
    return any(isinstance(s, Loop) and s.role == SPATIAL and _positive(_loop_count(s)) for s in walk_stmts(stmts))


class LaunchFormer:
    """Forms one fusion kernel's device program: walks its statements level by level (`form`)
    and makes each a launch or a host loop, as the module's docstring lists:
      * `single`: statements run by one work-item (a lone store, an ordered loop without a GEMM,
        statements passing values through mutable locals: `_units` keeps those together);
      * `spatial`: a nest of spatial loops of counted extent collapsed onto the grid, or given a
        work-group per iteration (`group_work`, schedule/gpu_group.py work_group_form) where the
        loops inside are worth sharing;
      * `gemm`: a Gemm's launches (tiled, TF32, few-row, split along K: schedule/gpu_gemm.py),
        batched over the grid's third axis for a nest of loops around it (`gemm_batch`);
      * a host loop (DeviceLoop) for an ordered loop around GEMMs or spatial nests, its index a
        scalar argument of the launches inside;
      * `distribute` / `with_private_copies`: a spatial loop whose iterations each fill their own
        scratch (Loop.private) given a copy per iteration, so that it becomes one launch.
    Decls and Assigns between loops are kept `pending` and recomputed inside each launch that
    reads them (`_needed`). `index` is the fusion kernel's number (the device kernels' names
    carry it); `groups` false keeps work-items from sharing loops (a kernel without an anchor
    may write over its input in place); `tf32` lets float32 GEMMs use `mma_kernel`."""

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
            elif isinstance(s, If) and _has_gemm([s]) and _reads_sizes_only(s.cond, host_vars):
                # a choice between two ways by the run's sizes (ops/nbits.py: a GEMM from some
                # rows on): each branch's launches run where the test says
                ops += _launched_when(self.form(s.then, host_vars, pending), s.cond)
                ops += _launched_when(self.form(s.orelse, host_vars, pending), _negated(s.cond))
            elif isinstance(s, Loop):
                ext = _loop_count(s)
                spread = self.distribute(s) if ext is not None and s.role == SPATIAL and _has_gemm(s.body) \
                    and self.gemm_batch(s) is None else None
                if ext is not None and s.role != SPATIAL and (_has_gemm(s.body) or _has_spatial_loop(s.body)) \
                        and upper(ext) <= self.p.host_loop_max and isinstance(s.start, Const):
                    body = self.form(s.body, host_vars + [s.var], pending)
                    if s.start.value:
                        raise NotImplementedError("host loops start at 0")
                    ops.append(DeviceLoop(s.var, ext, body))
                elif ext is not None and s.role == SPATIAL and self.gemm_batch(s) is not None:
                    batch, g = self.gemm_batch(s)
                    ops += self.gemm(g, host_vars, pending, batch)
                elif spread is not None:
                    ops += self.form(spread, host_vars, pending)
                elif ext is not None and s.role == SPATIAL and _has_gemm(s.body) and upper(ext) <= self.p.host_loop_max:
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
        stray = [v.name for v in free if v.name not in host and not isinstance(v, SizeVar)]
        if stray:
            raise AssertionError(f"{self.k.name}: {stray} defined outside the launch")
        bufs = [b for b in sorted(bufs, key=lambda b: self.rank.get(id(b), 1 << 30)) if b.role != "local"]
        name = f"{self.k.name}_{self.count}"
        self.count += 1
        kern = Kernel(name, f"{self.k.comment}: {what}", bufs, full, names_used=set(self.k.names_used))
        kern.index = self.index
        kern.scalars = [v for v in host_vars if v.name in {f.name for f in free}]      # (size_vars follow)
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
        if self.p.min_items and upper(items) < self.p.min_items:       # (over run-time sizes: at the largest)
            return min(self.p.group_min_work, SMALL_GROUP_WORK)
        return self.p.group_min_work

    def single(self, body, host_vars, pending) -> DeviceLaunch:
        coop = work_group_form(body, self.k.fresh, self.p.block, self.group_work(1), self.shuffle_warp) \
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
                and _loop_count(body[0]) is not None and not _has_gemm(body[0].body):
            nest.append(body[0])
            body = body[0].body
        extents = [_loop_count(lp) for lp in nest]
        total = 1
        for e in extents:
            total = total * e
        flat = Var(self.k.fresh("gid"), I64)
        decls: list[Stmt] = []
        inner = 1
        for lp, e in zip(reversed(nest), reversed(extents)):
            idx = flat / inner if isinstance(inner, Dim) or inner != 1 else flat
            if lp is not nest[0]:
                idx = idx % e
            decls.insert(0, Decl(lp.var, lp.start + idx if not (isinstance(lp.start, Const) and lp.start.value == 0)
                                 else idx))
            inner *= e
        coop = work_group_form(list(body), self.k.fresh, self.p.block, self.group_work(total), self.shuffle_warp) \
            if self.groups and share else None
        if coop is not None:
            # a work-group per iteration, its work-items sharing the loops inside
            # (exactly `total` groups: no guard around the body, whose barriers every
            # work-item of the group must reach)
            stmts, T, _ = coop
            body = [stmts[0], Decl(flat, GpuIndex("group.0"))] + decls + stmts[1:]
            kern, scalars = self._kernel(body, host_vars, pending, f"{total} work-groups of {T}")
            return DeviceLaunch(kern, scalars, (total * T if isinstance(total, int) else wrap(total) * T,), (T,))
        bound = Loop(flat, wrap(total), decls + list(body), BOUND, const(0), SPATIAL, "global.0")
        kern, scalars = self._kernel([bound], host_vars, pending, f"{total} work-items")
        blk = min(self.p.block, max(upper(total), 1))
        if isinstance(total, Dim):           # the run's count, rounded up to work-groups by the host
            return DeviceLaunch(kern, scalars, (wrap(total),), (blk,))
        return DeviceLaunch(kern, scalars, (-(-total // blk) * blk,), (blk,))

    def gemm(self, gm: Gemm, host_vars, pending, batch: tuple = ()) -> list[DeviceLaunch]:
        """A GEMM launch (over `batch`, spatial loops around the Gemm, on grid axis 2); a
        split-K GEMM also a second launch summing its chunks. Where the target allows TF32
        ([numerics] tf32) a float32 GEMM runs on tensor cores (`mma_kernel`). Over run-time
        dimensions, one variant per way of cutting it that sizes in the range call for, each
        launched where the run's sizes fall in its part of the range (`gemm_variants`)."""
        tensor = self.tf32 and gm.a.buf.value_dtype == F32 and gm.b.buf.value_dtype == F32
        variants = self.gemm_variants(gm, batch, tensor)
        depth = "".join(f"{e}x" for _, e in batch)
        sums = [shape.split * most for _, shape, most in variants if shape is not None and shape.split > 1]
        partial = None
        if sums:          # one buffer of K chunks' partial sums, for the variant that needs most
            partial = Buffer(self.k.fresh("partial"), F32, (max(sums),), "scratch")
            self.k.scratch.append(partial)
        out = []
        for when, shape, _ in variants:
            if shape is None:
                launches = [self.spatial(gemv_loop(gm, self.k), host_vars, pending, share=False)]
            else:
                part = partial if shape.split > 1 else None
                body, grid, block = (mma_kernel if tensor else gemm_kernel)(gm, shape, self.k, part)
                kern, scalars = self._kernel(body, host_vars, pending, f"GEMM {depth}{size_text(gm.M)}x"
                                             f"{size_text(gm.N)}x{size_text(gm.K)}")
                launches = [DeviceLaunch(kern, scalars, grid, block)]
                if part is not None:
                    launches.append(self.spatial(split_sum_kernel(gm, shape, part, self.k), host_vars, pending))
            for ln in launches:
                ln.when = when
            out += launches
        return out

    def gemm_variants(self, gm: Gemm, batch: tuple, tensor: bool) -> list[tuple]:
        """[(when, shape, most)]: how the GEMM is cut (a GemmShape; None: one work-item per result,
        `gemv_loop`), where (None: always; else a test of the run's sizes), and the most
        elements of C it computes there (what K chunks' partial sums take). A GEMM of fixed
        sizes has one. Over run-time dimensions, the cut a build fixed to each of a few sizes
        would make (ir/dims.py range_points: every symbol at the same place in its range)
        is made there; sizes whose cuts agree share one variant, and the run picks the variant
        by its multiply-adds, M x N x K x depth, against the geometric middle between the
        points where the cuts change."""
        M, N, K = (as_dim(x) for x in (gm.M, gm.N, gm.K))
        polynomial = None not in (M, N, K)
        work = M * N * K if polynomial else 1
        for _, e in batch:
            work = work * e
        syms = work.symbols() if isinstance(work, Dim) and polynomial else []

        def cut(at):          # at: M, N, K, depth of one variant (None: the largest)
            # (one work-item per result only for a fixed few rows: over a run-time M, the H200
            # ran BERT-base's one-token GEMMs, 768 results of 768 or 3072 products, 2x faster
            # in tiles split along K, docs/GPU.md)
            rows = upper_bound(gm.M) if at is None or isinstance(M, Dim) and M.hi > self.p.gemv_rows else at[0]
            if not batch and rows <= self.p.gemv_rows and upper_bound(gm.K) <= self.p.gemv_max_k \
                    and not (gm.a.packed or gm.b.packed):
                return None
            return (mma_shape if tensor else gemm_shape)(gm, self.p, batch, at)
        c_max = upper_bound(gm.M) * upper_bound(gm.N)
        if not syms:
            return [(None, cut(None), c_max)]
        points = []
        for at in range_points([M, N, K, *(e for _, e in batch)]):
            depth = math.prod(at[3:])
            points.append((at[0] * at[1] * at[2] * depth, cut(at[:3] + (depth,))))
        groups: list[list] = []          # [[first work, last work, cut]] in order
        for w, c in points:
            if groups and groups[-1][2] == c:
                groups[-1][1] = w
            else:
                groups.append([w, w, c])
        if len(groups) == 1:
            return [(None, groups[0][2], c_max)]
        bounds = [math.isqrt(a[1] * b[0]) for a, b in zip(groups, groups[1:])]
        key = wrap(work)
        out = []
        for i, (_, _, c) in enumerate(groups):
            lo = key > bounds[i - 1] if i else None
            hi = key <= bounds[i] if i < len(bounds) else None
            # C's elements in this variant's part of the range (what its K chunks' partial sums
            # take): M x N <= its multiply-adds over K, at K's smallest
            most = min(c_max, bounds[i] // max(lower(K), 1)) if i < len(bounds) and not batch else c_max
            out.append((hi if lo is None else lo if hi is None else binop("&&", lo, hi), c, most))
        return out

    def _nest(self, s: Loop) -> tuple[list[Loop], list[Stmt]]:
        """The spatial loops of counted extent from s inward, as long as each holds just the
        next, and the statements inside the innermost."""
        nest, body = [], [s]
        while len(body) == 1 and isinstance(body[0], Loop) and body[0].role == SPATIAL \
                and _positive(_loop_count(body[0])) and isinstance(body[0].start, Const) and body[0].start.value == 0:
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
        for lp in reversed(nest):          # (over run-time dims: a copy per iteration at the largest count)
            z = z + lp.var * depth
            depth *= upper(_loop_count(lp))
        if not private <= set(by_name) or sum(by_name[n].nbytes for n in private) * depth > EXPAND_MAX_BYTES:
            return None
        for name in private:
            old = by_name[name]
            new = Buffer(old.name, old.dtype, (depth * old.capacity,), old.role, old.space, old.compute)
            self.k.scratch[self.k.scratch.index(old)] = new
            body = _rebase(body, old, new, z * old.capacity)
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
            depth *= upper(_loop_count(lp))
        if depth > self.p.max_grid_z:
            return None
        return tuple((lp.var, _loop_count(lp)) for lp in nest), body[0]


def size_text(n) -> str:
    """An extent for the comments: 64, or its polynomial of run-time sizes (4*batch)."""
    d = as_dim(n)
    return str(d if d is not None else n)


def device_launches(ops) -> list[DeviceLaunch]:
    out = []
    for op in ops:
        if isinstance(op, DeviceLaunch):
            out.append(op)
        else:
            out += device_launches(op.body)
    return out


__all__ = ["schedule_gpu", "DeviceLaunch", "DeviceLoop", "device_launches"]
