"""Tests of `algorithms/maxfl.py`: MaxFL's q_k, server step and masking by hand."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import arrays_from_clients, linear_model

from fedjax_appeal.algorithms import ALGORITHMS, build
from fedjax_appeal.algorithms.maxfl import appeal_q, maxfl_weights
from fedjax_appeal.core.arrays import FederatedData
from fedjax_appeal.core.config import HParams, RunConfig


def _lsq_data(byzantine=None):
    # client 0: one row (x=1, y=2); client 1: three copies of (x=2, y=-1); loss 0.5 (wx-y)^2.
    tr = arrays_from_clients([np.array([[1.0]], np.float32), np.full((3, 1), 2.0, np.float32)],
                             [np.array([2.0]), np.full(3, -1.0)])
    info = {} if byzantine is None else {"byzantine": jnp.asarray(byzantine)}
    return FederatedData(train=tr, test=tr, info=info, num_classes=1, name="lsq")


def _cfg(**kw):
    base = dict(clients=2, unseen_clients=0, cohort=2, local_steps=2, batch_size=2,
                algorithm="maxfl", requirement="0.0")
    base.update(kw)
    return RunConfig(**base)


def _w(state):
    return float(jax.tree.leaves(state.params)[0].reshape(()))


def _start(alg, data, hp, w0, rho):
    state = alg.init(jax.random.key(0), data, hp)
    params = jax.tree.map(lambda a: jnp.full_like(a, w0), state.params)
    return state.replace(params=params, rho=jnp.asarray(rho))


def _q(loss, rho):
    s = 1.0 / (1.0 + math.exp(-(loss - rho)))
    return s * (1.0 - s)


def test_q_by_hand():
    q = appeal_q(jnp.array([1.125, 2.0, 0.0]), jnp.array([0.3, 1.0, 0.0]))
    np.testing.assert_allclose(np.asarray(q), [0.21185921, 0.19661193, 0.25], rtol=1e-6)
    w = maxfl_weights(q, jnp.array([True, True, False]), jnp.float32(1e-3))
    np.testing.assert_allclose(np.asarray(w), [0.21185921 / 0.40947114, 0.19661193 / 0.40947114,
                                               0.0], rtol=1e-5)


@pytest.mark.parametrize("server_lr,expected", [(1.0, 0.34015537), (0.5, 0.42007769)])
def test_maxfl_server_step_by_hand(server_lr, expected):
    # w0 = 0.5, lr 0.1, tau 2: client 0: 0.5 -> 0.65 -> 0.785 (Delta -0.285),
    # client 1: 0.5 -> 0.1 -> -0.14 (Delta 0.64). F_k(w0) = 1.125, 2.0; rho = 0.3, 1.0:
    # q = 0.21185921, 0.19661193; w = 0.5 - eta_g (q0 D0 + q1 D1) / (q0 + q1 + 1e-3).
    hp = HParams(client_lr=0.1, server_lr=server_lr, maxfl_eps=1e-3).as_arrays()
    alg = build("maxfl", linear_model(), _cfg())
    state = _start(alg, _lsq_data(), hp, 0.5, [0.3, 1.0])
    state, m = jax.jit(alg.round)(state, _lsq_data(), jax.random.key(1), hp)
    assert _w(state) == pytest.approx(expected, abs=1e-6)
    w = np.asarray(m["cohort_weights"])[np.argsort(np.asarray(m["cohort_idx"]))]
    tot = _q(1.125, 0.3) + _q(2.0, 1.0) + 1e-3
    np.testing.assert_allclose(w, [_q(1.125, 0.3) / tot, _q(2.0, 1.0) / tot], rtol=1e-5)


def test_byzantine_client_inflates_its_loss_under_maxfl():
    # client 0 is Byzantine with zero noise: it reports 10 * 1.125, so its q is ~1.8e-5.
    hp = HParams(client_lr=0.1, byzantine_noise=0.0, byzantine_loss_scale=10.0).as_arrays()
    data = _lsq_data(byzantine=[True, False])
    alg = build("maxfl", linear_model(), _cfg())
    state = _start(alg, data, hp, 0.5, [0.3, 1.0])
    state, _ = jax.jit(alg.round)(state, data, jax.random.key(1), hp)
    qb, q1 = _q(11.25, 0.3), _q(2.0, 1.0)
    assert _w(state) == pytest.approx(0.5 - (qb * -0.285 + q1 * 0.64) / (qb + q1 + 1e-3),
                                      abs=1e-6)


def test_unavailable_slots_get_no_weight():
    hp = HParams(client_lr=0.1).as_arrays()
    alg = build("maxfl", linear_model(), _cfg())
    state = _start(alg, _lsq_data(), hp, 0.5, [0.3, 1.0])
    state = state.replace(pool=jnp.array([False, True]))
    state, m = jax.jit(alg.round)(state, _lsq_data(), jax.random.key(1), hp)
    q1 = _q(2.0, 1.0)
    assert int(m["cohort_size"]) == 1
    assert _w(state) == pytest.approx(0.5 - q1 * 0.64 / (q1 + 1e-3), abs=1e-6)
    assert state.participation.tolist() == [0, 1]


def test_incfl_alias_and_registration():
    assert "maxfl" in ALGORITHMS and "incfl" in ALGORITHMS
    assert build("incfl", linear_model(), _cfg()).name == "incfl"
