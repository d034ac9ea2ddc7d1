"""FedBuff: buffered asynchronous aggregation in simulated time (Nguyen et al. 2022,
"Federated Learning with Buffered Asynchronous Aggregation", AISTATS, Algorithm 1).

`concurrency` (C) clients train at once. A client starts on the model version current
when it starts, trains `--local-steps` SGD steps, and finishes after a simulated duration
(local steps x LogNormal(0, `step_time_sigma`) seconds, drawn per dispatch). Each finished
client's update Delta_i = w_start - w_i enters the server's buffer with weight
s_i = (1 + staleness_i)^-`staleness_power` (1/sqrt(1 + staleness), the paper's choice),
staleness = versions applied since it started; a new client (uniform among the available
clients not in flight) immediately takes its place on the current model. After K =
`--cohort` arrivals the server applies the server optimizer to (1/K) sum_i s_i Delta_i and
bumps the version. One "round" of this algorithm is one such server step.

Inside jit the event loop is a `lax.scan` over the K arrivals of a server step over
scalars only (pop the earliest finish time among the C slots, record it, dispatch its
replacement): a client's update is a pure function of the model it starts from and its
key, so it is computed when the client is dispatched and kept in its slot (the "delta base
per in-flight client", C model-sized buffers; no ring of old models). Every client
dispatched during a server step starts on that step's model, so the K replacements train
in one vmap after the event loop; a replacement that finishes within the same step
(staleness 0) is read from that batch. Order within a step: a finished client's
replacement is dispatched before the buffer is checked, so the K-th replacement also
starts on the pre-update model.

Keys: the d-th dispatch of the run draws its client and duration from
`fold_in(root, d)` (`dispatch_draw`), root kept in `FedBuffState.key`; the
replacements of a server step train with `split(round key, K)`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from ..aggregate.server import server_optimizer
from ..core.capabilities import Supports, algorithm
from ..core.config import Options
from ..core.fields import option
from ..core.models import Model
from ..core.round import ServerState, init_state, server_step, weighted_sum
from ..local.client import local_sgd, tree_sub
from .base import FederatedAlgorithm, global_evaluator, register

FEDBUFF = algorithm("fedbuff")
STALENESS_POWER = option("staleness_power", 0.5, "fedbuff: an update of staleness s weighs "
                         "(1 + s)^-power (0.5 = 1/sqrt(1 + s) of Nguyen et al. 2022)",
                         applies=FEDBUFF, tunable=True, group="hetero", ge=0)
CONCURRENCY = option("concurrency", 0, "fedbuff: clients training at once (0 = 2 x --cohort); "
                     "the server applies every --cohort arrivals", applies=FEDBUFF,
                     group="hetero", ge=0)

# train(params, model_state, k, key, hp) -> (delta, model_state_k, loss)
TrainFn = Callable[[Any, Any, jax.Array, jax.Array, Any], tuple[Any, Any, jax.Array]]


def concurrency(opts: Options) -> int:
    """C: `--concurrency`, or 2 x cohort (at most the number of clients) when 0."""
    return opts.concurrency if opts.concurrency > 0 else min(2 * opts.cohort, opts.clients)


def dispatch_draw(root: jax.Array, n, num_clients: int, base_time: float, hp
                  ) -> tuple[jax.Array, jax.Array]:
    """(scores [M], duration []) of the n-th dispatch of the run.

    The dispatched client is the available, not-in-flight client of highest score (a
    uniform pick among them); its duration is base_time x LogNormal(0, step_time_sigma).
    """
    k_id, k_dur = jax.random.split(jax.random.fold_in(root, n))
    scores = jax.random.uniform(k_id, (num_clients,))
    return scores, base_time * jnp.exp(hp.step_time_sigma * jax.random.normal(k_dur))


def _pick(scores, client, pool):
    """The highest-score client of `pool` not in `client` (in-flight ids; M = empty)."""
    m = scores.shape[0]
    busy = jnp.zeros((m,), bool).at[client].set(True, mode="drop")
    return jnp.argmax(jnp.where(pool & ~busy, scores, -1.0)).astype(jnp.int32)


def _take(tree, i):
    return jax.tree.map(lambda a: a[i], tree)


class FedBuffState(NamedTuple):
    """FedBuff's server state (`state.algo`): the clients in flight."""

    key: jax.Array  # the root key of the dispatches (raw key data)
    client: jax.Array  # [C] int32, the client of each slot
    version: jax.Array  # [C] int32, the model version each slot started from
    finish: jax.Array  # [C] float32, when each slot's client finishes (simulated seconds)
    delta: Any  # [C, ...] each slot's update, like params
    model_state: Any  # [C, ...] each slot's model state
    loss: jax.Array  # [C] float32, each slot's training loss
    now: jax.Array  # [] float32, simulated time
    n: jax.Array  # [] int32, dispatches so far


def fedbuff_init(train: TrainFn, params, model_state, key: jax.Array, pool: jax.Array,
                 num_slots: int, base_time: float, hp) -> FedBuffState:
    """The in-flight buffer at time 0: C clients dispatched on version 0 (dispatches 0..C-1).

    Returns `state.algo` (`FedBuffState`).
    """
    root = jax.random.fold_in(key, 0xFB)
    m = pool.shape[0]

    def body(client, i):
        scores, dur = dispatch_draw(root, i, m, base_time, hp)
        c = _pick(scores, client, pool)
        return client.at[i].set(c), (c, dur)

    _, (client, finish) = jax.lax.scan(body, jnp.full((num_slots,), m, jnp.int32),
                                       jnp.arange(num_slots))
    keys = jax.random.split(jax.random.fold_in(key, 0xFC), num_slots)
    delta, mstate, loss = jax.vmap(train, in_axes=(None, None, 0, 0, None))(
        params, model_state, client, keys, hp)
    return FedBuffState(key=jax.random.key_data(root), client=client,
                        version=jnp.zeros((num_slots,), jnp.int32), finish=finish,
                        delta=delta, model_state=mstate, loss=loss,
                        now=jnp.zeros((), jnp.float32), n=jnp.asarray(num_slots, jnp.int32))


def fedbuff_step(train: TrainFn, state: ServerState, key: jax.Array, hp, *, buffer: int,
                 base_time: float, tx: optax.GradientTransformation
                 ) -> tuple[ServerState, dict]:
    """One server step: K = `buffer` arrivals, their staleness-weighted mean, the update.

    Returns (new state, metrics) with the round metrics of `core.round` (`cohort_idx` =
    the K clients aggregated, `cohort_weights` = s_i / K) plus `staleness_mean`,
    `staleness_max` and `sim_time` (simulated seconds at the K-th arrival).
    """
    fb: FedBuffState = state.algo
    root = jax.random.wrap_key_data(fb.key)
    version = state.round
    m = state.pool.shape[0]

    def arrival(carry, j):
        client, ver, finish, src, n = carry
        slot = jnp.argmin(finish).astype(jnp.int32)
        t = finish[slot]
        rec = (slot, client[slot], ver[slot], src[slot], t)
        client = client.at[slot].set(m)  # finished: no longer in flight
        scores, dur = dispatch_draw(root, n, m, base_time, hp)
        c = _pick(scores, client, state.pool)
        carry = (client.at[slot].set(c), ver.at[slot].set(version),
                 finish.at[slot].set(t + dur), src.at[slot].set(j), n + 1)
        return carry, (rec, c)

    src0 = jnp.full(fb.client.shape, -1, jnp.int32)  # -1: trained before this step
    (client, ver, finish, src, n), (rec, fresh_ids) = jax.lax.scan(
        arrival, (fb.client, fb.version, fb.finish, src0, fb.n),
        jnp.arange(buffer))
    slot, who, started, from_step, t = rec

    # the K replacements all start on this step's model: one vmap
    fresh = jax.vmap(train, in_axes=(None, None, 0, 0, None))(
        state.params, state.model_state, fresh_ids, jax.random.split(key, buffer), hp)
    stored = (fb.delta, fb.model_state, fb.loss)

    def read(slots, srcs):
        """Slot contents: this step's batch where src >= 0, else the stored buffer."""
        a, b = _take(fresh, jnp.maximum(srcs, 0)), _take(stored, slots)
        return jax.tree.map(
            lambda x, y: jnp.where(jnp.reshape(srcs >= 0, (-1,) + (1,) * (x.ndim - 1)), x, y),
            a, b)

    delta, mstate, loss = read(slot, from_step)
    staleness = (version - started).astype(jnp.float32)
    w = (1.0 + staleness) ** (-hp.staleness_power) / buffer
    new = server_step(state, weighted_sum(w, delta), tx)
    if jax.tree.leaves(mstate):
        new = new.replace(model_state=weighted_sum(w / jnp.sum(w), mstate))
    d_slot, m_slot, l_slot = read(jnp.arange(src.shape[0]), src)
    new = new.replace(
        round=version + 1,
        participation=state.participation.at[who].add(1),
        algo=fb._replace(
            client=client, version=ver, finish=finish, delta=d_slot, model_state=m_slot,
            loss=l_slot, now=t[-1], n=n))
    metrics = {"cohort_loss": jnp.mean(loss),
               "cohort_size": jnp.asarray(buffer, jnp.int32),
               "available": jnp.sum(state.pool).astype(jnp.int32),
               "cohort_idx": who.astype(jnp.int32), "cohort_weights": w,
               "staleness_mean": jnp.mean(staleness), "staleness_max": jnp.max(staleness),
               "sim_time": t[-1]}
    return new, metrics


FEDBUFF_SUPPORTS = Supports(
    aggregation=False, selector=False, uplink=False, byzantine=False, availability=False,
    layouts=False,
    notes=(("aggregation", "fedbuff weighs each update by its staleness"),
           ("selector", "fedbuff dispatches a uniform client whenever one finishes"),
           ("availability", "fedbuff runs in simulated time without rounds"),
           ("uplink", "fedbuff's clients send their updates uncompressed"),
           ("byzantine", "fedbuff has no Byzantine hook"),
           ("layouts", "fedbuff runs its own event loop, not the shared executor")))


def fedbuff_functions(model: Model, *, slots: int, buffer: int, steps: int, batch_size: int,
                      tx: Callable[[Any], optax.GradientTransformation]):
    """(init(key, data, hp), round(state, data, key, hp)) of FedBuff with FedAvg's local
    SGD (`steps` steps on minibatches of `batch_size` at `hp.client_lr`), C = `slots`
    clients in flight, K = `buffer` arrivals per server step, the server optimizer
    `tx(hp)`."""
    base_time = float(steps)

    def trainer(data) -> TrainFn:
        def train(params, mstate, k, key, hp):
            res = local_sgd(model, params, mstate, data.train, k, key, hp.client_lr,
                            steps=steps, batch_size=batch_size)
            return tree_sub(params, res.params), res.state, res.loss

        return train

    def init(key, data, hp):
        k_model, k_buf = jax.random.split(key)
        params, mstate = model.init(k_model)
        state = init_state(params, mstate, tx(hp), data.num_clients)
        fb = fedbuff_init(trainer(data), params, mstate, k_buf, state.pool, slots, base_time,
                          hp)
        return state.replace(algo=fb)

    def round_fn(state, data, key, hp):
        return fedbuff_step(trainer(data), state, key, hp, buffer=buffer,
                            base_time=base_time, tx=tx(hp))

    return init, round_fn


@register(FEDBUFF, FEDBUFF_SUPPORTS)
def fedbuff(model: Model, opts: Options, executor=None) -> FederatedAlgorithm:
    """FedBuff with FedAvg's local SGD; `--cohort` = buffer size K (see the module doc)."""
    server_opt = opts.server_opt
    init, round_fn = fedbuff_functions(
        model, slots=concurrency(opts), buffer=opts.cohort, steps=opts.local_steps,
        batch_size=opts.batch_size, tx=lambda hp: server_optimizer(server_opt, hp))
    return FederatedAlgorithm("fedbuff", init, round_fn, global_evaluator(model))
