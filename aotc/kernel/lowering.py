"""Lower fusion groups to kernels (kernel IR), recording which graph values each reads and writes."""
from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Optional

import numpy as np

from ..fusion.groups import Group
from ..ir.graph import Graph, Value
from ..ops import registry
from .context import LowerCtx
from .ir import (SPATIAL, Buffer, Builder, Const, Expr, Gemm, If, Kernel, Load, Loop, Store, Var, const,
                 walk_buffers)


@dataclass
class KernelStep:
    """A kernel and the graph values its parameters are bound to."""
    kernel: Kernel
    group: Group
    binds: dict[str, str]                    # kernel param name -> graph value name

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
        buf = Buffer(self.kernel.fresh(c_ident(v.name)), v.dtype, tuple(v.shape), "in")
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


_MATH_NAMES = """exp exp2 expm1 log log2 log10 log1p sqrt cbrt pow hypot sin cos tan asin acos atan atan2
sinh cosh tanh asinh acosh atanh erf erfc tgamma lgamma floor ceil rint round trunc nearbyint fmod
remainder fabs fmax fmin fma fdim copysign nan frexp ldexp modf scalbn logb ilogb nextafter lrint
llrint lround llround isnan isinf isfinite signbit fpclassify""".split()
# Names a value must not take as a struct field or kernel parameter: C and C++ keywords (the
# header is also included from C++), macros and functions of the headers the generated code
# includes and calls, and the runtime's own aotc_ prefix.
_RESERVED = frozenset("""auto break case char const continue default do double else enum extern float
for goto if inline int long register restrict return short signed sizeof static struct switch typedef
union unsigned void volatile while _Bool _Complex _Imaginary bool true false asm class new delete this
template typename namespace operator private protected public virtual friend mutable explicit using
throw try catch nullptr constexpr decltype noexcept static_assert thread_local alignas alignof
char16_t char32_t wchar_t export and or not xor bitand bitor compl and_eq or_eq xor_eq not_eq
NULL NAN INFINITY HUGE_VAL HUGE_VALF EOF errno FILE stdin stdout stderr size_t ptrdiff_t
int8_t int16_t int32_t int64_t uint8_t uint16_t uint32_t uint64_t intptr_t uintptr_t
INT64_C UINT64_C abs labs malloc calloc realloc free abort exit memcpy memset memcmp fopen fclose
fread fwrite fgetc printf fprintf""".split()
                       + _MATH_NAMES + [m + "f" for m in _MATH_NAMES] + [m + "l" for m in _MATH_NAMES])


def c_ident(name: str, limit: int = 48) -> str:
    """A valid C identifier made from `name`, at most `limit` characters, that clashes with no
    keyword or name the generated code uses."""
    s = re.sub(r"[^0-9A-Za-z_]", "_", name).strip("_")
    s = re.sub(r"_+", "_", s)
    if len(s) > limit:
        s = s[-limit:].lstrip("_")
    if not s or s[0].isdigit() or s in _RESERVED or s.lower().startswith("aotc_"):
        s = "v_" + s
    return s


class _Params:
    """Names kernel parameters after the graph values they hold, unique within a kernel."""

    def __init__(self, b: Builder):
        self.by_value: dict[str, Buffer] = {}
        self.b = b

    def get(self, v: Value, role: str) -> Buffer:
        buf = self.by_value.get(v.name)
        if buf is not None:
            return buf
        name = self.b.fresh(c_ident(v.name))
        buf = Buffer(name, v.dtype, tuple(v.shape), role)
        self.by_value[v.name] = buf
        return buf


def lower_groups(g: Graph, groups: list[Group]) -> list[KernelStep]:
    """Every fusion group as a kernel that says what to compute (no target decisions)."""
    consumers = g.consumers()
    steps = []
    for grp in groups:
        if grp.view:
            continue
        steps.append(_lower_group(g, grp, consumers, len(steps)))
    return steps


def _stored(g: Graph, grp: Group, consumers) -> list[str]:
    inside = {id(n) for n in grp.nodes}
    out = []
    for n in grp.nodes:
        for o in n.outputs:
            if not o:
                continue
            if o in g.outputs or any(id(c) not in inside for c in consumers.get(o, [])):
                out.append(o)
    return out


def _lower_group(g: Graph, grp: Group, consumers, k: int) -> KernelStep:
    stored = _stored(g, grp, consumers)
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
                target_val = _chain_home(g, grp, stored, v)
                if target_val is not None:
                    buf = params.get(g.values[target_val], "out")
                else:
                    buf = Buffer(b.fresh(c_ident(o)), v.dtype, tuple(v.shape), "scratch")
                    scratch.append(buf)
            anchor_buf[o] = buf
            outs.append(buf)
        if op.lower is None:
            from ..errors import UnsupportedError
            raise UnsupportedError([f"{node.op_type} node {node.name!r}: no code generation for this case "
                                    "(its inputs were expected to be compile-time constants)"],
                                   "bind the inputs that feed it with --const or --shape")
        ctx = LowerCtx(node, g, ins, outs, b)
        op.lower(node, ctx)
        scratch.extend(ctx.scratch_buffers)

    b.body[:] = _finish_gemms(b.body)
    if grp.chain:
        _lower_chain(g, grp, stored, params, anchor_buf, b)

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


def _finish_gemms(stmts: list) -> list:
    """A Gemm whose op gave a result expression (bias, alpha/beta) stores it in its epilogue."""
    out = []
    for s in stmts:
        if isinstance(s, Gemm) and s.result is not None and not s.epilogue:
            s = replace(s, epilogue=[Store(s.c.buf, s.c.at(s.i, s.j), s.result)])
        elif isinstance(s, Loop):
            s = replace(s, body=_finish_gemms(s.body))
        elif isinstance(s, If):
            s = If(s.cond, _finish_gemms(s.then), _finish_gemms(s.orelse))
        out.append(s)
    return out


def _chain_home(g: Graph, grp: Group, stored: list[str], v: Value) -> Optional[str]:
    chain_outs = [o for n in grp.chain for o in n.outputs if o in stored]
    if len(chain_outs) == 1 and g.values[chain_outs[0]].dtype == v.dtype:
        return chain_outs[0]
    return None


def _lower_chain(g: Graph, grp: Group, stored, params: _Params, anchor_buf, b: Builder) -> None:
    """One loop nest over the group's shape computing the elementwise chain."""
    shape = tuple(g.values[grp.chain[-1].outputs[0]].shape)
    produced = {o for n in grp.chain for o in n.outputs}
    # operands read from memory: anchor outputs and values from outside the group
    operands: dict[str, Buffer] = {}
    scalars: dict[str, Expr] = {}
    for n in grp.chain:
        for i in n.inputs:
            if not i or i in produced or i in operands or i in scalars:
                continue
            v = g.values[i]
            if v.const is not None and v.size == 1:
                scalars[i] = _scalar(v)
            elif i in anchor_buf:
                operands[i] = anchor_buf[i]
            else:
                operands[i] = params.get(v, "in")
    outs = {o: params.get(g.values[o], "out") for o in stored if o in produced}

    rank = len(shape)
    def bstrides(vshape):
        vshape = (1,) * (rank - len(vshape)) + tuple(vshape)
        st, acc = [0] * rank, 1
        for d in range(rank - 1, -1, -1):
            st[d] = 0 if vshape[d] == 1 else acc
            acc *= vshape[d]
        return st

    all_strides = {name: bstrides(buf.shape) for name, buf in operands.items()}
    out_strides = bstrides(shape)
    dims = _merge_dims(shape, list(all_strides.values()) + [out_strides])
    loop_shape = [d for d, _ in dims]
    with b.loops(loop_shape, [f"i{k}" for k in range(len(loop_shape))], role=SPATIAL) as idx:
        def offset(st_full):
            off = const(0)
            for (extent, members), var in zip(dims, idx):
                off = off + var * st_full[members[-1]]
            return off

        # Operands are read where the chain uses them (an operand no node reads, like
        # CastLike's type-only input, is never loaded). Every value is computed into a local
        # before the first store, so an output written over an operand (in-place) cannot
        # change what a later node reads.
        env: dict[str, Expr] = dict(scalars)
        for name, buf in operands.items():
            env[name] = Load(buf, offset(all_strides[name]))
        out_off = offset(out_strides)
        for n in grp.chain:
            op = registry.get(n.op_type)
            args = [env[i] if i else None for i in n.inputs]
            val = op.pointwise(n, args)
            if not isinstance(val, (Const, Var)):
                val = b.local("t", val)
            env[n.outputs[0]] = val
        for o, buf in outs.items():
            b.store(buf, out_off, env[o])


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
