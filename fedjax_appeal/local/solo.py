"""Solo (local-only) models of every client: the MaxFL requirement rho_k and the
"preferred model" of the appeal metrics.

Every client k trains its own model w_hat_k with `steps` local SGD steps from the initial
global model (MaxFL uses 100), once, before federated training. Only its statistics are
kept: loss and accuracy on the client's train and test split, and the mean of the
minibatch losses of its training run (the requirement of `--appeal-def
train-vs-solo-minibatch`).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from ..core.arrays import ClientArrays
from ..core.models import Model
from ..execute.distributed import collect, spread
from .client import client_loss, local_sgd


class SoloStats(NamedTuple):
    train_loss: jax.Array  # [M] F_k(w_hat_k) on the client's train split
    train_acc: jax.Array  # [M]
    test_loss: jax.Array  # [M] on the client's test split
    test_acc: jax.Array  # [M]
    minibatch_loss: jax.Array  # [M] mean of the solo run's `steps` minibatch losses


def solo_stats(model: Model, params, state, train: ClientArrays, test: ClientArrays,
               key: jax.Array, lr: jax.Array, *, steps: int, batch_size: int,
               chunk: int = 256) -> SoloStats:
    """Train every client's solo model from (params, state) and evaluate it.

    Clients are vmapped in groups of `chunk` (a `lax.map` over groups bounds memory).
    """
    m = train.num_clients
    chunk = max(1, min(chunk, m))
    n_groups = -(-m // chunk)
    ks = jnp.minimum(jnp.arange(n_groups * chunk), m - 1).reshape(n_groups, chunk)
    keys = jax.random.split(key, n_groups * chunk).reshape(n_groups, chunk)

    def one(k, kk):
        res = local_sgd(model, params, state, train, k, kk, lr, steps=steps,
                        batch_size=batch_size)
        trl, tra = client_loss(model, res.params, res.state, train, k)
        tel, tea = client_loss(model, res.params, res.state, test, k)
        return trl, tra, tel, tea, res.loss

    out = collect(jax.lax.map(lambda a: jax.vmap(one)(*a), spread((ks, keys))))
    return SoloStats(*(o.reshape(-1)[:m] for o in out))
