"""Tests of `data/generated.py`: generated federations (imbalanced, equal-size, flipped copies)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_appeal.core.config import RunConfig


def _toy_pool(per_class=300, classes=4):
    from fedjax_appeal.data.sources import Dataset

    n = per_class * classes
    # x holds the row id, so every row of every split can be traced back
    return Dataset("toy", np.arange(n, dtype=np.float32)[:, None],
                   np.repeat(np.arange(classes), per_class), classes, scale=1.0)


def test_imbalanced_federation_counts_and_balanced_test():
    from fedjax_appeal.data.generated import imbalanced_federation
    from fedjax_appeal.data.heterogeneity import imbalance_counts
    from fedjax_appeal.data.sources import Dataset

    rng = np.random.default_rng(0)
    y = np.repeat(np.arange(4), 200)
    ds = Dataset("toy", rng.integers(0, 255, (800, 2, 2)).astype(np.uint8), y, 4)
    cfg = RunConfig(imbalance_ratios="1.0x1,0.1x1", imbalance_nmax=25,
                    imbalance_test_per_class=5, clients=4, unseen_clients=2,
                    label_flip_fraction=0.5, flip_ratio=1.0)
    fd = imbalanced_federation(ds, cfg, np.random.default_rng(3))
    ratio = np.asarray(fd.info["imbalance_ratio"])
    for k in range(4):
        _, yk = fd.train.client_numpy(k)
        _, yt = fd.test.client_numpy(k)
        counts = np.bincount(yk, minlength=4)
        expect = imbalance_counts(25, float(ratio[k]), 4)
        if bool(fd.info["flipped"][k]):  # labels deranged: same multiset of counts
            assert sorted(counts.tolist()) == sorted(expect.tolist())
            assert ratio[k] == 1.0 or not np.array_equal(counts, expect)
        else:
            assert counts.tolist() == expect.tolist()
        assert sorted(np.bincount(yt, minlength=4).tolist()) == [5, 5, 5, 5]
    assert int(np.asarray(fd.info["flipped"]).sum()) == 2
    assert np.asarray(fd.info["imbalanced"]).tolist() == (ratio < 1).tolist()


@pytest.mark.parametrize("major", ["shared", "random"])
def test_equal_size_federation_sizes_shares_majors(major):
    from fedjax_appeal.data.generated import imbalanced_federation
    from fedjax_appeal.data.heterogeneity import equal_size_counts

    ds = _toy_pool()
    cfg = RunConfig(imbalance_ratios="1.0x1,0.1x1,0.01x2", imbalance_size=40,
                    imbalance_major=major, imbalance_test_per_class=2,
                    global_test_per_class=10, clients=120, unseen_clients=0)
    fd = imbalanced_federation(ds, cfg, np.random.default_rng(0))
    ratio = np.asarray(fd.info["imbalance_ratio"])
    majors = np.asarray(fd.info["major"])
    assert np.asarray(fd.train.count).tolist() == [40] * 120
    used = set()
    for k in range(120):
        xk, yk = fd.train.client_numpy(k)
        counts = np.bincount(yk, minlength=4)
        by_rank = equal_size_counts(40, float(ratio[k]), 4)
        assert sorted(counts.tolist(), reverse=True) == by_rank.tolist()
        if ratio[k] < 1:
            assert counts.argmax() == majors[k]
        xt, yt = fd.test.client_numpy(k)
        assert np.bincount(yt, minlength=4).tolist() == [2, 2, 2, 2]
        used |= set(xt[:, 0].astype(int).tolist()) | set(xk[:, 0].astype(int).tolist())
    if major == "shared":
        assert set(majors.tolist()) == {0}
    else:
        assert set(majors.tolist()) == {0, 1, 2, 3}
    xg, yg = fd.global_test.client_numpy(0)
    assert np.bincount(yg, minlength=4).tolist() == [10] * 4
    assert not used & set(xg[:, 0].astype(int).tolist())  # held out from every client


@pytest.mark.slow
def test_flipped_copies_and_bernoulli_counts():
    from fedjax_appeal.data.generated import imbalanced_federation
    from fedjax_appeal.select.selection import flip_cohort

    ds = _toy_pool()
    cfg = RunConfig(imbalance_ratios="1.0", imbalance_size=20, imbalance_test_per_class=2,
                    clients=10, unseen_clients=0, label_flip_fraction=1 / 3,
                    flip_protocol="bernoulli", flip_ratio=1.0)
    fd = imbalanced_federation(ds, cfg, np.random.default_rng(0))
    assert fd.num_clients == 20
    assert np.asarray(fd.info["flipped"]).tolist() == [False] * 10 + [True] * 10
    for k in range(10):
        x0, y0 = fd.train.client_numpy(k)
        x1, y1 = fd.train.client_numpy(10 + k)
        np.testing.assert_array_equal(x0, x1)  # same rows ...
        assert np.all(y0 != y1)  # ... every label wrong (flip ratio 1)
        assert np.all(y0 == x0[:, 0].astype(int) // 300)  # clean copy keeps true labels
    pool = jnp.ones(20, bool)
    keys = jax.random.split(jax.random.key(0), 3000)
    m, p = 6, 1 / 3
    idx, valid = jax.vmap(lambda k: flip_cohort(k, pool, m, p, "bernoulli"))(keys)
    idx = np.asarray(idx)
    assert np.asarray(valid).all()
    assert all(len(set((row % 10).tolist())) == m for row in idx[:200])  # distinct clients
    n_flip = (idx >= 10).sum(1)
    # mean flipped share: p within 4 standard errors of Binomial(3000 x 6, 1/3)
    assert abs(n_flip.mean() / m - p) < 4 * np.sqrt(p * (1 - p) / (m * 3000))
    # per-round counts follow Binomial(6, 1/3): 0..6 -> 64, 192, 240, 160, 60, 12, 1 / 729
    pmf = np.array([64, 192, 240, 160, 60, 12, 1]) / 729
    freq = np.bincount(n_flip, minlength=7) / 3000
    np.testing.assert_allclose(freq, pmf, atol=0.03)
    fixed, _ = jax.vmap(lambda k: flip_cohort(k, pool, m, p, "fixed"))(keys[:200])
    assert ((np.asarray(fixed) >= 10).sum(1) == 2).all()
