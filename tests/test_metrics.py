"""Tests of `evaluate/metrics.py`: dissimilarity summaries against numpy."""

from __future__ import annotations

import numpy as np
import pytest

from fedjax_appeal.evaluate.metrics import dissimilarity


def test_dissimilarity_metrics_against_numpy():
    rng = np.random.default_rng(0)
    acc = rng.uniform(0.3, 1.0, 13)
    out = dissimilarity(acc)
    p = acc * 100
    pairs = [abs(p[i] - p[j]) for i in range(13) for j in range(i + 1, 13)]
    assert out["client_dissimilarity"] == pytest.approx(np.std(p))
    assert out["client_dissimilarity_range"] == pytest.approx(p.max() - p.min())
    assert out["client_dissimilarity_mad"] == pytest.approx(np.mean(pairs))
    assert dissimilarity(np.array([0.5, 0.7]))["client_dissimilarity_mad"] == pytest.approx(20)
