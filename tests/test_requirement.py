"""Tests of `protocols/appeal/requirement.py`: client requirements rho_k."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import make_tiny_data

from fedjax_appeal.algorithms import build
from fedjax_appeal.core.config import ConfigError, HParams, RunConfig
from fedjax_appeal.core.models import make_model
from fedjax_appeal.protocols.appeal.requirement import seen_solo


def _tiny():
    data = make_tiny_data(num_clients=5, unseen=2)
    model = make_model("logistic", "tiny", 3, (5,), jnp.float32, scale=1.0)
    return data, model


@pytest.mark.slow
def test_solo_requirement_is_solo_train_loss():
    data, model = _tiny()
    cfg = RunConfig(clients=5, unseen_clients=2, cohort=2, local_steps=2, batch_size=4,
                    rho_steps=7, algorithm="maxfl")
    hp = HParams(client_lr=0.2).as_arrays()
    key = jax.random.key(3)
    state = jax.jit(build("maxfl", model, cfg).init)(key, data, hp)
    k_model, _ = jax.random.split(key)
    params, mstate = model.init(k_model)
    ref = seen_solo(model, cfg, params, mstate, data, key, hp)
    np.testing.assert_allclose(np.asarray(state.rho), np.asarray(ref.train_loss),
                               rtol=1e-5)
    # solo training lowers each client's train loss below the initial model's
    from fedjax_appeal.evaluate.evaluation import evaluate_split
    init_loss = evaluate_split(model, params, mstate, data.train).loss
    assert np.all(np.asarray(ref.train_loss) < np.asarray(init_loss))


@pytest.mark.slow
def test_solo_lr_fixes_the_requirements_whatever_the_client_lr():
    data, model = _tiny()
    cfg = RunConfig(clients=5, unseen_clients=2, cohort=2, local_steps=2, batch_size=4,
                    rho_steps=7, algorithm="maxfl")
    key = jax.random.key(3)
    rho = {}
    for alg in ("maxfl", "mwfed"):
        for lr in (0.2, 0.01):
            hp = HParams(client_lr=lr, solo_lr=0.1).as_arrays()
            rho[alg, lr] = np.asarray(jax.jit(build(alg, model, cfg.replace(algorithm=alg))
                                              .init)(key, data, hp).rho)
    np.testing.assert_allclose(rho["maxfl", 0.2], rho["maxfl", 0.01], rtol=1e-6)
    np.testing.assert_allclose(rho["maxfl", 0.2], rho["mwfed", 0.01], rtol=1e-6)
    # solo_lr = 0 means the client lr: then the requirement moves with the client lr
    hp = HParams(client_lr=0.1, solo_lr=0.0).as_arrays()
    st = build("maxfl", model, cfg).init(key, data, hp)
    np.testing.assert_allclose(np.asarray(st.rho), rho["maxfl", 0.2], rtol=1e-6)
    hp = HParams(client_lr=0.2, solo_lr=0.0).as_arrays()
    st = build("maxfl", model, cfg).init(key, data, hp)
    assert not np.allclose(np.asarray(st.rho), rho["maxfl", 0.2])


def test_requirement_constant_and_files(tmp_path):
    data, model = _tiny()
    hp = HParams().as_arrays()
    cfg = RunConfig(clients=5, unseen_clients=2, cohort=2, algorithm="maxfl")
    st = build("maxfl", model, cfg.replace(requirement="0.75")).init(jax.random.key(0), data, hp)
    assert np.asarray(st.rho).tolist() == [0.75] * 5 and st.solo is None
    vals = np.array([0.1, 0.2, 0.3, 0.4, 0.5])
    np.save(tmp_path / "r.npy", vals)
    np.savetxt(tmp_path / "r.txt", np.concatenate([vals, [9.0, 8.0]]))
    for f in ("r.npy", "r.txt"):
        st = build("maxfl", model, cfg.replace(requirement=str(tmp_path / f))).init(
            jax.random.key(0), data, hp)
        np.testing.assert_allclose(np.asarray(st.rho), vals, rtol=1e-6)
    np.save(tmp_path / "bad.npy", vals[:3])
    with pytest.raises(ConfigError, match="3 values"):
        build("maxfl", model, cfg.replace(requirement=str(tmp_path / "bad.npy"))).init(
            jax.random.key(0), data, hp)
    with pytest.raises(ConfigError, match="no file"):
        build("maxfl", model, cfg.replace(requirement=str(tmp_path / "missing.npy")))
