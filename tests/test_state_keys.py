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


# --- ClientUpdate: typed reports ---------------------------------------------------------
from fedjax_appeal.core.capabilities import supports  # noqa: E402
from fedjax_appeal.core.parts import ClientUpdate  # noqa: E402


def _updates(alg, data) -> list[ClientUpdate]:
    """Every `ClientUpdate` (abstract) that one traced round of `alg` builds."""
    seen: list = []
    hp = HParams(client_lr=0.1).as_arrays()
    state = jax.eval_shape(alg.init, jax.random.key(0), data, hp)
    orig_new = ClientUpdate.__new__

    def recording_new(cls, *a, **k):
        u = orig_new(cls, *a, **k)
        seen.append(u)
        return u

    ClientUpdate.__new__ = recording_new
    try:
        jax.eval_shape(alg.round, state, data, jax.random.key(1), hp)
    finally:
        ClientUpdate.__new__ = orig_new
    return seen


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_client_reports_are_the_typed_fields_and_none_unless_asked(name):
    """Over the combinations that add client reports (losses for Exp-alpha, FedNova's
    normaliser, a chunked round's update norm, DP, compression), a round's updates carry
    the loss reports only where the weight rule asks for them, FedNova's a_k only under
    FedNova, and the algorithm's own report (if any) as one typed value."""
    sup = supports(name)
    combos = [{}, {"client_chunk": 2}]
    combos += [{"aggregation": "exp-alpha"}] if sup.aggregation else []
    combos += [{"aggregation": "fednova"}] if sup.aggregation and sup.fednova else []
    combos += [{"dp": "fixed"}] if sup.dp else []
    combos += [{"compress": "topk"}] if sup.uplink else []
    model, data, cfg = _setup(name)
    for kw in combos:
        c = cfg.replace(algorithm=name, **kw)
        ups = _updates(build(name, model, c), data)
        for u in ups:
            if kw.get("aggregation") == "exp-alpha":
                assert u.loss_before is not None and u.loss_after is not None, kw
            if name in ("fedavg", "fedprox") and not kw.get("aggregation"):
                assert u.loss_before is None and u.loss_after is None, kw
            if kw.get("aggregation") == "fednova" or name == "fednova":
                assert u.fednova_a is not None, kw
            else:
                assert u.fednova_a is None, kw
            if u.report is not None:  # an algorithm's own report: one typed value
                assert isinstance(u.report, tuple) and hasattr(u.report, "_fields"), kw


def test_a_misspelled_report_fails_at_trace_time():
    """A weight rule reading a report under a wrong name is an AttributeError when the
    round is traced, not a silently missing key."""
    from fedjax_appeal.algorithms.fedavg import sgd_local
    from fedjax_appeal.core.parts import WeightRule
    from fedjax_appeal.extend import compose, options_for

    model = make_model("logistic", "tiny", 3, (5,), jnp.float32, scale=1.0)
    data = make_tiny_data(num_clients=6, unseen=2, seed=1)
    opts = options_for("fedavg", CFG)
    rule = WeightRule(lambda upd, idx, valid, state, hp: upd.loss_befor * valid,
                      needs=frozenset({"loss_before"}))
    alg = compose("mine", model, opts, local=sgd_local(model, opts), weights=rule)
    hp = HParams(client_lr=0.1).as_arrays()
    state = jax.eval_shape(alg.init, jax.random.key(0), data, hp)
    with pytest.raises(AttributeError, match="loss_befor"):
        jax.eval_shape(alg.round, state, data, jax.random.key(1), hp)
