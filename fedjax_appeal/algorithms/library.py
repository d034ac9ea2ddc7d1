"""Algorithms from their parts, library first (in the style of optax and FedJAX).

Each factory takes an algorithm's parts and hyperparameters as arguments and returns the
package's `FederatedAlgorithm`, which `simulate`, `simulate_grid` and the driver run as
they run the registered ones; no name is registered and no configuration is read:

    alg = fedavg(CNN(), optax.sgd(0.05, momentum=0.9), optax.adam(1e-3),
                 local_steps=10, batch_size=32, cohort=10)

  * `model`: a `flax.linen` module (wrapped on first use, when the data's input shape is
    known, by `core.flax_model.as_model`; its conventions are in that module and in
    docs/library.md) or the package's `Model`;
  * `client_optimizer`, `server_optimizer`: optax transformations; the client's runs the
    local steps of each round from a fresh state, the server's steps on the
    pseudo-gradient sum_k w_k (w - w_k) (plain `optax.sgd(1.0)`, the default, is the
    textbook average); made with `optax.inject_hyperparams`, their numeric hyperparameters
    are vmappable keys "client.<name>" / "server.<name>" (`core.hyper`);
  * `weights`: `Proportional()` (default), `Uniform()`, `ExpAlpha(alpha)` or a `WeightRule`
    (`aggregate.library`); `selector`: `RandomCohort()` (default), `PowerOfChoice(d)`,
    `DivFL()`, `SubTrunc(...)`, `UnionFL(...)` or a `Selector` (`select.library`);
  * `loss`: the per-example loss `loss(scores [B, C], labels [B]) -> [B]` (default: softmax
    cross-entropy with integer labels, `optax.softmax_cross_entropy_with_integer_labels`);
  * `local_steps`, `batch_size`, `cohort`: the static sizes of a round.

The round is the package's (`core.round.make_round`: the executor runs the cohort, the
clients report the losses the weight rule needs, the Byzantine hook applies to tagged
clients, the global model is evaluated on every client); `compose` builds the same round
from a configuration. The parts that the command line adds from its options (DP, update
compression, heterogeneous steps, the appeal protocol) are not part of these factories.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import numpy as np
import optax

from ..aggregate.adversary import byzantine
from ..aggregate.fednova import local_norm
from ..aggregate.library import Proportional, weight_rule
from ..core.config import Options
from ..core.errors import ConfigError
from ..core.flax_model import as_model
from ..core.hyper import (
    Hyper,
    check_hparams,
    check_keys,
    optimizer_keys,
    resolve,
    value_of,
    with_hparams,
)
from ..core.models import Model
from ..core.parts import CohortExecutor, Selector, WeightRule
from ..core.round import attach_selector, init_state, make_round
from ..execute.executor import Executor
from ..local.client import Trained, local_sgd, proximal, reporting
from ..protocols.appeal.requirement import requirement_values, seen_solo, solo_models
from ..select.library import RandomCohort, cohort_selector, selector_hypers
from .base import FederatedAlgorithm, global_evaluator, initial_model
from .maxfl import MAXFL_RULE

# the default server optimizer: w <- w - 1.0 * sum_k w_k Delta_k, the plain average
AVERAGE = optax.sgd(1.0)


class Parts(NamedTuple):
    """An algorithm's functions for one model and one number of clients (what a factory
    builds once the data's shapes are known)."""

    init: Callable
    round: Callable
    evaluate: Callable
    pre_init: Callable | None = None


def client_update(model: Model, client_optimizer: optax.GradientTransformation | None, *,
                  steps: int, batch_size: int, unroll: int = 1, mu: float | None = None,
                  nova: bool = False):
    """One client's local objective: `steps` minibatch steps of `client_optimizer` from the
    received model (`local.client.local_sgd`), with FedProx's mu/2 ||w - w_global||^2 when
    `mu` is given (hyperparameter "fedprox.mu"). `client_optimizer=None` is plain SGD at
    `hp.client_lr` (the client lr a factory names "client.learning_rate"); with `nova` the
    client also reports FedNova's normaliser a_k = tau (`aggregate.fednova.local_norm`)."""

    def local(state, data, k, key, hp):
        reg = (None if mu is None else
               proximal(state.params, value_of(hp, "fedprox.mu", mu)))
        tx = None if client_optimizer is None else with_hparams(client_optimizer, hp, "client")
        res = local_sgd(model, state.params, state.model_state, data.train, k, key, hp.client_lr,
                        steps=steps, batch_size=batch_size, regularizer=reg, tx=tx, unroll=unroll)
        return Trained((state.params, state.model_state), (res.params, res.state), res.loss,
                       fednova_a=local_norm(steps, hp.client_lr, 0.0) if nova else None)

    return local


def compose_parts(model: Model, *, local, weights: WeightRule, selector: Selector,
                  server_optimizer: optax.GradientTransformation,
                  executor: CohortExecutor | None = None, init_fields=None,
                  pre_init=None, post=None, evaluate=None,
                  average_state: bool = True) -> Parts:
    """The functions of an algorithm from its parts, as `compose` builds them from a
    configuration (without the parts only options add: DP, compression, heterogeneity).

    init: key -> (k_model, k_sel); params from `model.init(k_model)` (or the pre-init's
    "initial" model); `init_fields(key, params, model_state, data, hp, pre)` (the
    `ServerState` fields the algorithm sets, or None);
    the server optimizer's state; the selector's memory. round: `make_round` with the
    local objective wrapped by `client.reporting`, the Byzantine hook and `executor`
    (default: `Executor()`, the automatic single-device cohort); `post`, `average_state`
    and `evaluate` (default: the global model on every split) are `compose`'s.
    """
    def tx(hp):
        return with_hparams(server_optimizer, hp, "server")

    def init(key, data, hp, pre=None):
        k_model, k_sel = jax.random.split(key)
        if pre is None and pre_init is not None:
            pre = pre_init(key, data, hp)
        params, mstate = pre["initial"] if pre is not None else model.init(k_model)
        fields = ({} if init_fields is None else
                  init_fields(key, params, mstate, data, hp, pre))
        state = init_state(params, mstate, tx(hp), data.num_clients, **fields)
        return attach_selector(state, selector, k_sel, data, hp)

    rnd = make_round(select=selector, local=reporting(model, local, weights.needs),
                     weights=weights, post=post, corrupt=byzantine, tx=tx,
                     average_state=average_state,
                     executor=executor if executor is not None else Executor())
    return Parts(init, rnd, evaluate or global_evaluator(model), pre_init)


def _positive_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
        raise ConfigError(f"{name} must be an integer >= 1 (got {value!r})")
    return int(value)


def _first_step(tx: optax.GradientTransformation) -> float | None:
    """The update `tx` gives a scalar parameter 0 on its first step with gradient 1 (None
    when `tx` cannot step a lone scalar, e.g. one that needs extra arguments)."""
    p, g = {"w": np.float32(0.0)}, {"w": np.float32(1.0)}
    try:
        updates, _ = tx.update(g, tx.init(p), p)
        return float(np.asarray(updates["w"]))
    except Exception:  # noqa: BLE001 - not a check this optimizer can take
        return None


def _optimizer(name: str, tx: Any) -> optax.GradientTransformation:
    """`tx`, refused in one line unless an optax transformation that descends: one whose
    first step on a positive gradient moves the parameter up has a negative learning rate
    (the server's steps on sum_k w_k (w - w_k), so the same sign holds there)."""
    if isinstance(tx, int | float | np.number) and not isinstance(tx, bool):
        raise ConfigError(f"{name} must be an optax transformation, e.g. optax.sgd({tx}), "
                          f"not the number {tx}")
    if not isinstance(tx, optax.GradientTransformation):
        raise ConfigError(f"{name} must be an optax transformation, e.g. optax.sgd(0.05) "
                          f"(got {type(tx).__name__})")
    step = _first_step(tx)
    if step is not None and step > 0:
        raise ConfigError(f"{name} ascends: its first step on a gradient of +1 changes the "
                          f"parameter by {step:+g}; give it a learning rate > 0")
    return tx


def library_algorithm(name: str, model: Any, build: Callable[[Model, int], Parts],
                      *, hypers: tuple[Hyper, ...] = (), keys: tuple[str, ...] = (),
                      loss: Callable | None = None, pre_init: bool = False,
                      client_optimizer: bool = False) -> FederatedAlgorithm:
    """The `FederatedAlgorithm` whose functions are `build(model, num_clients)`'s, built on
    first use for the data's shapes (a flax module is wrapped then, `as_model`) and kept.

    Every function first refuses a dotted key of `hp.extra` the algorithm does not have
    (`keys` and those of `hypers`) and sets the targets of `hypers` (`core.hyper.resolve`).
    A `Model` given as `model` names the initial model (`FederatedAlgorithm.initial`), as
    `compose` does, so that the driver computes it in the same program. Its `check`
    (called by `simulate` and `simulate_grid` before anything is traced) builds the
    functions for the data, so that a cohort too large or a model that does not fit the
    data is refused there, and refuses `HParams` it would ignore (`core.hyper.check_hparams`;
    `client_optimizer`: its clients step an optax optimizer, whose learning rate an
    `HParams` "client_lr" would not set).
    """
    known = (*keys, *(h.key for h in hypers))
    fixed = as_model(model, (), None, 0, loss=loss) if isinstance(model, Model) else None
    models: dict[tuple, Model] = {}
    built: dict[tuple, Parts] = {}

    def bound(data) -> Parts:
        shape = (tuple(data.input_shape), str(data.train.x.dtype), data.num_classes)
        if fixed is None and shape not in models:
            models[shape] = as_model(model, shape[0], data.train.x.dtype, data.num_classes,
                                     loss=loss)
        sig = (*shape, data.num_clients)
        if sig not in built:
            built[sig] = build(fixed if fixed is not None else models[shape], data.num_clients)
        return built[sig]

    def prepared(hp):
        check_keys(hp, known, name)
        return resolve(hp, hypers)

    def init(key, data, hp, pre=None):
        return bound(data).init(key, data, prepared(hp), pre)

    def round_fn(state, data, key, hp):
        return bound(data).round(state, data, key, prepared(hp))

    def evaluate(state, data, hp):
        return bound(data).evaluate(state, data, prepared(hp))

    def pre(key, data, hp):
        return bound(data).pre_init(key, data, prepared(hp))

    def check(data, hp):
        check_hparams(hp, hypers, keys, name,
                      optimizers={"client": client_optimizer, "server": True})
        bound(data)

    return FederatedAlgorithm(name, init, round_fn, evaluate, pre_init=pre if pre_init else None,
                              initial=None if fixed is None else initial_model(fixed),
                              check=check)


def _sizes(local_steps, batch_size, cohort) -> tuple[int, int, int]:
    return (_positive_int("local_steps", local_steps), _positive_int("batch_size", batch_size),
            _positive_int("cohort", cohort))


def _cohort_check(name: str, cohort: int, clients: int) -> None:
    if cohort > clients:
        raise ConfigError(f"{name}: cohort {cohort} is larger than the data's {clients} "
                          "clients: lower the cohort")


def _selector_hypers(selector) -> tuple[Hyper, ...]:
    return selector_hypers(selector)


def _fedavg_like(name: str, model, client_optimizer, server_optimizer, *, local_steps,
                 batch_size, cohort, weights, selector, loss, executor, unroll,
                 mu: float | None) -> FederatedAlgorithm:
    steps, batch, m = _sizes(local_steps, batch_size, cohort)
    ctx = _optimizer("client_optimizer", client_optimizer)
    stx = _optimizer("server_optimizer", AVERAGE if server_optimizer is None else server_optimizer)
    rule, rule_hypers = weight_rule(Proportional() if weights is None else weights)
    selector = RandomCohort() if selector is None else selector
    own = () if mu is None else (Hyper("fedprox.mu", float(mu)),)

    def build(mdl: Model, clients: int) -> Parts:
        _cohort_check(name, m, clients)
        sel, _ = cohort_selector(selector, mdl, m, clients)
        local = client_update(mdl, ctx, steps=steps, batch_size=batch, unroll=unroll, mu=mu)
        return compose_parts(mdl, local=local, weights=rule, selector=sel,
                             server_optimizer=stx, executor=executor)

    return library_algorithm(
        name, model, build, hypers=(*own, *rule_hypers, *_selector_hypers(selector)),
        keys=(*optimizer_keys(ctx, "client"), *optimizer_keys(stx, "server")), loss=loss,
        client_optimizer=True)


def fedavg(model, client_optimizer: optax.GradientTransformation,
           server_optimizer: optax.GradientTransformation | None = None, *,
           local_steps: int = 50, batch_size: int = 64, cohort: int = 10, weights=None,
           selector=None, loss: Callable | None = None,
           executor: CohortExecutor | None = None, unroll: int = 1) -> FederatedAlgorithm:
    """FedAvg (McMahan et al. 2017, "Communication-Efficient Learning of Deep Networks from
    Decentralized Data"), in the generalised form of Reddi et al. 2021 ("Adaptive
    Federated Optimization", Algorithm 1): a cohort of `cohort` clients runs `local_steps`
    steps of `client_optimizer` on minibatches of `batch_size`; the server steps
    `server_optimizer` (default `optax.sgd(1.0)`: the average) on sum_k w_k (w - w_k) with
    the weights of `weights` (default `Proportional()`). Server momentum (FedAvgM) and
    FedAdam are `server_optimizer=optax.sgd(lr, momentum=...)` and `optax.adam(...)`.

    Args:
      model: a flax module or a `Model`.
      client_optimizer, server_optimizer: optax transformations (see the module docstring
        for their vmappable hyperparameters).
      local_steps, batch_size, cohort: the sizes of a round (static).
      weights, selector: the weight rule and the cohort selector, as objects.
      loss: the per-example loss (default softmax cross-entropy).
      executor: how the cohort's updates run (`execute.executor.Executor`).
      unroll: the unroll factor of the local-steps scan.
    """
    return _fedavg_like("fedavg", model, client_optimizer, server_optimizer,
                        local_steps=local_steps, batch_size=batch_size, cohort=cohort,
                        weights=weights, selector=selector, loss=loss, executor=executor,
                        unroll=unroll, mu=None)


def fedprox(model, client_optimizer: optax.GradientTransformation,
            server_optimizer: optax.GradientTransformation | None = None, *, mu: float = 0.01,
            local_steps: int = 50, batch_size: int = 64, cohort: int = 10, weights=None,
            selector=None, loss: Callable | None = None,
            executor: CohortExecutor | None = None, unroll: int = 1) -> FederatedAlgorithm:
    """FedProx (Li et al. 2020, "Federated Optimization in Heterogeneous Networks"): FedAvg
    whose clients minimise F_k(w_k) + mu/2 ||w_k - w||^2 (hyperparameter "fedprox.mu").
    The other arguments are `fedavg`'s."""
    if not mu >= 0:
        raise ConfigError(f"fedprox: mu must be >= 0 (got {mu})")
    return _fedavg_like("fedprox", model, client_optimizer, server_optimizer,
                        local_steps=local_steps, batch_size=batch_size, cohort=cohort,
                        weights=weights, selector=selector, loss=loss, executor=executor,
                        unroll=unroll, mu=float(mu))


def parse_requirement_arg(requirement, what: str = "maxfl") -> None | float | np.ndarray:
    """A factory's `requirement=`: None for "solo", else the number or per-client values."""
    if isinstance(requirement, str):
        if requirement.strip() != "solo":
            raise ConfigError(f"{what}: requirement must be 'solo', a number or an array of "
                              f"per-client values (got {requirement!r})")
        return None
    a = np.asarray(requirement, np.float64)
    if not np.all(np.isfinite(a)) or a.size == 0:
        raise ConfigError(f"{what}: the requirement must hold finite values")
    return float(a) if a.ndim == 0 else a.reshape(-1)


def requirement_hypers(req, eps: float | None, solo_lr: float, what: str = "maxfl"
                       ) -> tuple[Hyper, ...]:
    """"maxfl.solo_lr" when rho_k is "solo" (`req` None), after "maxfl.eps" when given."""
    own = () if eps is None else (Hyper("maxfl.eps", float(eps), "maxfl_eps"),)
    if req is None and not solo_lr > 0:
        raise ConfigError(f"{what}: solo_lr must be > 0 (got {solo_lr})")
    return own + ((Hyper("maxfl.solo_lr", float(solo_lr), "solo_lr"),) if req is None else ())


def requirement_parts(mdl: Model, req, rho_steps: int, batch: int):
    """(init_fields, pre_init) setting the requirements rho_k (`state.rho`) of MaxFL and
    MW-Fed: `req` (None: each seen client's solo-model train loss after `rho_steps` plain
    SGD steps from the initial model, in `state.solo`; else a number or per-client values,
    `protocols.appeal.requirement.requirement_values`)."""
    solo = Options("the solo models", {"rho_steps": rho_steps, "batch_size": batch})

    def init_fields(key, params, mstate, data, hp, pre):
        solo_seen = None
        if req is None:
            solo_seen = (seen_solo(mdl, solo, params, mstate, data, key, hp)
                         if pre is None else pre["solo_seen"])
        loss = None if solo_seen is None else solo_seen.train_loss
        return {"solo": solo_seen, "rho": requirement_values(req, loss, data.num_clients,
                                                              data.num_unseen)}

    return init_fields, (solo_models(mdl, solo, initial_model(mdl), unseen=False)
                         if req is None else None)


def maxfl(model, client_optimizer: optax.GradientTransformation,
          server_optimizer: optax.GradientTransformation | None = None, *, eps: float = 1e-3,
          requirement: str | float | np.ndarray = "solo", rho_steps: int = 100,
          solo_lr: float = 0.05, local_steps: int = 50, batch_size: int = 64, cohort: int = 10,
          selector=None, loss: Callable | None = None, executor: CohortExecutor | None = None,
          unroll: int = 1) -> FederatedAlgorithm:
    """MaxFL (Cho, Jhunjhunwala, Li, Smith, Joshi, TMLR 2023, "Maximizing Global Model
    Appeal in Federated Learning", Algorithm 1): FedAvg's local steps, aggregated with
    weights q_k / (sum q + eps), q_k = sigma(F_k(w) - rho_k)(1 - sigma(F_k(w) - rho_k)),
    F_k(w) the client's train loss at the received model (`algorithms.maxfl`). With the
    default server optimizer `optax.sgd(1.0)` the server lr is the paper's eta_g = 1.

    Args:
      eps: the epsilon of the adaptive server lr (hyperparameter "maxfl.eps").
      requirement: rho_k: "solo" (the train loss of each client's solo model, `rho_steps`
        plain SGD steps at `solo_lr` from the initial model; hyperparameter
        "maxfl.solo_lr"), a number, or an array of M (or M + U) per-client values.
      The others are `fedavg`'s.
    """
    if not eps >= 0:
        raise ConfigError(f"maxfl: eps must be >= 0 (got {eps})")
    req = parse_requirement_arg(requirement)
    steps, batch, m = _sizes(local_steps, batch_size, cohort)
    rho = _positive_int("rho_steps", rho_steps) if req is None else 0
    own = requirement_hypers(req, eps, solo_lr)
    ctx = _optimizer("client_optimizer", client_optimizer)
    stx = _optimizer("server_optimizer", AVERAGE if server_optimizer is None else server_optimizer)
    selector = RandomCohort() if selector is None else selector

    def build(mdl: Model, clients: int) -> Parts:
        _cohort_check("maxfl", m, clients)
        sel, _ = cohort_selector(selector, mdl, m, clients)
        init_fields, pre_init = requirement_parts(mdl, req, rho, batch)
        return compose_parts(
            mdl, local=client_update(mdl, ctx, steps=steps, batch_size=batch, unroll=unroll),
            weights=MAXFL_RULE, selector=sel, server_optimizer=stx, executor=executor,
            init_fields=init_fields, pre_init=pre_init)

    return library_algorithm(
        "maxfl", model, build, hypers=(*own, *_selector_hypers(selector)),
        keys=(*optimizer_keys(ctx, "client"), *optimizer_keys(stx, "server")), loss=loss,
        pre_init=req is None, client_optimizer=True)
