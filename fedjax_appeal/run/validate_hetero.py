"""Checks of the heterogeneous / unreliable client options (`local.hetero`,
`select.availability`, `aggregate.fednova`, `algorithms.fedbuff`)."""

from __future__ import annotations

from ..core.capabilities import supports
from ..core.config import ConfigError, HParams, RunConfig


def validate_hetero(cfg: RunConfig, hp: HParams) -> None:
    """Raise `ConfigError` for the first problem of the heterogeneity options."""
    if not 1 <= cfg.local_steps_min <= cfg.local_steps:
        raise ConfigError(f"--local-steps-min {cfg.local_steps_min} must lie between 1 and "
                          f"--local-steps {cfg.local_steps} (the largest tau_k)")
    if cfg.concurrency < 0 or cfg.concurrency > cfg.clients:
        raise ConfigError(f"--concurrency {cfg.concurrency} must lie between 0 (= 2 x cohort) "
                          f"and --clients {cfg.clients}")


def ignored_reason(key: str, cfg: RunConfig) -> str | None:
    """Why a heterogeneity option has no effect in `cfg`, or None."""
    if key == "local_steps_min" and cfg.local_steps_dist == "fixed":
        return "it bounds --local-steps-dist uniform|lognormal"
    if key == "local_epochs" and cfg.local_steps_dist != "epochs":
        return "it configures --local-steps-dist epochs"
    if key == "steps_sigma" and cfg.local_steps_dist != "lognormal":
        return "it configures --local-steps-dist lognormal"
    if key in ("avail_p", "avail_spread") and cfg.availability != "bernoulli":
        return "it configures --availability bernoulli"
    if key in ("avail_on_off", "avail_off_on") and cfg.availability != "markov":
        return "it configures --availability markov"
    if (key == "step_time_sigma" and cfg.deadline <= 0
            and key not in supports(cfg.algorithm).options):
        return "it sets the simulated step times of --deadline and fedbuff"
    return None
