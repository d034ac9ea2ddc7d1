"""FedNova's normalised averaging (Wang et al. 2020, "Tackling the Objective Inconsistency
Problem in Heterogeneous Federated Optimization", NeurIPS).

Client k runs tau_k local steps and sends Delta_k = w - w_k. FedNova averages the
normalised updates d_k = Delta_k / a_k, with a_k the l1 norm of the client's aggregation
vector (a_k = tau_k for plain local SGD; a_k = [1 - (1 - eta mu)^tau_k] / (eta mu) for the
FedProx objective, the paper's Sec. 4 and App. F), and moves the server by tau_eff times
their p-weighted mean:

    w <- w - eta_g tau_eff sum_k p_k d_k,   tau_eff = sum_k p_k a_k,   p_k = n_k / sum n_j.

As a weight rule on Delta_k this is w_k = p_k tau_eff / a_k (over the valid cohort slots),
so any server optimizer applies to the normalised pseudo-gradient. With equal tau_k it is
FedAvg's proportional rule. The local objective reports a_k in `fednova_a`
(`algorithms.fedavg.sgd_local`).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ..core.parts import WeightRule


def local_norm(steps, lr, mu=0.0) -> jax.Array:
    """a_k: tau for plain SGD (mu = 0); [1 - (1 - lr mu)^tau] / (lr mu) for FedProx."""
    tau = jnp.asarray(steps, jnp.float32)
    eta_mu = jnp.asarray(lr, jnp.float32) * jnp.asarray(mu, jnp.float32)
    safe = jnp.where(eta_mu > 0, eta_mu, 1.0)
    prox = (1.0 - (1.0 - safe) ** tau) / safe
    return jnp.where(eta_mu > 0, prox, tau)


def fednova_weights(a: jax.Array, num_samples: jax.Array, valid: jax.Array) -> jax.Array:
    """w_k = p_k tau_eff / a_k over the valid slots (0 elsewhere, all 0 if none is valid).

    Args:
      a: [m] normalisers a_k (> 0).
      num_samples: [m] n_k.
      valid: [m] bool cohort mask.
    """
    n = jnp.where(valid, num_samples.astype(jnp.float32), 0.0)
    tot = jnp.sum(n)
    p = jnp.where(tot > 0, n / jnp.where(tot > 0, tot, 1.0), 0.0)
    a = jnp.where(valid, a, 1.0)
    tau_eff = jnp.sum(p * a)
    return jnp.where(valid, p * tau_eff / a, 0.0)


FEDNOVA_RULE = WeightRule(lambda upd, idx, valid, state, hp: fednova_weights(
    upd.fednova_a, upd.num_samples, valid))
