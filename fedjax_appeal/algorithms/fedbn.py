"""FedBN (Li et al. 2021, "FedBN: Federated Learning on Non-IID Features via Local Batch
Normalization", ICLR).

Every client keeps its own BatchNorm layers: the BN affine parameters (scale, bias) and the
BN statistics (`batch_stats`) of client k live in `FedBNState` (`state.algo`)
with a leading client axis [M, ...]; a round gathers them for the cohort, trains, and
scatters the cohort's new values back. They are never averaged. All other parameters are
aggregated as in FedAvg (any `--aggregation`, e.g. Exp-alpha, and any `--server-opt`);
their BN leaves in
`state.params` stay at their initial values and are unused.

Evaluation: each seen client with its own BN (`evaluation.evaluate_personal`). An unseen
client has no BN of its own: it gets the mean over seen clients of the BN affine
parameters and BN statistics recomputed on its own train rows (`ADAPT_STEPS` forward passes
in training mode over minibatches of its train data, no gradient step: test-time BN
adaptation, data the client holds).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from flax import traverse_util

from ..aggregate.aggregation import weight_rule
from ..core.arrays import sample_batch
from ..core.capabilities import Supports
from ..core.config import ConfigError, Options
from ..core.models import Model
from ..evaluate.evaluation import evaluate_personal
from ..evaluate.expalpha_metrics import tag_metrics
from ..local.client import Trained, local_sgd, tree_sub
from .base import compose, register

ADAPT_STEPS = 20  # train-mode forward passes that set an unseen client's BN statistics


def is_bn(path: str) -> bool:
    """Whether a flattened parameter path ('a/BatchNorm_0/scale') belongs to a BN layer."""
    return any(part.startswith("BatchNorm") for part in path.split("/"))


def bn_part(params) -> dict:
    """{path: leaf} of the BN parameters of a params tree."""
    flat = traverse_util.flatten_dict(params, sep="/")
    return {k: v for k, v in flat.items() if is_bn(k)}


def with_bn(params, bn: dict):
    """`params` with its BN leaves replaced by `bn` ({path: leaf})."""
    flat = traverse_util.flatten_dict(params, sep="/")
    return traverse_util.unflatten_dict({**flat, **bn}, sep="/")


def _scatter(table, rows, idx, valid):
    """table[idx] = rows where valid (leaves with leading axes M and m)."""
    def one(t, r):
        mask = valid.reshape((-1,) + (1,) * (r.ndim - 1))
        return t.at[idx].set(jnp.where(mask, r, t[idx]))

    return jax.tree.map(one, table, rows)


class FedBNState(NamedTuple):
    """FedBN's server state (`state.algo`): every seen client's own BatchNorm."""

    bn_params: Any  # [M, ...] the BN affine parameters (scale, bias) of each client
    bn_state: Any  # [M, ...] the BN statistics (`batch_stats`) of each client


class FedBNReport(NamedTuple):
    """What a FedBN client reports besides its update (`ClientUpdate.report`)."""

    bn_params: Any  # its BN affine parameters after the local steps


def fedbn_local(model: Model, opts: Options):
    """Local objective of client k with its own BN parameters and statistics."""

    def local(state, data, k, key, hp):
        st: FedBNState = state.algo
        bn_k = jax.tree.map(lambda a: a[k], st.bn_params)
        ms_k = jax.tree.map(lambda a: a[k], st.bn_state)
        params = with_bn(state.params, bn_k)
        res = local_sgd(model, params, ms_k, data.train, k, key, hp.client_lr,
                        steps=opts.local_steps, batch_size=opts.batch_size)
        delta = tree_sub(params, res.params)
        delta = with_bn(delta, jax.tree.map(jnp.zeros_like, bn_k))  # BN never aggregated
        return Trained((params, ms_k), (res.params, res.state), res.loss,
                       FedBNReport(bn_part(res.params)), delta)

    return local


def personal_params(state, num: int | None = None):
    """Per-client params [M, ...]: the global non-BN leaves with each client's BN."""
    bn = state.algo.bn_params
    m = jax.tree.leaves(bn)[0].shape[0] if num is None else num
    tiled = jax.tree.map(lambda a: jnp.broadcast_to(a, (m, *a.shape)), state.params)
    return with_bn(tiled, bn)


def adapt_bn(model: Model, params, mstate, arrays, key, batch_size: int):
    """BN statistics of every client of `arrays` recomputed on its own rows (no training)."""
    def one(k, kk):
        def step(s, kb):
            x, _ = sample_batch(arrays, k, kb, batch_size)
            _, s = model.apply(params, s, x, train=True, key=kb)
            return s, None

        s, _ = jax.lax.scan(step, mstate, jax.random.split(kk, ADAPT_STEPS))
        return s

    ks = jnp.arange(arrays.num_clients)
    return jax.vmap(one)(ks, jax.random.split(key, arrays.num_clients))


def fedbn_evaluator(model: Model, opts: Options):
    def evaluate(state, data, hp):
        pp = personal_params(state)
        ms = state.algo.bn_state
        out = {"train": evaluate_personal(model, pp, ms, data.train),
               "test": evaluate_personal(model, pp, ms, data.test)}
        if data.unseen_train is not None:
            mean_bn = jax.tree.map(lambda a: a.mean(0), state.algo.bn_params)
            mean_ms = jax.tree.map(lambda a: a.mean(0), ms)
            p = with_bn(state.params, mean_bn)
            key = jax.random.fold_in(jax.random.key(0), state.round)
            ums = adapt_bn(model, p, mean_ms, data.unseen_train, key, opts.batch_size)
            u = data.num_unseen
            up = jax.tree.map(lambda a: jnp.broadcast_to(a, (u, *a.shape)), p)
            out["unseen_train"] = evaluate_personal(model, up, ums, data.unseen_train)
            out["unseen_test"] = evaluate_personal(model, up, ums, data.unseen_test)
        tags = tag_metrics(out, data.info)
        return {**out, "metrics": tags} if tags else out

    return evaluate


def fedbn_init(key, params, mstate, data, hp):
    """Every seen client's BN parameters and statistics [M, ...], all the initial ones."""
    m = data.num_clients
    tile = lambda t: jax.tree.map(lambda a: jnp.broadcast_to(a, (m, *a.shape)), t)
    return {"algo": FedBNState(tile(bn_part(params)), tile(mstate))}


def fedbn_post(old, new, upd, idx, valid, w, hp):
    st: FedBNState = new.algo
    return new.replace(algo=FedBNState(
        _scatter(st.bn_params, upd.report.bn_params, idx, valid),
        _scatter(st.bn_state, upd.model_state, idx, valid)))


FEDBN_SUPPORTS = Supports()


@register("fedbn", FEDBN_SUPPORTS)
def fedbn(model: Model, opts: Options, executor=None):
    """FedBN on the FedAvg backbone (any aggregation rule and server optimizer)."""
    params_shape, _ = jax.eval_shape(model.init, jax.random.key(0))
    if not bn_part(params_shape):
        raise ConfigError(f"fedbn needs a model with BatchNorm (got '{model.name}'): use "
                          "--model cnn_bn or --model resnet20")
    return compose("fedbn", model, opts, local=fedbn_local(model, opts), weights=weight_rule(opts),
                   post=fedbn_post, init_fields=fedbn_init, average_state=False,
                   evaluate=fedbn_evaluator(model, opts), executor=executor)
