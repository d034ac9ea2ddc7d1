"""Cohort selectors against independent references.

* DivFL / SubTrunc / UnionFL: the selector's picks (through `make_selector`, on memory we
  set by hand) equal a plain-numpy greedy of the objective of Castillo et al. / Balakrishnan
  et al. (facility location on ||g_i - g_j||, raw or normalised, + lam min(b, sum phi(f_j)),
  - mu 1[j in window]) with the same features, losses, lam, b, phi and pool.
* Power-of-Choice (Cho, Wang, Joshi 2020): the candidates are drawn without replacement
  proportionally to n_k; the inclusion frequencies over many keys match the exact inclusion
  probabilities (enumerated by hand, not with the library's sampler) within 5 standard
  errors.
"""

from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import arrays_from_clients, linear_model, make_tiny_data

from fedjax_appeal.aggregate.server import server_optimizer
from fedjax_appeal.core.arrays import FederatedData
from fedjax_appeal.core.config import HParams, RunConfig
from fedjax_appeal.core.round import init_state
from fedjax_appeal.select.selectors import make_selector

N, M = 8, 3


def np_greedy(feats, loss, pool, m, *, normalized, trunc, phi_kind, lam, b, pen,
              drop_norm=False):
    """Plain greedy of W(S) = G(S)/Z + lam min(b, sum phi) - sum pen; ties -> lowest index."""
    f = np.asarray(feats, np.float64)
    n = len(f)
    d = np.sqrt(((f[:, None, :] - f[None, :, :]) ** 2).sum(-1))
    top = 2 * np.linalg.norm(f, axis=1).max() + 1e-12
    if normalized:
        d, big_c = d / top, 1.0
        w = pool / (1.0 if drop_norm else pool.sum())
    else:
        big_c, w = top, pool.astype(np.float64)
    loss = np.maximum(loss, 0.0)
    phi = np.log1p(loss) if phi_kind == "log" else loss
    c, picks, big_phi = np.full(n, big_c), [], 0.0
    for _ in range(m):
        best, bj = -np.inf, None
        for j in range(n):
            if not pool[j] or j in picks:
                continue
            g = np.sum(w * np.maximum(c - d[:, j], 0.0)) - pen[j]
            if trunc:
                g += lam * (min(b, big_phi + phi[j]) - min(b, big_phi))
            if g > best + 1e-9:
                best, bj = g, j
        picks.append(bj)
        c = np.minimum(c, d[:, bj])
        big_phi += phi[bj]
    return picks


def _toy():
    rng = np.random.default_rng(0)
    feats = rng.normal(size=(N, 3)).astype(np.float32)
    loss = rng.uniform(0, 3, N).astype(np.float32)
    pool = np.ones(N, bool)
    pool[5] = False
    return feats, loss, pool


def _select(kind, objective, phi, feats, loss, pool, lam, b, mu=0.0, window=None,
            union_base="divfl"):
    data = make_tiny_data(num_clients=N, dim=3, classes=2, seed=1)
    model = linear_model(3)
    cfg = RunConfig(selector=kind, clients=N, cohort=M, subtrunc_phi=phi,
                    selector_objective=objective, union_window=2, union_base=union_base,
                    local_steps=1)
    hp = HParams(subtrunc_lambda=lam, subtrunc_b=b, union_mu=mu).as_arrays()
    sel = make_selector(model, cfg)
    params, ms = model.init(jax.random.key(0))
    state = init_state(params, ms, server_optimizer("sgd", hp), N)
    mem = sel.init(jax.random.key(1), state, data, hp)._replace(
        features=jnp.asarray(feats), loss=jnp.asarray(loss))
    if window is not None:
        mem = mem._replace(window=jnp.asarray(window, jnp.int32))
    state = state.replace(pool=jnp.asarray(pool), selector=mem)
    idx, valid = jax.jit(sel.select)(jax.random.key(2), state, data, hp)
    assert np.all(np.asarray(valid))
    return np.asarray(idx).tolist()


LAM, B = 0.3, 2.0


@pytest.mark.parametrize("objective", ["raw", "normalized"])
def test_divfl_picks_equal_numpy_greedy(objective):
    feats, loss, pool = _toy()
    ref = np_greedy(feats, loss, pool, M, normalized=objective == "normalized", trunc=False,
                    phi_kind="log", lam=0, b=0, pen=np.zeros(N))
    assert _select("divfl", objective, "log", feats, loss, pool, LAM, B) == ref
    assert 5 not in ref


@pytest.mark.parametrize("phi", ["log", "identity"])
def test_subtrunc_picks_equal_numpy_greedy_both_phi(phi):
    feats, loss, pool = _toy()
    ref = {(o, p): np_greedy(feats, loss, pool, M, normalized=o == "normalized", trunc=True,
                             phi_kind=p, lam=LAM, b=B, pen=np.zeros(N))
           for o in ("raw", "normalized") for p in ("log", "identity")}
    # the toy is chosen so that phi, the 1/N normalisation and the truncated term all matter
    assert ref[("normalized", "log")] != ref[("normalized", "identity")]
    assert ref[("normalized", phi)] != ref[("raw", phi)]
    no_norm = np_greedy(feats, loss, pool, M, normalized=True, trunc=True, phi_kind=phi,
                        lam=LAM, b=B, pen=np.zeros(N), drop_norm=True)
    assert no_norm != ref[("normalized", phi)]
    divfl = np_greedy(feats, loss, pool, M, normalized=True, trunc=False, phi_kind=phi,
                      lam=0, b=0, pen=np.zeros(N))
    assert divfl != ref[("normalized", phi)]
    for objective in ("raw", "normalized"):
        assert _select("subtrunc", objective, phi, feats, loss, pool, LAM, B) == \
            ref[(objective, phi)]


@pytest.mark.parametrize("base", ["divfl", "subtrunc"])
def test_unionfl_penalty_equals_numpy_greedy(base):
    feats, loss, pool = _toy()
    window = np.array([[3, 0, -1], [2, -1, -1]])  # the last u = 2 cohorts
    pen = np.zeros(N)
    pen[[3, 0, 2]] = 0.2
    trunc = base == "subtrunc"
    ref = np_greedy(feats, loss, pool, M, normalized=True, trunc=trunc, phi_kind="log",
                    lam=LAM, b=B, pen=pen)
    free = np_greedy(feats, loss, pool, M, normalized=True, trunc=trunc, phi_kind="log",
                     lam=LAM, b=B, pen=np.zeros(N))
    assert ref != free  # the penalty changes the picks on this toy
    got = _select("unionfl", "normalized", "log", feats, loss, pool, LAM, B, mu=0.2,
                  window=window, union_base=base)
    assert got == ref


# ------------------------------------------------------------------ Power-of-Choice

def inclusion_probabilities(w: np.ndarray, d: int) -> np.ndarray:
    """P(k among d successive draws without replacement, each ∝ w): exact enumeration."""
    p = np.zeros(len(w))
    for seq in itertools.permutations(range(len(w)), d):
        prob, left = 1.0, w.sum()
        for j in seq:
            prob *= w[j] / left
            left -= w[j]
        p[list(seq)] += prob
    return p


def test_power_of_choice_candidates_proportional_to_n():
    sizes = [1, 2, 4, 8, 16]
    rng = np.random.default_rng(0)
    xs = [np.ones((n, 1), np.float32) for n in sizes]
    ys = [np.full(n, rng.normal(), np.float32) for n in sizes]
    arr = arrays_from_clients(xs, ys)
    data = FederatedData(train=arr, test=arr, num_classes=1, name="toy")
    model = linear_model(1)
    d = 2
    cfg = RunConfig(selector="poc", clients=5, cohort=d, poc_d=d)  # cohort = candidates
    hp = HParams().as_arrays()
    sel = make_selector(model, cfg)
    params, ms = model.init(jax.random.key(0))
    state = init_state(params, ms, server_optimizer("sgd", hp), 5)
    trials = 4000
    keys = jax.random.split(jax.random.key(7), trials)
    idx, valid = jax.jit(jax.vmap(lambda k: sel.select(k, state, data, hp)))(keys)
    idx = np.asarray(idx)
    assert np.all(np.asarray(valid))
    assert all(len(set(r)) == d for r in idx.tolist())
    freq = np.array([(idx == k).any(axis=1).mean() for k in range(5)])
    p = inclusion_probabilities(np.array(sizes, np.float64), d)
    np.testing.assert_allclose(p.sum(), d)
    se = np.sqrt(p * (1 - p) / trials)
    # tolerance: 5 standard errors per client (a false alarm has probability < 3e-6 each)
    assert np.all(np.abs(freq - p) <= 5 * se), (freq, p)


def test_power_of_choice_keeps_highest_losses():
    """With d candidates and m < d, the cohort is the m candidates of largest train loss."""
    sizes = [3, 3, 3, 3, 3, 3]
    targets = [0.1, 2.0, 0.5, 3.0, 1.0, 0.2]  # model 0 -> loss 0.5 y^2
    xs = [np.ones((n, 1), np.float32) for n in sizes]
    ys = [np.full(n, t, np.float32) for n, t in zip(sizes, targets, strict=True)]
    arr = arrays_from_clients(xs, ys)
    data = FederatedData(train=arr, test=arr, num_classes=1, name="toy")
    model = linear_model(1)
    cfg = RunConfig(selector="poc", clients=6, cohort=2, poc_d=6)  # every client a candidate
    hp = HParams().as_arrays()
    sel = make_selector(model, cfg)
    params, ms = model.init(jax.random.key(0))
    params = jax.tree.map(jnp.zeros_like, params)
    state = init_state(params, ms, server_optimizer("sgd", hp), 6)
    idx, _ = sel.select(jax.random.key(3), state, data, hp)
    assert sorted(np.asarray(idx).tolist()) == [1, 3]


@pytest.mark.parametrize("mode", ["plain", "lazy", "stochastic-r=N", "feature-oracle"])
def test_facility_location_greedy_equals_numpy_greedy(mode):
    """The public greedy entry points (every scoring path) against the numpy greedy."""
    from fedjax_appeal.select import submodular

    rng = np.random.default_rng(4)
    feats = rng.normal(size=(12, 4)).astype(np.float32)
    k = 5
    ref = np_greedy(feats, np.zeros(12), np.ones(12, bool), k, normalized=False, trunc=False,
                    phi_kind="log", lam=0, b=0, pen=np.zeros(12))
    d = np.sqrt(((feats[:, None] - feats[None]) ** 2).sum(-1)).astype(np.float32)
    if mode == "plain":
        got = submodular.facility_location(jnp.asarray(d), k, lazy=False)
    elif mode == "lazy":
        got = submodular.facility_location(jnp.asarray(d), k, lazy=True)
    elif mode == "stochastic-r=N":
        got = submodular.stochastic_facility_location(jax.random.key(0), jnp.asarray(d), k, 12)
    else:
        got = submodular.greedy(submodular.feature_oracle(jnp.asarray(feats), block=5), k,
                                c0=float(d.max()) * 2).idx
    assert np.asarray(got).tolist() == ref
