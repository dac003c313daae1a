"""Memory planner: offsets, the validator, the lower bound, and aliasing on real graphs.

Offsets are checked two ways: by aotc's own validator and by a brute-force pairwise check
written here. Plans of compiled graphs are re-checked from the kernel order alone
(independent_check), and every compiled case runs against ONNX Runtime.
"""
from __future__ import annotations

import itertools
import random

import numpy as np
import onnx
import pytest
from onnx import helper

from aotc.compiler import compile_program
from aotc.memory.liveness import Interval, peak_live_bytes
from aotc.memory.planner import Location, first_fit, plan_offsets
from aotc.memory.validator import PlanError, validate
from aotc.ops import registry
from models.zoo import ZOO
from tests.helpers import assert_parity, graph_model, rand

N = helper.make_node
ALIGN = 64


# ------------------------------------------------------------------------------------------ helpers
def random_intervals(rng: random.Random, n: int | None = None, steps: int | None = None) -> list[Interval]:
    n = rng.randint(1, 60) if n is None else n
    steps = rng.randint(1, 40) if steps is None else steps
    out = []
    for k in range(n):
        first = rng.randrange(steps)
        life = int(rng.expovariate(1 / rng.choice([0.5, 3, 12])))
        size = ALIGN * rng.choice([1, 1, 2, 3, 4, 8, 16, 64]) * rng.randint(1, 3)
        out.append(Interval(f"b{k}", size, first, min(steps - 1, first + life)))
    return out


def conflicts(intervals, offsets) -> list[tuple[str, str]]:
    """Brute force: pairs alive at a common step whose byte ranges intersect."""
    bad = []
    for a, b in itertools.combinations(intervals, 2):
        if a.first <= b.last and b.first <= a.last:
            oa, ob = offsets[a.key], offsets[b.key]
            if oa < ob + b.size and ob < oa + a.size:
                bad.append((a.key, b.key))
    return bad


def brute_peak(intervals) -> int:
    if not intervals:
        return 0
    return max(sum(iv.size for iv in intervals if iv.first <= t <= iv.last)
               for t in range(min(iv.first for iv in intervals), max(iv.last for iv in intervals) + 1))


def arena_value_buffers(plan) -> set[tuple[str, int]]:
    """The distinct arena buffers holding graph values (kernels' scratch not included)."""
    return {(loc.name, loc.offset) for loc in plan.locations.values() if loc.kind == "arena"}


def compile_info(model, tmp_path, shapes=None):
    path = tmp_path / "model.onnx"
    onnx.save(model, str(path))
    return compile_program(path, shapes=shapes)


def independent_check(c) -> None:
    """Re-derive lifetimes from the kernel order alone and check that no two arena buffers
    that are alive at the same step share bytes, except an input and the output written
    over it in place at the step where the input dies (and then only as listed in the plan)."""
    g, plan, steps = c.graph, c.plan, c.steps
    producers = g.producers()

    def source(v):                                 # a view's bytes are its source's
        p = producers.get(v)
        while p is not None and registry.get(p.op_type).view:
            v = p.inputs[0]
            p = producers.get(v)
        return v

    # a Concat input computed into its slice of the output: its bytes are the output's
    slice_of = {source(i): (o, at) for i, (o, at) in plan.slices.items()}

    def place(v):                                  # (the value owning v's bytes, byte offset)
        s = source(v)
        if s in slice_of:
            o, at = slice_of[s]
            r, more = place(o)
            return r, at + more
        return s, 0

    def root(v):
        return place(v)[0]

    born: dict[str, int] = {}
    dies: dict[str, int] = {}
    for t, st in enumerate(steps):
        for v in st.writes:
            r = root(v)
            born.setdefault(r, t)
            dies[r] = max(dies.get(r, t), t)
        for v in st.reads:
            r = root(v)
            dies[r] = max(dies.get(r, t), t)
    for v, loc in plan.locations.items():          # views sit where their source sits
        r, at = place(v)
        if loc.kind == "arena" and r in plan.locations:
            want = plan.locations[r]
            assert (loc.kind, loc.offset) == (want.kind, want.offset + at), \
                f"{v} is not stored at byte {at} of {r}"

    spans = {}                                     # buffer -> (first, last, lo, hi)
    for r in born:
        loc = plan.locations[r]
        if loc.kind == "arena":
            spans[r] = (born[r], dies[r], loc.offset, loc.offset + g.values[r].nbytes)
    for t, st in enumerate(steps):
        for buf in st.scratch:
            off = plan.scratch[(t, buf.name)]
            spans[f"scratch:{t}:{buf.name}"] = (t, t, off, off + buf.size * buf.dtype.itemsize)
    inplace = {(o, root(i)) for o, i in plan.inplace}
    for key, (f, l, lo, hi) in spans.items():
        assert lo % plan.alignment == 0 and 0 <= lo and hi <= plan.arena_bytes, key
    for (a, (fa, la, lo_a, hi_a)), (b, (fb, lb, lo_b, hi_b)) in itertools.combinations(spans.items(), 2):
        if fa <= lb and fb <= la and lo_a < hi_b and lo_b < hi_a:
            ok = ((a, b) in inplace and fa == lb) or ((b, a) in inplace and fb == la)
            assert ok, f"{a} [{fa},{la}] @[{lo_a},{hi_a}) and {b} [{fb},{lb}] @[{lo_b},{hi_b}) collide"


# ------------------------------------------------------------------------------------------ offsets
@pytest.mark.parametrize("seed", range(8))
def test_offsets_are_valid_on_random_lifetimes(seed):
    rng = random.Random(seed)
    for _ in range(40):
        ivs = random_intervals(rng)
        lb = peak_live_bytes(ivs)
        base = None
        for planner in (first_fit, plan_offsets):
            offsets, arena = planner(ivs, ALIGN)
            validate(ivs, offsets, arena, ALIGN)
            assert conflicts(ivs, offsets) == []
            assert all(offsets[iv.key] % ALIGN == 0 and offsets[iv.key] + iv.size <= arena for iv in ivs)
            assert lb <= arena <= sum(iv.size for iv in ivs)
            assert arena == max(offsets[iv.key] + iv.size for iv in ivs)
            base = arena if base is None else base
        assert arena <= base, "plan_offsets must never do worse than its first-fit baseline"


def test_plan_offsets_reaches_the_bound_where_first_fit_does_not():
    """Size-descending first fit puts both 256-byte buffers at 0, so the long-lived 192-byte
    one and its successor stack above them (640 bytes). Packing the long-lived one at the
    top instead fits everything in the bound, 448 bytes."""
    ivs = [Interval("long", 192, 0, 4), Interval("big_early", 256, 0, 0),
           Interval("big_late", 256, 5, 5), Interval("next", 192, 4, 5)]
    lb = peak_live_bytes(ivs)
    assert lb == 448
    _, ff = first_fit(ivs, ALIGN)
    assert ff == 640, "the case should defeat plain first fit"
    offsets, arena = plan_offsets(ivs, ALIGN)
    validate(ivs, offsets, arena, ALIGN)
    assert conflicts(ivs, offsets) == []
    assert arena == lb


def test_offsets_are_deterministic():
    ivs = random_intervals(random.Random(99), n=80, steps=30)
    assert plan_offsets(list(ivs), ALIGN) == plan_offsets(list(reversed(ivs)), ALIGN)


# ------------------------------------------------------------------------------------------ validator
def test_validator_agrees_with_brute_force_on_arbitrary_offsets():
    rng = random.Random(7)
    verdicts = {True: 0, False: 0}
    for _ in range(400):
        ivs = random_intervals(rng, n=rng.randint(2, 12), steps=rng.randint(1, 8))
        span = sum(iv.size for iv in ivs)
        offsets = {iv.key: ALIGN * rng.randrange(max(1, span // ALIGN // 2)) for iv in ivs}
        arena = max(offsets[iv.key] + iv.size for iv in ivs)
        try:
            validate(ivs, offsets, arena, ALIGN)
            accepted = True
        except PlanError:
            accepted = False
        assert accepted == (conflicts(ivs, offsets) == []), (ivs, offsets)
        verdicts[accepted] += 1
    assert verdicts[True] > 20 and verdicts[False] > 20, verdicts


def _overlapping_pair(ivs):
    for a, b in itertools.combinations(ivs, 2):
        if a.overlaps(b):
            return a, b
    return None


def test_validator_rejects_deliberately_broken_plans():
    rng = random.Random(3)
    checked = 0
    while checked < 30:
        ivs = random_intervals(rng, n=20, steps=10)
        pair = _overlapping_pair(ivs)
        if pair is None:
            continue
        offsets, arena = plan_offsets(ivs, ALIGN)
        validate(ivs, offsets, arena, ALIGN)
        a, b = pair
        # two buffers alive together, moved onto the same bytes
        broken = dict(offsets)
        broken[b.key] = broken[a.key]
        with pytest.raises(PlanError, match="alive at the same time"):
            validate(ivs, broken, max(arena, broken[b.key] + b.size), ALIGN)
        # half-overlap (the second buffer starts inside the first)
        broken = dict(offsets)
        broken[b.key] = offsets[a.key] + ALIGN * (a.size // ALIGN // 2)
        if broken[b.key] < offsets[a.key] + a.size:
            with pytest.raises(PlanError):
                validate(ivs, broken, max(arena, broken[b.key] + b.size), ALIGN)
        # misaligned, outside the arena, missing
        broken = dict(offsets)
        broken[a.key] += 8
        with pytest.raises(PlanError, match="aligned"):
            validate(ivs, broken, arena + 64, ALIGN)
        with pytest.raises(PlanError, match="outside the arena"):
            validate(ivs, offsets, arena - ALIGN, ALIGN)
        broken = dict(offsets)
        del broken[a.key]
        with pytest.raises(PlanError, match="no offset"):
            validate(ivs, broken, arena, ALIGN)
        checked += 1


def test_validator_accepts_touching_and_time_disjoint_buffers():
    ivs = [Interval("a", 128, 0, 3), Interval("b", 64, 2, 5), Interval("c", 128, 4, 6)]
    validate(ivs, {"a": 0, "b": 128, "c": 0}, 192, ALIGN)          # a,c share bytes at disjoint times
    with pytest.raises(PlanError):
        validate(ivs, {"a": 0, "b": 64, "c": 0}, 192, ALIGN)       # a and b both live at steps 2-3


# ------------------------------------------------------------------------------------------ lower bound
def test_peak_live_bytes_matches_brute_force():
    rng = random.Random(11)
    assert peak_live_bytes([]) == 0
    for _ in range(300):
        ivs = random_intervals(rng)
        assert peak_live_bytes(ivs) == brute_peak(ivs)


# ------------------------------------------------------------------------------------------ aliasing on graphs
def test_reshape_view_shares_storage_with_its_source(tmp_path):
    x = rand(4, 6, seed=1)
    nodes = [N("Tanh", ["x"], ["a"]), N("Reshape", ["a", "s"], ["v"]), N("MatMul", ["v", "w"], ["y"])]
    m = graph_model(nodes, {"x": x}, ["y"], {"s": np.array([8, 3]), "w": rand(3, 5, seed=2)})
    c = compile_info(m, tmp_path)
    assert [st.kernel.name.split("_", 1)[1] for st in c.steps] == ["tanh", "matmul"], "the view is no kernel"
    la, lv = c.plan.locations["a"], c.plan.locations["v"]
    assert la.kind == "arena" and la == lv
    independent_check(c)
    assert_parity(m, tmp_path, {"x": x})


def test_graph_output_written_through_a_view(tmp_path):
    """r = Relu(x) is only ever seen as y = Reshape(r), an output: Relu writes into the
    caller's y directly (no arena bytes, no copy), and the later MatMul reads it from there."""
    x = rand(4, 6, seed=3)
    nodes = [N("Relu", ["x"], ["r"]), N("Reshape", ["r", "s"], ["y"]), N("MatMul", ["r", "w"], ["z"])]
    m = graph_model(nodes, {"x": x}, ["y", "z"], {"s": np.array([24]), "w": rand(6, 2, seed=4)})
    c = compile_info(m, tmp_path)
    assert c.plan.locations["r"] == Location("output", "y", 0)
    assert "aotc.Copy" not in [n.op_type for n in c.graph.nodes]
    assert arena_value_buffers(c.plan) == set(), "no value needs arena bytes"
    independent_check(c)
    assert_parity(m, tmp_path, {"x": x})


def _inplace_model(input_used_later: bool, output_has_view: bool = False):
    """Exp(x) -> Reshape -> Sigmoid -> MatMul. The Sigmoid kernel reads the reshaped Exp
    output, which dies there unless a later MatMul reads it too. [6, 4] reshaped to [4, 6]:
    shapes whose dims do not nest, so fusion keeps Exp and Sigmoid in two kernels."""
    nodes = [N("Exp", ["x"], ["a"]), N("Reshape", ["a", "s"], ["s2"]), N("Sigmoid", ["s2"], ["t"])]
    if output_has_view:
        nodes += [N("Reshape", ["t", "s"], ["tv"]), N("MatMul", ["tv", "w"], ["y"])]
    else:
        nodes += [N("MatMul", ["t", "w"], ["y"])]
    outs = ["y"]
    if input_used_later:
        nodes.append(N("MatMul", ["s2", "w2"], ["z"]))
        outs.append("z")
    inits = {"s": np.array([4, 6]), "w": rand(6, 3, seed=5), "w2": rand(6, 5, seed=6)}
    x = rand(6, 4, seed=7)
    return graph_model(nodes, {"x": x}, outs, inits), x


@pytest.mark.parametrize("output_has_view", [False, True])
def test_inplace_reuse_of_an_elementwise_input_that_dies(output_has_view, tmp_path):
    m, x = _inplace_model(input_used_later=False, output_has_view=output_has_view)
    c = compile_info(m, tmp_path)
    assert c.plan.inplace == [("t", "s2")]
    assert c.plan.locations["t"] == c.plan.locations["a"] == c.plan.locations["s2"]
    assert len(arena_value_buffers(c.plan)) == 1     # one buffer of 24 floats for a, s2 and t
    independent_check(c)
    assert_parity(m, tmp_path, {"x": x})


def test_no_inplace_when_the_input_is_read_later(tmp_path):
    m, x = _inplace_model(input_used_later=True)
    c = compile_info(m, tmp_path)
    assert c.plan.inplace == []
    lt, ls = c.plan.locations["t"], c.plan.locations["s2"]
    assert lt.kind == ls.kind == "arena" and lt.offset != ls.offset
    assert len(arena_value_buffers(c.plan)) == 2
    independent_check(c)
    assert_parity(m, tmp_path, {"x": x})


def test_no_inplace_into_a_graph_output(tmp_path):
    """Sigmoid writes a graph output: it writes the caller's buffer, never the arena."""
    x = rand(32, seed=8)
    nodes = [N("Exp", ["x"], ["a"]), N("Reshape", ["a", "s"], ["s2"]), N("Sigmoid", ["s2"], ["y"])]
    m = graph_model(nodes, {"x": x}, ["y"], {"s": np.array([4, 8])})
    c = compile_info(m, tmp_path)
    assert c.plan.inplace == []
    assert c.plan.locations["y"] == Location("output", "y", 0)
    independent_check(c)
    assert_parity(m, tmp_path, {"x": x})


def test_kernel_scratch_is_planned_in_the_arena(tmp_path):
    """Gemm(transA=1) on a computed A transposes it into scratch first."""
    x = rand(5, 4, seed=9)
    nodes = [N("Tanh", ["x"], ["a"]), N("Gemm", ["a", "w"], ["g"], transA=1), N("Relu", ["g"], ["y"])]
    m = graph_model(nodes, {"x": x}, ["y"], {"w": rand(5, 3, seed=10)})
    c = compile_info(m, tmp_path)
    assert c.plan.scratch, "expected a scratch buffer for the transposed operand"
    independent_check(c)
    assert_parity(m, tmp_path, {"x": x})


# ------------------------------------------------------------------------------------------ random graphs
SHAPES = [(4, 6), (6, 4), (24,), (2, 12), (2, 3, 4)]


def random_graph(seed: int):
    """A random DAG of elementwise ops, views and MatMuls over 24-element values, with a
    few outputs (possibly an input, or a value listed twice)."""
    rng = random.Random(seed)
    x = rand(4, 6, seed=100 + seed)
    pool = [("x", (4, 6))]
    nodes, inits = [], {"w": rand(6, 6, seed=200 + seed) * 0.5}
    for k in range(rng.randint(14, 28)):
        name = f"v{k}"
        kind = rng.random()
        src, shape = rng.choice(pool[-4:] if rng.random() < 0.7 else pool)   # mostly recent values
        if kind < 0.3:
            nodes.append(N(rng.choice(["Tanh", "Sigmoid", "Neg", "Relu", "Softsign"]), [src], [name]))
        elif kind < 0.5:
            same = [p for p in pool if p[1] == shape]
            other = rng.choice(same)[0]
            nodes.append(N(rng.choice(["Add", "Mul", "Sub"]), [src, other], [name]))
        elif kind < 0.75:
            target = rng.choice([s for s in SHAPES if s != shape])
            inits[f"shape{k}"] = np.array(target)
            nodes.append(N("Reshape", [src, f"shape{k}"], [name]))
            shape = target
        else:
            if shape != (4, 6):
                target = (4, 6)
                inits[f"shape{k}"] = np.array(target)
                nodes.append(N("Reshape", [src, f"shape{k}"], [f"{name}_in"]))
                src = f"{name}_in"
            nodes.append(N("MatMul", [src, "w"], [name]))
            shape = (4, 6)
        pool.append((name, shape))
    outs = [pool[-1][0]] + [rng.choice(pool)[0] for _ in range(rng.randint(0, 3))]
    return graph_model(nodes, {"x": x}, outs, inits), x


@pytest.mark.parametrize("seed", range(10))
def test_random_graphs_plan_validly_and_compute_the_same(seed, tmp_path):
    m, x = random_graph(seed)
    c = compile_info(m, tmp_path)
    independent_check(c)
    assert_parity(m, tmp_path, {"x": x}, rtol=1e-4, atol=1e-5)


def test_random_graphs_unfused_exercise_inplace(tmp_path):
    """One kernel per node (--no-fuse) leaves many elementwise kernels whose input dies
    there: in-place reuse is frequent, and must still compute ORT's answer."""
    from aotc.api import CompiledModel
    from aotc.compiler import compile_model
    from tests.test_passes import ort_run
    reuses = 0
    for seed in range(12):
        m, x = random_graph(seed)
        d = tmp_path / f"g{seed}"
        d.mkdir()
        path = d / "m.onnx"
        onnx.save(m, str(path))
        c = compile_program(path, fuse=False)
        independent_check(c)
        reuses += len(c.plan.inplace)
        got = CompiledModel(compile_model(path, output_dir=d / "out", fuse=False)).run({"x": x})
        for a, b in zip(got, ort_run(m, {"x": x})):
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
    assert reuses >= 10, "the random graphs should give in-place reuse a workout"


# ------------------------------------------------------------------------------------------ zoo
ZOO_NAMES = sorted(ZOO)


@pytest.mark.parametrize("name", ZOO_NAMES)
def test_zoo_arena_is_close_to_the_lower_bound(name, tmp_path):
    e = ZOO[name]
    c = compile_info(e.build("small"), tmp_path, shapes=e.shapes_for("small"))
    s = c.plan.summary()
    ratio = s["arena_bytes"] / max(1, s["lower_bound_bytes"])
    print(f"{name}: arena {s['arena_bytes']} B, lower bound {s['lower_bound_bytes']} B, ratio {ratio:.3f}")
    assert s["lower_bound_bytes"] <= s["arena_bytes"] <= s["intermediates_bytes"]
    assert ratio <= 1.10
    independent_check(c)


# ------------------------------------------------------------------------------------------ Concat slices
def _concat_model():
    """Concats of every kind elide_concats must tell apart; (model, feeds)."""
    x = rand(1, 4, 4, 8, seed=21)                 # a channel: 32 floats, 128 bytes
    z = rand(1, 2, 4, 8, seed=22)
    t = rand(1, 1, 3, 3, seed=26)                 # a channel: 36 bytes
    w1, w2, w3 = rand(3, 4, 1, 1, seed=23), rand(5, 4, 1, 1, seed=24), rand(2, 8, 1, 1, seed=25)
    nodes = [
        N("Conv", ["x", "w1"], ["a"]), N("Sigmoid", ["a"], ["a1"]),          # a1: 3 channels
        N("Conv", ["x", "w2"], ["b"]), N("Relu", ["b"], ["b1"]),             # b1: 5 channels
        N("Concat", ["a1", "b1"], ["c1"], axis=1),                           # taken: a1, b1 into c1
        # a1's last reader, an elementwise kernel, runs before c1's: it must not write over a1
        N("Neg", ["a1"], ["e"]), N("ReduceSum", ["e", "ax"], ["er"], keepdims=1),
        N("Conv", ["c1", "w3"], ["d0"]), N("Add", ["d0", "er"], ["d"]),     # reads c1: (1, 2, 4, 8)
        N("Tanh", ["x"], ["f"]), N("Reshape", ["f", "s"], ["fv"]),           # fv: a view, (1, 4, 32)
        N("Neg", ["x"], ["g"]), N("Reshape", ["g", "s"], ["gv"]),
        N("Concat", ["fv", "gv"], ["c2"], axis=1),                           # taken: views as inputs
        N("Concat", ["c2", "fv"], ["c3"], axis=1),                           # not: c2, fv already in one
        N("Concat", ["z", "d"], ["c4"], axis=1),                             # not: z is a graph input
        N("Exp", ["d"], ["h"]), N("Concat", ["h", "h"], ["c5"], axis=1),     # not: the same value twice
        N("Cos", ["x"], ["k"]), N("Sin", ["x"], ["l"]),
        N("Concat", ["k", "l"], ["c6"], axis=2),                             # not: channels before the axis
        N("Abs", ["x"], ["m"]), N("Concat", ["m", "er"], ["c7"], axis=1),    # not: c7 is a graph output
        N("Floor", ["x"], ["n"]), N("Ceil", ["x"], ["q"]), N("Concat", ["n", "q"], ["c8"], axis=1),
        N("Relu", ["c8"], ["c8r"]),                                          # taken unless Relu fuses in
        N("Sqrt", ["t"], ["u"]), N("Softsign", ["t"], ["v"]),
        N("Concat", ["u", "v"], ["c9"], axis=1), N("Neg", ["c9"], ["c9n"]),  # not: 36-byte slices
    ]
    outs = ["d", "c3", "c4", "c5", "c6", "c7", "c8r", "c9n"]
    m = graph_model(nodes, {"x": x, "z": z, "t": np.abs(t)}, outs,
                    {"w1": w1, "w2": w2, "w3": w3, "s": np.array([1, 4, 32]), "ax": np.array([1])})
    return m, {"x": x, "z": z, "t": np.abs(t)}


def test_a_split_whose_parts_lead_a_concat_is_its_input_in_place(tmp_path):
    """YOLOv8's C2f block: a 1x1 convolution split in two along the channels, the second half
    growing a branch, then all three concatenated. The convolution writes straight into the
    Concat's output and the Split is no kernel (its parts are the convolution's output as it
    lies); a Split whose parts come in another order stays a copy.
    Against ONNX Runtime, and the plan checked independently."""
    x = rand(1, 8, 6, 8, seed=31)                  # a channel: 48 floats, 192 bytes
    inits = {"w1": rand(16, 8, 1, 1, seed=32) * 0.3, "w2": rand(8, 8, 3, 3, seed=33) * 0.2,
             "w3": rand(8, 24, 1, 1, seed=34) * 0.2, "w4": rand(16, 8, 1, 1, seed=35) * 0.3,
             "w5": rand(8, 24, 1, 1, seed=36) * 0.2, "sp": np.array([8, 8], np.int64)}
    nodes = [
        N("Conv", ["x", "w1"], ["y"]), N("Sigmoid", ["y"], ["ys"]), N("Mul", ["y", "ys"], ["y1"]),
        N("Split", ["y1", "sp"], ["a", "b"], axis=1),
        N("Conv", ["b", "w2"], ["m"], pads=[1, 1, 1, 1]), N("Relu", ["m"], ["m1"]),
        N("Concat", ["a", "b", "m1"], ["c"], axis=1), N("Conv", ["c", "w3"], ["out"]),
        # the parts reversed in the Concat: the Split stays
        N("Conv", ["x", "w4"], ["z"]), N("Split", ["z", "sp"], ["p", "q"], axis=1),
        N("Neg", ["q"], ["qn"]), N("Concat", ["q", "p", "qn"], ["d"], axis=1), N("Conv", ["d", "w5"], ["out2"]),
    ]
    m = graph_model(nodes, {"x": x}, ["out", "out2"], inits, opset=13)
    c = compile_info(m, tmp_path)
    splits = {n.outputs[0] for st in c.steps for n in st.group.nodes if n.op_type == "Split"}
    assert splits == {"p"}, splits
    assert c.plan.slices["y1"] == ("c", 0) and c.plan.slices["a"] == ("c", 0) and c.plan.slices["b"] == ("c", 8 * 192)
    assert "z" not in c.plan.slices
    independent_check(c)
    assert_parity(m, tmp_path, {"x": x})


def test_concat_inputs_are_computed_into_their_slices(tmp_path):
    """A Concat whose inputs can live in its output is no kernel: each input's kernel writes
    its slice. The plan places them (independent_check sees the output live from its first
    input's kernel to its last reader, and every input at its byte offset), and the others
    stay copies; every output against ONNX Runtime at 1 and 2 threads."""
    from aotc.api import compile as aotc_compile, load
    from tests.helpers import eager_threads_target
    m, feeds = _concat_model()
    c = compile_info(m, tmp_path)
    taken = {"a1": ("c1", 0), "b1": ("c1", 3 * 128), "fv": ("c2", 0), "gv": ("c2", 4 * 128)}
    assert {k: v for k, v in c.plan.slices.items() if k in taken} == taken
    concats = {n.outputs[0] for st in c.steps for n in st.group.nodes if n.op_type == "Concat"}
    assert {"c3", "c4", "c5", "c6", "c7", "c9"} <= concats and not {"c1", "c2"} & concats, concats
    assert ("c8" in concats) != ({"n", "q"} <= set(c.plan.slices)), "c8: a kernel, or its inputs in slices"
    assert c.plan.locations["b1"].offset == c.plan.locations["c1"].offset + 384
    independent_check(c)
    assert_parity(m, tmp_path, feeds)
    import onnxruntime as ort
    from aotc.compiler import compile_model
    ref = ort.InferenceSession(m.SerializeToString()).run(None, feeds)
    two = aotc_compile(tmp_path / "model.onnx", output_dir=tmp_path / "t2", target=eager_threads_target(tmp_path),
                       threads=2)
    # unfused, each elementwise node is a kernel of its own that may write over an input dying
    # in it: Neg over a1 would overwrite c1's first slice before c1's Conv reads it
    loose = compile_program(tmp_path / "model.onnx", fuse=False)
    assert "a1" in loose.plan.slices and not any(i == "a1" for _, i in loose.plan.inplace)
    independent_check(loose)
    unfused = load(compile_model(tmp_path / "model.onnx", output_dir=tmp_path / "loose", fuse=False))
    for art in (two, unfused):
        for name, a, b in zip(art.output_names, art.run(feeds), ref):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6, err_msg=name)
