"""Label flipping and client tags: exact fractions, derangements, configured flip ratio."""

from __future__ import annotations

import numpy as np
import pytest

from fedjax_appeal.core.config import RunConfig
from fedjax_appeal.data import apply_heterogeneity, partition
from fedjax_appeal.data import heterogeneity as H
from fedjax_appeal.data.sources import Dataset


@pytest.mark.parametrize("n,frac", [(100, 0.3), (7, 0.5), (10, 0.0), (10, 1.0)])
def test_choose_fraction_is_exact(n, frac):
    m = H.choose_fraction(n, frac, np.random.default_rng(0))
    assert m.sum() == round(frac * n)


def test_derangement_has_no_fixed_point():
    rng = np.random.default_rng(1)
    for n in (2, 3, 10):
        for _ in range(20):
            p = H.derangement(n, rng)
            assert sorted(p.tolist()) == list(range(n)) and not np.any(p == np.arange(n))


@pytest.mark.parametrize("ratio,wrong", [(1.0, 10), (0.5, 5), (0.2, 2), (0.0, 0)])
def test_flip_map_ratio(ratio, wrong):
    m = H.flip_map(10, ratio, np.random.default_rng(2))
    assert sorted(m.tolist()) == list(range(10))  # a permutation
    assert int(np.sum(m != np.arange(10))) == wrong


def test_apply_heterogeneity_flips_configured_clients():
    rng = np.random.default_rng(0)
    y = rng.integers(0, 10, 4000)
    ds = Dataset("t", np.zeros((4000, 2), np.uint8), y, 10)
    parts = partition.dirichlet(y, 30, 0.5, rng)
    seen, unseen = parts[:20], parts[20:]
    cfg = RunConfig(label_flip_fraction=0.3, byzantine_fraction=0.1, seed=3)
    labels, info, uinfo = apply_heterogeneity(ds, seen, unseen, cfg)
    assert info["flipped"].sum() == 6 and uinfo["flipped"].sum() == 3
    assert info["byzantine"].sum() == 2
    for k, idx in enumerate(seen):
        changed = labels[idx] != y[idx]
        assert changed.all() if info["flipped"][k] else not changed.any()
    for k, idx in enumerate(unseen):
        assert (labels[idx] != y[idx]).all() == bool(uinfo["flipped"][k])
    # the same seed gives the same tags; the partition stream is untouched
    labels2, info2, _ = apply_heterogeneity(ds, seen, unseen, cfg)
    np.testing.assert_array_equal(labels, labels2)
