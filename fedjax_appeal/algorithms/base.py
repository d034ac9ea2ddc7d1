"""`FederatedAlgorithm` and `compose`: an algorithm is its local objective, its weight rule
and its own typed state; `compose` adds what every algorithm shares (model init, server
optimizer, cohort selector, Byzantine hook, loss reports, executor)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, NamedTuple

import jax

from ..aggregate import accounting, privacy, uplink
from ..aggregate.accounting import accountant
from ..aggregate.adversary import byzantine
from ..aggregate.privacy import poisson_selector
from ..aggregate.server import server_optimizer
from ..aggregate.uplink import make_uplink
from ..core.arrays import FederatedData
from ..core.capabilities import SUPPORTS, Supports, supports
from ..core.config import HParams, Options, RunConfig
from ..core.fields import Applies, mentioning, option
from ..core.memo import shared
from ..core.models import Model
from ..core.registry import Registry
from ..core.round import (
    CohortExecutor,
    PostFn,
    ServerState,
    WeightRule,
    attach_selector,
    init_state,
    make_round,
)
from ..evaluate.evaluation import evaluate_global, evaluate_split
from ..evaluate.expalpha_metrics import tag_metrics
from ..execute.distributed import make_mesh
from ..execute.executor import Executor
from ..local import hetero
from ..local.client import Trained, reporting
from ..local.hetero import hetero_on, init_hetero
from ..select import selectors
from ..select.availability import with_availability
from ..select.selectors import make_selector

# init(key, data, hp[, pre]) -> state; `pre` is the output of `FederatedAlgorithm.pre_init`
InitFn = Callable[..., ServerState]
# pre_init(key, data, hp) -> dict: the part of init that does not depend on the algorithm
PreInitFn = Callable[[jax.Array, FederatedData, HParams], dict]
# initial(key) -> (params, model_state): the initial global model of an init key
InitialFn = Callable[[jax.Array], tuple[Any, Any]]
RoundFn = Callable[[ServerState, FederatedData, jax.Array, HParams], tuple[ServerState, dict]]
EvalFn = Callable[[ServerState, FederatedData, HParams], dict[str, Any]]
# local(state, data, k, key, hp) -> Trained: one client's local objective
LocalObjective = Callable[[ServerState, FederatedData, jax.Array, jax.Array, HParams], Trained]
# init_fields(key, params, model_state, data, hp) -> {field: value}: the fields of
# `ServerState` the algorithm sets before round 1 (its own typed state under "algo", the
# shared "rho", "solo", "eval_key")
FieldsInit = Callable[[jax.Array, Any, Any, FederatedData, HParams], dict[str, Any]]


class FederatedAlgorithm(NamedTuple):
    """Pure functions of a federated algorithm (in the spirit of fedjax's).

    init(key, data, hp) -> state
    round(state, data, key, hp) -> (state, metrics)   # metrics: dict of scalars
    evaluate(state, data, hp) -> {split: ClientEval, ..., "metrics": {name: scalar}}

    Optional:
      account(rounds, hp, num_clients) -> {name: float}: host-side privacy accounting
        entries of the history (DP runs only, see aggregate/accounting.py).
      pre_init(key, data, hp) -> pre: the costly part of init that depends on the key,
        the data and hp but not on the algorithm: the initial model and the solo models of
        the appeal protocol and of MaxFL's requirement (`requirement.solo_models`). With
        it, `init(key, data, hp, pre)` takes its output, and `init(key, data, hp)` computes
        it inline. The driver compiles `pre_init` as a program of its own, so the arms of
        a comparison (MaxFL and FedAvg under the appeal protocol) share one compiled
        program. `compose`'s init takes a `pre` (its "initial" entry) whether or not the
        algorithm has a `pre_init` of its own (the appeal protocol passes its own).
      initial(key) -> (params, model_state): the initial global model of an init key (what
        `compose`'s init starts from).
      check(data, hp) -> None: refuses, in one line and before anything is traced, what
        the algorithm's functions would refuse or ignore for this data and the caller's
        `HParams` (`simulate` and `simulate_grid` call it; a library factory's algorithm
        refuses there the `HParams` fields it would not read, `algorithms.library`).
    """

    name: str
    init: InitFn
    round: RoundFn
    evaluate: EvalFn
    account: Callable[[int, HParams, int], dict] | None = None
    pre_init: PreInitFn | None = None
    initial: InitialFn | None = None
    check: Callable[[FederatedData, HParams], None] | None = None


@shared
def global_evaluator(model: Model) -> EvalFn:
    """Evaluate the global model on every split (the default); one function per model
    (`core.memo.shared`), so that the arms of a comparison share its program."""
    def evaluate(state, data, hp):
        out = evaluate_global(model, state.params, state.model_state, data)
        tags = tag_metrics(out, data.info)  # per-group test accuracy
        if data.global_test is not None:  # accuracy on the balanced global test set
            g = evaluate_split(model, state.params, state.model_state, data.global_test)
            tags = {**tags, "test_acc_global": g.acc[0], "test_loss_global": g.loss[0]}
        return {**out, "metrics": tags} if tags else out

    return evaluate


# The configuration fields every algorithm's builder reads (`options_for`), besides the
# options that apply to it (`own_options`): its local training, weight rule, server
# optimizer and cohort layout, and what `compose` adds (selector, uplink / DP, client
# heterogeneity).
SHARED_OPTIONS = tuple(dict.fromkeys((
    "clients", "cohort", "local_steps", "batch_size", "aggregation",
    "server_opt", "client_chunk", "client_lanes", *selectors.OPTIONS,
    *privacy.SELECTOR_OPTIONS, *uplink.OPTIONS, *accounting.OPTIONS, *hetero.OPTIONS)))


def own_options(name: str) -> tuple[str, ...]:
    """The static options whose `applies` names algorithm `name`, a part it is built on
    (`Supports.parts`) or a capability it declares: what its builder reads besides
    `SHARED_OPTIONS`."""
    sup = supports(name)
    flags = [f.name for f in dataclasses.fields(Supports) if getattr(sup, f.name) is True]
    return (*mentioning("algorithm", name), *(o for p in sup.parts for o in mentioning("part", p)),
            *(o for f in flags for o in mentioning("capability", f)))


def options_for(name: str, cfg: RunConfig | Options) -> Options:
    """The options algorithm `name`'s builder receives: a read-only view of `cfg` with
    `SHARED_OPTIONS`, its own options (`own_options`) and the selectors' options."""
    return cfg.view((*SHARED_OPTIONS, *mentioning("selector"), *own_options(name)),
                    f"algorithm {name!r}")


@shared
def initial_model(model: Model) -> InitialFn:
    """initial(key) -> (params, model_state): the model `compose`'s init builds from its init
    key (the first half of `jax.random.split(key)`)."""
    def initial(key):
        return model.init(jax.random.split(key)[0])

    return initial


def compose(name: str | Applies, model: Model, opts: Options, *, local: LocalObjective,
            weights: WeightRule, post: PostFn | None = None, init_fields: FieldsInit | None = None,
            evaluate: EvalFn | None = None, average_state: bool = True,
            executor: CohortExecutor | None = None,
            pre_init: PreInitFn | None = None) -> FederatedAlgorithm:
    """An algorithm from its parts; the shared parts come from `opts` (the builder's
    options, `options_for`; each part is handed the view of the fields it declares).

    init: key -> (k_model, k_sel); params from `model.init(k_model)`; the algorithm's
    `init_fields(key, params, model_state, data, hp)` (the whole init key, e.g. for the solo
    models of MaxFL); the `opts.server_opt` optimizer state; the `opts.selector` memory.
    round: `make_round` with the local objective wrapped by `client.reporting` (the loss
    reports `weights.needs`), the Byzantine hook, the server optimizer and `executor`
    (default: `Executor(opts.client_chunk, None, opts.client_lanes)`, one device).

    Args:
      name: the algorithm's registered name (or its `algorithm(name)` predicate).
      model, opts: the model and the builder's options (a `RunConfig` view).
      local: one client's local objective, returning `client.Trained`.
      weights: the aggregation `WeightRule`.
      post: `post(old, new, updates, idx, valid, w, hp)`, the algorithm's state update.
      init_fields: the `ServerState` fields the algorithm sets, as a dict: its own typed
        state (a NamedTuple it declares) under "algo", and the shared "rho", "solo" or
        "eval_key" it uses (a name that is no field is a TypeError); with `pre_init`, it takes the
        pre-init output as a sixth argument.
      evaluate: the evaluator (default: the global model on every split).
      average_state: average the clients' model state (FedBN keeps it per client).
      executor: runs the cohort's local updates (a `CohortExecutor`: vmapped, lanes,
        chunked, sharded).
      pre_init: the algorithm-independent part of its init (`FederatedAlgorithm.pre_init`),
        from the initial model `initial_model(model)`.
    """
    name = algorithm_name(name)
    hetero_opts = opts.view(hetero.OPTIONS, "client heterogeneity")
    up = make_uplink(opts.view(uplink.OPTIONS, "the uplink"))  # None when both are off
    selector = (poisson_selector(opts.view(privacy.SELECTOR_OPTIONS, "the DP cohort"))
                if opts.dp != "off" and opts.dp_sampling == "poisson" else
                make_selector(model, opts.view((*selectors.OPTIONS, *mentioning("selector")),
                                              f"selector {opts.selector!r}")))
    selector = with_availability(selector, hetero_opts)  # identity unless asked
    server_opt = opts.server_opt

    def tx(hp):
        return server_optimizer(server_opt, hp)

    def init(key, data, hp, pre=None):
        k_model, k_sel = jax.random.split(key)
        if pre is None and pre_init is not None:
            pre = pre_init(key, data, hp)
        params, mstate = pre["initial"] if pre is not None else model.init(k_model)
        fields = {}
        if init_fields is not None:
            fields = (init_fields(key, params, mstate, data, hp) if pre_init is None else
                      init_fields(key, params, mstate, data, hp, pre))
        if hetero_on(hetero_opts):  # per-client steps, availability, deadline (local/hetero.py)
            fields = {**fields, "hetero": init_hetero(key, data.num_clients)}
        state = init_state(params, mstate, tx(hp), data.num_clients, **fields)
        if up is not None:
            state = state.replace(uplink=up.init(params, data.num_clients, hp))
        return attach_selector(state, selector, k_sel, data, hp)

    rnd = make_round(select=selector, local=reporting(model, local, weights.needs),
                     weights=weights, post=post, corrupt=byzantine, tx=tx,
                     average_state=average_state,
                     executor=(executor if executor is not None else
                               Executor(opts.client_chunk, None, opts.client_lanes)),
                     uplink=up)
    return FederatedAlgorithm(name, init, rnd, evaluate or global_evaluator(model),
                              accountant(opts.view(accounting.OPTIONS, "the privacy accounting")),
                              pre_init=pre_init, initial=initial_model(model))


# builder(model, opts, executor) -> FederatedAlgorithm; opts = `options_for(name, cfg)`
Builder = Callable[[Model, Options, CohortExecutor | None], FederatedAlgorithm]
ALGORITHMS = Registry("algorithm", sort=True)  # name -> Builder
option("algorithm", "fedavg", "federated algorithm",
       registry="algorithm", group="algorithm")


def register(name: str | Applies, supports: Supports | None = None):
    """Decorator adding an algorithm builder `(model, opts, executor) -> FederatedAlgorithm`
    under `name` (or the one algorithm an `algorithm(name)` predicate names, the one a
    plugin's options apply to), with what it is built from and supports
    (`core.capabilities.Supports`; default: what `compose` provides). `opts` is the
    read-only view `options_for(name, cfg)`: `SHARED_OPTIONS` and its own options
    (`own_options`); reading any other option raises `UndeclaredOption`."""
    name = algorithm_name(name)
    SUPPORTS[name] = supports if supports is not None else Supports()
    return ALGORITHMS.register(name)


def algorithm_name(name: str | Applies) -> str:
    """`name`, or the one algorithm an `algorithm(name)` predicate names."""
    if isinstance(name, Applies):
        (name,) = name.names("algorithm")
    return name


def build(name: str, model: Model, cfg: RunConfig, *,
          executor: CohortExecutor | None = None) -> FederatedAlgorithm:
    """The registered algorithm `name` with the given executor (None: the cohort chunked
    per `cfg.client_chunk` and sharded over the mesh of `cfg.devices`, built here). `cfg`
    is the run's whole configuration; the builder receives its options
    (`options_for(name, cfg)`)."""
    builder = ALGORITHMS.get(name)
    if executor is None:
        executor = Executor(cfg.client_chunk, make_mesh(cfg.devices), cfg.client_lanes)
    return _built(builder, model, options_for(name, cfg), executor)


@shared
def _built(builder: Builder, model: Model, opts: Options, executor) -> FederatedAlgorithm:
    """`builder(model, opts, executor)`, one algorithm per value of the arguments
    (`core.memo.shared`): runs of one algorithm and configuration that differ only in
    their seed (a table's seeds) get the same functions, so JAX traces, lowers and
    compiles their programs once."""
    return builder(model, opts, executor)
