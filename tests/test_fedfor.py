"""Tests of `algorithms/fedfor.py`: FedFor's local steps by hand."""

from __future__ import annotations

import jax
import numpy as np

from fedjax_appeal.core.config import HParams, RunConfig


def test_fedfor_local_steps_by_hand():
    from fedjax_appeal.algorithms import build
    from fedjax_appeal.core.arrays import FederatedData
    from tests.conftest import arrays_from_clients, linear_model

    model = linear_model(2)
    xs = [np.array([[1.0, 2.0]], np.float32), np.array([[-1.0, 0.5]], np.float32)]
    ys = [np.array([1.0], np.float32), np.array([-2.0], np.float32)]
    arr = arrays_from_clients(xs, ys)
    data = FederatedData(train=arr, test=arr, num_classes=1, name="lin")
    cfg = RunConfig(algorithm="fedfor", clients=2, unseen_clients=0, cohort=2, local_steps=1,
                    batch_size=3)
    lr, lam = 0.1, 0.5
    hp = HParams(client_lr=lr, fedfor_lambda=lam).as_arrays()
    alg = build("fedfor", model, cfg)
    s0 = alg.init(jax.random.key(0), data, hp)
    w0 = np.asarray(s0.params["Dense_0"]["kernel"])[:, 0].astype(np.float64)
    rnd = jax.jit(alg.round)
    s1, _ = rnd(s0, data, jax.random.key(1), hp)
    s2, _ = rnd(s1, data, jax.random.key(2), hp)
    X = np.concatenate(xs).astype(np.float64)
    Y = np.concatenate(ys).astype(np.float64)

    def grad(w, k):  # d/dw 0.5 (w.x - y)^2
        return (w @ X[k] - Y[k]) * X[k]

    # round 1: g_0 = 0 -> plain local SGD, equal sizes -> the mean
    w1 = np.mean([w0 - lr * grad(w0, k) for k in range(2)], axis=0)
    # round 2: every local gradient gets lambda g_1, g_1 = (w0 - w1) / (tau lr)
    g1 = (w0 - w1) / (1 * lr)
    w2 = np.mean([w1 - lr * (grad(w1, k) + lam * g1) for k in range(2)], axis=0)
    np.testing.assert_allclose(np.asarray(s1.params["Dense_0"]["kernel"])[:, 0], w1, rtol=1e-5)
    np.testing.assert_allclose(np.asarray(s2.params["Dense_0"]["kernel"])[:, 0], w2, rtol=1e-5)
    np.testing.assert_allclose(
        np.asarray(s2.algo.last_update["Dense_0"]["kernel"])[:, 0], w1 - w2,
        rtol=1e-5)
