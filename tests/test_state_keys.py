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


def _setup(name: str):
    """(model, data, configuration) an algorithm is checked on: FedBN needs BatchNorm."""
    if name == "fedbn":
        model, data = _bn_setup()
        return model, data, CFG.replace(clients=3, unseen_clients=0, cohort=2)
    model = make_model("logistic", "tiny", 3, (5,), jnp.float32, scale=1.0)
    return model, make_tiny_data(num_clients=6, unseen=2, seed=1), CFG


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_extra_holds_shared_keys_and_the_algorithms_own_typed_state(name):
    model, data, cfg = _setup(name)
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


# --- ClientUpdate.extra -----------------------------------------------------------------
from fedjax_appeal.core.capabilities import supports  # noqa: E402
from fedjax_appeal.core.parts import SHARED_CLIENT_KEYS, ClientUpdate  # noqa: E402


def _client_keys(alg, data, monkeypatch) -> set:
    """Every key of a `ClientUpdate.extra` that one traced round of `alg` builds."""
    seen: set = set()
    new, replace = ClientUpdate.__new__, ClientUpdate._replace

    def recording_new(cls, *a, **k):
        u = new(cls, *a, **k)
        seen.update(u.extra)
        return u

    def recording_replace(self, **k):
        u = replace(self, **k)
        seen.update(u.extra)
        return u

    monkeypatch.setattr(ClientUpdate, "__new__", recording_new)
    monkeypatch.setattr(ClientUpdate, "_replace", recording_replace)
    hp = HParams(client_lr=0.1).as_arrays()
    state = jax.eval_shape(alg.init, jax.random.key(0), data, hp)
    jax.eval_shape(alg.round, state, data, jax.random.key(1), hp)
    monkeypatch.undo()
    return seen


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_client_updates_carry_shared_keys_and_the_algorithms_own_report(name, monkeypatch):
    """Over the combinations that add client reports (losses for Exp-alpha, FedNova's
    normaliser, a chunked round's update norm, DP, compression), every key of a client's
    `extra` is documented in `SHARED_CLIENT_KEYS` or is the algorithm's own name."""
    sup = supports(name)
    combos = [{}, {"client_chunk": 2}]
    combos += [{"aggregation": "exp-alpha"}] if sup.aggregation else []
    combos += [{"aggregation": "fednova"}] if sup.aggregation and sup.fednova else []
    combos += [{"dp": "fixed"}] if sup.dp else []
    combos += [{"compress": "topk"}] if sup.uplink else []
    model, data, cfg = _setup(name)
    keys: set = set()
    for kw in combos:
        keys |= _client_keys(build(name, model, cfg.replace(algorithm=name, **kw)), data,
                             monkeypatch)
    assert keys <= {*SHARED_CLIENT_KEYS, name}, sorted(keys)


def test_an_undocumented_client_key_is_seen(monkeypatch):
    """The check sees a key a local objective adds outside the documented set."""
    from fedjax_appeal.aggregate.aggregation import weight_rule
    from fedjax_appeal.algorithms.fedavg import sgd_local
    from fedjax_appeal.extend import compose, options_for

    model = make_model("logistic", "tiny", 3, (5,), jnp.float32, scale=1.0)
    data = make_tiny_data(num_clients=6, unseen=2, seed=1)
    opts = options_for("fedavg", CFG)
    base = sgd_local(model, opts)

    def local(state, data, k, key, hp):
        t = base(state, data, k, key, hp)
        return t._replace(extra={**t.extra, "my_note": t.loss})

    alg = compose("mine", model, opts, local=local, weights=weight_rule(opts))
    keys = _client_keys(alg, data, monkeypatch)
    assert "my_note" in keys and not keys <= {*SHARED_CLIENT_KEYS, "mine"}
    # the algorithm's own name is where its report belongs
    assert {*SHARED_CLIENT_KEYS, "fedavg"} >= _client_keys(
        compose("fedavg", model, opts, local=base, weights=weight_rule(opts)), data, monkeypatch)
