"""Algorithms: one short file each, composing the parts of a round."""

from . import (
    fedavg,  # noqa: F401  (registers fedavg, fedprox)
    fedbn,  # noqa: F401  (registers fedbn)
    fedbuff,  # noqa: F401  (asynchronous, buffered)
    fedfor,  # noqa: F401
    fednova,  # noqa: F401
    maxfl,  # noqa: F401  (registers maxfl, incfl)
    mwfed,  # noqa: F401
    perfedavg,  # noqa: F401
    pfedme,  # noqa: F401
    qffl,  # noqa: F401  (registers qffl, afl)
    scaffold,  # noqa: F401
)
from .base import ALGORITHMS, FederatedAlgorithm, build, compose, global_evaluator, register

__all__ = ["ALGORITHMS", "FederatedAlgorithm", "build", "compose", "global_evaluator",
           "register"]
