"""FedFor (Tian, Smith, Kira 2022, "FedFOR: Stateless Heterogeneous Federated Learning with
First-Order Regularization", arXiv:2209.10537), one of the Exp-alpha paper's backbones.

FedFor approximates the other clients' part of the global objective to first order around
the received global model w_t, F_j(w) ≈ F_j(w_t) + <∇F_j(w_t), w - w_t>, and adds that
approximation to the local objective. The global gradient is not available to a client
without state, so it is estimated from the last global update, which the server can
broadcast with the model: g_t = (w_{t-1} - w_t) / (tau eta_l) (the model change of the
previous round per unit of local progress, as in SCAFFOLD's option II estimate). Client k
then runs tau SGD steps on

    F_k(w) + lambda <g_t, w - w_t>,

i.e. every local gradient gets the constant term lambda g_t: a step against the global
update's direction is penalised and one along it rewarded ("penalizes updates in the
opposite direction of the global update", Tian et al.). lambda = `HParams.fedfor_lambda`;
g_0 = 0 (the first round is plain FedAvg). The server keeps w_{t-1} - w_t in
`state.extra["fedfor_g"]`; clients stay stateless. Aggregation and server optimizer are
those of FedAvg (`--aggregation`, `--server-opt`).

This is our reading of the method's local objective (its linear first-order term with the
last global update as the gradient estimate); the exact scaling of the estimate in the
authors' code was not available to us.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ..adversary import byzantine
from ..aggregation import make_weights
from ..client import client_loss, local_sgd, tree_sub
from ..config import RunConfig
from ..models import Model
from ..round import ClientUpdate, attach_selector, init_state, make_round
from ..selection import make_selector
from ..server import server_optimizer
from .base import FederatedAlgorithm, global_evaluator, register


def first_order(g, w_t, lam: jax.Array):
    """The regulariser lambda <g, w - w_t> (its gradient is the constant lambda g)."""
    return lambda p: lam * sum(jnp.vdot(a, b - c) for a, b, c in zip(
        jax.tree.leaves(g), jax.tree.leaves(p), jax.tree.leaves(w_t), strict=True))


def global_gradient(state, cfg: RunConfig, hp):
    """g_t = (w_{t-1} - w_t) / (tau eta_l) from the server's last global update."""
    scale = 1.0 / (cfg.local_steps * hp.client_lr)
    return jax.tree.map(lambda d: d * scale, state.extra["fedfor_g"])


def fedfor_local(model: Model, cfg: RunConfig, loss_before: bool = False,
                 loss_after: bool = False):
    def local(state, data, k, key, hp):
        reg = first_order(global_gradient(state, cfg, hp), state.params, hp.fedfor_lambda)
        res = local_sgd(model, state.params, state.model_state, data.train, k, key,
                        hp.client_lr, steps=cfg.local_steps, batch_size=cfg.batch_size,
                        regularizer=reg)
        extra = {}
        if loss_before:
            extra["loss_before"] = client_loss(model, state.params, state.model_state,
                                               data.train, k)[0]
        if loss_after:
            extra["loss_after"] = client_loss(model, res.params, res.state, data.train, k)[0]
        return ClientUpdate(delta=tree_sub(state.params, res.params), model_state=res.state,
                            num_samples=data.train.count[k], loss=res.loss, extra=extra)

    return local


@register("fedfor")
def fedfor(model: Model, cfg: RunConfig) -> FederatedAlgorithm:
    selector = make_selector(model, cfg)
    weights, before, after = make_weights(cfg)

    def init(key, data, hp):
        k_model, k_sel = jax.random.split(key)
        params, mstate = model.init(k_model)
        state = init_state(params, mstate, server_optimizer(cfg.server_opt, hp),
                           data.num_clients,
                           extra={"fedfor_g": jax.tree.map(jnp.zeros_like, params)})
        return attach_selector(state, selector, k_sel, data, hp)

    def post(old, new, upd, idx, valid, w, hp):
        return new.replace(extra={**new.extra,
                                  "fedfor_g": tree_sub(old.params, new.params)})

    rnd = make_round(select=selector, local=fedfor_local(model, cfg, before, after),
                     weights=weights, corrupt=byzantine, post=post,
                     tx=lambda hp: server_optimizer(cfg.server_opt, hp))
    return FederatedAlgorithm("fedfor", init, rnd, global_evaluator(model))
