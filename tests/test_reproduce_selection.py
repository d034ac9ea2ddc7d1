"""Tests of `experiments/reproduce/selection.py`: paired differences, window share, divergence."""

from __future__ import annotations

import numpy as np
import pytest


def test_reproduce_paired_differences_window_share_and_divergence():
    from fedjax_appeal.experiments.reproduce import selection as rs

    a = [{"seed": s, "x": v} for s, v in ((0, 1.0), (1, 5.0), (2, 2.0))]
    b = [{"seed": s, "x": v} for s, v in ((2, 3.0), (0, 0.5), (1, 5.0))]  # matched by seed
    p = rs.paired(a, b, "x")
    assert p["diffs"] == [0.5, 0.0, -1.0] and p["signs"] == "+0-"
    assert p["mean"] == pytest.approx(np.mean([0.5, 0.0, -1.0]))
    assert rs._verdict(p, "-") == "not held"
    assert rs._verdict(rs.paired(b[1:2], a[:1], "x"), "-") == "held"
    cohorts = np.array([[0, 1], [1, 2], [3, 4], [0, 4]])
    # round 1: {1} of {0,1}; round 2: none of {1,2} (u=1); round 3: {4} of {3,4}
    assert rs._window_picks(cohorts, 1) == pytest.approx(2 / 6)
    # u=3, round 3: both 0 and 4 in {0,1,2,3,4}
    assert rs._window_picks(cohorts, 3) == pytest.approx(3 / 6)
    x = {"cohorts": [[0, 1], [2, 3], [4, 5]]}
    assert rs._first_divergence(x, {"cohorts": [[1, 0], [2, 3], [5, 6]]}) == 2
    assert rs._first_divergence(x, x) == -1
