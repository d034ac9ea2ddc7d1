"""Large cohorts: the cohort's local updates in chunks of clients (one or two passes).

When m x |params| does not fit in memory, the round's `executor.Executor` runs the vmapped
local update on chunks of c clients with `lax.map`/`lax.scan` instead of all m at once, so
at most c client models (and their deltas) are alive at a time.

Aggregation weights may depend on statistics of the whole cohort (MaxFL's q_k and adaptive
server lr, Exp-alpha's softmax over the cohort, q-FFL), so the chunked round makes two
passes over the chunks:

  1. statistics: every chunk runs its local updates and keeps everything a client sends
     *except* Delta_k (loss, n_k, loss reports, model state), so the weight rule sees
     the whole cohort's statistics exactly as in the unchunked round;
  2. aggregation: every chunk runs its local updates again with the same keys (hence the
     same Delta_k) and adds sum_{k in chunk} w_k Delta_k to a running sum.

This costs twice the local computation but keeps every weight rule exact; the unchunked
round (the default) is unchanged.

Rules that are a softmax of per-client values (`WeightRule.logits`: proportional, uniform,
Exp-alpha) need no second pass: `chunked_one_pass` keeps a running maximum M of the values
z_k, a running sum S = sum_k exp(z_k - M) and a running sum A = sum_k exp(z_k - M) Delta_k,
rescaling S and A by exp(M_old - M_new) when a chunk raises M (the online softmax); A / S
is then sum_k w_k Delta_k, and each client trains once.

In a chunked round the `ClientUpdate` seen by the weight rule, `post` and the selector's
`update` has `delta=None` and carries each client's ||Delta_k||^2 in
`ClientUpdate.delta_sq_norm` instead (q-FFL reads it; rules that need the per-client deltas
themselves cannot use chunking). A `corrupt` hook is applied per chunk with the key
`fold_in(key, chunk)` in every pass: without Byzantine clients the result equals the
unchunked round up to float summation order; with them the noise has the same
distribution but is drawn differently.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ..core.memory import memory_budget

# Auto mode: chunk when the cohort's per-client copies (4 x params, float32) would exceed
# this share of the device memory budget.
AUTO_SHARE = 0.25


def param_count(params) -> int:
    return sum(int(a.size) for a in jax.tree.leaves(params))


def chunk_size(setting: int, m: int, params) -> int:
    """Clients per chunk for a cohort of m (0 = run unchunked).

    `setting` is `RunConfig.client_chunk`: > 0 a fixed chunk, -1 never, 0 automatic
    (chunk only when 16 bytes x m x |params| exceeds `AUTO_SHARE` of the memory budget).
    """
    if setting < 0 or m <= 1:
        return 0
    if setting > 0:
        return setting if setting < m else 0
    per_client = 16 * max(1, param_count(params))
    budget = int(AUTO_SHARE * memory_budget())
    if m * per_client <= budget:
        return 0
    return max(1, min(m - 1, budget // per_client))


def _chunks(c: int, m: int, *arrays):
    """Pad the leading axis from m to a multiple of c (repeating row 0), then [n, c, ...]."""
    n = -(-m // c)
    pad = n * c - m

    def one(a):
        if pad:
            a = jnp.concatenate([a, jnp.repeat(a[:1], pad, axis=0)])
        return a.reshape((n, c) + a.shape[1:])

    return n, [one(a) for a in arrays]


def _run_chunk(local, corrupt, state, data, hp, k_adv, i, ix, ks, vs):
    upd = jax.vmap(local, in_axes=(None, None, 0, 0, None))(state, data, ix, ks, hp)
    if corrupt is not None:
        upd = corrupt(upd, ix, vs, jax.random.fold_in(k_adv, i), data, hp)
    return upd


def _statistics(upd):
    """A chunk's updates without deltas, each client's ||Delta_k||^2 in `delta_sq_norm`."""
    sq = sum(jnp.sum(d.reshape(d.shape[0], -1) ** 2, axis=1)
             for d in jax.tree.leaves(upd.delta))
    return upd._replace(delta=None, delta_sq_norm=sq)


def _unchunk(tree, m: int):
    """[n, c, ...] leaves back to the cohort's [m, ...] (padding dropped)."""
    return jax.tree.map(lambda a: a.reshape((-1,) + a.shape[2:])[:m], tree)


def chunked_statistics(local, corrupt, state, data, idx, keys, valid, k_adv, hp, c: int):
    """Pass 1: the cohort's `ClientUpdate` without deltas ([m] leaves, `delta=None`).

    Each client's squared update norm ||Delta_k||^2 (after `corrupt`) is kept in
    `delta_sq_norm`, so rules that read it (q-FFL's h_k) stay exact.
    """
    m = idx.shape[0]
    n, (ix, ks, vs) = _chunks(c, m, idx, keys, valid)

    def one(args):
        i, a, b, v = args
        return _statistics(_run_chunk(local, corrupt, state, data, hp, k_adv, i, a, b, v))

    return _unchunk(jax.lax.map(one, (jnp.arange(n), ix, ks, vs)), m)


def chunked_weighted_delta(local, corrupt, state, data, idx, keys, valid, k_adv, hp, w, c: int):
    """Pass 2: sum_k w_k Delta_k, accumulated chunk by chunk (same keys as pass 1)."""
    m = idx.shape[0]
    wp = jnp.concatenate([w, jnp.zeros((-(-m // c) * c - m,), w.dtype)])
    n, (ix, ks, vs) = _chunks(c, m, idx, keys, valid)
    wp = wp.reshape(n, c)

    def body(acc, args):
        i, a, b, v, wc = args
        upd = _run_chunk(local, corrupt, state, data, hp, k_adv, i, a, b, v)
        return jax.tree.map(lambda s, d: s + jnp.tensordot(wc, d, axes=1), acc, upd.delta), None

    acc0 = jax.tree.map(jnp.zeros_like, state.params)
    acc, _ = jax.lax.scan(body, acc0, (jnp.arange(n), ix, ks, vs, wp))
    return acc


def chunked_one_pass(local, corrupt, state, data, idx, keys, valid, k_adv, hp, logits,
                     c: int):
    """One pass: the cohort's statistics (as `chunked_statistics`) and the pseudo-gradient
    sum_k w_k Delta_k with w = masked_softmax(z, valid), z = `logits(...)` per chunk.

    Returns (updates without deltas [m], pseudo-gradient like params). Equal to pass 1 +
    pass 2 with w from the same softmax, up to float summation order.
    """
    m = idx.shape[0]
    n, (ix, ks, vs) = _chunks(c, m, idx, keys, valid)
    real = (jnp.arange(n * c) < m).reshape(n, c)  # padded slots repeat client 0: masked

    def body(carry, args):
        acc, top, tot = carry
        i, a, b, v, r = args
        upd = _run_chunk(local, corrupt, state, data, hp, k_adv, i, a, b, v)
        ok = v & r
        z = jnp.where(ok, logits(upd, a, ok, state, hp), -jnp.inf)
        new_top = jnp.maximum(top, jnp.max(z))
        shift = jnp.where(jnp.isfinite(new_top), new_top, 0.0)
        keep = jnp.where(jnp.isfinite(top), jnp.exp(top - shift), 0.0)
        e = jnp.where(ok, jnp.exp(jnp.where(ok, z - shift, 0.0)), 0.0)
        acc = jax.tree.map(lambda s_, d: keep * s_ + jnp.tensordot(e, d, axes=1), acc,
                           upd.delta)
        return (acc, new_top, keep * tot + jnp.sum(e)), _statistics(upd)

    acc0 = jax.tree.map(jnp.zeros_like, state.params)
    init = (acc0, jnp.float32(-jnp.inf), jnp.float32(0.0))
    (acc, _, tot), upd = jax.lax.scan(body, init, (jnp.arange(n), ix, ks, vs, real))
    scale = jnp.where(tot > 0, 1.0 / jnp.where(tot > 0, tot, 1.0), 0.0)
    pseudo = jax.tree.map(lambda a: a * scale, acc)
    return _unchunk(upd, m), pseudo
