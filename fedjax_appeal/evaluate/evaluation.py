"""Evaluation of every client in one pass: per-sample loss/correct, then segment sums.

`evaluate_split` runs the model over all S rows of a split in fixed chunks (`lax.map`), and
`jax.ops.segment_sum(..., owner, M)` turns the per-sample values into F_k(w) and accuracy
for all M clients. That gives the inputs of every per-client metric (GM-Appeal,
preferred-model accuracy, appeal-based opt-out, client dissimilarity) at the cost of one
forward pass over the data.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from ..core.arrays import ClientArrays, FederatedData
from ..core.models import Model
from ..execute.distributed import collect, spread
from ..local.client import client_loss


class ClientEval(NamedTuple):
    loss: jax.Array  # [M] mean loss of each client over the split
    acc: jax.Array  # [M] accuracy of each client over the split
    count: jax.Array  # [M] rows of each client in the split


def evaluate_split(model: Model, params, state, arrays: ClientArrays,
                   chunk: int = 2048) -> ClientEval:
    """Loss and accuracy of one model on every client of a split."""
    s = arrays.num_samples
    chunk = max(1, min(chunk, s))
    n_chunks = -(-s // chunk)
    rows = jnp.minimum(jnp.arange(n_chunks * chunk), s - 1).reshape(n_chunks, chunk)

    def one(r):
        return model.per_sample(params, state, arrays.x[r], arrays.y[r])

    loss, correct = collect(jax.lax.map(one, spread(rows)))
    valid = (jnp.arange(n_chunks * chunk) < s).astype(jnp.float32)
    owner = jnp.concatenate([arrays.owner,
                             jnp.zeros(n_chunks * chunk - s, arrays.owner.dtype)])
    m = arrays.num_clients
    loss_sum = jax.ops.segment_sum(loss.reshape(-1) * valid, owner, m)
    corr_sum = jax.ops.segment_sum(correct.reshape(-1) * valid, owner, m)
    n = arrays.count.astype(jnp.float32)
    return ClientEval(loss_sum / n, corr_sum / n, arrays.count)


def evaluate_global(model: Model, params, state, data: FederatedData,
                    chunk: int = 2048) -> dict[str, ClientEval]:
    """One global model on every split present (train, test, unseen_train, unseen_test)."""
    return {name: evaluate_split(model, params, state, arr, chunk)
            for name, arr in data.splits().items()}


def evaluate_personal(model: Model, params, state, arrays: ClientArrays,
                      chunk: int = 256) -> ClientEval:
    """Per-client models (leading axis M on params/state) each on its own client's rows."""
    ks = jnp.arange(arrays.num_clients)
    loss, acc = jax.vmap(lambda p, s, k: client_loss(model, p, s, arrays, k, chunk))(
        params, state, ks)
    return ClientEval(loss, acc, arrays.count)
