"""Checks of a configuration before anything runs; each failure is one actionable line."""

from __future__ import annotations

import os
import tempfile
import zipfile
from pathlib import Path
from typing import Any

import jax.numpy as jnp

from ..aggregate import accounting, privacy, uplink
from ..aggregate.aggregation import AGGREGATIONS
from ..aggregate.server import SERVER_OPTS
from ..algorithms import ALGORITHMS, build
from ..core.capabilities import supports
from ..core.config import (
    ConfigError,
    HParams,
    Options,
    RunConfig,
    declarations,
    field_names,
)
from ..core.errors import UndeclaredOption
from ..core.fields import OPTIONS, load_option_modules
from ..core.models import MODELS, Logistic, Model
from ..core.tunables import check_tunable
from ..data.pool import DATASETS, data_options, dataset_rows
from ..data.sources import npz_members
from ..execute.executor import Executor
from ..protocols.appeal.requirement import appeal_on, parse_requirement
from ..select.selectors import DELTA_CHUNK_ERROR, SELECTORS
from . import validate_hetero as hetero_checks
from .schema import check_declared
from .tracking import check_available, parse_kinds
from .validate_hetero import validate_hetero


def component_registries() -> dict[str, Any]:
    """The registry of every field declared with `registry=` (core/config.py), by name."""
    return {"algorithm": ALGORITHMS, "model": MODELS, "server_opt": SERVER_OPTS,
            "selector": SELECTORS, "aggregation": AGGREGATIONS}


def validate(cfg: RunConfig, hp: HParams) -> None:
    """Raise `ConfigError` for the first problem found in (cfg, hp).

    Types, choices and ranges come from the fields' declarations (`check_declared`);
    what follows checks names against the component registries and the constraints
    between fields.
    """
    check_declared(cfg, hp)
    regs = component_registries()
    for f in declarations(RunConfig):
        if f.metadata.get("registry"):
            regs[f.metadata["registry"]].check(getattr(cfg, f.name))
    npz = cfg.dataset.startswith("npz:")  # your own arrays: checked by their file
    if npz:
        _check_npz(cfg.dataset[4:])
    classes = 0 if npz else DATASETS[cfg.dataset].classes  # its entry's (0: from the labels)
    if 0 < cfg.num_classes < classes:
        raise ConfigError(f"{cfg.dataset} has {classes} classes; --num-classes "
                          f"{cfg.num_classes} is fewer: drop it or give {classes}")
    if cfg.log:
        check_available(parse_kinds(cfg.log))
    if cfg.cohort > cfg.clients:
        raise ConfigError(f"--cohort {cfg.cohort} is larger than --clients {cfg.clients}: lower "
                          "the cohort or raise the number of clients")
    for name in hp.to_dict(fill=False):  # given tunables: declared names only
        check_tunable(name)
    for name, v in hp.to_dict().items():
        if v != v or v in (float("inf"), float("-inf")):
            raise ConfigError(f"--{name.replace('_', '-')} must be finite (got {v})")
    # --- appeal protocol ---
    solo_rho = parse_requirement(cfg.requirement) is None
    needs_rho = solo_rho and supports(cfg.algorithm).needs_requirements
    if cfg.rho_steps < 1 and (appeal_on(cfg) or needs_rho):
        raise ConfigError("--rho-steps must be >= 1: the solo models need local steps")
    check_needs(cfg)  # what the values ask of the algorithm (and of each other)
    # --- client selection ---
    _validate_selection(cfg.view(_SELECTION_CHECKS, "the selection checks"), hp)
    validate_hetero(cfg.view(hetero_checks.CHECK_OPTIONS, "the heterogeneity checks"),
                    hp)  # heterogeneous and unreliable clients
    # --- DP-FedAvg, update compression ---
    privacy.check(cfg.view(privacy.CHECK_OPTIONS, "the DP checks"), hp, appeal_on(cfg))
    uplink.check(cfg.view(uplink.CHECK_OPTIONS, "the compression checks"))
    if cfg.dp != "off":
        accounting.require()
    check_build(cfg)


def check_build(cfg: RunConfig) -> None:
    """Build the run's algorithm (and the selector, weight rule, ... it composes) with a
    stand-in model, before any data is loaded: a builder, or a part it calls, that reads an
    option not declared for it is refused in one line that names the declaration to add.
    Other failures are left to the build with the run's own model."""
    try:
        build(cfg.algorithm, STAND_IN, cfg, executor=Executor(0, None, 0))
    except UndeclaredOption as e:
        kind, _, quoted = e.component.partition(" ")
        if kind not in ("algorithm", "selector"):
            raise ConfigError(str(e)) from None
        who, name = quoted.strip("'"), e.option
        parts = OPTIONS[name].applies.names("part") if name in OPTIONS else ()
        fix = (f"declare the part it is built on: register({who!r}, Supports(parts="
               f"({parts[0]!r},)))" if parts and kind == "algorithm" else "declare an option of "
               f"its own: option(NAME, DEFAULT, HELP, applies=component({kind!r}, {who!r}))")
        raise ConfigError(f"--{kind} {who} reads the option {name!r}, which is not declared "
                          f"for it: {fix}") from None
    except Exception:  # noqa: BLE001 - the build with the run's own model reports it
        return


# the model of `check_build` (its builders only keep it: nothing is initialised)
STAND_IN = Model(Logistic(2), (1,), jnp.float32, "stand-in")


def check_needs(cfg: RunConfig) -> None:
    """Refuse, in one line, the first option whose value its declaration's `needs` refuses
    in `cfg` (e.g. `--dp fixed` for an algorithm without DP support)."""
    for o in declarations(RunConfig):
        why = o.needs.why(cfg) if o.needs is not None else None
        if why:
            raise ConfigError(why)


_SELECTION_CHECKS = ("poc_d", "cohort", "clients", "selector", "selector_features",
                     "client_chunk")


def _validate_selection(opts: Options, hp: HParams) -> None:
    """Options of the poc / divfl / subtrunc / unionfl selectors (`opts`: the fields of
    `_SELECTION_CHECKS`)."""
    if opts.poc_d and not opts.cohort <= opts.poc_d <= opts.clients:
        raise ConfigError(f"--poc-d {opts.poc_d} must lie between --cohort {opts.cohort} and "
                          f"--clients {opts.clients} (0 = 2 x cohort)")
    if (opts.selector in ("divfl", "subtrunc", "unionfl") and opts.selector_features == "delta"
            and 0 < opts.client_chunk < opts.cohort):
        raise ConfigError(DELTA_CHUNK_ERROR)


def ignored_reason(key: str, cfg: RunConfig) -> str | None:
    """Why option `key` has no effect in `cfg` (its declaration's `applies`), or None.

    Refused only for keys the user gave (flag, config file, grid), so library callers that
    build a RunConfig keep the defaults of unrelated options without error."""
    if key not in OPTIONS:
        load_option_modules()
    return OPTIONS[key].applies.why(cfg) if key in OPTIONS else None


def used_hparams(cfg: RunConfig) -> list[str]:
    """The hyperparameters that apply to `cfg` (their declarations' `applies`), in
    `HParams` order: what results.json records."""
    return [k for k in field_names(HParams) if ignored_reason(k, cfg) is None]


def check_ignored(cfg: RunConfig, given: set[str] | list[str], where: str = "") -> None:
    """Refuse an option the user gave that the combination `cfg` ignores (names it)."""
    for key in sorted(given):
        why = ignored_reason(key, cfg)
        if why is not None:
            raise ConfigError(f"--{key.replace('_', '-')} has no effect here{where}: {why}; "
                              "drop it or change the combination")


def _check_npz(path: str) -> None:
    """The file of --dataset npz:PATH exists and names its arrays as expected (headers only)."""
    p = Path(path).expanduser()
    if not p.is_file():
        raise ConfigError(f"dataset file {p} does not exist: pass --dataset npz:PATH")
    try:
        npz_members(p)
    except ConfigError:  # already one line naming the file and the fix
        raise
    except (OSError, ValueError, zipfile.BadZipFile) as e:
        raise ConfigError(f"cannot read {p} as an npz file ({e}): write it with numpy.savez"
                          ) from None


def check_source_size(opts: RunConfig | Options) -> None:
    """Refuse client counts the source cannot fill, before anything is decoded.

    Every client (seen and unseen) needs at least max(--min-samples, 2) rows (a train and
    a test row); `--max-samples` caps the rows used. `opts`: the configuration, or options
    holding its data fields (the only ones read).
    """
    opts = data_options(opts, "the source size check")
    n = dataset_rows(opts)
    if n is None:
        return
    rows = min(n, opts.max_samples) if opts.max_samples else n
    per = max(opts.min_samples, 2)
    total = opts.clients + opts.unseen_clients
    if total * per > rows:
        cap = f" (--max-samples {opts.max_samples})" if opts.max_samples and opts.max_samples < n \
            else ""
        raise ConfigError(f"--clients {opts.clients} + --unseen-clients {opts.unseen_clients} need "
                          f"at least {total * per} rows ({per} per client) but {opts.dataset} has "
                          f"{rows}{cap}: use at most {rows // per} clients in all, or lower "
                          "--min-samples")


# Files by which a folder is recognised as holding a run (`run`) or a sweep (`sweep`).
RUN_FILES = ("results.json", "history.csv", "accuracy.png", "checkpoint.npz", "model.msgpack",
             "model.json", "tokenizer.json", "tensorboard", "wandb")
SWEEP_FILES = ("sweep.json", "sweep.csv", "summary.md", "sweep.png", "sweep-checkpoint",
               "tensorboard", "wandb")


def check_out(out: str, flag: str = "--out", holds: tuple[str, ...] = (),
              reuse: bool = False) -> None:
    """Refuse an output folder that cannot take the results, before any work is done.

    `out` must not be a file, must be creatable (its nearest existing ancestor is a folder
    we may write into: tested by creating and removing an empty temporary folder there),
    and, unless `reuse` (--overwrite / --resume), must not already hold another run's
    files (`holds`). Nothing is left on disk.
    """
    p = Path(out).expanduser()
    too_long = [part for part in p.parts if len(part.encode()) > 255]
    if too_long:
        raise ConfigError(f"{flag}: the name {too_long[0][:40]}... is {len(too_long[0].encode())} "
                          "bytes, longer than a file system allows (255): choose a shorter name")
    if p.exists() and not p.is_dir():
        raise ConfigError(f"{flag} {out} is a file, not a folder: give a folder (it is created "
                          "if missing)")
    a = p
    while not a.exists() and a != a.parent:
        a = a.parent
    if not a.is_dir():
        raise ConfigError(f"{flag} {out} cannot be created: {a} is a file, not a folder")
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".fedjax-appeal-check-", dir=a))
    except OSError as e:
        raise ConfigError(f"{flag} {out} cannot be written ({a}: {e.strerror or e}): choose "
                          "another folder") from None
    if p.is_dir() and not reuse:
        held = [n for n in holds if (p / n).exists()]
        if held:
            resume = (f", --resume {out} to continue it" if "checkpoint.npz" in held
                      else "")
            raise ConfigError(f"{flag} {out} already holds another run ({', '.join(held)}): "
                              f"pass --overwrite to replace it{resume}, or choose another "
                              "folder")
