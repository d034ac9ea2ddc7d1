"""Checks of the heterogeneous / unreliable client options (`local.hetero`,
`select.availability`, `aggregate.fednova`, `algorithms.fedbuff`)."""

from __future__ import annotations

from ..core.config import ConfigError, HParams, RunConfig

# algorithms whose local objective is `fedavg.sgd_local` (they read tau_k)
VARIED_STEPS = ("fedavg", "fedprox", "fednova", "qffl", "afl", "mwfed", "maxfl", "incfl")


def validate_hetero(cfg: RunConfig, hp: HParams) -> None:
    """Raise `ConfigError` for the first problem of the heterogeneity options."""
    if not 1 <= cfg.local_steps_min <= cfg.local_steps:
        raise ConfigError(f"--local-steps-min {cfg.local_steps_min} must lie between 1 and "
                          f"--local-steps {cfg.local_steps} (the largest tau_k)")
    if cfg.local_steps_dist != "fixed" and cfg.algorithm not in VARIED_STEPS:
        raise ConfigError(f"--local-steps-dist {cfg.local_steps_dist} needs an algorithm with "
                          f"FedAvg's local SGD ({', '.join(VARIED_STEPS)}); {cfg.algorithm} "
                          "runs its own local steps: use --local-steps-dist fixed")
    if cfg.aggregation == "fednova" and cfg.algorithm not in ("fedavg", "fedprox", "fednova"):
        raise ConfigError(f"--aggregation fednova needs --algorithm fedavg, fedprox or fednova "
                          f"(their clients report FedNova's a_k); not {cfg.algorithm}")
    if cfg.concurrency < 0 or cfg.concurrency > cfg.clients:
        raise ConfigError(f"--concurrency {cfg.concurrency} must lie between 0 (= 2 x cohort) "
                          f"and --clients {cfg.clients}")
    if cfg.algorithm == "fedbuff":
        if cfg.availability != "always" or cfg.deadline > 0:
            raise ConfigError("fedbuff runs in simulated time without rounds: --availability "
                              "and --deadline apply to synchronous algorithms; drop them")
        if cfg.selector != "random" or cfg.flip_protocol != "static":
            raise ConfigError("fedbuff dispatches a uniform client whenever one finishes: use "
                              "--selector random and --flip-protocol static")
        if cfg.byzantine_fraction > 0:
            raise ConfigError("fedbuff has no Byzantine hook: use --byzantine-fraction 0 or a "
                              "synchronous algorithm")


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
    if key == "step_time_sigma" and cfg.deadline <= 0 and cfg.algorithm != "fedbuff":
        return "it sets the simulated step times of --deadline and fedbuff"
    if key == "aggregation" and cfg.algorithm == "fedbuff":
        return "fedbuff weighs each update by its staleness"
    if key in ("concurrency", "staleness_power") and cfg.algorithm != "fedbuff":
        return "it configures --algorithm fedbuff"
    return None
