"""q-FFL / q-FedAvg (Li, Sanjabi, Beirami, Smith, ICLR 2020, "Fair Resource Allocation in
Federated Learning", Algorithm 2), and `afl`: q-FFL with a large q as the stand-in for AFL
(Mohri et al. 2019, "Agnostic Federated Learning"), as in the MaxFL fairness table.

Round (eta = `HParams.client_lr`, the paper's L = 1/eta; q = `HParams.qffl_q`, or
`HParams.afl_q` (default 10) for `afl`):
  1. each sampled client reports F_k = F_k(w), its train loss at the received model
     (`loss_before`; Byzantine clients inflate it), runs tau local SGD steps to w_k and
     sends Delta w_k = w - w_k;
  2. Delta_k = F_k^q Delta w_k / eta,
     h_k = q F_k^(q-1) ||Delta w_k / eta||^2 + F_k^q / eta;
  3. the server steps w <- w - sum_k Delta_k / sum_k h_k (over the valid cohort slots).

Step 3 is `make_round` with aggregation weights a_k = (F_k^q / eta) / sum_j h_j on the
Delta w_k and the configured server optimizer (`--server-opt sgd` with `--server-lr 1`,
the defaults, is exactly the paper's step; another server lr scales it).

Numerics: F_k is clipped below at 1e-12 (so F_k^(q-1) stays finite for q < 1 and F_k = 0),
and F_k^q is computed as exp(q log F_k - max_j q log F_j): the ratio sum Delta / sum h is
unchanged by the common factor, and nothing overflows for large q.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ..core.capabilities import Supports, algorithm
from ..core.config import Options
from ..core.fields import option
from ..core.models import Model
from ..core.round import WeightRule
from .base import compose, register
from .fedavg import sgd_local

QFFL, AFL = algorithm("qffl"), algorithm("afl")
Q = option("qffl_q", 1.0, "q-FFL fairness exponent q (q = 0 is uniform FedAvg)", applies=QFFL,
           tunable=True, ge=0)
AFL_Q = option("afl_q", 10.0, "q of the `afl` algorithm (q-FFL used as the AFL stand-in)",
               applies=AFL, tunable=True, ge=0)

LOSS_FLOOR = 1e-12


def qffl_weights(loss: jax.Array, sq_norm: jax.Array, valid: jax.Array, q: jax.Array,
                 lr: jax.Array) -> jax.Array:
    """Weights a_k with sum_k a_k Delta w_k = sum_k Delta_k / sum_k h_k.

    Args:
      loss: [m] F_k at the received model.
      sq_norm: [m] ||Delta w_k||^2.
      valid: [m] cohort slots that count.
      q, lr: the fairness exponent and the local learning rate eta.
    """
    f = jnp.maximum(loss, LOSS_FLOOR)
    logp = jnp.where(valid, q * jnp.log(f), -jnp.inf)
    fq = jnp.where(valid, jnp.exp(logp - jnp.max(jnp.where(valid, logp, 0.0))), 0.0)
    # h_k = F_k^q (q ||Delta w_k/eta||^2 / F_k + 1/eta), in units of the common factor
    h = fq * (q * sq_norm / (lr * lr) / f + 1.0 / lr)
    tot = jnp.sum(h)
    return jnp.where(tot > 0, fq / lr / jnp.where(tot > 0, tot, 1.0), 0.0)


def sq_norms(delta) -> jax.Array:
    """[m] squared norm of each cohort slot's update (leading axis of every leaf)."""
    return sum(jnp.sum(d.reshape(d.shape[0], -1) ** 2, axis=1) for d in jax.tree.leaves(delta))


def qffl_rule(q_of) -> WeightRule:
    """The q-FFL weights with q = q_of(hp); they read F_k(w) and ||Delta w_k||^2 (a chunked
    round sends no deltas, only their squared norms: see cohort.py)."""

    def fn(upd, idx, valid, state, hp):
        sq = upd.delta_sq_norm if upd.delta is None else sq_norms(upd.delta)
        return qffl_weights(upd.loss_before, sq, valid, q_of(hp), hp.client_lr)

    return WeightRule(fn, needs=frozenset({"loss_before"}))


QFFL_SUPPORTS = Supports(aggregation=False, varied_steps=True, parts=("sgd_local",))


@register(QFFL, QFFL_SUPPORTS)
def qffl(model: Model, opts: Options, executor=None):
    return compose("qffl", model, opts, local=sgd_local(model, opts),
                   weights=qffl_rule(lambda hp: hp.qffl_q), executor=executor)


@register(AFL, QFFL_SUPPORTS)
def afl(model: Model, opts: Options, executor=None):
    return compose("afl", model, opts, local=sgd_local(model, opts),
                   weights=qffl_rule(lambda hp: hp.afl_q), executor=executor)
