"""MW-Fed (Blum, Haghtalab, Phillips, Shao, ICML 2021, "One for One, or All for All:
Equilibria and Optimality of Collaboration in Federated Learning"): multiplicative weights
over clients, so that clients whose requirement is unmet gain weight in the aggregation.

The paper's MW-FED raises, multiplicatively, the contribution of the agents whose accuracy
constraint is not yet met. As a federated-training baseline (as in the MaxFL paper) we
implement it as follows:

  * requirement rho_k exactly as MaxFL's (`requirement.py`): by default F_k(w_hat_k), the
    train loss of client k's solo model (`--rho-steps` local SGD steps from the initial
    global model with lr `--solo-lr`, or the client lr), computed once in init and kept in
    `state.rho` [M]; a constant or a file with `--requirement`;
  * weights v_k > 0, all 1 at the start, kept as log v_k in `MWFedState.logv` [M]
    (`state.algo`);
  * round: the sampled clients report F_k(w), their train loss at the received model
    (`loss_before`; Byzantine clients inflate it), run tau local SGD steps and send
    Delta_k = w - w_k; the server aggregates with weights
        a_k = v_k n_k / sum_{j in S} v_j n_j
    (over the valid cohort slots) and the configured server optimizer, then updates
        v_k <- v_k * exp(eta_mw * 1[F_k(w) > rho_k])   for every sampled client k,
    eta_mw = `HParams.mwfed_eta` (eta_mw = 0 is FedAvg).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from ..core.capabilities import algorithm
from ..core.config import Options
from ..core.fields import option
from ..core.models import Model
from ..core.round import WeightRule
from .base import compose, register
from .fedavg import sgd_local
from .maxfl import MAXFL_SUPPORTS, requirement_init, requirement_pre_init

MWFED = algorithm("mwfed")
ETA = option("mwfed_eta", 1.0, "MW-Fed multiplicative-weights step: v_k *= exp(eta) when the "
             "client's requirement is unmet", applies=MWFED, tunable=True, ge=0)


class MWFedState(NamedTuple):
    """MW-Fed's own server state (`state.algo`; its requirements rho_k are the shared
    `state.rho` of the requirement algorithms)."""

    logv: jax.Array  # [M] float32, log v_k


def mw_weights(logv: jax.Array, num_samples: jax.Array, valid: jax.Array) -> jax.Array:
    """a_k = v_k n_k / sum_valid v_j n_j from log v_k (stable; zero for invalid slots)."""
    s = jnp.where(valid, logv + jnp.log(num_samples.astype(jnp.float32)), -jnp.inf)
    top = jnp.max(jnp.where(valid, s, 0.0))
    r = jnp.where(valid, jnp.exp(s - top), 0.0)
    tot = jnp.sum(r)
    return jnp.where(tot > 0, r / jnp.where(tot > 0, tot, 1.0), 0.0)


def mw_update(logv: jax.Array, idx: jax.Array, valid: jax.Array, loss: jax.Array,
              rho: jax.Array, eta: jax.Array) -> jax.Array:
    """log v_k += eta * 1[F_k(w) > rho_k] for the valid sampled clients."""
    unmet = valid & (loss > rho[idx])
    return logv.at[idx].add(jnp.where(unmet, eta, 0.0))


MW_RULE = WeightRule(  # F_k(w) is reported for `post`, not for the weights
    lambda upd, idx, valid, state, hp: mw_weights(state.algo.logv[idx],
                                                  upd.num_samples, valid),
    needs=frozenset({"loss_before"}))


def mw_post(old, new, upd, idx, valid, w, hp):
    logv = mw_update(old.algo.logv, idx, valid, upd.loss_before, old.rho, hp.mwfed_eta)
    return new.replace(algo=MWFedState(logv))


@register(MWFED, MAXFL_SUPPORTS)
def mwfed(model: Model, opts: Options, executor=None):
    req_init = requirement_init(model, opts)

    def init_fields(key, params, mstate, data, hp, pre=None):  # [M] log v_k, rho_k
        return {"algo": MWFedState(jnp.zeros((data.num_clients,), jnp.float32)),
                **req_init(key, params, mstate, data, hp, pre)}

    return compose("mwfed", model, opts, local=sgd_local(model, opts), weights=MW_RULE,
                   post=mw_post, init_fields=init_fields, executor=executor,
                   pre_init=requirement_pre_init(model, opts))
