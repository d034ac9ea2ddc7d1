"""FedNova (Wang et al. 2020, "Tackling the Objective Inconsistency Problem in Heterogeneous
Federated Optimization"): FedAvg's local SGD with normalised averaging.

`--algorithm fednova` is FedAvg's local objective (tau_k steps, see `--local-steps-dist`)
with the FedNova weight rule of `aggregate.fednova`; the same rule is available to fedavg
and fedprox as `--aggregation fednova` (FedProx then reports its own normaliser
a_k = [1 - (1 - eta mu)^tau_k] / (eta mu)).
"""

from __future__ import annotations

from ..aggregate.fednova import FEDNOVA_RULE
from ..core.capabilities import Supports
from ..core.config import Options
from ..core.models import Model
from .base import compose, register
from .fedavg import sgd_local

FEDNOVA_SUPPORTS = Supports(
    aggregation=False, varied_steps=True, fednova=True, parts=("sgd_local",),
    notes=(("aggregation", "fednova always aggregates with FedNova's normalised rule"),))


@register("fednova", FEDNOVA_SUPPORTS)
def fednova(model: Model, opts: Options, executor=None):
    return compose("fednova", model, opts, local=sgd_local(model, opts, nova=True),
                   weights=FEDNOVA_RULE, executor=executor)
