"""Run configuration: the static options (`RunConfig`) and the vmappable ones (`HParams`).

Every option is declared once, by `option(...)` (`core.fields`) in the file of the
component that reads it: what fixes array shapes or program structure (dataset, model,
cohort, local steps, ...) is static and a key of `RunConfig`; a scalar that only enters
arithmetic (learning rates, FedProx mu, Exp-alpha alpha, ...) is declared `tunable=True`
and lives in the `HParams` pytree, so a sweep over it is a `jax.vmap` over stacked
`HParams`. Both records take and read every declared option by name
(`RunConfig(pfedme_k=3).pfedme_k`, `HParams(qffl_q=2.0).qffl_q`). Declared here: the
keys of the run itself (rounds, schedule, seed, output) and the two learning rates.
"""

from __future__ import annotations

import dataclasses
import json
import tomllib
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .errors import ConfigError, UndeclaredOption
from .fields import OPTIONS, RECORDS, Option, in_range, load_option_modules, option
from .groups import GROUPS
from .registry import Registry, did_you_mean
from .tunables import check_tunable

__all__ = ["GROUPS", "ConfigError", "HParams", "Options", "Registry", "RunConfig"]
SEED_LIMIT = 2 ** 63  # seeds are non-negative int64 values (jax.random.key)


def _check_names(names: Iterable[str], tunable: bool, record: str) -> None:
    load_option_modules()  # every option is an attribute of its record from the start
    for k in names:
        if tunable:
            check_tunable(k, field_names(HParams))
        elif k not in OPTIONS or OPTIONS[k].tunable:
            guess = did_you_mean(k, field_names(RunConfig))
            raise TypeError(f"{record} got an unexpected option {k!r}"
                            + (f"; did you mean {guess!r}?" if guess else ""))


class RunConfig:
    """Static configuration of one simulation (fixes shapes and program structure): every
    declared static option by name, at its default unless given. Frozen, hashable, and
    equal when the given values are."""

    __slots__ = ("_values",)

    def __init__(self, **values: Any):
        _check_names(values, False, "RunConfig")
        given = {k: v for k, v in sorted(values.items())
                 if not (type(v) is type(OPTIONS[k].default) and v == OPTIONS[k].default)}
        object.__setattr__(self, "_values", MappingProxyType(given))

    def get(self, name: str) -> Any:
        """The value of option `name` (its default unless given)."""
        return self._values[name] if name in self._values else OPTIONS[name].default

    def replace(self, **kw: Any) -> RunConfig:
        return RunConfig(**{**self._values, **kw})

    def as_dict(self) -> dict[str, Any]:
        """Every key of the configuration and its value (results.json's `config`)."""
        return {name: self.get(name) for name in field_names(RunConfig)}

    def view(self, names: Iterable[str], component: str) -> Options:
        """The read-only `Options` of `component`: the options `names` of this configuration
        (every other one raises `UndeclaredOption` naming it and the component)."""
        return Options(component, {n: self.get(n) for n in _static(names, component)})

    def __setattr__(self, name: str, value: Any) -> None:
        raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")

    def __eq__(self, other: object) -> bool:
        return type(other) is RunConfig and self._values == other._values

    def __hash__(self) -> int:
        return hash(tuple(self._values.items()))

    def __reduce__(self):
        return (_run_config, (dict(self._values),))

    def __repr__(self) -> str:
        return f"RunConfig({', '.join(f'{k}={v!r}' for k, v in self._values.items())})"


def _run_config(values: dict[str, Any]) -> RunConfig:
    return RunConfig(**values)


@jax.tree_util.register_pytree_node_class
class HParams:
    """Tunable scalars of a run, one pytree; vmap over it to sweep.

    Takes and reads every declared tunable by name (`HParams(qffl_q=2.0)`, `hp.qffl_q`,
    `hp.get("qffl_q")`: its value, else its declared default); `extra=` takes a dict of
    them unchecked (validation refuses unknown names). `as_arrays` gives every tunable as
    a float32 leaf, so HParams made with different tunables set still stack.
    """

    __slots__ = ("_values",)

    def __init__(self, extra: Mapping[str, Any] | None = None, **values: Any):
        _check_names(values, True, "HParams")
        object.__setattr__(self, "_values", {**(extra or {}), **values})

    @property
    def extra(self) -> dict[str, Any]:
        """The given tunables that components declare (all but the two learning rates)."""
        return {k: v for k, v in self._values.items() if k not in ("client_lr", "server_lr")}

    def get(self, name: str) -> Any:
        """A hyperparameter by name (works on traced and stacked HParams)."""
        if name in self._values:
            return self._values[name]
        check_tunable(name, field_names(HParams))
        return OPTIONS[name].default

    def replace(self, **values: Any) -> HParams:
        return HParams(self._values, **values)

    with_values = replace

    @classmethod
    def make(cls, **values: Any) -> HParams:
        return cls(**values)

    def to_dict(self, fill: bool = True) -> dict[str, float]:
        """Every hyperparameter by name as a float: the learning rates and the given
        tunables, with `fill` every declared one (its default unless given)."""
        names = [n for n in field_names(HParams)
                 if fill or n in self._values or n in ("client_lr", "server_lr")]
        return {n: float(self.get(n)) for n in [*names, *(k for k in self._values
                                                           if k not in names)]}

    def as_arrays(self) -> HParams:
        """Every declared tunable as a float32 array (traceable, stackable)."""
        return HParams({n: _f32(self.get(n)) for n in
                        sorted({*field_names(HParams), *self._values})})

    def tree_flatten(self):
        return (dict(self._values),), None

    @classmethod
    def tree_unflatten(cls, aux, children) -> HParams:
        hp = object.__new__(cls)
        object.__setattr__(hp, "_values", children[0])
        return hp

    def __setattr__(self, name: str, value: Any) -> None:
        raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")

    def __eq__(self, other: object) -> bool:
        return type(other) is HParams and self.to_dict() == other.to_dict()

    __hash__ = None

    def __repr__(self) -> str:
        return f"HParams({', '.join(f'{k}={v!r}' for k, v in self._values.items())})"


def _f32(v) -> jax.Array:
    """A float32 array of `v` (host numbers transferred, arrays and tracers converted)."""
    if isinstance(v, jax.Array):
        return jnp.asarray(v, jnp.float32)
    return jax.device_put(np.asarray(v, np.float32))


RECORDS.update({False: RunConfig, True: HParams})

option("client_lr", 0.05, "client (local) SGD learning rate", tunable=True,
       group="federation", gt=0)
option("server_lr", 1.0, "server learning rate applied to the pseudo-gradient", tunable=True,
       group="federation", gt=0)
option("rounds", 200, "communication rounds", group="federation", ge=1,
       hint="a run trains at least one round; to only evaluate the initial model use --rounds 1")
option("eval_every", 10, "evaluate all clients every this many rounds", group="output", ge=1,
       hint="to evaluate only at the start and the end use --eval-every equal to --rounds")
option("seed", 0, "random seed (training; also the data unless --data-seed is given)",
       group="output", ge=0, lt=SEED_LIMIT, data=True)
option("out", "", "output directory (results.json, history.csv, accuracy.png)", group="output",
       shown="runs/ALGORITHM_DATASET_sSEED; a sweep: runs/sweep_ALGORITHM_DATASET")
option("checkpoint_every", 0, "save a checkpoint into --out every this many rounds (0 = only "
       "when interrupted with Ctrl-C)", group="scale", ge=0)
option("resume", "", "continue the run whose checkpoint is in this folder", group="scale")
option("log", "", "experiment trackers, comma-separated: tensorboard (event files in "
       "OUT/tensorboard), wandb (WANDB_MODE=offline keeps it on disk)", group="tracking")


def _static(names: Iterable[str], component: str) -> tuple[str, ...]:
    """`names` without repeats or tunables (which travel in `hp`), each a declared option."""
    names = tuple(dict.fromkeys(names))
    if any(n not in OPTIONS for n in names):
        load_option_modules()
    unknown = [n for n in names if n not in OPTIONS]
    if unknown:
        raise ValueError(f"{component} declares unknown configuration field(s) "
                         f"{', '.join(map(repr, unknown))}")
    return tuple(n for n in names if not OPTIONS[n].tunable)


class Options:
    """The configuration options one component reads, read-only (`RunConfig.view`).

    A component (a weight rule, a selector, an algorithm's builder, the data layer, ...)
    receives this view of the options it reads instead of the whole configuration:
    `opts.cohort` reads one of them, any other option raises `UndeclaredOption` naming it
    and the component. Views compare and hash by their values (they key caches);
    `opts.view(names, component)` narrows a view to a sub-component's options.
    """

    __slots__ = ("_component", "_values")

    def __init__(self, component: str, values: Mapping[str, Any]):
        object.__setattr__(self, "_component", component)
        object.__setattr__(self, "_values", MappingProxyType(dict(values)))

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in ("_component", "_values"):
            raise AttributeError(name)
        values = object.__getattribute__(self, "_values")
        if name in values:
            return values[name]
        component = object.__getattribute__(self, "_component")
        if name in OPTIONS:
            raise UndeclaredOption(
                f"{component} reads the configuration field {name!r}, which it does not "
                f"declare (it declares: {', '.join(values) or 'none'})", name)
        raise AttributeError(f"the options of {component} have no field {name!r}")

    def __setattr__(self, name: str, value: Any) -> None:
        raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r} (options "
                                              f"of {self._component} are read-only)")

    def __reduce__(self):
        return (Options, (self._component, dict(self._values)))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Options) and dict(self._values) == dict(other._values)

    def __hash__(self) -> int:
        return hash(tuple(sorted(self._values.items())))

    def __contains__(self, name: str) -> bool:
        return name in self._values

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}={v!r}" for k, v in self._values.items())
        return f"Options[{self._component}]({inner})"

    @property
    def names(self) -> tuple[str, ...]:
        """The declared options."""
        return tuple(self._values)

    @property
    def component(self) -> str:
        """The component the view was made for (named in errors)."""
        return self._component

    def as_dict(self) -> dict[str, Any]:
        return dict(self._values)

    def get(self, name: str) -> Any:
        return getattr(self, name)

    def view(self, names: Iterable[str], component: str) -> Options:
        """The narrower view of `component` (its options must all be in this one)."""
        names = _static(names, component)
        missing = [n for n in names if n not in self._values]
        if missing:
            raise UndeclaredOption(
                f"{component} reads {', '.join(map(repr, missing))}, which {self._component} "
                f"(whose options it is given) does not declare", missing[0])
        return Options(component, {n: self._values[n] for n in names})

    def replace(self, **kw: Any) -> Options:
        """A copy with some declared options changed."""
        for k in kw:
            getattr(self, k)  # undeclared -> UndeclaredOption
        return Options(self._component, {**self._values, **kw})


def data_seed(opts: RunConfig | Options) -> int:
    """The seed of a run's data (`--data-seed`, or `--seed` when that is -1)."""
    return opts.seed if opts.data_seed < 0 else opts.data_seed


def declarations(cls) -> list[Option]:
    """The declared options of `RunConfig` (static) or `HParams` (tunable), in order."""
    load_option_modules()
    return [o for o in OPTIONS.values() if o.tunable is (cls is HParams)]


def field_names(cls) -> list[str]:
    """The configuration keys of `RunConfig` or `HParams`."""
    return [o.name for o in declarations(cls)]


def fields_in(*groups: str) -> tuple[str, ...]:
    """The static options of the given `--help` sections (`GROUPS`) declared so far."""
    for g in groups:
        if g not in GROUPS:
            raise ValueError(f"unknown configuration group {g!r}")
    return tuple(n for n, o in OPTIONS.items() if not o.tunable and o.group in groups)


def data_fields() -> tuple[str, ...]:
    """The static options that change a run's data (runs equal in them share the data)."""
    return tuple(o.name for o in declarations(RunConfig) if o.data)


def data_options(cfg: RunConfig | Options, component: str = "the data layer") -> Options:
    """The read-only view of `cfg`'s data options that the data layer receives."""
    return cfg.view(data_fields(), component)


def split_overrides(values: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Split a flat dict of keys into (RunConfig kwargs, HParams kwargs)."""
    run_keys, hp_keys = set(field_names(RunConfig)), set(field_names(HParams))
    return ({k: v for k, v in values.items() if k in run_keys},
            {k: v for k, v in values.items() if k in hp_keys})


def load_config_file(path: str | Path) -> dict[str, Any]:
    """Read a TOML or JSON file of `RunConfig`/`HParams` keys (dashes or underscores)."""
    p = Path(path)
    known = set(field_names(RunConfig)) | set(field_names(HParams)) | {"plugin"}
    out = {}
    for k, v in read_config_raw(p).items():
        key = k.replace("-", "_")
        if key not in known:
            guess = did_you_mean(key, sorted(known))
            raise ConfigError(f"config file {p}: unknown key '{k}'"
                              + (f"; did you mean '{guess}'?" if guess else ""))
        out[key] = v
    out = check_types(out, f"config file {p}")
    for k, v in out.items():
        err = declared_error(k, v, OPTIONS[k].metadata, OPTIONS[k].type) if k in OPTIONS \
            else None
        if err:
            raise ConfigError(f"config file {p}: {err}")
    return out


def read_config_raw(path: str | Path) -> dict[str, Any]:
    """The table of a TOML or JSON config file, keys unchecked (its `plugin` key is read
    before the plugins' options are declared)."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
        raw = json.loads(text) if p.suffix.lower() == ".json" else tomllib.loads(text)
    except OSError as e:
        raise ConfigError(f"cannot read config file {p}: {e.strerror}") from None
    except UnicodeDecodeError as e:
        raise ConfigError(f"config file {p} is not UTF-8 text (byte 0x{e.object[e.start]:02x} at "
                          f"position {e.start}): save it as UTF-8") from None
    except (json.JSONDecodeError, tomllib.TOMLDecodeError) as e:
        raise ConfigError(f"config file {p} is not valid {p.suffix[1:] or 'TOML'}: {e}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"config file {p} must hold a table/object of keys")
    return raw


_KINDS = {"int": "an integer (e.g. 10)", "float": "a number (e.g. 0.1)", "bool": "true or false",
          "str": "a string"}


def _type_ok(kind: str, v: Any) -> bool:
    return {"int": isinstance(v, int) and not isinstance(v, bool),
            "float": isinstance(v, int | float) and not isinstance(v, bool),
            "bool": isinstance(v, bool), "str": isinstance(v, str)}.get(kind, True)


def check_types(values: dict[str, Any], source: str = "configuration") -> dict[str, Any]:
    """`values` with each key's value checked against its option's type (strictly: an int
    option takes an int only, never a truncated 4.7; a float one an int or a float)."""
    out = {}
    for k, v in values.items():
        if k not in OPTIONS or k == "plugin":
            out[k] = v
            continue
        kind = OPTIONS[k].type
        if k == "solo_lr" and isinstance(v, str) and v.strip().lower() == "same":
            v = 0.0  # the client lr of the run (see solo_lr)
        if k == "appeal" and isinstance(v, bool):  # appeal = true / false
            v = "on" if v else "off"
        if k == "appeal" and v not in ("auto", "on", "off"):
            guess = did_you_mean(v, ("auto", "on", "off"))
            raise ConfigError(f"{source}: key 'appeal' must be on, off or auto (or true / "
                              f"false), got {v!r}" + (f"; did you mean '{guess}'?" if guess
                                                      else ""))
        if not _type_ok(kind, v):
            want = {**_KINDS, "str": "a string in quotes"}[kind]
            extra = (f"; {v} is not an integer and is not rounded" if kind == "int"
                     and isinstance(v, float) else "")
            raise ConfigError(f"{source}: key '{k}' must be {want}, got {v!r} "
                              f"({type(v).__name__}){extra}")
        out[k] = float(v) if kind == "float" else v
    return out


def range_text(rng: Mapping[str, Any]) -> str:
    """The declared range in words: ">= 1", "> 0", "in [0, 1]", "in (0, 1)", ..."""
    lo = ("[", rng["ge"]) if "ge" in rng else ("(", rng["gt"]) if "gt" in rng else None
    hi = ("]", rng["le"]) if "le" in rng else (")", rng["lt"]) if "lt" in rng else None

    def num(v) -> str:
        return "2^63" if v == SEED_LIMIT else f"{v:g}"

    if lo and hi:
        return f"in {lo[0]}{num(lo[1])}, {num(hi[1])}{hi[0]}"
    if lo:
        return f"{'>=' if lo[0] == '[' else '>'} {num(lo[1])}"
    return f"{'<=' if hi[0] == ']' else '<'} {num(hi[1])}"


def declared_error(name: str, value: Any, meta: Mapping[str, Any], kind: str) -> str | None:
    """The one-line refusal of `value` for the declared option `name`, or None if it is
    allowed (type, choices, range; registry names are checked by the run layer)."""
    flag = "--" + name.replace("_", "-")
    if name == "appeal" and isinstance(value, bool):  # RunConfig(appeal=True) from Python
        return None
    if not _type_ok(kind, value):
        return f"{flag} must be {_KINDS[kind]}, got {value!r} ({type(value).__name__})"
    choices = meta.get("choices")
    if isinstance(choices, tuple) and value not in choices:
        guess = did_you_mean(value, choices)
        return (f"{flag} must be one of: {', '.join(map(str, choices))} (got {value!r})"
                + (f"; did you mean '{guess}'?" if guess else ""))
    if isinstance(choices, Registry) and not any(str(value).startswith(p)
                                                 for p in meta.get("prefixes", ())):
        try:
            choices.check(value)
        except ConfigError as e:
            return str(e)
    rng = meta.get("range") or {}
    if rng and kind in ("int", "float") and not in_range(float(value), rng.items()):
        hint = f"; {meta['hint']}" if meta.get("hint") else ""
        return f"{flag} must be {range_text(rng)} (got {value}){hint}"
    return None


def check_declared(cfg: RunConfig, hp: HParams | None = None) -> None:
    """Raise `ConfigError` for the first option of `cfg` (and `hp`) outside its declaration."""
    for o in declarations(RunConfig):
        err = declared_error(o.name, cfg.get(o.name), o.metadata, o.type)
        if err:
            raise ConfigError(err)
    for o in declarations(HParams) if hp is not None else ():
        err = declared_error(o.name, float(hp.get(o.name)), o.metadata, "float")
        if err:
            raise ConfigError(err)
