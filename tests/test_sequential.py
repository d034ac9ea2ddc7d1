"""Seeds until decided (`run.sequential`): the group-sequential boundaries against an
independent computation, the looks on hand-made differences, and the error rates of the
stopped procedure by simulation (under no effect it decides falsely no more often than the
fixed-n interval does; looking at the fixed-n t interval after every batch does not)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import binomtest, norm, t

from fedjax_appeal.run.sequential import (
    nominal_levels,
    parse_auto_seeds,
    seed_design,
    sequential_report,
    sequential_text,
    spent,
    t_bounds,
)


def test_design_looks_and_refusals():
    assert seed_design(40, 10).looks == (10, 20, 30, 40)
    assert seed_design(25, 10).looks == (10, 20, 25)  # the last look at the maximum
    assert seed_design(10, 10).looks == (10,)
    with pytest.raises(ValueError, match="at least 3 seeds"):
        seed_design(40, 2)
    with pytest.raises(ValueError, match="below the batch"):
        seed_design(5, 10)
    with pytest.raises(ValueError, match="spending must be"):
        seed_design(40, 10, spending="linear")
    assert parse_auto_seeds("auto") == 40 and parse_auto_seeds("auto:25") == 25
    assert parse_auto_seeds("0,1,2") is None
    for bad in ("auto:", "auto:x", "auto:0"):
        with pytest.raises(ValueError, match="auto:MAX"):
            parse_auto_seeds(bad)


def test_one_look_is_the_fixed_n_t_interval():
    assert t_bounds(seed_design(10, 10)) == pytest.approx((t.ppf(0.975, 9),), abs=1e-12)


def test_spending_functions_by_hand():
    # Pocock type: 0.05 ln(1 + (e - 1) / 2) = 0.05 * 0.620115 = 0.031006
    assert spent(0.5, 0.05, "pocock") == pytest.approx(0.0310057, abs=1e-6)
    # O'Brien-Fleming type: 2 - 2 Phi(1.959964 / sqrt(0.5)) = 2 - 2 Phi(2.771808)
    assert spent(0.5, 0.05, "obf") == pytest.approx(2 * norm.sf(2.771808), abs=1e-8)
    for kind in ("pocock", "obf"):
        assert spent(1.0, 0.05, kind) == pytest.approx(0.05)
        assert spent(0.0, 0.05, kind) == 0.0


def test_the_first_boundary_is_a_t_quantile_and_many_seeds_give_pococks_normal_values():
    des = seed_design(40, 10)
    c = t_bounds(des)
    assert c[0] == pytest.approx(t.ppf(1 - spent(0.25, 0.05, "pocock") / 2, 9), abs=1e-12)
    assert c[0] > c[1] > c[2] > c[3] > t.ppf(0.975, 39)  # small df first, then spending
    assert nominal_levels(des)[0] == pytest.approx(spent(0.25, 0.05, "pocock"), abs=1e-12)
    # with hundreds of seeds per batch the t statistic is normal: two equal looks of the
    # Pocock-type function have the boundaries 2.1570 and 2.2010 on the normal scale
    big = t_bounds(seed_design(800, 400))
    assert big == pytest.approx((2.1570, 2.2010), abs=0.012)


@pytest.mark.parametrize("max_seeds,batch,kind", [(40, 10, "pocock"), (30, 5, "pocock"),
                                                  (40, 10, "obf")])
def test_boundaries_spend_alpha_look_by_look(max_seeds, batch, kind):
    """First crossings per look of 40,000 fresh simulated comparisons (whole normal
    differences, another seed, not the sampled sums the boundaries came from): the share
    crossing by look k is α(t_k) within its 99.9% binomial interval."""
    des = seed_design(max_seeds, batch, spending=kind)
    c = np.asarray(t_bounds(des))
    rng = np.random.default_rng(7)
    runs = 40_000
    x = rng.normal(0.0, 3.0, (runs, max_seeds))  # any scale: the t statistic ignores it
    first = np.full(runs, -1)
    for k, n in enumerate(des.looks):
        y = x[:, :n]
        stat = np.abs(y.mean(1)) / (y.std(1, ddof=1) / math.sqrt(n))
        first[(first < 0) & (stat > c[k])] = k
    for k, n in enumerate(des.looks):
        hits = int(np.sum((first >= 0) & (first <= k)))
        lo, hi = binomtest(hits, runs).proportion_ci(0.999)
        assert lo <= spent(n / max_seeds, 0.05, kind) <= hi


def test_looks_on_hand_made_differences():
    des = seed_design(30, 10)
    q1, q2, _ = t_bounds(des)
    zeros = {s: 0.0 for s in range(30)}
    # look 1: d = +1, -1 alternating plus 0.1 (mean 0.1, sd 1.0488): its interval holds 0
    d = {s: 0.1 + (1.0 if s % 2 else -1.0) for s in range(10)}
    r = sequential_report(d, zeros, "+", des)
    assert r.verdict == "undecided" and r.next_seeds == 20 and r.n == 10
    sd = float(np.std([0.1 + (1.0 if s % 2 else -1.0) for s in range(10)], ddof=1))
    assert r.interval == pytest.approx((0.1 - q1 * sd / math.sqrt(10),
                                        0.1 + q1 * sd / math.sqrt(10)))
    assert "undecided after 10 seeds, look 1 of 3" in sequential_text(r)
    # seeds 10..19 all +2: look 2 has mean (1 + 20) / 20 = 1.05 and decides, "held"
    d.update({s: 2.0 for s in range(10, 20)})
    r = sequential_report(d, zeros, "+", des)
    arr = np.array([d[s] for s in range(20)])
    half = q2 * arr.std(ddof=1) / math.sqrt(20)
    assert r.interval == pytest.approx((1.05 - half, 1.05 + half))
    assert r.interval[0] > 0 and r.verdict == "held" and r.stopped and r.n == 20
    assert [lk.side for lk in r.looks] == ["0", "+"]
    assert sequential_report(d, zeros, "-", des).verdict == "reversed"
    # more seeds than the deciding look: the report uses only those up to it
    d.update({s: -50.0 for s in range(20, 30)})
    assert sequential_report(d, zeros, "+", des).seeds == tuple(range(20))


def test_the_maximum_and_a_missing_value_stop_it():
    des = seed_design(20, 10)
    mixed = {s: (1.0 if s % 2 else -1.0) for s in range(20)}
    r = sequential_report(mixed, {s: 0.0 for s in range(20)}, "+", des)
    assert r.verdict == "inconclusive" and r.stopped and r.n == 20
    assert "maximum of 20 seeds" in r.reason
    nan = {**mixed, 4: float("nan")}
    r = sequential_report(nan, {s: 0.0 for s in range(20)}, "+", des)
    assert r.verdict == "inconclusive" and r.stopped and "seed 4" in r.reason
    few = sequential_report({0: 1.0}, {0: 0.0}, "+", des)
    assert few.verdict == "undecided" and few.next_seeds == 10 and few.looks == ()


def test_identical_differences_use_the_sign_flip_test_at_the_looks_level():
    des = seed_design(20, 10)
    p1 = nominal_levels(des)[0]
    assert 2 / 2 ** 10 <= p1  # ten equal signs reject at the first look's level
    r = sequential_report({s: 0.15 for s in range(10)}, {s: 0.10 for s in range(10)}, "+",
                          des)
    assert r.verdict == "held" and r.interval == pytest.approx((0.05, 0.05), abs=1e-9)
    with pytest.raises(ValueError, match="want must be"):
        sequential_report({}, {}, "up", des)


def _simulate(effect: float, runs: int, des, seed: int) -> tuple[int, int, float, int]:
    """(held, reversed, mean seeds used, runs whose every interval covered `effect`) of
    `sequential_report` over `runs` simulated comparisons with N(effect, 1) differences."""
    rng = np.random.default_rng(seed)
    zeros = {s: 0.0 for s in range(des.max_seeds)}
    held = rev = covered = 0
    used = 0
    for _ in range(runs):
        d = rng.normal(effect, 1.0, des.max_seeds)
        r = sequential_report(dict(enumerate(d)), zeros, "+", des)
        held += r.verdict == "held"
        rev += r.verdict == "reversed"
        used += r.n
        covered += all(lk.interval[0] <= effect <= lk.interval[1] for lk in r.looks)
    return held, rev, used / runs, covered


def _naive_false(runs: int, des, seed: int) -> int:
    """Runs decided (either side) when the fixed-n 95% t interval is looked at after every
    batch: what `--seeds auto` must not do."""
    rng = np.random.default_rng(seed)
    bad = 0
    for _ in range(runs):
        d = rng.normal(0.0, 1.0, des.max_seeds)
        for n in des.looks:
            x = d[:n]
            half = t.ppf(0.975, n - 1) * x.std(ddof=1) / math.sqrt(n)
            if abs(x.mean()) > half:
                bad += 1
                break
    return bad


def test_under_no_effect_the_stopped_procedure_keeps_its_error_rate():
    """2,000 simulated comparisons with no effect, looked at after every 10 of at most 40
    seeds: a false "held" in at most 5% (the 95% Clopper-Pearson bound of the rate, not
    only the rate), and false decisions of either side near 5%; looking at the fixed-n t
    interval after every batch, on the same kind of data, decides falsely far more often."""
    des = seed_design(40, 10)
    runs = 2000
    held, rev, _, _ = _simulate(0.0, runs, des, seed=11)
    assert binomtest(held, runs).proportion_ci(0.95).high <= 0.05
    assert binomtest(held + rev, runs).proportion_ci(0.95).low <= 0.05
    assert (held + rev) / runs <= 0.065
    naive = _naive_false(runs, des, seed=11)
    assert binomtest(naive, runs).proportion_ci(0.95).low > 0.08


def test_power_and_simultaneous_coverage_under_an_effect():
    """An effect of 0.8 sd per seed: decided "held" in at least 95% of 1,000 comparisons,
    on fewer seeds than the maximum on average, and every interval taken covers the effect
    in about 95% of the runs."""
    des = seed_design(40, 10)
    runs = 1000
    held, rev, mean_seeds, covered = _simulate(0.8, runs, des, seed=12)
    assert held / runs >= 0.95 and rev == 0
    assert mean_seeds < 25
    assert binomtest(covered, runs).proportion_ci(0.95).high >= 0.95
    assert covered / runs >= 0.92
