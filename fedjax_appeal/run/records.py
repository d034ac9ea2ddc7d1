"""What results.json and sweep.json record about a configuration, and how it is read back.

A run (`experiment.run_config`) and every row of a sweep (`sweep.sweep`) record their
configuration with the values the run resolved: `model` is the model that was built
(`auto` -> the dataset's default, its `data.pool.DATASETS` entry) and `appeal` is "on" or
"off" as `config.appeal_on` decided. Their `hparams` blocks list only the hyperparameters
the configuration uses (`validate.used_hparams`); checkpoints keep every hyperparameter,
which `--resume` checks.

`runs_of` reads either file back as runs (settings, seed, history, source) whose settings
are resolved the same way, files written before these records included, so `compare`
groups a run and a sweep row of the same configuration together. `sample_std` is the
spread over seeds that both the sweep summary and `compare` report.
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np

from ..core.config import HParams, RunConfig, field_names
from ..data.pool import default_model
from ..protocols.appeal.requirement import appeal_on
from ..select.selectors import HEADLINES
from .validate import used_hparams

# Keys that name where a run was written or how it was scheduled, not what it ran.
NOT_A_SETTING = frozenset({"out", "resume", "overwrite", "cache_dir", "data_dir",
                           "fmnist_dir", "config", "checkpoint_every", "eval_every",
                           "devices", "client_lanes", "layout", "seed"})


def recorded_config(cfg: RunConfig, model_name: str) -> dict[str, Any]:
    """The `config` block of a run: every RunConfig field, with `model` the name of the
    model that was built and `appeal` "on" or "off" as resolved."""
    return {**cfg.as_dict(), "model": model_name,
            "appeal": "on" if appeal_on(cfg) else "off"}


def resolved_model(cfg: RunConfig) -> str:
    """The name of the model `cfg` builds (`auto` -> the dataset's default)."""
    return default_model(cfg.dataset) if cfg.model == "auto" else cfg.model


def recorded_hparams(cfg: RunConfig, hp: HParams) -> dict[str, float]:
    """The `hparams` block of a run: the hyperparameters `cfg` uses, with their values."""
    values = hp.to_dict()
    return {k: values[k] for k in used_hparams(cfg)}


def config_of(settings: dict[str, Any]) -> RunConfig:
    """The RunConfig of recorded settings (keys that are no RunConfig field are left out;
    missing ones take their defaults)."""
    names = set(field_names(RunConfig))
    return RunConfig(**{k: v for k, v in settings.items() if k in names})


def resolve_settings(settings: dict[str, Any]) -> dict[str, Any]:
    """Recorded settings with resolved values, also for files that hold `auto`.

    `model = "auto"` becomes the dataset's default model (`data.pool.default_model`),
    `appeal = "auto"` (or a boolean) becomes "on" or "off" (`config.appeal_on`), and the
    hyperparameters are narrowed to the ones the configuration uses (`used_hparams`;
    names that are no known hyperparameter are kept).
    """
    out = dict(settings)
    if out.get("model") == "auto":
        out["model"] = resolved_model(config_of(out))
    cfg = config_of(out)
    if "appeal" in out and out["appeal"] not in ("on", "off"):
        out["appeal"] = "on" if appeal_on(cfg) else "off"
    known = set(field_names(HParams)) - set(field_names(RunConfig))
    used = set(used_hparams(cfg))
    return {k: v for k, v in out.items() if k not in known or k in used}


def runs_of(results: dict[str, Any], source: str) -> list[dict[str, Any]]:
    """The runs (settings, seed, history, source) of one results.json or sweep.json dict.

    A sweep row's settings are the sweep's config and hparams overridden by the row's
    static config and grid values; its source is `source#ROW_ID`.
    """
    runs = []
    if "rows" in results:
        for row in results.get("rows", []):
            settings = {**results.get("config", {}), **row.get("static", {}),
                        **results.get("hparams", {}), **row.get("hparams", {})}
            runs.append({"settings": resolve_settings(settings), "seed": row.get("seed", 0),
                         "history": row.get("history", []),
                         "source": f"{source}#{row.get('id', len(runs))}"})
    elif "history" in results:
        config = results.get("config", {})
        settings = {**config, **results.get("hparams", {})}
        on = results.get("appeal_protocol", {}).get("on")
        if config.get("appeal") not in (None, "on", "off") and isinstance(on, bool):
            settings["appeal"] = "on" if on else "off"  # what the run itself resolved
        runs.append({"settings": resolve_settings(settings), "seed": config.get("seed", 0),
                     "history": results["history"], "source": source})
    return runs


def configuration_key(settings: dict[str, Any]) -> str:
    """One string per configuration: the settings without the seed and output paths."""
    return json.dumps({k: v for k, v in settings.items() if k not in NOT_A_SETTING},
                      sort_keys=True, default=str)


def duplicate_seeds(runs: list[dict[str, Any]]) -> list[str]:
    """One message per (configuration, seed) that more than one run holds, naming them."""
    seen: dict[tuple[str, Any], list[str]] = {}
    for r in runs:
        seen.setdefault((configuration_key(r["settings"]), r["seed"]), []).append(r["source"])
    return [f"seed {seed} appears {len(srcs)} times for one configuration ({', '.join(srcs)}); "
            "each copy counts as a separate seed in the mean and std"
            for (_, seed), srcs in seen.items() if len(srcs) > 1]


def headline(cfg: RunConfig, entry: dict[str, Any]) -> str:
    """The metrics a run's last line names beside its test accuracy: what the run was for.
    GM-Appeal of the seen and unseen clients when the appeal protocol is on (MaxFL's
    measure), and the metrics its selector's paper reports (`selectors.HEADLINES`: the
    client dissimilarity of the submodular selectors, in accuracy points); only those the
    history entry holds. '' when there are none."""
    names = [("gm_appeal_seen", 4), ("gm_appeal_unseen", 4)] if appeal_on(cfg) else []
    names += [(k, 2) for k in HEADLINES.get(cfg.selector, ())]
    return "".join(f"  {k} {entry[k]:.{d}f}" for k, d in names if k in entry)


def sample_std(values: Any, axis: int = 0) -> np.ndarray | float:
    """The sample standard deviation over seeds (ddof = 1) along `axis`.

    NaN where fewer than two values are given: one seed says nothing about the spread.
    Used by the sweep summary (`sweep.summarize_sweep`) and by `compare`.
    """
    a = np.asarray(values, dtype=float)
    n = a.shape[axis]
    if n < 2:
        sd = np.full(np.delete(a.shape, axis), np.nan)
    else:
        sd = a.std(axis=axis, ddof=1)
    return float(sd) if np.ndim(sd) == 0 else sd


def mean_std_text(mean: float, std: float, digits: int = 4) -> str:
    """'0.8123 ± 0.0100'; the std of a single seed (NaN) shows as 'n/a'."""
    m = "nan" if mean != mean else f"{mean:.{digits}f}"
    return f"{m} ± {'n/a' if not math.isfinite(std) else f'{std:.{digits}f}'}"
