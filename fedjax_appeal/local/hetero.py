"""Heterogeneous clients: per-client local steps tau_k and simulated compute times.

Every draw is a pure function of the run's heterogeneity key (kept in
`HeteroState.key` as raw key data), the round r and the client id k:
`fold_in(fold_in(fold_in(root, STREAM), r), k)`. The same client in the same round therefore
draws the same tau_k and step time wherever it is asked (its local update, the round
deadline, a sequential reference), whatever cohort slot it sits in.

* tau_k (`--local-steps-dist`): fixed = `--local-steps`; uniform on
  [`--local-steps-min`, `--local-steps`]; lognormal round(median exp(sigma z)), median
  sqrt(min x max), clipped to the same bounds; epochs = floor(E n_k / B) (`--local-epochs`
  E over the client's n_k train rows in minibatches of B, FedAvg's E local epochs, the
  FedNova paper's main source of heterogeneity: fixed per client, not redrawn), clipped
  likewise. The local `lax.scan` always runs
  `--local-steps` iterations and masks those past tau_k (`client.local_sgd(num_steps=)`),
  so the cohort stays one vmap.
* simulated time (`--step-time-sigma`): seconds per step s_k = exp(sigma z) (median 1),
  compute time tau_k s_k; a client past `--deadline` is a straggler (see
  `select.availability`).

This is the heterogeneity of FedNova's experiments (Wang et al. 2020, "Tackling the
Objective Inconsistency Problem in Heterogeneous Federated Optimization", Sec. 6: tau_k
drawn per client and round) and the straggler model of a synchronous round with a deadline.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from ..core.capabilities import algorithm, capable, with_capability
from ..core.fields import component, option, when

# the local-steps distributions (`--local-steps-dist`, for the algorithms whose clients take
# tau_k steps) and the options each one reads
option("local_steps_dist", "fixed", "per-client local steps tau_k (at most --local-steps)",
       ("fixed", "uniform", "lognormal", "epochs"), group="hetero", needs=capable(
           "varied_steps", unless=lambda cfg: cfg.local_steps_dist == "fixed", reason=lambda cfg:
           f"--local-steps-dist {cfg.local_steps_dist} needs an algorithm with FedAvg's local "
           f"SGD ({', '.join(with_capability('varied_steps'))}); {cfg.algorithm} runs its own "
           "local steps: use --local-steps-dist fixed"))
VARIED = when(lambda cfg: cfg.local_steps_dist != "fixed",
              "it bounds --local-steps-dist uniform|lognormal")
LOCAL_EPOCHS = option("local_epochs", 1.0, "--local-steps-dist epochs: local epochs E over the "
                      "client's train rows (tau_k = floor(E n_k / B))",
                      applies=component("local_steps_dist", "epochs"), group="hetero", gt=0)
LOCAL_STEPS_MIN = option("local_steps_min", 1, "smallest tau_k of --local-steps-dist "
                         "uniform|lognormal", applies=VARIED, group="hetero", ge=1)
STEPS_SIGMA = option("steps_sigma", 0.5, "--local-steps-dist lognormal: sigma of log tau_k "
                     "(median sqrt(min x max local steps))",
                     applies=component("local_steps_dist", "lognormal"), tunable=True,
                     group="hetero", ge=0)
# the simulated step times: read by the deadline and by fedbuff, which simulates durations
STEP_TIME_SIGMA = option("step_time_sigma", 0.5, "simulated seconds per local step ~ "
                         "LogNormal(0, sigma) per client and round (deadline, fedbuff "
                         "durations)", applies=(when(lambda cfg: cfg.deadline > 0, "")
                                                | algorithm("fedbuff")).because(
                             "it sets the simulated step times of --deadline and fedbuff"),
                         tunable=True, group="hetero", ge=0)

STEPS, TIME, AVAIL, AVAIL_P = 1, 2, 3, 4  # independent streams of the heterogeneity key


# The configuration fields of client heterogeneity and unreliability (`RunConfig.view`):
# this module's and `select/availability.py`'s.
OPTIONS = ("local_steps_dist", "local_epochs", "local_steps_min", "availability", "deadline",
           "local_steps", "batch_size")


def hetero_on(opts) -> bool:
    """Whether `opts` (options declaring `OPTIONS`) ask for any client heterogeneity or
    unreliability."""
    return (opts.local_steps_dist != "fixed" or opts.availability != "always"
            or opts.deadline > 0)


class HeteroState(NamedTuple):
    """The heterogeneous clients' state (`ServerState.hetero`)."""

    key: jax.Array  # [2] uint32: raw data of the run's heterogeneity key
    on: jax.Array  # [M] bool: the Markov availability chain's current state (all on first)


def init_hetero(key: jax.Array, num_clients: int) -> HeteroState:
    """`state.hetero`: the root key (raw data) and the availability trace."""
    return HeteroState(jax.random.key_data(jax.random.fold_in(key, 0x4E7E)),
                       jnp.ones((num_clients,), bool))


def root_key(state) -> jax.Array:
    """The run's heterogeneity key, from `state.hetero`."""
    return jax.random.wrap_key_data(state.hetero.key)


def draw_key(root: jax.Array, stream: int, rnd, k) -> jax.Array:
    """The key of client k in round `rnd` for one stream (STEPS, TIME, AVAIL)."""
    return jax.random.fold_in(jax.random.fold_in(jax.random.fold_in(root, stream), rnd), k)


def client_steps(opts, root: jax.Array, rnd, k, hp, count=None) -> jax.Array:
    """tau_k [] int32 of client k in round `rnd` (see the module docstring); `count` = n_k,
    the client's train rows (needed by `epochs`)."""
    hi, lo = opts.local_steps, min(opts.local_steps_min, opts.local_steps)
    key = draw_key(root, STEPS, rnd, k)
    if opts.local_steps_dist == "fixed":
        return jnp.asarray(hi, jnp.int32)
    if opts.local_steps_dist == "epochs":
        tau = jnp.floor(opts.local_epochs * jnp.asarray(count, jnp.float32) / opts.batch_size)
        return jnp.clip(tau, lo, hi).astype(jnp.int32)
    if opts.local_steps_dist == "uniform":
        return jax.random.randint(key, (), lo, hi + 1, jnp.int32)
    if opts.local_steps_dist == "lognormal":
        median = (lo * hi) ** 0.5
        tau = jnp.round(median * jnp.exp(hp.steps_sigma * jax.random.normal(key)))
        return jnp.clip(tau, lo, hi).astype(jnp.int32)
    raise ValueError(f"unknown local steps distribution {opts.local_steps_dist!r}")


def step_time(root: jax.Array, rnd, k, hp) -> jax.Array:
    """Simulated seconds per local step of client k in round `rnd`: LogNormal(0, sigma)."""
    return jnp.exp(hp.step_time_sigma * jax.random.normal(draw_key(root, TIME, rnd, k)))


def compute_time(opts, root: jax.Array, rnd, k, hp, count=None) -> jax.Array:
    """tau_k x step time of client k in round `rnd` (simulated seconds)."""
    tau = client_steps(opts, root, rnd, k, hp, count).astype(jnp.float32)
    return tau * step_time(root, rnd, k, hp)
