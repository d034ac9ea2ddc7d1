"""Aggregation weight rules: `WeightRule(fn(updates, idx, valid, state, hp) -> w [m], needs)`.

The server's pseudo-gradient is sum_k w_k * Delta_k with Delta_k = w - w_k over the cohort
slots; invalid slots (see `selection`) must get w_k = 0, which `masked_normalize` ensures.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ..core.capabilities import capable, with_capability
from ..core.fields import component, option
from ..core.parts import WeightRule
from ..core.registry import Registry
from .fednova import FEDNOVA_RULE

# The weight rules that read `hp.exp_alpha` (plain, and scaled by the data sizes n_i).
EXP_ALPHA_RULES = ("exp-alpha", "exp-alpha-n")
EXP_ALPHA = option("exp_alpha", 0.2, "Exp-alpha temperature alpha in rho_i ∝ "
                   "exp((F_i(w_i) - F_i(w))/alpha) (--aggregation exp-alpha|exp-alpha-n)",
                   applies=component("aggregation", *EXP_ALPHA_RULES), tunable=True, gt=0)
option("aggregation", "proportional", "aggregation weight rule",
       registry="aggregation", group="algorithm",
       applies=capable("aggregation", "{alg} computes its own aggregation weights"),
       needs=capable("fednova", unless=lambda cfg: cfg.aggregation != "fednova",
                     reason=lambda cfg: "--aggregation fednova needs --algorithm "
                     f"{', '.join(with_capability('fednova'))} (their clients report FedNova's "
                     f"a_k); not {cfg.algorithm}"))


def masked_normalize(raw: jax.Array, valid: jax.Array) -> jax.Array:
    """raw * valid / sum(raw * valid), and zeros if nothing is valid."""
    r = jnp.where(valid, raw, 0.0)
    tot = jnp.sum(r)
    return jnp.where(tot > 0, r / jnp.where(tot > 0, tot, 1.0), 0.0)


def proportional(num_samples: jax.Array, valid: jax.Array) -> jax.Array:
    """FedAvg weights n_k / sum n_j over the valid cohort slots (McMahan et al. 2017)."""
    return masked_normalize(num_samples.astype(jnp.float32), valid)


def uniform_weights(valid: jax.Array) -> jax.Array:
    """1/m' for each of the m' valid cohort slots."""
    return masked_normalize(jnp.ones(valid.shape, jnp.float32), valid)


# --- Exp-alpha -------------------------------------------------------------------

def masked_softmax(logits: jax.Array, valid: jax.Array) -> jax.Array:
    """softmax(logits) over the valid slots (0 elsewhere; all zeros if none is valid).

    The largest valid logit is subtracted before `exp`, so gaps of any size (1e4 and more)
    neither overflow nor give NaN: the largest valid slot always has exp(0) = 1.
    """
    z = jnp.where(valid, logits, -jnp.inf)
    top = jnp.max(z)
    top = jnp.where(jnp.isfinite(top), top, 0.0)
    e = jnp.where(valid, jnp.exp(jnp.where(valid, logits - top, 0.0)), 0.0)
    tot = jnp.sum(e)
    return jnp.where(tot > 0, e / jnp.where(tot > 0, tot, 1.0), 0.0)


def exp_alpha(loss_before: jax.Array, loss_after: jax.Array, valid: jax.Array,
              alpha: jax.Array, num_samples: jax.Array | None = None) -> jax.Array:
    """Exp-alpha weights rho_i ∝ exp((F_i(w_i) - F_i(w)) / alpha) over the valid slots.

    Seed paper ("EXP-alpha: Beyond Proportional Aggregation in Federated Learning"): a
    client whose local update lowers its own risk a lot (F_i(w_i) << F_i(w): easy,
    imbalanced or label-flipped data it can memorise) gets an exponentially smaller share.
    With `num_samples` the data-size-scaled form of its Corollary 1.1,
    rho_i ∝ n_i exp((F_i(w_i) - F_i(w)) / alpha), computed as a softmax of
    log n_i + (F_i(w_i) - F_i(w)) / alpha (also overflow-free).

    Args:
      loss_before: [m] F_i(w), each client's train risk at the received global model.
      loss_after: [m] F_i(w_i), its train risk after its local update.
      valid: [m] bool cohort mask; invalid slots get weight 0.
      alpha: [] temperature (> 0); alpha -> inf gives uniform (or proportional) weights.
      num_samples: [m] n_i for the data-size-scaled form, or None.
    """
    return masked_softmax(exp_alpha_logits(loss_before, loss_after, alpha, num_samples), valid)


BOTH = frozenset(("loss_before", "loss_after"))


def exp_alpha_logits(loss_before: jax.Array, loss_after: jax.Array, alpha: jax.Array,
                     num_samples: jax.Array | None = None) -> jax.Array:
    """The per-slot values whose masked softmax `exp_alpha` returns."""
    logits = (loss_after - loss_before) / alpha
    if num_samples is not None:
        logits = logits + jnp.log(jnp.maximum(num_samples.astype(jnp.float32), 1e-30))
    return logits


def log_samples(num_samples: jax.Array) -> jax.Array:
    """log n_k (-inf for n_k = 0): proportional weights as softmax logits."""
    n = num_samples.astype(jnp.float32)
    return jnp.where(n > 0, jnp.log(jnp.maximum(n, 1e-30)), -jnp.inf)


def _exp_alpha_rule(scaled: bool) -> WeightRule:
    def logits(upd, idx, valid, state, hp):
        return exp_alpha_logits(upd.loss_before, upd.loss_after,
                                hp.exp_alpha, upd.num_samples if scaled else None)

    def rule(upd, idx, valid, state, hp):
        return exp_alpha(upd.loss_before, upd.loss_after, valid,
                         hp.exp_alpha, upd.num_samples if scaled else None)

    return WeightRule(rule, BOTH, logits)


# `--aggregation` name -> WeightRule (the rules of FedAvg-style algorithms)
AGGREGATIONS = Registry("aggregation", {
    "proportional": WeightRule(
        lambda upd, idx, valid, state, hp: proportional(upd.num_samples, valid),
        logits=lambda upd, idx, valid, state, hp: log_samples(upd.num_samples)),
    "uniform": WeightRule(
        lambda upd, idx, valid, state, hp: uniform_weights(valid),
        logits=lambda upd, idx, valid, state, hp: jnp.zeros(valid.shape, jnp.float32)),
    EXP_ALPHA_RULES[0]: _exp_alpha_rule(False),
    EXP_ALPHA_RULES[1]: _exp_alpha_rule(True),
    "fednova": FEDNOVA_RULE,  # normalised averaging (fednova.py; fedavg/fedprox local)
})


def weight_rule(opts) -> WeightRule:
    """The `WeightRule` named by `opts.aggregation` (FedAvg-style algorithms; `opts`: options
    that declare `aggregation`)."""
    return AGGREGATIONS.get(opts.aggregation)
