"""SCAFFOLD (Karimireddy, Kale, Mohri, Reddi, Stich, Suresh, ICML 2020, "SCAFFOLD: Stochastic
Controlled Averaging for Federated Learning", Algorithm 1 with option II).

State: server control variate c (like params) in `state.extra["c"]` and one control variate
per seen client c_k, stacked with a leading M axis, in `state.extra["c_clients"]` (all
zero at the start).

Round (eta_l = `HParams.client_lr`, tau = `--local-steps`, N = seen clients):
  1. each sampled client runs tau SGD steps from w on F_k(y) + <c - c_k, y>, i.e.
     y <- y - eta_l (g_k(y) + c - c_k), ending at w_k;
  2. option II: c_k+ = c_k - c + (w - w_k) / (tau eta_l); it sends Delta w_k = w - w_k and
     Delta c_k = c_k+ - c_k;
  3. the server moves the model with the configured server optimizer on the aggregated
     Delta w_k (`--aggregation`: proportional n_k by default, `uniform` is the paper's mean;
     `--server-lr` is the paper's global step eta_g with `--server-opt sgd`), and
     c <- c + (|S|/N) mean_S Delta c_k = c + (1/N) sum_S Delta c_k;
  4. c_k <- c_k+ for the sampled clients (a scatter at the cohort indices, masked for
     invalid slots).
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


def correction(c, c_k):
    """The regulariser <c - c_k, y> (its gradient is the SCAFFOLD correction c - c_k)."""
    corr = jax.tree.map(jnp.subtract, c, c_k)
    return lambda p: sum(jnp.vdot(a, b) for a, b in zip(jax.tree.leaves(corr),
                                                          jax.tree.leaves(p), strict=True))


def scaffold_local(model: Model, cfg: RunConfig, loss_before: bool = False,
                   loss_after: bool = False):
    def local(state, data, k, key, hp):
        c = state.extra["c"]
        c_k = jax.tree.map(lambda a: a[k], state.extra["c_clients"])
        res = local_sgd(model, state.params, state.model_state, data.train, k, key,
                        hp.client_lr, steps=cfg.local_steps, batch_size=cfg.batch_size,
                        regularizer=correction(c, c_k))
        delta = tree_sub(state.params, res.params)
        scale = 1.0 / (cfg.local_steps * hp.client_lr)
        # Delta c_k = c_k+ - c_k = -c + (w - w_k) / (tau eta_l)
        extra = {"c_delta": jax.tree.map(lambda d, cc: d * scale - cc, delta, c)}
        if loss_before:  # for aggregation rules that read the losses
            extra["loss_before"] = client_loss(model, state.params, state.model_state,
                                               data.train, k)[0]
        if loss_after:
            extra["loss_after"] = client_loss(model, res.params, res.state, data.train, k)[0]
        return ClientUpdate(delta=delta, model_state=res.state, num_samples=data.train.count[k],
                            loss=res.loss, extra=extra)

    return local


def scaffold_post(old, new, upd, idx, valid, w, hp):
    """Control-variate updates after the server step (masked scatter at the cohort)."""
    m = old.extra["c_clients"]
    num = jax.tree.leaves(m)[0].shape[0]

    def mask(d):
        return jnp.where(valid.reshape((-1,) + (1,) * (d.ndim - 1)), d, 0.0)

    dc = jax.tree.map(mask, upd.extra["c_delta"])
    c = jax.tree.map(lambda a, d: a + jnp.sum(d, axis=0) / num, old.extra["c"], dc)
    c_clients = jax.tree.map(lambda a, d: a.at[idx].add(d), m, dc)
    return new.replace(extra={**new.extra, "c": c, "c_clients": c_clients})


@register("scaffold")
def scaffold(model: Model, cfg: RunConfig) -> FederatedAlgorithm:
    selector = make_selector(model, cfg)
    weights, before, after = make_weights(cfg)

    def init(key, data, hp):
        k_model, k_sel = jax.random.split(key)
        params, mstate = model.init(k_model)
        zeros = jax.tree.map(jnp.zeros_like, params)
        extra = {"c": zeros,  # like params
                 "c_clients": jax.tree.map(  # [M, ...] like params
                     lambda a: jnp.zeros((data.num_clients, *a.shape), a.dtype), params)}
        state = init_state(params, mstate, server_optimizer(cfg.server_opt, hp),
                           data.num_clients, extra)
        return attach_selector(state, selector, k_sel, data, hp)

    rnd = make_round(select=selector, local=scaffold_local(model, cfg, before, after),
                     weights=weights, post=scaffold_post, corrupt=byzantine,
                     tx=lambda hp: server_optimizer(cfg.server_opt, hp))
    return FederatedAlgorithm("scaffold", init, rnd, global_evaluator(model))
