"""The compile cache: an artifact compiled before from the same inputs is copied instead of
compiled again (GPT-2: about 20 s of compiling becomes a copy of its files).

The key is a SHA-256 over everything the artifact depends on: the model file's bytes and those
of every external data file it names, its file name (the manifest records it), the shapes,
the constants (dtype, shape, bytes), the options (name, weights, fusion, static), the target
as loaded (its file's contents; `native` resolved to this machine's), the threads as resolved
(0: this machine's cores), the compilers the target names (path, size, time), and aotc itself
(its version and a digest of every file of the package: code, runtime headers, target files),
so that a checkout with uncommitted changes never gets an artifact of other code.

Hashing a large model file takes time (GPT-2's 500 MB: about 0.9 s), so a file's digest is
remembered with its size, inode and modification and change times, and hashed again only when
one of them differs. Entries live in $AOTC_CACHE_DIR, else $XDG_CACHE_HOME/aotc, else
~/.cache/aotc; each is stored whole or not at all (written aside, then renamed), and the least
recently used go when the cache holds more than $AOTC_CACHE_MAX_MIB (2048) MiB.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
from dataclasses import asdict
from functools import lru_cache
from pathlib import Path
from typing import Mapping, Optional

import numpy as np

from .targets import Target
from .version import __version__

ENTRY = "aotc-cache-entry.json"
DIGESTS = "file-digests.json"
DEFAULT_MAX_MIB = 2048


def cache_dir() -> Path:
    """Where the cache lives: $AOTC_CACHE_DIR, else $XDG_CACHE_HOME/aotc, else ~/.cache/aotc."""
    if os.environ.get("AOTC_CACHE_DIR"):
        return Path(os.environ["AOTC_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "aotc"


def _max_bytes() -> int:
    try:
        return int(float(os.environ.get("AOTC_CACHE_MAX_MIB", DEFAULT_MAX_MIB)) * (1 << 20))
    except ValueError:
        return DEFAULT_MAX_MIB << 20


@lru_cache(maxsize=1)
def package_digest() -> str:
    """A digest of every file of the aotc package as this process runs it (the code, and the
    runtime headers and target files it copies and reads)."""
    root = Path(__file__).resolve().parent
    h = hashlib.sha256(__version__.encode())
    files = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=True):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        files += [Path(dirpath) / f for f in filenames if not f.endswith((".pyc", ".pyo"))]
    for f in sorted(files):
        h.update(str(f.relative_to(root)).encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()


class _Digests:
    """SHA-256 of files, remembered in the cache directory with what os.stat says of them."""

    def __init__(self, root: Path):
        self.path = root / DIGESTS
        try:
            self.known = json.loads(self.path.read_text())
        except (OSError, ValueError):
            self.known = {}
        self.changed = False

    def of(self, path: Path, extra=None):
        """(digest, what `extra(path)` gave when the file was hashed): both recomputed when the
        file's size, inode, modification or change time differ from the remembered ones."""
        p = str(path.resolve())
        st = os.stat(p)
        stamp = [st.st_size, st.st_ino, st.st_mtime_ns, st.st_ctime_ns]
        old = self.known.get(p)
        if old and old["stamp"] == stamp:
            return old["sha256"], old.get("extra")
        h = hashlib.sha256()
        with open(p, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 22), b""):
                h.update(chunk)
        self.known[p] = {"stamp": stamp, "sha256": h.hexdigest(), "extra": extra(Path(p)) if extra else None}
        self.changed = True
        return self.known[p]["sha256"], self.known[p]["extra"]

    def known_as(self, path: Path, sha: str) -> bool:
        """Is `path` the file remembered with digest `sha`, unchanged since (no hashing)?"""
        try:
            st = os.stat(path)
        except OSError:
            return False
        old = self.known.get(str(path.resolve()))
        return bool(old) and old["sha256"] == sha and old["stamp"] == [st.st_size, st.st_ino, st.st_mtime_ns,
                                                                       st.st_ctime_ns]

    def remember(self, path: Path, sha: str) -> None:
        """`path` was just written with content of digest `sha`."""
        st = os.stat(path)
        self.known[str(path.resolve())] = {"stamp": [st.st_size, st.st_ino, st.st_mtime_ns, st.st_ctime_ns],
                                           "sha256": sha, "extra": None}
        self.changed = True

    def save(self) -> None:
        if not self.changed:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f".{DIGESTS}.{os.getpid()}")
        tmp.write_text(json.dumps(self.known))
        os.replace(tmp, self.path)


def _external_files(path: Path) -> list[str]:
    """The external data files the model at `path` names (relative to its folder)."""
    import onnx
    m = onnx.load(str(path), load_external_data=False)
    found = set()

    def tensors(g):
        yield from g.initializer
        for sp in g.sparse_initializer:
            yield sp.values
            yield sp.indices
        for n in g.node:
            yield from attributes(n)

    def attributes(n):
        for a in n.attribute:
            if a.HasField("t"):
                yield a.t
            yield from a.tensors
            if a.HasField("g"):
                yield from tensors(a.g)
            for sub in a.graphs:
                yield from tensors(sub)

    everything = list(tensors(m.graph))
    for fn in m.functions:
        for n in fn.node:
            everything += list(attributes(n))
    for t in everything:
        if t.data_location == onnx.TensorProto.EXTERNAL:
            found.update(e.value for e in t.external_data if e.key == "location")
    return sorted(found)


def _tool(name: str):
    """The compiler or archiver `name` as it would run: its resolved path, size and time."""
    p = shutil.which(name)
    if p is None:
        return None
    real = os.path.realpath(p)
    st = os.stat(real)
    return [real, st.st_size, st.st_mtime_ns]


def compute_key(model, target: Target, threads: int, name: str, shapes: Optional[Mapping],
                consts: Optional[Mapping], weights: str, fuse: bool, static: bool,
                dims: Optional[Mapping] = None) -> Optional[str]:
    """The cache key of an artifact, or None where the model cannot be read (compiling it says
    why). `target` is the loaded target, `threads` resolved."""
    root = cache_dir()
    digests = _Digests(root)
    model = Path(model)
    try:
        sha, external = digests.of(model, _external_files)
        data = []
        for rel in external or []:
            f = (model.parent / rel)
            data.append([rel, digests.of(f)[0] if f.is_file() else None])
    except Exception:                           # not a model (or unreadable): no caching, the compile says why
        return None
    try:
        digests.save()
    except OSError:
        pass
    try:
        return _hash(model, sha, data, target, threads, name, shapes, consts, weights, fuse, static, dims)
    except (TypeError, ValueError):             # shapes or constants the compile will refuse, saying why
        return None


def _hash(model: Path, sha: str, data: list, target: Target, threads: int, name, shapes, consts, weights, fuse,
          static, dims=None) -> str:
    material = {
        "aotc": [__version__, package_digest()],
        "model": [model.name, sha, data],
        "shapes": {k: [[int(x) for x in d] if isinstance(d, (tuple, list)) else int(d) for d in v]
                   for k, v in sorted((shapes or {}).items())},
        "dims": {k: [int(x) for x in v] for k, v in sorted((dims or {}).items())},
        "consts": {k: [np.asarray(v).dtype.str, list(np.asarray(v).shape),
                       hashlib.sha256(np.ascontiguousarray(v).tobytes()).hexdigest()]
                   for k, v in sorted((consts or {}).items())},
        "target": asdict(target),
        "threads": threads,
        "options": {"name": name, "weights": weights, "fuse": fuse, "static": static},
        "tools": [_tool(target.cc)] + ([_tool("ar")] if static else []),
    }
    return hashlib.sha256(json.dumps(material, sort_keys=True, default=str).encode()).hexdigest()


def artifact_files(out: Path, manifest: dict, build_files: list[str]) -> list[str]:
    """The files of the artifact in `out` (not whatever else the directory holds)."""
    names = {"manifest.json", manifest["library"], manifest["header"], *manifest["sources"], *build_files}
    if manifest["weights"].get("file"):
        names.add(manifest["weights"]["file"])
    return sorted(names)


def _stale(prefix: str) -> list[str]:
    """Files an earlier compile into the same directory may have left that this artifact may not
    have (compile_model and the build files remove them the same way)."""
    return [f"{prefix}.weights", f"{prefix}_weights.c", f"lib{prefix}.a", f"{prefix}-static.pc"]


def _copy(src: Path, dst: Path) -> str:
    """Copy `src` to `dst` (written aside, then renamed over it); the content's SHA-256."""
    h = hashlib.sha256()
    tmp = dst.with_name(f".{dst.name}.aotc-cache-{os.getpid()}")
    with open(src, "rb") as fi, open(tmp, "wb") as fo:
        for chunk in iter(lambda: fi.read(1 << 22), b""):
            h.update(chunk)
            fo.write(chunk)
    os.replace(tmp, dst)
    return h.hexdigest()


def restore(key: str, out: Path) -> Optional[dict]:
    """Copy the entry `key` into `out` and return its manifest; None when there is no such
    entry (or a damaged one, which is removed). A file of `out` that is the entry's, unchanged
    since it was written there, is not copied again (GPT-2's 650 MB of weights)."""
    root = cache_dir()
    entry = root / key
    try:
        meta = json.loads((entry / ENTRY).read_text())
        files = meta["files"]
        if not all((entry / f).is_file() for f in files):
            raise FileNotFoundError
    except (OSError, ValueError, KeyError, TypeError):
        if entry.exists():
            shutil.rmtree(entry, ignore_errors=True)
        return None
    out.mkdir(parents=True, exist_ok=True)
    digests = _Digests(root)
    for f in _stale(meta["name"]):
        if f not in files:
            (out / f).unlink(missing_ok=True)
    for f, sha in files.items():
        if not digests.known_as(out / f, sha):
            tmp = out / f".{f}.aotc-cache-{os.getpid()}"
            shutil.copyfile(entry / f, tmp)      # (the kernel's copy, no hashing: the entry says the digest)
            os.replace(tmp, out / f)
            digests.remember(out / f, sha)
    try:
        digests.save()
    except OSError:
        pass
    now = time.time()
    os.utime(entry, (now, now))                 # recently used
    return json.loads((out / "manifest.json").read_text())


def store(key: str, out: Path, files: list[str], name: str) -> None:
    """Copy the artifact's `files` from `out` into the entry `key`, whole or not at all, then
    keep the cache under its size by removing the least recently used entries."""
    root = cache_dir()
    size = sum((out / f).stat().st_size for f in files)
    if size > _max_bytes():
        return
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{key[:16]}-", dir=root))
    digests = _Digests(root)
    try:
        shas = {f: _copy(out / f, tmp / f) for f in files}
        (tmp / ENTRY).write_text(json.dumps({"name": name, "files": shas, "aotc": __version__}))
        os.rename(tmp, root / key)
    except OSError:                            # stored meanwhile by another process, or no room
        shutil.rmtree(tmp, ignore_errors=True)
        return
    for f, sha in shas.items():               # what `out` holds now is the entry: no copy at the next hit
        digests.remember(out / f, sha)
    try:
        digests.save()
    except OSError:
        pass
    _evict(root, keep=key)


def _evict(root: Path, keep: str) -> None:
    entries, now = [], time.time()
    for e in root.iterdir():
        if not e.is_dir():
            continue
        if e.name.startswith("."):              # an entry being written, or left by a process that died
            if now - e.stat().st_mtime > 3600:
                shutil.rmtree(e, ignore_errors=True)
            continue
        entries.append((e.stat().st_mtime, sum(f.stat().st_size for f in e.iterdir() if f.is_file()), e))
    total, limit = sum(s for _, s, _ in entries), _max_bytes()
    for _, s, e in sorted(entries, key=lambda x: x[0]):
        if total <= limit:
            break
        if e.name != keep:
            shutil.rmtree(e, ignore_errors=True)
            total -= s
