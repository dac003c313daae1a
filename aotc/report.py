"""`aotc report`: what aotc made of a model, as one self-contained HTML page (no network, no files
beside it): the graph after optimization drawn as its kernels (the fusion groups) and the data
between them; the memory plan drawn as the arena's buffers over kernel order and offset, with
the lower bound (peak simultaneously-live bytes) marked; each kernel's estimated FLOPs and bytes;
with --profile, each kernel's measured time; and what the passes did (nodes and operators before
and after).

FLOPs are estimates from shapes: 2 x multiply-adds for MatMul, Gemm, Conv and their integer and
quantized forms, one per output element for everything else (a reduction or a pooling: one per
input element). Bytes are what a kernel reads and writes, each value counted once: its inputs,
weights and outputs, not its scratch.
"""
from __future__ import annotations

import html
import json
import math
import tempfile
from pathlib import Path
from typing import Mapping, Optional

import numpy as np

from .version import __version__
from .errors import AotcError
from .ir.dims import upper

GEMM_LIKE = {"MatMul", "MatMulInteger", "QLinearMatMul", "Gemm"}
CONV_LIKE = {"Conv", "ConvInteger", "QLinearConv"}
PER_INPUT_ELEMENT = ("Reduce", "ArgMax", "ArgMin", "GlobalAveragePool", "GlobalMaxPool", "AveragePool", "MaxPool",
                     "LpPool", "Softmax", "LogSoftmax", "LayerNormalization", "TopK")


def _prod(shape) -> int:
    """Elements of a shape; a run-time dim (ir/dims.py) at its largest size."""
    return int(np.prod([upper(d) for d in shape], dtype=np.int64)) if len(shape) else 1


def node_flops(g, n) -> int:
    """Estimated floating-point (or integer) operations of one node, from its shapes."""
    def shape(v):
        return tuple(g.values[v].shape) if v and v in g.values else ()
    out = _prod(shape(n.outputs[0])) if n.outputs and n.outputs[0] in g.values else 0
    a = shape(n.inputs[0]) if n.inputs else ()
    if n.op_type in GEMM_LIKE and len(a) >= 1:          # K: A's last dim (its first for Gemm transA)
        k = a[0] if n.op_type == "Gemm" and n.attr("transA", 0) else a[-1]
        return 2 * out * upper(k)
    if n.op_type in CONV_LIKE:
        w = shape(n.inputs[3] if n.op_type == "QLinearConv" else n.inputs[1])
        return 2 * out * _prod(w[1:]) if w else out
    if n.op_type == "ConvTranspose":
        w = shape(n.inputs[1])
        return 2 * _prod(a) * _prod(w[1:]) if w else out
    if n.op_type.startswith(PER_INPUT_ELEMENT):
        return max(_prod(a), out)
    return out


def _producers(c) -> dict[str, int]:
    """Value -> the step that writes it; values a view (Reshape & co., no kernel) makes, and
    values in a Concat's output, resolve to the step that writes their storage."""
    writer = {v: t for t, st in enumerate(c.steps) for v in st.writes}
    made_by = c.graph.producers()

    def find(v, depth=0):
        if v in writer or depth > 64:
            return writer.get(v)
        if v in c.plan.slices:                               # an input computed into its Concat's output
            return find(c.plan.slices[v][0], depth + 1)
        n = made_by.get(v)
        if n is None:
            return None
        for i in n.inputs:                                  # a view: its source's kernel
            t = find(i, depth + 1) if i else None
            if t is not None:
                return t
        return None
    return {v: t for v in c.graph.values if (t := find(v)) is not None}


def collect(model, target: str = "native", shapes: Optional[Mapping] = None, consts: Optional[Mapping] = None,
            threads: int = 0, fuse: bool = True, progress=None, dims: Optional[Mapping] = None) -> dict:
    """Everything the page shows of `model` compiled for `target`, JSON-ready."""
    from .codegen.abi import ports
    from .compiler import compile_program
    from .frontend import import_model, load_onnx
    before = import_model(load_onnx(model), "report", shapes, consts, dims)
    c = compile_program(model, target, None, shapes, consts, fuse, progress, threads, dims)
    g = c.graph
    made = _producers(c)
    graph_inputs = set(g.inputs)
    out_ports = ports(g, g.outputs)
    kernels = []
    for t, st in enumerate(c.steps):
        reads = list(dict.fromkeys(st.reads))
        touched = set(reads) | set(st.writes)
        kernels.append({
            "index": t,
            "name": st.kernel.name,
            "nodes": [[n.op_type, n.name] for n in st.group.nodes],
            "anchor": st.group.anchor.op_type if st.group.anchor is not None else None,
            "flops": sum(node_flops(g, n) for n in st.group.nodes),
            "bytes": sum(g.values[v].nbytes for v in touched if v in g.values),
            "from": sorted({made[v] for v in reads if v in made and made[v] != t}),
            "inputs": [v for v in reads if v in graph_inputs],
            "outputs": [p.name for p in out_ports if p.value in st.writes],      # by their ONNX names
            "ms": None,
        })
    plan = c.plan
    buffers = [{"name": name, "offset": off, "size": size, "first": first, "last": last,
                "kind": "scratch" if name.startswith("scratch:") else "value"}
               for name, off, size, first, last in plan.buffers]
    return {
        "title": Path(model).name,
        "model": str(model),
        "target": c.target.name,
        "threads": c.threads,
        "aotc": __version__,
        "opset": c.opset,
        "nodes_before": len(before.nodes),
        "nodes_after": len(g.nodes),
        "op_histogram": before.op_histogram(),
        "op_histogram_after": g.op_histogram(),
        "inputs": {n: [str(g.values[n].dtype), [d if isinstance(d, int) else str(d) for d in g.values[n].shape]]
                   for n in g.inputs},
        "outputs": {p.name: [str(p.dtype), list(p.shape)] for p in out_ports},
        "kernels": kernels,
        "memory": {"arena": plan.arena_bytes, "lower_bound": plan.lower_bound_bytes,
                   "intermediates": plan.intermediates_bytes, "weights": plan.weights_bytes,
                   "inplace": len(plan.inplace), "concat_slices": len(plan.slices), "buffers": buffers,
                   "steps": len(c.steps)},
        "profile": None,
        "notes": [],
    }


def collect_artifact(directory: Path, model: Optional[Path] = None, progress=None) -> dict:
    """The page of an artifact directory: from its model when it can be found (`model`, else the
    file the manifest names, in the directory, beside it or here, with the same SHA-256),
    analysed as the manifest says it was compiled; else what the manifest holds alone."""
    from .frontend.onnx_import import model_sha256
    manifest_path = Path(directory) / "manifest.json"
    if not manifest_path.is_file():
        raise AotcError(f"{directory} is neither an .onnx model nor an artifact directory (no manifest.json)",
                        "give the model, or a directory written by `aotc compile`")
    m = json.loads(manifest_path.read_text())
    candidates = [model] if model else [Path(directory) / m["model"], Path(directory).parent / m["model"],
                                        Path(m["model"])]
    found = next((p for p in candidates if p and p.is_file() and model_sha256(p) == m.get("model_sha256")), None)
    if model and found is None:
        raise AotcError(f"--model {model}: not the model {directory} was compiled from (its SHA-256 differs)")
    if found is not None:
        shapes = {p["name"]: p["shape"] for p in m["inputs"] if "run_time_axes" not in p}
        data = collect(found, m.get("target_requested", m["target"]), shapes, None, m["threads"], progress=progress)
        if [k["name"] for k in data["kernels"]] != [k["name"] for k in m["kernels"]] and \
                {k["name"] for k in m["kernels"]} - {k["name"] for k in data["kernels"]}:
            data["notes"].append("The model analysed now gives other kernels than the artifact has (compiled with "
                                 "--const or --no-fuse?): the drawings are of the analysis, the times of the artifact.")
        return data
    summary = m["memory_plan"]
    return {
        "title": m["model"], "model": str(directory), "target": m["target"], "threads": m["threads"],
        "aotc": m.get("aotc_version", "?"), "opset": m.get("opset"), "nodes_before": None, "nodes_after": None,
        "op_histogram": {}, "op_histogram_after": {},
        "inputs": {p["name"]: [p["dtype"], p["shape"]] for p in m["inputs"]},
        "outputs": {p["name"]: [p["dtype"], p["shape"]] for p in m["outputs"]},
        "kernels": [{"index": i, "name": k["name"], "nodes": [[k["nodes"], ""]], "anchor": None, "flops": None,
                     "bytes": None, "from": [], "inputs": [], "outputs": [], "ms": None}
                    for i, k in enumerate(m["kernels"])],
        "memory": {"arena": summary["arena_bytes"], "lower_bound": summary["lower_bound_bytes"],
                   "intermediates": summary["intermediates_bytes"], "weights": summary["weights_bytes"],
                   "inplace": summary.get("inplace_reuses", 0), "concat_slices": summary.get("concat_slices", 0),
                   "buffers": [], "steps": len(m["kernels"])},
        "profile": None,
        "notes": [f"{m['model']} was not found beside the artifact (or its SHA-256 differs): the graph and the "
                  "memory plan are drawn from the model; give it with --model."],
    }


def profile(directory: Path, data: dict, runs: int = 20, warmup: int = 3, seed: int = 0) -> None:
    """Run the artifact in `directory` with kernel timing on (`runs` after `warmup`, on seeded
    random inputs drawn from its manifest's ports) and put each kernel's milliseconds per run
    into `data`."""
    from .api import load
    from .ir import dtypes
    m = load(directory, threads=data["threads"], profile=True)
    rng = np.random.default_rng(seed)
    feeds = {}
    for p in m.manifest["inputs"]:
        dt = dtypes.from_name(p["dtype"])
        if dtypes.is_float(dt):
            feeds[p["name"]] = rng.standard_normal(p["shape"]).astype(dt)
        elif dt.kind == "b":
            feeds[p["name"]] = rng.random(p["shape"]) < 0.5
        else:
            feeds[p["name"]] = np.zeros(p["shape"], dt)        # index inputs: 0 is in range of anything
    for _ in range(warmup + runs):
        m.run(feeds)
    per = {}
    for label, ms in m.profile():
        per[label.split(":", 1)[0]] = per.get(label.split(":", 1)[0], 0.0) + ms / (warmup + runs)
    for k in data["kernels"]:
        k["ms"] = per.get(k["name"])
    data["profile"] = {"runs": runs, "warmup": warmup, "total_ms": sum(per.values())}


def profile_model(model, data: dict, target: str, shapes, consts, threads: int, runs: int, progress=None,
                  dims=None) -> None:
    """Compile `model` as `data` was analysed (the compile cache may have it) and profile it."""
    from .api import build_artifact
    with tempfile.TemporaryDirectory(prefix="aotc-report-") as work:
        built = build_artifact(model, target=target, output_dir=work, shapes=shapes, consts=consts, threads=threads,
                               cache=True, progress=progress, dims=dims)
        step = progress or (lambda s: _Null())
        with step(f"timing {len(data['kernels'])} kernels over {runs} runs"):
            profile(built.directory, data, runs=runs)


class _Null:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


def write(data: dict, path: Path, json_path: Optional[Path] = None) -> None:
    """The page into `path` (and its data into `json_path`)."""
    Path(path).write_text(render(data))
    if json_path:
        Path(json_path).write_text(json.dumps(data, indent=1) + "\n")


# ------------------------------------------------------------------------------------------ the page
def _bytes(n) -> str:
    if n is None:
        return "-"
    for unit, k in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= k:
            return f"{n / k:.2f} {unit}"
    return f"{n} B"


def _count(n) -> str:
    if n is None:
        return "-"
    for unit, k in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= k:
            return f"{n / k:.2f} {unit}"
    return str(n)


def _layers(kernels: list[dict]) -> list[int]:
    layer = []
    for k in kernels:
        layer.append(1 + max((layer[j] for j in k["from"] if j < len(layer)), default=0))
    return layer


def graph_svg(data: dict) -> str:
    """The kernels as boxes in rows by depth (graph inputs on top), arrows for the data between them."""
    ks = data["kernels"]
    if not ks or data["nodes_after"] is None:
        return ""
    W, H, GX, GY, PAD = 200, 34, 16, 34, 12
    layer = _layers(ks)
    rows: dict[int, list[int]] = {}
    for i, l in enumerate(layer):
        rows.setdefault(l, []).append(i)
    ins = list(data["inputs"])
    rows[0] = []
    width = max([len(r) for r in rows.values()] + [len(ins)]) * (W + GX) + 2 * PAD
    pos = {}
    for l, members in rows.items():
        for j, i in enumerate(members):
            pos[i] = (PAD + j * (W + GX), PAD + l * (H + GY))
    in_pos = {n: (PAD + j * (W + GX), PAD) for j, n in enumerate(ins)}
    height = PAD * 2 + (max(rows) + 1) * (H + GY) + 20
    parts = [f'<svg id="graph" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" role="img" aria-label="kernels and the data between them">',
             '<defs><marker id="arrow" viewBox="0 0 8 8" refX="7" refY="4" markerWidth="7" markerHeight="7" '
             'orient="auto-start-reverse"><path d="M0,0 L8,4 L0,8 z" fill="#888"/></marker></defs>']

    def edge(x1, y1, x2, y2, cls="edge"):
        my = (y1 + y2) / 2
        parts.append(f'<path class="{cls}" d="M{x1},{y1} C{x1},{my} {x2},{my} {x2},{y2}" marker-end="url(#arrow)"/>')

    for i, k in enumerate(ks):
        x, y = pos[i]
        for j in k["from"]:
            px, py = pos[j]
            edge(px + W / 2, py + H, x + W / 2, y)
        for v in k["inputs"]:
            if v in in_pos:
                px, py = in_pos[v]
                edge(px + W / 2, py + H, x + W / 2, y, "edge input-edge")
    for n, (x, y) in in_pos.items():
        parts.append(f'<g class="graph-input"><rect x="{x}" y="{y}" width="{W}" height="{H}" rx="17"/>'
                     f'<text x="{x + W / 2}" y="{y + 21}" text-anchor="middle">{html.escape(_short(n, 26))}</text>'
                     f'<title>graph input {html.escape(n)}: {html.escape(str(data["inputs"][n]))}</title></g>')
    for i, k in enumerate(ks):
        x, y = pos[i]
        ops = "+".join(op for op, _ in k["nodes"])
        cls = "kernel" + (" writes-output" if k["outputs"] else "")
        title = (f'{k["name"]}: ' + ", ".join(f"{op} '{nm}'" for op, nm in k["nodes"])
                 + (f' -> {", ".join(k["outputs"])}' if k["outputs"] else "")
                 + (f'; {_count(k["flops"])}FLOP, {_bytes(k["bytes"])}' if k["flops"] is not None else ""))
        parts.append(f'<g class="kbox" data-kernel="{i}"><rect class="{cls}" x="{x}" y="{y}" width="{W}" height="{H}" '
                     f'rx="4"/><text x="{x + 6}" y="{y + 14}" class="kid">k{i:03d}</text>'
                     f'<text x="{x + 6}" y="{y + 28}">{html.escape(_short(ops, 30))}</text>'
                     f'<title>{html.escape(title)}</title></g>')
        if k["outputs"]:
            parts.append(f'<text class="out-label" x="{x + W / 2}" y="{y + H + 13}" text-anchor="middle">-&gt; '
                         f'{html.escape(_short(", ".join(k["outputs"]), 28))}</text>')
    parts.append("</svg>")
    return "\n".join(parts)


def _short(s: str, n: int) -> str:
    return s if len(s) <= n else s[:n - 1] + "\u2026"


def memory_svg(data: dict) -> str:
    """The arena's buffers as rectangles: kernel order across, offset up; the lower bound as a
    dashed line, the arena's size as a solid one."""
    mem = data["memory"]
    bufs, steps = mem["buffers"], max(mem["steps"], 1)
    if not bufs:
        return ""
    L, R, T, B, PW, PH = 78, 170, 16, 40, 900, 360
    top = max(mem["arena"], mem["lower_bound"], 1)
    sx = PW / steps

    def y(off):
        return T + PH - off / top * PH

    parts = [f'<svg id="memory" xmlns="http://www.w3.org/2000/svg" width="{L + PW + R}" height="{T + PH + B}" '
             f'viewBox="0 0 {L + PW + R} {T + PH + B}" role="img" aria-label="memory plan">',
             f'<rect class="plot" x="{L}" y="{T}" width="{PW}" height="{PH}"/>']
    for n, b in enumerate(bufs):
        x0, w = L + b["first"] * sx, (b["last"] - b["first"] + 1) * sx
        y1, y0 = y(b["offset"] + b["size"]), y(b["offset"])
        hue = 170 + (n * 37) % 110 if b["kind"] == "value" else 28       # values: greens to blues
        parts.append(f'<rect class="buf {b["kind"]}" data-first="{b["first"]}" data-last="{b["last"]}" '
                     f'x="{x0:.2f}" y="{y1:.2f}" width="{max(w, 0.5):.2f}" height="{max(y0 - y1, 0.5):.2f}" '
                     f'style="fill:hsl({hue},60%,{70 if b["kind"] == "value" else 62}%)">'
                     f'<title>{html.escape(b["name"])}: {_bytes(b["size"])} at offset {b["offset"]:,}, '
                     f'kernels {b["first"]}-{b["last"]}</title></rect>')
    lb, arena = y(mem["lower_bound"]), y(mem["arena"])
    parts.append(f'<line id="arena-line" x1="{L}" x2="{L + PW}" y1="{arena:.2f}" y2="{arena:.2f}"/>'
                 f'<text class="axis" x="{L + PW + 6}" y="{arena - 3:.2f}">arena {_bytes(mem["arena"])}</text>')
    parts.append(f'<line id="lower-bound" x1="{L}" x2="{L + PW}" y1="{lb:.2f}" y2="{lb:.2f}"/>'
                 f'<text class="axis lb" x="{L + PW + 6}" y="{lb + 13:.2f}">lower bound {_bytes(mem["lower_bound"])}'
                 f'</text>')
    for i in range(6):
        off = top * i / 5
        parts.append(f'<text class="axis" x="{L - 6}" y="{y(off) + 4:.2f}" text-anchor="end">{_bytes(int(off))}</text>')
    stride = max(1, math.ceil(steps / 12))
    for t in range(0, steps, stride):
        parts.append(f'<text class="axis" x="{L + (t + 0.5) * sx:.2f}" y="{T + PH + 16}" text-anchor="middle">{t}'
                     f'</text>')
    parts.append(f'<text class="axis" x="{L + PW / 2}" y="{T + PH + 34}" text-anchor="middle">kernel (in the order '
                 f'they run)</text>')
    parts.append(f'<text class="axis" transform="rotate(-90)" x="{-(T + PH / 2)}" y="14" text-anchor="middle">'
                 f'arena offset</text>')
    parts.append("</svg>")
    return "\n".join(parts)


CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px;color:#222;max-width:1400px}
h1{font-size:22px;margin:0 0 4px} h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #ddd}
.sub{color:#666} .note{background:#fff6d6;border:1px solid #e8d48a;padding:6px 10px;margin:8px 0}
.scroll{overflow:auto;max-height:900px;border:1px solid #eee}
table{border-collapse:collapse;font-variant-numeric:tabular-nums} td,th{padding:3px 8px;border-bottom:1px solid #eee}
th{cursor:pointer;text-align:left;background:#f6f6f6;position:sticky;top:0} td.n{text-align:right;white-space:nowrap}
tr.hl td{background:#e8f0ff} .bar{display:inline-block;height:9px;background:#5b8def;vertical-align:middle}
dl{display:grid;grid-template-columns:max-content auto;gap:2px 16px} dt{color:#666}
svg text{font:11px system-ui,sans-serif;fill:#222} svg .kid{fill:#777;font-size:10px}
.kernel{fill:#eef3ff;stroke:#5b8def} .writes-output{stroke:#1a7f37;stroke-width:2}
.graph-input rect{fill:#f0fff4;stroke:#1a7f37} .edge{fill:none;stroke:#aaa} .input-edge{stroke:#8fc79f}
.kbox.hl rect{fill:#ffd866} .out-label{fill:#1a7f37!important;font-size:10px!important}
.plot{fill:#fafafa;stroke:#ccc} .buf{stroke:#fff;stroke-width:.5} .buf.live{stroke:#000;stroke-width:1.5}
#lower-bound{stroke:#d1242f;stroke-dasharray:6 4;stroke-width:1.5} #arena-line{stroke:#333;stroke-width:1}
.axis{fill:#555} .lb{fill:#d1242f!important} #js-errors{color:#d1242f;white-space:pre}
"""

JS = """
window.addEventListener('error', function (e) {
  document.getElementById('js-errors').textContent += (e.message || String(e)) + '\\n';
});
function highlight(k, on) {
  document.querySelectorAll('[data-kernel="' + k + '"]').forEach(function (el) { el.classList.toggle('hl', on); });
  document.querySelectorAll('rect.buf').forEach(function (r) {
    if (+r.dataset.first <= k && k <= +r.dataset.last) r.classList.toggle('live', on);
  });
}
document.querySelectorAll('[data-kernel]').forEach(function (el) {
  var k = +el.dataset.kernel;
  el.addEventListener('mouseenter', function () { highlight(k, true); });
  el.addEventListener('mouseleave', function () { highlight(k, false); });
});
document.querySelectorAll('table.sortable').forEach(function (table) {
  table.querySelectorAll('th').forEach(function (th, col) {
    th.addEventListener('click', function () {
      var body = table.tBodies[0], rows = Array.prototype.slice.call(body.rows);
      var down = th.dataset.dir !== 'down';
      th.dataset.dir = down ? 'down' : 'up';
      rows.sort(function (a, b) {
        var x = a.cells[col].dataset.v, y = b.cells[col].dataset.v;
        var nx = parseFloat(x), ny = parseFloat(y);
        var c = (!isNaN(nx) && !isNaN(ny)) ? nx - ny : String(x).localeCompare(String(y));
        return down ? -c : c;
      });
      rows.forEach(function (r) { body.appendChild(r); });
    });
  });
});
document.body.dataset.ready = '1';
"""


def render(data: dict) -> str:
    """The page: one HTML file with its style, drawings (inline SVG) and script inside."""
    e = html.escape
    ks, mem, prof = data["kernels"], data["memory"], data["profile"]
    total_flops = sum(k["flops"] or 0 for k in ks)
    max_ms = max([k["ms"] or 0 for k in ks] + [1e-12])
    rows = []
    for k in ks:
        ms = k["ms"]
        share = f'{100 * ms / prof["total_ms"]:.1f}%' if prof and ms is not None and prof["total_ms"] else "-"
        intensity = (k["flops"] / k["bytes"]) if k["flops"] is not None and k["bytes"] else None
        nodes = ", ".join(f"{op} '{nm}'" if nm else op for op, nm in k["nodes"])
        rows.append(
            f'<tr data-kernel="{k["index"]}"><td data-v="{k["index"]}" class="n">{k["index"]}</td>'
            f'<td data-v="{e(k["name"])}">{e(k["name"])}</td><td data-v="{e(nodes)}">{e(nodes)}</td>'
            f'<td data-v="{k["flops"] if k["flops"] is not None else ""}" class="n">{_count(k["flops"])}</td>'
            f'<td data-v="{k["bytes"] if k["bytes"] is not None else ""}" class="n">{_bytes(k["bytes"])}</td>'
            f'<td data-v="{intensity if intensity is not None else ""}" class="n">'
            f'{f"{intensity:.2f}" if intensity is not None else "-"}</td>'
            f'<td data-v="{ms if ms is not None else ""}" class="n ms">{f"{ms:.4f}" if ms is not None else "-"}</td>'
            f'<td data-v="{ms or 0}">{share} <span class="bar" style="width:{(ms or 0) / max_ms * 120:.0f}px">'
            f'</span></td></tr>')
    hist_ops = sorted(set(data["op_histogram"]) | set(data["op_histogram_after"]))
    before, after = data["op_histogram"], data["op_histogram_after"]
    hist = "".join(f'<tr><td data-v="{e(op)}">{e(op)}</td><td class="n" data-v="{before.get(op, 0)}">'
                   f'{before.get(op, 0)}</td><td class="n" data-v="{after.get(op, 0)}">{after.get(op, 0)}</td></tr>'
                   for op in hist_ops)
    gsvg, msvg = graph_svg(data), memory_svg(data)
    ports = "".join(f"<li>{e(n)}: {e(str(v[0]))}{e(str(v[1]))}</li>" for n, v in data["inputs"].items())
    outs = "".join(f"<li>{e(n)}: {e(str(v[0]))}{e(str(v[1]))}</li>" for n, v in data["outputs"].items())
    profile_line = (f'measured over {prof["runs"]} runs after {prof["warmup"]} warm-up runs: '
                    f'{prof["total_ms"]:.3f} ms a run in kernels' if prof else
                    "not measured (aotc report --profile runs the artifact and times each kernel)")
    notes = "".join(f'<p class="note">{e(n)}</p>' for n in data["notes"])
    summary = [("target", f'{data["target"]}, {data["threads"]} thread(s)'), ("ONNX opset", data["opset"]),
               ("nodes", f'{data["nodes_before"]} -> {data["nodes_after"]} after the passes, in {len(ks)} kernels'
                if data["nodes_before"] is not None else f"{len(ks)} kernels"),
               ("estimated work", f"{_count(total_flops)}FLOP" if data["nodes_after"] is not None else "-"),
               ("arena (workspace)", f'{_bytes(mem["arena"])}; lower bound {_bytes(mem["lower_bound"])}; without '
                                     f'reuse {_bytes(mem["intermediates"])}'),
               ("weights", _bytes(mem["weights"])),
               ("in-place reuses, Concat slices", f'{mem["inplace"]}, {mem["concat_slices"]}'),
               ("kernel times", profile_line)]
    dl = "".join(f"<dt>{e(str(a))}</dt><dd>{e(str(b))}</dd>" for a, b in summary)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="generator" content="aotc {e(data['aotc'])}">
<title>aotc report: {e(data['title'])}</title>
<style>{CSS}</style></head>
<body>
<h1>{e(data['title'])}</h1>
<div class="sub">compiled by aotc {e(data['aotc'])} for {e(data['target'])}: what it made of the model</div>
{notes}
<div id="js-errors"></div>
<h2>Summary</h2>
<dl>{dl}</dl>
<div style="display:flex;gap:48px"><div>inputs<ul>{ports}</ul></div><div>outputs<ul>{outs}</ul></div></div>
<h2 id="kernels-heading">Kernels</h2>
<p class="sub">One row per kernel (a fusion group), in the order they run. FLOPs are estimated from shapes
(2 per multiply-add of MatMul, Gemm, Conv; one per element otherwise); bytes are what the kernel reads and
writes; FLOP/byte is their ratio. Click a heading to sort; hover a row to see its box in the graph and the
buffers live while it runs.</p>
<div class="scroll"><table id="kernel-table" class="sortable"><thead><tr><th>#</th><th>kernel</th><th>ONNX nodes</th>
<th>FLOPs</th><th>bytes</th><th>FLOP/byte</th><th>ms / run</th><th>share</th></tr></thead>
<tbody>{''.join(rows)}</tbody></table></div>
<h2 id="graph-heading">Graph after optimization</h2>
<p class="sub">Each box is a kernel: the ONNX nodes fused into it. Arrows carry data from the kernel that
writes it to the kernels that read it; green boxes write graph outputs.</p>
<div class="scroll">{gsvg or '<p class="note">Drawn from the model: give it.</p>'}</div>
<h2 id="memory-heading">Memory plan</h2>
<p class="sub">The workspace's buffers: each spans the kernels from the one that writes it to the last
that reads it (across) and its bytes at its offset (up); orange ones are a kernel's scratch. The dashed
line is the lower bound, the most bytes live at once: no plan can use less.</p>
<div class="scroll">{msvg or '<p class="note">Drawn from the model: give it.</p>'}</div>
<h2 id="passes-heading">What the passes did</h2>
<p class="sub">Operators before (as imported) and after the graph passes (folding, fusion of patterns,
layout), which the kernels are made of.</p>
<table id="op-table" class="sortable"><thead><tr><th>operator</th><th>before</th><th>after</th></tr></thead>
<tbody>{hist}</tbody></table>
<script>{JS}</script>
</body></html>
"""
