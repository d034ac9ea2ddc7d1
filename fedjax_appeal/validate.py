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
    if float(hp.solo_lr) < 0:
        raise ConfigError(f"--solo-lr must be >= 0 or 'same' (0 = same = the client lr; got "
                          f"{float(hp.solo_lr)})")
    if float(hp.server_lr) <= 0:
        raise ConfigError(f"--server-lr must be > 0 (got {float(hp.server_lr)})")
    if float(hp.prox_mu) < 0:
        raise ConfigError(f"--prox-mu must be >= 0 (got {float(hp.prox_mu)})")
    # Baselines (branch baselines)
    if cfg.perfedavg_variant not in ("fo", "hf"):
        raise ConfigError(f"unknown --perfedavg-variant '{cfg.perfedavg_variant}'; choose fo "
                          "or hf")
    if cfg.pfedme_k < 1:
        raise ConfigError(f"--pfedme-k must be >= 1 (got {cfg.pfedme_k})")
    for name in ("qffl_q", "afl_q", "mwfed_eta", "perfedavg_alpha", "perfedavg_delta"):
        if float(getattr(hp, name)) < 0:
            raise ConfigError(f"--{name.replace('_', '-')} must be >= 0 "
                              f"(got {float(getattr(hp, name))})")
    for name in ("perfedavg_beta", "pfedme_lambda", "pfedme_lr", "pfedme_beta"):
        if float(getattr(hp, name)) <= 0:
            raise ConfigError(f"--{name.replace('_', '-')} must be > 0 "
                              f"(got {float(getattr(hp, name))})")
    # --- appeal protocol (issue 3) ---
    from .config import APPEAL_DEFS

    if cfg.appeal_def not in APPEAL_DEFS:
        raise ConfigError(f"--appeal-def must be one of: {', '.join(APPEAL_DEFS)} "
                          f"(got {cfg.appeal_def!r})")
    if cfg.cluster_labels not in ("random", "pairs"):
        raise ConfigError(f"--cluster-labels must be random or pairs (got {cfg.cluster_labels!r})")
    for name in ("rho_steps", "finetune_steps"):
        if getattr(cfg, name) < 0:
            raise ConfigError(f"--{name.replace('_', '-')} must be >= 0 (got {getattr(cfg, name)})")
    from .requirement import parse_requirement

    solo_rho = parse_requirement(cfg.requirement) is None
    if cfg.rho_steps < 1 and (cfg.appeal or (solo_rho and cfg.algorithm in ("maxfl", "incfl"))):
        raise ConfigError("--rho-steps must be >= 1: the solo models need local steps")
    if float(hp.maxfl_eps) < 0:
        raise ConfigError(f"--maxfl-eps must be >= 0 (got {float(hp.maxfl_eps)})")
    # --- client selection (issue 4) ---
    _validate_selection(cfg, hp)


def _validate_selection(cfg: RunConfig, hp: HParams) -> None:
    """Options of the poc / divfl / subtrunc / unionfl selectors."""
    if cfg.poc_d and not cfg.cohort <= cfg.poc_d <= cfg.clients:
        raise ConfigError(f"--poc-d {cfg.poc_d} must lie between --cohort {cfg.cohort} and "
                          f"--clients {cfg.clients} (0 = 2 x cohort)")
    for name in ("greedy_candidates", "feature_refresh", "feature_dim"):
        if getattr(cfg, name) < 0:
            raise ConfigError(f"--{name.replace('_', '-')} must be >= 0 (got {getattr(cfg, name)})")
    if cfg.union_window < 1:
        raise ConfigError(f"--union-window must be >= 1 (got {cfg.union_window})")
    if cfg.distance_budget_mb <= 0:
        raise ConfigError(f"--distance-budget-mb must be > 0 (got {cfg.distance_budget_mb})")
    for name, choices in (("selector_features", ("grad", "delta")),
                          ("union_base", ("divfl", "subtrunc")),
                          ("subtrunc_phi", ("log", "identity"))):
        if getattr(cfg, name) not in choices:
            raise ConfigError(f"--{name.replace('_', '-')} must be one of: {', '.join(choices)} "
                              f"(got {getattr(cfg, name)!r})")
    if float(hp.subtrunc_lambda) < 0 or float(hp.union_mu) < 0:
        raise ConfigError("--subtrunc-lambda and --union-mu must be >= 0")
    # --- issue 5: Exp-alpha, heterogeneity generators
    if float(hp.exp_alpha) <= 0:
        raise ConfigError(f"--exp-alpha must be > 0 (got {float(hp.exp_alpha)})")
    # --- scale (issue 6) ---
    if cfg.checkpoint_every < 0:
        raise ConfigError(f"--checkpoint-every must be >= 0 (got {cfg.checkpoint_every})")
    if cfg.client_chunk < -1:
        raise ConfigError(f"--client-chunk must be >= -1 (got {cfg.client_chunk}); 0 = auto, "
                          "-1 = never")
    if cfg.devices < 0:
        raise ConfigError(f"--devices must be >= 0 (got {cfg.devices}); 0 = all")
