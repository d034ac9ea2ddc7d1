"""The baselines as library factories (`algorithms.library`'s style): SCAFFOLD, q-FFL,
FedNova, FedFor, FedBN, MW-Fed, Per-FedAvg, pFedMe and FedBuff from a model, a server
optimizer and their hyperparameters, the registered algorithms bit for bit.

    alg = scaffold(CNN(), client_lr=0.05, local_steps=10, batch_size=32, cohort=10)

Where a method's definition is plain local SGD (SCAFFOLD's control variates and q-FFL's
L = 1/eta divide by the client lr, FedNova's normaliser and FedFor's gradient estimate
count plain steps), the factory takes `client_lr`, the vmappable hyperparameter
"client.learning_rate"; MW-Fed trains like FedAvg and takes an optax `client_optimizer`.
Each method's own hyperparameters are keys "<method>.<name>" of the `HParams` pytree
(`core.hyper`), listed in its docstring. The other arguments are `fedavg`'s: `model` a
flax module or a `Model`, `server_optimizer` an optax transformation (default
`optax.sgd(1.0)`, the plain average), `local_steps`, `batch_size`, `cohort` (static),
`weights` and `selector` as objects, `loss`, `executor`.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
import optax

from ..aggregate.fednova import FEDNOVA_RULE
from ..aggregate.library import Proportional, weight_rule
from ..core.config import Options
from ..core.errors import ConfigError
from ..core.hyper import Hyper, optimizer_keys, with_hparams
from ..core.models import Model
from ..core.parts import CohortExecutor, WeightRule
from ..evaluate.personal import eval_key_data, personal_evaluator
from ..select.library import RandomCohort, cohort_selector
from .base import FederatedAlgorithm, global_evaluator
from .fedbn import bn_part, fedbn_evaluator, fedbn_init, fedbn_local, fedbn_post
from .fedbuff import fedbuff_functions
from .fedfor import FedForState, fedfor_local, fedfor_post
from .library import (
    AVERAGE,
    Parts,
    _cohort_check,
    _optimizer,
    _positive_int,
    _selector_hypers,
    _sizes,
    client_update,
    compose_parts,
    library_algorithm,
    parse_requirement_arg,
    requirement_hypers,
    requirement_parts,
)
from .mwfed import MW_RULE, MWFedState, mw_post
from .perfedavg import one_step_adapt, perfedavg_local
from .pfedme import pfedme_parts
from .qffl import qffl_rule
from .scaffold import scaffold_init, scaffold_local, scaffold_post


def _at_least(what: str, name: str, value, low: float | None, strict: bool = False) -> float:
    """`value` as a float, refused in one line unless a number (> `low` when `strict`,
    else >= `low`; any number when `low` is None)."""
    if isinstance(value, optax.GradientTransformation):
        raise ConfigError(f"{what}: {name} must be a number, not an optax optimizer "
                          f"({what} takes {name} as a plain number)")
    number = not isinstance(value, bool) and isinstance(value, int | float | np.number)
    if not number or (low is not None and not (value > low if strict else value >= low)):
        bound = "" if low is None else f" {'>' if strict else '>='} {low:g}"
        raise ConfigError(f"{what}: {name} must be a number{bound} (got {value!r})")
    return float(value)


def _client_lr(what: str, lr) -> Hyper:
    return Hyper("client.learning_rate", _at_least(what, "client_lr", lr, 0.0, True), "client_lr")


def _baseline(name: str, model, server_optimizer, *, local_steps, batch_size, cohort,
              weights, selector, loss, executor, hypers: tuple[Hyper, ...],
              parts: Callable[[Model, Options, WeightRule], dict], opts: dict | None = None,
              client_optimizer: optax.GradientTransformation | None = None,
              fixed_weights: WeightRule | None = None, pre_init: bool = False
              ) -> FederatedAlgorithm:
    """A baseline from `parts(model, opts, rule) -> compose_parts's keyword arguments`
    (local, and any of post, init_fields, evaluate, average_state, pre_init, weights);
    `opts` holds the sizes of a round and the method's static options."""
    steps, batch, m = _sizes(local_steps, batch_size, cohort)
    stx = _optimizer("server_optimizer", AVERAGE if server_optimizer is None else server_optimizer)
    rule, rule_hypers = ((fixed_weights, ()) if fixed_weights is not None else
                         weight_rule(Proportional() if weights is None else weights))
    selector = RandomCohort() if selector is None else selector
    static = Options(name, {"local_steps": steps, "batch_size": batch, **(opts or {})})

    def build(mdl: Model, clients: int) -> Parts:
        _cohort_check(name, m, clients)
        sel, _ = cohort_selector(selector, mdl, m, clients)
        kw = {"weights": rule, **parts(mdl, static, rule)}
        return compose_parts(mdl, selector=sel, server_optimizer=stx, executor=executor, **kw)

    keys = optimizer_keys(stx, "server")
    if client_optimizer is not None:
        keys += optimizer_keys(client_optimizer, "client")
    return library_algorithm(name, model, build,
                             hypers=(*hypers, *rule_hypers, *_selector_hypers(selector)),
                             keys=keys, loss=loss, pre_init=pre_init,
                             client_optimizer=client_optimizer is not None)


def scaffold(model, client_lr: float, server_optimizer: optax.GradientTransformation | None = None,
             *, local_steps: int = 50, batch_size: int = 64, cohort: int = 10, weights=None,
             selector=None, loss: Callable | None = None,
             executor: CohortExecutor | None = None) -> FederatedAlgorithm:
    """SCAFFOLD (Karimireddy et al., ICML 2020, "SCAFFOLD: Stochastic Controlled Averaging
    for Federated Learning", Algorithm 1, option II): local SGD at `client_lr` on
    F_k(y) + <c - c_k, y>, control variates c_k+ = c_k - c + (w - w_k) / (tau eta_l), the
    server's c <- c + (1/N) sum_S Delta c_k (`algorithms.scaffold`). `server_optimizer`
    `optax.sgd(eta_g)` is the paper's global step; `weights=Uniform()` its mean.

    Hyperparameters: "client.learning_rate".
    """
    return _baseline(
        "scaffold", model, server_optimizer, local_steps=local_steps, batch_size=batch_size,
        cohort=cohort, weights=weights, selector=selector, loss=loss, executor=executor,
        hypers=(_client_lr("scaffold", client_lr),),
        parts=lambda mdl, o, rule: dict(
            local=scaffold_local(mdl, o), post=scaffold_post,
            init_fields=lambda key, p, ms, data, hp, pre: scaffold_init(key, p, ms, data, hp)))


def qffl(model, client_lr: float, server_optimizer: optax.GradientTransformation | None = None,
         *, q: float = 1.0, local_steps: int = 50, batch_size: int = 64, cohort: int = 10,
         selector=None, loss: Callable | None = None,
         executor: CohortExecutor | None = None) -> FederatedAlgorithm:
    """q-FFL / q-FedAvg (Li, Sanjabi, Beirami, Smith, ICLR 2020, "Fair Resource Allocation in
    Federated Learning", Algorithm 2): local SGD at `client_lr` (eta, the paper's L = 1/eta)
    and the server step sum_k F_k^q Delta w_k / eta over sum_k h_k (`algorithms.qffl`); a
    large q stands in for AFL (Mohri et al. 2019), as the registered `afl` does with q = 10.

    Hyperparameters: "client.learning_rate", "qffl.q" (q >= 0; 0 is uniform FedAvg).
    """
    return _baseline(
        "qffl", model, server_optimizer, local_steps=local_steps, batch_size=batch_size,
        cohort=cohort, weights=None, selector=selector, loss=loss, executor=executor,
        hypers=(_client_lr("qffl", client_lr),
                Hyper("qffl.q", _at_least("qffl", "q", q, 0.0, False), "qffl_q")),
        fixed_weights=qffl_rule(lambda hp: hp.qffl_q),
        parts=lambda mdl, o, rule: dict(local=client_update(
            mdl, None, steps=o.local_steps, batch_size=o.batch_size)))


def fednova(model, client_lr: float, server_optimizer: optax.GradientTransformation | None = None,
            *, local_steps: int = 50, batch_size: int = 64, cohort: int = 10, selector=None,
            loss: Callable | None = None,
            executor: CohortExecutor | None = None) -> FederatedAlgorithm:
    """FedNova (Wang et al., NeurIPS 2020, "Tackling the Objective Inconsistency Problem in
    Heterogeneous Federated Optimization"): local SGD at `client_lr`, each client reporting
    its normaliser a_k = tau, aggregated with the normalised weights p_k tau_eff / a_k
    (`aggregate.fednova`). With every client taking the same steps it is FedAvg; the
    command line's `--local-steps-dist` varies them.

    Hyperparameters: "client.learning_rate".
    """
    return _baseline(
        "fednova", model, server_optimizer, local_steps=local_steps, batch_size=batch_size,
        cohort=cohort, weights=None, selector=selector, loss=loss, executor=executor,
        hypers=(_client_lr("fednova", client_lr),), fixed_weights=FEDNOVA_RULE,
        parts=lambda mdl, o, rule: dict(local=client_update(
            mdl, None, steps=o.local_steps, batch_size=o.batch_size, nova=True)))


def fedfor(model, client_lr: float, server_optimizer: optax.GradientTransformation | None = None,
           *, lam: float = 0.1, local_steps: int = 50, batch_size: int = 64, cohort: int = 10,
           weights=None, selector=None, loss: Callable | None = None,
           executor: CohortExecutor | None = None) -> FederatedAlgorithm:
    """FedFor (Tian, Smith, Kira 2022, "FedFOR: Stateless Heterogeneous Federated Learning
    with First-Order Regularization"): local SGD at `client_lr` on
    F_k(w) + lam <g_t, w - w_t>, g_t the last global update over tau eta
    (`algorithms.fedfor`, our reading of the method).

    Hyperparameters: "client.learning_rate", "fedfor.lambda".
    """
    lam = _at_least("fedfor", "lam", lam, None)
    return _baseline(
        "fedfor", model, server_optimizer, local_steps=local_steps, batch_size=batch_size,
        cohort=cohort, weights=weights, selector=selector, loss=loss, executor=executor,
        hypers=(_client_lr("fedfor", client_lr), Hyper("fedfor.lambda", lam, "fedfor_lambda")),
        parts=lambda mdl, o, rule: dict(
            local=fedfor_local(mdl, o), post=fedfor_post,
            init_fields=lambda key, p, ms, data, hp, pre: {
                "algo": FedForState(jax.tree.map(jnp.zeros_like, p))}))


def _fedbn_parts(mdl: Model, o: Options, rule) -> dict:
    params_shape, _ = jax.eval_shape(mdl.init, jax.random.key(0))
    if not bn_part(params_shape):
        raise ConfigError("fedbn needs a model with BatchNorm layers (flax nn.BatchNorm, "
                          "named BatchNorm_<i> as compact modules name them)")
    return dict(local=fedbn_local(mdl, o), post=fedbn_post, average_state=False,
                init_fields=lambda key, p, ms, data, hp, pre: fedbn_init(key, p, ms, data, hp),
                evaluate=fedbn_evaluator(mdl, o))


def fedbn(model, client_lr: float, server_optimizer: optax.GradientTransformation | None = None,
          *, local_steps: int = 50, batch_size: int = 64, cohort: int = 10, weights=None,
          selector=None, loss: Callable | None = None,
          executor: CohortExecutor | None = None) -> FederatedAlgorithm:
    """FedBN (Li et al., ICLR 2021, "FedBN: Federated Learning on Non-IID Features via Local
    Batch Normalization"): every seen client keeps its own BatchNorm parameters and
    statistics; the other parameters are averaged (`algorithms.fedbn`, whose evaluation
    gives an unseen client the mean BN adapted to its own rows). The model must have
    BatchNorm layers.

    Hyperparameters: "client.learning_rate".
    """
    return _baseline(
        "fedbn", model, server_optimizer, local_steps=local_steps, batch_size=batch_size,
        cohort=cohort, weights=weights, selector=selector, loss=loss, executor=executor,
        hypers=(_client_lr("fedbn", client_lr),), parts=_fedbn_parts)


def mwfed(model, client_optimizer: optax.GradientTransformation,
          server_optimizer: optax.GradientTransformation | None = None, *, eta: float = 1.0,
          requirement: str | float | np.ndarray = "solo", rho_steps: int = 100,
          solo_lr: float = 0.05, local_steps: int = 50, batch_size: int = 64, cohort: int = 10,
          selector=None, loss: Callable | None = None,
          executor: CohortExecutor | None = None, unroll: int = 1) -> FederatedAlgorithm:
    """MW-Fed (Blum, Haghtalab, Phillips, Shao, ICML 2021, "One for One, or All for All"), as
    the MaxFL paper's baseline: FedAvg's local steps of `client_optimizer`, weights
    v_k n_k / sum v_j n_j with v_k <- v_k exp(eta 1[F_k(w) > rho_k]) after each round
    (`algorithms.mwfed`); `requirement`, `rho_steps`, `solo_lr` set rho_k as `maxfl`'s do.

    Hyperparameters: the client and server optimizers' (`core.hyper`), "mwfed.eta",
    "maxfl.solo_lr" (when the requirement is "solo").
    """
    req = parse_requirement_arg(requirement, "mwfed")
    rho = _positive_int("rho_steps", rho_steps) if req is None else 0
    ctx = _optimizer("client_optimizer", client_optimizer)
    own = (Hyper("mwfed.eta", _at_least("mwfed", "eta", eta, 0.0, False), "mwfed_eta"),
           *requirement_hypers(req, None, solo_lr, "mwfed"))

    def parts(mdl, o, rule):
        req_init, pre_init = requirement_parts(mdl, req, rho, o.batch_size)

        def init_fields(key, p, ms, data, hp, pre):
            return {"algo": MWFedState(jnp.zeros((data.num_clients,), jnp.float32)),
                    **req_init(key, p, ms, data, hp, pre)}

        return dict(local=client_update(mdl, ctx, steps=o.local_steps, batch_size=o.batch_size,
                                        unroll=unroll),
                    post=mw_post, init_fields=init_fields, pre_init=pre_init)

    return _baseline(
        "mwfed", model, server_optimizer, local_steps=local_steps, batch_size=batch_size,
        cohort=cohort, weights=None, selector=selector, loss=loss, executor=executor,
        hypers=own, parts=parts, client_optimizer=ctx, fixed_weights=MW_RULE,
        pre_init=req is None)


def perfedavg(model, server_optimizer: optax.GradientTransformation | None = None, *,
              alpha: float = 0.02, beta: float = 0.05, variant: str = "fo", delta: float = 1e-3,
              local_steps: int = 50, batch_size: int = 64, cohort: int = 10, weights=None,
              selector=None, loss: Callable | None = None,
              executor: CohortExecutor | None = None) -> FederatedAlgorithm:
    """Per-FedAvg (Fallah, Mokhtari, Ozdaglar, NeurIPS 2020, "Personalized Federated Learning
    with Theoretical Guarantees: A Model-Agnostic Meta-Learning Approach", Algorithm 1):
    tau meta steps w <- w - beta grad f(w - alpha grad f(w; D); D') per round, first-order
    (`variant="fo"`) or Hessian-free ("hf", finite difference `delta`, 0 = exact jvp);
    evaluated after each client's one-step adaptation (`algorithms.perfedavg`).

    Hyperparameters: "perfedavg.alpha", "perfedavg.beta", "perfedavg.delta".
    """
    if variant not in ("fo", "hf"):
        raise ConfigError(f"perfedavg: variant must be 'fo' or 'hf' (got {variant!r})")
    own = (Hyper("perfedavg.alpha", _at_least("perfedavg", "alpha", alpha, 0.0, False),
                 "perfedavg_alpha"),
           Hyper("perfedavg.beta", _at_least("perfedavg", "beta", beta, 0.0, True),
                 "perfedavg_beta"),
           Hyper("perfedavg.delta", _at_least("perfedavg", "delta", delta, 0.0, False),
                 "perfedavg_delta"))
    return _baseline(
        "perfedavg", model, server_optimizer, local_steps=local_steps, batch_size=batch_size,
        cohort=cohort, weights=weights, selector=selector, loss=loss, executor=executor,
        hypers=own, opts={"perfedavg_variant": variant},
        parts=lambda mdl, o, rule: dict(
            local=perfedavg_local(mdl, o),
            init_fields=lambda key, *_: {"eval_key": eval_key_data(key)},
            evaluate=personal_evaluator(mdl, one_step_adapt(mdl, o))))


def pfedme(model, client_lr: float, server_optimizer: optax.GradientTransformation | None = None,
           *, lam: float = 15.0, personal_lr: float = 0.05, beta: float = 1.0,
           inner_steps: int = 5, local_steps: int = 50, batch_size: int = 64, cohort: int = 10,
           weights=None, selector=None, loss: Callable | None = None,
           executor: CohortExecutor | None = None) -> FederatedAlgorithm:
    """pFedMe (T. Dinh, Tran, Nguyen, NeurIPS 2020, "Personalized Federated Learning with
    Moreau Envelopes", Algorithm 1): per local step, `inner_steps` steps at `personal_lr` on
    f(theta; D) + lam/2 ||theta - w_k||^2, then w_k <- w_k - client_lr lam (w_k - theta);
    the server mixes w <- (1 - beta) w + beta sum a_k w_k; evaluated with each client's
    personal model (`algorithms.pfedme`). The paper averages uniformly: `weights=Uniform()`.

    Hyperparameters: "client.learning_rate", "pfedme.lambda", "pfedme.personal_lr",
    "pfedme.beta".
    """
    own = (_client_lr("pfedme", client_lr),
           Hyper("pfedme.lambda", _at_least("pfedme", "lam", lam, 0.0, True), "pfedme_lambda"),
           Hyper("pfedme.personal_lr", _at_least("pfedme", "personal_lr", personal_lr, 0.0, True),
                 "pfedme_lr"),
           Hyper("pfedme.beta", _at_least("pfedme", "beta", beta, 0.0, True), "pfedme_beta"))

    def parts(mdl, o, rule):
        local, mixed, adapt = pfedme_parts(mdl, o, rule)
        return dict(local=local, weights=mixed, evaluate=personal_evaluator(mdl, adapt),
                    init_fields=lambda key, *_: {"eval_key": eval_key_data(key)})

    return _baseline(
        "pfedme", model, server_optimizer, local_steps=local_steps, batch_size=batch_size,
        cohort=cohort, weights=weights, selector=selector, loss=loss, executor=executor,
        hypers=own, opts={"pfedme_k": _positive_int("inner_steps", inner_steps)}, parts=parts)


def fedbuff(model, client_lr: float, server_optimizer: optax.GradientTransformation | None = None,
            *, buffer: int = 10, concurrency: int | None = None, staleness_power: float = 0.5,
            step_time_sigma: float = 0.5, local_steps: int = 50, batch_size: int = 64,
            loss: Callable | None = None) -> FederatedAlgorithm:
    """FedBuff (Nguyen et al., AISTATS 2022, "Federated Learning with Buffered Asynchronous
    Aggregation", Algorithm 1) in simulated time: `concurrency` clients (default
    2 x `buffer`, at most the data's clients) train at once, each for `local_steps` SGD steps
    at `client_lr` lasting local_steps x LogNormal(0, step_time_sigma) seconds; every
    `buffer` arrivals the server steps on their mean weighted by (1 + staleness)^-power
    (`algorithms.fedbuff`). One round is one server step. No selector or weight rule: a
    uniform client starts whenever one finishes.

    Hyperparameters: "client.learning_rate", "fedbuff.staleness_power",
    "fedbuff.step_time_sigma".
    """
    steps, batch, _ = _sizes(local_steps, batch_size, 1)
    k = _positive_int("buffer", buffer)
    c = None if concurrency is None else _positive_int("concurrency", concurrency)
    stx = _optimizer("server_optimizer", AVERAGE if server_optimizer is None else server_optimizer)
    own = (_client_lr("fedbuff", client_lr),
           Hyper("fedbuff.staleness_power",
                 _at_least("fedbuff", "staleness_power", staleness_power, 0.0, False),
                 "staleness_power"),
           Hyper("fedbuff.step_time_sigma",
                 _at_least("fedbuff", "step_time_sigma", step_time_sigma, 0.0, False),
                 "step_time_sigma"))

    def build(mdl: Model, clients: int) -> Parts:
        _cohort_check("fedbuff", k, clients)
        slots = min(2 * k, clients) if c is None else c
        if slots > clients:
            raise ConfigError(f"fedbuff: concurrency {slots} is larger than the data's "
                              f"{clients} clients: lower it")
        init, rnd = fedbuff_functions(mdl, slots=slots, buffer=k, steps=steps, batch_size=batch,
                                      tx=lambda hp: with_hparams(stx, hp, "server"))
        return Parts(lambda key, data, hp, pre=None: init(key, data, hp), rnd,
                     global_evaluator(mdl))

    return library_algorithm("fedbuff", model, build, hypers=own,
                             keys=optimizer_keys(stx, "server"), loss=loss)
