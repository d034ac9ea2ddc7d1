"""Tests of `algorithms/mwfed.py`: MW-Fed weights and update by hand."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import linear_model, lsq_rows_data, scalar_w, set_w

from fedjax_appeal.algorithms import build
from fedjax_appeal.algorithms.mwfed import MWFedState
from fedjax_appeal.core.config import HParams, RunConfig


def test_mwfed_weights_and_update_by_hand():
    # w = 0.5, lr 0.1, tau 1, clients (x, y, n): F_k(w) = (1.125, 2, 0.5), Delta w = (-.15, .4, .1)
    rows = [(1.0, 2.0, 1), (2.0, -1.0, 3), (-1.0, 0.5, 2)]
    model = linear_model()
    data = lsq_rows_data(rows)
    cfg = RunConfig(clients=3, unseen_clients=0, cohort=3, local_steps=1, batch_size=2,
                    rho_steps=2)
    hp = HParams(client_lr=0.1, mwfed_eta=0.3).as_arrays()
    alg = build("mwfed", model, cfg)
    state = set_w(alg.init(jax.random.key(0), data, hp), 0.5)
    assert state.rho.shape == (3,)
    state = state.replace(rho=jnp.array([1.0, 3.0, 0.4]),
                          algo=MWFedState(jnp.array([0.5, 0.0, -0.2])))
    state, m = jax.jit(alg.round)(state, data, jax.random.key(1), hp)
    idx = np.asarray(m["cohort_idx"])
    vn = np.array([np.exp(0.5) * 1, 1.0 * 3, np.exp(-0.2) * 2])
    np.testing.assert_allclose(np.asarray(m["cohort_weights"]), (vn / vn.sum())[idx], rtol=1e-5)
    # requirement unmet (F > rho) for clients 0 and 2: log v += 0.3
    np.testing.assert_allclose(np.asarray(state.algo.logv), [0.8, 0.0, 0.1],
                               atol=1e-6)
    assert scalar_w(state) == pytest.approx(0.5 - vn @ np.array([-0.15, 0.4, 0.1]) / vn.sum(),
                                      abs=1e-6)
