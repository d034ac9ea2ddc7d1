"""`ServerState.extra` holds the shared stages' state under the documented
`SHARED_STATE_KEYS` and each algorithm's own state as one typed value under its name."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest
from conftest import make_tiny_data
from test_fedbn import _bn_setup

from fedjax_appeal.algorithms import ALGORITHMS, build
from fedjax_appeal.core.config import HParams, RunConfig
from fedjax_appeal.core.models import make_model
from fedjax_appeal.core.parts import SHARED_STATE_KEYS
from fedjax_appeal.protocols.appeal.appeal import with_appeal

CFG = RunConfig(clients=6, unseen_clients=2, cohort=3, local_steps=2, batch_size=4,
                rho_steps=2, appeal="off")


def _extra(alg, data):
    hp = HParams(client_lr=0.1).as_arrays()
    return jax.eval_shape(alg.init, jax.random.key(0), data, hp).extra


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_extra_holds_shared_keys_and_the_algorithms_own_typed_state(name):
    if name == "fedbn":
        model, data = _bn_setup()
        cfg = CFG.replace(clients=3, unseen_clients=0, cohort=2)
    else:
        model = make_model("logistic", "tiny", 3, (5,), jnp.float32, scale=1.0)
        data, cfg = make_tiny_data(num_clients=6, unseen=2, seed=1), CFG
    extra = _extra(build(name, model, cfg.replace(algorithm=name)), data)
    assert set(extra) <= {*SHARED_STATE_KEYS, name}, sorted(extra)
    if name in extra:  # an algorithm's own state: one typed value (a NamedTuple)
        assert isinstance(extra[name], tuple) and hasattr(extra[name], "_fields")


@pytest.mark.parametrize("extra_cfg,key", [
    (dict(selector="unionfl"), "selector"),
    (dict(availability="bernoulli"), "hetero"),
    (dict(compress="topk", compress_feedback=True), "uplink"),
    (dict(appeal="on"), "appeal"),
    (dict(algorithm="maxfl"), "rho"),
    (dict(algorithm="perfedavg"), "eval_key"),
])
def test_each_shared_stage_uses_its_documented_key(extra_cfg, key):
    model = make_model("logistic", "tiny", 3, (5,), jnp.float32, scale=1.0)
    data = make_tiny_data(num_clients=6, unseen=2, seed=1)
    cfg = CFG.replace(**extra_cfg)
    alg = build(cfg.algorithm, model, cfg)
    if cfg.appeal == "on":
        alg = with_appeal(alg, model, cfg)
    extra = _extra(alg, data)
    assert key in extra and set(extra) <= {*SHARED_STATE_KEYS, cfg.algorithm}
