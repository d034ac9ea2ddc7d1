"""SCAFFOLD (Karimireddy, Kale, Mohri, Reddi, Stich, Suresh, ICML 2020, "SCAFFOLD: Stochastic
Controlled Averaging for Federated Learning", Algorithm 1 with option II).

State (`ScaffoldState`, in `state.algo`): the server control variate c (like
params) and one control variate per seen client c_k, stacked with a leading M axis (all
zero at the start). Each client reports Delta c_k (`ScaffoldReport`, in
`ClientUpdate.report`).

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

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from ..aggregate.aggregation import weight_rule
from ..core.capabilities import Supports
from ..core.config import Options
from ..core.models import Model
from ..local.client import Trained, local_sgd, tree_sub
from .base import compose, register


class ScaffoldState(NamedTuple):
    """SCAFFOLD's server state (`state.algo`)."""

    c: Any  # the server control variate, like params
    c_clients: Any  # [M, ...] one control variate per seen client, like params


class ScaffoldReport(NamedTuple):
    """What a SCAFFOLD client reports besides its update (`ClientUpdate.report`)."""

    c_delta: Any  # Delta c_k = c_k+ - c_k, like params


def correction(c, c_k):
    """The regulariser <c - c_k, y> (its gradient is the SCAFFOLD correction c - c_k)."""
    corr = jax.tree.map(jnp.subtract, c, c_k)
    return lambda p: sum(jnp.vdot(a, b) for a, b in zip(jax.tree.leaves(corr),
                                                          jax.tree.leaves(p), strict=True))


def scaffold_local(model: Model, opts: Options):
    def local(state, data, k, key, hp):
        st: ScaffoldState = state.algo
        c = st.c
        c_k = jax.tree.map(lambda a: a[k], st.c_clients)
        res = local_sgd(model, state.params, state.model_state, data.train, k, key,
                        hp.client_lr, steps=opts.local_steps, batch_size=opts.batch_size,
                        regularizer=correction(c, c_k))
        delta = tree_sub(state.params, res.params)
        scale = 1.0 / (opts.local_steps * hp.client_lr)
        # Delta c_k = c_k+ - c_k = -c + (w - w_k) / (tau eta_l)
        report = ScaffoldReport(jax.tree.map(lambda d, cc: d * scale - cc, delta, c))
        return Trained((state.params, state.model_state), (res.params, res.state), res.loss,
                       report, delta)

    return local


def scaffold_post(old, new, upd, idx, valid, w, hp):
    """Control-variate updates after the server step (masked scatter at the cohort)."""
    st: ScaffoldState = old.algo
    m = st.c_clients
    num = jax.tree.leaves(m)[0].shape[0]

    def mask(d):
        return jnp.where(valid.reshape((-1,) + (1,) * (d.ndim - 1)), d, 0.0)

    dc = jax.tree.map(mask, upd.report.c_delta)
    c = jax.tree.map(lambda a, d: a + jnp.sum(d, axis=0) / num, st.c, dc)
    c_clients = jax.tree.map(lambda a, d: a.at[idx].add(d), m, dc)
    return new.replace(algo=ScaffoldState(c, c_clients))


def scaffold_init(key, params, mstate, data, hp):
    """c (like params) and c_k ([M, ...] like params), all zero."""
    return {"algo": ScaffoldState(
        jax.tree.map(jnp.zeros_like, params),
        jax.tree.map(lambda a: jnp.zeros((data.num_clients, *a.shape), a.dtype), params))}


SCAFFOLD_SUPPORTS = Supports()


@register("scaffold", SCAFFOLD_SUPPORTS)
def scaffold(model: Model, opts: Options, executor=None):
    return compose("scaffold", model, opts, local=scaffold_local(model, opts),
                   weights=weight_rule(opts), post=scaffold_post, init_fields=scaffold_init,
                   executor=executor)
