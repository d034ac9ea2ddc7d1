"""Loss- and diversity-aware cohort selectors as `round.Selector`s.

  * Power-of-Choice (Cho, Wang, Joshi 2020, "Client Selection in Federated Learning:
    Convergence Analysis and Power-of-Choice Selection Strategies"): d candidates drawn
    without replacement proportionally to their data size; each evaluates the current global
    model on its train data; the m with the largest loss form the cohort.
  * DivFL (Balakrishnan et al., ICLR 2022, "Diverse Client Selection for Federated Learning
    via Submodular Maximization"): greedy facility location on client features.
  * SubTrunc and UnionFL (Castillo, Kaya, Ye, Hashemi, "Submodular Maximization Approaches
    for Equitable Client Selection in Federated Learning"): facility location plus
    lam * min(b, sum_{i in S} phi(f_i)), resp. minus mu * |(union of the last u cohorts) & S|.

Selector memory (`state.selector`, a `DiversityMemory`; diversity selectors only):

    features [M, p] float32   client features g_k (stale for clients not selected lately)
    loss [M] float32          F_k at the model the feature was computed at (SubTrunc f_k)
    received (params pytree)  the global model the current cohort received
    received_state            its model state
    window [u, m] int32       UnionFL: the last u cohorts (-1 = empty slot; else None)

Features are the flattened full local gradient of F_k at the received global model over all
the client's train rows (chunked as `client.client_loss`), or with `selector_features=delta`
the client's last update Delta_k = w - w_k. All features are computed at round 0 (delta
mode: client_lr * tau * gradient, the first-order approximation of Delta_k), the selected
clients' ones after each round (`Selector.update`), and all of them again every
`feature_refresh` rounds. `feature_dim > 0` multiplies features by a fixed Gaussian matrix
[p, feature_dim] / sqrt(feature_dim) (Johnson-Lindenstrauss), generated from a fixed key
in blocks on the fly (never stored), which keeps the [M, p] memory and the distance cost
small for big models.

Objective scale (`selector_objective`):

  * `raw` (default, the paper's eqs. 9-14): D_ij = ||g_i - g_j|| on the unscaled features and
    G(S) = sum_{i in N} (C - min_{j in S} D_ij) summed over every available client, with
    C = 2 max_k ||g_k|| >= max D (C shifts every first-step gain by the same N C, so it never
    changes a pick). lam * min(b, .) and mu * |window & S| are then traded against a sum of
    gradient distances over N clients, whose size depends on N, the model and the round.
  * `normalized`: D_ij / s with s = 2 max_k ||g_k||, averaged over the covered clients, so
    G(S)/Z lies in [0, 1] with C = 1. It exists because in the raw form the same lam, b, mu
    mean different things for another model, another N or a later round (gradients shrink as
    training converges, so the SubTrunc and UnionFL terms gain weight over time); normalised,
    lam * b and mu compare with a facility-location value that is at most 1. DivFL's picks
    are the same in both forms (a positive rescaling of G); SubTrunc's and UnionFL's are not.

With `feature_refresh = 1` (the paper-literal setting) every available client's loss and
full gradient are recomputed at the new global model after every round, so each selection
sees fresh f_i(w) and grad f_i(w) of everyone: one full-data gradient pass per round,
visible in `timing["sec_per_round"]`.
"""

from __future__ import annotations

import functools
import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from ..core.arrays import ClientArrays, client_chunk, client_norms
from ..core.capabilities import capable
from ..core.config import ConfigError, Options, fields_in
from ..core.fields import component, option, when
from ..core.models import Model
from ..core.parts import Selector
from ..core.registry import Registry
from ..execute.distributed import map_spread
from ..local.client import client_loss
from . import submodular
from .selection import flip_cohort, stratified, stratified_counts, uniform, weighted

# the cohort and its selector (an algorithm that draws its own cohort refuses another one,
# and the per-round flips of --flip-protocol)
OWN_COHORT = capable("selector", "{alg} draws its own cohort", "use --selector random and "
                     "--flip-protocol static",
                     unless=lambda cfg: cfg.selector == "random" and cfg.flip_protocol == "static")
option("cohort", 10, "clients sampled per round", group="federation", ge=1)
option("selector", "random", "cohort selector (random: uniform from the available pool)",
       registry="selector", group="selection", needs=OWN_COHORT)

# The options of each selector, declared here
POC, UNIONFL = component("selector", "poc"), component("selector", "unionfl")
_GREEDY_SELECTORS = ("divfl", "subtrunc", "unionfl")
GREEDY = component("selector", *_GREEDY_SELECTORS)
# selector -> the history metrics its paper reports, named on a run's last line beside the
# test accuracy (`run.records.headline`): submodular selection is judged by the client
# dissimilarity it leaves (the SubTrunc / UnionFL paper, Castillo et al.)
HEADLINES: dict[str, tuple[str, ...]] = {n: ("client_dissimilarity",)
                                         for n in _GREEDY_SELECTORS}
# SubTrunc's options: of SubTrunc, and of UnionFL on a SubTrunc base (`--union-base`)
SUBTRUNC = when(lambda cfg: cfg.selector != "unionfl" or cfg.union_base == "subtrunc",
                "it configures --selector subtrunc (or unionfl with --union-base subtrunc)"
                ) & component("selector", "subtrunc", "unionfl")
SUBTRUNC_LAMBDA = option("subtrunc_lambda", 0.5, "SubTrunc weight lambda of the truncated loss "
                         "term", applies=SUBTRUNC, tunable=True, group="selection", ge=0)
SUBTRUNC_B = option("subtrunc_b", 1.10, "SubTrunc truncation b in lambda*min(b, sum phi(f_i))",
                    applies=SUBTRUNC, tunable=True, group="selection")
UNION_MU = option("union_mu", 1.0, "UnionFL penalty mu per selected client of the recent "
                  "window", applies=UNIONFL, tunable=True, group="selection", ge=0)
POC_D = option("poc_d", 0, "Power-of-Choice candidates d drawn per round (0 = 2 x cohort, at "
               "most the number of clients)", applies=POC, group="selection", ge=0)
UNION_WINDOW = option("union_window", 5, "UnionFL window u: number of past rounds whose cohorts "
                      "are penalised", applies=UNIONFL, group="selection", ge=1)
UNION_BASE = option("union_base", "divfl", "UnionFL base objective f_t", ("divfl", "subtrunc"),
                    applies=UNIONFL, group="selection")
option("greedy_candidates", 0, "stochastic greedy: random candidates r scored per pick (0 = "
       "exact greedy over all clients)", applies=GREEDY, group="selection", ge=0)
option("greedy_epsilon", 0.0, "stochastic greedy with r = ceil((N/cohort) ln(1/eps)) candidates "
       "per pick, the (1-1/e-eps) guarantee; 0 = use --greedy-candidates", applies=GREEDY,
       group="selection", ge=0, lt=1, hint="0 = use --greedy-candidates")
option("selector_features", "grad", "DivFL client features: full local gradient at the received "
       "model, or the last update Delta_k", ("grad", "delta"), applies=GREEDY, group="selection")
option("feature_refresh", 0, "recompute every client's selector features every R rounds (0 = "
       "only at round 0; selected clients refresh every round)", applies=GREEDY,
       group="selection", ge=0)
option("feature_dim", 0, "random Gaussian projection of the selector features to this many "
       "dimensions (0 = the flattened parameter-sized vector)", applies=GREEDY,
       group="selection", ge=0)
option("distance_budget_mb", 256.0, "largest N x N distance matrix (MB) the greedy "
       "materialises (the stochastic greedy: where its cohort x candidates >= N); above it "
       "columns are computed in blocks", applies=GREEDY,
       group="selection", gt=0)
option("selector_objective", "raw", "DivFL/SubTrunc/UnionFL objective scale: raw = the paper's "
       "sum of ||g_i - g_j|| over clients; normalized = distances / (2 max ||g||), averaged "
       "over clients", ("raw", "normalized"), applies=GREEDY, group="selection")
option("cohort_groups", "", "selector 'stratified': cohort slots per client group, e.g. '4,2' "
       "(group = composition entry of --imbalance-ratios, else 0 clean / 1 flipped); '' = "
       "derived from the pool's mix", applies=component("selector", "stratified"), group="data")
SUBTRUNC_PHI = option("subtrunc_phi", "log", "SubTrunc phi: log = ln(1+x), or identity",
                      ("log", "identity"), applies=SUBTRUNC, group="selection")

DELTA_CHUNK_ERROR = ("--selector-features delta needs every cohort update, which a chunked "
                     "cohort (--client-chunk) does not keep: use --selector-features grad or "
                     "--client-chunk -1")

_PROJ_SEED = 0x5E1EC7


def flatten(tree) -> jax.Array:
    """All leaves of a pytree as one float32 vector."""
    return jnp.concatenate([jnp.ravel(a).astype(jnp.float32) for a in jax.tree.leaves(tree)])


def project(v: jax.Array, dim: int, block: int = 4096) -> jax.Array:
    """v [p] @ P [p, dim] / sqrt(dim), P i.i.d. N(0, 1) from a fixed key, made in row blocks."""
    if dim <= 0:
        return v
    p = v.shape[0]
    nb = -(-p // block)
    vp = jnp.pad(v, (0, nb * block - p)).reshape(nb, block)
    key = jax.random.key(_PROJ_SEED)

    def body(i, acc):
        pm = jax.random.normal(jax.random.fold_in(key, i), (block, dim))
        return acc + vp[i] @ pm

    return jax.lax.fori_loop(0, nb, body, jnp.zeros((dim,), jnp.float32)) / jnp.sqrt(dim)


def project_rows(x: jax.Array, dim: int, block: int = 4096) -> jax.Array:
    """Rows x [B, p] @ P [p, dim] / sqrt(dim) with the same P as `project` (each block of P
    generated once for all B rows): the projection of a chunk of clients at once, so N
    model-sized features never have to be held together (N x p), only N x dim."""
    if dim <= 0:
        return x
    b, p = x.shape
    nb = -(-p // block)
    xp = jnp.pad(x, ((0, 0), (0, nb * block - p))).reshape(b, nb, block)
    key = jax.random.key(_PROJ_SEED)

    def body(i, acc):
        pm = jax.random.normal(jax.random.fold_in(key, i), (block, dim))
        return acc + xp[:, i] @ pm

    return jax.lax.fori_loop(0, nb, body, jnp.zeros((b, dim), jnp.float32)) / jnp.sqrt(dim)


# A client's last (or only) chunk of rows runs at the smallest of these sizes that holds its
# remaining rows: fractions of the chunk, rounded up to 4 rows, and the chunk itself (one
# compiled gradient each, about 1 s of compilation apiece for LeNet-5). LeNet-5's features
# of 100 MNIST clients of 50-71 rows then take 56, 64 or 71 rows each instead of 71: 0.42
# -> 0.36 CPU s per pass on 2 cores (benchmarks/RESULTS.md).
TAIL_FRACTIONS = (0.75, 0.875)


def tail_sizes(chunk: int) -> tuple[int, ...]:
    """The row counts a client's last chunk may run at (`TAIL_FRACTIONS`), ascending."""
    sizes = {min(chunk, -(-math.ceil(chunk * f) // 4) * 4) for f in TAIL_FRACTIONS}
    return tuple(sorted(sizes | {chunk}))


def tail_class(arrays: ClientArrays, k: jax.Array, chunk: int = 256) -> jax.Array:
    """Which row count client k's last chunk runs at in `client_grad`: 0 when its rows fill
    whole chunks, else 1 + the index in `tail_sizes` of the smallest that holds the rest."""
    chunk = max(1, min(chunk, arrays.max_count))
    rest = arrays.count[k] % chunk
    return jnp.where(rest == 0, 0, 1 + jnp.searchsorted(jnp.asarray(tail_sizes(chunk)), rest))


def client_grad(model: Model, params, state, arrays: ClientArrays, k: jax.Array,
                chunk: int = 256, tail: int | None = None):
    """(F_k(w), grad F_k(w)) of client k over all its rows: its full chunks of `chunk` rows
    (as many as it holds), then the rest in the smallest of `tail_sizes(chunk)` that holds
    it, the rows beyond the client's masked. `tail` = `tail_class` of the client fixes that
    size (no branch: the caller has grouped its clients by it)."""
    model = model.for_grad()
    chunk = max(1, min(chunk, arrays.max_count))
    sizes = tail_sizes(chunk)
    count = arrays.count[k]
    full = count // chunk

    def chunk_grad(rows, size):
        def loss(p):
            x, y, valid = (a[:size] for a in rows)
            per_row, _ = model.per_sample(p, state, x, y)
            return jnp.sum(per_row * valid)
        return jax.value_and_grad(loss)(params)

    def body(i, acc):
        v, g = chunk_grad(client_chunk(arrays, k, i * chunk, chunk), chunk)
        return acc[0] + v, jax.tree.map(jnp.add, acc[1], g)

    zero = (jnp.zeros(()), jax.tree.map(jnp.zeros_like, params))
    tot, grad = jax.lax.fori_loop(0, full, body, zero)
    branches = [lambda rows: zero] + [lambda rows, s=s: chunk_grad(rows, s) for s in sizes]
    if tail == 0:
        v, g = zero
    else:
        # the tail's rows gathered once, outside the branches, which take only them
        rows = client_chunk(arrays, k, full * chunk, chunk)
        if tail is None:
            v, g = jax.lax.switch(tail_class(arrays, k, chunk), branches, rows)
        else:
            v, g = branches[tail](rows)
    n = client_norms(arrays)[0][k]  # rows; counted tokens for per-position targets
    return (tot + v) / n, jax.tree.map(lambda a, b: (a + b) / n, grad, g)


def client_grads(model: Model, ks: jax.Array, shared, then, chunk: int = 256):
    """`then(F_k, grad F_k, shared)` for every client k of `ks` (`client_grad` at the params,
    model state and `ClientArrays` of `shared[:3]`), one client at a time (`map_spread`: each
    device its share under a mesh), the clients grouped by `tail_class`: one loop per row
    count of their last chunk, no branch per client."""
    arrays = shared[2]
    classes = 1 + len(tail_sizes(max(1, min(chunk, arrays.max_count))))

    def one(k, sh, tail):
        loss, g = client_grad(model, sh[0], sh[1], sh[2], k, chunk, tail=tail)
        return then(loss, g, sh)

    return map_spread([functools.partial(one, tail=t) for t in range(classes)], ks, shared,
                      group=lambda k, sh: tail_class(sh[2], k, chunk))


def _batch(m: int) -> int:
    """Clients evaluated together by the forward-only passes (`lax.map` batch size)."""
    return max(1, min(m, 16))


def power_of_choice(model: Model, opts: Options) -> Selector:
    """Power-of-Choice: top-m train loss among d candidates drawn proportionally to n_k."""
    m = opts.cohort
    d = opts.poc_d or min(2 * m, opts.clients)

    def select(key, state, data, hp):
        cand, cvalid = weighted(key, state.pool, d, data.train.count.astype(jnp.float32))
        losses = jax.lax.map(
            lambda k: client_loss(model, state.params, state.model_state, data.train, k)[0],
            cand, batch_size=_batch(d))
        score = jnp.where(cvalid, losses, -jnp.inf)
        top = jax.lax.top_k(score, m)[1]
        return cand[top], cvalid[top]

    return Selector(init=lambda key, state, data, hp: None, select=select)


class DiversityMemory(NamedTuple):
    """The diversity selectors' memory (`ServerState.selector`; see the module docstring)."""

    features: jax.Array  # [M, p] float32 client features g_k
    loss: jax.Array  # [M] float32 F_k at the model each feature was computed at
    received: Any  # params pytree: the global model the current cohort received
    received_state: Any  # its model state
    window: jax.Array | None = None  # [u, m] int32 UnionFL's last u cohorts, else None


def submodular_selector(model: Model, opts: Options, kind: str) -> Selector:
    """DivFL (`kind="divfl"`), SubTrunc (`"subtrunc"`) or UnionFL (`"unionfl"`)."""
    m, r = opts.cohort, opts.greedy_candidates
    if opts.greedy_epsilon > 0:
        r = submodular.stochastic_candidates(opts.clients, m, opts.greedy_epsilon)
    trunc = kind == "subtrunc" or (kind == "unionfl" and opts.union_base == "subtrunc")
    union = kind == "unionfl"
    delta_mode = opts.selector_features == "delta"
    budget = opts.distance_budget_mb * 2 ** 20
    phi_fn = jnp.log1p if opts.subtrunc_phi == "log" else (lambda x: x)
    normalized = opts.selector_objective == "normalized"

    def grad_features(params, mstate, data, ks, hp):
        def then(loss, g, shared):
            v = flatten(g)
            if delta_mode:
                v = v * shared[3] * opts.local_steps
            return project(v, opts.feature_dim), loss
        # One client at a time: vmapping per-client gradients at shared parameters makes
        # every weight gradient a batched product (a batch-grouped convolution for XLA's
        # convolutions), which XLA:CPU runs slower than these sequential plain ones
        # (LeNet-5, MNIST, 100 clients on one device, pooled layers: 10 clients per vmap
        # step 0.65 CPU s against 0.41, benchmarks/RESULTS.md). With a mesh, each device its
        # share of the clients, as a program of its own.
        return client_grads(model, ks, (params, mstate, data.train, hp.client_lr), then)

    def init(key, state, data, hp):
        feats, loss = grad_features(state.params, state.model_state, data,
                                    jnp.arange(data.num_clients), hp)
        window = jnp.full((opts.union_window, m), -1, jnp.int32) if union else None
        return DiversityMemory(feats, loss, state.params, state.model_state, window)

    def select(key, state, data, hp):
        mem: DiversityMemory = state.selector
        f = mem.features
        n = f.shape[0]
        top = 2.0 * jnp.max(jnp.linalg.norm(f, axis=-1)) + 1e-12  # >= max_ij D_ij
        scale, c0 = (top, 1.0) if normalized else (1.0, top)
        # the N x N distances at once where they fit and the stochastic greedy would compute
        # at least as many columns (m picks x r candidates: one product instead of m passes
        # over the features); else only the columns each pick reads
        if n * n * 4 > budget or 0 < m * r < n:
            oracle = submodular.feature_oracle(f, scale, block=max(1, int(budget // (4 * n))))
        else:
            oracle = submodular.dense_oracle(submodular.pairwise_distances(f, scale, block=256))
        penalty = None
        if union:
            w = mem.window.reshape(-1)
            in_window = jnp.zeros((n,), bool).at[jnp.where(w >= 0, w, n)].set(True, mode="drop")
            penalty = hp.union_mu * in_window.astype(jnp.float32)
        res = submodular.greedy(
            oracle, m, available=state.pool, cover=state.pool, c0=c0, normalize=normalized,
            phi=phi_fn(jnp.maximum(mem.loss, 0.0)) if trunc else None,
            lam=hp.subtrunc_lambda, b=hp.subtrunc_b, penalty=penalty, key=key, r=r,
            lazy=r == 0)
        return res.idx, res.valid

    def update(new, upd, idx, valid, data, hp):
        mem: DiversityMemory = new.selector
        everyone = jnp.arange(data.num_clients)
        features, loss, window = mem.features, mem.loss, mem.window
        if opts.feature_refresh == 1:
            # paper-literal: every client's f_i and grad f_i at the new model, every round
            # (the cohort's refresh at the received model would be overwritten: skipped)
            features, loss = grad_features(new.params, new.model_state, data, everyone, hp)
        else:
            if delta_mode:
                if upd.delta is None:  # a chunked round keeps no per-client deltas
                    raise ConfigError(DELTA_CHUNK_ERROR)
                fs = jax.vmap(lambda d: project(flatten(d), opts.feature_dim))(upd.delta)
                ls = jax.lax.map(lambda k: client_loss(model, mem.received,
                                                       mem.received_state, data.train, k)[0],
                                 idx, batch_size=_batch(m))
            else:
                fs, ls = grad_features(mem.received, mem.received_state, data, idx, hp)
            slot = jnp.where(valid, idx, data.num_clients)  # invalid slots are dropped
            features = features.at[slot].set(fs, mode="drop")
            loss = loss.at[slot].set(ls, mode="drop")
            if opts.feature_refresh > 0:
                stale = (features, loss)
                features, loss = jax.lax.cond(
                    new.round % opts.feature_refresh == 0,
                    lambda: grad_features(new.params, new.model_state, data, everyone, hp),
                    lambda: stale)
        if union:
            row = jnp.where(valid, idx, -1).astype(jnp.int32)
            window = jnp.concatenate([row[None], window[:-1]], axis=0)
        return new.replace(selector=DiversityMemory(features, loss, new.params,
                                                    new.model_state, window))

    return Selector(init=init, select=select, update=update)


# --- building the `parts.Selector` named by the options ---------------------------------

# The configuration fields a selector builder reads (`RunConfig.view`): the selection
# group, the federation's sizes, and the client groups of the stratified and flip cohorts.
OPTIONS = (*fields_in("selection"), "clients", "cohort", "local_steps", "flip_protocol",
           "label_flip_fraction", "cohort_groups", "imbalance_ratios")


def uniform_selector(m: int) -> Selector:
    """Uniform without replacement from `state.pool` (no memory)."""
    return Selector(init=lambda key, state, data, hp: None,
                    select=lambda key, state, data, hp: uniform(key, state.pool, m))


def stratified_selector(opts):
    counts = stratified_counts(opts)

    def select(key, state, data, hp):
        if "group" not in data.info:
            raise ConfigError("--selector stratified needs client groups: use "
                              "--imbalance-ratios or --label-flip-fraction")
        return stratified(key, state.pool, data.info["group"], counts)

    return Selector(init=lambda key, state, data, hp: None, select=select)


def flip_selector(opts):
    if opts.selector != "random":
        raise ConfigError(f"--flip-protocol {opts.flip_protocol} draws its own uniform cohorts: "
                          "use --selector random")

    def select(key, state, data, hp):
        return flip_cohort(key, state.pool, opts.cohort, opts.label_flip_fraction,
                           opts.flip_protocol)

    return Selector(init=lambda key, state, data, hp: None, select=select)


# `--selector` name -> builder(model, opts) -> Selector
SELECTORS = Registry("selector", {
    "random": lambda model, opts: uniform_selector(opts.cohort),
    "poc": power_of_choice,
    "divfl": lambda model, opts: submodular_selector(model, opts, "divfl"),
    "subtrunc": lambda model, opts: submodular_selector(model, opts, "subtrunc"),
    "unionfl": lambda model, opts: submodular_selector(model, opts, "unionfl"),
    "stratified": lambda model, opts: stratified_selector(opts),
})


def make_selector(model, opts):
    """The `parts.Selector` named by `opts.selector` for a cohort of `opts.cohort`."""
    if opts.flip_protocol != "static":  # Exp-alpha per-round flips
        return flip_selector(opts)
    return SELECTORS.get(opts.selector)(model, opts)
