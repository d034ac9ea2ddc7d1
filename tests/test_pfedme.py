"""Tests of `algorithms/pfedme.py`: pFedMe's inner problem and round by hand."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import linear_model, lsq_rows_data, scalar_w, set_w

from fedjax_appeal.algorithms import build
from fedjax_appeal.core.config import HParams, RunConfig


def test_pfedme_inner_problem_closed_form():
    from fedjax_appeal.algorithms.pfedme import inner_solve

    # f(theta) = 0.5 (2 theta + 1)^2 per coordinate; argmin f + lam/2 (theta - w)^2 is
    # theta* = (x y + lam w) / (x^2 + lam) = (-2 + lam w) / (4 + lam)
    lam, w = 15.0, {"a": jnp.array([0.5, -1.0]), "b": jnp.array(2.0)}
    grad = jax.grad(lambda p: sum(jnp.sum(0.5 * (2 * v + 1) ** 2) for v in jax.tree.leaves(p)))
    theta = inner_solve(grad, jax.tree.map(jnp.zeros_like, w), w, lam, 0.02, 200)
    for got, wi in zip(jax.tree.leaves(theta), jax.tree.leaves(w), strict=True):
        np.testing.assert_allclose(np.asarray(got), (-2 + lam * np.asarray(wi)) / (4 + lam),
                                   rtol=1e-5)


def test_pfedme_round_by_hand():
    # one client (x=2, y=-1), w = 0.5, tau 1, K 2, lam 15, personal lr 0.02, eta 0.1, beta .5
    #   theta: 0.5 -> 0.42 -> 0.3704; w_k = 0.5 - 0.1*15*(0.5 - 0.3704) = 0.3056
    #   server: 0.5 * 0.5 + 0.5 * 0.3056 = 0.4028
    model = linear_model()
    data = lsq_rows_data([(2.0, -1.0, 3)])
    cfg = RunConfig(clients=1, unseen_clients=0, cohort=1, local_steps=1, batch_size=2,
                    pfedme_k=2)
    hp = HParams(client_lr=0.1, pfedme_lambda=15.0, pfedme_lr=0.02,
                 pfedme_beta=0.5).as_arrays()
    alg = build("pfedme", model, cfg)
    state = set_w(alg.init(jax.random.key(0), data, hp), 0.5)
    state, _ = jax.jit(alg.round)(state, data, jax.random.key(1), hp)
    assert scalar_w(state) == pytest.approx(0.4028, abs=1e-5)
    # evaluation uses the personal model theta = 0.3704 computed from the new global model
    ev = alg.evaluate(state, data, hp)
    th = 0.4028 - 0.02 * (4 * 0.4028 + 2)
    th = th - 0.02 * (4 * th + 2 + 15 * (th - 0.4028))
    assert float(ev["train"].loss[0]) == pytest.approx(0.5 * (2 * th + 1) ** 2, rel=1e-4)
