"""The paired comparison report (`run.paired`): t and sign-flip intervals against
hand-computed numbers and brute force, and the verdict rule."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from fedjax_appeal.run.paired import (
    paired_report,
    perm_interval,
    sign_flip_p,
    t_interval,
    t_quantile,
)


def _brute_p(d, delta):
    """Sign-flip p-value by enumerating every pattern (independent of the module)."""
    x = [v - delta for v in d]
    obs = abs(sum(x))
    hits = sum(abs(sum(s * v for s, v in zip(signs, x, strict=True))) >= obs - 1e-12
               for signs in itertools.product((1, -1), repeat=len(x)))
    return hits / 2 ** len(x)


def test_t_quantiles_match_the_table():
    # Student-t table, two-sided 95%
    for df, q in ((1, 12.7062), (2, 4.3027), (4, 2.7764), (9, 2.2622), (29, 2.0452)):
        assert t_quantile(df) == pytest.approx(q, abs=1e-4)


def test_t_interval_by_hand():
    # d = 1, 2, 3: mean 2, sd 1, half-width 4.302653 / sqrt(3) = 2.484138
    lo, hi = t_interval(np.array([1.0, 2.0, 3.0]))
    assert lo == pytest.approx(2 - 2.484138, abs=1e-6)
    assert hi == pytest.approx(2 + 2.484138, abs=1e-6)
    assert all(math.isnan(v) for v in t_interval(np.array([1.0])))


def test_sign_flip_p_by_hand_and_brute_force():
    # 1..6 all positive: only the all-+ and all-- patterns reach |sum| = 21: p = 2/64
    assert sign_flip_p(np.arange(1.0, 7.0)) == pytest.approx(2 / 64)
    rng = np.random.default_rng(3)
    for n in (4, 7, 9):
        d = rng.normal(0.3, 1.0, n)
        for delta in (0.0, 0.2, -0.5):
            assert sign_flip_p(d, delta) == pytest.approx(_brute_p(d, delta))


def test_perm_interval_endpoints_are_where_the_test_starts_to_reject():
    rng = np.random.default_rng(0)
    for n in (6, 8, 10):
        d = rng.normal(0.5, 1.0, n)
        lo, hi = perm_interval(d)
        assert lo < d.mean() < hi
        eps = 1e-6
        assert _brute_p(d, lo + eps) > 0.05 and _brute_p(d, lo - eps) <= 0.05
        assert _brute_p(d, hi - eps) > 0.05 and _brute_p(d, hi + eps) <= 0.05


def test_fewer_than_six_seeds_cannot_reject_so_the_interval_is_the_line():
    assert perm_interval(np.array([1.0, 2.0, 3.0, 4.0, 5.0])) == (-math.inf, math.inf)
    r = paired_report({0: 1.0, 1: 2.0, 2: 3.0}, {0: 0.0, 1: 0.0, 2: 0.0}, "+")
    assert r.t_interval[0] < 0 < r.t_interval[1]  # [-0.48, 4.48]
    assert r.verdict == "inconclusive" and r.toward == 3
    # three consistent seeds: the t interval [2.50, 3.50] decides
    r = paired_report({0: 3.0, 1: 2.9, 2: 3.1}, {0: 0.0, 1: 0.0, 2: 0.0}, "+")
    assert r.t_interval == pytest.approx((3 - 0.248414, 3 + 0.248414), abs=1e-5)
    assert r.verdict == "held" and r.perm_interval == (-math.inf, math.inf)


def test_verdicts_held_reversed_inconclusive():
    seeds = range(10)
    base = {s: 0.5 for s in seeds}
    up = {s: 0.5 + 0.01 * (s + 1) for s in seeds}  # +0.01 .. +0.10
    r = paired_report(up, base, "+")
    assert r.verdict == "held" and r.toward == 10 and r.n == 10
    assert r.mean == pytest.approx(0.055)
    assert r.sd == pytest.approx(np.std([0.01 * (s + 1) for s in seeds], ddof=1))
    assert paired_report(up, base, "-").verdict == "reversed"
    assert paired_report(up, base, "-").toward == 0
    mixed = {s: 0.5 + (0.02 if s % 2 else -0.02) for s in seeds}
    assert paired_report(mixed, base, "+").verdict == "inconclusive"


def test_the_t_interval_decides():
    # 9 of 10 seeds +1, one seed -9: the t interval straddles 0 (mean 0), so inconclusive
    first = {s: (1.0 if s else -9.0) for s in range(10)}
    r = paired_report(first, {s: 0.0 for s in range(10)}, "+")
    assert r.t_interval[0] < 0 < r.t_interval[1] and r.verdict == "inconclusive"


def test_identical_differences_are_decided_by_the_sign_flip_interval():
    # a coarse metric (one client of 20 = 0.05) with the same difference in every seed: the
    # t interval has width 0 and says nothing; the sign-flip interval needs 6 seeds
    for n, want in ((5, "inconclusive"), (6, "held")):
        r = paired_report({s: 0.15 for s in range(n)}, {s: 0.10 for s in range(n)}, "+")
        assert r.t_interval == pytest.approx((0.05, 0.05))
        assert r.verdict == want
    zero = paired_report({s: 0.1 for s in range(8)}, {s: 0.1 for s in range(8)}, "+")
    assert zero.verdict == "inconclusive"  # no difference at all


def test_non_finite_values_are_left_out_and_listed():
    first = {0: 1.0, 1: float("nan"), 2: 2.0, 3: 1.5, 7: 3.0}
    second = {0: 0.0, 1: 0.0, 2: float("inf"), 3: 0.5}
    r = paired_report(first, second, "+")
    assert r.seeds == (0, 3) and r.missing == (1, 2) and r.diffs == (1.0, 1.0)
    with pytest.raises(ValueError, match="want must be"):
        paired_report(first, second, "up")


def test_a_verdict_does_not_hang_on_float_rounding():
    # the same +0.05 per seed, computed from float32 metrics in two ways: rounding leaves a
    # spread of ~1e-9, which must not turn "the sign-flip decides" into a width-0 t interval
    a = np.float32([0.15, 0.35, 0.55, 0.2, 0.9, 0.45]).astype(np.float64)
    b = (np.float32([0.15, 0.35, 0.55, 0.2, 0.9, 0.45]) - np.float32(0.05)).astype(np.float64)
    assert np.std(a - b) > 0  # not exactly equal
    for n in (3, 6):
        r = paired_report(dict(enumerate(a[:n])), dict(enumerate(b[:n])), "+")
        assert r.verdict == ("inconclusive" if n == 3 else "held")


def test_size_verdicts_by_hand():
    from fedjax_appeal.run.paired import deciding_interval, size_text, size_verdict

    # d = 0.01, 0.03, 0.02: mean 0.02, sd 0.01, half-width 4.302653 * 0.01 / sqrt(3)
    # = 0.024841: t [-0.004841, +0.044841]; inconclusive in direction, and the paper's
    # +0.47 lies far above the interval: smaller than the paper's, excluded at 95%
    r = paired_report({0: 0.01, 1: 0.03, 2: 0.02}, {0: 0.0, 1: 0.0, 2: 0.0}, "+")
    assert r.verdict == "inconclusive"
    iv = deciding_interval(r)
    assert iv == pytest.approx((0.02 - 0.024841, 0.02 + 0.024841), abs=1e-6)
    assert size_verdict(iv, 0.47, "+") == "smaller"
    assert size_text("smaller", 0.47) == "smaller than the paper's +0.47, excluded at 95%"
    assert size_verdict(iv, 0.04, "+") == "consistent"  # 0.04 < 0.044841
    assert size_verdict(iv, 0.045, "+") == "smaller"  # just above the upper end
    assert size_verdict(iv, -0.01, "+") == "larger"  # below the interval: ours is larger
    assert size_text("consistent", 0.04) == "consistent with the paper's size (+0.04)"
    # the paper's direction "-" (fewer rounds): an interval [-12.5, -3.5] and the paper's
    # -33 rounds: ours is a smaller gain; the paper's -2: ours is larger
    assert size_verdict((-12.5, -3.5), -33.0, "-") == "smaller"
    assert size_verdict((-12.5, -3.5), -2.0, "-") == "larger"
    assert size_verdict((-12.5, -3.5), -3.5, "-") == "consistent"  # an end counts as inside
    # no paper number, or an interval without both ends: no size verdict
    assert size_verdict(iv, None, "+") is None
    assert size_verdict((-math.inf, math.inf), 0.47, "+") is None
    assert size_verdict((math.nan, math.nan), 0.47, "+") is None
    assert size_text(None, 0.47) == "n/a"
    with pytest.raises(ValueError, match="want must be"):
        size_verdict(iv, 0.47, "up")


def test_identical_differences_size_from_the_sign_flip_interval():
    from fedjax_appeal.run.paired import deciding_interval, size_verdict

    # +0.05 in each of 8 seeds: the t interval is the point 0.05; the sign-flip interval
    # decides, and it is a point as well (every δ != 0.05 rejects with p = 2/256)
    r = paired_report({s: 0.15 for s in range(8)}, {s: 0.10 for s in range(8)}, "+")
    lo, hi = deciding_interval(r)
    assert (lo, hi) == pytest.approx((0.05, 0.05), abs=1e-9)
    assert size_verdict((lo, hi), 0.47, "+") == "smaller"


def test_min_seeds_and_the_compare_verdict():
    from fedjax_appeal.run.paired import compare_verdict, interval_text, min_seeds

    # the sign-flip test's smallest two-sided p-value is 2 / 2^n: 2/32 > 0.05 >= 2/64
    assert min_seeds() == 6 and min_seeds(0.9) == 5 and min_seeds(0.99) == 8
    two = paired_report({0: 0.3, 1: 0.5}, {0: 0.0, 1: 0.1}, "+")
    assert two.verdict in VERDICTS_ALL
    assert compare_verdict(two) == "no verdict (needs at least 6 seeds, has 2)"
    text = interval_text(two)
    assert "sign-flip n/a (needs at least 6 seeds)" in text and "inf" not in text
    one = paired_report({0: 0.3}, {0: 0.0}, "+")
    assert "95% t n/a (needs at least 2 seeds)" in interval_text(one)
    up = {s: 0.5 + 0.01 * (s + 1) for s in range(6)}
    base = {s: 0.5 for s in range(6)}
    assert compare_verdict(paired_report(up, base, "+")) == "better"
    assert compare_verdict(paired_report(up, base, "-")) == "worse"
    assert compare_verdict(paired_report(up, base, "-"), "held", "reversed") == "reversed"


VERDICTS_ALL = ("held", "reversed", "inconclusive")


def test_the_tables_size_cells():
    """`papers.pairs.size_of` / `size_cell` on a `paired` record (the selection tables):
    SubTrunc − DivFL per seed -0.2, -0.4, -0.3 (mean -0.3, sd 0.1, t [-0.548, -0.052]);
    the paper's -0.93 lies below it: ours is smaller; -0.27 inside: consistent."""
    from papers.pairs import paired, size_cell, size_of

    a = [{"seed": s, "v": v} for s, v in enumerate((4.0, 4.1, 4.2))]
    b = [{"seed": s, "v": v} for s, v in enumerate((4.2, 4.5, 4.5))]
    p = paired(a, b, "v")
    np.testing.assert_allclose(p["diffs"], [-0.2, -0.4, -0.3], atol=1e-12)
    assert size_of(p, -0.93, "-") == "smaller"
    assert size_of(p, -0.27, "-") == "consistent"
    assert size_of(p, -0.01, "-") == "larger"
    assert size_cell(p, -0.93, "-") == "smaller than the paper's -0.93, excluded at 95%"
    assert size_cell(p, None, "-") == "—" and size_of(p, None, "-") is None
    assert size_of({"diffs": [0.1, float("nan"), 0.2]}, -0.93, "-") is None
