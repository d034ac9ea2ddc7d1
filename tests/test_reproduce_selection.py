"""Tests of `papers/selection/tables.py`: paired differences, window share, divergence."""

from __future__ import annotations

import numpy as np
import pytest


def test_reproduce_paired_differences_window_share_and_divergence():
    from papers import pairs
    from papers.selection import tables as rs

    a = [{"seed": s, "x": v} for s, v in ((0, 1.0), (1, 5.0), (2, 2.0))]
    b = [{"seed": s, "x": v} for s, v in ((2, 3.0), (0, 0.5), (1, 5.0))]  # matched by seed
    p = pairs.paired(a, b, "x")
    assert p["diffs"] == [0.5, 0.0, -1.0] and p["signs"] == "+0-"
    assert p["mean"] == pytest.approx(np.mean([0.5, 0.0, -1.0]))
    assert p["seeds"] == [0, 1, 2]
    # sample std (ddof = 1): deviations from -1/6 are 2/3, 1/6, -5/6 -> sqrt((7/6) / 2)
    assert p["std"] == pytest.approx(np.sqrt(7 / 12))
    # mean ± t(2, 0.975)·std/sqrt(3), t(2, 0.975) = 4.303; sign-flip of 3 seeds: every value
    half = 4.302652729911275 * np.sqrt(7 / 12) / np.sqrt(3)
    assert p["t_interval"] == pytest.approx([-1 / 6 - half, -1 / 6 + half])
    assert p["perm_interval"] == [-np.inf, np.inf]
    assert pairs.verdict(p, "-") == "inconclusive" == pairs.verdict(p, "+")
    # six seeds all below: the t interval -2 ± 2.571·sqrt(0.8)/sqrt(6) = [-2.94, -1.06]
    # decides: held for "-", reversed for "+"; beside it the sign-flip interval (with six
    # seeds the test rejects a δ only when every d - δ has one sign: [min d, max d])
    a6 = [{"seed": s, "x": 0.0} for s in range(6)]
    b6 = [{"seed": s, "x": float(1 + s % 3)} for s in range(6)]
    p6 = pairs.paired(a6, b6, "x")
    assert p6["diffs"] == [-1.0, -2.0, -3.0, -1.0, -2.0, -3.0] and p6["signs"] == "------"
    assert p6["mean"] == -2.0 and p6["std"] == pytest.approx(np.sqrt(0.8))
    half = 2.570581835636314 * np.sqrt(0.8) / np.sqrt(6)  # t(5, 0.975) = 2.571
    assert p6["t_interval"] == pytest.approx([-2.0 - half, -2.0 + half])
    assert p6["perm_interval"] == pytest.approx([-3.0, -1.0], abs=1e-9)
    assert pairs.verdict(p6, "-") == "held" and pairs.verdict(p6, "+") == "reversed"
    # the same pattern over only 3 seeds: -2 ± 4.303·1/sqrt(3) = [-4.48, +0.48] contains 0
    p3 = pairs.paired(a6[:3], b6[:3], "x")
    assert p3["signs"] == "---" and p3["t_interval"] == pytest.approx(
        [-2.0 - 4.302652729911275 / np.sqrt(3), -2.0 + 4.302652729911275 / np.sqrt(3)])
    assert pairs.verdict(p3, "-") == "inconclusive" == pairs.verdict(p3, "+")
    # three seeds closer together (-1.9, -2, -2.1: std 0.1): [-2.25, -1.75], held
    near = pairs.paired(a6[:3], [{"seed": s, "x": x} for s, x in enumerate((1.9, 2.0, 2.1))],
                        "x")
    assert pairs.verdict(near, "-") == "held"
    # the same difference -2 in every seed: the t interval is a point, the sign-flip one
    # decides (the whole line with 3 seeds, [-2, -2] with 6)
    same = [{"seed": s, "x": 2.0} for s in range(6)]
    assert pairs.verdict(pairs.paired(a6[:3], same[:3], "x"), "-") == "inconclusive"
    assert pairs.verdict(pairs.paired(a6, same, "x"), "-") == "held"
    # one seed above zero among six (-1, -2, -3, -1, +1, -3): mean -1.5, sample std
    # sqrt(2.3), -1.5 ± 2.571·sqrt(2.3)/sqrt(6) = [-3.09, +0.09] contains 0
    b6[4]["x"] = -1.0
    p1 = pairs.paired(a6, b6, "x")
    assert p1["t_interval"][0] < 0 < p1["t_interval"][1]
    assert p1["t_interval"][1] == pytest.approx(-1.5 + half * np.sqrt(2.3 / 0.8))
    assert pairs.verdict(p1, "-") == "inconclusive"
    cohorts = np.array([[0, 1], [1, 2], [3, 4], [0, 4]])
    # round 1: {1} of {0,1}; round 2: none of {1,2} (u=1); round 3: {4} of {3,4}
    assert rs._window_picks(cohorts, 1) == pytest.approx(2 / 6)
    # u=3, round 3: both 0 and 4 in {0,1,2,3,4}
    assert rs._window_picks(cohorts, 3) == pytest.approx(3 / 6)
    x = {"cohorts": [[0, 1], [2, 3], [4, 5]]}
    assert rs._first_divergence(x, {"cohorts": [[1, 0], [2, 3], [5, 6]]}) == 2
    assert rs._first_divergence(x, x) == -1


def test_lambda_slopes_and_other_dissimilarity_definitions_by_hand():
    from papers.selection import specs
    from papers.selection import tables as rs

    runs = {0.1: [{"seed": 0, "dissimilarity": 5.0}, {"seed": 1, "dissimilarity": 6.0}],
            0.5: [{"seed": 1, "dissimilarity": 7.0}, {"seed": 0, "dissimilarity": 4.0}]}
    # seed 0: (4 - 5) / 0.4 = -2.5; seed 1: (7 - 6) / 0.4 = +2.5 (matched by seed)
    assert rs._slopes(runs) == pytest.approx([-2.5, 2.5])
    three = {**runs, 0.9: [{"seed": 0, "dissimilarity": 3.0}, {"seed": 1, "dissimilarity": 8.0}]}
    assert rs._slopes(three) == pytest.approx([-2.5, 2.5])  # on a line: the same slopes
    flat = {x: [{"seed": 0, "dissimilarity": 21.13}] for x in (0.01, 0.5, 0.95)}
    assert rs._slopes(flat) == [0.0]  # equal values: exactly 0, not a float residue
    # the paper's MNIST rows 0.01 -> 0.95: (7.96 - 8.90) / 0.94 = -1.0
    assert rs._paper_slope(specs.TABLE_II.paper, "mnist", (0.01, 0.95)) == pytest.approx(-1.0)
    # the slopes' line: [-2.5, -2.0, -3.0]: mean -2.5, sd 0.5, t(2, .975) = 4.303:
    # -2.5 ± 1.242 lies below 0, the paper's side; [-1, +1] contains 0
    line = rs._slope_line([-2.5, -2.0, -3.0], (0.01, 0.95), -1.0)
    assert "the paper's rows: -1.00): -2.50, -2.00, -3.00 (---) — held." in line
    assert rs._slope_line([-1.0, 1.0], (0.01, 0.95), -1.0).endswith("(-+) — inconclusive.\n\n")
    a = [{"seed": 0, "dissimilarity_mad": 2.0, "dissimilarity_range": 10.0}]
    b = [{"seed": 0, "dissimilarity_mad": 1.5, "dissimilarity_range": 12.0}]
    # one seed: no interval
    assert rs._other_definitions(a, b) == ("mean abs. pairwise difference +0.50 (+); "
                                           "range -2.00 (-)")
    # three seeds: Δ mad 0.4, 0.5, 0.6 (std 0.1), Δ range -1, -2, -3 (std 1); the 95% t
    # interval is mean ± 4.303·std/sqrt(3): 0.5 ± 0.248, -2 ± 2.484
    a = [{"seed": s, "dissimilarity_mad": m, "dissimilarity_range": 10.0}
         for s, m in ((0, 2.0), (1, 2.5), (2, 3.0))]
    b = [{"seed": s, "dissimilarity_mad": m, "dissimilarity_range": r}
         for s, m, r in ((2, 2.4, 13.0), (0, 1.6, 11.0), (1, 2.0, 12.0))]
    assert rs._other_definitions(a, b) == (
        "mean abs. pairwise difference +0.50 [t +0.25, +0.75] (+++); "
        "range -2.00 [t -4.48, +0.48] (---)")


def test_selection_options_are_declared_per_table():
    """What used to be environment variables are options each table declares: `--set
    cifar=1` adds CIFAR-10, `--set lambdas=` picks Table II rows; undeclared keys and bad
    values are one-line errors."""
    from pathlib import Path

    from fedjax_appeal.core.config import ConfigError
    from papers.reproduce import OPTIONS, Context, parse_options
    from papers.selection import tables as rs

    assert set(OPTIONS["selection-lambda"]) == {"cifar", "reverse", "lambdas", "schedule"}
    assert set(OPTIONS["selection-window"]) == {"reverse", "windows", "schedule"}
    assert set(OPTIONS["selection-compare"]) == {"cifar", "reverse", "schedule", "selectors"}
    opts = parse_options("selection-lambda", ["cifar=1", "lambdas=0.5, 0.95"])
    ctx = Context("selection-lambda", [0], Path("unused"), options=opts)
    assert rs._datasets(ctx) == ("mnist", "cifar10")
    assert rs._numbers(ctx, "lambdas", float) == (0.5, 0.95)
    # the schedules: early (10 rounds) by default, trained (50 rounds) on request, --quick's
    assert rs._schedule(ctx)["rounds"] == 10
    trained = Context("selection-lambda", [0], Path("unused"),
                      options=parse_options("selection-lambda", ["schedule=trained"]))
    assert rs._schedule(trained)["rounds"] == 50
    assert rs._schedule(trained)["local_steps"] == rs._schedule(ctx)["local_steps"]
    bad = Context("selection-lambda", [0], Path("unused"),
                  options=parse_options("selection-lambda", ["schedule=long"]))
    with pytest.raises(ConfigError, match="schedule=long is not a schedule"):
        rs._schedule(bad)
    assert rs._datasets(Context("x", [0], Path("unused"))) == ("mnist",)
    with pytest.raises(ConfigError, match="give comma-separated float values"):
        rs._numbers(Context("x", [0], Path("u"), options={"lambdas": "a,b"}), "lambdas", float)
    with pytest.raises(ConfigError, match="give 1/true/yes/on or 0/false/no/off"):
        Context("x", [0], Path("u"), options={"cifar": "maybe"}).flag("cifar")
    with pytest.raises(ConfigError, match="selection-gains has no option 'cifar'; it takes no"):
        parse_options("selection-gains", ["cifar=1"])
    with pytest.raises(ConfigError, match="write KEY=VALUE"):
        parse_options("selection-lambda", ["cifar"])
