"""Submodular selection: greedy vs numpy reference and brute force, masks, blocked distances,
stochastic greedy, UnionFL penalty, Power-of-Choice, no retrace, dissimilarity metrics."""

from __future__ import annotations

import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import make_tiny_data

from fedjax_appeal.algorithms import build
from fedjax_appeal.core.config import HParams, RunConfig
from fedjax_appeal.evaluate.metrics import dissimilarity
from fedjax_appeal.local.client import client_loss
from fedjax_appeal.run.simulate import simulate
from fedjax_appeal.select import submodular as sm
from fedjax_appeal.select.selection import facility_location, stochastic_facility_location, weighted
from fedjax_appeal.select.selectors import client_grad, flatten, make_selector

# ----------------------------------------------------------------------------- references


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


# ----------------------------------------------------------------------------- greedy core


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


def _counting_oracle(d, log):
    """dense_oracle whose column reads append their batch size to `log` (also under jit)."""
    base = sm.dense_oracle(d)

    def cols(idx):
        jax.debug.callback(lambda i: log.append(int(np.asarray(i).size)), idx)
        return base.cols(idx)

    return sm.DistanceOracle(base.n, cols, base.gains)


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


# ----------------------------------------------------------------------------- selectors


def _cfg(**kw):
    base = dict(clients=10, unseen_clients=0, cohort=3, local_steps=2, batch_size=4, rounds=4,
                eval_every=2)
    base.update(kw)
    return RunConfig(**base)


@pytest.fixture(scope="module")
def data10():
    return make_tiny_data(num_clients=10, seed=3)


@pytest.mark.parametrize("name,kw", [("random", {}), ("poc", {}), ("divfl", {}),
                                     ("divfl", {"greedy_candidates": 4}),
                                     ("subtrunc", {"feature_dim": 6}),
                                     ("unionfl", {"selector_features": "delta"})])
def test_every_selector_returns_distinct_available_clients(name, kw, data10, tiny_model):
    cfg = _cfg(selector=name, **kw)
    hp = HParams().as_arrays()
    alg = build("fedavg", tiny_model, cfg)
    state = alg.init(jax.random.key(0), data10, hp)
    pool = np.ones(10, bool)
    pool[[0, 2, 7]] = False
    state = state.replace(pool=jnp.asarray(pool))
    sel = make_selector(tiny_model, cfg)
    for fn, keys in ((sel.select, (0,)), (jax.jit(sel.select), (1, 2))):
        for s in keys:
            idx, valid = fn(jax.random.key(s), state, data10, hp)
            idx = np.asarray(idx)
            assert idx.shape == (3,) and len(set(idx.tolist())) == 3
            assert pool[idx].all() and np.asarray(valid).all()


def test_unionfl_selector_avoids_window(data10, tiny_model):
    cfg = _cfg(selector="unionfl", union_window=2)
    hp = HParams(union_mu=1e4).as_arrays()
    alg = build("fedavg", tiny_model, cfg)
    state = alg.init(jax.random.key(0), data10, hp)
    sel = make_selector(tiny_model, cfg)
    select = jax.jit(sel.select)
    first = np.asarray(select(jax.random.key(0), state, data10, hp)[0])
    mem = dict(state.extra["selector"])
    mem["window"] = jnp.asarray([first.tolist(), [-1, -1, -1]], jnp.int32)
    second = np.asarray(select(jax.random.key(0), state.replace(
        extra={**state.extra, "selector": mem}), data10, hp)[0])
    assert not set(second.tolist()) & set(first.tolist())


def test_power_of_choice_picks_top_loss_candidates(data10, tiny_model):
    cfg = _cfg(selector="poc", poc_d=6)
    hp = HParams().as_arrays()
    alg = build("fedavg", tiny_model, cfg)
    state = alg.init(jax.random.key(0), data10, hp)
    sel = make_selector(tiny_model, cfg)
    key = jax.random.key(11)
    idx, valid = sel.select(key, state, data10, hp)
    cand, _ = weighted(key, state.pool, 6, data10.train.count.astype(jnp.float32))
    losses = {int(k): float(client_loss(tiny_model, state.params, state.model_state,
                                        data10.train, k)[0]) for k in np.asarray(cand)}
    top = sorted(losses, key=lambda k: -losses[k])[:3]
    assert sorted(np.asarray(idx).tolist()) == sorted(top)


def test_features_are_full_gradients_refreshed_for_the_cohort(data10, tiny_model):
    cfg = _cfg(selector="unionfl", union_window=2)
    hp = HParams().as_arrays()
    alg = build("fedavg", tiny_model, cfg)
    state = alg.init(jax.random.key(0), data10, hp)
    f0 = np.asarray(state.extra["selector"]["features"])
    # client 4's feature: its full-data gradient (one batch of all its rows)
    x, y = data10.train.client_numpy(4)
    g = jax.grad(lambda p: tiny_model.loss(p, {}, jnp.asarray(x), jnp.asarray(y),
                                           train=False)[0])(state.params)
    np.testing.assert_allclose(f0[4], np.asarray(flatten(g)), rtol=1e-4, atol=1e-6)
    new, met = jax.jit(alg.round)(state, data10, jax.random.key(1), hp)
    f1 = np.asarray(new.extra["selector"]["features"])
    cohort = np.asarray(met["cohort_idx"])
    for k in range(10):  # the cohort's features were recomputed at the received model
        if k in cohort:
            _, gk = client_grad(tiny_model, state.params, {}, data10.train, k)
            np.testing.assert_allclose(f1[k], np.asarray(flatten(gk)), rtol=1e-4, atol=1e-6)
        else:
            np.testing.assert_array_equal(f1[k], f0[k])
    # the UnionFL window now holds this cohort, then the empty row
    np.testing.assert_array_equal(np.asarray(new.extra["selector"]["window"]),
                                  [cohort.tolist(), [-1, -1, -1]])


def test_selector_in_jitted_simulation_does_not_retrace(data10, tiny_model, monkeypatch):
    traces = []
    orig = sm.greedy

    def counting(*a, **k):
        traces.append(1)
        return orig(*a, **k)

    monkeypatch.setattr(sm, "greedy", counting)
    cfg = _cfg(selector="subtrunc", rounds=4, eval_every=2, feature_refresh=3)
    alg = build("fedavg", tiny_model, cfg)
    sim = simulate(alg, data10, HParams(), jax.random.key(0), rounds=4, eval_every=2)
    assert len(traces) == 1
    assert np.asarray(sim.round_metrics["cohort_idx"]).shape == (4, 3)
    assert int(np.sum(np.asarray(sim.final_state.participation))) == 12
    h = sim.history[-1]
    assert {"client_dissimilarity", "client_dissimilarity_range",
            "client_dissimilarity_mad"} <= set(h)


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


def test_raw_objective_picks_match_reference_on_unscaled_distances(data10, tiny_model):
    # paper-literal objective: G(S) = sum_i (C - min_j ||g_i - g_j||) on raw gradients, plus
    # lam * min(b, sum ln(1 + f_j)) and the UnionFL penalty, against the float64 reference
    hp = HParams(subtrunc_lambda=0.8, subtrunc_b=0.9, union_mu=0.05).as_arrays()
    for name in ("divfl", "subtrunc", "unionfl"):
        cfg = _cfg(selector=name, selector_objective="raw", union_window=1)
        alg = build("fedavg", tiny_model, cfg)
        state = alg.init(jax.random.key(0), data10, hp)
        mem = dict(state.extra["selector"])
        win = np.full(10, False)
        if name == "unionfl":
            mem["window"] = jnp.asarray([[1, 4, 6]], jnp.int32)
            win[[1, 4, 6]] = True
            state = state.replace(extra={**state.extra, "selector": mem})
        f = np.asarray(mem["features"], np.float64)
        d = np.linalg.norm(f[:, None] - f[None], axis=-1)
        c0 = 2 * np.linalg.norm(f, axis=1).max()
        phi = np.log1p(np.asarray(mem["loss"], np.float64)) if name == "subtrunc" else None
        ref = ref_greedy(d, 3, None, c0, phi, 0.8 if phi is not None else 0.0, 0.9,
                         0.05 * win if name == "unionfl" else None)
        idx, _ = make_selector(tiny_model, cfg).select(jax.random.key(0), state, data10, hp)
        assert np.asarray(idx).tolist() == ref
        if name == "divfl":  # a positive rescaling: normalized DivFL picks the same clients
            ncfg = cfg.replace(selector_objective="normalized")
            nidx, _ = make_selector(tiny_model, ncfg).select(jax.random.key(0), state, data10,
                                                             hp)
            assert np.asarray(nidx).tolist() == ref


def test_feature_refresh_1_recomputes_every_client_at_the_new_model(data10, tiny_model):
    cfg = _cfg(selector="subtrunc", feature_refresh=1)
    hp = HParams().as_arrays()
    alg = build("fedavg", tiny_model, cfg)
    state = alg.init(jax.random.key(0), data10, hp)
    new, _ = jax.jit(alg.round)(state, data10, jax.random.key(1), hp)
    mem = new.extra["selector"]
    assert not np.allclose(np.asarray(mem["features"]),
                           np.asarray(state.extra["selector"]["features"]))
    for k in range(10):  # everyone's loss and full gradient at the model after the round
        loss, g = client_grad(tiny_model, new.params, new.model_state, data10.train, k)
        np.testing.assert_allclose(np.asarray(mem["features"][k]), np.asarray(flatten(g)),
                                   rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(float(mem["loss"][k]), float(loss), rtol=1e-5)


def test_scale_helpers_candidates_jl_dim_cached_norms_and_row_projection():
    # r = ceil((N / k) ln(1 / eps)), clipped to N; JL dimension of Dasgupta-Gupta
    assert sm.stochastic_candidates(10_000, 100, 0.1) == math.ceil(100 * math.log(10))
    assert sm.stochastic_candidates(100, 10, 1e-9) == 100
    assert sm.jl_dim(10_000, 0.3) == math.ceil(4 * math.log(1e4) / (0.045 - 0.009))
    with pytest.raises(ValueError):
        sm.stochastic_candidates(10, 2, 1.0)
    rng = np.random.default_rng(7)
    f = rng.normal(size=(50, 9)).astype(np.float32)
    ref = np.linalg.norm(f[:, None].astype(np.float64) - f[None], axis=-1)
    idx = jnp.asarray([3, 0, 41])
    for cache in (True, False):
        got = np.asarray(sm.feature_oracle(f, 2.0, cache_norms=cache).cols(idx))
        np.testing.assert_allclose(got, ref[:, [3, 0, 41]] / 2.0, rtol=1e-4, atol=1e-4)
    # the chunked row projection uses the same Gaussian matrix as the per-vector one
    from fedjax_appeal.select.selectors import project, project_rows

    x = rng.normal(size=(4, 300)).astype(np.float32)
    rows = np.asarray(project_rows(jnp.asarray(x), 16, block=128))
    for i in range(4):
        np.testing.assert_allclose(rows[i], np.asarray(project(jnp.asarray(x[i]), 16, 128)),
                                   rtol=1e-4, atol=1e-4)
    # and, with dim large, it roughly keeps distances (JL): within 30% at dim 2048 here
    big = np.asarray(project_rows(jnp.asarray(x), 2048, block=128))
    for i, j in ((0, 1), (2, 3)):
        ratio = np.linalg.norm(big[i] - big[j]) / np.linalg.norm(x[i] - x[j])
        assert 0.7 < ratio < 1.3


def test_greedy_epsilon_sets_the_candidate_count(data10, tiny_model, monkeypatch):
    seen = []
    orig = sm.greedy

    def spy(*a, **k):
        seen.append(k.get("r"))
        return orig(*a, **k)

    monkeypatch.setattr(sm, "greedy", spy)
    cfg = _cfg(selector="divfl", greedy_epsilon=0.5)  # ceil((10 / 3) ln 2) = 3
    hp = HParams().as_arrays()
    alg = build("fedavg", tiny_model, cfg)
    state = alg.init(jax.random.key(0), data10, hp)
    make_selector(tiny_model, cfg).select(jax.random.key(0), state, data10, hp)
    assert seen == [math.ceil(10 / 3 * math.log(2))]


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
