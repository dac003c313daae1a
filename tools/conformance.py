"""ONNX backend conformance: every ONNX node test case through aotc (target c), with a Markdown report.

python -m tools.conformance [--filter REGEX] [--report docs/CONFORMANCE.md] [--jobs N] [--timeout S]

Cases come from onnx.backend.test.case.node.collect_testcases (in memory; the official data files
are not needed). Each case: model saved to a temp dir, compiled with input shapes bound from the data
set's arrays, run on the data set's inputs, every output compared with the expected one using the
case's rtol/atol (default rtol 1e-3, atol 1e-7, as ONNX's runner) and aotc.check.parity.compare
(integers exact). Where the compile asks for a value at compile time that the case feeds as an
input, the case's small inputs after the first are bound as constants and it is tried again.
Result per case: PASS, PASS_BOUND (passes with those inputs bound), RANDOM (the case draws random
numbers, which aotc's generator draws otherwise than numpy's: every output has the expected shape
and dtype, the values are not compared; tests/test_random_ops.py tests their distributions),
FAIL (wrong numbers), UNSUPPORTED (aotc raised UnsupportedError), ERROR (any other exception),
TIMEOUT (killed after --timeout seconds) or CRASH (the worker process died). Each case runs in its own forked process, --jobs at a time.
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import multiprocessing.connection
import os
import re
import tempfile
import time
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np

DEFAULT_RTOL, DEFAULT_ATOL = 1e-3, 1e-7
STATUSES = ["PASS", "PASS_BOUND", "RANDOM", "FAIL", "UNSUPPORTED", "ERROR", "TIMEOUT", "CRASH"]
# an error asking for a value at compile time that the case feeds as a graph input
_NEEDS_CONST = re.compile(r"known at compile time|known only at run time|--const")
# what the runner binds as constants then: the case's small inputs after the first (axes,
# sizes, counts, conditions: integers and bools of at most 64 elements; scales and boxes:
# floats of at most 8); the first input (the data) stays a run-time one, so a kernel still runs
_BINDABLE_ELEMENTS = 64
_BINDABLE_FLOATS = 8


def _bindable(feeds: dict) -> dict:
    return {n: a for k, (n, a) in enumerate(feeds.items())
            if k > 0 and isinstance(a, np.ndarray)
            and (a.dtype.kind in "iub" and a.size <= _BINDABLE_ELEMENTS or a.dtype.kind == "f" and a.size <= _BINDABLE_FLOATS)}


@dataclass
class CaseResult:
    name: str
    ops: list
    status: str
    reason: str = ""
    seconds: float = 0.0


def collect(filter_re: str | None = None) -> list:
    """The ONNX node test cases (optionally those whose name matches filter_re), sorted by name."""
    import warnings

    from onnx.backend.test.case.node import collect_testcases
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # numpy overflow warnings from the reference implementations
        cases = sorted(collect_testcases(None), key=lambda c: c.name)
    if filter_re:
        rx = re.compile(filter_re)
        cases = [c for c in cases if rx.search(c.name)]
    return cases


def case_ops(case) -> list:
    """Op types of the case's top-level node(s), in order, without repeats."""
    ops = []
    for n in case.model.graph.node:
        op = n.op_type if n.domain in ("", "ai.onnx") else f"{n.domain}.{n.op_type}"
        if op not in ops:
            ops.append(op)
    return ops


def _first_line(ex: BaseException) -> str:
    msg = getattr(ex, "message", None) or str(ex)
    lines = [ln.strip() for ln in msg.splitlines() if ln.strip()]
    if type(ex).__name__ == "BuildError":
        # the C compiler's first diagnostic says more than the header line; drop the temp path
        errs = [ln for ln in lines if "error:" in ln]
        if errs:
            return "C compiler: " + re.sub(r"^\S*/([^/\s]+\.[ch]):", r"\1:", errs[0])
    return lines[0] if lines else ""


def _tensor(a):
    """Data-set entries as arrays: numpy scalars and TensorProtos are tensors too; lists
    (sequences) and None (optional) stay as they are."""
    if isinstance(a, np.generic):
        return np.asarray(a)
    if type(a).__name__ == "TensorProto":
        from onnx import numpy_helper
        return numpy_helper.to_array(a)
    return a


def _ort_verdict(case, inputs: list, got: list, expected: list, rtol: float, atol: float) -> str:
    """What ONNX Runtime (aotc's parity reference) says about a failing data set: whether its
    outputs match the expected ones (then aotc is wrong) or aotc's (then both differ from the
    ONNX reference implementation's numbers the same way)."""
    from aotc.check.parity import compare
    try:
        import onnxruntime as ort
        sess = ort.InferenceSession(case.model.SerializeToString(), providers=["CPUExecutionProvider"])
        names = [i.name for i in sess.get_inputs()]
        theirs = sess.run(None, dict(zip(names, inputs)))
    except Exception as ex:  # noqa: BLE001 - reported in the row
        return f"ONNX Runtime cannot run it ({type(ex).__name__}: {_first_line(ex)[:120]})"
    pairs = list(zip(theirs, expected, got))
    if all(compare("y", np.asarray(t), e, rtol, atol).passed for t, e, _ in pairs):
        return "ONNX Runtime matches the expected values"
    if all(compare("y", np.asarray(g), np.asarray(t), rtol, atol).passed for t, _, g in pairs):
        return "ONNX Runtime gives aotc's values (it differs from the expected ones the same way)"
    return "ONNX Runtime differs from both"


def run_case(case, workdir: str | os.PathLike) -> CaseResult:
    """Compile and run one case in this process; classify the outcome."""
    import onnx

    from aotc.api import CompiledModel
    from aotc.check.parity import compare, random_outputs, random_report
    from aotc.compiler import compile_model
    from aotc.errors import UnsupportedError
    from aotc.frontend import import_model, load_onnx

    t0 = time.perf_counter()
    ops = case_ops(case)
    rtol = DEFAULT_RTOL if getattr(case, "rtol", None) is None else case.rtol
    atol = DEFAULT_ATOL if getattr(case, "atol", None) is None else case.atol
    workdir = Path(workdir)
    try:
        path = workdir / "model.onnx"
        onnx.save(case.model, str(path))
        graph_inputs = [i.name for i in case.model.graph.input]
        inits = {t.name for t in case.model.graph.initializer}
        graph_inputs = [n for n in graph_inputs if n not in inits]
        graph_outputs = [o.name for o in case.model.graph.output]
        worst = 0.0
        failures = []
        drawn: set = set()                      # outputs drawn at random, of the expected type
        bound: dict = {}
        verdict = ""                            # ONNX Runtime on the first failing data set
        for k, (inputs, outputs) in enumerate(case.data_sets):
            inputs, outputs = [_tensor(a) for a in inputs], [_tensor(a) for a in outputs]
            # the data set lists arrays for the graph's inputs, in order; optional inputs that are
            # absent are not graph inputs and have no array
            feeds = dict(zip(graph_inputs, inputs))
            shapes = {n: tuple(a.shape) for n, a in feeds.items() if isinstance(a, np.ndarray)}
            try:
                out = compile_model(path, target="c", output_dir=workdir / f"out{k}", name="case", shapes=shapes)
            except Exception as ex:
                # the case feeds a value aotc needs at compile time: bind its small integer
                # inputs as constants and try again, if some input stays a run-time one
                consts = _bindable(feeds)
                if not _NEEDS_CONST.search(str(ex)) or not consts:
                    raise
                bound.update(consts)
                feeds = {n: a for n, a in feeds.items() if n not in consts}
                out = compile_model(path, target="c", output_dir=workdir / f"out{k}", name="case",
                                    shapes={n: v for n, v in shapes.items() if n in feeds}, consts=consts)
            if any(not isinstance(a, np.ndarray) for a in inputs):
                kinds = sorted({type(a).__name__ for a in inputs if not isinstance(a, np.ndarray)})
                return CaseResult(case.name, ops, "ERROR",
                                  f"runner: compiled, but non-tensor inputs ({', '.join(kinds)}) cannot be fed",
                                  time.perf_counter() - t0)
            model = CompiledModel(out)
            got = model.run(feeds)
            # outputs drawn from random numbers: shape and dtype compared (as `aotc check` does)
            drawn_from = random_outputs(import_model(load_onnx(path), "case",
                                                     {n: v for n, v in shapes.items() if n in feeds}, bound))
            names = model.output_names
            if len(got) != len(outputs):
                return CaseResult(case.name, ops, "FAIL",
                                  f"{len(got)} outputs, expected {len(outputs)}", time.perf_counter() - t0)
            for name, g, ref in zip(names or graph_outputs, got, outputs):
                if not isinstance(ref, np.ndarray):
                    return CaseResult(case.name, ops, "ERROR",
                                      f"runner: expected output {name} is a {type(ref).__name__}",
                                      time.perf_counter() - t0)
                if name in drawn_from:
                    r = random_report(name, np.asarray(g), ref, drawn_from[name])
                    if r.passed:
                        drawn.add(name)
                else:
                    r = compare(name, np.asarray(g), ref, rtol, atol)
                if not r.passed:
                    worst = max(worst, r.max_abs_err)
                    failures.append(f"{name}: max_abs={r.max_abs_err:.3g} mismatches={r.mismatches}"
                                    + (f" ({r.note})" if r.note else ""))
            if failures and not verdict:
                verdict = _ort_verdict(case, inputs, got, outputs, rtol, atol)
        how = f" (inputs {', '.join(sorted(bound))} bound as constants)" if bound else ""
        if drawn and not failures:
            return CaseResult(case.name, ops, "RANDOM", f"{', '.join(sorted(drawn))} drawn at random: shape and "
                              "dtype as expected, values not compared" + how, time.perf_counter() - t0)
        if failures:
            return CaseResult(case.name, ops, "FAIL", f"max abs err {worst:.3g}; " + "; ".join(failures)
                              + f" [rtol {rtol:g}, atol {atol:g}]" + how + f"; {verdict}", time.perf_counter() - t0)
        return CaseResult(case.name, ops, "PASS_BOUND" if bound else "PASS", how.strip(" ()"),
                          time.perf_counter() - t0)
    except UnsupportedError as ex:
        items = getattr(ex, "items", None) or [_first_line(ex)]
        return CaseResult(case.name, ops, "UNSUPPORTED", "; ".join(items), time.perf_counter() - t0)
    except Exception as ex:  # classify and go on
        return CaseResult(case.name, ops, "ERROR", f"{type(ex).__name__}: {_first_line(ex)}",
                          time.perf_counter() - t0)


def _child(case, workdir, conn) -> None:
    try:
        res = run_case(case, workdir)
    except BaseException as ex:  # noqa: BLE001 - report anything
        res = CaseResult(case.name, case_ops(case), "ERROR", f"{type(ex).__name__}: {_first_line(ex)}")
    conn.send(res)
    conn.close()
    os._exit(0)


def run_cases(cases, jobs: int = 2, timeout: float = 60.0, progress=None) -> list:
    """Run every case in its own forked process, `jobs` at a time; a case past `timeout`
    seconds is killed and reported as TIMEOUT, a worker that dies without a result as CRASH."""
    ctx = mp.get_context("fork")
    results: dict = {}
    pending = list(enumerate(cases))[::-1]
    running: dict = {}  # sentinel -> (index, case, process, conn, start, tmpdir)
    with tempfile.TemporaryDirectory(prefix="aotc_conf_") as root:
        while pending or running:
            while pending and len(running) < jobs:
                i, case = pending.pop()
                wd = Path(root) / f"c{i}"
                wd.mkdir()
                rconn, wconn = ctx.Pipe(duplex=False)
                p = ctx.Process(target=_child, args=(case, str(wd), wconn), daemon=True)
                p.start()
                wconn.close()
                running[rconn] = (i, case, p, time.monotonic(), wd)
            now = time.monotonic()
            deadline = min(st + timeout for (_, _, _, st, _) in running.values())
            ready = mp.connection.wait(list(running), timeout=max(0.0, deadline - now))
            for conn in ready:
                i, case, p, st, wd = running.pop(conn)
                try:
                    res = conn.recv()
                except EOFError:
                    p.join(5)
                    res = CaseResult(case.name, case_ops(case), "CRASH",
                                     f"worker died (exit code {p.exitcode})", time.monotonic() - st)
                conn.close()
                p.join(5)
                _rm(wd)
                results[i] = res
                if progress:
                    progress(res, len(results), len(cases))
            now = time.monotonic()
            for conn, (i, case, p, st, wd) in list(running.items()):
                if now - st >= timeout and conn not in ready:
                    p.kill()
                    p.join(5)
                    conn.close()
                    running.pop(conn)
                    _rm(wd)
                    results[i] = CaseResult(case.name, case_ops(case), "TIMEOUT",
                                            f"killed after {timeout:g} s", now - st)
                    if progress:
                        progress(results[i], len(results), len(cases))
    return [results[i] for i in range(len(cases))]


def _rm(path: Path) -> None:
    import shutil
    shutil.rmtree(path, ignore_errors=True)


def _esc(s: str) -> str:
    return s.replace("|", "\\|").replace("\n", " ")


def report(results: list, command: str, seconds: float, jobs: int, timeout: float) -> str:
    tot = Counter(r.status for r in results)
    per_op: dict = defaultdict(Counter)
    for r in results:
        for op in r.ops or ["(no node)"]:
            per_op[op]["cases"] += 1
            per_op[op][r.status] += 1
    extra = [s for s in ("TIMEOUT", "CRASH") if tot[s]]
    lines = [
        "# ONNX backend conformance (node test cases)",
        "",
        f"Generated by `{command}` (`make conformance`). Do not edit by hand.",
        "",
        f"{len(results)} ONNX node test cases (`onnx.backend.test.case.node.collect_testcases`, "
        "in memory) from onnx " + _onnx_version() + ". Each case: compiled by aotc for target c with input "
        "shapes bound from the data set's arrays, run on the data set's inputs, every output compared with "
        "the expected one using the case's rtol/atol (default rtol 1e-3, atol 1e-7; integers exact).",
        "PASS: all outputs match. PASS_BOUND: all outputs match once the case's small inputs after the "
        "first (integers and bools of at most " + str(_BINDABLE_ELEMENTS) + " elements: axes, sizes, counts, "
        "conditions; floats of at most " + str(_BINDABLE_FLOATS) + ": scales, boxes) are bound as compile-time "
        "constants, which aotc needs them to be and which the case feeds as graph inputs (the first compile "
        "asked for it; the first input, the data, stays a run-time one). "
        "RANDOM: the case draws random numbers (a random op, Dropout in training mode), which aotc's "
        "generator draws otherwise than numpy's: every output has the expected shape and dtype, the "
        "values are not compared (tests/test_random_ops.py tests their distributions). "
        "FAIL: outputs differ from the expected ones (the ONNX reference implementation's); each row "
        "then says what ONNX Runtime, aotc's parity reference, gives on the same inputs: the expected "
        "values (aotc is wrong) or aotc's (both differ from the reference the same way). "
        "UNSUPPORTED: aotc raised UnsupportedError "
        "(operator, element type or attribute value not implemented). ERROR: any other exception. "
        "TIMEOUT: killed after the per-case limit. CRASH: the worker process died. No case is skipped.",
        "",
        f"Wall time {seconds:.0f} s with {jobs} worker(s), per-case timeout {timeout:g} s.",
        "",
        "## Totals",
        "",
        "| cases | pass | pass, inputs bound | random | fail | unsupported | error |"
        + "".join(f" {s.lower()} |" for s in extra),
        "|---|---|---|---|---|---|---|" + "---|" * len(extra),
        f"| {len(results)} | {tot['PASS']} | {tot['PASS_BOUND']} | {tot['RANDOM']} | {tot['FAIL']} | "
        f"{tot['UNSUPPORTED']} | {tot['ERROR']} |" + "".join(f" {tot[s]} |" for s in extra),
        "",
        "## Per operator",
        "",
        "A case counts once for each distinct op type among its graph's nodes (op-type test cases with "
        "expanded function bodies count for every op of the body).",
        "",
        "| op | cases | pass | pass, inputs bound | random | fail | unsupported | error |"
        + "".join(f" {s.lower()} |" for s in extra),
        "|---|---|---|---|---|---|---|---|" + "---|" * len(extra),
    ]
    for op in sorted(per_op, key=str.lower):
        c = per_op[op]
        lines.append(f"| {op} | {c['cases']} | {c['PASS']} | {c['PASS_BOUND']} | {c['RANDOM']} | {c['FAIL']} | "
                     f"{c['UNSUPPORTED']} | {c['ERROR']} |"
                     + "".join(f" {c[s]} |" for s in extra))
    for status in ["RANDOM", "FAIL", "ERROR", "TIMEOUT", "CRASH"]:
        bad = [r for r in results if r.status == status]
        if not bad:
            continue
        lines += ["", f"## {status} cases ({len(bad)})", "", "| case | ops | reason |", "|---|---|---|"]
        lines += [f"| {r.name} | {', '.join(r.ops)} | {_esc(r.reason)[:300]} |" for r in bad]
    errs = Counter()
    for r in results:
        if r.status == "ERROR":
            key = re.sub(r"'[^']*'", "'…'", r.reason)
            key = re.sub(r"\(([a-z0-9_]+, )*[a-z0-9_]+\)", "(…)", key) if key.startswith("runner") else key
            errs[key] += 1
    if errs:
        lines += ["", f"## ERROR reasons, grouped ({tot['ERROR']} cases)", "",
                  "Node and input names replaced by '…'. ShapeError \"... must be known at compile time\": the "
                  "case feeds that value as a graph input, aotc needs it as a constant, and the runner could "
                  "not bind it (not a small integer input, or binding would leave no run-time input).", "",
                  "| reason | cases |", "|---|---|"]
        lines += [f"| {_esc(k)[:200]} | {v} |" for k, v in sorted(errs.items(), key=lambda kv: (-kv[1], kv[0]))]
    unsup = Counter()
    for r in results:
        if r.status == "UNSUPPORTED":
            for item in r.reason.split("; "):
                unsup[re.sub(r" in node .*$", "", item)] += 1
    if unsup:
        lines += ["", f"## UNSUPPORTED reasons ({tot['UNSUPPORTED']} cases)", "",
                  "| unsupported item | cases |", "|---|---|"]
        lines += [f"| {_esc(k)[:200]} | {v} |" for k, v in sorted(unsup.items(), key=lambda kv: (-kv[1], kv[0]))]
    return "\n".join(lines) + "\n"


def _onnx_version() -> str:
    import onnx
    return onnx.__version__


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--filter", default=None, help="regular expression on case names (re.search)")
    ap.add_argument("--report", type=Path, default=None)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds per case")
    a = ap.parse_args(argv)
    cases = collect(a.filter)
    t0 = time.perf_counter()

    def progress(r, done, total):
        print(f"[{done}/{total}] {r.status:11s} {r.name} {r.reason[:120]}", flush=True)

    results = run_cases(cases, jobs=a.jobs, timeout=a.timeout, progress=progress)
    secs = time.perf_counter() - t0
    cmd = "python -m tools.conformance"
    if a.filter:
        cmd += f" --filter '{a.filter}'"
    if a.report:
        cmd += f" --report {a.report}"
    text = report(results, cmd, secs, a.jobs, a.timeout)
    tot = Counter(r.status for r in results)
    print(" ".join(f"{s.lower()}={tot[s]}" for s in STATUSES) + f" total={len(results)} in {secs:.0f} s")
    if a.report:
        a.report.write_text(text)


if __name__ == "__main__":
    main()
