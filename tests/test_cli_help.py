"""`aotc --help` and each command's help read well on an 80-column terminal (no line over 80
columns, paragraphs filled line by line instead of broken mid-sentence, every word of the
docstrings there whole), and `aotc targets` says what targets/*.toml say."""
from __future__ import annotations

import inspect
import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from aotc import cli
from aotc.paths import TARGETS_DIR
from aotc.targets import native_target

ROOT = Path(__file__).resolve().parent.parent
COMMANDS = ["compile", "run", "check", "inspect", "report", "targets", "bench"]
WIDTH = 80


def aotc(*args, columns=WIDTH) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": str(columns), "NO_COLOR": "1", "PYTHONPATH": str(ROOT), "TERM": "dumb"}
    return subprocess.run([sys.executable, "-m", "aotc.cli", *args], env=env, capture_output=True, text=True,
                          timeout=120)


def _words(text: str) -> str:
    """The text without the panels' box drawing, its words separated by single spaces."""
    return " ".join(re.sub(r"[│╭╮╰╯─]", " ", text).split())


def _filled(lines: list[str], width: int) -> list[str]:
    """The lines of a paragraph wrapped at `width` that end before they had to: the next line's
    first word would have fitted after them."""
    bad = []
    for cur, nxt in zip(lines, lines[1:]):
        first = nxt.split()[0] if nxt.split() else ""
        if first and not first.startswith("[") and len(cur.rstrip()) + 1 + len(first) <= width:
            bad.append(f"{cur.rstrip()!r} then {nxt.strip()!r}")
    return bad


def _description(text: str) -> list[list[str]]:
    """The paragraphs of the text between the usage line and the first panel."""
    lines = text.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.strip().startswith("Usage:")) + 1
    end = next((i for i, ln in enumerate(lines) if ln.startswith("╭")), len(lines))
    paras, cur = [], []
    for ln in lines[start:end]:
        if ln.strip():
            cur.append(ln.strip())
        elif cur:
            paras.append(cur)
            cur = []
    return paras + ([cur] if cur else [])


def _panel_cells(text: str) -> list[tuple[list[str], int]]:
    """Each help cell of each panel (options, arguments, commands): its lines and its width."""
    cells, panel = [], []
    for ln in text.splitlines() + [""]:
        if ln.startswith("│"):
            panel.append(ln[1:-1])
            continue
        if panel:
            # the help column starts where the continuation lines' text does, indented the most;
            # a panel without them has one line a cell, nothing to fill
            starts = [len(p) - len(p.lstrip()) for p in panel if p.strip()]
            x = max(starts)
            if x == min(starts):
                panel = []
                continue
            for p in panel:
                head, body = p[:x], p[x:]
                if head.strip() or not cells:
                    cells.append(([body.strip()], len(p) - x - 1))
                elif body.strip():
                    cells[-1][0].append(body.strip())
            panel = []
    return cells


@pytest.mark.parametrize("command", [None] + COMMANDS)
def test_help_reads_well_at_80_columns(command):
    p = aotc(*([command] if command else []), "--help")
    assert p.returncode == 0, p.stderr
    text = p.stdout
    too_long = [ln for ln in text.splitlines() if len(ln) > WIDTH]
    assert not too_long, f"lines over {WIDTH} columns:\n" + "\n".join(too_long)
    bad = []
    for para in _description(text):
        bad += _filled(para, WIDTH - 2)
    for lines, width in _panel_cells(text):
        bad += _filled(lines, width)
    assert not bad, "lines broken before the width:\n" + "\n".join(bad)
    if command:
        # every word of the command's docstring is in its help, whole and in order
        fn = next(f for f in vars(cli).values() if callable(f) and getattr(f, "__name__", "") == f"{command}_cmd")
        want = " ".join(inspect.cleandoc(fn.__doc__).split())
        got = " ".join(" ".join(para) for para in _description(text))
        assert got == want


def test_target_help_points_at_aotc_targets():
    """The --target help is a sentence that points at `aotc targets`, not the targets' list again."""
    for command in ["compile", "check", "inspect", "report", "bench"]:
        text = _words(aotc(command, "--help").stdout)
        assert "`aotc targets` lists them" in text, command
        assert "winograd4" not in text and "qdq_float" not in text, command
    assert len(cli._TARGET_HELP) < 200


def test_the_command_list_is_one_line_each():
    text = aotc("--help", columns=120).stdout
    for c in COMMANDS:
        line = next(ln for ln in text.splitlines() if re.match(rf"│ {c}\s", ln))
        assert line.rstrip("│ ").endswith("."), line


def test_targets_lists_every_target_file_and_its_options():
    files = {p.stem: tomllib.loads(p.read_text()) for p in sorted(TARGETS_DIR.glob("*.toml"))}
    assert len(files) >= 5
    p = aotc("targets", "--json")
    assert p.returncode == 0, p.stderr
    rows = {r["name"]: r for r in json.loads(p.stdout)}
    assert set(rows) == set(files) | {"native"}
    assert native_target() in rows["native"]["description"]
    for name, t in files.items():
        assert rows[name]["description"] == t["description"]
        assert rows[name]["options"] == {k: " ".join(v.split()) for k, v in t.get("options", {}).items()}
        assert rows[name]["arch"] == t.get("arch", [])
    assert "tf32" in rows["cuda"]["options"] and "winograd4" in rows["c"]["options"]
    text = aotc("targets").stdout
    flat = _words(text)
    for name, t in files.items():
        assert re.search(rf"^{re.escape(name)}\s", text, re.M), name
        assert " ".join(t["description"].split()) in flat
        for opt in t.get("options", {}):
            assert f",{opt} " in flat, (name, opt)
    assert ":sm_80, :sm_90" in flat


def test_weights_takes_only_its_choices(tmp_path):
    """--weights is a choice: anything else is refused before the model is read, naming the choices."""
    p = aotc("compile", tmp_path / "nothere.onnx", "-o", tmp_path / "out", "--weights", "sideways")
    assert p.returncode == 2
    msg = _words(p.stderr)
    assert "'sideways'" in msg and "'auto', 'embed', 'external'" in msg and "nothere" not in msg
    assert "Traceback" not in p.stderr
