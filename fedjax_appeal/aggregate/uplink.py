"""The uplink hook of a round: compression of what clients send, then DP aggregation.

`make_round(uplink=...)` calls, inside the jitted round and without a host sync,

    upd, mem, metrics = uplink.send(upd, idx, valid, key, mem, hp)
    pseudo, w, mem, metrics = uplink.aggregate(upd, w, valid, key, mem, hp)

with `mem = state.uplink`, an `UplinkMemory`:

    client   every client's compressor state stacked [N, ...] (error-feedback residuals),
             gathered for the cohort by client id and scattered back for the valid slots
             (clients outside the cohort keep theirs); None without compression
    clip     [] the current clip norm C (adaptive DP clipping only; else None)

`send` compresses each client's flattened Delta_k (`local/compress.py`) and reports
`bits_up`, the bits the valid slots sent this round. `aggregate` (DP only; None leaves the
round's weighted sum) clips, adds noise and divides by the expected cohort size
(`privacy.py`): compression runs before clipping, so the sensitivity stays C. The
uplink runs the cohort unchunked (it needs every Delta_k at once).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax.flatten_util import ravel_pytree

from ..core.config import Options, fields_in
from ..local import compress
from . import privacy

# The configuration fields the uplink reads: compression and DP (`RunConfig.view`); `check`
# also reads the cohort layout.
OPTIONS = (*fields_in("uplink"), "cohort")
CHECK_OPTIONS = ("compress", "client_chunk")


class UplinkMemory(NamedTuple):
    """The uplink's state across rounds (`ServerState.uplink`; see the module docstring)."""

    client: Any = None  # [N, ...] every client's compressor state, or None
    clip: jax.Array | None = None  # [] float32 adaptive clip norm C, or None


class Uplink(NamedTuple):
    """init(params, num_clients, hp) -> mem; send / aggregate as in the module docstring."""

    init: Callable[[Any, int, Any], UplinkMemory]
    send: Callable | None
    aggregate: Callable | None


def _rows(valid: jax.Array, a: jax.Array) -> jax.Array:
    return valid.reshape((-1,) + (1,) * (a.ndim - 1))


def make_uplink(opts: Options) -> Uplink | None:
    """The uplink of `opts` (`--compress`, `--dp`), or None when both are off."""
    dp = opts.dp
    comp_on = opts.compress != "none"
    comp_opts = opts.view(compress.OPTIONS, "compression")
    if dp == "off" and not comp_on:
        return None
    adaptive = dp == "adaptive"
    denom = float(opts.cohort)  # q N, the expected cohort size (fixed-denominator estimator)

    def init(params, n, hp):
        client = clip = None
        if comp_on:
            d = ravel_pytree(params)[0].shape[0]
            state = compress.from_config(comp_opts, d).init(d)
            client = jax.tree.map(lambda a: jnp.broadcast_to(a, (n, *a.shape)), state)
        if adaptive:
            clip = jnp.asarray(hp.dp_clip, jnp.float32)
        return UplinkMemory(client, clip)

    def send(upd, idx, valid, key, mem, hp):
        first = jax.tree.map(lambda a: a[0], upd.delta)
        flat0, unravel = ravel_pytree(first)
        d = flat0.shape[0]
        comp = compress.from_config(comp_opts, d)
        flat = jax.vmap(lambda t: ravel_pytree(t)[0])(upd.delta)
        own = jax.tree.map(lambda a: a[idx], mem.client)
        sent, new = jax.vmap(comp.update)(flat, own, jax.random.split(key, idx.shape[0]))
        new = jax.tree.map(lambda n_, o: jnp.where(_rows(valid, n_), n_, o), new, own)
        mem = mem._replace(client=jax.tree.map(lambda full, rows: full.at[idx].set(rows),
                                               mem.client, new))
        bits = jnp.float32(comp.bits(d)) * jnp.sum(valid).astype(jnp.float32)
        return upd._replace(delta=jax.vmap(unravel)(sent)), mem, {"bits_up": bits}

    def aggregate(upd, w, valid, key, mem, hp):
        clip = mem.clip if adaptive else hp.dp_clip
        sigma_b = privacy.count_noise(hp, opts.cohort)
        sigma = privacy.delta_noise_multiplier(hp.dp_noise, sigma_b, adaptive)
        k_sum, k_count = jax.random.split(key)
        pseudo, norms = privacy.dp_sum(upd.delta, valid, k_sum, clip, sigma, denom)
        nv = jnp.maximum(jnp.sum(valid), 1).astype(jnp.float32)
        metrics = {"dp_clip": clip,
                   "dp_clipped": jnp.sum(valid & (norms > clip)).astype(jnp.float32) / nv,
                   "dp_noise_std": sigma * clip / denom}
        if adaptive:
            new_clip, b = privacy.adaptive_clip(clip, norms, valid, k_count, hp, sigma_b, denom)
            mem = mem._replace(clip=new_clip)
            metrics["dp_unclipped_share"] = b
        return pseudo, valid.astype(jnp.float32) / denom, mem, metrics

    return Uplink(init, send if comp_on else None, aggregate if dp != "off" else None)


def check(opts: Options) -> None:
    """One-line `ConfigError`s of compression combinations (the options' own choices and
    ranges are declared in `core/config.py`)."""
    from ..core.config import ConfigError

    if opts.compress == "none":
        return
    if opts.client_chunk > 0:
        raise ConfigError(f"--compress {opts.compress} needs the whole cohort in one vmap: use "
                          "--client-chunk 0 or -1")
