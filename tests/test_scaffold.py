"""Tests of `algorithms/scaffold.py`: SCAFFOLD against a sequential reference."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import linear_model, lsq_rows_data, scalar_w, set_w

from fedjax_appeal.algorithms import build
from fedjax_appeal.core.config import HParams, RunConfig


def _scaffold_reference(w, rows, cohorts, lr, tau, lr_g):
    """Plain-Python SCAFFOLD option II (Karimireddy et al. 2020) on 1-d least squares."""
    n = len(rows)
    c, ck = 0.0, [0.0] * n
    for s in cohorts:
        dws, dcs = [], []
        for k in s:
            x, y, _ = rows[k]
            v = w
            for _ in range(tau):
                v -= lr * ((v * x - y) * x + c - ck[k])
            cplus = ck[k] - c + (w - v) / (tau * lr)
            dws.append(w - v)
            dcs.append(cplus - ck[k])
            ck[k] = cplus
        w -= lr_g * sum(dws) / len(s)
        c += sum(dcs) / n
    return w, c, ck


def test_scaffold_matches_sequential_reference():
    rows = [(1.0, 2.0, 1), (2.0, -1.0, 3), (-1.0, 0.5, 2)]
    model = linear_model()
    data = lsq_rows_data(rows)
    cfg = RunConfig(clients=3, unseen_clients=0, cohort=2, local_steps=3, batch_size=2,
                    aggregation="uniform")
    hp = HParams(client_lr=0.05, server_lr=0.7).as_arrays()
    alg = build("scaffold", model, cfg)
    state = set_w(alg.init(jax.random.key(0), data, hp), -0.3)
    step = jax.jit(alg.round)
    cohorts = []
    for r in range(5):
        state, m = step(state, data, jax.random.key(r), hp)
        cohorts.append([int(i) for i in m["cohort_idx"]])
    assert len({tuple(sorted(s)) for s in cohorts}) > 1  # different cohorts were drawn
    w, c, ck = _scaffold_reference(-0.3, rows, cohorts, 0.05, 3, 0.7)
    assert scalar_w(state) == pytest.approx(w, abs=1e-5)
    assert float(jax.tree.leaves(state.algo.c)[0].reshape(())) == pytest.approx(
        c, abs=1e-5)
    np.testing.assert_allclose(np.asarray(jax.tree.leaves(
        state.algo.c_clients)[0]).reshape(-1),
                               ck, atol=1e-5)


def test_scaffold_invalid_slots_leave_control_variates_alone(tiny_data, tiny_model):
    cfg = RunConfig(clients=6, unseen_clients=0, cohort=4, local_steps=2, batch_size=4)
    hp = HParams(client_lr=0.1).as_arrays()
    alg = build("scaffold", tiny_model, cfg)
    state = alg.init(jax.random.key(0), tiny_data, hp)
    state = state.replace(pool=jnp.array([True, False, True, False, False, False]))
    state, m = jax.jit(alg.round)(state, tiny_data, jax.random.key(1), hp)
    assert int(m["cohort_size"]) == 2
    cc = jax.tree.leaves(state.algo.c_clients)[0]
    moved = np.abs(np.asarray(cc)).reshape(6, -1).max(axis=1) > 0
    assert moved.tolist() == [True, False, True, False, False, False]
