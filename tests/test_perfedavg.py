"""Tests of `algorithms/perfedavg.py`: Per-FedAvg steps by hand, Hessian-vector products."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import linear_model, lsq_rows_data, scalar_w, set_w

from fedjax_appeal.algorithms import build
from fedjax_appeal.core.config import HParams, RunConfig


@pytest.mark.parametrize("variant,delta,expected", [("fo", 0.0, 0.02), ("hf", 0.0, 0.212),
                                                    ("hf", 1e-2, 0.212)])
def test_perfedavg_step_by_hand(variant, delta, expected):
    # one client, rows (x=2, y=-1): grad = 4w + 2, Hessian 4; w = 0.5, alpha 0.1, beta 0.2:
    #   tmp = 0.5 - 0.1 * 4 = 0.1; g = 2.4; FO: 0.5 - 0.2 * 2.4 = 0.02;
    #   HF: 0.5 - 0.2 * (2.4 - 0.1 * 4 * 2.4) = 0.212
    model = linear_model()
    data = lsq_rows_data([(2.0, -1.0, 3)])
    cfg = RunConfig(clients=1, unseen_clients=0, cohort=1, local_steps=1, batch_size=2,
                    perfedavg_variant=variant)
    hp = HParams(perfedavg_alpha=0.1, perfedavg_beta=0.2, perfedavg_delta=delta).as_arrays()
    alg = build("perfedavg", model, cfg)
    state = set_w(alg.init(jax.random.key(0), data, hp), 0.5)
    state, _ = jax.jit(alg.round)(state, data, jax.random.key(1), hp)
    assert scalar_w(state) == pytest.approx(expected, abs=1e-5)


@pytest.mark.slow
def test_hessian_vector_product_vs_explicit_hessian(tiny_data, tiny_model):
    from jax.flatten_util import ravel_pytree

    from fedjax_appeal.algorithms.perfedavg import hvp

    params, st = tiny_model.init(jax.random.key(0))
    x, y = tiny_data.train.client_numpy(1)
    flat, unravel = ravel_pytree(params)

    def loss(p):
        return tiny_model.loss(p, st, jnp.asarray(x), jnp.asarray(y), train=False)[0]

    # jitted (as a round runs them): one compile each instead of op-by-op dispatch; `delta`
    # is traced, so the exact and the finite-difference product are one program's two calls
    hess = jax.jit(jax.hessian(lambda f: loss(unravel(f))))(flat)
    v = jax.random.normal(jax.random.key(1), flat.shape)
    want = np.asarray(hess @ v)
    g = jax.grad(loss)
    flat_hvp = jax.jit(lambda delta: ravel_pytree(hvp(g, params, unravel(v), delta))[0])
    exact = flat_hvp(jnp.float32(0.0))
    fd = flat_hvp(jnp.float32(1e-2))
    np.testing.assert_allclose(np.asarray(exact), want, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(np.asarray(fd), want, rtol=2e-2, atol=2e-3)
