"""Mean estimation toy: FedAvg at the average, MaxFL next to one client's mean."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from papers.extensions import mean_estimation as me


def test_two_far_apart_clients():
    with jax.enable_x64(True):
        th = jnp.array([-10.0, 10.0])
        rho = jnp.full(2, 2.0)
        assert float(me.solve(th, rho, "fedavg")) == pytest.approx(0.0)
        w = float(me.solve(th, rho, "maxfl"))
        assert min(abs(w - 10.0), abs(w + 10.0)) < 1e-6  # at one client's mean, not between
        # the exact minimiser lies towards the other client: delta has the other's sign
        d = float(me.residual(jnp.asarray(w), th, rho, "maxfl"))
        assert d != 0.0 and np.sign(d) == -np.sign(w)


def test_appeal_fraction_by_hand_and_exact_tiny_shift():
    theta = jnp.array([0.0, 5.0])
    th_hat = jnp.array([-1.0, 5.5])
    # w = 0.5: |0.5 - 0| < 1 yes; |0.5 - 5| < 0.5 no
    assert float(me.appeal_fraction(jnp.asarray(0.5), theta, th_hat)) == 0.5
    with jax.enable_x64(True):
        # w at client 0's solo model: a tie (not appealed) unless shifted towards theta_0
        w = jnp.asarray(-1.0, jnp.float64)
        assert float(me.appeal_fraction(w, theta, th_hat)) == 0.0
        assert float(me.appeal_fraction(w, theta, th_hat, 1e-30)) == 0.5
        assert float(me.appeal_fraction(w, theta, th_hat, -1e-30)) == 0.0


def test_curve_maxfl_beats_fedavg_under_heterogeneity():
    res = me.gm_appeal_curve(me.SHAPES["2 clients"], np.array([0.0, 9.0]), jax.random.key(0),
                             draws=400, steps=100)
    assert res["fedavg"][1] < 0.05 < 0.15 < res["maxfl"][1]  # FedAvg -> 0, MaxFL -> 1/4
    assert res["fedavg"][0] > 0.5  # homogeneous: the average appeals to most clients
