"""Tests of `papers/expalpha/metrics.py`: accX, half/final accuracy, group weights."""

from __future__ import annotations

import numpy as np
import pytest


def test_accx_half_final_and_group_weights_by_hand():
    from papers.expalpha.metrics import acc_at, acc_x, group_weights, summary

    hist = [{"round": 0, "test_acc_seen": 0.1}, {"round": 2, "test_acc_seen": 0.35},
            {"round": 4, "test_acc_seen": 0.41}, {"round": 6, "test_acc_seen": 0.39},
            {"round": 8, "test_acc_seen": 0.5}, {"round": 10, "test_acc_seen": 0.6}]
    assert acc_x(hist, 0.4) == 4 and acc_x(hist, 0.55) == 10 and acc_x(hist, 0.7) is None
    assert acc_at(hist, 5) == 0.41 and acc_at(hist, 10) == 0.6
    assert summary(hist, 10, 0.4) == {"acc40": 4, "acc_half": 0.41, "acc_final": 0.6}
    idx = np.array([[0, 1], [2, 1]])
    w = np.array([[0.2, 0.8], [0.5, 0.5]])
    g = group_weights(idx, w, np.array([True, False, True]))
    assert g["mean"]["True"] == pytest.approx(0.35)  # (0.2 + 0.5) / 2
    assert g["mean"]["False"] == pytest.approx(0.65)  # (0.8 + 0.5) / 2
    assert g["count"] == {"True": 2, "False": 2}
    np.testing.assert_allclose(g["trace"]["True"], [0.2, 0.5])
