"""Cohort selectors: `select(key, pool, ...) -> (idx [m], valid [m])`.

A selector returns m client indices and a validity mask. When fewer than m clients are
available, the surplus slots hold unavailable clients with `valid = False`; the round gives
them zero aggregation weight (masks, never reshapes), so every round has the same shapes.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ..core.config import ConfigError
from ..data import heterogeneity as het


def uniform(key: jax.Array, pool: jax.Array, m: int) -> tuple[jax.Array, jax.Array]:
    """m clients uniformly without replacement from the available pool (`pool` [M] bool).

    Uses the top-m of i.i.d. uniform scores restricted to the pool, which is a uniform
    m-subset of the available clients; unavailable clients only fill surplus slots.
    """
    scores = jax.random.uniform(key, pool.shape)
    scores = jnp.where(pool, scores, -1.0 - scores)
    _, idx = jax.lax.top_k(scores, m)
    return idx, pool[idx]


def weighted(key: jax.Array, pool: jax.Array, m: int, weights: jax.Array
             ) -> tuple[jax.Array, jax.Array]:
    """m clients without replacement, successive draws proportional to `weights`.

    Gumbel top-k: the top m of log(w_k) + Gumbel noise is a draw of m items without
    replacement with probabilities proportional to w (as `numpy.random.choice(replace=False,
    p=w)`). Unavailable clients only fill surplus slots.
    """
    g = jax.random.gumbel(key, pool.shape)
    scores = jnp.log(jnp.maximum(weights, 1e-30)) + g
    scores = jnp.where(pool, scores, -1e30 + g)
    _, idx = jax.lax.top_k(scores, m)
    return idx, pool[idx]


# --- submodular / loss-aware selectors (see `selectors.py`, `submodular.py`) ---
from .submodular import (  # noqa: E402  (public, jit-able selection without a simulation)
    facility_location,
    greedy,
    stochastic_facility_location,
    stochastic_facility_location_features,
)

__all__ = ["uniform", "weighted", "facility_location",
           "stochastic_facility_location", "stochastic_facility_location_features", "greedy"]


# --- stratified cohorts (deterministic number of clients per group) ---------------

def stratified(key: jax.Array, pool: jax.Array, groups: jax.Array, counts: tuple[int, ...]
               ) -> tuple[jax.Array, jax.Array]:
    """counts[g] clients uniformly without replacement from the available members of group g.

    Models the Exp-alpha seed's cohorts of a fixed make-up (e.g. 2 label-flipped out of 6,
    or 4 balanced + 3 + 3 imbalanced clients per round). A group with too few available
    members fills its surplus slots with invalid ones (mask False).
    """
    idx, valid = [], []
    for g, (c, k) in enumerate(zip(counts, jax.random.split(key, len(counts)), strict=True)):
        if c == 0:
            continue
        member = pool & (groups == g)
        scores = jax.random.uniform(k, pool.shape)
        scores = jnp.where(member, scores, -1.0 - scores)
        _, i = jax.lax.top_k(scores, c)
        idx.append(i)
        valid.append(member[i])
    return jnp.concatenate(idx), jnp.concatenate(valid)




def stratified_counts(opts) -> tuple[int, ...]:
    """Per-group cohort slots: `opts.cohort_groups`, or derived from the configured mix."""
    if opts.cohort_groups:
        try:
            counts = tuple(int(c) for c in opts.cohort_groups.split(","))
        except ValueError:
            raise ConfigError(f"--cohort-groups must be comma-separated integers (got "
                              f"{opts.cohort_groups!r})") from None
    elif opts.imbalance_ratios and opts.imbalance_ratios != "random":
        comp = het.parse_ratio_spec(opts.imbalance_ratios)
        counts = tuple(het.cohort_group_counts([k for _, k in comp], opts.cohort))
    elif opts.label_flip_fraction > 0:
        nf = int(round(opts.label_flip_fraction * opts.cohort))
        counts = (opts.cohort - nf, nf)
    else:
        raise ConfigError("--selector stratified needs --cohort-groups, an --imbalance-ratios "
                          "composition, or --label-flip-fraction")
    if sum(counts) != opts.cohort or min(counts) < 0:
        raise ConfigError(f"--cohort-groups {counts} must be >= 0 and sum to --cohort "
                          f"{opts.cohort}")
    return counts


# --- Exp-alpha: label flipping drawn per round (--flip-protocol bernoulli|fixed) -----------

def flip_cohort(key: jax.Array, pool: jax.Array, m: int, p: float, protocol: str
                ) -> tuple[jax.Array, jax.Array]:
    """A uniform cohort of m real clients, each served by its label-flipped copy when drawn.

    The data hold every real client k < M twice: clean as k and label-flipped as M + k
    (`pool` has 2M entries). The Exp-alpha paper's Table 2 flips each sampled client with
    probability p ('bernoulli'); its Fig. 2b flips a fixed round(p m) of the m ('fixed').
    Returns (idx [m] into the 2M clients, valid [m]).
    """
    half = pool.shape[0] // 2
    k_sel, k_flip = jax.random.split(key)
    idx, valid = uniform(k_sel, pool[:half], m)
    if protocol == "bernoulli":
        flip = jax.random.bernoulli(k_flip, p, (m,))
    elif protocol == "fixed":
        n = int(round(p * m))
        flip = jnp.zeros(m, bool).at[jax.random.permutation(k_flip, m)[:n]].set(True)
    else:
        raise ValueError(f"unknown flip protocol {protocol!r}")
    return idx + half * flip.astype(idx.dtype), valid
