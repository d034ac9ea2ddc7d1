"""Server optimizers: optax transforms applied to the aggregated pseudo-gradient.

With pseudo-gradient g = sum_k w_k (w - w_k), plain SGD with server lr 1 is FedAvg;
momentum is FedAvgM (Hsu et al. 2019); adam / yogi are FedAdam / FedYogi (Reddi et al.
2021, "Adaptive Federated Optimization"), whose epsilon is the adaptivity tau.
Hyperparameters come from the (possibly traced) `HParams`, so the same program serves a
whole sweep.

Reddi et al.'s Algorithm 2 with Delta = -g: m = b1 m + (1-b1) g, v = b2 v + (1-b2) g^2
(Adam) or v = v - (1-b2) g^2 sign(v - g^2) (Yogi), w = w - eta m / (sqrt(v) + tau). optax
adds the usual bias correction m/(1-b1^t), v/(1-b2^t) (Reddi et al. omit it; the two agree
once b^t ~ 0, and the first step of optax is the sign-like eta g/(|g| + tau) step), and
optax's Yogi starts both moments at 1e-6 instead of 0. `tests/test_server.py` checks one
and two steps against these formulas.
"""

from __future__ import annotations

import optax

from ..core.config import HParams
from ..core.fields import component, option
from ..core.registry import Registry

option("server_opt", "sgd", "server optimizer", registry="server_opt",
       group="algorithm")
# the server optimizers' hyperparameters (FedAvgM / FedAdam / FedYogi)
ADAPTIVE = component("server_opt", "adam", "yogi")
MOMENTUM = option("server_momentum", 0.9, "server momentum (FedAvgM) / Adam beta1",
                  applies=component("server_opt", "momentum", "nesterov", "adam", "yogi"),
                  tunable=True)
BETA2 = option("server_beta2", 0.99, "server Adam/Yogi beta2", applies=ADAPTIVE, tunable=True)
EPS = option("server_eps", 1e-3, "server Adam/Yogi epsilon (the adaptivity tau of Reddi et al.)",
             applies=ADAPTIVE, tunable=True)

SERVER_OPTS = Registry("server optimizer", {
    "sgd": lambda hp: optax.sgd(hp.server_lr),
    "momentum": lambda hp: optax.sgd(hp.server_lr, momentum=hp.server_momentum, nesterov=False),
    "nesterov": lambda hp: optax.sgd(hp.server_lr, momentum=hp.server_momentum, nesterov=True),
    "adam": lambda hp: optax.adam(hp.server_lr, b1=hp.server_momentum, b2=hp.server_beta2,
                                  eps=hp.server_eps),
    "yogi": lambda hp: optax.yogi(hp.server_lr, b1=hp.server_momentum, b2=hp.server_beta2,
                                  eps=hp.server_eps),
})


def server_optimizer(name: str, hp: HParams) -> optax.GradientTransformation:
    """The optax transform `name` of `SERVER_OPTS` with the hyperparameters of `hp`."""
    return SERVER_OPTS.get(name)(hp)

