"""Greedy maximisation of submodular selection objectives as one `lax.fori_loop`.

Objective over a set S of clients (|S| = k), the general form used by DivFL, SubTrunc and
UnionFL (Balakrishnan et al., ICLR 2022; Castillo, Kaya, Ye, Hashemi, "Submodular
Maximization Approaches for Equitable Client Selection in Federated Learning"):

    W(S) = (1/Z) sum_{i in cover} (C - min_{j in S} D_ij)          facility location G(S)/Z
           + lam * min(b, sum_{j in S} phi_j)                        SubTrunc term
           - sum_{j in S} pen_j                                      UnionFL: pen = mu 1[j in U]

Greedy keeps c_i = min_{j in S} D_ij (c_i = C while S is empty) and adds, at each of the
k steps, the candidate with the largest gain

    (1/Z) sum_i max(0, c_i - D_ij) + lam [min(b, Phi + phi_j) - min(b, Phi)] - pen_j,

ties broken by the lowest client index. Exact greedy scores every eligible client;
lazy greedy (Minoux 1978) makes the same picks while re-scoring only the clients whose
stale gain (an upper bound, by submodularity) could still be the largest; stochastic greedy
(Mirzasoleiman et al. 2015) scores a fresh uniform subset of r eligible clients per step, so
a step needs only the r columns D[:, cand], computed on the fly from features. Distances
come from a `DistanceOracle`: a dense matrix, or features whose distance columns are
computed in blocks (never the N x N matrix).

Everything is a pure function of arrays: it jits, vmaps and runs inside a round.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp

_TAKEN = -3e38  # gain of a client already picked
_SURPLUS = -1e30  # gain of an unavailable client (fills a slot only when none is left)


class DistanceOracle(NamedTuple):
    """Access to an N x N distance matrix D without necessarily storing it.

    cols(idx [r]) -> D[:, idx] [N, r]
    gains(c [N], w [N]) -> [N]: sum_i w_i max(0, c_i - D_ij) for every column j
    """

    n: int
    cols: Callable[[jax.Array], jax.Array]
    gains: Callable[[jax.Array, jax.Array], jax.Array]


def dense_oracle(distances: jax.Array, symmetric: bool = False) -> DistanceOracle:
    """Oracle over a materialised [N, N] distance matrix.

    Columns are gathered as rows of D^T (contiguous; a gather of columns of D is strided and,
    at N = 10^4, several times slower). Under `jit` the transpose is one copy of D per call;
    `symmetric=True` (D = D^T exactly) reads rows of D itself and needs no copy.
    """
    d = jnp.asarray(distances, jnp.float32)
    dt = d if symmetric else d.T

    def gains(c, w):
        return jnp.sum(w[:, None] * jnp.maximum(c[:, None] - d, 0.0), axis=0)

    return DistanceOracle(d.shape[0], lambda idx: dt[idx].T, gains)


def feature_distances(a: jax.Array, b: jax.Array, scale: jax.Array | float = 1.0) -> jax.Array:
    """||a_i - b_j|| / scale, [Na, Nb], via norms and one matrix product."""
    sq = (jnp.sum(a * a, -1)[:, None] + jnp.sum(b * b, -1)[None, :]
          - 2.0 * jnp.dot(a, b.T, precision=jax.lax.Precision.HIGHEST))
    return jnp.sqrt(jnp.maximum(sq, 0.0)) / scale


def _blocks(n: int, block: int) -> tuple[jax.Array, jax.Array]:
    """Indices [n_blocks, block] (clipped to n-1) and their validity mask."""
    block = max(1, min(block, n))
    nb = -(-n // block)
    j = jnp.arange(nb * block)
    return jnp.minimum(j, n - 1).reshape(nb, block), (j < n).reshape(nb, block)


def pairwise_distances(features: jax.Array, scale: jax.Array | float = 1.0,
                       block: int = 0) -> jax.Array:
    """Dense [N, N] Euclidean distances of feature rows; computed in row blocks of `block`
    (0 = at once) so the intermediate memory stays O(block * N)."""
    f = jnp.asarray(features, jnp.float32)
    n = f.shape[0]
    if block <= 0 or block >= n:
        return _zero_self(feature_distances(f, f, scale), jnp.arange(n), jnp.arange(n))
    rows, _ = _blocks(n, block)
    cols = jnp.arange(n)
    out = jax.lax.map(lambda r: _zero_self(feature_distances(f[r], f, scale), r, cols), rows)
    return out.reshape(-1, n)[:n]


def _zero_self(d: jax.Array, rows: jax.Array, cols: jax.Array) -> jax.Array:
    """d[a, b] = 0 where rows[a] == cols[b]: the norm expansion leaves sqrt(rounding) ~ 1e-3
    on the diagonal otherwise."""
    return jnp.where(rows[:, None] == cols[None, :], 0.0, d)


def feature_oracle(features: jax.Array, scale: jax.Array | float = 1.0,
                   block: int = 1024, cache_norms: bool = True) -> DistanceOracle:
    """Oracle computing distance columns from features in column blocks (no N x N array).

    A column block is ||x_i||^2 + ||x_j||^2 - 2 x_i . x_j: with `cache_norms` (default) the
    N squared norms are computed once per oracle, so a block of r columns costs one [N, p] x
    [p, r] product (2 N p r flops) and no further pass over the N x p features; without it
    every call recomputes them (one extra N x p pass per stochastic-greedy pick).
    `gains` sweeps the candidates in blocks of `block` columns with `lax.map`; its peak
    memory is N * block floats.
    """
    f = jnp.asarray(features, jnp.float32)
    n = f.shape[0]
    if cache_norms:
        sq = jnp.sum(f * f, -1)

        def cols(idx):
            d2 = (sq[:, None] + sq[idx][None, :]
                  - 2.0 * jnp.dot(f, f[idx].T, precision=jax.lax.Precision.HIGHEST))
            return _zero_self(jnp.sqrt(jnp.maximum(d2, 0.0)) / scale, jnp.arange(n), idx)
    else:
        cols = lambda idx: _zero_self(feature_distances(f, f[idx], scale), jnp.arange(n), idx)

    def gains(c, w):
        idx, ok = _blocks(n, block)

        def one(ix):
            return jnp.sum(w[:, None] * jnp.maximum(c[:, None] - cols(ix), 0.0), axis=0)

        return jax.lax.map(one, idx).reshape(-1)[:n]

    return DistanceOracle(n, cols, gains)


def stochastic_candidates(n: int, k: int, eps: float) -> int:
    """r = ceil((N / k) ln(1 / eps)), at most N: stochastic greedy with r uniform candidates
    per pick is (1 - 1/e - eps)-approximate in expectation for monotone submodular W
    (Mirzasoleiman et al., "Lazier Than Lazy Greedy", AAAI 2015), with N r k = N^2 ln(1/eps)
    gain evaluations in all, independent of k."""
    if not 0.0 < eps < 1.0:
        raise ValueError(f"eps must lie in (0, 1) (got {eps})")
    return int(min(n, math.ceil(n / k * math.log(1.0 / eps))))


def jl_dim(n: int, eps: float) -> int:
    """Johnson-Lindenstrauss dimension k >= 4 ln N / (eps^2/2 - eps^3/3) (Dasgupta and
    Gupta 2003): a Gaussian projection to k dimensions keeps all N (N - 1) / 2 pairwise
    distances of N points within a factor 1 +- eps with probability >= 1 - 1/N."""
    if not 0.0 < eps < 1.0:
        raise ValueError(f"eps must lie in (0, 1) (got {eps})")
    return int(math.ceil(4.0 * math.log(n) / (eps ** 2 / 2 - eps ** 3 / 3)))


class GreedyResult(NamedTuple):
    idx: jax.Array  # [k] int32 picked clients, in pick order
    valid: jax.Array  # [k] bool, False for surplus slots (fewer than k available clients)
    gains: jax.Array  # [k] float32 marginal gain of each pick


def greedy(oracle: DistanceOracle, k: int, *, available: jax.Array | None = None,
           cover: jax.Array | None = None, c0: jax.Array | float = 1.0,
           normalize: bool = False, phi: jax.Array | None = None,
           lam: jax.Array | float = 0.0, b: jax.Array | float = jnp.inf,
           penalty: jax.Array | None = None, key: jax.Array | None = None,
           r: int = 0, lazy: bool = False, lazy_batch: int = 128) -> GreedyResult:
    """Greedy (r = 0) or stochastic greedy (r > 0) maximisation of W(S), |S| = k.

    Args:
      oracle: distances D (see `dense_oracle`, `feature_oracle`).
      k: number of picks (static).
      available: [N] bool, clients that may be picked (default all). When fewer than k are
        available the remaining slots hold unavailable clients with `valid = False`.
      cover: [N] bool/float weights of the clients the facility location represents
        (default `available`).
      c0: C, the value of min_{j in S} D_ij for the empty S; must be >= max D for G to be
        monotone (picks do not depend on it once it is).
      normalize: divide the facility-location term by sum(cover) (Z; else Z = 1).
      phi, lam, b: the SubTrunc term lam * min(b, sum_{j in S} phi_j) (phi [N]; off if None).
      penalty: [N] modular cost subtracted per pick (UnionFL: mu * 1[j in window]).
      key, r: stochastic greedy with r candidates per step (key required when r > 0).
      lazy: exact greedy (r = 0 only) by lazy evaluation: the first step scores every
        client; later steps keep each client's last gain as an upper bound (gains only
        shrink as S grows, W being submodular) and re-score, in a `lax.while_loop`, the
        `lazy_batch` stale clients with the largest bounds until the client with the
        largest bound is fresh. Same picks and tie-breaking as the
        plain greedy (up to float rounding of exact ties), at O(N) per re-scored client
        instead of O(N^2) per step.

    Returns:
      `GreedyResult(idx, valid, gains)`.
    """
    n = oracle.n
    avail = jnp.ones((n,), bool) if available is None else jnp.asarray(available, bool)
    w = jnp.asarray(avail if cover is None else cover, jnp.float32)
    if normalize:
        w = w / jnp.maximum(jnp.sum(w), 1.0)
    use_trunc = phi is not None
    phi = jnp.zeros((n,), jnp.float32) if phi is None else jnp.asarray(phi, jnp.float32)
    pen = jnp.zeros((n,), jnp.float32) if penalty is None else jnp.asarray(penalty, jnp.float32)
    if r > 0:
        if key is None:
            raise ValueError("stochastic greedy (r > 0) needs a key")
        if lazy:
            raise ValueError("lazy greedy is exact greedy: use r = 0 with lazy=True")
        r = min(r, n)
    c_init = jnp.full((n,), c0, jnp.float32)

    def extra_gain(cand, big_phi):
        g = -pen[cand]
        if use_trunc:
            g = g + lam * (jnp.minimum(b, big_phi + phi[cand]) - jnp.minimum(b, big_phi))
        return g

    def commit(carry, t, j, ok, col, g):
        # add pick j (step t) to S: cover, taken, Phi, and the outputs
        c, taken, big_phi, idx, valid, gains = carry
        c = jnp.where(ok, jnp.minimum(c, col), c)
        big_phi = big_phi + jnp.where(ok, phi[j], 0.0)
        return (c, taken.at[j].set(True), big_phi, idx.at[t].set(j.astype(jnp.int32)),
                valid.at[t].set(ok), gains.at[t].set(jnp.where(ok, g, 0.0)))

    def body(t, carry):
        c, taken, big_phi, idx, valid, gains = carry
        eligible = avail & ~taken
        if r > 0:
            u = jax.random.uniform(jax.random.fold_in(key, t), (n,))
            score = jnp.where(eligible, u, jnp.where(taken, -3.0 - u, -1.0 - u))
            cand = jnp.sort(jax.lax.top_k(score, r)[1])  # r eligible ones first, index order
            dcols = oracle.cols(cand)  # [N, r]
            fl = jnp.sum(w[:, None] * jnp.maximum(c[:, None] - dcols, 0.0), axis=0)
        else:
            cand = jnp.arange(n)
            fl = oracle.gains(c, w)
        g = fl + extra_gain(cand, big_phi)
        g = jnp.where(eligible[cand], g, jnp.where(taken[cand], _TAKEN, _SURPLUS))
        p = jnp.argmax(g)
        j = cand[p]
        col = dcols[:, p] if r > 0 else oracle.cols(j[None])[:, 0]
        return commit(carry, t, j, avail[j], col, g[p])

    nb = min(lazy_batch, n)

    def lazy_body(t, carry):
        c, taken, big_phi, idx, valid, gains, ub = carry
        eligible = avail & ~taken
        any_eligible = jnp.any(eligible)
        top = lambda u: jnp.argmax(jnp.where(eligible, u, -jnp.inf))

        def cond(s):
            _, fresh, j = s
            return any_eligible & ~fresh[j]

        def rescore(s):
            # re-score the nb stale eligible clients with the largest bounds at once
            u, fresh, _ = s
            stale = eligible & ~fresh
            cand = jax.lax.top_k(jnp.where(stale, u, -jnp.inf), nb)[1]
            fl = jnp.sum(w[:, None] * jnp.maximum(c[:, None] - oracle.cols(cand), 0.0), axis=0)
            u = u.at[cand].set(jnp.where(stale[cand], fl + extra_gain(cand, big_phi), u[cand]))
            fresh = fresh.at[cand].set(fresh[cand] | stale[cand])
            return u, fresh, top(u)

        # step 0 scores everyone at once (all bounds fresh); later steps start all-stale
        ub, _, j = jax.lax.while_loop(cond, rescore, (ub, jnp.full((n,), t == 0), top(ub)))
        surplus = jnp.argmax(jnp.where(taken, _TAKEN, _SURPLUS))  # first client not taken
        j = jnp.where(any_eligible, j, surplus)
        ok = avail[j] & any_eligible
        return (*commit(carry[:-1], t, j, ok, oracle.cols(j[None])[:, 0], ub[j]), ub)

    init = (c_init, jnp.zeros((n,), bool), jnp.zeros((), jnp.float32),
            jnp.zeros((k,), jnp.int32), jnp.zeros((k,), bool), jnp.zeros((k,), jnp.float32))
    if lazy:
        ub0 = oracle.gains(c_init, w) + extra_gain(jnp.arange(n), jnp.zeros((), jnp.float32))
        _, _, _, idx, valid, gains, _ = jax.lax.fori_loop(0, k, lazy_body, (*init, ub0))
    else:
        _, _, _, idx, valid, gains = jax.lax.fori_loop(0, k, body, init)
    return GreedyResult(idx, valid, gains)


def facility_location(distances: jax.Array, k: int, lazy: bool = True) -> jax.Array:
    """Exact greedy facility location: k indices maximising sum_i (C - min_{j in S} D_ij).

    Args:
      distances: [N, N] dissimilarities (e.g. ||g_i - g_j|| of client gradients, DivFL).
      k: number of picks (static), k <= N.
      lazy: lazy evaluation (default; same picks, far fewer distance columns read after the
        first step: see `greedy`); False scores every client at every step.

    Returns:
      [k] int32 picked indices in pick order (ties broken by the lowest index). Jit-able;
      C = max(D), so the objective is monotone and the greedy value is >= (1 - 1/e) of the
      optimum.
    """
    d = jnp.asarray(distances, jnp.float32)
    return greedy(dense_oracle(d), k, c0=jnp.max(d), lazy=lazy).idx


def stochastic_facility_location(key: jax.Array, distances: jax.Array, k: int, r: int
                                 ) -> jax.Array:
    """Stochastic greedy facility location: each of the k steps scores r random candidates.

    With r = N it equals `facility_location`. Jit-able (k, r static).
    """
    d = jnp.asarray(distances, jnp.float32)
    return greedy(dense_oracle(d), k, c0=jnp.max(d), key=key, r=r).idx


def stochastic_facility_location_features(key: jax.Array, features: jax.Array, k: int,
                                          r: int) -> jax.Array:
    """Stochastic greedy facility location on feature rows (D_ij = ||x_i - x_j||), computing
    only the r distance columns each step needs; for N where N x N does not fit in memory."""
    f = jnp.asarray(features, jnp.float32)
    scale = 2.0 * jnp.max(jnp.linalg.norm(f, axis=-1)) + 1e-12  # >= max D
    return greedy(feature_oracle(f, scale), k, c0=1.0, key=key, r=r).idx
