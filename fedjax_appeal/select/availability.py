"""Unreliable clients: availability per round (before selection) and a round deadline.

`with_availability(selector, opts)` wraps any cohort `Selector`:

* availability (`--availability`), drawn per client per round from the run's heterogeneity
  key (`local.hetero`, stream AVAIL, keyed by round and client id):
  - bernoulli: client k is available with probability p_k = clip(avail_p + avail_spread
    u_k, 0, 1), u_k ~ U(-1, 1) fixed per client (drawn once from the same key);
  - markov: a two-state on/off chain per client, P(on -> off) = avail_on_off,
    P(off -> on) = avail_off_on; round 0 draws from its stationary law
    P(on) = off_on / (on_off + off_on). The current state is carried in
    `state.hetero.on`.
  The selector then picks from `state.pool & available` (the pool mask every selector
  already honours: unavailable clients can only fill surplus slots, marked invalid).
* deadline (`--deadline` > 0): each selected client needs tau_k x step time simulated
  seconds (`local.hetero.compute_time`); one past the deadline still trains (its compute is
  spent) but its slot is marked invalid, so it gets aggregation weight 0 and does not count
  as participating.

Round metrics: `available` (clients available this round, pool included), `dropped`
(selected, valid clients cut by the deadline) and `round_time` (simulated seconds the server
waits: its slowest on-time client, or the deadline when it cut one). The wrapper is active
whenever any heterogeneity option is (`local.hetero.hetero_on`), so `--local-steps-dist`
alone also reports `round_time`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ..core.capabilities import capable
from ..core.fields import component, option
from ..core.parts import Selector
from ..local import hetero

# availability and the deadline: synchronous rounds only; the availability models' tunables
SYNCHRONOUS = capable("availability", "{alg} has no synchronous rounds", "--availability and "
                      "--deadline apply to synchronous algorithms; drop them",
                      unless=lambda cfg: cfg.availability == "always" and cfg.deadline == 0)
option("availability", "always", "client availability per round (--avail-* options)",
       ("always", "bernoulli", "markov"), group="hetero", needs=SYNCHRONOUS)
DEADLINE = option(
    "deadline", 0.0, "round deadline in simulated seconds (slower clients are dropped)",
    group="hetero", ge=0, hint="0 = no deadline",
    needs=SYNCHRONOUS)
BERNOULLI, MARKOV = component("availability", "bernoulli"), component("availability", "markov")
P = option("avail_p", 0.8, "--availability bernoulli: mean probability p_k that a client is "
           "available in a round", applies=BERNOULLI, tunable=True, group="hetero", ge=0, le=1)
SPREAD = option("avail_spread", 0.0, "--availability bernoulli: p_k = clip(avail_p + spread x "
                "U(-1, 1), 0, 1), drawn once per client", applies=BERNOULLI, tunable=True,
                group="hetero", ge=0)
ON_OFF = option("avail_on_off", 0.1, "--availability markov: P(available -> unavailable) per "
                "round", applies=MARKOV, tunable=True, group="hetero", ge=0, le=1)
OFF_ON = option("avail_off_on", 0.3, "--availability markov: P(unavailable -> available) per "
                "round", applies=MARKOV, tunable=True, group="hetero", ge=0, le=1)


def avail_probs(root: jax.Array, num_clients: int, hp) -> jax.Array:
    """p_k of the Bernoulli availability: clip(avail_p + spread u_k, 0, 1), u_k fixed."""
    u = jax.random.uniform(hetero.draw_key(root, hetero.AVAIL_P, 0, 0), (num_clients,),
                           minval=-1.0, maxval=1.0)
    return jnp.clip(hp.avail_p + hp.avail_spread * u, 0.0, 1.0)


def available(kind: str, root: jax.Array, rnd, prev_on: jax.Array, hp) -> jax.Array:
    """[M] bool availability of every client in round `rnd`.

    Args:
      kind: "always", "bernoulli" or "markov".
      root: the heterogeneity key.
      rnd: the round (int or traced).
      prev_on: [M] bool availability of round rnd - 1 (markov; ignored in round 0).
      hp: `HParams` (avail_p, avail_spread, avail_on_off, avail_off_on).
    """
    m = prev_on.shape[0]
    if kind == "always":
        return jnp.ones((m,), bool)
    u = jax.random.uniform(hetero.draw_key(root, hetero.AVAIL, rnd, 0), (m,))
    if kind == "bernoulli":
        return u < avail_probs(root, m, hp)
    if kind == "markov":
        tot = hp.avail_on_off + hp.avail_off_on
        stationary = jnp.where(tot > 0, hp.avail_off_on / jnp.where(tot > 0, tot, 1.0), 1.0)
        p_on = jnp.where(prev_on, 1.0 - hp.avail_on_off, hp.avail_off_on)
        p_on = jnp.where(rnd == 0, stationary, p_on)
        return u < p_on
    raise ValueError(f"unknown availability {kind!r}")


def times(opts, root: jax.Array, rnd, idx: jax.Array, hp, counts: jax.Array) -> jax.Array:
    """[m] simulated compute times tau_k x s_k of the cohort clients (`counts` = n_k)."""
    return jax.vmap(lambda k, n: hetero.compute_time(opts, root, rnd, k, hp, n))(idx, counts)


def late(opts, root: jax.Array, rnd, idx: jax.Array, hp, counts: jax.Array) -> jax.Array:
    """[m] bool: cohort clients whose compute time passes `opts.deadline` (none if 0)."""
    if opts.deadline <= 0:
        return jnp.zeros(idx.shape, bool)
    return times(opts, root, rnd, idx, hp, counts) > opts.deadline


def with_availability(selector: Selector, opts) -> Selector:
    """`selector` restricted to the available clients, with the deadline's drops (see the
    module docstring); `selector` itself when `opts` asks for no heterogeneity at all."""
    if not hetero.hetero_on(opts):
        return selector

    def pool_now(state, hp):
        on = available(opts.availability, hetero.root_key(state), state.round, state.hetero.on,
                       hp)
        return state.pool & on, on

    def select(key, state, data, hp):
        pool, _ = pool_now(state, hp)
        idx, valid = selector.select(key, state.replace(pool=pool), data, hp)
        return idx, valid & ~late(opts, hetero.root_key(state), state.round, idx, hp,
                                  data.train.count[idx])

    def update(new, upd, idx, valid, data, hp):
        if selector.update is not None:
            new = selector.update(new, upd, idx, valid, data, hp)
        if opts.availability != "markov":
            return new
        prev = new.replace(round=new.round - 1)  # the round just played
        _, on = pool_now(prev, hp)
        return new.replace(hetero=new.hetero._replace(on=on))

    def metrics(key, state, idx, valid, data, hp):
        pool, _ = pool_now(state, hp)
        inner = ({} if selector.metrics is None else
                 selector.metrics(key, state.replace(pool=pool), idx, valid, data, hp))
        t = times(opts, hetero.root_key(state), state.round, idx, hp, data.train.count[idx])
        cut = t > opts.deadline if opts.deadline > 0 else jnp.zeros(idx.shape, bool)
        # the server waits for its slowest on-time client, or until the deadline if it cut one
        slowest = jnp.max(jnp.where(valid, t, 0.0))
        wait = jnp.where(jnp.any(pool[idx] & cut), opts.deadline, slowest)
        return {**inner, "available": jnp.sum(pool).astype(jnp.int32),
                "dropped": jnp.sum(pool[idx] & cut).astype(jnp.int32),
                "round_time": wait}

    return Selector(init=selector.init, select=select, update=update, metrics=metrics)
