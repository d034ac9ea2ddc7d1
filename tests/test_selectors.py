"""Tests of `select/selectors.py`: Power-of-Choice, DivFL, SubTrunc, UnionFL selectors in a
round."""

from __future__ import annotations

import math

import jax
import jax.extend
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import make_tiny_data
from test_submodular import ref_greedy

from fedjax_appeal.algorithms import build
from fedjax_appeal.core.config import HParams, RunConfig
from fedjax_appeal.local.client import client_loss
from fedjax_appeal.run.simulate import simulate
from fedjax_appeal.select import submodular as sm
from fedjax_appeal.select.selection import weighted
from fedjax_appeal.select.selectors import (
    client_grad,
    flatten,
    make_selector,
    tail_class,
    tail_sizes,
)


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
    mem = state.selector._replace(window=jnp.asarray([first.tolist(), [-1, -1, -1]], jnp.int32))
    second = np.asarray(select(jax.random.key(0), state.replace(selector=mem), data10, hp)[0])
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
    f0 = np.asarray(state.selector.features)
    # client 4's feature: its full-data gradient (one batch of all its rows)
    x, y = data10.train.client_numpy(4)
    g = jax.grad(lambda p: tiny_model.loss(p, {}, jnp.asarray(x), jnp.asarray(y),
                                           train=False)[0])(state.params)
    np.testing.assert_allclose(f0[4], np.asarray(flatten(g)), rtol=1e-4, atol=1e-6)
    new, met = jax.jit(alg.round)(state, data10, jax.random.key(1), hp)
    f1 = np.asarray(new.selector.features)
    cohort = np.asarray(met["cohort_idx"])
    for k in range(10):  # the cohort's features were recomputed at the received model
        if k in cohort:
            _, gk = client_grad(tiny_model, state.params, {}, data10.train, k)
            np.testing.assert_allclose(f1[k], np.asarray(flatten(gk)), rtol=1e-4, atol=1e-6)
        else:
            np.testing.assert_array_equal(f1[k], f0[k])
    # the UnionFL window now holds this cohort, then the empty row
    np.testing.assert_array_equal(np.asarray(new.selector.window),
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


def test_raw_objective_picks_match_reference_on_unscaled_distances(data10, tiny_model):
    # paper-literal objective: G(S) = sum_i (C - min_j ||g_i - g_j||) on raw gradients, plus
    # lam * min(b, sum ln(1 + f_j)) and the UnionFL penalty, against the float64 reference
    hp = HParams(subtrunc_lambda=0.8, subtrunc_b=0.9, union_mu=0.05).as_arrays()
    for name in ("divfl", "subtrunc", "unionfl"):
        cfg = _cfg(selector=name, selector_objective="raw", union_window=1)
        alg = build("fedavg", tiny_model, cfg)
        state = alg.init(jax.random.key(0), data10, hp)
        mem = state.selector
        win = np.full(10, False)
        if name == "unionfl":
            mem = mem._replace(window=jnp.asarray([[1, 4, 6]], jnp.int32))
            win[[1, 4, 6]] = True
            state = state.replace(selector=mem)
        f = np.asarray(mem.features, np.float64)
        d = np.linalg.norm(f[:, None] - f[None], axis=-1)
        c0 = 2 * np.linalg.norm(f, axis=1).max()
        phi = np.log1p(np.asarray(mem.loss, np.float64)) if name == "subtrunc" else None
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
    mem = new.selector
    assert not np.allclose(np.asarray(mem.features),
                           np.asarray(state.selector.features))
    for k in range(10):  # everyone's loss and full gradient at the model after the round
        loss, g = client_grad(tiny_model, new.params, new.model_state, data10.train, k)
        np.testing.assert_allclose(np.asarray(mem.features[k]), np.asarray(flatten(g)),
                                   rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(float(mem.loss[k]), float(loss), rtol=1e-5)


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


@pytest.mark.parametrize("r, dense", [(4, True), (2, False), (0, True)])
def test_stochastic_greedy_takes_the_dense_distances_when_it_would_read_every_column(
        r, dense, data10, tiny_model):
    """cohort x candidates >= clients (3 x 4 >= 10): one [10, 10] Gram product of the
    features; fewer (3 x 2): only the [10, 2] columns each pick reads."""
    cfg = _cfg(selector="divfl", greedy_candidates=r)
    hp = HParams().as_arrays()
    state = build("fedavg", tiny_model, cfg).init(jax.random.key(0), data10, hp)
    sel = make_selector(tiny_model, cfg)
    jaxpr = jax.make_jaxpr(sel.select)(jax.random.key(0), state, data10, hp)
    shapes = set()

    def walk(j):
        for e in j.eqns:
            if e.primitive.name == "dot_general":
                shapes.add(tuple(e.outvars[0].aval.shape))
            for sub in jax.extend.core.jaxprs_in_params(e.params):
                walk(sub)

    walk(jaxpr.jaxpr)
    assert ((10, 10) in shapes) == dense and ((10, r) in shapes) == (not dense), shapes


def test_tail_sizes_by_hand():
    # fractions 0.75 and 0.875 of the chunk, rounded up to 4 rows, and the chunk
    assert tail_sizes(71) == (56, 64, 71)  # 53.25 -> 56, 62.1 -> 64
    assert tail_sizes(256) == (192, 224, 256)
    assert tail_sizes(16) == (12, 16)  # 14 -> 16 twice
    assert tail_sizes(3) == (3,)


@pytest.mark.parametrize("chunk", [3, 8, 16, 256])
def test_client_grad_equals_the_gradient_over_exactly_the_clients_rows(chunk, tiny_model):
    """Full chunks as many as a client holds, its rest at the ladder's next size: the same
    loss and gradient as one pass over its rows alone, for clients whose rows fill 0, 1 or
    several chunks and leave a rest of every size (sizes 2-40 rows)."""
    sizes = [2, 3, 7, 8, 11, 12, 13, 15, 16, 17, 24, 29, 33, 40]
    data = make_tiny_data(num_clients=len(sizes), sizes=sizes, seed=5)
    params, _ = tiny_model.init(jax.random.key(0))
    params = jax.tree.map(lambda a: a + 0.3, params)
    grad = jax.jit(lambda k: client_grad(tiny_model, params, {}, data.train, k, chunk))
    for k in range(len(sizes)):
        x, y = data.train.client_numpy(k)
        assert len(y) == sizes[k]
        want_loss, want = jax.value_and_grad(lambda p, x=x, y=y: tiny_model.loss(
            p, {}, jnp.asarray(x), jnp.asarray(y), train=False)[0])(params)
        loss, got = grad(k)
        np.testing.assert_allclose(loss, want_loss, rtol=1e-5)
        np.testing.assert_allclose(flatten(got), flatten(want), rtol=1e-4, atol=1e-6)


def test_tail_class_by_hand_and_a_fixed_tail_equals_the_branch(tiny_model):
    """`tail_class`: 0 for rows filling whole chunks, else 1 + the index of the smallest
    `tail_sizes` that holds the rest; `client_grad` at that fixed tail is the switch's result
    to the bit."""
    sizes = [2, 8, 9, 12, 13, 15, 16, 17, 24, 31, 32]
    data = make_tiny_data(num_clients=len(sizes), sizes=sizes, seed=6)
    chunk = 16  # tail_sizes(16) == (12, 16)
    got = [int(tail_class(data.train, k, chunk)) for k in range(len(sizes))]
    # rests 2 8 9 12 13 15 0 1 8 15 0
    assert got == [1, 1, 1, 1, 2, 2, 0, 1, 1, 2, 0]
    params, _ = tiny_model.init(jax.random.key(1))
    for k, t in enumerate(got):
        a = jax.jit(lambda k: client_grad(tiny_model, params, {}, data.train, k, chunk))(k)
        b = jax.jit(lambda k, t=t: client_grad(tiny_model, params, {}, data.train, k, chunk,
                                               tail=t))(k)
        assert np.array_equal(a[0], b[0])
        assert np.array_equal(flatten(a[1]), flatten(b[1]))


def test_map_grouped_runs_each_row_in_its_groups_function():
    """Rows in any order of groups, one group empty: each row's result is its group's
    function's, at the row's place (against a per-row switch by hand)."""
    from fedjax_appeal.execute.distributed import map_grouped

    rows = (jnp.arange(9.0), jnp.asarray([2, 0, 2, 1, 0, 2, 2, 0, 1]))
    fns = [lambda r, sh, j=j: {"v": (j + 1) * r[0] + sh, "w": jnp.full((2,), j)}
           for j in range(4)]  # group 3: no row
    got = jax.jit(lambda r: map_grouped(fns, lambda r, sh: r[1], r, 0.5))(rows)
    g = [2, 0, 2, 1, 0, 2, 2, 0, 1]
    assert np.asarray(got["v"]).tolist() == [(g[i] + 1) * i + 0.5 for i in range(9)]
    assert np.asarray(got["w"]).tolist() == [[x, x] for x in g]
