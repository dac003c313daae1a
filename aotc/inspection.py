"""`aotc inspect`: what the compiler sees in a model and what it makes of it."""
from __future__ import annotations

from .codegen.abi import ports
from .compiler import compile_program, default_name, unrunnable_branches
from .frontend.operators import is_supported, node_opset
from .frontend import import_model, load_onnx


def inspect_model(path, target: str = "native", shapes=None, consts=None, progress=None, dims=None) -> dict:
    g = import_model(load_onnx(path), default_name(path), shapes, consts, dims)
    info = {
        "model": str(path),
        "opset": g.opset,
        "op_histogram": g.op_histogram(),
        "nodes_before": len(g.nodes),
        "unsupported": [
            {"op_type": n.op_type, "domain": n.domain or "ai.onnx", "opset": node_opset(g, n), "node": n.name}
            for n in g.nodes if not is_supported(n)
        ],
    }
    if info["unsupported"]:
        return info
    c = compile_program(path, target, None, shapes, consts, progress=progress, dims=dims)
    info.update({
        "nodes_after": len(c.graph.nodes),
        "op_histogram_after": c.graph.op_histogram(),
        "kernels": len(c.steps),
        "groups": [
            {"kernel": st.kernel.name, "nodes": [f"{n.op_type}:{n.name}" for n in st.group.nodes],
             # an If's branch: when it runs (bool values and their polarities); a loop the host runs
             **({"runs_when": _condition_text(st.group.guard)} if st.group.guard else {}),
             **({"host_loop": st.group.loop} if st.group.loop else {})}
            for st in c.steps
        ],
        "views": sum(1 for grp in c.groups if grp.view),
        # weight -> how many of its values were subnormal and are zero (passes/subnormals.py)
        "subnormal_weights": dict(sorted(c.subnormals.items())),
        # If -> why its branch cannot run at these sizes (a run taking it returns AOTC_ERR_BRANCH)
        "unrunnable_branches": unrunnable_branches(c.graph),
        "memory_plan": c.plan.summary(),
        "inputs": {n: [d if isinstance(d, int) else str(d) for d in c.graph.values[n].shape] for n in c.graph.inputs},
        # run-time dimensions (ir/dims.py): the sizes each takes; "inputs" name them
        "run_time_dims": {s.name: {"min": s.lo, "max": s.hi, "multiple": s.multiple}
                          for s in sorted(c.graph.symbols.values())},
        "outputs": {p.name: list(p.shape) for p in ports(c.graph, c.graph.outputs)},   # ONNX names
        # outputs whose size along these axes is known only at run time ("outputs": their capacity)
        "run_time_axes": {p.name: [a for a in p.run_time_axes if a not in dict(p.dims)]
                          for p in ports(c.graph, c.graph.outputs) if set(p.run_time_axes) - set(dict(p.dims))},
        # outputs with run-time dimensions: their shapes in terms of them
        "output_dims": {p.name: [str(d) for d in c.graph.values[p.value].shape]
                        for p in ports(c.graph, c.graph.outputs) if p.dims},
    })
    return info


def _condition_text(guard) -> str:
    alts = [" and ".join(f"{v}" if pos else f"not {v}" for v, pos in sorted(alt)) for alt in guard]
    return " or ".join(sorted(alts))


def _mib(n: int) -> str:
    return f"{n:,} B ({n / 1048576:.2f} MiB)"


def format_text(info: dict) -> str:
    L = [f"model: {info['model']}  (opset {info['opset']})", f"nodes: {info['nodes_before']}", "op histogram:"]
    for op, k in info["op_histogram"].items():
        L.append(f"  {op:28} {k}")
    if info["unsupported"]:
        L.append(f"unsupported operators ({len(info['unsupported'])}):")
        for u in info["unsupported"]:
            L.append(f"  {u['op_type']} (domain {u['domain']}, opset {u['opset']}) in node {u['node']!r}")
        return "\n".join(L)
    L.append("unsupported operators: none")
    L.append(f"after optimization: {info['nodes_after']} nodes -> {info['kernels']} kernels "
             f"(+{info['views']} views, no code)")
    L.append("fusion groups:")
    for grp in info["groups"]:
        where = "".join(f"  [{k.replace('_', ' ')}: {grp[k]}]" for k in ("host_loop", "runs_when") if k in grp)
        L.append(f"  {grp['kernel']:40} {' + '.join(grp['nodes'])}{where}")
    mp = info["memory_plan"]
    L.append("memory plan:")
    L.append(f"  arena (workspace)         {_mib(mp['arena_bytes'])}")
    L.append(f"  sum of intermediates      {_mib(mp['intermediates_bytes'])}")
    L.append(f"  lower bound (peak live)   {_mib(mp['lower_bound_bytes'])}")
    if mp["lower_bound_bytes"]:
        L.append(f"  arena / lower bound       {mp['arena_bytes'] / mp['lower_bound_bytes']:.3f}")
    L.append(f"  weights                   {_mib(mp['weights_bytes'])}")
    L.append(f"  in-place reuses           {mp['inplace_reuses']}")
    subnormal = info.get("subnormal_weights", {})
    if subnormal:
        L.append(f"subnormal weights made zero: {sum(subnormal.values())} values in {len(subnormal)} tensor(s) "
                 "(the run computes subnormals as zero; the target option ,ieee_subnormals keeps them)")
        for name, n in sorted(subnormal.items(), key=lambda kv: -kv[1])[:10]:
            L.append(f"  {name:40} {n}")
    for name, why in info.get("unrunnable_branches", {}).items():
        L.append(f"If {name!r}: {why} (a run that takes it returns status AOTC_ERR_BRANCH)")
    rtd = info.get("run_time_dims", {})
    if rtd:
        L.append("run-time dimensions (one artifact for every size in range; memory planned at the largest):")
        for name, r in rtd.items():
            uses = [f"{i}[{k}]" for i, shape in info["inputs"].items() for k, d in enumerate(shape) if d == name]
            mult = f", multiples of {r['multiple']}" if r["multiple"] > 1 else ""
            L.append(f"  {name:24} {r['min']}..{r['max']}{mult}   ({', '.join(uses) or 'derived'})")
        for name, dims in info.get("output_dims", {}).items():
            L.append(f"  output {name!r}: [{', '.join(dims)}]")
    for name, axes in info.get("run_time_axes", {}).items():
        dims = [f"at most {d}" if a in axes else str(d) for a, d in enumerate(info["outputs"][name])]
        L.append(f"output {name!r} has a size known only at run time: [{', '.join(dims)}]")
    return "\n".join(L)
