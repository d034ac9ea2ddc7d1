"""MaxFL (Cho, Jhunjhunwala, Li, Smith, Joshi, TMLR 2023, "Maximizing Global Model Appeal in
Federated Learning"); IncFL is its earlier version ("To Federate or Not To Federate:
Incentivizing Client Participation in Federated Learning"), registered as the alias `incfl`.

Objective: min_w (1/M) sum_k sigma(F_k(w) - rho_k), a smooth count of the clients whose
requirement rho_k the global model misses (`requirement.py`: by default the train loss of a
solo model trained `--rho-steps` steps from the initial global model).

Round (Algorithm 1 of the paper):
  1. each sampled client computes F_k(w) over its train data at the received model and
     q_k = sigma(F_k(w) - rho_k) (1 - sigma(F_k(w) - rho_k)), the derivative of its
     sigmoid term (Byzantine clients report an inflated F_k, see `adversary.py`);
  2. it runs tau local SGD steps and sends Delta_k = w - w_k;
  3. the server steps w <- w - eta_g * sum_k q_k Delta_k / (sum_k q_k + eps), with
     eta_g = `HParams.server_lr` and eps = `HParams.maxfl_eps`: aggregation weights
     q_k / (sum q + eps) and the SGD server optimizer (`--server-opt sgd`, the default).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ..core.capabilities import Supports, algorithm
from ..core.config import Options
from ..core.fields import option
from ..core.models import Model
from ..core.round import WeightRule
from ..protocols.appeal.requirement import (
    SOLO_OPTIONS,
    parse_requirement,
    requirement_values,
    seen_solo,
    solo_models,
)
from .base import compose, initial_model, register
from .fedavg import sgd_local

MAXFL, INCFL = algorithm("maxfl"), algorithm("incfl")
EPS = option("maxfl_eps", 1e-3, "MaxFL epsilon in the adaptive server lr eta_g/(sum q + eps)",
             applies=algorithm("incfl", "maxfl"), tunable=True, ge=0)


def appeal_q(loss: jax.Array, rho: jax.Array) -> jax.Array:
    """q_k = sigma(F_k - rho_k) (1 - sigma(F_k - rho_k)), elementwise."""
    s = jax.nn.sigmoid(loss - rho)
    return s * (1.0 - s)


def maxfl_weights(q: jax.Array, valid: jax.Array, eps: jax.Array) -> jax.Array:
    """Aggregation weights q_k / (sum_valid q + eps) (zero for invalid slots)."""
    q = jnp.where(valid, q, 0.0)
    return q / (jnp.sum(q) + eps)


def requirement_init(model: Model, opts: Options):
    """init_fields of MaxFL and MW-Fed: rho_k [M] (+ the solo models when rho_k is 'solo')."""
    req = parse_requirement(opts.requirement)
    solo_opts = opts.view(SOLO_OPTIONS, "the solo models")

    def init_fields(key, params, mstate, data, hp, pre=None):
        solo = None
        if req is None:  # reused by the appeal protocol (same key)
            solo = (seen_solo(model, solo_opts, params, mstate, data, key, hp)
                    if pre is None else pre["solo_seen"])
        loss = None if solo is None else solo.train_loss
        return {"solo": solo,
                "rho": requirement_values(req, loss, data.num_clients, data.num_unseen)}

    return init_fields


def requirement_pre_init(model: Model, opts: Options):
    """pre_init of MaxFL, IncFL and MW-Fed: the seen clients' solo models when rho_k is
    'solo' (`requirement.solo_models`), else None."""
    if parse_requirement(opts.requirement) is not None:
        return None
    return solo_models(model, opts.view(SOLO_OPTIONS, "the solo models"),
                       initial_model(model), unseen=False)


MAXFL_RULE = WeightRule(
    lambda upd, idx, valid, state, hp: maxfl_weights(
        appeal_q(upd.loss_before, state.rho[idx]), valid, hp.maxfl_eps),
    needs=frozenset({"loss_before"}))


# MaxFL, IncFL and MW-Fed read the requirements rho_k (`requirement_init`): the appeal
# protocol is on by default, and the requirement's options apply to them
MAXFL_SUPPORTS = Supports(aggregation=False, varied_steps=True, needs_requirements=True,
                          parts=("sgd_local",))


@register(MAXFL, MAXFL_SUPPORTS)
def maxfl(model: Model, opts: Options, executor=None):
    return compose("maxfl", model, opts, local=sgd_local(model, opts), weights=MAXFL_RULE,
                   init_fields=requirement_init(model, opts), executor=executor,
                   pre_init=requirement_pre_init(model, opts))


@register(INCFL, MAXFL_SUPPORTS)
def incfl(model: Model, opts: Options, executor=None):
    """IncFL: the same update rule as MaxFL (its earlier version)."""
    return compose("incfl", model, opts, local=sgd_local(model, opts), weights=MAXFL_RULE,
                   init_fields=requirement_init(model, opts), executor=executor,
                   pre_init=requirement_pre_init(model, opts))
