"""The pipeline, end to end: ONNX file -> artifact directory."""
from __future__ import annotations

import gc
import hashlib
import json
import math
import os
import re
import shutil
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, Optional

from .version import __version__
from .codegen import abi, get_backend, weights_check
from .errors import AotcError
from .frontend import import_model, load_onnx
from .frontend.operators import check_supported
from .frontend.onnx_import import model_sha256
from .fusion import Group, form_groups
from .ir import dtypes
from .ir.graph import Graph
from .ir.internal import BRANCH_FAIL
from .kernel.names import c_ident
from .lowering.lower import KernelStep, lower_groups
from .memory import MemoryPlan, elide_concats, plan_memory
from .memory.planner import mark_aliased
from .passes.manager import PassContext, PassManager
from .paths import RUNTIME_DIR
from .program import Program
from .program.ir import bounded_outputs
from .targets import NATIVE, Target, load_target

# The target when none is given: the best CPU target this machine runs.
DEFAULT_TARGET = NATIVE
# Above this many bytes of weights, `--weights auto` writes them to a file instead of C source.
EMBED_LIMIT_BYTES = 8 << 20

Progress = Callable[[str], object]


def unrunnable_branches(g: Graph) -> dict[str, str]:
    """If node -> why the branch it cannot run at the compiled sizes fails (aotc.BranchFail)."""
    return {n.attrs["if"]: n.attrs["reason"] for n in g.nodes if n.op_type == BRANCH_FAIL}


@dataclass
class Compiled:
    graph: Graph
    source_ops: dict[str, int]
    groups: list[Group]
    steps: list[KernelStep]
    plan: MemoryPlan
    program: Program
    target: Target
    threads: int
    opset: int
    node_count_before: int
    subnormals: dict                  # weight -> how many of its values were subnormal, made zero


def default_name(path: str | os.PathLike) -> str:
    stem = Path(path).stem
    name = c_ident(stem).lower()
    return name if name else "model"


def resolve_threads(threads: int | None, backend) -> int:
    """--threads: 0 (or None) means every core of this machine; GPU backends run on 1 host thread."""
    if threads is None:
        threads = 0
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 0:
        raise AotcError(f"threads must be a non-negative integer, not {threads!r}", "0 means all cores")
    if not backend.host_threads:
        return 1
    return threads or backend.default_threads()


def compile_program(path, target: str = DEFAULT_TARGET, name: Optional[str] = None, shapes: Mapping | None = None,
                    consts: Mapping | None = None, fuse: bool = True, progress: Optional[Progress] = None,
                    threads: int | None = 0, dims: Mapping | None = None) -> Compiled:
    """The model at `path` through every stage but the printers and the build: imported, its
    graph passes run, fused, lowered, scheduled for the target, its memory planned and its host
    program made (what `inspect` and `report` show; compile_model prints and builds it)."""
    step = progress or (lambda s: nullcontext())
    tgt = load_target(target)
    backend = get_backend(tgt.language)
    n_threads = resolve_threads(threads, backend)
    with step("reading model"):
        model = load_onnx(path)
    with step("importing graph"):
        g = import_model(model, name or default_name(path), shapes, consts, dims)
    hist = g.op_histogram()
    n_before = len(g.nodes)
    check_supported(g)
    with step("optimizing graph"):
        opset = g.opset
        ctx = PassContext(tgt)
        g = PassManager().run(g, ctx)       # every graph pass, verified (passes/manager.py)
    with step("fusing and lowering kernels"):
        groups = form_groups(g, fuse=fuse, conds=ctx.conds, loops=ctx.loops)
        steps = lower_groups(g, groups)
        steps, slices = elide_concats(g, groups, steps, align=tgt.alignment)
    with step(f"scheduling {len(steps)} kernels for {tgt.name}"):
        backend.schedule(g, steps, tgt, n_threads)
    with step("planning memory"):
        plan = plan_memory(g, groups, steps, align=tgt.alignment, threads=n_threads, slices=slices)
        mark_aliased(g, steps, plan)
    program = backend.program(g, steps, plan, tgt)
    program.bounded = bounded_outputs(g, plan)
    return Compiled(g, hist, groups, steps, plan, program, tgt, n_threads, opset, n_before, ctx.subnormals)


def compile_model(path, target: str = DEFAULT_TARGET, output_dir: str | os.PathLike = "out",
                  name: Optional[str] = None, shapes: Mapping | None = None, consts: Mapping | None = None,
                  weights: str = "auto", fuse: bool = True, progress: Optional[Progress] = None,
                  threads: int | None = 0, build=None, dims: Mapping | None = None) -> Path:
    """Compile the ONNX model at `path` into an artifact in `output_dir`. `build(sources, lib,
    target, include_dirs)`, when given, replaces the backend's build of the library (tests
    build cuda artifacts for a CPU emulation this way)."""
    if weights not in ("auto", "embed", "external"):
        raise AotcError(f"--weights must be auto, embed or external, not {weights!r}")
    prefix = c_ident(name).lower() if name else default_name(path)
    if not re.match(r"^[a-z_][a-z0-9_]*$", prefix):
        raise AotcError(f"--name {name!r} is not usable as a C identifier prefix")
    c = compile_program(path, target, prefix, shapes, consts, fuse, progress, threads, dims)
    backend = get_backend(c.target.language)
    step = progress or (lambda s: nullcontext())
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    external = weights == "external" or (weights == "auto" and c.plan.weights_bytes > EMBED_LIMIT_BYTES)
    g, plan = c.graph, c.plan
    with step("generating code"):
        weights_file = f"{prefix}.weights" if external else None
        if external:                    # streamed to the file, weight by weight
            with open(out / weights_file, "wb") as f:
                crc, sha = abi.write_weights(g, plan, f)
        else:
            blob = abi.weights_blob(g, plan)
            crc, sha = weights_check.crc32(blob), hashlib.sha256(blob).hexdigest()
        files = {f"{prefix}.h": abi.emit_header(prefix, g, plan, external, c.threads, c.target, crc)}
        files.update(backend.sources(prefix, g, c.program, plan, external, c.target, c.threads))
        if not external:
            files[f"{prefix}_weights.c"] = abi.emit_weights_c(prefix, blob)
        for fname, text in files.items():
            _write_if_changed(out / fname, text)
        headers = backend.runtime_headers(c.program)
        for h in headers:
            shutil.copyfile(RUNTIME_DIR / h, out / h)
        if not external and (out / f"{prefix}.weights").exists():
            (out / f"{prefix}.weights").unlink()
        if (out / f"{prefix}_weights.c").exists() and external:
            (out / f"{prefix}_weights.c").unlink()
    lib = out / f"lib{prefix}.so"
    with step(f"compiling {sum(1 for _ in c.program.launches())} kernels with {c.target.cc}"):
        srcs = [out / f for f in sorted(files) if f.endswith((".c", ".cu"))]
        (build or backend.build)(srcs, lib, c.target, [out])
    ins, outs = abi.ports(g, g.inputs), abi.ports(g, g.outputs)
    shared = abi.in_place(g, ins, outs)
    manifest = {
        "aotc_version": __version__,
        "name": prefix,
        "model": Path(path).name,
        "model_sha256": model_sha256(path),
        "target": c.target.name,
        "target_requested": c.target.requested or c.target.name,
        "language": c.target.language,
        "threads": c.threads,
        "library": lib.name,
        "header": f"{prefix}.h",
        "sources": sorted(files) + headers,
        "inputs": [_port(p) for p in ins],
        # an output that may share an input's array ("in_place_of": that input's name)
        "outputs": [_port(p) | ({"in_place_of": ins[shared[o]].name} if o in shared else {})
                    for o, p in enumerate(outs)],
        "workspace_bytes": plan.arena_bytes,
        "workspace_alignment": plan.alignment,
        "weights": {"mode": "external" if external else "embedded", "file": weights_file,
                    "bytes": plan.weights_bytes, "sha256": sha,
                    "crc32": f"{crc:08x}"},
        "memory_plan": plan.summary(),
        # float32 weights below the normal range, made zero: the run computes them as zero
        # (passes/subnormals.py; the target option ieee_subnormals keeps them)
        "subnormal_weights": dict(sorted(c.subnormals.items())),
        # run-time Ifs' branches that cannot run at these sizes: a run taking one returns
        # AOTC_ERR_BRANCH (passes/control.py)
        "unrunnable_branches": unrunnable_branches(g),
        "kernels": [{"name": ln.kernel.name, "nodes": ln.kernel.comment} for ln in c.program.launches()],
        "opset": c.opset,
    }
    _write_if_changed(out / "manifest.json", json.dumps(manifest, indent=2) + "\n")
    if external:
        # the compile's graph, kernels and plan refer to each other in cycles: large weights (the
        # packed ones in memory) would stay until the collector's next full pass, while the caller
        # goes on to load the artifact (aotc.compile, aotc check): 2x the weights at once
        del c, g, plan
        gc.collect()
    return out


def _port(p) -> dict:
    d = {"name": p.name, "c_name": p.field, "dtype": dtypes.name(p.dtype), "shape": list(p.shape)}
    if p.run_time_axes:      # `shape` is then its capacity; the run writes the shape into shape_field
        d.update(run_time_axes=list(p.run_time_axes), shape_field=p.shape_field)
    if p.dims:               # run-time dimensions: an input's shape_field is the caller's to fill
        d["dims"] = [{"axis": a, "dim": str(dim), "min": dim.lo, "max": dim.hi,
                      "multiple": _multiple(dim)} for a, dim in p.dims]
    return d


def _multiple(d) -> int:
    """What every size of a dim is a multiple of (its coefficients' gcd: its symbols stand for their
    sizes over their multiples, ir/dims.py)."""
    m = 0
    for _, coef in d.terms:
        m = math.gcd(m, abs(coef))
    return m or 1


def _write_if_changed(path: Path, text: str) -> None:
    if path.exists() and path.read_text() == text:
        return
    path.write_text(text)
