"""The configuration's flags of `run` and `sweep`, and what they resolve to.

One flag per declared field of `RunConfig` and `HParams` (`client_lr` -> `--client-lr`),
in one argument group per section, plus `--hp NAME=X` for any hyperparameter (a plugin's
tunable included) and `--config FILE` (TOML or JSON) with the same keys. Precedence:
defaults < config file < flags given on the command line (`resolve`).
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..core.config import (
    GROUPS,
    ConfigError,
    HParams,
    Registry,
    RunConfig,
    declarations,
    field_names,
    split_overrides,
)
from ..core.fields import OPTIONS
from ..core.tunables import check_tunable
from ..run.schema import check_types, load_config_file, range_text
from ..run.validate import component_registries


def example_value(action: argparse.Action, fallback: float) -> str:
    """An example value of a numeric flag: its default (the declared one of a configuration
    field or tunable), else `fallback`."""
    default = OPTIONS[action.dest].default if action.dest in OPTIONS else action.default
    if isinstance(default, bool) or not isinstance(default, int | float) or default == 0:
        default = fallback
    return f"{default:g}" if isinstance(default, float) else str(default)


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _type_of(f: dataclasses.Field) -> Callable[[str], Any]:
    t = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type))
    if t == "bool":
        return lambda s: s.lower() in ("1", "true", "yes", "on")
    return {"int": int, "float": float}.get(t, str)


def hp_float(v: Any) -> float:
    """A hyperparameter value; 'same' (used by --solo-lr: the client lr) reads as 0."""
    if isinstance(v, str) and v.strip().lower() == "same":
        return 0.0
    return float(v)


def registries() -> dict[str, Any]:
    """RunConfig field -> the Registry of its allowed names (built-ins and plugins), from
    the fields' declarations (`registry=` or a Registry of choices)."""
    comps = component_registries()
    out = {}
    for f in declarations(RunConfig):
        if f.metadata.get("registry"):
            out[f.name] = comps[f.metadata["registry"]]
        elif isinstance(f.metadata.get("choices"), Registry):
            out[f.name] = f.metadata["choices"]
    return out


def _declared_help(f, named: dict[str, Any]) -> str:
    """A field's help line: its text, default, choices or range (all from its declaration)."""
    meta = f.metadata
    allowed = (named[f.name].choices() if f.name in named else meta.get("choices") or ())
    extra = [f"default: {meta.get('shown') or repr(f.default)}"]
    if allowed:
        extra.append(f"one of: {', '.join(map(str, allowed))}")
    if meta.get("range"):
        extra.append(range_text(meta["range"]))
    return f"{meta.get('help', '')} ({'; '.join(extra)})"


def add_config_flags(p: argparse.ArgumentParser) -> None:
    """One flag per declared RunConfig/HParams field, defaulting to 'not given', in one
    argument group per section (`core.fields.GROUPS`); hyperparameters are marked
    vmappable. The fields in the parser's `hidden_options` (set by `make_parser` for
    `--help`: the options the run's own components would refuse) are parsed as usual but
    left out of the help."""
    hidden = getattr(p, "hidden_options", frozenset())
    p.usage = "%(prog)s [--config FILE] [--OPTION VALUE ...]  (options by section below)"
    groups = {name: p.add_argument_group(title) for name, title in GROUPS.items()}
    named = registries()

    def shown(f, text):
        return argparse.SUPPRESS if f.name in hidden else text

    for f in declarations(RunConfig):
        kw: dict[str, Any] = dict(default=argparse.SUPPRESS, dest=f.name,
                                  help=shown(f, _declared_help(f, named)))
        if f.type in ("bool", bool):
            kw["action"] = argparse.BooleanOptionalAction
        else:
            kw["type"] = _type_of(f)
            kw["metavar"] = f.name.upper()
        groups[f.metadata["group"]].add_argument(_flag(f.name), **kw)
    groups["appeal"].add_argument("--no-appeal", dest="appeal", action="store_const",
                                  const="off", default=argparse.SUPPRESS,
                                  help="same as --appeal off")
    for f in declarations(HParams):
        groups[f.metadata["group"]].add_argument(
            _flag(f.name), type=hp_float, default=argparse.SUPPRESS, dest=f.name,
            metavar="X", help=shown(f, f"{_declared_help(f, {})} [vmappable]"))
    add_tunable_flags(groups["algorithm"])
    p.add_argument("--config", default=None, metavar="FILE",
                   help="TOML or JSON file with the same keys as the flags")
    p.add_argument("--help-all", action="store_true", default=argparse.SUPPRESS,
                   help="list every option, also those this combination would refuse")
    if hidden:
        p.epilog = ((p.epilog + " ") if p.epilog else "") + (
            f"{len(hidden)} options that this combination ({hidden.describe}) would refuse "
            "are not listed; `--help-all` lists every option, `--algorithm NAME --help` "
            "(or --selector, --dataset, ...) the options of another combination.")


def add_tunable_flags(h: argparse._ArgumentGroup) -> None:
    """`--hp NAME=X` for any hyperparameter (each one also has its own `--NAME X`, from its
    declaration: `add_config_flags`)."""
    h.add_argument("--hp", action="append", default=argparse.SUPPRESS, metavar="NAME=X",
                   dest="hp", help="set a hyperparameter by name, a built-in one or a tunable "
                                   "a plugin registered (repeatable)")


def parse_hp_args(items: list[str]) -> dict[str, float]:
    """`--hp NAME=X` values -> {name: float}; one-line error for a bad item or name."""
    out: dict[str, float] = {}
    for item in items:
        name, eq, raw = item.partition("=")
        name = name.strip().replace("-", "_")
        if not eq or not name or not raw.strip():
            raise ConfigError(f"--hp {item!r}: write NAME=VALUE (e.g. --hp client_lr=0.1)")
        if name not in field_names(HParams):
            check_tunable(name, field_names(HParams))
        try:
            out[name] = hp_float(raw)
        except ValueError:
            raise ConfigError(f"--hp {item!r}: {raw.strip()!r} is not a number") from None
    return out


# Flags of the process, not of the simulation (never part of a RunConfig).
PROCESS_KEYS = ("coordinator_address", "num_processes", "process_id", "heartbeat_timeout",
                "overwrite", "cpu_devices")


def resolve(args: argparse.Namespace, base: dict[str, Any] | None = None
            ) -> tuple[RunConfig, HParams]:
    """(RunConfig, HParams) from defaults < `base` < config file < explicit flags."""
    values: dict[str, Any] = dict(base or {})
    if getattr(args, "config", None):
        values.update(load_config_file(args.config))
    values.update({k: v for k, v in vars(args).items()
                   if k not in ("config", "command", "func", "hp", *PROCESS_KEYS)})
    values.update(parse_hp_args(getattr(args, "hp", None) or []))
    run_kw, hp_kw = split_overrides(check_types(values))
    return RunConfig(**run_kw), HParams.make(**hp_kw)


def default_out(cfg: RunConfig) -> str:
    return str(Path("runs") / f"{cfg.algorithm}_{cfg.dataset.replace(':', '_').replace('/', '_')}"
               f"_s{cfg.seed}")


def given_keys(args: argparse.Namespace) -> set[str]:
    """Configuration keys the user gave (config file or flag), not defaults or --resume's."""
    keys = set(load_config_file(args.config)) if getattr(args, "config", None) else set()
    known = set(field_names(RunConfig)) | set(field_names(HParams))
    return (keys | {k for k in vars(args) if k in known}
            | set(parse_hp_args(getattr(args, "hp", None) or [])))

