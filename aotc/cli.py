"""The `aotc` command line."""
from __future__ import annotations

import json
import sys
import traceback
from contextlib import contextmanager, nullcontext
from enum import Enum
from pathlib import Path
from typing import List, Optional

import numpy as np
import typer
from rich.console import Console

from .version import __version__
from .bench import MIN_BLOCK_MS as _MIN_BLOCK_MS
from .errors import AotcError

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="aotc: ahead-of-time compiler from ONNX models to shared libraries (C, OpenCL, CUDA).")
# What targets there are and the options each takes are in targets/*.toml: `aotc targets` lists them.
_TARGET_HELP = ("Target: native (the default: the best CPU target of this machine), c, c-avx2, c-avx512, "
                "opencl, cuda, with its :arch and ,options, or a target .toml file. `aotc targets` lists them.")
_THREADS_HELP = "Most threads the artifact runs on; 0 = every core of this machine."
_SHAPE = "NAME=DIMS"
_FILE = "NAME=FILE"


class Weights(str, Enum):
    """Where the artifact keeps its weights (--weights)."""
    auto = "auto"
    embed = "embed"
    external = "external"


err = Console(stderr=True, highlight=False, soft_wrap=True)
out = Console(highlight=False, soft_wrap=True)
_state = {"verbose": False}


def _version(value: bool):
    if value:
        out.print(f"aotc {__version__}")
        raise typer.Exit()


@app.callback()
def main_options(
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Show the traceback when something fails."),
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version."),
):
    _state["verbose"] = verbose


def _reflowed(f):
    """Typer's rich help keeps the line breaks of a docstring's paragraphs after the first, which
    then break mid-sentence on a terminal of any other width: join each paragraph's lines, so
    that the help wraps at the terminal's width."""
    import inspect
    f.__doc__ = "\n\n".join(" ".join(p.split()) for p in inspect.cleandoc(f.__doc__).split("\n\n"))
    return f


def _on_terminal() -> bool:
    """A person watching: stdout and stderr are both terminals (not a pipe, a file or a test)."""
    return sys.stdout.isatty() and sys.stderr.isatty()


@contextmanager
def _stages():
    """The `progress` callback of compile_model, run_check, inspect_model and bench_model: on a
    terminal, the stages as they go on stderr (the one running with a spinner and its seconds,
    the ones done with theirs; the kernel count is in the stage names), erased when the command
    is done; None (nothing shown) when stdout or stderr is not a terminal."""
    if not _on_terminal():
        yield None
        return
    from rich.progress import Progress, ProgressColumn, SpinnerColumn, TextColumn
    from rich.text import Text

    class Seconds(ProgressColumn):
        def render(self, task):
            return Text(f"{(task.finished_time if task.finished else task.elapsed) or 0:5.1f} s", style="yellow")

    with Progress(SpinnerColumn(finished_text="[green]done[/]"), TextColumn("{task.description}"), Seconds(),
                  console=err, transient=True) as bar:
        @contextmanager
        def stage(message: str):
            task = bar.add_task(message, total=1)
            try:
                yield
            finally:
                bar.update(task, completed=1)
        yield stage


def _fail(e: BaseException) -> None:
    if _state["verbose"]:
        traceback.print_exc()
    if isinstance(e, AotcError):
        err.print(f"[bold red]error:[/] {e.message}", markup=True)
        if e.hint:
            err.print(f"[bold]hint:[/] {e.hint}", markup=True)
        raise typer.Exit(e.exit_code)
    err.print(f"[bold red]error:[/] internal error: {type(e).__name__}: {e}", markup=True)
    err.print("[bold]hint:[/] re-run with --verbose for the traceback, and please report it", markup=True)
    raise typer.Exit(2)


def _parse_shapes(items: List[str]) -> dict:
    """--shape NAME=DIMS: each dim a size, or LO..HI (a run-time dimension; %M: multiples of M)."""
    from .ir.dims import parse_range
    shapes = {}
    for it in items or []:
        name, sep, dims = it.rpartition("=")
        if not sep or not name:
            raise AotcError(f"--shape {it!r} is not NAME=DIMS", "example: --shape x=1x3x224x224")
        try:
            shapes[name] = tuple(parse_range(d) for d in dims.lower().split("x")) if dims else ()
        except ValueError:
            raise AotcError(f"--shape {it!r}: dims must be integers or LO..HI ranges separated by 'x'",
                            "example: --shape x=1x3x224x224, --shape x=1x3x32..960x32..960") from None
        if any(isinstance(d, int) and d < 0 for d in shapes[name]):
            raise AotcError(f"--shape {it!r}: dims must not be negative")
    return shapes


def _parse_dims(items: List[str]) -> dict:
    """--dim NAME=LO..HI[%M]: a symbolic dimension (dim_param) of the model's inputs as a range."""
    from .ir.dims import parse_range
    dims = {}
    for it in items or []:
        name, sep, text = it.rpartition("=")
        try:
            if not sep or not name:
                raise ValueError
            r = parse_range(text)
            if isinstance(r, int):
                r = (r, r)
        except ValueError:
            raise AotcError(f"--dim {it!r} is not NAME=LO..HI", "example: --dim seq=1..512 (or 32..960%32 for "
                            "multiples of 32)") from None
        dims[name] = r
    return dims


def _parse_sizes(items: List[str]) -> dict:
    """--sizes NAME=N,N,...: the sizes `aotc check` runs a run-time dimension at."""
    sizes = {}
    for it in items or []:
        name, sep, text = it.rpartition("=")
        try:
            if not sep or not name:
                raise ValueError
            sizes[name] = [int(v) for v in text.split(",")]
        except ValueError:
            raise AotcError(f"--sizes {it!r} is not NAME=N,N,...", "example: --sizes seq=1,77,512") from None
    return sizes


def _load_arrays(items: List[str], flag: str) -> dict:
    arrays = {}
    for it in items or []:
        name, sep, path = it.partition("=")
        if not sep:
            # a bare .npz file supplies every input it contains
            p = Path(it)
            if p.suffix == ".npz" and p.is_file():
                with np.load(p) as z:
                    arrays.update({k: z[k] for k in z.files})
                continue
            raise AotcError(f"{flag} {it!r} is not NAME=FILE.npy (or a .npz file)")
        p = Path(path)
        if not p.is_file():
            raise AotcError(f"{flag} {name}: no such file {path}")
        try:
            a = np.load(p, allow_pickle=False)
        except Exception as e:
            raise AotcError(f"{flag} {name}: cannot read {path} as .npy/.npz: {e}") from None
        if isinstance(a, np.lib.npyio.NpzFile):
            with a:
                if name in a.files:
                    arrays[name] = a[name]
                elif len(a.files) == 1:
                    arrays[name] = a[a.files[0]]
                else:
                    raise AotcError(f"{flag} {name}: {path} has several arrays and none named {name!r}")
        else:
            arrays[name] = a
    return {k: _bfloat16_restored(a) for k, a in arrays.items()}


def _bfloat16_restored(a: np.ndarray) -> np.ndarray:
    """np.save writes an ml_dtypes.bfloat16 array as raw 2-byte elements ('<V2'), which np.load
    gives back as such: read them as the bfloat16 they are (no other dtype saves so)."""
    from .ir import dtypes
    return a.view(dtypes.BFLOAT16) if a.dtype == np.dtype("V2") else a


@app.command("compile", short_help="Compile an ONNX model into a shared library, its header and sources.")
@_reflowed
def compile_cmd(
    model: Path = typer.Argument(..., help="The .onnx file."),
    target: str = typer.Option("native", "--target", "-t", help=_TARGET_HELP),
    output: Path = typer.Option(..., "--output", "-o", metavar="DIR", help="Directory to write the artifact into."),
    threads: int = typer.Option(0, "--threads", min=0, help=_THREADS_HELP + " The workspace holds per-thread "
                                "scratch for this many; an instance can be asked for fewer at run time."),
    name: Optional[str] = typer.Option(None, "--name", help="C prefix for every symbol (default: file name)."),
    shape: List[str] = typer.Option([], "--shape", metavar=_SHAPE,
                                    help="Fix an input's shape: x=1x3x224x224; a dim may be a range of sizes "
                                    "the artifact takes at run time: x=1x3x32..960x32..960. Repeatable."),
    dim: List[str] = typer.Option([], "--dim", metavar="NAME=LO..HI",
                                  help="Let a symbolic dim of the model (dim_param) take any size in a range at "
                                  "run time: seq=1..512 (%M: multiples of M; a range may start at 0, a decoder's empty "
                                  "past). Repeatable."),
    const: List[str] = typer.Option([], "--const", metavar=_FILE,
                                    help="Bind an input to a constant from a .npy file. Repeatable."),
    weights: Weights = typer.Option(Weights.auto, "--weights", help="embed (static const C data), external "
                                    "(NAME.weights file), or auto (external above 8 MiB)."),
    no_fuse: bool = typer.Option(False, "--no-fuse", help="One kernel per node (for debugging)."),
    static: bool = typer.Option(False, "--static", help="Also build lib<name>.a, for C programs that link the "
                                "model in (c and opencl targets)."),
    no_cache: bool = typer.Option(False, "--no-cache", help="Compile afresh: neither copy the artifact from the "
                                  "compile cache nor store it there ($XDG_CACHE_HOME/aotc)."),
    report: Optional[Path] = typer.Option(None, "--report", metavar="FILE", help="Also write the HTML page of "
                                          "`aotc report` (without kernel times) here."),
):
    """Compile MODEL into DIR: lib<name>.so, <name>.h, the sources, manifest.json, and for C
    builds <name>.pc (pkg-config) and <name>Config.cmake (CMake's find_package)."""
    try:
        from .api import build_artifact
        with _stages() as progress:
            built = build_artifact(model, target=target, output_dir=output, name=name, shapes=_parse_shapes(shape),
                                   consts=_load_arrays(const, "--const"), weights=weights.value, fuse=not no_fuse,
                                   threads=threads, static=static, cache=not no_cache, progress=progress,
                                   dims=_parse_dims(dim))
        d = built.directory
        m = json.loads((d / "manifest.json").read_text())
        out.print(f"wrote {d}/{m['library']} (target {m['target']}, {len(m['kernels'])} kernels, up to "
                  f"{m['threads']} thread(s), workspace {m['workspace_bytes']} bytes, "
                  f"weights {m['weights']['bytes']} bytes {m['weights']['mode']})"
                  + (f" and {d}/lib{m['name']}.a" if static else "")
                  + (", from the compile cache" if built.cached else ""))
        subnormal = m.get("subnormal_weights", {})
        if subnormal:
            out.print(f"  {sum(subnormal.values())} subnormal weight values in {len(subnormal)} tensor(s) made zero "
                      "(`aotc inspect` lists them; the target option ,ieee_subnormals keeps them)")
        for name, why in m.get("unrunnable_branches", {}).items():
            out.print(f"  note: If {name!r}: {why}; a run that takes it returns status AOTC_ERR_BRANCH")
        if report:
            from . import report as html_report
            with _stages() as progress:
                data = html_report.collect(model, target, _parse_shapes(shape), _load_arrays(const, "--const"),
                                           threads, not no_fuse, progress, _parse_dims(dim))
            html_report.write(data, report)
            out.print(f"wrote {report}")
    except typer.Exit:
        raise
    except Exception as e:
        _fail(e)


@app.command("run", short_help="Run a compiled artifact on inputs from .npy / .npz files.")
@_reflowed
def run_cmd(
    artifact: Path = typer.Argument(..., help="Directory written by `aotc compile`."),
    input: List[str] = typer.Option([], "--input", "-i", metavar=_FILE,
                                    help="An input from a .npy file, or a .npz with every input. Repeatable."),
    output_dir: Path = typer.Option(Path("."), "--output-dir", metavar="DIR",
                                    help="Where to write <output>.npy files."),
    threads: int = typer.Option(0, "--threads", min=0, help="Threads to run on; 0 = every core, up to what the "
                                "artifact was compiled for."),
):
    """Run a compiled artifact on inputs from .npy / .npz files; writes one .npy per output.

    bfloat16, float8 and int4 / int2 arrays are ml_dtypes ones, which np.save writes as raw
    elements ('<V2', '<V1'): such inputs are read as the type the model takes, and
    np.load(out).view(ml_dtypes.float8_e4m3fn) (say) reads an output."""
    try:
        from .api import load
        m = load(artifact, threads=threads)
        arrays = _load_arrays(input, "--input")
        results = m.run(arrays)
        output_dir.mkdir(parents=True, exist_ok=True)
        # files are named after the outputs' C fields: unique even when ONNX names repeat
        fields = [o["c_name"] for o in m.manifest["outputs"]]
        for name, field, a in zip(m.output_names, fields, results):
            p = output_dir / f"{field}.npy"
            np.save(p, a)
            out.print(f"{name}: {a.dtype}{list(a.shape)} -> {p}")
    except typer.Exit:
        raise
    except Exception as e:
        _fail(e)


@app.command("check", short_help="Compile a model and compare its outputs with ONNX Runtime's.")
@_reflowed
def check_cmd(
    model: Path = typer.Argument(..., help="The .onnx file."),
    target: str = typer.Option("native", "--target", "-t", help=_TARGET_HELP),
    threads: int = typer.Option(0, "--threads", min=0, help=_THREADS_HELP),
    input: List[str] = typer.Option([], "--input", "-i", metavar=_FILE,
                                    help="An input from a .npy file (default: seeded random inputs)."),
    shape: List[str] = typer.Option([], "--shape", metavar=_SHAPE, help="As for compile."),
    dim: List[str] = typer.Option([], "--dim", metavar="NAME=LO..HI", help="As for compile."),
    sizes: List[str] = typer.Option([], "--sizes", metavar="NAME=N,N,...",
                                    help="Sizes of a run-time dimension to check (default: both ends and the "
                                    "middle of its range). Repeatable."),
    const: List[str] = typer.Option([], "--const", metavar=_FILE, help="As for compile."),
    rtol: Optional[float] = typer.Option(None, "--rtol", min=0, help="Relative tolerance for float outputs "
                                         "(default 1e-4; 1e-2 on a target with tf32, 5e-2 with bf16)."),
    atol: Optional[float] = typer.Option(None, "--atol", min=0, help="Absolute tolerance for float outputs "
                                         "(default 1e-5; 1e-2 on a target with tf32, 5e-2 with bf16)."),
    seed: int = typer.Option(0, "--seed", help="Seed for the random inputs."),
    report: Optional[Path] = typer.Option(None, "--report", metavar="FILE", help="Write a JSON report here."),
    junit: Optional[Path] = typer.Option(None, "--junit", metavar="FILE", help="Write a JUnit XML report here."),
    keep: Optional[Path] = typer.Option(None, "--keep", metavar="DIR",
                                        help="Keep the compiled artifact in this directory."),
):
    """Compile MODEL, run it and ONNX Runtime on the same inputs, and compare every output.

    Where ONNX Runtime has no kernel for an op, the ONNX reference implementation runs instead,
    and the report says so. Exit 0: parity; 1: mismatch; 2: cannot compile."""
    try:
        from .check.runner import junit_xml, run_check
        arrays = _load_arrays(input, "--input") or None
        with _stages() as progress:
            res = run_check(model, target=target, inputs=arrays, rtol=rtol, atol=atol, shapes=_parse_shapes(shape),
                            consts=_load_arrays(const, "--const"), output_dir=keep, seed=seed, progress=progress,
                            threads=threads, dims=_parse_dims(dim), sizes=_parse_sizes(sizes))
    except typer.Exit:
        raise
    except Exception as e:
        _fail(e)
        return
    out.print(f"{model.name} on target {res.target} (rtol {res.rtol:g}, atol {res.atol:g})")
    if rtol is None and atol is None:
        from .check.parity import tolerance_note
        from .targets import load_target
        note = tolerance_note(load_target(target))
        if note:
            out.print(f"  tolerances widened: {note}", markup=False)
    out.print(f"  expected outputs from {res.reference}", markup=False)
    from rich.markup import escape
    w = max([24] + [len(o.name) for o in res.outputs if " [" in o.name])    # names with their sizes whole
    out.print(f"  {'output':{w}} {'shape':>18} {'max abs err':>12} {'max rel err':>12} {'max ULP':>10}  result")
    for o in res.outputs:
        head = escape(f"  {o.name[:w]:{w}} {str(o.shape):>18}")
        if not o.values_compared:           # drawn from random numbers: shape and dtype only
            verdict = f"[yellow]random[/] ({o.note})" if o.passed else f"[red]MISMATCH: {o.note}[/]"
            out.print(f"{head} {'-':>12} {'-':>12} {'-':>10}  {verdict}")
            continue
        verdict = "[green]ok[/]" if o.passed else f"[red]MISMATCH ({o.mismatches} elements) {o.note}[/]"
        out.print(f"{head} {o.max_abs_err:12.3g} {o.max_rel_err:12.3g} {o.max_ulp:10.0f}  {verdict}")
    out.print("[green]PASS[/]" if res.passed else "[red]FAIL[/]")
    if report:
        report.write_text(json.dumps(res.as_dict(), indent=2) + "\n")
    if junit:
        junit.write_text(junit_xml(res))
    raise typer.Exit(0 if res.passed else 1)


@app.command("inspect", short_help="What aotc makes of a model: fusion groups, kernels, memory plan.")
@_reflowed
def inspect_cmd(
    model: Path = typer.Argument(..., help="The .onnx file."),
    target: str = typer.Option("native", "--target", "-t", help=_TARGET_HELP),
    shape: List[str] = typer.Option([], "--shape", metavar=_SHAPE, help="As for compile."),
    dim: List[str] = typer.Option([], "--dim", metavar="NAME=LO..HI", help="As for compile."),
    const: List[str] = typer.Option([], "--const", metavar=_FILE, help="As for compile."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of text."),
):
    """Op histogram, unsupported ops, node and kernel counts after optimization, fusion groups
    and the memory plan (arena, sum of intermediates, lower bound)."""
    try:
        from .inspection import inspect_model
        with _stages() as progress:
            info = inspect_model(model, target, _parse_shapes(shape), _load_arrays(const, "--const"),
                                 progress=progress, dims=_parse_dims(dim))
    except typer.Exit:
        raise
    except Exception as e:
        _fail(e)
        return
    if as_json:
        out.print_json(json.dumps(info))
        return
    from .inspection import format_text
    out.print(format_text(info), markup=False)
    if info["unsupported"]:
        raise typer.Exit(2)


@app.command("report", short_help="Write an HTML page of what aotc makes of a model: kernels, graph, memory.")
@_reflowed
def report_cmd(
    model: Path = typer.Argument(..., help="The .onnx file, or an artifact directory written by `aotc compile`."),
    output: Path = typer.Option(..., "--output", "-o", metavar="FILE", help="The HTML file to write."),
    target: str = typer.Option("native", "--target", "-t", help=_TARGET_HELP),
    threads: int = typer.Option(0, "--threads", min=0, help=_THREADS_HELP),
    shape: List[str] = typer.Option([], "--shape", metavar=_SHAPE, help="As for compile."),
    dim: List[str] = typer.Option([], "--dim", metavar="NAME=LO..HI", help="As for compile."),
    const: List[str] = typer.Option([], "--const", metavar=_FILE, help="As for compile."),
    profile: bool = typer.Option(False, "--profile", help="Also run the artifact (compiled for it, or the "
                                 "directory's) on random inputs and time every kernel."),
    runs: int = typer.Option(20, "--runs", min=1, help="Timed runs for --profile."),
    model_file: Optional[Path] = typer.Option(None, "--model", metavar="FILE", help="For an artifact directory: "
                                              "the model it was compiled from (default: the file its manifest "
                                              "names, in it or beside it)."),
    as_json: Optional[Path] = typer.Option(None, "--json", metavar="FILE", help="Also write the page's data here."),
):
    """Write one self-contained HTML page (no network) of what aotc makes of MODEL: the kernels
    (the fusion groups) with their estimated FLOPs and bytes and, with --profile, their measured
    times; the graph after optimization; the memory plan drawn as buffers over kernel order and
    arena offset, with the lower bound marked; and the operators before and after the passes.

    Given an artifact directory, the page is of that artifact: the target, threads and shapes it
    was compiled with, its own kernel times; the graph and the memory plan need its model."""
    try:
        from . import report as html_report
        with _stages() as progress:
            if model.is_dir():
                data = html_report.collect_artifact(model, model_file, progress=progress)
                if profile:
                    with (progress or (lambda s: nullcontext()))(f"timing {len(data['kernels'])} kernels"):
                        html_report.profile(model, data, runs=runs)
            else:
                shapes, consts, dims = _parse_shapes(shape), _load_arrays(const, "--const"), _parse_dims(dim)
                data = html_report.collect(model, target, shapes, consts, threads, progress=progress, dims=dims)
                if profile:
                    html_report.profile_model(model, data, target, shapes, consts, threads, runs, progress, dims)
        html_report.write(data, output, as_json)
    except typer.Exit:
        raise
    except Exception as e:
        _fail(e)
        return
    ks = data["kernels"]
    out.print(f"wrote {output} ({len(ks)} kernels, {len(data['memory']['buffers'])} buffers drawn"
              + (f", {data['profile']['total_ms']:.3f} ms a run in kernels" if data["profile"] else "") + ")")


@app.command("targets", short_help="List the targets and the options each takes.")
@_reflowed
def targets_cmd(as_json: bool = typer.Option(False, "--json", help="Print JSON instead of text.")):
    """The targets --target takes, from their files (targets/*.toml): what each generates, the
    architectures (:arch) and options (,option) it takes, whether this machine runs its code and
    has its compiler. A target's name takes them as cuda:sm_90,tf32 or native,winograd4."""
    try:
        rows = _targets()
    except Exception as e:
        _fail(e)
        return
    if as_json:
        out.print_json(json.dumps(rows))
        return
    from rich.table import Table
    table = Table(box=None, show_header=False, padding=(0, 1), pad_edge=False)
    table.add_column(no_wrap=True)
    table.add_column(no_wrap=True)
    table.add_column()
    for r in rows:
        table.add_row(r["name"], "", r["description"] + (f" ({r['note']})" if r["note"] else ""))
        if r["arch"]:
            table.add_row("", ":" + ", :".join(r["arch"]), "one of its architectures (default: all)")
        for opt, text in r["options"].items():
            table.add_row("", "," + opt, text)
    out.print(table)
    out.print(f"\nOr the path of a target .toml file of your own, written like these ({_targets_dir()}).",
              markup=False)


def _targets_dir() -> str:
    from .paths import TARGETS_DIR
    return str(TARGETS_DIR)


def _targets() -> list[dict]:
    """Each target file's name, description, architectures and options, and whether this machine
    runs its code (the ISA it requires) and has its compiler; native first, as what it picks."""
    import shutil
    from .targets import available, load_target, native_target, runs_here
    rows = [{"name": "native", "description": f"the best CPU target this machine runs: {native_target()} here",
             "arch": [], "options": {}, "runs_here": True, "compiler": None, "note": ""}]
    for name in available():
        if name == "native":
            continue
        t = load_target(name)
        runs, cc = runs_here(t), t.cc
        notes = [] if runs else [f"this CPU lacks {', '.join(t.requires)}"]
        if not shutil.which(cc):
            notes.append(f"{cc} is not installed here")
        rows.append({"name": name, "description": t.description, "arch": list(t.arch),
                     "options": {k: " ".join(v.split()) for k, v in t.options.items()},
                     "runs_here": runs, "compiler": cc, "note": "; ".join(notes)})
    return rows


@app.command("bench", short_help="Time a model's artifact against ONNX Runtime on the same inputs.")
@_reflowed
def bench_cmd(
    model: Path = typer.Argument(..., help="The .onnx file."),
    target: str = typer.Option("native", "--target", "-t", help="A CPU target (default native: the best one of "
                               "this machine), with its ,options, or a target .toml file. `aotc targets` lists them."),
    threads: str = typer.Option("1", "--threads", metavar="N[,N...]",
                                help="Thread counts to time at, each for aotc and ONNX Runtime: 1,2 (say)."),
    shape: List[str] = typer.Option([], "--shape", metavar=_SHAPE, help="As for compile."),
    const: List[str] = typer.Option([], "--const", metavar=_FILE, help="As for compile."),
    input: List[str] = typer.Option([], "--input", "-i", metavar=_FILE,
                                    help="An input from a .npy file (default: seeded random inputs)."),
    runs: int = typer.Option(30, "--runs", min=1, help="Timed runs of each engine at each thread count."),
    warmup: int = typer.Option(5, "--warmup", min=0, help="Untimed runs of each engine first."),
    rounds: int = typer.Option(5, "--rounds", min=1, help="Rounds over the engines, which share out the runs."),
    min_block_ms: float = typer.Option(_MIN_BLOCK_MS, "--min-block-ms", min=0.0,
                                       help="Each engine's block of runs in a round lasts at least this long: "
                                            "an engine whose runs are shorter runs more of them (0: --runs / "
                                            "--rounds each round)."),
    seed: int = typer.Option(0, "--seed", help="Seed for the random inputs."),
    as_json: Optional[Path] = typer.Option(None, "--json", metavar="FILE",
                                           help="Also write the medians and every run's time here."),
):
    """Time MODEL compiled by aotc against ONNX Runtime, on the same inputs, at each thread count.

    Each engine runs --warmup times, then --rounds rounds in which every engine in turn runs its
    share of --runs back to back, after a pause and an untimed run, or as many more as fill
    --min-block-ms (so that a fast model's median is of a warm core, not of the runs right after
    the pause); the engines alternate from round to round, so that a shared machine's slow spells
    hit all alike. Prints each engine's median and aotc/ORT, ONNX Runtime's median over aotc's
    (above 1: aotc is faster)."""
    try:
        from .bench import bench_model
        counts = _thread_counts(threads)
        with _stages() as progress:
            r = bench_model(model, target=target, threads=counts, shapes=_parse_shapes(shape),
                            consts=_load_arrays(const, "--const"), inputs=_load_arrays(input, "--input") or None,
                            runs=runs, warmup=warmup, rounds=rounds, seed=seed, progress=progress,
                            min_block_ms=min_block_ms)
    except typer.Exit:
        raise
    except Exception as e:
        _fail(e)
        return
    n = min(len(v) for v in r["samples_ms"].values())
    block = f" (blocks of {min_block_ms:g} ms or more)" if min_block_ms > 0 else ""
    out.print(f"{model.name} on target {r['target']}: medians of {n} runs per engine or more{block} after {warmup} "
              f"warm-up runs, engines alternating over {rounds} rounds (ms)", markup=False)
    out.print(f"  {'threads':>7} {'aotc':>10} {'ORT':>10} {'aotc/ORT':>9}")
    for t in counts:
        a, o = r["median_ms"][f"aotc, {t}"], r["median_ms"][f"ORT, {t}"]
        out.print(f"  {t:>7} {a:>10.3f} {o:>10.3f} {r['ort_over_aotc'][t]:>9.2f}")
    out.print("aotc/ORT: ONNX Runtime's median over aotc's (above 1: aotc is faster). Largest difference "
              f"between their outputs: {max(r['max_abs_diff'].values()):.3g}.")
    if as_json:
        as_json.write_text(json.dumps({**r, **{k: {str(t): v for t, v in r[k].items()}
                                              for k in ("ort_over_aotc", "max_abs_diff")}}, indent=2) + "\n")


def _thread_counts(text: str) -> list[int]:
    try:
        counts = [int(t) for t in text.split(",")]
    except ValueError:
        raise AotcError(f"--threads {text!r} is not a list of thread counts", "example: --threads 1,2") from None
    if not counts or any(t < 1 for t in counts):
        raise AotcError(f"--threads {text!r}: thread counts must be 1 or more", "example: --threads 1,2")
    return list(dict.fromkeys(counts))


def main():
    app()


if __name__ == "__main__":
    main()
