"""Tests of `algorithms/base.py`: the global evaluator of `compose`."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest


def test_global_test_accuracy_on_a_toy():
    from fedjax_appeal.algorithms import global_evaluator
    from fedjax_appeal.core.models import make_model
    from fedjax_appeal.core.round import ServerState
    from tests.conftest import arrays_from_clients, make_tiny_data

    rng = np.random.default_rng(4)
    data = make_tiny_data(num_clients=3, dim=5, classes=3)
    xg = rng.normal(size=(40, 5)).astype(np.float32)
    yg = rng.integers(0, 3, 40)
    data = data.replace(global_test=arrays_from_clients([xg], [yg]))
    model = make_model("logistic", "toy", 3, (5,), jnp.float32, scale=1.0)
    params, mstate = model.init(jax.random.key(1))
    state = ServerState(params, mstate, None, jnp.zeros((), jnp.int32), jnp.ones(3, bool),
                        jnp.zeros(3, jnp.int32))
    out = global_evaluator(model)(state, data, None)
    w = np.asarray(params["Dense_0"]["kernel"])
    b = np.asarray(params["Dense_0"]["bias"])
    acc = np.mean(np.argmax(xg @ w + b, 1) == yg)
    assert 0 < acc < 1
    assert float(out["metrics"]["test_acc_global"]) == pytest.approx(acc, abs=1e-6)
