"""Cohort selectors: `select(key, pool, ...) -> (idx [m], valid [m])`.

A selector returns m client indices and a validity mask. When fewer than m clients are
available, the surplus slots hold unavailable clients with `valid = False`; the round gives
them zero aggregation weight (masks, never reshapes), so every round has the same shapes.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


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


SELECTORS = ("random",)
# --- issue 4: submodular / loss-aware selectors (see `selectors.py`, `submodular.py`) ---
SELECTORS = SELECTORS + ("poc", "divfl", "subtrunc", "unionfl")
from .submodular import (  # noqa: E402  (public, jit-able selection without a simulation)
    facility_location,
    greedy,
    stochastic_facility_location,
    stochastic_facility_location_features,
)

__all__ = ["uniform", "weighted", "make_selector", "SELECTORS", "facility_location",
           "stochastic_facility_location", "stochastic_facility_location_features", "greedy"]


def make_selector(model, cfg):
    """The `round.Selector` named by `cfg.selector` for a cohort of `cfg.cohort`."""
    from .config import ConfigError
    from .round import uniform_selector

    if cfg.selector == "random":
        return uniform_selector(cfg.cohort)
    if cfg.selector in SELECTORS:  # issue 4
        from .selectors import build_selector

        return build_selector(model, cfg)
    raise ConfigError(f"unknown selector '{cfg.selector}'; choose one of: {', '.join(SELECTORS)}")
