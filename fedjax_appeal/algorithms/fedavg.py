"""FedAvg (McMahan et al. 2017, "Communication-Efficient Learning of Deep Networks from
Decentralized Data") and FedProx (Li et al. 2020, "Federated Optimization in Heterogeneous
Networks").

FedAvg: a uniform cohort runs tau local SGD steps; the server moves along the n_k-weighted
average of Delta_k = w - w_k with the configured optax server optimizer (plain SGD with
server lr 1 is the textbook average). FedProx adds mu/2 ||w_k - w||^2 to the local
objective (mu = `HParams.prox_mu`).
"""

from __future__ import annotations

from ..aggregate.aggregation import weight_rule
from ..aggregate.fednova import local_norm
from ..core.capabilities import Supports
from ..core.config import ConfigError, Options
from ..core.errors import UndeclaredOption
from ..core.fields import register_option
from ..core.models import Model
from ..core.tunables import register_tunable
from ..local import hetero
from ..local.client import Trained, local_sgd, proximal
from ..local.optimizers import CLIENT_OPTS, client_optimizer
from .base import compose, register

PROX_MU = register_tunable("prox_mu", 0.01, "FedProx proximal coefficient mu", ge=0)

# What `sgd_local` reads beside the shared options (how it runs, not what it computes): an
# algorithm built on it (a plugin's too) lists these in its `Supports.tuning`, so that
# `--local-unroll` is refused for the others.
SGD_LOCAL_OPTIONS = ("local_unroll", "client_opt")
# the built-in algorithms built on `sgd_local` (their `Supports.tuning` lists
# SGD_LOCAL_OPTIONS)
SGD_LOCAL_ALGORITHMS = ("afl", "fedavg", "fednova", "fedprox", "incfl", "maxfl", "mwfed", "qffl")
LOCAL_UNROLL = register_option(
    "local_unroll", 1, "unroll factor of the local-steps scan of the algorithms built on "
    "FedAvg's local SGD (0 = every step)", kind="algorithm", names=SGD_LOCAL_ALGORITHMS,
    group="federation", ge=0)
CLIENT_OPT = register_option(
    "client_opt", "sgd", "client optimizer of the local steps of the algorithms built on "
    "FedAvg's local SGD (local/optimizers.py: sgd, momentum, nesterov, adam; at "
    "--client-lr); the solo models of the appeal protocol keep plain SGD", CLIENT_OPTS,
    kind="algorithm", names=SGD_LOCAL_ALGORITHMS, group="algorithm")


def _client_opt(opts) -> str:
    """`opts.client_opt`; "sgd" for the options of a plugin built on `sgd_local` that do
    not list SGD_LOCAL_OPTIONS."""
    try:
        return opts.client_opt
    except (AttributeError, UndeclaredOption):
        return "sgd"


def sgd_local(model: Model, opts: Options, prox: bool = False, nova: bool | None = None):
    """The local objective of FedAvg/FedProx: tau SGD steps from the global model (or steps
    of the `--client-opt` optimizer, `local.optimizers`).

    With `--local-steps-dist` other than fixed, client k takes tau_k steps
    (`local.hetero.client_steps`); with FedNova aggregation it reports its normaliser a_k
    (`aggregate.fednova.local_norm`) in `extra["fednova_a"]` (`nova`: None = when
    `--aggregation fednova`).
    """
    varied = opts.local_steps_dist != "fixed"
    nova = opts.aggregation == "fednova" if nova is None else nova
    tx = client_optimizer(_client_opt(opts))
    if nova and tx is not None:
        raise ConfigError("--aggregation fednova's normaliser a_k assumes plain SGD clients: "
                          "use --client-opt sgd")

    def local(state, data, k, key, hp):
        reg = proximal(state.params, hp.prox_mu) if prox else None
        tau = (hetero.client_steps(opts, hetero.root_key(state), state.round, k, hp,
                                   data.train.count[k]) if varied else None)
        res = local_sgd(model, state.params, state.model_state, data.train, k, key, hp.client_lr,
                        steps=opts.local_steps, batch_size=opts.batch_size, regularizer=reg,
                        tx=None if tx is None else tx(hp), num_steps=tau,
                        unroll=opts.local_unroll or True)
        extra = {}
        if nova:
            steps = opts.local_steps if tau is None else tau
            extra["fednova_a"] = local_norm(steps, hp.client_lr, hp.prox_mu if prox else 0.0)
        return Trained((state.params, state.model_state), (res.params, res.state), res.loss,
                       extra)

    return local


FEDAVG_SUPPORTS = Supports(varied_steps=True, fednova=True, dp=True,
                           tuning=SGD_LOCAL_OPTIONS)


@register("fedavg", FEDAVG_SUPPORTS)
def fedavg(model: Model, opts: Options, executor=None):
    return compose("fedavg", model, opts, local=sgd_local(model, opts), weights=weight_rule(opts),
                   executor=executor)


FEDPROX_SUPPORTS = Supports(varied_steps=True, fednova=True, dp=True,
                            options=("prox_mu",), tuning=SGD_LOCAL_OPTIONS)


@register("fedprox", FEDPROX_SUPPORTS)
def fedprox(model: Model, opts: Options, executor=None):
    return compose("fedprox", model, opts, local=sgd_local(model, opts, prox=True),
                   weights=weight_rule(opts), executor=executor)
