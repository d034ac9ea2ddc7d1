"""Evaluation of personalised algorithms (Per-FedAvg, pFedMe): every client, seen and unseen,
derives its own model from the global one with `adapt`, and is evaluated with it on its
train and test split (`evaluation.evaluate_personal`), all clients under one `jax.vmap`.

The adaptation key of an evaluation is `fold_in(eval_key, round)` (seen clients) and its
`fold_in(..., 1)` (unseen clients), with `eval_key` drawn in init and kept in
`state.eval_key` (raw key data), so an evaluation is a pure function of the state.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from ..core.models import Model
from .evaluation import evaluate_personal

EVAL_TAG = 0xE7A1  # fold_in tag of the evaluation key

# adapt(params, model_state, train_arrays, k, key, hp) -> (params_k, model_state_k)
AdaptFn = Callable[..., tuple[Any, Any]]


def eval_key_data(init_key: jax.Array) -> jax.Array:
    """Raw data of the evaluation key, for `state.eval_key`."""
    return jax.random.key_data(jax.random.fold_in(init_key, EVAL_TAG))


def personal_evaluator(model: Model, adapt: AdaptFn):
    """evaluate(state, data, hp) -> {split: ClientEval} with each client's adapted model."""

    def evaluate(state, data, hp):
        key = jax.random.fold_in(jax.random.wrap_key_data(state.eval_key), state.round)
        splits = data.splits()
        out = {}
        for tag, (tr, te) in enumerate((("train", "test"), ("unseen_train", "unseen_test"))):
            if tr not in splits:
                continue
            arrays = splits[tr]
            ks = jnp.arange(arrays.num_clients)
            keys = jax.random.split(jax.random.fold_in(key, tag), arrays.num_clients)
            p, s = jax.vmap(lambda k, kk, a=arrays: adapt(state.params, state.model_state, a, k,
                                                          kk, hp))(ks, keys)
            out[tr] = evaluate_personal(model, p, s, arrays)
            out[te] = evaluate_personal(model, p, s, splits[te])
        return out

    return evaluate
