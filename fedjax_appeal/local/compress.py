"""Compression of what a client sends: transforms of its flattened update, optax-style.

A `Compressor` is a pure pair on one client's flattened update v [d]:

    state = init(d)                             # the client's own state (a pytree)
    sent, state = update(v, state, key)         # what goes up the wire, the new state
    bits(d) -> int                              # bits of one message (static)

The round vmaps `update` over the cohort; the server keeps every client's state stacked as
[N, ...] and gathers / scatters the cohort's rows by client id (`uplink.py`), so a client's
state persists across the rounds it sits out.

  * `qsgd(s, bucket)`: unbiased stochastic quantisation of Alistarh et al. 2017 ("QSGD:
    Communication-Efficient SGD via Gradient Quantization and Encoding"): in each bucket of
    `bucket` coordinates with norm ||v||, coordinate i becomes ||v|| sign(v_i) xi_i / s with
    xi_i = l + Bernoulli(s |v_i| / ||v|| - l), l = floor(s |v_i| / ||v||), so E[Q(v)] = v.
    Bits: the fixed-length code of each bucket (32 for the norm, 1 sign bit and
    ceil(log2(s + 1)) bits for the level of each coordinate); the paper's Elias coding
    sends fewer, so this is an upper bound on QSGD's message.
  * `top_k(k)`: the k coordinates of largest magnitude (Stich et al. 2018, "Sparsified SGD
    with Memory"). Bits: k values (32) and k indices (ceil(log2 d)).
  * `error_feedback(inner)`: the client adds its residual e to the update, sends
    inner(v + e) and keeps e' = v + e - inner(v + e) (Stich et al. 2018; Karimireddy et al.
    2019, "Error Feedback Fixes SignSGD"); it composes with any compressor.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from ..core.capabilities import capable
from ..core.fields import component, option


class Compressor(NamedTuple):
    """A client-side compression transform (see the module docstring)."""

    init: Callable[[int], Any]
    update: Callable[[jax.Array, Any, jax.Array], tuple[jax.Array, Any]]
    bits: Callable[[int], int]


class EmptyState(NamedTuple):
    """State of a stateless compressor."""


class ResidualState(NamedTuple):
    """Error feedback: what the client has not sent yet, e [d]."""

    residual: jax.Array


def identity() -> Compressor:
    """Send the update as float32 (32 bits a coordinate)."""
    return Compressor(lambda d: EmptyState(), lambda v, s, k: (v, s), lambda d: 32 * d)


def level_bits(s: int) -> int:
    """Bits of one quantisation level in 0..s."""
    return max(1, math.ceil(math.log2(s + 1)))


def qsgd(s: int, bucket: int = 512) -> Compressor:
    """Stochastic quantisation to s levels per bucket (unbiased; Alistarh et al. 2017)."""
    if s < 1 or bucket < 1:
        raise ValueError(f"qsgd needs s >= 1 and bucket >= 1 (got s={s}, bucket={bucket})")

    def update(v, state, key):
        d = v.shape[0]
        b = min(bucket, d)
        n = -(-d // b)
        x = jnp.concatenate([v, jnp.zeros((n * b - d,), v.dtype)]).reshape(n, b)
        norm = jnp.linalg.norm(x, axis=1, keepdims=True)
        r = jnp.where(norm > 0, jnp.abs(x) / jnp.where(norm > 0, norm, 1.0), 0.0) * s
        low = jnp.floor(r)
        xi = low + jax.random.bernoulli(key, r - low).astype(v.dtype)
        q = norm * jnp.sign(x) * xi / s
        return q.reshape(-1)[:d], state

    def bits(d):
        b = min(bucket, d)
        return 32 * (-(-d // b)) + d * (1 + level_bits(s))

    return Compressor(lambda d: EmptyState(), update, bits)


def top_k(k: int) -> Compressor:
    """Keep the k coordinates of largest magnitude, zero the rest."""
    if k < 1:
        raise ValueError(f"top_k needs k >= 1 (got {k})")

    def update(v, state, key):
        kk = min(k, v.shape[0])
        _, i = jax.lax.top_k(jnp.abs(v), kk)
        return jnp.zeros_like(v).at[i].set(v[i]), state

    def bits(d):
        kk = min(k, d)
        return kk * (32 + max(1, math.ceil(math.log2(d))))

    return Compressor(lambda d: EmptyState(), update, bits)


def error_feedback(inner: Compressor) -> Compressor:
    """`inner` with the client's residual added before and kept after (error feedback)."""

    def init(d):
        return (ResidualState(jnp.zeros((d,), jnp.float32)), inner.init(d))

    def update(v, state, key):
        ef, inner_state = state
        acc = v + ef.residual
        sent, inner_state = inner.update(acc, inner_state, key)
        return sent, (ResidualState(acc - sent), inner_state)

    return Compressor(init, update, inner.bits)


# The compressor (for algorithms whose uploads go through the uplink) and the options of
# each one.
option("compress", "none", "compression of the clients' updates", ("none", "qsgd", "topk"),
       group="uplink", needs=capable(
           "uplink", "{alg} does not compress its uploads", "use --compress none",
           unless=lambda cfg: cfg.compress == "none"))
QSGD, TOPK = component("compress", "qsgd"), component("compress", "topk")
option("compress_levels", 4, "qsgd: quantisation levels s per bucket", applies=QSGD,
       group="uplink", ge=1)
option("compress_bucket", 512, "qsgd: coordinates per bucket (one norm sent per bucket)",
       applies=QSGD, group="uplink", ge=1)
option("compress_fraction", 0.01, "topk: share of the coordinates sent (k = max(1, round("
       "fraction x d)))", applies=TOPK, group="uplink", gt=0, le=1)
option("compress_feedback", "auto", "error feedback (per-client residual kept across rounds): "
       "auto = on for topk, off for qsgd", ("auto", "on", "off"),
       applies=component("compress", "qsgd", "topk"), group="uplink")
# The configuration fields of `from_config` (`RunConfig.view`).
OPTIONS = ("compress", "compress_levels", "compress_bucket", "compress_fraction",
           "compress_feedback")


def topk_count(fraction: float, d: int) -> int:
    """k of `--compress-fraction`: max(1, round(fraction x d))."""
    return max(1, int(round(fraction * d)))


def from_config(opts, d: int) -> Compressor | None:
    """The compressor of `opts.compress` for updates of d coordinates (None = off); `opts`:
    options declaring `OPTIONS`."""
    if opts.compress == "none":
        return None
    if opts.compress == "qsgd":
        base = qsgd(opts.compress_levels, opts.compress_bucket)
    elif opts.compress == "topk":
        base = top_k(topk_count(opts.compress_fraction, d))
    else:
        raise ValueError(f"unknown compression {opts.compress!r}")
    fb = opts.compress_feedback
    on = fb == "on" or (fb == "auto" and opts.compress == "topk")
    return error_feedback(base) if on else base
