"""Control flow turned into plain nodes as shape inference reaches it (aotc/passes/infer.py
hands each node to `expand` first).

An If whose condition is a compile-time constant (an initializer, a --const input, or folded
from shapes, as exporters' `if x.shape[0] == 1` become) is replaced by the nodes of the
branch it takes: the branch's values get fresh names, its initializers become constants, the
names it reads from enclosing scopes stay as they are, and Identity nodes carry its outputs to
the If's. A branch may hold Ifs of its own: they are inlined the same way when shape
inference reaches them, resolving the names they read through the scopes around them.

An If whose condition is known only at run time gets both branches inlined, then one Where
per output choosing the then-branch's value or the else-branch's by the condition, marked
BRANCH_ATTR (the branches' outputs must agree in shape and type: the plan is static). A branch
that cannot be shaped at the compiled input sizes (a Reshape or an LSTM meant for another input
length, as a model that serves two sample rates has) does not fail the compile when the other
branch can be: shape inference drops its nodes, and its outputs come from an aotc.BranchFail,
whose kernel, run only when the If takes that branch, stops the run with AOTC_ERR_BRANCH.
passes/branches.py later finds which kernels each branch needs, and the host program runs
them only when the condition says so: the branch not taken is not computed.

A Loop whose trip count is a compile-time constant (or whose condition folds to a constant
in every iteration) is unrolled: iteration i is the body with the iteration number i, the
condition and the carried values of iteration i - 1 bound to its inputs; the next iteration is
added only once shape inference has inferred (and folded) this one, so that a condition the
body computes decides. The scan outputs are the iterations' values stacked on a new first
axis. A Scan is unrolled over its scan inputs' length (a static shape): each step reads its
slices (Gather at the step, or at length - 1 - step for a reversed input), and the scan
outputs are stacked at their axes, in reverse for reversed outputs. At most MAX_UNROLL
iterations are unrolled: each is a copy of the body.

A Loop whose trip count is known only at run time, or whose condition is once it is no longer
a constant, or that has run MAX_UNROLL iterations, runs its remaining iterations in the host
program (host_loop, passes/loops.py):
the body inlined once between two Carry nodes that copy the loop's state into storage of its
own and the next iteration's state over it. Its carried values must keep their shapes, and it
may not have scan outputs (their length would be known only at run time).
"""
from __future__ import annotations

import numpy as np

from ..errors import ModelError, ShapeError, UnsupportedError
from ..ir.graph import Graph, Node, Subgraph, Value, subgraphs
from ..ir import dims
from ..ir.internal import (ASSUME_SIZES, BRANCH_ATTR, BRANCH_FAIL, CARRY, IF_MERGE, LOOP_CLOSE, LOOP_STEP, SCOPE_ATTR,
                           SPECIALIZED_ATTR)
from . import decompose, sequences


def constant_condition(g: Graph, n: Node) -> bool | None:
    """The If's condition when it is known at compile time, else None."""
    if not n.inputs or not n.inputs[0] or n.inputs[0] not in g.values:
        raise ShapeError(f"If node {n.name!r}: the condition input is required")
    c = _const_scalar(g, n.inputs[0], n, "the condition")
    return None if c is None else bool(c)


def _inline(g: Graph, graph: Subgraph, scope: dict, prefix: str, bind: dict, owner: Node,
            what: str) -> tuple[list[Node], list[str]]:
    """The nodes of `graph` renamed into `g` (fresh names under `prefix`), its formal inputs
    read as the names `bind` gives them, its initializers made constants of `g`, and the names
    its outputs have then. `scope` maps the names of the graphs around `graph` that were
    renamed; the nodes holding subgraphs carry the whole renaming along (SCOPE_ATTR)."""
    scope = dict(scope)
    scope.update(bind)
    label = f"{owner.op_type} node {owner.name!r}"
    for kind, name, why in graph.unreadable:
        if kind == "sparse":
            raise ModelError(f"{label}: sparse initializer {name!r} in its {what}")
    for kind, name, why in graph.unreadable:
        raise ModelError(f"{label}: initializer {name!r} of its {what}: {why}")
    for name, arr in graph.initializers.items():
        scope[name] = g.add_const(arr, prefix + name)
    produced: set[str] = set(bind.values())      # (bound names may come from nodes not inferred yet)

    def resolve(name: str) -> str:
        if not name:
            return name
        name = scope.get(name, name)
        if name not in g.values and name not in produced:
            raise ModelError(f"{label}: its {what} reads {name!r}, which no enclosing scope defines")
        return name

    nodes: list[Node] = []
    for k, p in enumerate(graph.nodes):
        attrs = {key: _fresh(v) for key, v in p.attrs.items()}
        inputs = [resolve(i) for i in p.inputs]
        outputs = []
        for o in p.outputs:
            if o:
                scope[o] = g.fresh_name(prefix + o)
                produced.add(scope[o])
            outputs.append(scope[o] if o else "")
        if subgraphs(p):
            attrs[SCOPE_ATTR] = dict(scope)
        nodes.append(Node(p.op_type, inputs, outputs, attrs, prefix + (p.name or f"{p.op_type}_{k}"), p.domain))
    return nodes, [resolve(o) for o in graph.outputs]


def _fresh(v):
    """An attribute value of an inlined node, its own copy (as each inline once read it afresh
    from the model); subgraphs are shared, nothing changes them."""
    if isinstance(v, np.ndarray):
        return v.copy()
    if isinstance(v, list):
        return [_fresh(x) for x in v]
    return v


def _subgraph(n: Node, key: str) -> Subgraph:
    graph = n.attr(key)
    if not isinstance(graph, Subgraph):
        raise ModelError(f"{n.op_type} node {n.name!r} has no {key} graph")
    return graph




def inline_both(g: Graph, n: Node) -> list[Node]:
    """An If decided at run time: both branches' nodes, renamed into `g`, and an IF_MERGE node
    after them that makes the If's outputs once their shapes are known (merge_branches)."""
    _scalar(g, n, n.inputs[0], "the condition", np.bool_, [])      # (checked now, made a scalar later)
    nodes, outs = [], []
    for key in ("then_branch", "else_branch"):
        branch = _subgraph(n, key)
        if len(branch.outputs) != len(n.outputs):
            raise ModelError(f"If node {n.name!r}: its {key} has {len(branch.outputs)} outputs, the node "
                             f"{len(n.outputs)}")
        body, names = _inline(g, branch, n.attr(SCOPE_ATTR, {}), branch_prefix(n, key), {}, n, key)
        nodes += body
        outs.append(names)
    return nodes + [Node(IF_MERGE, [], [], {"if": n, "then": outs[0], "else": outs[1], "failed": {}},
                         f"{n.name}/merge")]


def branch_prefix(n: Node, key: str) -> str:
    """What the names of the nodes inlined from If `n`'s branch `key` begin with (the nodes its
    own Ifs and Loops become too)."""
    return f"{n.name}/{key[:4]}/"


MAX_SPECIALIZED = 8     # sizes of a run-time dim a branch is tried at (specialize_branch)


def specialize_branch(g: Graph, merge: Node, key: str) -> list[Node] | None:
    """Run-time If's branch `key` could not be shaped over the run's sizes (a Reshape to one chunk
    length, as a model serving two sample rates has): when a run-time dim its outer inputs have
    takes at most MAX_SPECIALIZED sizes, the branch becomes, in place of its nodes, an If on the
    run's size: for each size v, the branch reading those inputs through an aotc.AssumeSizes
    (their shapes with the dim at v), else the next size, and last the branch as it was (which
    fails again and becomes the aotc.BranchFail of unshapeable_branch). The copies that cannot
    be shaped at their size fail alike, so only the sizes the branch was written for run it.
    Returns the nodes to infer in place of the branch's; None where no dim qualifies (or the
    branch was specialized before)."""
    n = merge.attrs["if"]
    done = merge.attrs.setdefault("specialized", set())
    if key in done or n.attr(SPECIALIZED_ATTR):
        return None
    branch = _subgraph(n, key)
    scope = n.attr(SCOPE_ATTR, {})
    outer = sorted(x for x in branch.free_names() if scope.get(x, x) in g.values)
    # the first run-time dim of few sizes in an outer input's shape, and where it is read from
    found = next(((sym, x, a, d) for x in outer for a, d in enumerate(g.values[scope.get(x, x)].shape)
                  if isinstance(d, dims.Dim) for sym in d.symbols()
                  if (sym.hi - sym.lo) // sym.multiple + 1 <= MAX_SPECIALIZED), None)
    if found is None:
        return None
    done.add(key)
    sym, probe, axis, probe_dim = found
    sizes = list(range(sym.lo, sym.hi + 1, sym.multiple))
    fixed = [x for x in outer if any(isinstance(d, dims.Dim) and sym in d.symbols()
                                     for d in g.values[scope.get(x, x)].shape)]

    def at(v: int) -> Subgraph:               # the branch reading `fixed` with sym at v
        tag = f"@{sym.name}={v}"
        assume = [Node(ASSUME_SIZES, [x], [x + tag], {"sizes": ((sym.name, v),)}, f"assume{tag}/{x}") for x in fixed]
        renamed = [Node(m.op_type, [i + tag if i in fixed else i for i in m.inputs], list(m.outputs), dict(m.attrs),
                        m.name, m.domain) for m in branch.nodes]
        return Subgraph(list(branch.inputs), list(branch.outputs), assume + renamed, dict(branch.initializers),
                        list(branch.unreadable))

    def chain(rest: list[int]) -> Subgraph:
        if not rest:
            return branch
        v = rest[0]
        tag = f"{sym.name}={v}"
        outs = [f"{o}@{tag}" for o in branch.outputs]
        nodes = [Node("Shape", [probe], [f"shape@{tag}"], {"start": axis, "end": axis + 1}, f"shape@{tag}"),
                 Node("Equal", [f"shape@{tag}", f"size@{tag}"], [f"is@{tag}"], {}, f"is@{tag}"),
                 Node("Squeeze", [f"is@{tag}"], [f"cond@{tag}"], {}, f"cond@{tag}"),
                 Node("If", [f"cond@{tag}"], outs, {"then_branch": at(v), "else_branch": chain(rest[1:]),
                                                   SPECIALIZED_ATTR: True}, f"if@{tag}")]
        size = np.array([probe_dim.evaluate({sym.name: v})], np.int64)
        return Subgraph([], outs, nodes, {f"size@{tag}": size})

    body, names = _inline(g, chain(sizes), scope, branch_prefix(n, key), {}, n, key)
    merge.attrs["then" if key == "then_branch" else "else"] = names
    return body


def unshapeable_branch(merge: Node, key: str, reason: str) -> None:
    """Shape inference found that run-time If's branch `key` cannot be shaped at the compiled
    sizes (`reason`); merge_branches makes its outputs an aotc.BranchFail, which stops the run
    with a status if the If ever takes it."""
    merge.attrs["failed"][key] = reason


def merge_branches(g: Graph, m: Node) -> list[Node]:
    """The If's outputs as Where nodes over its condition (as a scalar), once both branches are
    inferred: each output's two values must have one type and one shape."""
    n = m.attrs["if"]
    failed = m.attrs["failed"]
    if len(failed) == 2:
        raise ShapeError(f"If node {n.name!r}: neither branch can be shaped at these input sizes: "
                         f"then_branch: {failed['then_branch']}; else_branch: {failed['else_branch']}",
                         "fix the input sizes with --shape; or, for branches written for different sizes, "
                         f"declare a run-time dim of at most {MAX_SPECIALIZED} sizes (LO..HI%M) that takes them")
    nodes: list[Node] = []
    cond = _scalar(g, n, n.inputs[0], "the condition", np.bool_, nodes)
    if failed:
        (key, reason), = failed.items()
        good = m.attrs["else" if key == "then_branch" else "then"]
        names = [g.fresh_name(f"{n.name}/{key[:4]}/unshaped") for _ in good]
        # the node's name says why: a run that takes the branch reports the kernel's name and ops
        # (the C API's failure(), Python's RunError)
        reason = f"{key} cannot run at the compiled input sizes: {reason}".replace("*/", "* /")
        nodes.append(Node(BRANCH_FAIL, [], names, {"types": [(g.values[v].dtype, g.values[v].shape) for v in good],
                                                   "reason": reason, "if": n.name}, f"{n.name}: {reason}"))
        m.attrs["then" if key == "then_branch" else "else"] = names
        for v, (dt, shape) in zip(names, nodes[-1].attrs["types"]):
            g.values[v] = Value(v, np.dtype(dt), tuple(shape))
    for k, (t, e, out) in enumerate(zip(m.attrs["then"], m.attrs["else"], n.outputs)):
        if not out:
            continue
        if t in g.sequences or e in g.sequences:
            raise UnsupportedError([f"If node {n.name!r} with a condition known only at run time and a "
                                    "sequence output"])
        tv, ev = g.values[t], g.values[e]
        if tv.dtype != ev.dtype:
            raise ModelError(f"If node {n.name!r}: output {k} is {tv.dtype} in the then_branch and {ev.dtype} "
                             "in the else_branch")
        if tuple(tv.shape) != tuple(ev.shape):
            raise UnsupportedError([f"If node {n.name!r} with a condition known only at run time and branches "
                                    f"whose output {k} differs in shape ({list(tv.shape)} and {list(ev.shape)})"],
                                   "aotc's memory plan is static: both branches must give each output one "
                                   "shape (bind the condition with --const to compile one branch)")
        nodes.append(Node("Where", [cond, t, e], [out], {BRANCH_ATTR: True}, f"{n.name}/{out}"))
    return nodes


def _identity(n: Node, src: str, dst: str) -> Node:
    return Node("Identity", [src], [dst], {}, f"{n.name}/{dst}")


def inline_branch(g: Graph, n: Node, taken: bool) -> list[Node]:
    """The nodes of the branch an If takes, renamed into `g`, ending in Identity nodes onto
    the If's outputs."""
    key = "then_branch" if taken else "else_branch"
    branch = _subgraph(n, key)
    if len(branch.outputs) != len(n.outputs):
        raise ModelError(f"If node {n.name!r}: its {key} has {len(branch.outputs)} outputs, the node "
                         f"{len(n.outputs)}")
    nodes, outs = _inline(g, branch, n.attr(SCOPE_ATTR, {}), branch_prefix(n, key), {}, n, key)
    return nodes + [_identity(n, src, dst) for src, dst in zip(outs, n.outputs) if dst]


# ----------------------------------------------------------------------------- Loop and Scan
# the most iterations a Loop or Scan is unrolled into (each one is a copy of its body)
MAX_UNROLL = 4096


def _const_scalar(g: Graph, name: str, n: Node, what: str):
    v = g.values.get(name)
    if v is None or v.const is None:
        return None
    arr = np.asarray(v.const)
    if arr.size != 1:
        raise ShapeError(f"{n.op_type} node {n.name!r}: {what} has {arr.size} elements, not one")
    return arr.reshape(-1)[0]


class _LoopState:
    """A Loop being unrolled: the iteration count so far, the carried values' names, each scan
    output's value per iteration, and the condition's name."""

    def __init__(self, n: Node, limit, cond: str | None, carried: list[str], n_scan: int):
        self.n, self.limit, self.cond, self.carried = n, limit, cond, carried
        self.i = 0
        self.scans: list[list[str]] = [[] for _ in range(n_scan)]


def unroll_loop(g: Graph, n: Node) -> list[Node]:
    """A Loop with a compile-time trip count or conditions: its first iteration (the others
    follow as shape inference proves the condition, see loop_step)."""
    body = _subgraph(n, "body")
    if len(body.inputs) != len(n.inputs):
        raise ModelError(f"Loop node {n.name!r}: its body takes {len(body.inputs)} inputs, the node has "
                         f"{len(n.inputs)} (trip count, condition, carried values)")
    carried = list(n.inputs[2:])
    n_scan = len(body.outputs) - 1 - len(carried)
    if n_scan < 0 or len(n.outputs) != len(carried) + n_scan:
        raise ModelError(f"Loop node {n.name!r}: its body has {len(body.outputs)} outputs for "
                         f"{len(carried)} carried values and {len(n.outputs)} node outputs")
    limit = None
    if n.inputs[0]:
        limit = _const_scalar(g, n.inputs[0], n, "the trip count M")
    cond = n.inputs[1] or None
    st = _LoopState(n, None if limit is None else int(limit), cond, carried, n_scan)
    if n.inputs[0] and limit is None:
        return host_loop(g, st, n.inputs[0])
    return loop_step(g, st)


# ----------------------------------------------------------------------------- Loops run by the host


def _scalar(g: Graph, n: Node, name: str, what: str, dtype, nodes: list[Node]) -> str:
    """`name` (one element of `dtype`, else a ShapeError naming `what`) as a 0-d value: itself,
    or a Reshape appended to `nodes`."""
    v = g.values[name]
    if v.size != 1 or v.dtype != dtype:
        raise ShapeError(f"{n.op_type} node {n.name!r}: {what} must be one {np.dtype(dtype)}, not {v.dtype} of "
                         f"shape {list(v.shape)}")
    if v.shape == ():
        return name
    out = g.fresh_name(f"{n.name}/scalar")
    nodes.append(Node("Reshape", [name, g.add_const(np.zeros(0, np.int64), f"{n.name}/scalar_shape")], [out], {},
                      out))
    return out


def _go_on(g: Graph, n: Node, it: str, cond: str | None, limit: str | None, nodes: list[Node]) -> str:
    """A host loop's flag for iteration `it`: cond (when there is one) and it < M (when there is
    an M), the nodes computing it appended to `nodes`."""
    if limit is None:
        return cond
    less = g.fresh_name(f"{n.name}/below_M")
    nodes.append(Node("Less", [it, limit], [less], {}, less))
    if cond is None:
        return less
    go = g.fresh_name(f"{n.name}/go")
    nodes.append(Node("And", [cond, less], [go], {}, go))
    return go


def host_loop(g: Graph, st: _LoopState, trip_count: str | None) -> list[Node]:
    """The iterations of a Loop from st.i on, when their number is known only at run time: the
    host program runs them (passes/loops.py). A Carry node at the start copies the loop's state
    (a flag "go on", the iteration number, the carried values) into storage of its own; the
    body, inlined once, reads it; a Carry node at the end (made by close_loop once the body is
    inferred) copies the next iteration's state over it. The host repeats the body while the
    flag holds. `trip_count`: the run-time M (else st.limit, or no limit)."""
    n = st.n
    if st.scans:
        raise UnsupportedError([f"Loop node {n.name!r} with scan outputs and a number of iterations known only "
                                "at run time"], "the memory plan is static: scan outputs need a number of "
                                "iterations known at compile time")
    if trip_count is None and st.limit is None and st.cond is None:
        raise UnsupportedError([f"Loop node {n.name!r} without a trip count or a condition (it never ends)"])
    nodes: list[Node] = []
    limit = None
    if trip_count is not None:
        limit = _scalar(g, n, trip_count, "the trip count M", np.int64, nodes)
    elif st.limit is not None:
        limit = g.add_const(np.array(st.limit, np.int64), f"{n.name}/M")
    loop = g.fresh_name(f"{n.name}/loop")
    it0 = g.add_const(np.array(st.i, np.int64), f"{n.name}/first")
    cond = _scalar(g, n, st.cond, "the condition", np.bool_, nodes) if st.cond else None
    start = [_go_on(g, n, it0, cond, limit, nodes), it0] + list(st.carried)
    state = [g.fresh_name(f"{n.name}/{what}") for what in ["go", "iter"] + [f"v{k}" for k in range(len(st.carried))]]
    nodes.append(Node(CARRY, start, state, {"loop": loop, "end": False}, f"{n.name}/begin"))
    body = n.attr("body")
    bind = {body.inputs[0]: state[1], body.inputs[1]: g.add_const(np.array(True), f"{n.name}/true")}
    bind.update({fi: v for fi, v in zip(body.inputs[2:], state[2:])})
    body_nodes, outs = _inline(g, body, n.attr(SCOPE_ATTR, {}), f"{n.name}/body/", bind, n, "body")
    nodes += body_nodes
    return nodes + [Node(LOOP_CLOSE, [], [], {"loop": loop, "state": state, "outs": outs, "limit": limit,
                                             "owner": n}, f"{n.name}/close")]


def close_loop(g: Graph, m: Node) -> list[Node]:
    """The end of a host loop, once its body is inferred: the next iteration's number and flag,
    and the Carry of the next state over the current one, whose outputs are the Loop's."""
    n, state, outs, limit = m.attrs["owner"], m.attrs["state"], m.attrs["outs"], m.attrs["limit"]
    nodes: list[Node] = []
    for k, (cur, nxt) in enumerate(zip(state[2:], outs[1:])):
        cv, nv = g.values[cur], g.values[nxt]
        if nxt in g.sequences:
            raise UnsupportedError([f"Loop node {n.name!r} carrying a sequence over a number of iterations known "
                                    "only at run time"])
        if cv.dtype != nv.dtype or tuple(cv.shape) != tuple(nv.shape):
            raise UnsupportedError([f"Loop node {n.name!r} whose carried value {k} changes from {cv.dtype} "
                                    f"{list(cv.shape)} to {nv.dtype} {list(nv.shape)} in an iteration, over a "
                                    "number of iterations known only at run time"],
                                   "the memory plan is static: a carried value must keep its shape")
    one = g.add_const(np.array(1, np.int64), f"{n.name}/one")
    it = g.fresh_name(f"{n.name}/next_iter")
    nodes.append(Node("Add", [state[1], one], [it], {}, it))
    cond = _go_on(g, n, it, _scalar(g, n, outs[0], "the body's condition", np.bool_, nodes), limit, nodes)
    finals = [g.fresh_name(f"{n.name}/go_final"), g.fresh_name(f"{n.name}/iter_final")]
    finals += [o or g.fresh_name(f"{n.name}/unused") for o in n.outputs]
    nodes.append(Node(CARRY, [cond, it] + list(outs[1:]), finals, {"loop": m.attrs["loop"], "end": True,
                                                                    "state": list(state)}, f"{n.name}/end"))
    return nodes


def loop_step(g: Graph, st: _LoopState) -> list[Node]:
    """The next iteration of the Loop and a LOOP_STEP node after it, or its outputs once the
    trip count is reached or the condition is false."""
    n = st.n
    go = True
    if st.limit is not None and st.i >= st.limit:
        go = False
    elif st.cond is not None:
        c = _const_scalar(g, st.cond, n, "the condition")
        if c is None:
            return host_loop(g, st, None)
        go = bool(c)
    if not go:
        if st.i == 0 and st.scans:
                    raise UnsupportedError([f"Loop node {n.name!r} that runs no iteration and has scan outputs"])
        nodes = [_identity(n, src, dst) for src, dst in zip(st.carried, n.outputs) if dst]
        for parts, out in zip(st.scans, n.outputs[len(st.carried):]):
            if out:
                nodes += sequences.stack(g, n, parts, 0, out)
        return nodes
    if st.i >= MAX_UNROLL:
        if not st.scans:                     # the host program runs the rest
            return host_loop(g, st, None)
        raise UnsupportedError([f"Loop node {n.name!r} with scan outputs and more than {MAX_UNROLL} iterations"],
                               "each iteration becomes a copy of the loop's body")
    body = n.attr("body")
    bind = {body.inputs[0]: g.add_const(np.array(st.i, np.int64), f"{n.name}/iter"),
            body.inputs[1]: st.cond or g.add_const(np.array(True), f"{n.name}/cond")}
    bind.update({fi: a for fi, a in zip(body.inputs[2:], st.carried)})
    nodes, outs = _inline(g, body, n.attr(SCOPE_ATTR, {}), f"{n.name}/{st.i}/", bind, n, "body")
    st.cond = outs[0]
    st.carried = outs[1:1 + len(st.carried)]
    for parts, name in zip(st.scans, outs[1 + len(st.carried):]):
        parts.append(name)
    st.i += 1
    return nodes + [Node(LOOP_STEP, [], [], {"state": st}, f"{n.name}/step{st.i}")]


def unroll_scan(g: Graph, n: Node) -> list[Node]:
    """A Scan (opset 9 and later) as its body once per element of the scan inputs, the scan
    outputs stacked."""
    if g.source_opset < 9:
        raise UnsupportedError([f"Scan node {n.name!r} of opset {g.source_opset} (opset 9 and later)"])
    body = _subgraph(n, "body")
    m = int(n.attr("num_scan_inputs", 0))
    n_state = len(n.inputs) - m
    if m < 1 or n_state < 0 or len(body.inputs) != len(n.inputs):
        raise ModelError(f"Scan node {n.name!r}: {len(n.inputs)} inputs, num_scan_inputs {m}, a body of "
                         f"{len(body.inputs)} inputs")
    k_out = len(body.outputs) - n_state
    if k_out < 0 or len(n.outputs) != len(body.outputs):
        raise ModelError(f"Scan node {n.name!r}: its body has {len(body.outputs)} outputs, the node "
                         f"{len(n.outputs)}")

    def attr_list(key: str, count: int) -> list[int]:
        v = [int(a) for a in n.attr(key, [0] * count)]
        if len(v) != count:
            raise ModelError(f"Scan node {n.name!r}: {key} has {len(v)} entries for {count} values")
        return v

    in_axes, in_dirs = attr_list("scan_input_axes", m), attr_list("scan_input_directions", m)
    out_axes, out_dirs = attr_list("scan_output_axes", k_out), attr_list("scan_output_directions", k_out)
    xs = n.inputs[n_state:]
    lengths = set()
    for j, x in enumerate(xs):
        rank = len(g.values[x].shape)
        if not -rank <= in_axes[j] < rank:
            raise ShapeError(f"Scan node {n.name!r}: scan_input_axes[{j}] = {in_axes[j]} for a rank-{rank} input")
        in_axes[j] %= rank
        lengths.add(g.values[x].shape[in_axes[j]])
    if len(lengths) != 1:
        raise ShapeError(f"Scan node {n.name!r}: its scan inputs have different lengths {sorted(lengths)}")
    steps = lengths.pop()
    if steps == 0:
        raise UnsupportedError([f"Scan node {n.name!r} over sequences of length 0"])
    if steps > MAX_UNROLL:
        raise UnsupportedError([f"Scan node {n.name!r} over {steps} steps (at most {MAX_UNROLL})"],
                               "each step becomes a copy of the scan's body")
    state = list(n.inputs[:n_state])
    scans: list[list[str]] = [[] for _ in range(k_out)]
    nodes: list[Node] = []
    for t in range(steps):
        bind = {fi: a for fi, a in zip(body.inputs, state)}
        for j, x in enumerate(xs):
            at = g.add_const(np.array(t if in_dirs[j] == 0 else steps - 1 - t, np.int64), f"{n.name}/t")
            sl = g.fresh_name(f"{n.name}/{t}/{x}")
            nodes.append(Node("Gather", [x, at], [sl], {"axis": in_axes[j]}, f"{n.name}/{t}/slice{j}"))
            bind[body.inputs[n_state + j]] = sl
        body_nodes, outs = _inline(g, body, n.attr(SCOPE_ATTR, {}), f"{n.name}/{t}/", bind, n, "body")
        nodes += body_nodes
        state = outs[:n_state]
        for parts, name in zip(scans, outs[n_state:]):
            parts.append(name)
    nodes += [_identity(n, src, dst) for src, dst in zip(state, n.outputs) if dst]
    for k, (parts, out) in enumerate(zip(scans, n.outputs[n_state:])):
        if not out:
            continue
        if out_dirs[k]:
            parts = parts[::-1]
        nodes += sequences.stack(g, n, parts, out_axes[k], out)
    return nodes


def expand(g: Graph, n: Node, int8_gemm: bool = False) -> list[Node] | None:
    """The nodes control-flow node `n` becomes, once its inputs are inferred (sequence ops
    too: aotc/passes/sequences.py); None for any other node."""
    if n.op_type == LOOP_STEP:
        return loop_step(g, n.attrs["state"])
    if n.op_type == IF_MERGE:
        return merge_branches(g, n)
    if n.op_type == LOOP_CLOSE:
        return close_loop(g, n)
    seq = sequences.expand(g, n)
    if seq is not None:
        return seq
    if n.domain not in ("", "ai.onnx"):
        return None
    if n.op_type == "If":
        taken = constant_condition(g, n)
        return inline_both(g, n) if taken is None else inline_branch(g, n, taken)
    if n.op_type == "Loop":
        return unroll_loop(g, n)
    if n.op_type == "Scan":
        return unroll_scan(g, n)
    if n.op_type == "SequenceMap":
        return map_sequence(g, n)
    if n.op_type == "Compress":
        return compress(g, n)
    if n.op_type in decompose.DECOMPOSED:
        return decompose.expand(g, n, int8_gemm)
    return None


def compress(g: Graph, n: Node) -> list[Node] | None:
    """Compress with a compile-time condition: a Gather of the positions where it is true
    (of the flattened input without an axis); None when the condition is known at run time
    only (the output's shape would depend on it)."""
    x = g.values[n.inputs[0]]
    cond = g.values.get(n.inputs[1]) if len(n.inputs) > 1 and n.inputs[1] else None
    if cond is None:
        raise ShapeError(f"Compress node {n.name!r}: the condition input is required")
    if cond.const is None:
        return None
    c = np.asarray(cond.const)
    if c.ndim != 1:
        raise ShapeError(f"Compress node {n.name!r}: the condition must be 1-D, not of shape {c.shape}")
    nodes, src = [], n.inputs[0]
    axis = n.attr("axis")
    if axis is None:
        flat = g.fresh_name(f"{n.name}/flat")
        nodes.append(Node("Reshape", [src, g.add_const(np.array([-1], np.int64), f"{n.name}/shape")], [flat], {},
                          f"{n.name}/flatten"))
        src, axis, length = flat, 0, x.size
    else:
        rank = len(x.shape)
        if not -rank <= int(axis) < rank:
            raise ShapeError(f"Compress node {n.name!r}: axis {axis} is outside [{-rank}, {rank - 1}]")
        axis = int(axis) % rank
        length = x.shape[axis]
    if c.size > length:
        raise ShapeError(f"Compress node {n.name!r}: the condition has {c.size} values for {length} slices")
    keep = np.flatnonzero(c.astype(bool)).astype(np.int64)
    nodes.append(Node("Gather", [src, g.add_const(keep, f"{n.name}/keep")], [n.outputs[0]], {"axis": axis}, n.name))
    return nodes


def map_sequence(g: Graph, n: Node) -> list[Node]:
    """SequenceMap: the body once per element of the input sequence, reading the same element
    of every other sequence input (and the whole of each tensor input); its outputs form the
    output sequences."""
    body = _subgraph(n, "body")
    if len(body.inputs) != len(n.inputs) or len(body.outputs) != len(n.outputs):
        raise ModelError(f"SequenceMap node {n.name!r}: its body has {len(body.inputs)} inputs and "
                         f"{len(body.outputs)} outputs for the node's {len(n.inputs)} and {len(n.outputs)}")
    if n.inputs[0] not in g.sequences:
        raise ShapeError(f"SequenceMap node {n.name!r}: input {n.inputs[0]!r} is not a sequence")
    length = len(g.sequences[n.inputs[0]])
    for x in n.inputs[1:]:
        if x in g.sequences and len(g.sequences[x]) != length:
            raise ShapeError(f"SequenceMap node {n.name!r}: sequence {x!r} has {len(g.sequences[x])} "
                             f"elements, the first {length}")
    nodes: list[Node] = []
    results: list[list[str]] = [[] for _ in n.outputs]
    for k in range(length):
        bind = {fi: g.sequences[x][k] if x in g.sequences else x for fi, x in zip(body.inputs, n.inputs)}
        body_nodes, outs = _inline(g, body, n.attr(SCOPE_ATTR, {}), f"{n.name}/{k}/", bind, n, "body")
        nodes += body_nodes
        for r, o in zip(results, outs):
            r.append(o)
    for out, items in zip(n.outputs, results):
        g.sequences[out] = items
    return nodes
