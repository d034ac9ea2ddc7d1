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

Adaptive clipping (Andrew et al., Algorithm 1): each client also reports the centred bit
b_k - 1/2 with b_k = [||Delta_k|| <= C]; the server forms
b = (sum_k (b_k - 1/2) + N(0, sigma_b^2)) / (q N) + 1/2 and updates
C <- C exp(-eta_C (b - gamma)), moving C towards the gamma-quantile of the update norms.
Centring makes the count's sensitivity to adding or removing one user 1/2 (an uncentred
bit moves the sum by 1). Both released sums are Gaussian mechanisms of the same users: the
update sum (sensitivity C, noise sigma C) and the count (sensitivity 1/2, noise sigma_b)
together are one Gaussian mechanism with multiplier (sigma^-2 + (2 sigma_b)^-2)^(-1/2)
(their Theorem 1). With the accounted multiplier z the update sum therefore gets
sigma = (z^-2 - (2 sigma_b)^-2)^(-1/2), so that the pair is exactly as private as one
Gaussian mechanism with multiplier z; this needs 2 sigma_b > z. (TensorFlow Privacy's
quantile estimator centres its bits the same way.)

Poisson cohorts run in a padded buffer of B slots (`poisson_buffer`): B is the smallest
size whose overflow probability P(Binomial(N, q) > B) is at most `OVERFLOW_BOUND` per
round. A round whose draw exceeds B would leave the clients beyond it out, so the report
adds that failure probability to delta (`accounting.overflow_delta`) and every round counts
the clients left out (round metric `dp_overflow`, 0 in practice).

Weight rules whose sensitivity C does not bound (sample-proportional, Exp-alpha, q-FFL,
MaxFL, MW-Fed) are refused by `check` with one line: DP runs use `--aggregation uniform`,
whose slot weights are replaced by the fixed 1 / (q N).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from ..core.capabilities import capable, with_capability
from ..core.config import ConfigError, Options
from ..core.fields import component, option
from ..core.parts import Selector

# user-level DP-FedAvg: on with `--dp fixed|adaptive` (for the algorithms that support it),
# and its options apply only then (the adaptive clipping's only with `--dp adaptive`)
option("dp", "off", "user-level DP-FedAvg: off, fixed (clip norm --dp-clip) or adaptive",
       ("off", "fixed", "adaptive"), group="uplink", needs=capable(
           "dp", unless=lambda cfg: cfg.dp == "off", reason=lambda cfg: f"--dp {cfg.dp} supports "
           f"--algorithm {' or '.join(with_capability('dp'))}: {cfg.algorithm}'s weights or "
           "uploads are not bounded by the clip norm C"))
DP_ON, ADAPTIVE = component("dp", "fixed", "adaptive"), component("dp", "adaptive")
CLIP = option("dp_clip", 1.0, "DP: L2 clip norm C of each client's update (the initial C "
              "with --dp adaptive)", applies=DP_ON, tunable=True, group="uplink", gt=0)
NOISE = option("dp_noise", 1.0, "DP: noise multiplier z; the sum of clipped updates gets "
               "N(0, z^2 C^2) noise (with --dp adaptive z is the accounted multiplier, shared "
               "with the clip count)", applies=DP_ON, tunable=True, group="uplink", ge=0)
QUANTILE = option("dp_quantile", 0.5, "DP adaptive clipping: target quantile gamma of the "
                  "update norms", applies=ADAPTIVE, tunable=True, group="uplink", ge=0, le=1)
CLIP_LR = option("dp_clip_lr", 0.2, "DP adaptive clipping: learning rate eta_C of the "
                 "geometric update C <- C exp(-eta_C (b - gamma))", applies=ADAPTIVE,
                 tunable=True, group="uplink", ge=0)
COUNT_NOISE = option("dp_count_noise", 0.0, "DP adaptive clipping: std sigma_b of the noise on "
                     "the clip count (0 = expected cohort / 20, the paper's choice)",
                     applies=ADAPTIVE, tunable=True, group="uplink", ge=0)

# Models with state besides params (BatchNorm statistics), which clients upload unclipped.
STATEFUL_MODELS = ("cnn_bn", "resnet20")


# Largest allowed probability that one round's Poisson draw overflows its buffer.
OVERFLOW_BOUND = 1e-12


# The configuration fields of the Poisson cohort (`poisson_selector`) and of the DP checks
# (`check`), for `RunConfig.view`.
SELECTOR_OPTIONS = ("cohort",)
option("dp_sampling", "poisson", "DP cohort: poisson (each client joins with rate q = "
       "cohort/clients; --cohort is the expected size) or fixed (exactly --cohort clients)",
       ("poisson", "fixed"), applies=DP_ON, group="uplink")
option("dp_delta", 1e-5, "DP: the delta at which epsilon is reported", applies=DP_ON,
       group="uplink", gt=0, lt=1, hint="use less than 1 / --clients")
option("dp_publish_client_stats", False, "DP: also write the statistics the guarantee does not "
       "cover (train-split losses, per-client results, cohort ids and sizes, clipped share); "
       "results.json lists them under privacy.outside_guarantee", applies=DP_ON, group="uplink")
CHECK_OPTIONS = ("dp", "dp_sampling", "availability", "aggregation", "selector",
                 "flip_protocol", "model", "byzantine_fraction", "client_chunk", "cohort")


def binomial_tail(n: int, q: float, b: int) -> float:
    """P(Binomial(n, q) > b), in float64 (scipy's regularised incomplete beta)."""
    from scipy.stats import binom

    return float(binom.sf(b, n, q))


@functools.lru_cache(maxsize=256)
def poisson_buffer(expected: int, n: int, bound: float | None = None) -> int:
    """Slots of the padded Poisson cohort: the smallest B <= n with P(Bin(n, q) > B) <= bound.

    q = expected / n; bound None is `OVERFLOW_BOUND`. With B = n nothing can overflow. The
    overflow probability of the chosen size is `binomial_tail(n, q, B)` (see
    `accounting.overflow_delta`).
    """
    q = expected / n
    if q >= 1.0:
        return n
    bound = OVERFLOW_BOUND if bound is None else bound
    from scipy.stats import binom

    b = int(max(0, min(n, binom.isf(bound, n, q)) - 2))
    while b < n and binomial_tail(n, q, b) > bound:
        b += 1
    return b


def poisson_selector(opts: Options) -> Selector:
    """Poisson sampling with rate q = cohort / N in a buffer of `poisson_buffer` slots.

    N is the length of the client pool (static), so the buffer's shape is fixed per run.
    The selector's round metric `dp_overflow` counts the chosen clients that did not fit
    (recomputed from the same key; 0 unless the overflow event of probability at most
    `OVERFLOW_BOUND` happened).
    """

    def chosen(key, state):
        n = state.pool.shape[0]
        u = jax.random.uniform(key, state.pool.shape)
        return state.pool & (u < opts.cohort / n), u

    def select(key, state, data, hp):
        c, u = chosen(key, state)
        size = poisson_buffer(opts.cohort, state.pool.shape[0])
        _, idx = jax.lax.top_k(jnp.where(c, 1.0 + u, u), size)
        return idx, c[idx]  # the chosen clients first, then padding slots

    def metrics(key, state, idx, valid, data, hp):
        c, _ = chosen(key, state)
        over = jnp.sum(c).astype(jnp.int32) - idx.shape[0]
        return {"dp_overflow": jnp.maximum(over, 0)}

    return Selector(lambda key, state, data, hp: None, select, metrics=metrics)


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


def centred_count(norms: jax.Array, clip: jax.Array, valid: jax.Array) -> jax.Array:
    """sum over valid slots of ([||Delta_k|| <= C] - 1/2): the count query before noise.

    One user moves it by exactly 1/2 (sensitivity 1/2), the value Andrew et al.'s
    Theorem 1 and `delta_noise_multiplier` assume.
    """
    bits = (norms <= clip).astype(jnp.float32) - 0.5
    return jnp.sum(jnp.where(valid, bits, 0.0))


def adaptive_clip(clip: jax.Array, norms: jax.Array, valid: jax.Array, key: jax.Array,
                  hp, sigma_b: jax.Array, denom: float) -> tuple[jax.Array, jax.Array]:
    """(next C, noisy unclipped share b) of Andrew et al.'s geometric update.

    b = (centred_count + N(0, sigma_b^2)) / denom + 1/2, an estimate of the share of
    updates with norm <= C (exact for a full cohort of `denom` clients without noise).
    """
    s = centred_count(norms, clip, valid) + sigma_b * jax.random.normal(key, ())
    b = s / denom + 0.5
    return clip * jnp.exp(-hp.dp_clip_lr * (b - hp.dp_quantile)), b


def check(opts: Options, hp, appeal: bool) -> None:
    """One-line `ConfigError`s for DP combinations C does not bound (the options' own
    choices and ranges are declared in `core/config.py`); `appeal`: whether the run applies
    the appeal protocol (`core.config.appeal_on`)."""
    if opts.dp == "off":
        return
    if opts.dp_sampling == "fixed" and opts.availability != "always":
        raise ConfigError(f"--dp-sampling fixed cannot be combined with --availability "
                          f"{opts.availability}: m of the available clients includes an "
                          "often-available client at more than m/N, which the accountant "
                          "does not see; use --dp-sampling poisson")
    if opts.aggregation != "uniform":
        raise ConfigError(f"--dp {opts.dp} needs --aggregation uniform: the sensitivity of "
                          f"'{opts.aggregation}' weights is not bounded by the clip norm C")
    if opts.selector != "random" or opts.flip_protocol != "static":
        raise ConfigError(f"--dp {opts.dp} needs --selector random (and --flip-protocol "
                          "static): other selectors read the clients' data outside the "
                          "accounted mechanism")
    if appeal:
        raise ConfigError(f"--dp {opts.dp} needs --appeal off: the appeal protocol's solo "
                          "models and opt-out read the clients' data outside the mechanism")
    if opts.model in STATEFUL_MODELS:
        raise ConfigError(f"--dp {opts.dp} cannot use --model {opts.model}: its BatchNorm "
                          "statistics are averaged without clipping or noise; choose a model "
                          "without model state (mlp, cnn, lenet5, logistic)")
    if opts.byzantine_fraction > 0:
        raise ConfigError(f"--dp {opts.dp} and --byzantine-fraction cannot be combined")
    if opts.client_chunk > 0:
        raise ConfigError(f"--dp {opts.dp} needs the whole cohort in one vmap: use "
                          "--client-chunk 0 or -1")
    if opts.dp == "adaptive":
        sb = float(count_noise(hp, opts.cohort))
        if float(hp.dp_noise) > 0 and not 2 * sb > float(hp.dp_noise):
            raise ConfigError(f"--dp adaptive needs 2 x sigma_b > --dp-noise (sigma_b = {sb:g}, "
                              f"z = {float(hp.dp_noise):g}): raise --dp-count-noise or the "
                              "cohort, or lower --dp-noise")
