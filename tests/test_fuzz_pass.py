"""A short, seeded, deterministic pass of the fuzzer (tests/fuzz_onnx.py) over the zoo, ONNX
node test and run-time control-flow seeds: every mutant must compile or be refused with an AotcError; no other
exception, no hang, no read outside the model's folder. Every 45th zoo mutant goes through
the whole compile, C compiler included. `make fuzz` runs the long version."""
from __future__ import annotations

import random

from tests import fuzz_onnx as fz

# mutants per seed: about 5 s per test on one core (collecting the node cases takes 5 s more)
ZOO_ROUNDS = 40
NODE_ROUNDS = 16


def _report(res) -> str:
    lines = [f"{res['cases']} cases: {res['counts']}"]
    for seed, what, out in res["findings"][:10]:
        lines.append(f"- {out.kind} from {seed} after {what}:\n{out.detail}")
    return "\n".join(lines)


def test_mutants_of_zoo_models():
    res = fz.seeded_pass(fz.zoo_seeds(), per_seed=ZOO_ROUNDS, rng_seed=20261123, full_every=45)
    assert not res["findings"], _report(res)
    # the pass must exercise both sides: models refused and models compiled
    assert res["counts"].get("refused", 0) > 20 and res["counts"].get("compiled", 0) > 5, res["counts"]


def test_mutants_of_onnx_node_cases():
    seeds = fz.node_seeds()
    assert len(seeds) >= 35, [s.name for s in seeds]
    res = fz.seeded_pass(seeds, per_seed=NODE_ROUNDS, rng_seed=1123)
    assert not res["findings"], _report(res)
    assert res["counts"].get("refused", 0) > 50 and res["counts"].get("compiled", 0) > 20, res["counts"]


def test_mutants_of_run_time_control_flow():
    """Mutants of Ifs and Loops decided at run time (tests/fuzz_onnx.py control_seeds); every
    5th through the C compiler."""
    res = fz.seeded_pass(fz.control_seeds(), per_seed=40, rng_seed=1126, full_every=5)
    assert not res["findings"], _report(res)
    assert res["counts"].get("refused", 0) > 10 and res["counts"].get("compiled", 0) > 10, res["counts"]


def test_mutation_is_deterministic():
    seed = fz.zoo_seeds(["mlp"])[0]
    ra, rb = random.Random(7), random.Random(7)
    a = [fz.mutate(seed.data, ra) for _ in range(20)]
    b = [fz.mutate(seed.data, rb) for _ in range(20)]
    assert a == b
    assert sum(data != seed.data for data, _ in a) >= 15


def test_the_harness_catches_what_it_looks_for(tmp_path, monkeypatch):
    """A crash, a hang and a read of the canary are each reported (not swallowed)."""
    ws = fz.Workspace(tmp_path)
    data = fz.zoo_seeds(["mlp"])[0].data
    import aotc.compiler

    def boom(*a, **k):
        raise KeyError("boom")
    monkeypatch.setattr(aotc.compiler, "compile_program", boom)
    assert fz.run_case(data, ws).kind == "crash"

    def spin(*a, **k):
        while True:
            pass
    monkeypatch.setattr(aotc.compiler, "compile_program", spin)
    assert fz.run_case(data, ws, seconds=1).kind == "hang"

    def peek(*a, **k):
        open(tmp_path / fz.CANARY, "rb").close()
    monkeypatch.setattr(aotc.compiler, "compile_program", peek)
    assert fz.run_case(data, ws).kind == "escape"


def test_external_data_pointing_at_the_canary_is_refused_unread(tmp_path):
    """The mutation that aims external data at the canary must meet a refusal, not a read."""
    import onnx
    from onnx import TensorProto
    ws = fz.Workspace(tmp_path)
    m = onnx.ModelProto()
    m.ParseFromString(fz.zoo_seeds(["mlp"])[0].data)
    t = m.graph.initializer[0]
    n = len(t.raw_data)
    t.ClearField("raw_data")
    t.data_location = TensorProto.EXTERNAL
    for k, v in {"location": f"../{fz.CANARY}", "offset": "0", "length": str(n)}.items():
        e = t.external_data.add()
        e.key, e.value = k, v
    out = fz.run_case(m.SerializeToString(), ws, {"x": (1, 64)})
    assert out.kind == "refused" and "outside the model's folder" in out.detail, out


def test_mutants_of_a_model_with_local_functions():
    """Broken local functions reach onnx.inliner (C++) first: refused, never a crash."""
    res = fz.seeded_pass(fz.function_seeds(), per_seed=300, rng_seed=77)
    assert not res["findings"], _report(res)
    assert res["counts"].get("refused", 0) > 50 and res["counts"].get("compiled", 0) > 20, res["counts"]


def test_full_mode_compares_with_onnx_runtime(tmp_path, monkeypatch):
    """--full compiles with cc and compares with ORT: a correct model matches; a perturbed
    answer is a "wrong" finding; a compiled model whose process dies is a "crash"."""
    ws = fz.Workspace(tmp_path)
    seed = fz.zoo_seeds(["mlp"])[0]
    out = fz.run_case(seed.data, ws, seed.shapes, full=True)
    assert out.kind == "compiled" and out.detail == "matches ONNX Runtime", out
    perturbed = fz._AOTC_RUNNER.replace("np.savez(sys.argv[3], *res)", "np.savez(sys.argv[3], *[r + 1e-2 for r in res])")
    assert perturbed != fz._AOTC_RUNNER
    monkeypatch.setattr(fz, "_AOTC_RUNNER", perturbed)
    out = fz.run_case(seed.data, ws, seed.shapes, full=True)
    assert out.kind == "wrong" and out.is_finding, out
    trap = fz._AOTC_RUNNER.replace("res = m.run(", "import os, signal; os.kill(os.getpid(), signal.SIGFPE); res = m.run(")
    monkeypatch.setattr(fz, "_AOTC_RUNNER", trap)
    out = fz.run_case(seed.data, ws, seed.shapes, full=True)
    assert out.kind == "crash" and "died" in out.detail, out
