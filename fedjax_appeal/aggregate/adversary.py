"""Byzantine clients: what they send instead of an honest update (a `corrupt` hook).

A Byzantine client (tag `data.info["byzantine"]`) reports its losses multiplied by
`hp.byzantine_loss_scale` and sends Delta_k + sigma * xi with xi ~ N(0, I) and
sigma = `hp.byzantine_noise` (the MaxFL robustness experiment's "updates mixed with
Gaussian noise, inflated loss").
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ..core.capabilities import capable, supports
from ..core.fields import option, when
from ..core.round import ClientUpdate

# Byzantine clients: their fraction switches them on (for an algorithm with the hook), and
# their tunables apply only then
BYZANTINE_FRACTION = option(
    "byzantine_fraction", 0.0, "fraction of seen clients that are Byzantine (inflated losses, "
    "noisy updates)", group="federation", ge=0, le=1, data=True,
    needs=capable("byzantine", "{alg} has no Byzantine hook", "use --byzantine-fraction 0 or a "
                  "synchronous algorithm", unless=lambda cfg: cfg.byzantine_fraction == 0))
BYZANTINE = when(lambda cfg: cfg.byzantine_fraction > 0 and supports(cfg.algorithm).byzantine,
                 "it configures Byzantine clients (--byzantine-fraction > 0)")
NOISE = option("byzantine_noise", 1.0, "std of the Gaussian noise Byzantine clients add to "
               "updates", applies=BYZANTINE, tunable=True, group="federation")
LOSS_SCALE = option("byzantine_loss_scale", 10.0, "factor by which Byzantine clients inflate "
                    "the losses they report", applies=BYZANTINE, tunable=True,
                    group="federation")

def byzantine(upd: ClientUpdate, idx, valid, key, data, hp) -> ClientUpdate:
    """`make_round(corrupt=byzantine)`; a no-op when the data carry no Byzantine tags."""
    if "byzantine" not in data.info:
        return upd
    bad = data.info["byzantine"][idx]  # [m] bool
    leaves, treedef = jax.tree.flatten(upd.delta)
    keys = jax.random.split(key, len(leaves))
    noisy = [d + jnp.where(bad.reshape((-1,) + (1,) * (d.ndim - 1)),
                           hp.byzantine_noise * jax.random.normal(k, d.shape, d.dtype), 0.0)
             for d, k in zip(leaves, keys, strict=True)]
    scale = jnp.where(bad, hp.byzantine_loss_scale, 1.0)
    def inflate(v):  # the loss reports the rule asked for (None when it asked for none)
        return None if v is None else v * scale

    return upd._replace(delta=jax.tree.unflatten(treedef, noisy), loss=upd.loss * scale,
                        loss_before=inflate(upd.loss_before),
                        loss_after=inflate(upd.loss_after))
