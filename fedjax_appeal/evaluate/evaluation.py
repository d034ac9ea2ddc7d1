"""Evaluation of every client in one pass: per-sample loss/correct, then segment sums.

`evaluate_split` runs the model over all S rows of a split in fixed chunks (`lax.map`), and
`jax.ops.segment_sum(..., owner, M)` turns the per-sample values into F_k(w) and accuracy
for all M clients. That gives the inputs of every per-client metric (GM-Appeal,
preferred-model accuracy, appeal-based opt-out, client dissimilarity) at the cost of one
forward pass over the data.

The chunk is sized to the model (`auto_chunk`): 2048 rows where a row's largest
intermediate is small (MLPs, logistic regression), fewer where it is a convolution's
feature map, so that one chunk's activations stay within 32 MiB instead of hundreds of MiB
(`simple_cnn` on CIFAR-10: 128 rows, evaluation of 10,000 rows 20-25% faster than at
2048 on a 2-core CPU; `benchmarks/RESULTS.md`).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp

from ..core.arrays import ROW_CHUNK, ClientArrays, FederatedData, client_norms, eval_counts
from ..core.jaxpr import jaxpr_eqns
from ..core.models import Model
from ..execute.distributed import collect, spread
from ..local.client import client_loss


class ClientEval(NamedTuple):
    loss: jax.Array  # [M] mean loss of each client over the split
    acc: jax.Array  # [M] accuracy of each client over the split
    count: jax.Array  # [M] rows of each client in the split (per-position targets: the
    # targets its accuracy counts, `core.arrays.eval_counts`)


MAX_CHUNK = 2048  # rows per chunk at most (`core.padding.MIN_ROWS`)
CHUNK_BYTES = 32 * 2**20  # the largest intermediate of one chunk, at most (auto_chunk)


def row_bytes(model: Model, params, state, arrays: ClientArrays) -> int:
    """Bytes of the largest intermediate of the evaluation of one row (from its jaxpr)."""
    spec = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype),
                        (params, state, arrays.x[:1], arrays.y[:1]))
    jaxpr = jax.make_jaxpr(model.per_sample)(*spec).jaxpr
    return max((math.prod(v.aval.shape) * getattr(v.aval.dtype, "itemsize", 4)
                for eqn in jaxpr_eqns(jaxpr) for v in eqn.outvars
                if hasattr(v.aval, "shape") and hasattr(v.aval, "dtype")), default=1)


def auto_chunk(model: Model, params, state, arrays: ClientArrays) -> int:
    """Rows per evaluation chunk: the largest power of two, 64 to `MAX_CHUNK`, whose chunk
    keeps the largest intermediate within `CHUNK_BYTES`."""
    fit = max(1, CHUNK_BYTES // max(1, row_bytes(model, params, state, arrays)))
    return max(64, min(MAX_CHUNK, 1 << (fit.bit_length() - 1)))


def evaluate_split(model: Model, params, state, arrays: ClientArrays,
                   chunk: int | None = None) -> ClientEval:
    """Loss and accuracy of one model on every client of a split.

    `chunk`: rows per `lax.map` step (default `auto_chunk`); the values do not depend on it.
    """
    if chunk is None:
        chunk = auto_chunk(model, params, state, arrays)
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
    m = arrays.num_clients  # (rows of owner M, `core.padding`, are dropped by segment_sum)
    loss_sum = jax.ops.segment_sum(loss.reshape(-1) * valid, owner, m)
    corr_sum = jax.ops.segment_sum(correct.reshape(-1) * valid, owner, m)
    n_loss, n_acc = client_norms(arrays)  # rows; counted tokens for per-position targets
    return ClientEval(loss_sum / n_loss, corr_sum / n_acc, eval_counts(arrays))


def evaluate_global(model: Model, params, state, data: FederatedData,
                    chunk: int | None = None) -> dict[str, ClientEval]:
    """One global model on every split present (train, test, unseen_train, unseen_test)."""
    splits = data.splits()
    if chunk is None and splits:  # the splits share the model and the row shape: size once
        chunk = auto_chunk(model, params, state, next(iter(splits.values())))
    return {name: evaluate_split(model, params, state, arr, chunk)
            for name, arr in splits.items()}


def evaluate_personal(model: Model, params, state, arrays: ClientArrays,
                      chunk: int = ROW_CHUNK) -> ClientEval:
    """Per-client models (leading axis M on params/state) each on its own client's rows."""
    ks = jnp.arange(arrays.num_clients)
    loss, acc = jax.vmap(lambda p, s, k: client_loss(model, p, s, arrays, k, chunk))(
        params, state, ks)
    return ClientEval(loss, acc, eval_counts(arrays))
