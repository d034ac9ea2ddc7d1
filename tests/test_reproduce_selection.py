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
    assert pairs.verdict(p, "-") == "not held"
    assert pairs.verdict(pairs.paired(b[1:2], a[:1], "x"), "-") == "held"
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
    a = [{"seed": 0, "dissimilarity_mad": 2.0, "dissimilarity_range": 10.0}]
    b = [{"seed": 0, "dissimilarity_mad": 1.5, "dissimilarity_range": 12.0}]
    assert rs._other_definitions(a, b) == ("mean abs. pairwise difference +0.50 ± 0.00 (+); "
                                           "range -2.00 ± 0.00 (-)")


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
