"""Tests of `evaluate/personal.py`: personalised algorithms are evaluated with adapted models."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import make_tiny_data, tiny_run_config

from fedjax_appeal.algorithms import build
from fedjax_appeal.core.config import HParams
from fedjax_appeal.core.models import make_model


@pytest.mark.slow
def test_perfedavg_evaluates_adapted_models():
    data = make_tiny_data(unseen=3)
    model = make_model("logistic", "tiny", 3, (5,), jnp.float32, scale=1.0)
    cfg = tiny_run_config(algorithm="perfedavg")
    alg = build("perfedavg", model, cfg)
    from fedjax_appeal.evaluate.evaluation import evaluate_global

    for alpha, same in ((0.0, True), (0.5, False)):
        hp = HParams(perfedavg_alpha=alpha).as_arrays()
        state = alg.init(jax.random.key(0), data, hp)
        ev = jax.jit(alg.evaluate)(state, data, hp)
        ref = evaluate_global(model, state.params, state.model_state, data)
        for split in ("train", "test", "unseen_train", "unseen_test"):
            close = np.allclose(np.asarray(ev[split].loss), np.asarray(ref[split].loss),
                                rtol=1e-5)
            assert close == same, split
