"""Local update of one client, and one client's loss over its whole data.

Everything here is written for a single client and is vmapped over the cohort by the round
(`fedjax_appeal.core.round`). The local objective is the model's cross-entropy plus an optional
regulariser of the parameters, which covers FedProx (mu/2 ||w - w_g||^2) and SCAFFOLD's
control-variate correction (<c - c_k, w>, whose gradient is the correction c - c_k).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from ..core.arrays import ROW_CHUNK, ClientArrays, client_chunk, client_norms, sample_batch
from ..core.fields import option
from ..core.models import Model
from ..core.parts import REPORTS, ClientUpdate

Regularizer = Callable[[Any], jax.Array]  # params -> scalar added to the minibatch loss


option("local_steps", 50, "local SGD steps per round (tau)", group="federation", ge=1)
option("batch_size", 64, "local minibatch size", group="federation", ge=1)


class LocalResult(NamedTuple):
    params: Any  # client model after the local steps
    state: Any  # model state after the local steps ({} for stateless models)
    loss: jax.Array  # [] mean minibatch loss over the local steps


def local_sgd(model: Model, params, state, arrays: ClientArrays, k: jax.Array, key: jax.Array,
              lr: jax.Array, *, steps: int, batch_size: int,
              regularizer: Regularizer | None = None,
              tx: optax.GradientTransformation | None = None,
              num_steps: jax.Array | None = None,
              unroll: int | bool = 1) -> LocalResult:
    """`steps` minibatch SGD steps of client k, as one `lax.scan`.

    Each step draws a minibatch of client k (uniform with replacement, a gather into the
    flat arrays) and a fresh dropout key, both from `fold_in`-free splits of `key`.
    `tx` replaces plain SGD with another optax transform (default `optax.sgd(lr)`).
    `num_steps` (a traced int, <= `steps`) makes steps i >= num_steps no-ops (parameters,
    model state and optimizer state kept; see `local.hetero`), so clients with different
    step counts share one vmap; the loss is then the mean over the steps taken.
    `unroll` is the scan's unroll factor (True: every step).
    """
    tx = tx if tx is not None else optax.sgd(lr)

    def objective(p, s, x, y, kd):
        loss, new_s = model.loss(p, s, x, y, train=True, key=kd)
        reg = regularizer(p) if regularizer is not None else 0.0
        return loss + reg, (loss, new_s)

    def step(carry, step_key):
        p, s, opt = carry
        kb, kd = jax.random.split(step_key)
        x, y = sample_batch(arrays, k, kb, batch_size)
        grads, (loss, s) = jax.grad(objective, has_aux=True)(p, s, x, y, kd)
        updates, opt = tx.update(grads, opt, p)
        return (optax.apply_updates(p, updates), s, opt), loss

    if num_steps is None:
        (params, state, _), losses = jax.lax.scan(
            step, (params, state, tx.init(params)), jax.random.split(key, steps), unroll=unroll)
        return LocalResult(params, state, losses.mean())

    def masked(carry, xs):
        step_key, i = xs
        new, loss = step(carry, step_key)
        live = i < num_steps
        new = jax.tree.map(lambda a, b: jnp.where(live, a, b), new, carry)
        return new, jnp.where(live, loss, 0.0)

    (params, state, _), losses = jax.lax.scan(
        masked, (params, state, tx.init(params)),
        (jax.random.split(key, steps), jnp.arange(steps)), unroll=unroll)
    return LocalResult(params, state, losses.sum() / jnp.maximum(num_steps, 1))


def proximal(global_params, mu: jax.Array) -> Regularizer:
    """FedProx term mu/2 ||w - w_global||^2 (Li et al. 2020, "Federated Optimization in
    Heterogeneous Networks")."""

    def reg(p):
        sq = jax.tree.map(lambda a, b: jnp.sum((a - b) ** 2), p, global_params)
        return 0.5 * mu * sum(jax.tree.leaves(sq))

    return reg


def client_loss(model: Model, params, state, arrays: ClientArrays, k: jax.Array,
                chunk: int = ROW_CHUNK) -> tuple[jax.Array, jax.Array]:
    """F_k(w) and accuracy of client k over all its rows (evaluation mode).

    Sweeps the client's rows in fixed chunks (a `fori_loop` over ceil(max_count/chunk)
    chunks, masked), so it vmaps over k without padding the data.
    """
    chunk = max(1, min(chunk, arrays.max_count))
    n_chunks = -(-arrays.max_count // chunk)

    def body(i, acc):
        x, y, valid = client_chunk(arrays, k, i * chunk, chunk)
        loss, correct = model.per_sample(params, state, x, y)
        return acc[0] + jnp.sum(loss * valid), acc[1] + jnp.sum(correct * valid)

    tot_loss, tot_correct = jax.lax.fori_loop(0, n_chunks, body, (0.0, 0.0))
    n_loss, n_acc = client_norms(arrays)  # rows; counted tokens for per-position targets
    return tot_loss / n_loss[k], tot_correct / n_acc[k]


def tree_sub(a, b):
    return jax.tree.map(jnp.subtract, a, b)


class Trained(NamedTuple):
    """What an algorithm's local objective returns for one client (see `reporting`).

    start: (params, model_state) the client started from (the received model, or for FedBN
      the received model with the client's own BN layers).
    end: (params, model_state) after its local steps (w_k).
    loss: [] mean minibatch loss over the local steps.
    report: the algorithm's own report to the server, one typed value it declares (a
      NamedTuple: SCAFFOLD's control-variate change, FedBN's BN parameters), or None.
    delta: what the client sends instead of start - end (None = start - end).
    fednova_a: [] FedNova's normaliser a_k when the round aggregates with FedNova, or None.
    """

    start: tuple
    end: tuple
    loss: jax.Array
    report: Any = None
    delta: Any = None
    fednova_a: Any = None


def reporting(model: Model, local: Callable[..., Trained], needs=frozenset()) -> Callable:
    """One client's `round.ClientUpdate` from a local objective, with the requested reports.

    The single place where clients report losses over all their train rows:
    "loss_before" = F_k(start) and "loss_after" = F_k(end) (evaluation mode,
    `client_loss`), whichever of them `needs` (a `round.WeightRule`'s) lists.
    """
    unknown = set(needs) - set(REPORTS)
    if unknown:
        raise ValueError(f"unknown client reports {sorted(unknown)}; known: {REPORTS}")

    def update(state, data, k, key, hp):
        t = local(state, data, k, key, hp)
        loss_before = loss_after = None
        if "loss_before" in needs:
            loss_before = client_loss(model, *t.start, data.train, k)[0]
        if "loss_after" in needs:
            loss_after = client_loss(model, *t.end, data.train, k)[0]
        delta = tree_sub(t.start[0], t.end[0]) if t.delta is None else t.delta
        return ClientUpdate(delta=delta, model_state=t.end[1], num_samples=data.train.count[k],
                            loss=t.loss, loss_before=loss_before, loss_after=loss_after,
                            fednova_a=t.fednova_a, report=t.report)

    return update
