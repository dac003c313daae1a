"""tools/bench.py's paired measure (issue 32's "aotc / best other"): each round's median of each
engine, then aotc's over the faster other engine's of the same round, the median over rounds."""
import pytest

from tools.bench import paired_over_best, round_medians


def _samples(per_round_ms: list[float], rng) -> list[float]:
    """three runs a round around each round's value, in seconds as time_engines records them: the
    middle one the round's value, one faster and one slower"""
    out = []
    for v in per_round_ms:
        out += [v * (1 + rng.uniform(0.01, 0.05)) / 1e3, v / 1e3, v * (1 - rng.uniform(0.01, 0.05)) / 1e3]
    return out


def test_round_medians_take_each_rounds_middle_run():
    import numpy as np
    rng = np.random.default_rng(0)
    got = round_medians({"e": _samples([4.0, 7.0, 5.5], rng)}, 3)
    assert got["e"] == pytest.approx([4.0, 7.0, 5.5])


def test_a_slow_period_moves_the_paired_ratio_less_than_the_ratio_of_medians():
    import numpy as np
    rng = np.random.default_rng(1)
    # aotc is 10 ms to OpenVINO's 11 (ONNX Runtime slower still) in every round; a slow period
    # (3x) covers aotc's runs from round 2 on and the others' from round 3 on
    aotc = [10.0, 10.0, 30.0, 30.0, 30.0]
    ov = [11.0, 11.0, 11.0, 33.0, 33.0]
    ort = [x * 1.2 for x in ov]
    samples = {"aotc, 1 thread": _samples(aotc, rng), "OV, 1 thread": _samples(ov, rng),
               "ORT, 1 thread": _samples(ort, rng)}
    result = {"round_ms": round_medians(samples, 5)}
    assert paired_over_best(result, 1) == pytest.approx(10.0 / 11.0)
    medians = {k: float(np.median(v)) for k, v in samples.items()}
    assert medians["aotc, 1 thread"] / medians["OV, 1 thread"] > 2.5     # what the medians would say


def test_the_faster_other_engine_is_taken_round_by_round():
    import numpy as np
    rng = np.random.default_rng(2)
    samples = {"aotc, 2 threads": _samples([8.0, 8.0, 8.0], rng), "OV, 2 threads": _samples([10.0, 6.0, 10.0], rng),
               "ORT, 2 threads": _samples([7.0, 9.0, 9.0], rng)}
    # rounds: 8/7, 8/6, 8/9 -> the median 8/7
    assert paired_over_best({"round_ms": round_medians(samples, 3)}, 2) == pytest.approx(8.0 / 7.0)
    assert paired_over_best({"round_ms": round_medians(samples, 3)}, 1) is None     # no 1-thread engines


def test_a_fast_engines_block_of_runs_lasts_the_minimum_time():
    """time_engines with min_block_s: an engine whose runs are short gets as many a round as fill
    that time (the same count each round, so round_medians splits its samples by round); one whose
    runs are long keeps runs / rounds"""
    import time

    from aotc.bench import time_engines

    calls = {"fast": 0, "slow": 0}

    def fast():
        calls["fast"] += 1
        time.sleep(0.0005)

    def slow():
        calls["slow"] += 1
        time.sleep(0.012)

    samples = time_engines({"fast": fast, "slow": slow}, runs=6, warmup=3, rounds=3, settle_s=0.0,
                           min_block_s=0.01)
    assert len(samples["slow"]) == 6                       # ceil(6 / 3) a round: 12 ms > 10 ms already
    per_round = len(samples["fast"]) // 3
    assert len(samples["fast"]) == 3 * per_round
    assert 8 <= per_round <= 21                             # ~10 ms of runs of 0.5 ms (and more)
    assert calls["fast"] == 3 + 3 * (per_round + 1)         # warm-up, then each round one untimed run
    assert sum(samples["fast"][:per_round]) >= 0.005
    # no warm-up asked for: one untimed run sizes the blocks all the same
    cold = time_engines({"fast": fast}, runs=2, warmup=0, rounds=2, settle_s=0.0, min_block_s=0.01)
    assert len(cold["fast"]) % 2 == 0 and 8 <= len(cold["fast"]) // 2 <= 21
    # without the minimum, every engine gets runs / rounds
    plain = time_engines({"fast": fast}, runs=6, warmup=1, rounds=3, settle_s=0.0)
    assert len(plain["fast"]) == 6
