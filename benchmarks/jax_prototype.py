"""A FedAvg round as a JAX user would first write it: the peer "plain JAX program".

About a hundred lines, no library: the clients' rows in one array with offsets and counts
(from our loader, so the data are identical), an MLP [64, 30] with dropout written with
`jax.nn`, tau local SGD steps in a `lax.scan`, the cohort in one `jax.vmap`, the
n_k-weighted average, the whole round under one `jax.jit`. Batches are drawn uniformly
with replacement from each client's rows, as ours are. It runs on whatever devices JAX
gives the process (one, by default), with no sharding and no layout choices: what a
prototype gets before anyone tunes it.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np


def init_mlp(key, sizes):
    """Glorot-uniform weights and zero biases for layer sizes [d_in, h1, ..., classes]."""
    params = []
    for k, (a, b) in zip(jax.random.split(key, len(sizes) - 1), zip(sizes, sizes[1:], strict=False),
                         strict=True):
        lim = np.sqrt(6.0 / (a + b))
        params.append((jax.random.uniform(k, (a, b), jnp.float32, -lim, lim),
                       jnp.zeros((b,), jnp.float32)))
    return params


def forward(params, x, key, train: bool, drop: float = 0.2):
    h = x
    for i, (w, b) in enumerate(params):
        h = h @ w + b
        if i < len(params) - 1:
            h = jax.nn.relu(h)
            if i == 0 and train:  # dropout after the first hidden layer
                keep = jax.random.bernoulli(key, 1.0 - drop, h.shape)
                h = jnp.where(keep, h / (1.0 - drop), 0.0)
    return h


def loss_fn(params, x, y, key):
    logits = forward(params, x, key, True)
    return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), y[:, None], 1))


def make_round(x, y, offset, count, *, cohort, steps, batch, lr, scale, mean, std):
    """round(params, key) -> params: one FedAvg round on the given client rows."""
    x = jnp.asarray(x)
    y = jnp.asarray(y, jnp.int32)
    offset = jnp.asarray(offset)
    count = jnp.asarray(count)
    num_clients = count.shape[0]

    def client(params, k, key):
        def step(p, key):
            kb, kd = jax.random.split(key)
            rows = offset[k] + jax.random.randint(kb, (batch,), 0, count[k])
            xb = (x[rows].reshape(batch, -1).astype(jnp.float32) * scale - mean) / std
            g = jax.grad(loss_fn)(p, xb, y[rows], kd)
            return jax.tree.map(lambda a, b: a - lr * b, p, g), None

        p, _ = jax.lax.scan(step, params, jax.random.split(key, steps))
        return p

    @jax.jit
    def one_round(params, key):
        ks, kc = jax.random.split(key)
        idx = jax.random.choice(ks, num_clients, (cohort,), replace=False)
        new = jax.vmap(client, in_axes=(None, 0, 0))(params, idx,
                                                     jax.random.split(kc, cohort))
        w = count[idx].astype(jnp.float32)
        w = w / w.sum()
        return jax.tree.map(lambda a: jnp.tensordot(w, a, axes=1), new)

    return one_round


def prototype_round(data, ds, cfg, lr: float, seed: int = 0):
    """A callable running one round of the prototype on our loaded data (blocks)."""
    tr = data.train
    x, y = np.asarray(tr.x), np.asarray(tr.y)
    d_in = int(np.prod(x.shape[1:]))
    rnd = make_round(x, y, np.asarray(tr.offset), np.asarray(tr.count), cohort=cfg.cohort,
                     steps=cfg.local_steps, batch=cfg.batch_size, lr=lr,
                     scale=float(ds.scale), mean=float(np.asarray(ds.mean)),
                     std=float(np.asarray(ds.std)))
    box = {"params": init_mlp(jax.random.key(seed), [d_in, 64, 30, data.num_classes]),
           "r": 0}

    def call():
        box["params"] = rnd(box["params"], jax.random.fold_in(jax.random.key(seed), box["r"]))
        jax.block_until_ready(box["params"])
        box["r"] += 1

    return call
