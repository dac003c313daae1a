"""Work-group launches: each iteration of a spatial nest gets a whole work-group of T
work-items, which share the loops inside it. aotc/schedule/gpu.py uses this when the work
inside one iteration is large (an im2col row block, a LayerNorm or Softmax row) and the
one-work-item-per-iteration launch would leave the device nearly idle.

Inside the group body every statement is one of:
  * uniform: every work-item runs it alike (scalar statements, and the Ifs and serial loops
    that hold shared loops), so every barrier is reached by all work-items;
  * a shared loop: a spatial loop with nothing big and spatial inside, its iterations split
    across the work-items: iteration v goes to work-item (U + v) mod T, where U + v is the
    address its stores use. A work-item then owns the same elements in every shared loop,
    and loops that touch only owned elements need no barrier between them;
  * a split reduction: a reduction loop whose accumulators only combine (`acc = acc + e`,
    product, max, min) and whose stores are owned, split like a shared loop; each work-item
    accumulates its part, the parts are combined in `local` memory (a tree, a barrier per
    level) and every work-item gets the result; on a target whose warps shuffle registers,
    each warp combines its parts by shuffles first (no memory, no barrier) and only the
    warps' totals meet in local memory (one barrier);
  * a single statement: anything else that stores runs in work-item 0 alone.
A buffer someone writes is a *hazard* when one of its accesses is not owned; a barrier
follows every shared loop, split reduction or single statement that touches a hazard.
Anything this cannot make safe (a store inside a shared loop to a private array, a
uniform read of a buffer the group writes, a Fail that would leave work-items at a
barrier) keeps the one-work-item launch.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..ir.dims import upper
from ..kernel.ir import (I64, LOCAL, PRIVATE, REDUCTION, SPATIAL, WARP_XOR, Assign, Barrier, BinOp, Buffer, Call,
                         CallStmt, Cast, Comment, Const, Decl, Expr, Fail, Gemm, GpuIndex, If, Load, Loop, Select, Stmt,
                         Store, Var, as_dim, binop, const, map_expr, select, stmt_exprs, walk_expr, walk_stmts)

SMALL_INNER = 32           # a spatial loop whose inner spatial loops are all shorter is shared whole
DYNAMIC_EXTENT = 64        # the guess for a loop whose extent is computed at run time


class _Reject(Exception):
    """The body cannot run as a work-group: keep the one-work-item launch."""


def _extent(lp: Loop) -> int | None:
    """A loop's iteration count, at its largest over run-time dimensions; None when the kernel
    computes it."""
    if isinstance(lp.extent, Const) and isinstance(lp.start, Const):
        return max(lp.extent.value - lp.start.value, 0)
    n = as_dim(lp.extent)
    if n is not None and isinstance(lp.start, Const):
        return max(upper(n - lp.start.value), 0)
    return None


def _iterations(stmts: list[Stmt]) -> int:
    """Loop iterations a statement list runs (innermost ones counted), at least 1."""
    n = 0
    for s in stmts:
        if isinstance(s, Loop):
            e = _extent(s)
            n += (e if e is not None else DYNAMIC_EXTENT) * _iterations(s.body)
        elif isinstance(s, If):
            n += max(_iterations(s.then), _iterations(s.orelse))
    return max(n, 1)


def _key(e) -> str:
    """A structural key of an expression (equal keys: the same value)."""
    if isinstance(e, Const):
        return f"{e.value}:{e.dtype}"
    if isinstance(e, Var):
        return e.name
    if isinstance(e, GpuIndex):
        return e.axis
    if isinstance(e, Load):
        return f"{e.buf.name}[{_key(e.index)}]"
    if isinstance(e, BinOp):
        return f"({_key(e.a)}{e.op}{_key(e.b)})"
    if isinstance(e, Cast):
        return f"({e.dtype}){_key(e.a)}"
    return f"<{id(e)}>"


def _coefficient(e: Expr, v: Var) -> int | None:
    """The integer coefficient of v in e when e is affine in v (0 when v is absent), else None."""
    if isinstance(e, Var):
        return 1 if e.name == v.name else 0
    if isinstance(e, BinOp) and e.op in ("+", "-", "*"):
        a, b = _coefficient(e.a, v), _coefficient(e.b, v)
        if a is None or b is None:
            return None
        if e.op == "+":
            return a + b
        if e.op == "-":
            return a - b
        if a == 0 and b == 0:
            return 0
        if b == 0 and isinstance(e.b, Const):
            return a * int(e.b.value)
        if a == 0 and isinstance(e.a, Const):
            return b * int(e.a.value)
        return None
    return 0 if all(not (isinstance(x, Var) and x.name == v.name) for x in walk_expr(e)) else None


def _at_zero(e: Expr, v: Var) -> Expr:
    """e with v = 0, folded."""
    def f(x):
        if isinstance(x, Var) and x.name == v.name:
            return const(0, x.dtype)
        return binop(x.op, x.a, x.b) if isinstance(x, BinOp) else x
    return map_expr(e, f)


def _multiple(e: Expr, T: int) -> bool:
    """e is a multiple of T whatever its variables are."""
    if isinstance(e, Const):
        return int(e.value) % T == 0
    if isinstance(e, BinOp) and e.op in ("+", "-"):
        return _multiple(e.a, T) and _multiple(e.b, T)
    if isinstance(e, BinOp) and e.op == "*":
        return _multiple(e.a, T) or _multiple(e.b, T)
    return False


def _accesses(stmts: list[Stmt]):
    """(buffer, index, is_store) of every load and store in the statements, at any depth."""
    for s in walk_stmts(stmts):
        if isinstance(s, Store):
            yield s.buf, s.index, True
        for e in stmt_exprs(s):
            for x in walk_expr(e):
                if isinstance(x, Load) and not (isinstance(s, Store) and x.buf is s.buf and x.index is s.index):
                    yield x.buf, x.index, False


def _declared(stmts: list[Stmt]) -> set[str]:
    out = set()
    for s in walk_stmts(stmts):
        if isinstance(s, Decl):
            out.add(s.var.name)
        elif isinstance(s, Loop):
            out.add(s.var.name)
    return out


def _combine(s: Assign, accs: set[str]):
    """(op, e) when s is `acc = acc OP e` with e free of every accumulator, else None. op is
    '+', '*', 'max', 'min', or 'smax' / 'smin' for select(e > acc, e, acc) and its mirror."""
    val, name = s.value, s.var.name
    if isinstance(val, Cast) and val.dtype == s.var.dtype:
        val = val.a

    def is_acc(x):
        return isinstance(x, Var) and x.name == name

    def free(x):
        return all(not (isinstance(y, Var) and y.name in accs) for y in walk_expr(x))

    if isinstance(val, BinOp) and val.op in ("+", "*", "max", "min"):
        for a, b in ((val.a, val.b), (val.b, val.a)):
            if is_acc(a) and free(b):
                return val.op, b
    if isinstance(val, Select) and isinstance(val.cond, BinOp) and val.cond.op in ("<", "<=", ">", ">="):
        c, e = val.cond, val.a
        if is_acc(val.b) and free(e):
            greater = c.op in (">", ">=")
            if _key(c.a) == _key(e) and is_acc(c.b):
                return ("smax" if greater else "smin"), e
            if is_acc(c.a) and _key(c.b) == _key(e):
                return ("smin" if greater else "smax"), e
    return None


def _combiner(op: str, a: Expr, b: Expr) -> Expr:
    if op in ("+", "*", "max", "min"):
        return binop(op, a, b)
    return select(b > a, b, a) if op == "smax" else select(b < a, b, a)


@dataclass
class _Split:
    """A loop split across the group: a shared spatial loop, or a reduction (accs set)."""
    loop: Loop
    base: Expr                                 # U: iteration v goes to work-item (U + v) mod T
    owned: set = field(default_factory=set)    # written buffers all of whose accesses here are owned
    touched: set = field(default_factory=set)  # buffers accessed (names)
    accs: list = field(default_factory=list)   # (Var, op) of a split reduction


@dataclass
class _Serial:
    """A uniform loop or If holding split loops."""
    stmt: Stmt
    bodies: list                               # planned statement lists (one per child list)


@dataclass
class _Single:
    stmt: Stmt
    touched: set = field(default_factory=set)


class _Planner:
    def __init__(self, body: list[Stmt]):
        self.written = {s.buf.name for s in walk_stmts(body) if isinstance(s, Store)}
        self.bufs = {b.name: b for b, _, _ in _accesses(body)}
        self.non_owned: set[str] = set()       # written buffers with an access not owned
        self.work = 0                          # iterations split across the group
        self.widest = 0                        # the longest split loop (work-items worth using)
        for s in walk_stmts(body):
            if isinstance(s, (Gemm, Barrier, CallStmt)):
                raise _Reject(type(s).__name__)
        for b in self.bufs.values():
            if b.per_thread or b.space == LOCAL:
                raise _Reject(f"buffer {b.name}")

    # -------------------------------------------------------------- classification
    def plan(self, stmts: list[Stmt], scale: int = 1) -> list:
        out = []
        for s in stmts:
            if isinstance(s, Comment):
                out.append(s)
            elif isinstance(s, (Decl, Assign)):
                self._uniform_reads(s)
                out.append(s)
            elif isinstance(s, Loop):
                out.append(self._loop(s, scale))
            elif isinstance(s, Fail):
                out.append(s)               # every work-item stops alike
            elif isinstance(s, If):
                self._uniform_reads(s)
                if not any(isinstance(x, Store) for x in walk_stmts([s])) and not self._holds_split(s):
                    for x in walk_stmts(s.then + s.orelse):      # a check, or scalars: uniform
                        self._uniform_reads(x)
                    out.append(s)
                elif self._holds_split(s):
                    out.append(_Serial(s, [self.plan(s.then, scale), self.plan(s.orelse, scale)]))
                else:
                    out.append(self._single(s))
            elif isinstance(s, Store):
                out.append(self._single(s))
            else:
                raise _Reject(type(s).__name__)
        return out

    def _uniform_reads(self, s: Stmt) -> None:
        for e in stmt_exprs(s):
            for x in walk_expr(e):
                if isinstance(x, Load) and x.buf.name in self.written:
                    raise _Reject(f"uniform read of {x.buf.name}")

    def _holds_split(self, s: Stmt) -> bool:
        return any(isinstance(x, Loop) and x.role in (SPATIAL, REDUCTION) for x in walk_stmts([s]) if x is not s)

    def _loop(self, lp: Loop, scale: int):
        self._uniform_reads(lp)
        ext = _extent(lp)
        n = ext if ext is not None else DYNAMIC_EXTENT
        work = scale * n * _iterations(lp.body)
        if lp.role == SPATIAL and self._share_whole(lp):
            return self._split(lp, work, [])
        if lp.role == REDUCTION:
            accs = self._reduction(lp)
            if accs is not None:
                return self._split(lp, work, accs)
        if self._holds_split(lp):
            # every work-item runs this loop (locals it assigns stay uniform), and the
            # statements inside are planned alike
            return _Serial(lp, [self.plan(lp.body, scale * n)])
        if any(isinstance(x, Store) for x in walk_stmts(lp.body)):
            return self._single(lp)
        for x in walk_stmts(lp.body):       # a loop of scalars every work-item runs
            if not isinstance(x, Comment):
                self._uniform_reads(x)
        return lp

    def _share_whole(self, lp: Loop) -> bool:
        """Split this spatial loop (each work-item runs its iterations' bodies serially) when no
        spatial loop inside it is worth splitting instead."""
        for x in walk_stmts(lp.body):
            if isinstance(x, Loop) and x.role == SPATIAL:
                e = _extent(x)
                if e is None or e >= SMALL_INNER:
                    return False
        return True

    def _reduction(self, lp: Loop):
        """The accumulators [(Var, op)] when the reduction can be split, else None."""
        inner = _declared(lp.body)
        accs: dict[str, tuple] = {}
        assigns = [x for x in walk_stmts(lp.body) if isinstance(x, Assign) and x.var.name not in inner]
        names = {a.var.name for a in assigns}
        for a in assigns:
            c = _combine(a, names)
            if c is None:
                return None
            if accs.setdefault(a.var.name, (a.var, c[0]))[1] != c[0]:
                return None
        # the accumulators are read only in their own combining statements
        for x in walk_stmts(lp.body):
            if isinstance(x, Assign) and x.var.name in names:
                continue
            for e in stmt_exprs(x):
                if any(isinstance(y, Var) and y.name in names for y in walk_expr(e)):
                    return None
        # iterations must not meet in memory: every access to a written buffer is owned
        for b, index, _ in _accesses(lp.body):
            if b.name in self.written and not self._owned(index, lp.var, inner):
                return None
        return list(accs.values())

    def _owned(self, index: Expr, v: Var, inner: set[str]) -> bool:
        if any(isinstance(x, Var) and x.name in inner for x in walk_expr(index)):
            return False
        return _coefficient(index, v) == 1

    def _split(self, lp: Loop, work: int, accs: list) -> _Split:
        inner = _declared(lp.body)
        if not accs and any(isinstance(x, Assign) and x.var.name not in inner for x in walk_stmts(lp.body)):
            raise _Reject("a spatial loop assigns a local of the group")
        base: Expr | None = None
        owned, touched = set(), set()
        for b, index, is_store in _accesses(lp.body):
            touched.add(b.name)
            if b.space == PRIVATE:
                if is_store:
                    raise _Reject(f"store to private {b.name} in a shared loop")
                continue
            if b.name not in self.written:
                continue
            ok = self._owned(index, lp.var, inner)
            if ok:
                u = _at_zero(index, lp.var)
                if base is None:
                    base = u
                ok = _key(u) == _key(base)
            if ok:
                owned.add(b.name)
            else:
                self.non_owned.add(b.name)
        for b, index, _ in _accesses(lp.body):      # owned only if every access is
            if b.name in owned and (not self._owned(index, lp.var, inner) or _key(_at_zero(index, lp.var)) != _key(base)):
                owned.discard(b.name)
                self.non_owned.add(b.name)
        self.work += work
        ext = _extent(lp)
        self.widest = max(self.widest, ext if ext is not None else 4 * DYNAMIC_EXTENT)
        return _Split(lp, base if base is not None else const(0), owned, touched, accs)

    def _single(self, s: Stmt) -> _Single:
        inner = _declared([s])
        if any(isinstance(x, Assign) and x.var.name not in inner for x in walk_stmts([s])):
            raise _Reject("a single statement assigns a uniform local")
        touched = set()
        for b, _, is_store in _accesses([s]):
            touched.add(b.name)
            if b.space == PRIVATE and is_store:
                raise _Reject(f"store to private {b.name} in work-item 0 alone")
            if b.name in self.written:
                self.non_owned.add(b.name)
        return _Single(s, touched)


SHUFFLED = {"float32", "float64", "int32", "int64"}     # what a warp shuffle moves


class _Emitter:
    def __init__(self, T: int, tid: Var, hazards: set[str], fresh, warp: int = 0):
        self.T, self.tid, self.hazards, self.fresh, self.warp = T, tid, hazards, fresh, warp
        self.reds: dict = {}

    def emit(self, plan: list) -> list[Stmt]:
        out: list[Stmt] = []
        known: dict[str, object] = {}       # locals declared with a constant, not assigned since
        for p in plan:
            if isinstance(p, Decl) and isinstance(p.init, Const):
                known[p.var.name] = p.init.value
            elif isinstance(p, Assign):
                known.pop(p.var.name, None)
            if isinstance(p, _Split):
                out += self._split(p, known)
                for var, _ in p.accs:
                    known.pop(var.name, None)
                if p.touched & self.hazards:
                    out.append(Barrier("global"))
            elif isinstance(p, _Single):
                out += [If(self.tid.eq(0), [p.stmt]), Barrier("global")]
            elif isinstance(p, _Serial):
                s = p.stmt
                if isinstance(s, Loop):
                    out.append(Loop(s.var, s.extent, self.emit(p.bodies[0]), s.kind, s.start, s.role, s.axis))
                else:
                    out.append(If(s.cond, self.emit(p.bodies[0]), self.emit(p.bodies[1])))
            else:
                out.append(p)
        return out

    def _split(self, p: _Split, known: dict) -> list[Stmt]:
        T, lp = self.T, p.loop
        pre: list[Stmt] = []
        saved = {}
        for var, op in p.accs:
            if op in ("+", "*") and known.get(var.name) != (0 if op == "+" else 1):
                # each work-item sums its part from the identity; the value before the loop
                # joins the group's total
                saved[var.name] = Var(self.fresh(f"{var.name}_in"), var.dtype)
                pre += [Decl(saved[var.name], var), Assign(var, const(0 if op == "+" else 1, var.dtype))]
        # the first iteration v >= start with (base + v) mod T == lid, then every T-th
        a = binop("+", p.base, lp.start)
        if _multiple(a, T):
            first: Expr = binop("+", lp.start, self.tid)
        elif _multiple(p.base, T) and isinstance(lp.start, Const):
            shift = (-int(lp.start.value)) % T
            first = binop("+", lp.start, binop("%", binop("+", self.tid, const(shift)), const(T)))
        else:
            first = binop("+", lp.start, binop("%", binop("+", binop("%", binop("-", self.tid, a), const(T)),
                                                          const(T)), const(T)))
        out = pre + [Loop(lp.var, lp.extent, list(lp.body), lp.kind, first, lp.role, step=T)]
        if p.accs:
            out += self._tree(p.accs, saved)
        return out

    def _parts(self, accs, n: int) -> list[Buffer]:
        """A local array of n parts per accumulator (shared by the group's reductions)."""
        bufs = []
        for i, (var, op) in enumerate(accs):
            key = (i, var.dtype.str, n)
            if key not in self.reds:
                self.reds[key] = Buffer(self.fresh("part"), var.dtype, (n,), "local", LOCAL)
            bufs.append(self.reds[key])
        return bufs

    def _tree(self, accs, saved) -> list[Stmt]:
        if self.warp and self.T % self.warp == 0 and all(var.dtype.name in SHUFFLED for var, _ in accs):
            return self._warps(accs, saved)
        T, tid = self.T, self.tid
        bufs = self._parts(accs, T)
        out: list[Stmt] = [Store(b, tid, var) for b, (var, _) in zip(bufs, accs)] + [Barrier("local")]
        step = T // 2
        while step:
            out.append(If(tid < step, [Store(b, tid, _combiner(op, Load(b, tid), Load(b, binop("+", tid, const(step)))))
                                       for b, (_, op) in zip(bufs, accs)]))
            out.append(Barrier("local"))
            step //= 2
        for b, (var, op) in zip(bufs, accs):
            total = Load(b, const(0))
            out.append(Assign(var, _combiner(op, saved[var.name], total) if var.name in saved else total))
        out.append(Barrier("local"))          # the parts are read before anyone writes them again
        return out

    def _warps(self, accs, saved) -> list[Stmt]:
        """The parts combined by shuffles within each warp (a butterfly: lane l takes lane l^m's
        value for m = 16, 8, ... 1), then lane 0 of each warp publishes its warp's total and
        every work-item combines the totals in warp order, so all agree on the result."""
        W, tid = self.warp, self.tid
        out: list[Stmt] = []
        m = W // 2
        while m:
            for var, op in accs:
                # every lane shuffles (a shuffle inside a select would run in some lanes only)
                other = Var(self.fresh(f"{var.name}_x{m}"), var.dtype)
                out.append(Decl(other, Call(WARP_XOR, (var, const(m, I64)), var.dtype)))
                out.append(Assign(var, _combiner(op, var, other)))
            m //= 2
        n = self.T // W
        bufs = self._parts(accs, n)
        out.append(If(binop("%", tid, const(W)).eq(0), [Store(b, binop("/", tid, const(W)), var)
                                                         for b, (var, _) in zip(bufs, accs)]))
        out.append(Barrier("local"))
        for b, (var, op) in zip(bufs, accs):
            # a loop over the warps (one expression would repeat its operands when the
            # combiner is a select)
            total, w = Var(self.fresh(f"{var.name}_warps"), var.dtype), Var(self.fresh("w"), I64)
            out.append(Decl(total, Load(b, const(0))))
            if n > 1:
                out.append(Loop(w, const(n), [Assign(total, _combiner(op, total, Load(b, w)))], start=const(1)))
            out.append(Assign(var, _combiner(op, saved[var.name], total) if var.name in saved else total))
        out.append(Barrier("local"))          # the totals are read before anyone writes them again
        return out


def work_group_form(body: list[Stmt], fresh, max_threads: int = 256, min_work: int = 256, warp: int = 0):
    """(statements for a work-group of T work-items, T, the local-index Var they use) for a
    group body, or None when one work-item per iteration is the better (or only safe) launch:
    the body cannot be shared safely, or it shares fewer than `min_work` loop iterations.
    A Fail inside stops one work-item: allowed only where the group has no barrier. `warp`:
    the warp width when reductions may combine by warp shuffles (0: local memory only)."""
    try:
        planner = _Planner(body)
        plan = planner.plan(body)
    except _Reject:
        return None
    if planner.work < min_work:
        return None
    T = 32
    while T < min(planner.widest, max_threads):
        T *= 2
    T = min(T, max_threads)
    tid = Var(fresh("lid"), I64)
    out = _Emitter(T, tid, planner.non_owned, fresh, warp).emit(plan)
    while out and isinstance(out[-1], Barrier):
        out.pop()
    walk = list(walk_stmts(out))
    if any(isinstance(x, Fail) for x in walk) and any(isinstance(x, Barrier) for x in walk):
        return None          # a work-item stopping early would leave the others at a barrier
    return [Decl(tid, GpuIndex("local.0"))] + out, T, tid
