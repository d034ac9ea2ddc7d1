"""User-level DP-FedAvg: per-client clipping, Gaussian noise on the sum, Poisson cohorts.

McMahan, Ramage, Talwar, Zhang 2018 ("Learning Differentially Private Recurrent Language
Models"), with the adaptive clipping of Andrew, Thakkar, McMahan, Ramaswamy 2021
("Differentially Private Learning with Adaptive Clipping"). One round:

  1. the cohort is drawn by Poisson sampling (each client independently with rate
     q = cohort / N; the vmapped cohort is a padded buffer of `poisson_buffer` slots with a
     validity mask) or as exactly `cohort` clients ("fixed");
  2. each client's update Delta_k is clipped to L2 norm C: Delta_k min(1, C / ||Delta_k||);
  3. the server adds N(0, sigma^2 C^2 I) to the SUM of the clipped updates of the valid
     slots and divides by the EXPECTED cohort size q N (= `cohort`): the fixed-denominator
     estimator of McMahan et al., whose sensitivity to adding or removing one user is C / (q N)
     whatever the realised cohort size (dividing by the realised size would leak it);
  4. the server optimizer consumes this noisy average as its pseudo-gradient, so DP
     composes with FedAvgM / FedAdam / FedYogi (post-processing).

Adaptive clipping (Andrew et al., Algorithm 1): each client also reports the bit
b_k = [||Delta_k|| <= C]; the server forms b = (sum_k b_k + N(0, sigma_b^2)) / (q N) and
updates C <- C exp(-eta_C (b - gamma)), moving C towards the gamma-quantile of the update
norms. Both released sums are Gaussian mechanisms of the same users; with the accounted
noise multiplier z the update sum gets sigma = (z^-2 - (2 sigma_b)^-2)^(-1/2) (their
Theorem 1), so that the pair is exactly as private as one Gaussian mechanism with
multiplier z; this needs 2 sigma_b > z.

Weight rules whose sensitivity C does not bound (sample-proportional, Exp-alpha, q-FFL,
MaxFL, MW-Fed) are refused by `check` with one line: DP runs use `--aggregation uniform`,
whose slot weights are replaced by the fixed 1 / (q N).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from ..core.config import ConfigError, RunConfig, appeal_on
from ..core.parts import Selector

# Models with state besides params (BatchNorm statistics), which clients upload unclipped.
STATEFUL_MODELS = ("cnn_bn", "resnet20")
# Algorithms whose only upload is the model delta with a uniform slot weight.
DP_ALGORITHMS = ("fedavg", "fedprox")


def poisson_buffer(expected: int, n: int, sds: float = 7.0) -> int:
    """Slots of the padded Poisson cohort: expected + 7 standard deviations (+ 2), at most n.

    Binomial(n, q) exceeds its mean by more than 7 standard deviations with probability
    far below 1e-9 (Chernoff), so a realised cohort practically never overflows the buffer;
    if it did, the clients beyond it would be left out of that round.
    """
    q = expected / n
    return min(n, int(math.ceil(expected + sds * math.sqrt(n * q * (1 - q)))) + 2)


def poisson_selector(cfg: RunConfig) -> Selector:
    """Poisson sampling with rate q = cohort / N in a buffer of `poisson_buffer` slots.

    N is the length of the client pool (static), so the buffer's shape is fixed per run.
    """

    def select(key, state, data, hp):
        n = state.pool.shape[0]
        q = cfg.cohort / n
        u = jax.random.uniform(key, state.pool.shape)
        chosen = state.pool & (u < q)
        _, idx = jax.lax.top_k(jnp.where(chosen, 1.0 + u, u), poisson_buffer(cfg.cohort, n))
        return idx, chosen[idx]  # the chosen clients first, then padding slots

    return Selector(lambda key, state, data, hp: {}, select)


def tree_norms(delta) -> jax.Array:
    """[m] L2 norm of each slot's update over all leaves (leading axis m)."""
    sq = sum(jnp.sum(d.reshape(d.shape[0], -1).astype(jnp.float32) ** 2, axis=1)
             for d in jax.tree.leaves(delta))
    return jnp.sqrt(sq)


def clip_factors(norms: jax.Array, clip: jax.Array) -> jax.Array:
    """min(1, C / ||Delta_k||) per slot (1 for a zero update)."""
    return jnp.minimum(1.0, clip / jnp.maximum(norms, 1e-30))


def delta_noise_multiplier(z: jax.Array, count_noise: jax.Array, adaptive: bool) -> jax.Array:
    """Noise multiplier of the update sum: z, or (z^-2 - (2 sigma_b)^-2)^(-1/2) when adaptive."""
    if not adaptive:
        return z
    return (z ** -2.0 - (2.0 * count_noise) ** -2.0) ** -0.5


def count_noise(hp, expected: int) -> jax.Array:
    """sigma_b: `hp.dp_count_noise`, or expected / 20 when it is 0 (Andrew et al.)."""
    return jnp.where(hp.dp_count_noise > 0, hp.dp_count_noise, expected / 20.0)


def dp_sum(delta, valid: jax.Array, key: jax.Array, clip: jax.Array, sigma: jax.Array,
           denom: float):
    """(sum_k valid_k clip(Delta_k) + N(0, sigma^2 C^2 I)) / denom, and the norms [m].

    Args:
      delta: the cohort's updates (leading axis m).
      valid: [m] bool slot mask (padding slots contribute nothing).
      key: the noise key.
      clip: [] clip norm C.
      sigma: [] noise multiplier of the sum.
      denom: the fixed denominator q N (the expected cohort size).
    """
    norms = tree_norms(delta)
    f = jnp.where(valid, clip_factors(norms, clip), 0.0)
    leaves, treedef = jax.tree.flatten(delta)
    keys = jax.random.split(key, len(leaves))
    out = [(jnp.tensordot(f, d, axes=1)
            + sigma * clip * jax.random.normal(k, d.shape[1:], d.dtype)) / denom
           for d, k in zip(leaves, keys, strict=True)]
    return jax.tree.unflatten(treedef, out), norms


def adaptive_clip(clip: jax.Array, norms: jax.Array, valid: jax.Array, key: jax.Array,
                  hp, sigma_b: jax.Array, denom: float) -> tuple[jax.Array, jax.Array]:
    """(next C, noisy unclipped share b) of Andrew et al.'s geometric update."""
    b = jnp.sum(jnp.where(valid, norms <= clip, False).astype(jnp.float32))
    b = (b + sigma_b * jax.random.normal(key, ())) / denom
    return clip * jnp.exp(-hp.dp_clip_lr * (b - hp.dp_quantile)), b


def check(cfg: RunConfig, hp) -> None:
    """One-line `ConfigError`s for DP options and combinations C does not bound."""
    if cfg.dp not in ("off", "fixed", "adaptive"):
        raise ConfigError(f"--dp must be off, fixed or adaptive (got {cfg.dp!r})")
    if cfg.dp_sampling not in ("poisson", "fixed"):
        raise ConfigError(f"--dp-sampling must be poisson or fixed (got {cfg.dp_sampling!r})")
    if cfg.dp == "off":
        return
    if not 0.0 < cfg.dp_delta < 1.0:
        raise ConfigError(f"--dp-delta must lie in (0, 1) (got {cfg.dp_delta}); use less "
                          "than 1 / --clients")
    if cfg.algorithm not in DP_ALGORITHMS:
        raise ConfigError(f"--dp {cfg.dp} supports --algorithm {' or '.join(DP_ALGORITHMS)}: "
                          f"{cfg.algorithm}'s weights or uploads are not bounded by the clip "
                          "norm C")
    if cfg.aggregation != "uniform":
        raise ConfigError(f"--dp {cfg.dp} needs --aggregation uniform: the sensitivity of "
                          f"'{cfg.aggregation}' weights is not bounded by the clip norm C")
    if cfg.selector != "random" or getattr(cfg, "flip_protocol", "static") != "static":
        raise ConfigError(f"--dp {cfg.dp} needs --selector random (and --flip-protocol "
                          "static): other selectors read the clients' data outside the "
                          "accounted mechanism")
    if appeal_on(cfg):
        raise ConfigError(f"--dp {cfg.dp} needs --appeal off: the appeal protocol's solo "
                          "models and opt-out read the clients' data outside the mechanism")
    if cfg.model in STATEFUL_MODELS:
        raise ConfigError(f"--dp {cfg.dp} cannot use --model {cfg.model}: its BatchNorm "
                          "statistics are averaged without clipping or noise; choose a model "
                          "without model state (mlp, cnn, lenet5, logistic)")
    if cfg.byzantine_fraction > 0:
        raise ConfigError(f"--dp {cfg.dp} and --byzantine-fraction cannot be combined")
    if cfg.client_chunk > 0:
        raise ConfigError(f"--dp {cfg.dp} needs the whole cohort in one vmap: use "
                          "--client-chunk 0 or -1")
    if float(hp.dp_clip) <= 0:
        raise ConfigError(f"--dp-clip must be > 0 (got {float(hp.dp_clip)})")
    if float(hp.dp_noise) < 0:
        raise ConfigError(f"--dp-noise must be >= 0 (got {float(hp.dp_noise)})")
    if cfg.dp == "adaptive":
        if not 0.0 <= float(hp.dp_quantile) <= 1.0:
            raise ConfigError(f"--dp-quantile must lie in [0, 1] (got {float(hp.dp_quantile)})")
        if float(hp.dp_clip_lr) < 0 or float(hp.dp_count_noise) < 0:
            raise ConfigError("--dp-clip-lr and --dp-count-noise must be >= 0")
        sb = float(count_noise(hp, cfg.cohort))
        if float(hp.dp_noise) > 0 and not 2 * sb > float(hp.dp_noise):
            raise ConfigError(f"--dp adaptive needs 2 x sigma_b > --dp-noise (sigma_b = {sb:g}, "
                              f"z = {float(hp.dp_noise):g}): raise --dp-count-noise or the "
                              "cohort, or lower --dp-noise")
