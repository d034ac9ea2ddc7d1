"""Experiment tracking: TensorBoard event files and Weights & Biases runs.

`--log tensorboard` writes, through `tensorboardX` (a maintained TensorBoard writer), into
`OUT/tensorboard/`: every evaluation's metrics as scalars `eval/NAME` at its round, while
the run goes; the per-round metrics of the compiled rounds (`round/NAME`: cohort loss,
available clients, ...) when the run ends; and the run's hyperparameters with its final
metrics (TensorBoard's HParams tab). `--log wandb` logs the same to a `wandb` run (optional
extra `pip install fedjax-appeal[wandb]`; `WANDB_MODE=offline` keeps it on disk). A sweep
logs one run per (grid point, seed) under `OUT/tensorboard/LABEL/seed-S`.

The trackers only see host-side values the simulator already fetched (evaluations, the
results dict), so tracking adds no host sync inside the compiled rounds.
"""

from __future__ import annotations

import importlib.util
import math
import netrc
import numbers
import os
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from ..core.config import ConfigError
from ..core.fields import option
from ..core.registry import did_you_mean

KINDS = ("tensorboard", "wandb")
option("log", "", "experiment trackers, comma-separated: tensorboard (in OUT/tensorboard), "
       "wandb", group="tracking")
LOG_DIR = "tensorboard"


def parse_kinds(spec: str) -> list[str]:
    """'tensorboard,wandb' -> ['tensorboard', 'wandb']; unknown names are refused."""
    kinds = [k.strip() for k in spec.split(",") if k.strip()]
    bad = [k for k in kinds if k not in KINDS]
    if bad:
        guess = did_you_mean(bad[0], KINDS)
        raise ConfigError(f"--log {spec}: unknown tracker {', '.join(bad)}; "
                          + (f"did you mean '{guess}'? " if guess else "")
                          + f"choose from {', '.join(KINDS)} (comma-separated)")
    return kinds


def check_available(kinds: list[str]) -> None:
    """Refuse, before anything runs, a tracker whose package is not installed or that
    could not start (W&B without a login)."""
    need = {"tensorboard": ("tensorboardX", "tracking"), "wandb": ("wandb", "wandb")}
    for k in kinds:
        mod, extra = need[k]
        if importlib.util.find_spec(mod) is None:
            raise ConfigError(f"--log {k} needs the {mod} package: pip install "
                              f"'fedjax-appeal[{extra}]'")
    if "wandb" in kinds:
        check_wandb_login()


def check_wandb_login() -> None:
    """Refuse `--log wandb` before any work when W&B could not start: online mode (the
    default) needs an API key, from `WANDB_API_KEY` or the netrc entry `wandb login` writes
    for the W&B host; `WANDB_MODE=offline` (or disabled) needs none."""
    if os.environ.get("WANDB_MODE", "").lower() in ("offline", "disabled", "dryrun"):
        return
    if os.environ.get("WANDB_API_KEY"):
        return
    host = urlparse(os.environ.get("WANDB_BASE_URL", "https://api.wandb.ai")).hostname or ""
    try:
        found = netrc.netrc(os.environ.get("NETRC")).authenticators(host) is not None
    except (OSError, netrc.NetrcParseError):
        found = False
    if not found:
        raise ConfigError(f"--log wandb: no Weights & Biases login here (no WANDB_API_KEY, no "
                          f"`wandb login` entry for {host} in ~/.netrc); run `wandb login`, "
                          "or set WANDB_MODE=offline to keep the run on disk")


def _scalars(d: dict[str, Any]) -> dict[str, float]:
    return {k: float(v) for k, v in d.items()
            if isinstance(v, numbers.Real) and not isinstance(v, bool)
            and math.isfinite(float(v))}


def _per_round(round_metrics: dict[str, Any]) -> dict[str, list[float]]:
    """Per-round scalars: scalar series as they are, per-client series ([rounds, m]) as their
    mean over the cohort (`NAME_mean`); indices and aggregation weights (which sum to one)
    are left to results.json."""
    out = {}
    for k, v in round_metrics.items():
        if not isinstance(v, list) or not v or k.endswith(("_idx", "_weights")):
            continue
        if isinstance(v[0], numbers.Real):
            out[k] = [float(x) if x is not None else math.nan for x in v]
        elif isinstance(v[0], list) and v[0] and isinstance(v[0][0], numbers.Real):
            out[f"{k}_mean"] = [float(sum(r) / len(r)) if r else math.nan for r in v]
    return out


def _hparam_values(config: dict[str, Any], hparams: dict[str, Any]) -> dict[str, Any]:
    """Config and hparams values TensorBoard's HParams plugin accepts (str/bool/number)."""
    out: dict[str, Any] = {}
    for k, v in {**config, **hparams}.items():
        if isinstance(v, bool | str) or (isinstance(v, numbers.Real) and math.isfinite(v)):
            out[k] = v
    return out


class Tracker:
    """One tracked run: `eval(entry)` per evaluation, `finish(results)` at the end."""

    def __init__(self, kinds: list[str], log_dir: Path, name: str, config: dict[str, Any],
                 hparams: dict[str, Any]):
        self.kinds, self.config, self.hparams = kinds, config, hparams
        self._tb = self._wb = None
        if "tensorboard" in kinds:
            # lazy: an optional dependency (the `tracking` extra), imported when asked for
            from tensorboardX import SummaryWriter

            self._tb = SummaryWriter(logdir=str(log_dir))
        if "wandb" in kinds:
            # lazy: an optional dependency (the `wandb` extra; 370 ms of import, measured)
            import wandb

            self._wb = wandb.init(project=os.environ.get("WANDB_PROJECT", "fedjax-appeal"),
                                  name=name, config={**config, **hparams},
                                  dir=str(log_dir.parent), reinit="create_new")

    def eval(self, entry: dict[str, Any]) -> None:
        step = int(entry["round"])
        vals = {f"eval/{k}": v for k, v in _scalars(entry).items() if k != "round"}
        if self._tb is not None:
            for k, v in vals.items():
                self._tb.add_scalar(k, v, step)
            self._tb.flush()
        if self._wb is not None:
            self._wb.log(vals, step=step)

    def finish(self, round_metrics: dict[str, Any], final: dict[str, Any]) -> None:
        per_round = _per_round(round_metrics)
        if self._tb is not None:
            for k, vs in per_round.items():
                for r, v in enumerate(vs, start=1):
                    if math.isfinite(v):
                        self._tb.add_scalar(f"round/{k}", v, r)
            self._tb.add_hparams(_hparam_values(self.config, self.hparams),
                                 {f"final/{k}": v for k, v in _scalars(final).items()},
                                 name="hparams")
            self._tb.close()
        if self._wb is not None:
            for k, vs in per_round.items():
                self._wb.define_metric(f"round/{k}", step_metric="round/index")
                for r, v in enumerate(vs, start=1):
                    self._wb.log({f"round/{k}": v, "round/index": r})
            self._wb.summary.update({f"final/{k}": v for k, v in _scalars(final).items()})
            self._wb.finish()

    def close(self) -> None:
        """End without final results (the run failed): close files, mark the W&B run."""
        if self._tb is not None:
            self._tb.close()
        if self._wb is not None:
            self._wb.finish(exit_code=1)


def log_finished_run(kinds: list[str], log_dir: Path, name: str, config: dict[str, Any],
                     hparams: dict[str, Any], history: list[dict[str, Any]],
                     round_metrics: dict[str, Any] | None = None) -> None:
    """Log a run that is already done (a sweep row) as one tracked run."""
    t = Tracker(kinds, log_dir, name, config, hparams)
    for entry in history:
        t.eval(entry)
    t.finish(round_metrics or {}, history[-1] if history else {})
