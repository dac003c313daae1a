"""The layering the compiler rests on, kept by lints: the packages form one-way layers (each
imports only from its own layer and those below, lazy imports included) with no import cycle
between modules; op modules say what to compute and never name a target, a CPU layout or a
schedule decision; C syntax (any language's) is printed only under aotc/codegen; aotc's own
node kinds and private node attributes are named only in aotc/ir/internal.py."""
from __future__ import annotations

import ast
import re
from pathlib import Path

AOTC = Path(__file__).resolve().parent.parent / "aotc"
TARGET_WORDS = re.compile(r"\b(GemmTiles|avx2?|avx512|sse[0-9]?|neon|cuda|opencl|pack_a|pack_b|AOTC_GEMM_\w+)\b",
                          re.I)
C_SYNTAX = re.compile(r"#include|\bfor \((int|long)|__global\b|__kernel\b|__shared__|__syncthreads|\bexpf\(|"
                      r"get_global_id\(|\bstatic (void|int) \w+\(|\w+\[[^]]*\] = .*;$|[\"']\s*(if|while) \(|"
                      r"\{pad\}(if|while) ")


# aotc's packages and top-level modules, bottom layer first: a module may import from its own
# layer and the layers before it, never from a later one. (ir holds the graph IR, kernel the
# kernel IR that ops lower into; build, the toolchain and the loader, is below codegen, whose
# backends call it; check compiles and runs through the API; the compile cache serves api.)
LAYERS = [
    ("errors", "paths", "version"),
    ("ir",),
    ("kernel",),
    ("targets",),
    ("ops",),
    ("frontend",),
    ("passes",),
    ("fusion",),
    ("lowering",),
    ("schedule",),
    ("memory",),
    ("program",),
    ("build",),
    ("codegen",),
    ("compiler", "cache"),
    ("api", "generate"),
    ("check",),
    ("inspection", "report", "bench", "support", "cli", "__init__"),
]


def _module(p: Path) -> str:
    return ".".join(p.relative_to(AOTC.parent).with_suffix("").parts).removesuffix(".__init__")


def _imports(p: Path):
    """(module imported, line) for every import of an aotc module in file p, lazy ones included;
    `from pkg import name` counts as importing pkg.name when that is a module."""
    mod = _module(p)
    pkg = mod if p.name == "__init__.py" else mod.rsplit(".", 1)[0]
    for node in ast.walk(ast.parse(p.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                parts = pkg.split(".")
                base = ".".join(parts[:len(parts) - node.level + 1] + ([node.module] if node.module else []))
            elif (node.module or "").startswith("aotc"):
                base = node.module
            else:
                continue
            for a in node.names:
                sub = f"{base}.{a.name}"
                path = AOTC.parent / Path(*sub.split("."))
                yield (sub if path.with_suffix(".py").exists() or path.is_dir() else base), node.lineno
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("aotc"):
                    yield a.name, node.lineno


def _unit(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def test_packages_import_only_their_own_layer_and_below():
    rank = {name: k for k, names in enumerate(LAYERS) for name in names}
    units = {_unit(_module(p)) for p in AOTC.rglob("*.py")}
    assert units <= set(rank), f"packages or modules missing from LAYERS: {sorted(units - set(rank))}"
    bad = []
    for p in sorted(AOTC.rglob("*.py")):
        me = _unit(_module(p))
        for target, line in _imports(p):
            other = _unit(target)
            if other != me and rank[other] > rank[me]:
                bad.append(f"{p.relative_to(AOTC.parent)}:{line} imports {target} (layer {other} is above {me})")
    assert not bad, "imports against the layer order:\n" + "\n".join(bad)


def test_no_import_cycle_between_modules():
    graph: dict[str, set[str]] = {}
    for p in AOTC.rglob("*.py"):
        graph.setdefault(_module(p), set()).update(t for t, _ in _imports(p) if t != _module(p))
    # Tarjan's strongly connected components: a component of more than one module is a cycle
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    assert not cycles, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in cycles)


def test_own_node_kinds_and_attributes_are_declared_in_one_place():
    """A string that names one of aotc's node kinds ("aotc.Carry") or a private node attribute
    ("_count") appears only in aotc/ir/internal.py; everything else imports the name."""
    from aotc.ir import internal
    declared = {v for k, v in vars(internal).items() if k.isupper() and isinstance(v, str)}
    bad = []
    for p in sorted(AOTC.rglob("*.py")):
        if p.name == "internal.py" and p.parent.name == "ir":
            continue
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in declared:
                bad.append(f"{p.relative_to(AOTC.parent)}:{node.lineno}: {node.value!r}")
    assert not bad, "use the names of aotc/ir/internal.py instead of their strings:\n" + "\n".join(bad)


def test_private_node_attributes_are_declared():
    """A node attribute read or written under a name of aotc's own (`_...`) is one that
    aotc/ir/internal.py declares and documents: `node.attr("_x")`, `n.attrs["_x"]`,
    `n.attrs.get("_x")`, `"_x" in n.attrs` name none that it does not list."""
    from aotc.ir import internal
    declared = {v for k, v in vars(internal).items() if k.isupper() and isinstance(v, str)}

    def private(node) -> str | None:
        ok = isinstance(node, ast.Constant) and isinstance(node.value, str) and re.fullmatch(r"_[a-z][a-z0-9_]*",
                                                                                             node.value)
        return node.value if ok else None

    def on_attrs(node) -> bool:
        return isinstance(node, ast.Attribute) and node.attr == "attrs"

    bad = []
    for p in sorted(AOTC.rglob("*.py")):
        for node in ast.walk(ast.parse(p.read_text())):
            names = []
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args:
                f = node.func
                if f.attr == "attr" or (f.attr in ("get", "pop", "setdefault") and on_attrs(f.value)):
                    names.append(private(node.args[0]))
            elif isinstance(node, ast.Subscript) and on_attrs(node.value):
                names.append(private(node.slice))
            elif isinstance(node, ast.Compare) and any(on_attrs(c) for c in node.comparators):
                names.append(private(node.left))
            bad += [f"{p.relative_to(AOTC.parent)}:{node.lineno}: {n!r}" for n in names if n and n not in declared]
    assert not bad, "node attributes aotc/ir/internal.py does not declare:\n" + "\n".join(bad)


def _sources(*dirs):
    for d in dirs:
        yield from sorted((AOTC / d).rglob("*.py"))


def test_ops_name_no_target_or_schedule_decision():
    bad = []
    for p in _sources("ops"):
        text = p.read_text()
        for m in TARGET_WORDS.finditer(text):
            bad.append(f"{p.name}: {m.group(0)!r}")
        for m in re.finditer(r"^from \.\.(schedule|codegen|targets|build)\b.*$", text, re.M):
            bad.append(f"{p.name}: {m.group(0)}")
        if "ctx.target" in text:
            bad.append(f"{p.name}: ctx.target")
    assert not bad, "op modules must stay target-independent:\n" + "\n".join(bad)


def test_c_syntax_stays_in_codegen():
    bad = []
    for p in _sources("ops", "kernel", "schedule", "fusion", "memory", "passes", "program", "ir", "frontend"):
        if p.name == "names.py":          # the identifiers every printed language reserves
            continue
        for n, line in enumerate(p.read_text().splitlines(), 1):
            if C_SYNTAX.search(line) and not line.lstrip().startswith("#"):
                bad.append(f"{p.relative_to(AOTC)}:{n}: {line.strip()}")
    assert not bad, "C-family syntax outside aotc/codegen:\n" + "\n".join(bad)


def test_every_module_imports_first():
    """Each aotc module imported first, in a fresh interpreter's module table: an import cycle
    that works in one order (the tests') but not in another fails here (passes/normalize.py
    importing the frontend once did)."""
    import subprocess
    import sys
    modules = sorted(".".join(("aotc",) + p.relative_to(AOTC).with_suffix("").parts).removesuffix(".__init__")
                     for p in AOTC.rglob("*.py"))
    script = ("import importlib, sys, traceback\n"
              "base = set(sys.modules)\n"
              "bad = []\n"
              f"for m in {modules!r}:\n"
              "    for k in [k for k in sys.modules if k == 'aotc' or k.startswith('aotc.')]:\n"
              "        del sys.modules[k]\n"
              "    try:\n"
              "        importlib.import_module(m)\n"
              "    except Exception as e:\n"
              "        bad.append(f'{m}: {type(e).__name__}: {e}')\n"
              "print('\\n'.join(bad))\n")
    res = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=AOTC.parent)
    assert res.returncode == 0, res.stderr
    assert not res.stdout.strip(), "modules that fail to import first:\n" + res.stdout
