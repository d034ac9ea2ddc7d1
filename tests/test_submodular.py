"""Tests of `select/submodular.py`: greedy against numpy and brute force, lazy and stochastic
greedy, masks."""

from __future__ import annotations

import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_appeal.select import submodular as sm
from fedjax_appeal.select.selection import facility_location, stochastic_facility_location


def ref_greedy(d, k, avail=None, c0=None, phi=None, lam=0.0, b=np.inf, pen=None):
    """Plain sequential greedy in float64 (ties: lowest index)."""
    d = np.asarray(d, np.float64)
    n = d.shape[0]
    avail = np.ones(n, bool) if avail is None else np.asarray(avail)
    c = np.full(n, d.max() if c0 is None else c0)
    w = avail.astype(np.float64)
    phi = np.zeros(n) if phi is None else np.asarray(phi, np.float64)
    pen = np.zeros(n) if pen is None else np.asarray(pen, np.float64)
    picked, big_phi = [], 0.0
    for _ in range(k):
        best, best_g = None, -np.inf
        for j in range(n):
            if j in picked or not avail[j]:
                continue
            g = (np.sum(w * np.maximum(c - d[:, j], 0.0))
                 + lam * (min(b, big_phi + phi[j]) - min(b, big_phi)) - pen[j])
            if g > best_g:
                best, best_g = j, g
        if best is None:
            break
        picked.append(best)
        c = np.minimum(c, d[:, best])
        big_phi += phi[best]
    return picked


def value(d, s, c0=None, phi=None, lam=0.0, b=np.inf, pen=None):
    """W(S) = sum_i (C - min_{j in S} D_ij) + lam min(b, sum phi) - sum pen."""
    d = np.asarray(d, np.float64)
    c0 = d.max() if c0 is None else c0
    s = list(s)
    fl = np.sum(c0 - (d[:, s].min(axis=1) if s else np.full(d.shape[0], c0)))
    t = lam * min(b, float(np.sum(np.asarray(phi)[s]))) if phi is not None and s else 0.0
    p = float(np.sum(np.asarray(pen)[s])) if pen is not None and s else 0.0
    return fl + t - p


def rand_dist(rng, n, dim=3):
    x = rng.normal(size=(n, dim))
    return np.linalg.norm(x[:, None] - x[None], axis=-1).astype(np.float32), x


def _counting_oracle(d, log):
    """dense_oracle whose column reads append their batch size to `log` (also under jit)."""
    base = sm.dense_oracle(d)

    def cols(idx):
        jax.debug.callback(lambda i: log.append(int(np.asarray(i).size)), idx)
        return base.cols(idx)

    return sm.DistanceOracle(base.n, cols, base.gains)


@pytest.mark.parametrize("seed", range(4))
def test_greedy_matches_numpy_reference(seed):
    rng = np.random.default_rng(seed)
    n, k = int(rng.integers(6, 30)), int(rng.integers(1, 6))
    d, _ = rand_dist(rng, n)
    np.testing.assert_array_equal(np.asarray(facility_location(d, k)), ref_greedy(d, k))
    # SubTrunc + a modular penalty + availability, jitted
    phi = np.log1p(rng.uniform(0, 3, n)).astype(np.float32)
    pen = rng.uniform(0, 0.5, n).astype(np.float32) * (rng.uniform(size=n) < 0.5)
    avail = rng.uniform(size=n) < 0.8
    avail[:k] = True
    c0 = float(d.max())
    fn = jax.jit(lambda dd, a, ph, pe: sm.greedy(sm.dense_oracle(dd), k, available=a, c0=c0,
                                                 phi=ph, lam=0.7, b=1.1, penalty=pe))
    res = fn(d, avail, phi, pen)
    ref = ref_greedy(d, k, avail, c0, phi, 0.7, 1.1, pen)
    np.testing.assert_array_equal(np.asarray(res.idx), ref)
    assert bool(np.all(res.valid))


@pytest.mark.parametrize("seed", range(4))
def test_lazy_greedy_equals_plain_greedy_and_reference(seed):
    rng = np.random.default_rng(50 + seed)
    n, k = int(rng.integers(20, 80)), int(rng.integers(2, 12))
    d, _ = rand_dist(rng, n)
    c0 = float(d.max())
    phi = np.log1p(rng.uniform(0, 3, n)).astype(np.float32)
    pen = rng.uniform(0, 0.5, n).astype(np.float32) * (rng.uniform(size=n) < 0.5)
    avail = rng.uniform(size=n) < 0.7
    for kw in ({}, {"available": avail, "phi": phi, "lam": 0.7, "b": 1.1, "penalty": pen}):
        plain = sm.greedy(sm.dense_oracle(d), k, c0=c0, **kw)
        lazy = jax.jit(lambda dd, kw=kw: sm.greedy(sm.dense_oracle(dd), k, c0=c0, lazy=True,
                                                   **kw))(d)
        np.testing.assert_array_equal(np.asarray(lazy.idx), np.asarray(plain.idx))
        np.testing.assert_allclose(np.asarray(lazy.gains), np.asarray(plain.gains), rtol=1e-5,
                                   atol=1e-5)
        ref = ref_greedy(d, k, kw.get("available"), c0, kw.get("phi"), kw.get("lam", 0.0),
                         kw.get("b", np.inf), kw.get("penalty"))
        np.testing.assert_array_equal(np.asarray(lazy.idx)[:len(ref)], ref)
    # fewer available than k: the surplus slots match the plain greedy's (invalid, distinct)
    few = np.zeros(n, bool)
    few[rng.choice(n, 3, replace=False)] = True
    plain = sm.greedy(sm.dense_oracle(d), 6, available=few, c0=c0)
    lazy = sm.greedy(sm.dense_oracle(d), 6, available=few, c0=c0, lazy=True)
    np.testing.assert_array_equal(np.asarray(lazy.idx), np.asarray(plain.idx))
    np.testing.assert_array_equal(np.asarray(lazy.valid), np.asarray(plain.valid))
    assert np.asarray(facility_location(d, k, lazy=False)).tolist() == ref_greedy(d, k)
    with pytest.raises(ValueError, match="lazy"):
        sm.greedy(sm.dense_oracle(d), 2, key=jax.random.key(0), r=3, lazy=True)


@pytest.mark.parametrize("seed", range(4))
def test_lazy_greedy_small_rescoring_batch_exercises_the_bounds(seed):
    # with lazy_batch = 1..3 (<< N) a step must re-score stale bounds batch by batch until the
    # largest bound is fresh; the picks must still be the plain greedy's and the reference's
    rng = np.random.default_rng(300 + seed)
    n, k = 40, 8
    d, _ = rand_dist(rng, n, dim=2)
    c0 = float(d.max())
    phi = np.log1p(rng.uniform(0, 3, n)).astype(np.float32)
    pen = rng.uniform(0, 0.5, n).astype(np.float32) * (rng.uniform(size=n) < 0.5)
    avail = rng.uniform(size=n) < 0.8
    for kw in ({}, {"available": avail, "phi": phi, "lam": 0.7, "b": 1.1, "penalty": pen}):
        ref = ref_greedy(d, k, kw.get("available"), c0, kw.get("phi"), kw.get("lam", 0.0),
                         kw.get("b", np.inf), kw.get("penalty"))
        plain = np.asarray(sm.greedy(sm.dense_oracle(d), k, c0=c0, **kw).idx)
        np.testing.assert_array_equal(plain, ref)
        for nb in (1, 2, 3):
            log: list[int] = []
            res = jax.jit(lambda dd, kw=kw, nb=nb, log=log: sm.greedy(
                _counting_oracle(dd, log), k, c0=c0, lazy=True, lazy_batch=nb, **kw))(d)
            np.testing.assert_array_equal(np.asarray(res.idx), ref)
            jax.effects_barrier()
            # the k commits read one column each; re-scoring reads batches of nb columns
            assert log.count(1) >= k
            rescored = sum(log) - k
            batches = (len(log) - k) if nb > 1 else rescored
            assert rescored % nb == 0
            eligible = int(np.sum(kw.get("available", np.ones(n, bool))))
            # lazy: far fewer re-scored clients than the plain greedy's (k-1) full sweeps ...
            assert rescored < (k - 1) * eligible // 2
            # ... but more batches than one per step: the stale bounds were really consulted
            assert batches > k - 1


@pytest.mark.parametrize("seed", range(6))
def test_greedy_within_1_minus_1_over_e_of_brute_force(seed):
    rng = np.random.default_rng(100 + seed)
    n, k = int(rng.integers(4, 9)), int(rng.integers(1, 4))
    d, _ = rand_dist(rng, n)
    phi = np.log1p(rng.uniform(0, 2, n)).astype(np.float32)
    for kw in ({}, {"phi": phi, "lam": 0.5, "b": 1.1}):
        c0 = float(d.max())
        got = sm.greedy(sm.dense_oracle(d), k, c0=c0, **kw).idx
        opt = max(value(d, s, c0, **kw) for s in itertools.combinations(range(n), k))
        assert value(d, np.asarray(got), c0, **kw) >= (1 - 1 / math.e) * opt - 1e-5


def test_greedy_optimal_on_separated_clusters():
    # three tight, far-apart clusters of different sizes: any optimum takes one per cluster
    # and the greedy does too (first pick: the centre of the largest cluster, ...).
    rng = np.random.default_rng(3)
    centers = np.array([[0.0, 0.0], [100.0, 0.0], [0.0, 100.0]])
    x = np.concatenate([c + rng.normal(scale=0.1, size=(m, 2))
                        for c, m in zip(centers, (3, 3, 2), strict=True)])
    d = np.linalg.norm(x[:, None] - x[None], axis=-1).astype(np.float32)
    phi = np.log1p(rng.uniform(0, 1, len(x))).astype(np.float32)
    for kw in ({}, {"phi": phi, "lam": 0.5, "b": 1.1}):
        c0 = float(d.max())
        got = np.asarray(sm.greedy(sm.dense_oracle(d), 3, c0=c0, **kw).idx)
        opt = max(value(d, s, c0, **kw) for s in itertools.combinations(range(len(x)), 3))
        assert value(d, got, c0, **kw) == pytest.approx(opt, rel=1e-6)
        assert sorted(np.searchsorted([3, 6], got, side="right")) == [0, 1, 2]


def test_objective_monotone_and_submodular_on_nested_sets():
    rng = np.random.default_rng(7)
    d, _ = rand_dist(rng, 10)
    phi = np.log1p(rng.uniform(0, 2, 10))
    for _ in range(50):
        perm = rng.permutation(10)
        a_len = int(rng.integers(0, 4))
        b_len = int(rng.integers(a_len, 9))
        a, bset, x = list(perm[:a_len]), list(perm[:b_len]), int(perm[9])
        for kw in ({}, {"phi": phi, "lam": 0.8, "b": 1.1}):
            ga = value(d, a + [x], **kw) - value(d, a, **kw)
            gb = value(d, bset + [x], **kw) - value(d, bset, **kw)
            assert ga >= gb - 1e-9 and gb >= -1e-9


def test_masks_no_unavailable_no_duplicates_and_surplus_slots():
    rng = np.random.default_rng(1)
    d, x = rand_dist(rng, 20)
    avail = np.zeros(20, bool)
    avail[[1, 4, 5, 9, 13, 17, 18]] = True
    c0 = float(d.max())
    for r in (0, 3):
        # k = 5 of 7 available; k = 10: the surplus slots are distinct and marked invalid
        fn = jax.jit(lambda dd, a, key, r=r: (
            sm.greedy(sm.dense_oracle(dd), 5, available=a, c0=c0, key=key, r=r),
            sm.greedy(sm.dense_oracle(dd), 10, available=a, c0=c0, key=key, r=r)))
        for s in range(2):
            five, ten = fn(d, avail, jax.random.key(s))
            idx = np.asarray(five.idx)
            assert len(set(idx.tolist())) == 5 and avail[idx].all() and five.valid.all()
            idx, valid = np.asarray(ten.idx), np.asarray(ten.valid)
            assert len(set(idx.tolist())) == 10
            assert valid.sum() == 7 and set(idx[valid]) == set(np.flatnonzero(avail))
            assert not avail[idx[~valid]].any()
    # not jitted
    res = sm.greedy(sm.dense_oracle(d), 5, available=avail, c0=c0)
    assert avail[np.asarray(res.idx)].all() and len(set(np.asarray(res.idx).tolist())) == 5


def test_blocked_distances_equal_dense():
    rng = np.random.default_rng(2)
    f = rng.normal(size=(37, 6)).astype(np.float32)
    ref = np.linalg.norm(f[:, None].astype(np.float64) - f[None], axis=-1)
    for block in (0, 5, 16, 37):
        np.testing.assert_allclose(np.asarray(sm.pairwise_distances(f, 1.0, block)), ref,
                                   atol=2e-4)
    c = jnp.asarray(rng.uniform(0, 5, 37).astype(np.float32))
    w = jnp.ones(37)
    dense = sm.dense_oracle(sm.pairwise_distances(f)).gains(c, w)
    for block in (4, 10, 64):
        np.testing.assert_allclose(np.asarray(sm.feature_oracle(f, 1.0, block).gains(c, w)),
                                   np.asarray(dense), rtol=1e-5, atol=1e-4)
    scale = 2 * float(np.linalg.norm(f, axis=1).max())
    a = sm.greedy(sm.feature_oracle(f, scale, 8), 6, c0=1.0).idx
    b = sm.greedy(sm.dense_oracle(sm.pairwise_distances(f, scale)), 6, c0=1.0).idx
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    np.testing.assert_array_equal(np.asarray(a), ref_greedy(ref / scale, 6, c0=1.0))


def test_stochastic_greedy_with_all_candidates_equals_exact():
    rng = np.random.default_rng(4)
    d, x = rand_dist(rng, 25)
    exact = np.asarray(facility_location(d, 6))
    for s in range(3):
        got = jax.jit(stochastic_facility_location, static_argnums=(2, 3))(
            jax.random.key(s), d, 6, 25)
        np.testing.assert_array_equal(np.asarray(got), exact)
    got = sm.stochastic_facility_location_features(jax.random.key(0), x.astype(np.float32), 6,
                                                   25)
    np.testing.assert_array_equal(np.asarray(got), exact)
    # r < N: the picks are distinct and the first pick is the best of its r candidates
    few = np.asarray(stochastic_facility_location(jax.random.key(9), d, 6, 4))
    assert len(set(few.tolist())) == 6


def test_union_penalty_avoids_window_clients():
    rng = np.random.default_rng(5)
    d, _ = rand_dist(rng, 12)
    plain = np.asarray(facility_location(d, 4))
    window = np.zeros(12, np.float32)
    window[plain[:2]] = 1.0  # the two best clients were selected recently
    for mu in (1e3, 1e6):
        got = np.asarray(sm.greedy(sm.dense_oracle(d), 4, c0=float(d.max()),
                                   penalty=mu * window).idx)
        assert not window[got].any()
    # mu = 0: no effect
    got = np.asarray(sm.greedy(sm.dense_oracle(d), 4, c0=float(d.max()),
                               penalty=0.0 * window).idx)
    np.testing.assert_array_equal(got, plain)
