"""Checks of the heterogeneous / unreliable client options (`local.hetero`,
`select.availability`, `aggregate.fednova`, `algorithms.fedbuff`)."""

from __future__ import annotations

from ..core.config import ConfigError, HParams, Options

# The configuration fields of `validate_hetero` (`RunConfig.view`). Which heterogeneity
# options a run ignores follows from their declarations (`applies` of their `option` in
# `local/hetero.py`, `select/availability.py`).
CHECK_OPTIONS = ("local_steps_min", "local_steps", "concurrency", "clients")


def validate_hetero(opts: Options, hp: HParams) -> None:
    """Raise `ConfigError` for the first problem of the heterogeneity options."""
    if not 1 <= opts.local_steps_min <= opts.local_steps:
        raise ConfigError(f"--local-steps-min {opts.local_steps_min} must lie between 1 and "
                          f"--local-steps {opts.local_steps} (the largest tau_k)")
    if opts.concurrency < 0 or opts.concurrency > opts.clients:
        raise ConfigError(f"--concurrency {opts.concurrency} must lie between 0 (= 2 x cohort) "
                          f"and --clients {opts.clients}")
