"""Partitioners: disjoint, covering, label sets as specified, minimum sizes."""

from __future__ import annotations

import numpy as np
import pytest

from fedjax_appeal.core.config import ConfigError
from fedjax_appeal.data import partition as P


def _labels(n=3000, c=10, seed=0):
    return np.random.default_rng(seed).integers(0, c, n)


def _check_disjoint(parts, n, cover=True):
    allidx = np.concatenate(parts)
    assert len(np.unique(allidx)) == len(allidx)  # disjoint
    assert allidx.min() >= 0 and allidx.max() < n
    if cover:
        assert len(allidx) == n


@pytest.mark.parametrize("alpha", [0.1, 0.5, 100.0])
def test_dirichlet(alpha):
    y = _labels()
    parts = P.dirichlet(y, 30, alpha, np.random.default_rng(1), min_samples=10)
    assert len(parts) == 30
    _check_disjoint(parts, len(y))
    assert min(len(p) for p in parts) >= 10
    # smaller alpha -> more skewed label distributions (mean max-class share)
    share = np.mean([np.bincount(y[p], minlength=10).max() / len(p) for p in parts])
    if alpha == 100.0:
        assert share < 0.25
    if alpha == 0.1:
        assert share > 0.5


def test_dirichlet_impossible_min_samples():
    with pytest.raises(ConfigError, match="min-samples"):
        P.dirichlet(_labels(50), 10, 0.5, np.random.default_rng(0), min_samples=10)


def test_dirichlet_that_cannot_fill_every_client_names_the_client_options():
    # 2,000 rows over 200 clients at 10 each: possible on average, never in a Dir(0.5) draw
    labels = np.random.default_rng(0).integers(0, 10, 2000)
    with pytest.raises(ConfigError) as e:
        P.dirichlet(labels, 200, 0.5, np.random.default_rng(1), min_samples=10, max_tries=20)
    msg = str(e.value)
    assert "over 200 clients" in msg and "10 a client on average" in msg
    assert "--clients, --unseen-clients" in msg and "--min-samples" in msg


def test_clusters_label_sets():
    y = _labels()
    parts = P.clusters(y, 20, 5, 2, np.random.default_rng(2), min_samples=5)
    _check_disjoint(parts, len(y))
    label_sets = [frozenset(np.unique(y[p]).tolist()) for p in parts]
    distinct = set(label_sets)
    assert len(distinct) == 5  # one label set per cluster
    assert all(len(s) == 2 for s in distinct)
    assert len(frozenset().union(*distinct)) == 10  # clusters' labels disjoint
    sizes = [sum(s == d for s in label_sets) for d in distinct]
    assert sorted(sizes) == [4, 4, 4, 4, 4]  # balanced random assignment


def test_clusters_need_enough_labels():
    with pytest.raises(ConfigError, match="distinct labels"):
        P.clusters(_labels(), 10, 6, 2, np.random.default_rng(0))


def test_classes_per_client():
    y = _labels()
    parts = P.classes_per_client(y, 40, 3, np.random.default_rng(3), min_samples=5)
    _check_disjoint(parts, len(y), cover=False)
    for p in parts:
        assert len(np.unique(y[p])) == 3


def test_natural_min_samples():
    groups = np.array([5, 5, 5, 1, 1, 9, 9, 9, 9, 2])
    parts = P.natural(groups, min_samples=3)
    assert [p.tolist() for p in parts] == [[0, 1, 2], [5, 6, 7, 8]]


def test_seen_unseen_and_train_test_split():
    y = _labels()
    parts = P.dirichlet(y, 20, 0.5, np.random.default_rng(4))
    seen, unseen = P.split_seen_unseen(parts, 12, 8, np.random.default_rng(5))
    assert len(seen) == 12 and len(unseen) == 8
    _check_disjoint(seen + unseen, len(y))
    tr, te = P.train_test_split(seen, 0.6, np.random.default_rng(6))
    for a, b, full in zip(tr, te, seen, strict=True):
        assert len(np.intersect1d(a, b)) == 0
        assert sorted(np.concatenate([a, b]).tolist()) == sorted(full.tolist())
        assert abs(len(a) - 0.6 * len(full)) <= 1 and len(b) >= 1
    with pytest.raises(ConfigError):
        P.split_seen_unseen(parts, 15, 10, np.random.default_rng(0))
