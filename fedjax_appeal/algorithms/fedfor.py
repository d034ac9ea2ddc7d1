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
`FedForState.last_update` (`state.algo`); clients stay stateless. Aggregation
and server optimizer are those of FedAvg (`--aggregation`, `--server-opt`).

This is our reading of the method's local objective (its linear first-order term with the
last global update as the gradient estimate); the exact scaling of the estimate in the
authors' code was not available to us.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from ..aggregate.aggregation import weight_rule
from ..core.capabilities import algorithm
from ..core.config import Options
from ..core.fields import option
from ..core.models import Model
from ..local.client import Trained, local_sgd, tree_sub
from .base import compose, register

FEDFOR = algorithm("fedfor")
LAMBDA = option("fedfor_lambda", 0.1, "FedFor first-order regularisation weight lambda of "
                "lambda <g, w - w_t>, g = the last global update over (local steps x client lr)",
                applies=FEDFOR, tunable=True)


def first_order(g, w_t, lam: jax.Array):
    """The regulariser lambda <g, w - w_t> (its gradient is the constant lambda g)."""
    return lambda p: lam * sum(jnp.vdot(a, b - c) for a, b, c in zip(
        jax.tree.leaves(g), jax.tree.leaves(p), jax.tree.leaves(w_t), strict=True))


class FedForState(NamedTuple):
    """FedFor's server state (`state.algo`)."""

    last_update: Any  # w_{t-1} - w_t, like params (zero before the first round)


def global_gradient(state, opts: Options, hp):
    """g_t = (w_{t-1} - w_t) / (tau eta_l) from the server's last global update."""
    scale = 1.0 / (opts.local_steps * hp.client_lr)
    return jax.tree.map(lambda d: d * scale, state.algo.last_update)


def fedfor_local(model: Model, opts: Options):
    def local(state, data, k, key, hp):
        reg = first_order(global_gradient(state, opts, hp), state.params, hp.fedfor_lambda)
        res = local_sgd(model, state.params, state.model_state, data.train, k, key,
                        hp.client_lr, steps=opts.local_steps, batch_size=opts.batch_size,
                        regularizer=reg)
        return Trained((state.params, state.model_state), (res.params, res.state), res.loss)

    return local


def fedfor_post(old, new, upd, idx, valid, w, hp):
    return new.replace(algo=FedForState(tree_sub(old.params, new.params)))


@register(FEDFOR)
def fedfor(model: Model, opts: Options, executor=None):
    return compose("fedfor", model, opts, local=fedfor_local(model, opts),
                   weights=weight_rule(opts),
                   post=fedfor_post, executor=executor,
                   init_fields=lambda key, params, mstate, data, hp: {
                       "algo": FedForState(jax.tree.map(jnp.zeros_like, params))})
