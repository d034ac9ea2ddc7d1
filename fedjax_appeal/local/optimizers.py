"""Client optimizers: the optax transform each client's local steps use (`--client-opt`).

The default, plain SGD at `HParams.client_lr`, is the local update of every result so far
(`local_sgd`'s own `optax.sgd(lr)`, bit for bit). The others make FedAvg the generalised
FedOpt of Reddi et al. 2021 ("Adaptive Federated Optimization", Algorithm 1: ClientOpt on
the clients, ServerOpt on the server): their state (momentum trace, Adam moments) lives
for the local steps of one round and starts afresh from the received model. Their
hyperparameters come from the (possibly traced) `HParams`, so the same program serves a
whole sweep, as for the server optimizers (`aggregate/server.py`).

The solo models of the appeal protocol and of MaxFL's requirement keep plain SGD.
"""

from __future__ import annotations

from collections.abc import Callable

import optax

from ..core.config import HParams
from ..core.fields import component, option
from ..core.registry import Registry


def _uses(*names: str):
    """Applies where `--client-opt` is one of `names`."""
    return component("client_opt", *names)


MOMENTUM = option("client_momentum", 0.9, "client momentum (--client-opt momentum, nesterov) / "
                  "client Adam beta1", applies=_uses("momentum", "nesterov", "adam"),
                  tunable=True, ge=0, lt=1)
BETA2 = option("client_beta2", 0.999, "client Adam beta2 (--client-opt adam)",
               applies=_uses("adam"), tunable=True, ge=0, lt=1)
EPS = option("client_eps", 1e-8, "client Adam epsilon (--client-opt adam)",
             applies=_uses("adam"), tunable=True, gt=0)

# `--client-opt` name -> fn(hp) -> the optax transform of one client's local steps
CLIENT_OPTS = Registry("client optimizer", {
    "sgd": lambda hp: optax.sgd(hp.client_lr),
    "momentum": lambda hp: optax.sgd(hp.client_lr, momentum=hp.client_momentum),
    "nesterov": lambda hp: optax.sgd(hp.client_lr, momentum=hp.client_momentum, nesterov=True),
    "adam": lambda hp: optax.adam(hp.client_lr, b1=hp.client_momentum, b2=hp.client_beta2,
                                  eps=hp.client_eps),
})


def client_optimizer(name: str) -> Callable[[HParams], optax.GradientTransformation] | None:
    """fn(hp) -> the optax transform of `--client-opt name`; None for "sgd", which
    `client.local_sgd` runs as its own plain SGD."""
    return None if name == "sgd" else CLIENT_OPTS.get(name)
