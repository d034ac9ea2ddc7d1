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


def test_imbalance_recipe_ldam_numbers():
    from fedjax_appeal.data.heterogeneity import imbalance_counts

    assert imbalance_counts(5000, 0.01, 10).tolist() == [5000, 2997, 1796, 1077, 645, 387,
                                                          232, 139, 83, 50]
    assert imbalance_counts(100, 1.0, 10).tolist() == [100] * 10


@pytest.mark.parametrize("flip_ratio,changed", [(1.0, 10), (0.5, 5), (0.2, 2)])
def test_flip_fraction_and_ratio(flip_ratio, changed):
    from fedjax_appeal.data.heterogeneity import choose_fraction, flip_labels

    rng = np.random.default_rng(0)
    mask = choose_fraction(30, 1 / 3, rng)
    assert mask.sum() == 10
    labels = np.tile(np.arange(10), 30 * 5)  # 30 clients x 50 rows, every class 5 times
    clients = [np.arange(k * 50, (k + 1) * 50) for k in range(30)]
    new, maps = flip_labels(labels, clients, mask, 10, flip_ratio, rng)
    for k in range(30):
        wrong = np.mean(new[clients[k]] != labels[clients[k]])
        assert wrong == pytest.approx(changed / 10 if mask[k] else 0.0)
        assert int(np.sum(maps[k] != np.arange(10))) == (changed if mask[k] else 0)


def test_equal_size_counts_by_hand():
    from fedjax_appeal.data.heterogeneity import equal_size_counts

    # shares 1, 0.1^(1/3), 0.1^(2/3), 0.1 = [.5619, .2608, .1211, .0562] of 40 rows:
    # 22.48, 10.43, 4.84, 2.25 -> floors 22, 10, 4, 2 (38) + the two largest remainders
    assert equal_size_counts(40, 0.1, 4).tolist() == [23, 10, 5, 2]
    assert equal_size_counts(40, 1.0, 4).tolist() == [10, 10, 10, 10]
    # the class order puts the shares on other classes (order[0] is the largest class)
    assert equal_size_counts(40, 0.1, 4, np.array([2, 0, 3, 1])).tolist() == [10, 2, 23, 5]
