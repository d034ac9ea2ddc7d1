"""The federated round as a composition of pure parts.

    round(state, data, key, hp) -> (state, metrics)

    select cohort -> local update (over the cohort, by the executor) -> client statistics
        -> aggregation weights -> server optimizer (optax) on -sum_k w_k Delta_k

`make_round` wires the parts; an algorithm is a choice of parts (see `algorithms/`).
Nothing here is jitted: `simulate` puts one `jax.jit` around a `lax.scan` of rounds.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax

from .arrays import FederatedData
from .config import HParams
from .parts import (  # noqa: F401  (the round's types, re-exported)
    REPORTS,
    ClientUpdate,
    CohortExecutor,
    CohortJob,
    CorruptFn,
    LocalFn,
    PostFn,
    SelectFn,
    Selector,
    ServerState,
    TxFn,
    WeightFn,
    WeightRule,
)

UPLINK_KEY = 0x0B1E  # the uplink's stream: fold_in(round key, UPLINK_KEY)


def attach_selector(state: ServerState, selector: Selector, key: jax.Array,
                    data: FederatedData, hp: HParams) -> ServerState:
    """Put the selector's initial memory into `state.selector`."""
    return state.replace(selector=selector.init(key, state, data, hp))


def weighted_sum(w: jax.Array, tree):
    """sum_k w_k tree_k over the leading (cohort) axis of every leaf."""
    return jax.tree.map(lambda d: jnp.tensordot(w, d, axes=1), tree)


def server_step(state: ServerState, pseudo_grad, tx: optax.GradientTransformation
                ) -> ServerState:
    updates, opt_state = tx.update(pseudo_grad, state.opt_state, state.params)
    return state.replace(params=optax.apply_updates(state.params, updates), opt_state=opt_state)


def make_round(*, select: Selector, local: LocalFn, weights: WeightRule, tx: TxFn,
               executor: CohortExecutor, post: PostFn | None = None,
               corrupt: CorruptFn | None = None, average_state: bool = True, uplink=None):
    """Compose parts into `round(state, data, key, hp) -> (state, metrics)`.

    Args:
      select: the `Selector` that picks the cohort (indices and validity mask) and
        updates its memory after the round.
      local: one client's update; `executor` runs it over the cohort.
      weights: the `WeightRule` giving aggregation weights over the cohort slots; `local`
        must report what it `needs` (`client.reporting` does).
      tx: builds the server optax transform from the hyperparameters.
      executor: runs the cohort's local updates: one vmap, lanes, chunks of clients or a
        device mesh (`CohortExecutor`; the package's are `execute.executor.Executor`).
      post: optional hook `post(old_state, new_state, updates, idx, valid, w, hp)` for
        algorithm state (control variates, weights, selector memory).
      corrupt: optional `corrupt(updates, idx, valid, key, data, hp) -> updates` applied to what
        the cohort sends before the server sees it (Byzantine clients, see `adversary`).
      average_state: average the clients' model state (e.g. BatchNorm statistics) with the
        normalised weights; FedBN turns this off and keeps it per client.
      uplink: optional `aggregate.uplink.Uplink` (compression of what clients send, DP
        clipping and noise), with its memory in `state.uplink`; it runs the
        cohort unchunked and draws from `fold_in(key, UPLINK_KEY)`.
    """

    def round_fn(state: ServerState, data: FederatedData, key: jax.Array, hp: HParams):
        k_sel, k_loc, k_adv = jax.random.split(key, 3)
        idx, valid = select.select(k_sel, state, data, hp)
        keys = jax.random.split(k_loc, idx.shape[0])
        job = CohortJob(local, corrupt, state, data, idx, keys, valid, k_adv, hp)
        c = 0 if uplink is not None else executor.chunk(idx.shape[0], state.params)
        one_pass = bool(c) and weights.logits is not None
        if one_pass:  # a softmax rule: one pass over chunks of c clients
            upd, pseudo = executor.one_pass(job, weights.logits, c)
        elif c:  # two passes over chunks of c clients: statistics now, deltas below
            upd = executor.statistics(job, c)
        else:
            upd = executor.each(job)
        up_metrics = {}
        if uplink is not None:
            k_send, k_agg = jax.random.split(jax.random.fold_in(key, UPLINK_KEY))
            mem = state.uplink
            if uplink.send is not None:
                upd, mem, m1 = uplink.send(upd, idx, valid, k_send, mem, hp)
                up_metrics.update(m1)
        w = weights.fn(upd, idx, valid, state, hp)
        w = jnp.where(valid, w, 0.0)
        if uplink is not None and uplink.aggregate is not None:
            pseudo, w, mem, m2 = uplink.aggregate(upd, w, valid, k_agg, mem, hp)
            up_metrics.update(m2)
        elif c and not one_pass:
            pseudo = executor.weighted_delta(job, w, c)
        elif not c:
            pseudo = weighted_sum(w, upd.delta)
        new = server_step(state, pseudo, tx(hp))
        if uplink is not None:
            new = new.replace(uplink=mem)
        if average_state and jax.tree.leaves(upd.model_state):
            wn = w / jnp.maximum(jnp.sum(w), 1e-12)
            new = new.replace(model_state=weighted_sum(wn, upd.model_state))
        new = new.replace(
            round=state.round + 1,
            participation=state.participation.at[idx].add(valid.astype(jnp.int32)))
        if post is not None:
            new = post(state, new, upd, idx, valid, w, hp)
        if select.update is not None:
            new = select.update(new, upd, idx, valid, data, hp)
        nv = jnp.maximum(jnp.sum(valid), 1)
        metrics = {
            "cohort_loss": jnp.sum(jnp.where(valid, upd.loss, 0.0)) / nv,
            "cohort_size": jnp.sum(valid).astype(jnp.int32),
            "available": jnp.sum(state.pool).astype(jnp.int32),
            "cohort_idx": idx.astype(jnp.int32),  # [m] who was in the cohort
            "cohort_weights": w,  # [m] aggregation weights (0 for invalid slots)
            **up_metrics,  # bits_up, dp_clip, ... (with an uplink only)
        }
        if select.metrics is not None:  # e.g. availability: `available`, `dropped`
            metrics = {**metrics, **select.metrics(k_sel, state, idx, valid, data, hp)}
        return new, metrics

    return round_fn


def init_state(params, model_state, tx: optax.GradientTransformation, num_clients: int,
               **fields) -> ServerState:
    """The state before round 1; `fields` sets the stages' fields of `ServerState` (the
    algorithm's own `algo`, `rho`, ...): a name that is not a field is a TypeError."""
    return ServerState(params=params, model_state=model_state, opt_state=tx.init(params),
                       round=jnp.zeros((), jnp.int32),
                       pool=jnp.ones((num_clients,), bool),
                       participation=jnp.zeros((num_clients,), jnp.int32), **fields)
