"""The server state and the client updates are typed: every stage's state is one value of
the type that stage declares, in its own field of `ServerState` (None when the run has no
such stage), and every client report is a field of `ClientUpdate`; a misspelled name fails
when the round is traced."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest
from conftest import make_tiny_data
from test_fedbn import _bn_setup

from fedjax_appeal.aggregate.uplink import UplinkMemory
from fedjax_appeal.algorithms import ALGORITHMS, build
from fedjax_appeal.core.config import HParams, RunConfig
from fedjax_appeal.core.models import make_model
from fedjax_appeal.core.parts import ServerState
from fedjax_appeal.local.hetero import HeteroState
from fedjax_appeal.protocols.appeal.appeal import AppealState, with_appeal
from fedjax_appeal.select.selectors import DiversityMemory

CFG = RunConfig(clients=6, unseen_clients=2, cohort=3, local_steps=2, batch_size=4,
                rho_steps=2, appeal="off")
STAGES = ("algo", "rho", "solo", "selector", "protocol", "uplink", "hetero", "eval_key")


def _state(alg, data) -> ServerState:
    hp = HParams(client_lr=0.1).as_arrays()
    return jax.eval_shape(alg.init, jax.random.key(0), data, hp)


def _setup(name: str):
    """(model, data, configuration) an algorithm is checked on: FedBN needs BatchNorm."""
    if name == "fedbn":
        model, data = _bn_setup()
        return model, data, CFG.replace(clients=3, unseen_clients=0, cohort=2)
    model = make_model("logistic", "tiny", 3, (5,), jnp.float32, scale=1.0)
    return model, make_tiny_data(num_clients=6, unseen=2, seed=1), CFG


def test_the_stage_fields_are_the_states_fields():
    """Besides the six fields every algorithm has, `ServerState` has one field per stage."""
    import dataclasses

    names = [f.name for f in dataclasses.fields(ServerState)]
    assert names == ["params", "model_state", "opt_state", "round", "pool", "participation",
                     *STAGES]


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_an_algorithms_own_state_is_one_typed_value_and_other_stages_are_off(name):
    model, data, cfg = _setup(name)
    st = _state(build(name, model, cfg.replace(algorithm=name)), data)
    if st.algo is not None:  # an algorithm's own state: one typed value (a NamedTuple)
        assert isinstance(st.algo, tuple) and hasattr(st.algo, "_fields")
    # a plain configuration (random cohort, no uplink, no heterogeneity, no appeal)
    assert st.selector is None and st.uplink is None and st.hetero is None
    assert st.protocol is None
    assert (st.rho is not None) == (name in ("maxfl", "incfl", "mwfed")), st.rho
    assert (st.eval_key is not None) == (name in ("perfedavg", "pfedme"))


@pytest.mark.parametrize("extra_cfg,field,kind", [
    (dict(selector="unionfl"), "selector", DiversityMemory),
    (dict(availability="bernoulli"), "hetero", HeteroState),
    (dict(compress="topk", compress_feedback=True), "uplink", UplinkMemory),
    (dict(dp="adaptive"), "uplink", UplinkMemory),
    (dict(appeal="on"), "protocol", AppealState),
    (dict(algorithm="maxfl"), "rho", jax.ShapeDtypeStruct),
    (dict(algorithm="perfedavg"), "eval_key", jax.ShapeDtypeStruct),
])
def test_each_shared_stage_keeps_its_typed_state_in_its_field(extra_cfg, field, kind):
    model = make_model("logistic", "tiny", 3, (5,), jnp.float32, scale=1.0)
    data = make_tiny_data(num_clients=6, unseen=2, seed=1)
    cfg = CFG.replace(**extra_cfg)
    alg = build(cfg.algorithm, model, cfg)
    if cfg.appeal == "on":
        alg = with_appeal(alg, model, cfg)
    st = _state(alg, data)
    assert isinstance(getattr(st, field), kind), getattr(st, field)
    others = [f for f in STAGES if f != field and getattr(st, f) is not None]
    assert others == (["solo"] if field == "rho" else []), others  # maxfl: rho_k = solo


def test_a_misspelled_state_field_fails_at_init_and_at_trace_time():
    """A plugin setting or reading a field that does not exist fails loudly."""
    from fedjax_appeal.aggregate.aggregation import weight_rule
    from fedjax_appeal.algorithms.fedavg import sgd_local
    from fedjax_appeal.extend import compose, options_for

    model = make_model("logistic", "tiny", 3, (5,), jnp.float32, scale=1.0)
    data = make_tiny_data(num_clients=6, unseen=2, seed=1)
    opts = options_for("fedavg", CFG)
    hp = HParams(client_lr=0.1).as_arrays()
    bad_init = compose("mine", model, opts, local=sgd_local(model, opts),
                       weights=weight_rule(opts), init_fields=lambda *_: {"agl": 1.0})
    with pytest.raises(TypeError, match="agl"):
        jax.eval_shape(bad_init.init, jax.random.key(0), data, hp)

    def post(old, new, upd, idx, valid, w, hp):
        return new.replace(algo=old.alog)

    bad_read = compose("mine", model, opts, local=sgd_local(model, opts),
                       weights=weight_rule(opts), post=post)
    state = jax.eval_shape(bad_read.init, jax.random.key(0), data, hp)
    with pytest.raises(AttributeError, match="alog"):
        jax.eval_shape(bad_read.round, state, data, jax.random.key(1), hp)


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
