"""Tests of `algorithms/qffl.py`: q-FFL and AFL by hand."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import linear_model, lsq_rows_data, scalar_w, set_w

from fedjax_appeal.algorithms import build
from fedjax_appeal.algorithms.qffl import qffl_weights
from fedjax_appeal.core.config import HParams, RunConfig

TWO = [(1.0, 2.0, 1), (2.0, -1.0, 3)]  # client 0: x=1, y=2 (1 row); client 1: x=2, y=-1


def _qffl_by_hand(w, rows, lr, q):
    """Li et al. 2020, Algorithm 2 with tau = 1 on 1-d least squares 0.5 (w x - y)^2."""
    num, den = 0.0, 0.0
    for x, y, _ in rows:
        f = 0.5 * (w * x - y) ** 2
        dw = lr * (w * x - y) * x  # w - w_k after one SGD step
        num += f ** q * dw / lr
        den += q * f ** (q - 1) * (dw / lr) ** 2 + f ** q / lr
    return w - num / den


@pytest.mark.parametrize("q,expected", [(1.0, 0.5 - 6.3125 / 49.5),
                                        (2.0, 0.5 - 14.1015625 / 121.71875),
                                        (0.0, 0.375)])
def test_qffl_server_step_by_hand(q, expected):
    # w = 0.5, eta = 0.1: F = (1.125, 2), Delta w = (-0.15, 0.4)
    #   q = 1: Delta = (-1.6875, 8), h = (2.25 + 11.25, 16 + 20)
    model = linear_model()
    data = lsq_rows_data(TWO)
    cfg = RunConfig(clients=2, unseen_clients=0, cohort=2, local_steps=1, batch_size=2,
                    algorithm="qffl")
    hp = HParams(client_lr=0.1, qffl_q=q).as_arrays()
    alg = build("qffl", model, cfg)
    state = set_w(alg.init(jax.random.key(0), data, hp), 0.5)
    state, m = jax.jit(alg.round)(state, data, jax.random.key(1), hp)
    assert scalar_w(state) == pytest.approx(expected, abs=1e-6)
    assert scalar_w(state) == pytest.approx(_qffl_by_hand(0.5, TWO, 0.1, q), abs=1e-6)


def test_afl_is_qffl_with_its_own_q():
    model = linear_model()
    data = lsq_rows_data(TWO)
    cfg = RunConfig(clients=2, unseen_clients=0, cohort=2, local_steps=1, batch_size=2)
    hp = HParams(client_lr=0.1, afl_q=10.0).as_arrays()
    alg = build("afl", model, cfg)
    state = set_w(alg.init(jax.random.key(0), data, hp), 0.5)
    state, _ = alg.round(state, data, jax.random.key(1), hp)
    assert scalar_w(state) == pytest.approx(_qffl_by_hand(0.5, TWO, 0.1, 10.0), abs=1e-6)


def test_qffl_weights_stable_and_masked():
    valid = jnp.array([True, True, False])
    sq = jnp.array([0.04, 0.01, 5.0])
    # F = 0 with q < 1 and a huge q: finite, invalid slot gets nothing
    for q, loss in ((0.5, [0.0, 1.0, 3.0]), (60.0, [30.0, 2.0, 1e3]), (1.0, [0.0, 0.0, 1.0])):
        w = np.asarray(qffl_weights(jnp.array(loss), sq, valid, jnp.float32(q),
                                    jnp.float32(0.1)))
        assert np.all(np.isfinite(w)) and w[2] == 0.0 and np.all(w >= 0)
    # q = 60: the large-loss client dominates; ratio of weights F_0^q / F_1^q saturates to 1:0
    w = np.asarray(qffl_weights(jnp.array([30.0, 2.0, 1.0]), sq, valid, jnp.float32(60.0),
                                jnp.float32(0.1)))
    expected0 = (1 / 0.1) / (60 * 0.04 / 0.01 / 30.0 + 1 / 0.1)
    assert w[0] == pytest.approx(expected0, rel=1e-5) and w[1] < 1e-30
