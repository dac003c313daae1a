"""The layering the execution model rests on, kept by a lint: op modules say what to compute
and never name a target, a CPU layout or a schedule decision; C syntax (any language's) is
printed only under aotc/codegen; ops reach the kernel IR, not the schedule or the printers."""
from __future__ import annotations

import re
from pathlib import Path

AOTC = Path(__file__).resolve().parent.parent / "aotc"
TARGET_WORDS = re.compile(r"\b(GemmTiles|avx2?|avx512|sse[0-9]?|neon|cuda|opencl|pack_a|pack_b|AOTC_GEMM_\w+)\b",
                          re.I)
C_SYNTAX = re.compile(r"#include|\bfor \((int|long)|__global\b|__kernel\b|__shared__|__syncthreads|\bexpf\(|"
                      r"get_global_id\(|\bstatic (void|int) \w+\(|\w+\[[^]]*\] = .*;$")


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
