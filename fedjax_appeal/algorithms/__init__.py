"""Algorithms: one short file each, composing the parts of a round."""

from . import (
    fedavg,  # noqa: F401  (registers fedavg, fedprox)
    fedbn,  # noqa: F401  (issue 5: registers fedbn)
)
from .base import ALGORITHMS, FederatedAlgorithm, build, global_evaluator, register

__all__ = ["ALGORITHMS", "FederatedAlgorithm", "build", "global_evaluator", "register"]
