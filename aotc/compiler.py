"""The pipeline, end to end: ONNX file -> artifact directory."""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, Optional

from . import __version__
from .codegen.c import emitter
from .errors import AotcError, UnsupportedError
from .frontend import import_model, load_onnx
from .frontend.onnx_import import model_sha256
from .fusion import Group, form_groups
from .ir import dtypes
from .ir.graph import Graph
from .kernel.lowering import KernelStep, c_ident, lower_groups
from .memory import MemoryPlan, plan_memory
from .ops import registry
from .passes.manager import PassManager
from .paths import RUNTIME_DIR
from .targets import load_target

# Above this many bytes of weights, `--weights auto` writes them to a file instead of C source.
EMBED_LIMIT_BYTES = 8 << 20

Progress = Callable[[str], object]


@dataclass
class Compiled:
    graph: Graph
    source_ops: dict[str, int]
    groups: list[Group]
    steps: list[KernelStep]
    plan: MemoryPlan
    target: dict
    opset: int
    node_count_before: int


def default_name(path: str | os.PathLike) -> str:
    stem = Path(path).stem
    name = c_ident(stem).lower()
    return name if name else "model"


def node_opset(g: Graph, n) -> int:
    """The opset version the model imports for the node's domain."""
    return g.domain_opsets.get(n.domain or "ai.onnx", g.opset)


def check_supported(g: Graph) -> None:
    bad = []
    for n in g.nodes:
        if not registry.is_supported(n):
            dom = n.domain or "ai.onnx"
            bad.append(f"{n.op_type} (domain {dom}, opset {node_opset(g, n)}) in node {n.name!r}")
    if bad:
        raise UnsupportedError(bad, "see docs/ONNX_SUPPORT.md for the operators aotc compiles", what="operator(s)")


def analyze(path, target: str = "c", name: Optional[str] = None, shapes: Mapping | None = None,
            consts: Mapping | None = None, fuse: bool = True, progress: Optional[Progress] = None) -> Compiled:
    step = progress or (lambda s: nullcontext())
    with step("reading model"):
        model = load_onnx(path)
    with step("importing graph"):
        g = import_model(model, name or default_name(path), shapes, consts)
    hist = g.op_histogram()
    n_before = len(g.nodes)
    check_supported(g)
    tgt = load_target(target)
    with step("optimizing graph"):
        opset = g.opset
        g = PassManager().run(g)
    with step("fusing and lowering kernels"):
        groups = form_groups(g, fuse=fuse)
        steps = lower_groups(g, groups, tgt)
    with step("planning memory"):
        plan = plan_memory(g, groups, steps, align=int(tgt.get("alignment", 64)))
    return Compiled(g, hist, groups, steps, plan, tgt, opset, n_before)


def compile_model(path, target: str = "c", output_dir: str | os.PathLike = "out", name: Optional[str] = None,
                  shapes: Mapping | None = None, consts: Mapping | None = None, weights: str = "auto",
                  fuse: bool = True, progress: Optional[Progress] = None) -> Path:
    if weights not in ("auto", "embed", "external"):
        raise AotcError(f"--weights must be auto, embed or external, not {weights!r}")
    prefix = c_ident(name).lower() if name else default_name(path)
    if not re.match(r"^[a-z_][a-z0-9_]*$", prefix):
        raise AotcError(f"--name {name!r} is not usable as a C identifier prefix")
    c = analyze(path, target, prefix, shapes, consts, fuse, progress)
    step = progress or (lambda s: nullcontext())
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    external = weights == "external" or (weights == "auto" and c.plan.weights_bytes > EMBED_LIMIT_BYTES)
    g, plan = c.graph, c.plan
    with step("generating C"):
        blob = emitter.weights_blob(g, plan)
        files = {f"{prefix}.h": emitter.emit_header(prefix, g, plan, external),
                 f"{prefix}.c": emitter.emit_source(prefix, g, c.steps, plan, external, c.target)}
        if not external:
            files[f"{prefix}_weights.c"] = emitter.emit_weights_c(prefix, blob)
        for fname, text in files.items():
            _write_if_changed(out / fname, text)
        headers = emitter.runtime_headers(c.steps)
        for h in headers:
            shutil.copyfile(RUNTIME_DIR / h, out / h)
        weights_file = None
        if external:
            weights_file = f"{prefix}.weights"
            (out / weights_file).write_bytes(blob)
        elif (out / f"{prefix}.weights").exists():
            (out / f"{prefix}.weights").unlink()
        if (out / f"{prefix}_weights.c").exists() and external:
            (out / f"{prefix}_weights.c").unlink()
    lib = out / f"lib{prefix}.so"
    with step("compiling C"):
        from .build.toolchain import build_shared
        srcs = [out / f"{prefix}.c"] + ([] if external else [out / f"{prefix}_weights.c"])
        build_shared(srcs, lib, c.target, [out])
    manifest = {
        "aotc_version": __version__,
        "name": prefix,
        "model": Path(path).name,
        "model_sha256": model_sha256(path),
        "target": c.target["name"],
        "library": lib.name,
        "header": f"{prefix}.h",
        "sources": sorted(files) + headers,
        "inputs": [_port(p) for p in emitter.ports(g, g.inputs)],
        "outputs": [_port(p) for p in emitter.ports(g, g.outputs)],
        "workspace_bytes": plan.arena_bytes,
        "workspace_alignment": plan.alignment,
        "weights": {"mode": "external" if external else "embedded", "file": weights_file,
                    "bytes": plan.weights_bytes, "sha256": hashlib.sha256(blob).hexdigest()},
        "memory_plan": plan.summary(),
        "kernels": len(c.steps),
        "opset": c.opset,
    }
    _write_if_changed(out / "manifest.json", json.dumps(manifest, indent=2) + "\n")
    return out


def _port(p) -> dict:
    return {"name": p.name, "c_name": p.field, "dtype": dtypes.name(p.dtype), "shape": list(p.shape)}


def _write_if_changed(path: Path, text: str) -> None:
    if path.exists() and path.read_text() == text:
        return
    path.write_text(text)

