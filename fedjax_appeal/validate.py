"""Checks of a configuration before anything runs; each failure is one actionable line."""

from __future__ import annotations

import dataclasses

from .aggregation import AGGREGATIONS
from .config import DATASETS, PARTITIONS, ConfigError, HParams, RunConfig
from .models import MODELS
from .selection import SELECTORS
from .server import SERVER_OPTS


def validate(cfg: RunConfig, hp: HParams) -> None:
    """Raise `ConfigError` for the first problem found in (cfg, hp)."""
    from .algorithms import ALGORITHMS

    if cfg.algorithm not in ALGORITHMS:
        raise ConfigError(f"unknown algorithm '{cfg.algorithm}'; choose one of: "
                          f"{', '.join(sorted(ALGORITHMS))}")
    if cfg.dataset not in DATASETS:
        raise ConfigError(f"unknown dataset '{cfg.dataset}'; choose one of: {', '.join(DATASETS)}")
    if cfg.partition not in PARTITIONS:
        raise ConfigError(f"unknown partition '{cfg.partition}'; choose one of: "
                          f"{', '.join(PARTITIONS)}")
    if cfg.model != "auto" and cfg.model not in MODELS:
        raise ConfigError(f"unknown model '{cfg.model}'; choose one of: auto, {', '.join(MODELS)}")
    if cfg.selector not in SELECTORS:
        raise ConfigError(f"unknown selector '{cfg.selector}'; choose one of: "
                          f"{', '.join(SELECTORS)}")
    if cfg.aggregation not in AGGREGATIONS:
        raise ConfigError(f"unknown aggregation '{cfg.aggregation}'; choose one of: "
                          f"{', '.join(AGGREGATIONS)}")
    if cfg.server_opt not in SERVER_OPTS:
        raise ConfigError(f"unknown server optimizer '{cfg.server_opt}'; choose one of: "
                          f"{', '.join(SERVER_OPTS)}")
    for name in ("clients", "cohort", "local_steps", "batch_size"):
        if getattr(cfg, name) < 1:
            raise ConfigError(f"--{name.replace('_', '-')} must be >= 1 (got {getattr(cfg, name)})")
    for name in ("rounds", "unseen_clients", "max_samples", "min_samples", "eval_every"):
        if getattr(cfg, name) < 0:
            raise ConfigError(f"--{name.replace('_', '-')} must be >= 0 (got {getattr(cfg, name)})")
    if cfg.cohort > cfg.clients:
        raise ConfigError(f"--cohort {cfg.cohort} is larger than --clients {cfg.clients}: lower "
                          "the cohort or raise the number of clients")
    if not 0.0 < cfg.train_fraction < 1.0:
        raise ConfigError(f"--train-fraction must be in (0, 1) (got {cfg.train_fraction})")
    if cfg.partition == "dirichlet" and cfg.alpha <= 0:
        raise ConfigError(f"--alpha must be > 0 for the Dirichlet partition (got {cfg.alpha})")
    for name in ("label_flip_fraction", "flip_ratio", "byzantine_fraction"):
        if not 0.0 <= getattr(cfg, name) <= 1.0:
            raise ConfigError(f"--{name.replace('_', '-')} must be in [0, 1] "
                              f"(got {getattr(cfg, name)})")
    for f in dataclasses.fields(hp):
        v = float(getattr(hp, f.name))
        if v != v or v in (float("inf"), float("-inf")):
            raise ConfigError(f"--{f.name.replace('_', '-')} must be finite (got {v})")
    if float(hp.client_lr) <= 0:
        raise ConfigError(f"--client-lr must be > 0 (got {float(hp.client_lr)})")
    if float(hp.server_lr) <= 0:
        raise ConfigError(f"--server-lr must be > 0 (got {float(hp.server_lr)})")
    if float(hp.prox_mu) < 0:
        raise ConfigError(f"--prox-mu must be >= 0 (got {float(hp.prox_mu)})")
    # --- scale (issue 6) ---
    if cfg.checkpoint_every < 0:
        raise ConfigError(f"--checkpoint-every must be >= 0 (got {cfg.checkpoint_every})")
    if cfg.client_chunk < -1:
        raise ConfigError(f"--client-chunk must be >= -1 (got {cfg.client_chunk}); 0 = auto, "
                          "-1 = never")
    if cfg.devices < 0:
        raise ConfigError(f"--devices must be >= 0 (got {cfg.devices}); 0 = all")
