"""What the documentation cites exists: every repository path in README.md and docs/ (the dated
journal included: its history keeps its words, but its paths point at files that are there),
every relative link and the heading it points at, and no reference leaves the repository.
Every page of docs/ is in its index, docs/README.md."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]

# aotc/passes/qdq.py, tools/bench.py, targets/*.toml, docs/journal/ ... (not inside a longer path);
# <name> placeholders are not paths, nor ratios such as aotc/ORT
REPO_PATH = re.compile(r"(?<![\w./-])((?:aotc|tools|tests|docs|runtime|targets|models|\.ci)/[\w.*/-]*)")
# the shorthand DESIGN.md and the code use for modules: kernel/ir.py is aotc/kernel/ir.py
MODULE = re.compile(r"(?<![\w./-])((?:ir|ops|passes|kernel|schedule|codegen|memory|program|frontend|fusion|build|"
                    r"check)/[\w/]*\.py)\b")
# the journal, cited from docs/ as journal/performance.md
JOURNAL = re.compile(r"(?<![\w./-])(journal/[\w./-]*)")
LINK = re.compile(r"\]\(([^)\s]+)\)")
# a path above the file's folder, written as code: `../shared/ARCHITECTURE.md`
UP = re.compile(r"`(\.\./[\w./-]+)`")


def _citations(doc: Path, text: str | None = None):
    """(line number, description, what must exist) for each citation in `doc` (or in `text`,
    read as if it were `doc`)."""
    in_code = False
    for n, line in enumerate((doc.read_text() if text is None else text).splitlines(), 1):
        if line.startswith("```"):
            in_code = not in_code
        for m in REPO_PATH.finditer(line):
            p = m.group(1).rstrip(".,:;")
            last = p.rstrip("/").rsplit("/", 1)[-1]
            if "<" in line[m.end():m.end() + 1] or re.fullmatch(r"[A-Z]+", last):
                continue
            yield n, p, ROOT / p
        for m in MODULE.finditer(line):
            yield n, m.group(1), ROOT / "aotc" / m.group(1)
        if doc.parent == ROOT / "docs":
            for m in JOURNAL.finditer(line):
                yield n, m.group(1).rstrip(".,:;"), doc.parent / m.group(1).rstrip(".,:;")
        if in_code:
            continue
        for m in LINK.finditer(line):
            target = m.group(1)
            if re.match(r"[a-z]+:", target):
                yield n, f"link {target}: links outside the repository", None
                continue
            yield n, f"link {target}", target
        for m in UP.finditer(line):
            yield n, m.group(1), (doc.parent / m.group(1).rstrip(".,:;"))


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(doc: Path) -> set[str]:
    return {_slug(m.group(1)) for m in re.finditer(r"^#+ (.*)$", doc.read_text(), re.M)}


def _missing(doc: Path, what: str, target) -> str | None:
    if target is None:
        return what
    if isinstance(target, str):                     # a link: path and #anchor
        path, _, anchor = target.partition("#")
        dest = (doc.parent / path).resolve() if path else doc
        if not dest.is_relative_to(ROOT):
            return f"{what}: outside the repository"
        if not dest.exists():
            return what
        if anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
            return f"{what}: no heading #{anchor} in {dest.relative_to(ROOT)}"
        return None
    target = Path(target)
    if not target.resolve().is_relative_to(ROOT):
        return f"{what}: outside the repository"
    if "*" in target.name:
        return None if list(target.parent.glob(target.name)) else what
    return None if target.exists() else what


def test_every_cited_path_exists():
    bad = []
    for doc in DOCS:
        for n, what, target in _citations(doc):
            problem = _missing(doc, what, target)
            if problem:
                bad.append(f"{doc.relative_to(ROOT)}:{n}: {problem}")
    assert not bad, "the docs cite what is not there:\n" + "\n".join(bad)


def test_the_checker_sees_what_is_missing():
    """The checks above on a page that cites a file that is gone, a heading that is not there,
    a page outside the repository and a web address; and not on a ratio or a placeholder."""
    page = ROOT / "docs" / "probe.md"
    text = ("See aotc/kernel/gemm.py and `kernel/gone.py`, [x](USAGE.md#no-such-heading), [y](../../elsewhere.md),\n"
            "[z](https://example.com), `../shared/ARCHITECTURE.md`; aotc/ORT 1.05, targets/<name>.toml, journal/x.md.\n"
            "And what is there: aotc/paths.py, `schedule/cpu.py`, [usage](USAGE.md#c-api), targets/*.toml.\n")
    found = [p for p in (_missing(page, what, t) for _, what, t in _citations(page, text)) if p]
    assert "aotc/kernel/gemm.py" in found and "kernel/gone.py" in found and "journal/x.md" in found
    assert any("no heading #no-such-heading" in p for p in found)
    assert any(p.startswith("link ../../elsewhere.md") and "outside" in p for p in found)
    assert any("https://example.com" in p for p in found)
    assert any(p.startswith("../shared/ARCHITECTURE.md") for p in found)
    assert len(found) == 7, found


def test_every_doc_is_in_the_index():
    index = (ROOT / "docs" / "README.md").read_text()
    linked = {(ROOT / "docs" / m.group(1).partition("#")[0]).resolve() for m in LINK.finditer(index)}
    pages = [p for p in (ROOT / "docs").rglob("*.md") if p.name != "README.md" or p.parent != ROOT / "docs"]
    unlisted = [str(p.relative_to(ROOT)) for p in pages
                if p.resolve() not in linked and not any(d in linked for d in p.resolve().parents)]
    assert not unlisted, "docs/README.md does not list: " + ", ".join(sorted(unlisted))
