"""Tests of `aggregate/server.py`: server optimizers against their textbook updates."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_appeal.aggregate.server import server_optimizer
from fedjax_appeal.core.config import HParams


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
