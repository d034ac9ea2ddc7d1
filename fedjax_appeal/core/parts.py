"""The parts of a federated round as types: server state, client update, cohort selector,
weight rule and cohort executor. A leaf module: everything else imports its types from here
(or from `round`, which re-exports them)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple, Protocol

import jax
import optax
from flax import struct

from .arrays import FederatedData
from .config import HParams


@struct.dataclass
class ServerState:
    """Everything the server carries from one round to the next (one pytree).

    The first six fields are every algorithm's. The others hold the state of one stage
    each, a value of the type that stage declares, and are None (no leaves) when the run
    has no such stage, so a run carries only the state its parts keep; a misspelled field
    is an AttributeError at trace time. A plugin keeps its state in `algo` (its own
    NamedTuple); nothing here needs editing for it.
    """

    params: Any  # model parameters (replicated across devices)
    model_state: Any  # model collections besides params, e.g. batch_stats ({} if none)
    opt_state: Any  # server optax state
    round: jax.Array  # [] int32, rounds done so far
    pool: jax.Array  # [M] bool, seen clients available for selection
    participation: jax.Array  # [M] int32, how often each client was in a cohort
    # the algorithm's own state, one typed value it declares (SCAFFOLD's ScaffoldState,
    # FedBN's FedBNState, FedFor's, FedBuff's, MW-Fed's), or None
    algo: Any = None
    # [M + U] float32 requirements rho_k of the requirement algorithms (MaxFL, MW-Fed)
    rho: jax.Array | None = None
    # the seen clients' solo models (`requirement.SoloStats`, when rho_k = solo losses)
    solo: Any = None
    # the selector's memory (the diversity selectors' `DiversityMemory`), or None
    selector: Any = None
    # the protocol run around the algorithm (MaxFL's appeal: `appeal.AppealState`), or None
    protocol: Any = None
    # the uplink's memory (`uplink.UplinkMemory`: error feedback, adaptive clip), or None
    uplink: Any = None
    # the heterogeneous clients' draws (`hetero.HeteroState`), or None
    hetero: Any = None
    # [2] uint32 raw key data of the personalised evaluation (PerFedAvg, pFedMe), or None
    eval_key: jax.Array | None = None


class ClientUpdate(NamedTuple):
    """What one client sends back after its local training (`client.reporting` builds it).

    Shapes are those of one client; vmapped over a cohort of m slots every leaf gets a
    leading axis [m] (invalid slots included: the round's `valid` mask says which count).
    The optional reports are None (no leaves) unless a stage asks for them, so a round
    carries only what its parts read; a misspelled report is an AttributeError at trace
    time.

    Attributes:
      delta: the model update w - w_k, a pytree shaped like the params: w the model the
        client started from (the received global model; for FedBN with the client's own
        BatchNorm layers), w_k its model after the local steps (`client.Trained.delta` may
        replace it). Byzantine clients' noise and the uplink's compression are applied to
        it before aggregation. None in a chunked round's first pass, which keeps only
        `delta_sq_norm` (`execute.cohort`).
      model_state: the client's model collections besides params after training (e.g.
        BatchNorm `batch_stats`), shaped like `ServerState.model_state`; {} if none.
      num_samples: [] int32, n_k, the client's number of train rows (the proportional
        weight).
      loss: [] float32, the mean minibatch training loss over the local steps.
      loss_before: [] float32, F_k(w) over the full train split in evaluation mode, when
        the weight rule `needs` it (Exp-alpha, MaxFL, q-FFL, MW-Fed); else None.
      loss_after: [] float32, F_k(w_k), likewise (Exp-alpha); else None.
      fednova_a: [] float32, FedNova's normaliser a_k (the fednova algorithm and
        `--aggregation fednova`); else None.
      delta_sq_norm: [] float32, ||Delta_k||^2, sent instead of `delta` in a chunked
        round's first pass (q-FFL reads it); else None.
      report: the algorithm's own report, one typed value it declares (SCAFFOLD's
        `ScaffoldReport`, FedBN's `FedBNReport`); None for most algorithms.
    """

    delta: Any  # pytree like params: w - w_k (None in a chunked round's first pass)
    model_state: Any  # pytree like ServerState.model_state, after local training ({} if none)
    num_samples: jax.Array  # [] int32: n_k, train rows of the client
    loss: jax.Array  # [] float32: mean minibatch loss over the local steps
    loss_before: jax.Array | None = None  # [] float32: F_k(w)
    loss_after: jax.Array | None = None  # [] float32: F_k(w_k)
    fednova_a: jax.Array | None = None  # [] float32: FedNova's a_k
    delta_sq_norm: jax.Array | None = None  # [] float32: ||Delta_k||^2 (chunked first pass)
    report: Any = None  # the algorithm's own typed report (a NamedTuple), or None


# Part signatures (single client for LocalFn; everything else sees the whole cohort).
SelectFn = Callable[[jax.Array, ServerState, FederatedData, HParams],
                    tuple[jax.Array, jax.Array]]
LocalFn = Callable[[ServerState, FederatedData, jax.Array, jax.Array, HParams], ClientUpdate]
WeightFn = Callable[[ClientUpdate, jax.Array, jax.Array, ServerState, HParams], jax.Array]
CorruptFn = Callable[[ClientUpdate, jax.Array, jax.Array, jax.Array, FederatedData, HParams],
                     ClientUpdate]
PostFn = Callable[[ServerState, ServerState, ClientUpdate, jax.Array, jax.Array, jax.Array,
                   HParams], ServerState]
TxFn = Callable[[HParams], optax.GradientTransformation]


class Selector(NamedTuple):
    """A cohort selector with optional memory in `state.selector`.

    init(key, state, data, hp) -> memory        # initial selector memory (e.g. features)
    select(key, state, data, hp) -> (idx [m], valid [m])
    update(state, updates, idx, valid, data, hp) -> state   # after the server step, or None
    metrics(key, state, idx, valid, data, hp) -> dict   # round metrics it adds/overrides,
        # or None; `key` is the one `select` drew with
    """

    init: Callable[[jax.Array, ServerState, FederatedData, HParams], Any]
    select: SelectFn
    update: Callable[[ServerState, ClientUpdate, jax.Array, jax.Array, FederatedData, HParams],
                     ServerState] | None = None
    metrics: Callable[[jax.Array, ServerState, jax.Array, jax.Array, FederatedData, HParams],
                      dict] | None = None


class WeightRule(NamedTuple):
    """Aggregation weights over the cohort slots, and the client reports they read.

    fn(updates, idx, valid, state, hp) -> w [m]: `idx` are the cohort's client indices (for
    rules with per-client server state, e.g. MaxFL's rho_k or MW-Fed's v_k), `valid` the
    slot mask (invalid slots must get 0).
    needs: the loss reports the rule reads from `updates`, a subset of
    `REPORTS` ("loss_before" = F_k(w) at the received model, "loss_after" = F_k(w_k));
    the composed local update computes exactly these (`client.reporting`).
    logits: optional `logits(updates, idx, valid, state, hp) -> z [m]` for rules that are a
    softmax of per-slot values, fn == masked_softmax(z, valid) (proportional: log n_k,
    uniform: 0, Exp-alpha: (F_k(w_k) - F_k(w)) / alpha). z_k may read only slot k's own
    reports, so a chunked round can aggregate in one pass with a running softmax
    (`CohortExecutor.one_pass`) instead of training every client twice.
    """

    fn: WeightFn
    needs: frozenset = frozenset()
    logits: WeightFn | None = None


REPORTS = ("loss_before", "loss_after")


class CohortJob(NamedTuple):
    """The local updates a round hands to its `CohortExecutor`: one client's update
    `local(state, data, k, key, hp)` for every slot of the cohort (`idx`, `keys`, `valid`,
    each [m]), and the optional `corrupt(updates, idx, valid, key, data, hp)` hook applied to
    what the clients send (drawing from `k_adv`)."""

    local: LocalFn
    corrupt: CorruptFn | None
    state: ServerState
    data: FederatedData
    idx: jax.Array
    keys: jax.Array
    valid: jax.Array
    k_adv: jax.Array
    hp: HParams


class CohortExecutor(Protocol):
    """How a round runs its cohort's local updates (an explicit argument of `make_round`).

    `chunk(m, params)` picks the layout of a cohort of m clients: 0 runs every client at
    once (`each`); c > 0 runs chunks of c clients, in one pass for a softmax weight rule
    (`one_pass`) or in two (`statistics`, then `weighted_delta` with the same keys), so that
    at most c client models are alive at a time. Every method returns what the clients
    send after `job.corrupt`; the chunked ones carry `delta=None` and each client's
    ||Delta_k||^2 in `delta_sq_norm` instead. The package's executors (one vmap,
    lanes, chunks, a device mesh) are `execute.executor.Executor`.
    """

    def chunk(self, m: int, params: Any) -> int:
        """Clients per chunk for a cohort of `m` clients training `params` (0 = unchunked)."""
        ...

    def each(self, job: CohortJob) -> ClientUpdate:
        """Every client's update at once (leaves with a leading axis m)."""
        ...

    def statistics(self, job: CohortJob, c: int) -> ClientUpdate:
        """The cohort's updates without deltas, run in chunks of `c` clients."""
        ...

    def weighted_delta(self, job: CohortJob, w: jax.Array, c: int) -> Any:
        """sum_k w_k Delta_k (like params), run in chunks of `c` clients."""
        ...

    def one_pass(self, job: CohortJob, logits: WeightFn, c: int) -> tuple[ClientUpdate, Any]:
        """(updates without deltas, sum_k w_k Delta_k) with w = masked_softmax of
        `logits(updates, idx, valid, state, hp)`, each client trained once, in chunks of
        `c` clients."""
        ...
