"""Exp-alpha weights, optax server optimizers, FedBN, heterogeneity generators, metrics."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_appeal.aggregation import exp_alpha, make_weights, masked_softmax
from fedjax_appeal.config import HParams, RunConfig
from fedjax_appeal.server import server_optimizer

# ----------------------------------------------------------------------------- Exp-alpha


def test_exp_alpha_hand_numbers():
    before = jnp.array([2.0, 1.0, 3.0])
    after = jnp.array([1.0, 0.8, 0.5])
    valid = jnp.array([True, True, True])
    w = np.asarray(exp_alpha(before, after, valid, jnp.float32(0.5)))
    # gaps -1.0, -0.2, -2.5 / 0.5 -> exp(-2), exp(-0.4), exp(-5)
    raw = np.exp([-2.0, -0.4, -5.0])
    np.testing.assert_allclose(w, raw / raw.sum(), rtol=1e-6)
    np.testing.assert_allclose(w, [0.166588, 0.825118, 0.008294], atol=1e-5)


def test_exp_alpha_n_scaled_and_masked():
    before = jnp.array([2.0, 1.0, 3.0, 9.0])
    after = jnp.array([1.0, 0.8, 0.5, 0.0])
    valid = jnp.array([True, True, True, False])
    n = jnp.array([10, 30, 60, 1000])
    w = np.asarray(exp_alpha(before, after, valid, jnp.float32(1.0), n))
    raw = np.array([10, 30, 60]) * np.exp([-1.0, -0.2, -2.5])
    np.testing.assert_allclose(w[:3], raw / raw.sum(), rtol=1e-6)
    assert w[3] == 0.0


def test_exp_alpha_extreme_gaps_no_overflow():
    valid = jnp.array([True, True, True, False])
    before = jnp.zeros(4)
    # gaps of 1e4 / alpha 0.2 = 5e4 in the exponent, both signs, and an invalid huge slot
    after = jnp.array([1e4, 0.0, -1e4, 1e6])
    w = np.asarray(exp_alpha(before, after, valid, jnp.float32(0.2)))
    assert np.all(np.isfinite(w))
    np.testing.assert_allclose(w, [1.0, 0.0, 0.0, 0.0], atol=0)
    after = jnp.array([1e4, 1e4 - 0.2 * np.log(3.0), -1e4, 0.0])
    w = np.asarray(exp_alpha(before, after, valid, jnp.float32(0.2)))
    # float32 spacing at 1e4 is ~1e-3, i.e. ~5e-3 in the exponent: compare to 1e-3
    np.testing.assert_allclose(w, [0.75, 0.25, 0.0, 0.0], atol=1e-3)
    w = np.asarray(exp_alpha(before, -after, valid, jnp.float32(0.2)))
    np.testing.assert_allclose(w, [0.0, 0.0, 1.0, 0.0], atol=0)


def test_masked_softmax_nothing_valid_and_large_alpha():
    w = masked_softmax(jnp.array([1.0, 2.0]), jnp.array([False, False]))
    assert np.asarray(w).tolist() == [0.0, 0.0]
    # alpha -> inf: uniform over valid slots
    w = exp_alpha(jnp.array([5.0, 1.0, 2.0]), jnp.array([0.0, 1.0, 0.1]),
                  jnp.array([True, False, True]), jnp.float32(1e9))
    np.testing.assert_allclose(np.asarray(w), [0.5, 0.0, 0.5], rtol=1e-6)


def test_make_weights_exp_alpha_reads_losses():
    from fedjax_appeal.round import ClientUpdate

    for name, scaled in (("exp-alpha", False), ("exp-alpha-n", True)):
        rule, before, after = make_weights(RunConfig(aggregation=name))
        assert before and after
        upd = ClientUpdate(delta=None, model_state={}, num_samples=jnp.array([1, 3]),
                           loss=jnp.zeros(2),
                           extra={"loss_before": jnp.array([1.0, 1.0]),
                                  "loss_after": jnp.array([0.0, 1.0])})
        hp = HParams(exp_alpha=1.0).as_arrays()
        w = np.asarray(rule(upd, jnp.array([True, True]), None, hp))
        raw = np.exp([-1.0, 0.0]) * (np.array([1, 3]) if scaled else 1)
        np.testing.assert_allclose(w, raw / raw.sum(), rtol=1e-6)


# ----------------------------------------------------------------------------- server opts


def _steps(name, hp, grads):
    tx = server_optimizer(name, hp.as_arrays())
    p = {"w": jnp.array([0.5, -1.0, 2.0])}
    st = tx.init(p)
    out = []
    for g in grads:
        u, st = tx.update({"w": jnp.asarray(g, jnp.float32)}, st, p)
        p = jax.tree.map(lambda a, b: a + b, p, u)
        out.append(np.asarray(p["w"]))
    return out


G = [np.array([0.3, -0.02, 1.5]), np.array([-0.1, 0.04, 0.5])]
HP = HParams(server_lr=0.7, server_momentum=0.8, server_beta2=0.95, server_eps=1e-2)


def test_server_sgd_and_momentum_textbook():
    w0 = np.array([0.5, -1.0, 2.0])
    lr, mu = 0.7, 0.8
    np.testing.assert_allclose(_steps("sgd", HP, G[:1])[0], w0 - lr * G[0], rtol=1e-6)
    # FedAvgM (Hsu et al. 2019): v = mu v + g, w -= lr v
    v1 = G[0]
    v2 = mu * v1 + G[1]
    got = _steps("momentum", HP, G)
    np.testing.assert_allclose(got[0], w0 - lr * v1, rtol=1e-6)
    np.testing.assert_allclose(got[1], w0 - lr * v1 - lr * v2, rtol=1e-6)
    # Nesterov: w -= lr (g + mu v)
    got = _steps("nesterov", HP, G)
    np.testing.assert_allclose(got[0], w0 - lr * (G[0] + mu * v1), rtol=1e-6)
    np.testing.assert_allclose(got[1], got[0] - lr * (G[1] + mu * v2), rtol=1e-6)


@pytest.mark.parametrize("name", ["adam", "yogi"])
def test_server_adaptive_textbook(name):
    """FedAdam / FedYogi (Reddi et al. 2021, Alg. 2) with tau = eps outside the sqrt, and
    the bias correction optax applies; Yogi's moments start at optax's 1e-6."""
    w = np.array([0.5, -1.0, 2.0])
    lr, b1, b2, tau = 0.7, 0.8, 0.95, 1e-2
    init = 1e-6 if name == "yogi" else 0.0
    m = np.full(3, init)
    v = np.full(3, init)
    got = _steps(name, HP, G)
    for t, g in enumerate(G, start=1):
        m = b1 * m + (1 - b1) * g
        if name == "adam":
            v = b2 * v + (1 - b2) * g ** 2
        else:
            v = v - (1 - b2) * g ** 2 * np.sign(v - g ** 2)
        mh, vh = m / (1 - b1 ** t), v / (1 - b2 ** t)
        w = w - lr * mh / (np.sqrt(vh) + tau)
        np.testing.assert_allclose(got[t - 1], w, rtol=1e-5, atol=1e-7)
    if name == "adam":  # first step is lr * g / (|g| + tau): tau sets the adaptivity
        np.testing.assert_allclose(
            got[0], np.array([0.5, -1.0, 2.0]) - lr * G[0] / (np.abs(G[0]) + tau), rtol=1e-5)
