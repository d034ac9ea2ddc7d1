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
from ..core.capabilities import Supports, part
from ..core.config import ConfigError, Options
from ..core.fields import option
from ..core.models import Model
from ..local import hetero
from ..local.client import Trained, local_sgd, proximal
from ..local.optimizers import CLIENT_OPTS, client_optimizer
from .base import compose, register

# The shared parts of this file: FedAvg's local SGD (`sgd_local`) and FedProx's proximal
# term. An algorithm built on one (a plugin's too) lists it in `Supports(parts=...)`, and the
# part's options apply to it (and are refused for the others).
SGD_LOCAL, PROXIMAL = part("sgd_local"), part("proximal")
PROX_MU = option("prox_mu", 0.01, "FedProx proximal coefficient mu", applies=PROXIMAL,
                 tunable=True, ge=0)
LOCAL_UNROLL = option("local_unroll", 1, "unroll factor of the local SGD scan (0 = every step)",
                      applies=SGD_LOCAL, group="federation", ge=0)
# the client optimizer (at --client-lr; the appeal protocol's solo models keep plain SGD)
CLIENT_OPT = option("client_opt", "sgd", "client optimizer of the local steps", CLIENT_OPTS,
                    applies=SGD_LOCAL)


def sgd_local(model: Model, opts: Options, prox: bool = False, nova: bool | None = None):
    """The local objective of FedAvg/FedProx: tau SGD steps from the global model (or steps
    of the `--client-opt` optimizer, `local.optimizers`).

    With `--local-steps-dist` other than fixed, client k takes tau_k steps
    (`local.hetero.client_steps`); with FedNova aggregation it reports its normaliser a_k
    (`aggregate.fednova.local_norm`) in `Trained.fednova_a` (`nova`: None = when
    `--aggregation fednova`).
    """
    varied = opts.local_steps_dist != "fixed"
    nova = opts.aggregation == "fednova" if nova is None else nova
    unroll = opts.local_unroll or True  # read here: an undeclared read fails when built
    tx = client_optimizer(opts.client_opt)
    if nova and tx is not None:
        raise ConfigError("--aggregation fednova's normaliser a_k assumes plain SGD clients: "
                          "use --client-opt sgd")

    def local(state, data, k, key, hp):
        reg = proximal(state.params, hp.prox_mu) if prox else None
        tau = (hetero.client_steps(opts, hetero.root_key(state), state.round, k, hp,
                                   data.train.count[k]) if varied else None)
        res = local_sgd(model, state.params, state.model_state, data.train, k, key, hp.client_lr,
                        steps=opts.local_steps, batch_size=opts.batch_size, regularizer=reg,
                        tx=None if tx is None else tx(hp), num_steps=tau, unroll=unroll)
        a = None
        if nova:
            steps = opts.local_steps if tau is None else tau
            a = local_norm(steps, hp.client_lr, hp.prox_mu if prox else 0.0)
        return Trained((state.params, state.model_state), (res.params, res.state), res.loss,
                       fednova_a=a)

    return local


FEDAVG_SUPPORTS = Supports(varied_steps=True, fednova=True, dp=True, parts=("sgd_local",))


@register("fedavg", FEDAVG_SUPPORTS)
def fedavg(model: Model, opts: Options, executor=None):
    return compose("fedavg", model, opts, local=sgd_local(model, opts), weights=weight_rule(opts),
                   executor=executor)


FEDPROX_SUPPORTS = Supports(varied_steps=True, fednova=True, dp=True,
                            parts=("sgd_local", "proximal"))


@register("fedprox", FEDPROX_SUPPORTS)
def fedprox(model: Model, opts: Options, executor=None):
    return compose("fedprox", model, opts, local=sgd_local(model, opts, prox=True),
                   weights=weight_rule(opts), executor=executor)
