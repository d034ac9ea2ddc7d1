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

from ..adversary import byzantine
from ..config import RunConfig
from ..models import Model
from ..requirement import parse_requirement, requirement_values, seen_solo
from ..round import attach_selector, init_state, make_round
from ..selection import make_selector
from ..server import server_optimizer
from .base import FederatedAlgorithm, global_evaluator, register
from .fedavg import sgd_local


def appeal_q(loss: jax.Array, rho: jax.Array) -> jax.Array:
    """q_k = sigma(F_k - rho_k) (1 - sigma(F_k - rho_k)), elementwise."""
    s = jax.nn.sigmoid(loss - rho)
    return s * (1.0 - s)


def maxfl_weights(q: jax.Array, valid: jax.Array, eps: jax.Array) -> jax.Array:
    """Aggregation weights q_k / (sum_valid q + eps) (zero for invalid slots)."""
    q = jnp.where(valid, q, 0.0)
    return q / (jnp.sum(q) + eps)


def _build(model: Model, cfg: RunConfig, name: str) -> FederatedAlgorithm:
    selector = make_selector(model, cfg)
    req = parse_requirement(cfg.requirement)
    base_local = sgd_local(model, cfg, loss_before=True)

    def init(key, data, hp):
        k_model, k_sel = jax.random.split(key)
        params, mstate = model.init(k_model)
        extra = {}
        solo_loss = None
        if req is None:
            solo = seen_solo(model, cfg, params, mstate, data, key, hp)
            extra["solo"] = solo  # reused by the appeal protocol (same key)
            solo_loss = solo.train_loss
        extra["rho"] = requirement_values(req, solo_loss, data.num_clients, data.num_unseen)
        state = init_state(params, mstate, server_optimizer(cfg.server_opt, hp),
                           data.num_clients, extra)
        return attach_selector(state, selector, k_sel, data, hp)

    def local(state, data, k, key, hp):
        upd = base_local(state, data, k, key, hp)
        return upd._replace(extra={**upd.extra, "rho": state.extra["rho"][k]})

    def weights(upd, valid, state, hp):
        return maxfl_weights(appeal_q(upd.extra["loss_before"], upd.extra["rho"]), valid,
                             hp.maxfl_eps)

    rnd = make_round(select=selector, local=local, weights=weights, corrupt=byzantine,
                     tx=lambda hp: server_optimizer(cfg.server_opt, hp))
    return FederatedAlgorithm(name, init, rnd, global_evaluator(model))


@register("maxfl")
def maxfl(model: Model, cfg: RunConfig) -> FederatedAlgorithm:
    return _build(model, cfg, "maxfl")


@register("incfl")
def incfl(model: Model, cfg: RunConfig) -> FederatedAlgorithm:
    """IncFL: the same update rule as MaxFL (its earlier version)."""
    return _build(model, cfg, "incfl")
