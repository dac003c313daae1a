"""The `aotc` command line."""
from __future__ import annotations

import json
import sys
import traceback
from contextlib import contextmanager
from pathlib import Path
from typing import List, Optional

import numpy as np
import typer
from rich.console import Console

from .version import __version__
from .errors import AotcError

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="aotc: ahead-of-time compiler from ONNX models to shared libraries (C, OpenCL, CUDA).")
_TARGET_HELP = ("Target: native (the best CPU target this machine runs: c-avx512, c-avx2 or c), c (portable "
                "C99), c-avx2, c-avx512, opencl (OpenCL C kernels + C host code), cuda (CUDA kernels + host "
                "code built by nvcc for sm_80 and sm_90; cuda:sm_90 for one architecture; cuda,tf32 or "
                "cuda:sm_90,tf32 to run float32 GEMMs on tensor cores in TF32, which changes numerics), or the "
                "path of a target .toml file (see targets/). CPU targets take ,direct_conv (3x3 convolutions "
                "summed directly, not by Winograd F(2x2)) or ,winograd4 (also Winograd F(4x4) on large planes: "
                "faster, float32 errors 10-25x a direct sum's); c-avx512 also takes ,qdq_float (a QDQ model's "
                "Conv/MatMul/Gemm computed in float32 as written, not as the 8-bit integer operators they "
                "stand for).")
_THREADS_HELP = "Most threads the artifact runs on; 0 = every core of this machine."
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


@contextmanager
def _progress(message: str):
    if sys.stderr.isatty():
        with err.status(f"{message}..."):
            yield
    else:
        yield


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
    shapes = {}
    for it in items or []:
        name, sep, dims = it.rpartition("=")
        if not sep or not name:
            raise AotcError(f"--shape {it!r} is not NAME=DIMS", "example: --shape x=1x3x224x224")
        try:
            shapes[name] = tuple(int(d) for d in dims.lower().split("x")) if dims else ()
        except ValueError:
            raise AotcError(f"--shape {it!r}: dims must be integers separated by 'x'",
                            "example: --shape x=1x3x224x224") from None
        if any(d < 0 for d in shapes[name]):
            raise AotcError(f"--shape {it!r}: dims must not be negative")
    return shapes


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


@app.command("compile")
def compile_cmd(
    model: Path = typer.Argument(..., help="The .onnx file."),
    target: str = typer.Option("native", "--target", "-t", help=_TARGET_HELP),
    output: Path = typer.Option(..., "--output", "-o", help="Directory to write the artifact into."),
    threads: int = typer.Option(0, "--threads", help=_THREADS_HELP + " The workspace holds per-thread "
                                "scratch for this many; an instance can be asked for fewer at run time."),
    name: Optional[str] = typer.Option(None, "--name", help="C prefix for every symbol (default: file name)."),
    shape: List[str] = typer.Option([], "--shape", help="Fix an input's shape: NAME=1x3x224x224. Repeatable."),
    const: List[str] = typer.Option([], "--const", help="Bind an input to a constant: NAME=file.npy. Repeatable."),
    weights: str = typer.Option("auto", "--weights", help="embed (static const C data), external "
                                "(NAME.weights file), or auto (external above 8 MiB)."),
    no_fuse: bool = typer.Option(False, "--no-fuse", help="One kernel per node (for debugging)."),
):
    """Compile MODEL into DIR: lib<name>.so, <name>.h, the C sources and manifest.json."""
    try:
        from .compiler import compile_model
        d = compile_model(model, target=target, output_dir=output, name=name, shapes=_parse_shapes(shape),
                          consts=_load_arrays(const, "--const"), weights=weights, fuse=not no_fuse,
                          progress=_progress, threads=threads)
        m = json.loads((d / "manifest.json").read_text())
        out.print(f"wrote {d}/{m['library']} (target {m['target']}, {len(m['kernels'])} kernels, up to "
                  f"{m['threads']} thread(s), workspace {m['workspace_bytes']} bytes, "
                  f"weights {m['weights']['bytes']} bytes {m['weights']['mode']})")
    except typer.Exit:
        raise
    except Exception as e:
        _fail(e)


@app.command("run")
def run_cmd(
    artifact: Path = typer.Argument(..., help="Directory written by `aotc compile`."),
    input: List[str] = typer.Option([], "--input", "-i", help="NAME=file.npy, or a .npz with every input."),
    output_dir: Path = typer.Option(Path("."), "--output-dir", help="Where to write <output>.npy files."),
    threads: int = typer.Option(0, "--threads", help="Threads to run on; 0 = every core, up to what the "
                                "artifact was compiled for."),
):
    """Run a compiled artifact on inputs from .npy/.npz files; writes one .npy per output.
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


@app.command("check")
def check_cmd(
    model: Path = typer.Argument(..., help="The .onnx file."),
    target: str = typer.Option("native", "--target", "-t", help=_TARGET_HELP),
    threads: int = typer.Option(0, "--threads", help=_THREADS_HELP),
    input: List[str] = typer.Option([], "--input", "-i", help="NAME=file.npy (default: seeded random inputs)."),
    shape: List[str] = typer.Option([], "--shape", help="NAME=1x3x224x224, as for compile."),
    const: List[str] = typer.Option([], "--const", help="NAME=file.npy, as for compile."),
    rtol: Optional[float] = typer.Option(None, "--rtol", help="Relative tolerance for float outputs "
                                         "(default 1e-4; 1e-2 on a target with tf32)."),
    atol: Optional[float] = typer.Option(None, "--atol", help="Absolute tolerance for float outputs "
                                         "(default 1e-5; 1e-2 on a target with tf32)."),
    seed: int = typer.Option(0, "--seed", help="Seed for the random inputs."),
    report: Optional[Path] = typer.Option(None, "--report", help="Write a JSON report here."),
    junit: Optional[Path] = typer.Option(None, "--junit", help="Write a JUnit XML report here."),
    keep: Optional[Path] = typer.Option(None, "--keep", help="Keep the compiled artifact in this directory."),
):
    """Compile MODEL, run it and ONNX Runtime on the same inputs, compare every output (where ONNX
    Runtime has no kernel for an op, the ONNX reference implementation runs instead, and the
    report says so). Exit 0: parity; 1: mismatch; 2: cannot compile."""
    try:
        from .check.runner import junit_xml, run_check
        arrays = _load_arrays(input, "--input") or None
        res = run_check(model, target=target, inputs=arrays, rtol=rtol, atol=atol, shapes=_parse_shapes(shape),
                        consts=_load_arrays(const, "--const"), output_dir=keep, seed=seed, progress=_progress,
                        threads=threads)
    except typer.Exit:
        raise
    except Exception as e:
        _fail(e)
        return
    out.print(f"{model.name} on target {res.target} (rtol {res.rtol:g}, atol {res.atol:g})")
    out.print(f"  expected outputs from {res.reference}", markup=False)
    out.print(f"  {'output':24} {'shape':>18} {'max abs err':>12} {'max rel err':>12} {'max ULP':>10}  result")
    for o in res.outputs:
        if not o.values_compared:           # drawn from random numbers: shape and dtype only
            verdict = f"[yellow]random[/] ({o.note})" if o.passed else f"[red]MISMATCH: {o.note}[/]"
            out.print(f"  {o.name[:24]:24} {str(o.shape):>18} {'-':>12} {'-':>12} {'-':>10}  {verdict}")
            continue
        verdict = "[green]ok[/]" if o.passed else f"[red]MISMATCH ({o.mismatches} elements) {o.note}[/]"
        out.print(f"  {o.name[:24]:24} {str(o.shape):>18} {o.max_abs_err:12.3g} {o.max_rel_err:12.3g} "
                  f"{o.max_ulp:10.0f}  {verdict}")
    out.print("[green]PASS[/]" if res.passed else "[red]FAIL[/]")
    if report:
        report.write_text(json.dumps(res.as_dict(), indent=2) + "\n")
    if junit:
        junit.write_text(junit_xml(res))
    raise typer.Exit(0 if res.passed else 1)


@app.command("inspect")
def inspect_cmd(
    model: Path = typer.Argument(..., help="The .onnx file."),
    target: str = typer.Option("native", "--target", "-t", help=_TARGET_HELP),
    shape: List[str] = typer.Option([], "--shape", help="NAME=1x3x224x224, as for compile."),
    const: List[str] = typer.Option([], "--const", help="NAME=file.npy, as for compile."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of text."),
):
    """Op histogram, unsupported ops, node and kernel counts after optimization, fusion
    groups and the memory plan (arena, sum of intermediates, lower bound)."""
    try:
        from .inspection import inspect_model
        info = inspect_model(model, target, _parse_shapes(shape), _load_arrays(const, "--const"),
                             progress=_progress)
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


def main():
    app()


if __name__ == "__main__":
    main()
