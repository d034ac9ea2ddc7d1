"""Run configuration: the static options (`RunConfig`) and the vmappable ones (`HParams`).

Every option is declared once, by `core.fields.option` beside the component that reads it;
both records take and read them by name (`RunConfig(pfedme_k=3).pfedme_k`,
`HParams(qffl_q=2.0).qffl_q`), so a sweep over tunables is a `jax.vmap` over stacked
`HParams`. Declared here: the two learning rates every run has.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .errors import ConfigError, UndeclaredOption
from .fields import GROUPS, OPTIONS, RECORDS, Option, load_option_modules, option
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


def _static(names: Iterable[str], component: str) -> tuple[str, ...]:
    """`names` without repeats or tunables (which travel in `hp`), each a declared option."""
    names = tuple(dict.fromkeys(names))
    load_option_modules()  # a no-op once the package's option modules are imported
    unknown = [n for n in names if n not in OPTIONS]
    if unknown:
        raise ValueError(f"{component} declares unknown configuration field(s) "
                         f"{', '.join(map(repr, unknown))}")
    return tuple(n for n in names if not OPTIONS[n].tunable)


class Static:
    """Frozen values of static options (`RunConfig`, `Options`), compared and hashed by
    value; each declared static option is an attribute (`cfg.cohort`)."""

    __slots__ = ("_values",)

    def __setattr__(self, name: str, value: Any) -> None:
        raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and dict(self._values) == dict(other._values)

    def __hash__(self) -> int:
        return hash(tuple(sorted(self._values.items())))

    def __repr__(self) -> str:
        label = type(self).__name__ + (f"[{self._component}]" if isinstance(self, Options) else "")
        return f"{label}({', '.join(f'{k}={v!r}' for k, v in self._values.items())})"


class RunConfig(Static):
    """Static configuration of one simulation (fixes shapes and program structure): every
    declared static option by name, at its default unless given."""

    __slots__ = ()

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
        """The read-only `Options` of `component`: the options `names` of this configuration."""
        return Options(component, {n: self.get(n) for n in _static(names, component)})

    def __reduce__(self):
        return (functools.partial(RunConfig, **self._values), ())


class Options(Static):
    """The options one component reads, read-only (`RunConfig.view`): `opts.cohort` reads
    one of them; any other option raises `UndeclaredOption` naming it and the component.
    `opts.view(names, component)` narrows it to a sub-component's options."""

    __slots__ = ("_component",)

    def __init__(self, component: str, values: Mapping[str, Any]):
        object.__setattr__(self, "_component", component)
        object.__setattr__(self, "_values", MappingProxyType(dict(values)))

    def get(self, name: str) -> Any:
        if name not in self._values:
            raise UndeclaredOption(
                f"{self._component} reads the configuration field {name!r}, which it does not "
                f"declare (it declares: {', '.join(self._values) or 'none'})", name,
                self._component)
        return self._values[name]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self._values)

    @property
    def component(self) -> str:
        """The component the view was made for (named in errors)."""
        return self._component

    def as_dict(self) -> dict[str, Any]:
        return dict(self._values)

    def __contains__(self, name: str) -> bool:
        return name in self._values

    def view(self, names: Iterable[str], component: str) -> Options:
        """The narrower view of `component` (its options must all be in this one)."""
        names = _static(names, component)
        missing = [n for n in names if n not in self._values]
        if missing:
            raise UndeclaredOption(
                f"{component} reads {', '.join(map(repr, missing))}, which {self._component} "
                f"(whose options it is given) does not declare", missing[0], component)
        return Options(component, {n: self._values[n] for n in names})

    def replace(self, **kw: Any) -> Options:
        """A copy with some of its options changed."""
        for k in kw:
            self.get(k)
        return Options(self._component, {**self._values, **kw})

    def __reduce__(self):
        return (Options, (self._component, dict(self._values)))


@jax.tree_util.register_pytree_node_class
class HParams:
    """Tunable scalars of a run, one pytree; vmap over it to sweep. Takes and reads every
    declared tunable by name (`HParams(qffl_q=2.0)`, `hp.qffl_q`: its value, else its
    default); `extra=` takes a dict of them unchecked (validation refuses unknown names).
    `as_arrays` gives every tunable as a float32 leaf, so any two stack."""

    __slots__ = ("_values",)
    __setattr__ = Static.__setattr__
    __hash__ = None

    def __init__(self, extra: Mapping[str, Any] | None = None, **values: Any):
        _check_names(values, True, "HParams")
        object.__setattr__(self, "_values", {**(extra or {}), **values})

    @property
    def extra(self) -> dict[str, Any]:
        """The given tunables that components declare (all but the two learning rates)."""
        return {k: v for k, v in self._values.items() if k not in ("client_lr", "server_lr")}

    def given(self) -> dict[str, Any]:
        """The values given to this `HParams` (by name, in `extra` or filled by
        `as_arrays`), as they are: nothing is filled in or converted."""
        return dict(self._values)

    def get(self, name: str) -> Any:
        """A hyperparameter by name (works on traced and stacked HParams)."""
        if name in self._values:
            return self._values[name]
        check_tunable(name, field_names(HParams))
        return OPTIONS[name].default

    def replace(self, extra: Mapping[str, Any] | None = None, **values: Any) -> HParams:
        """A copy with `values` changed; `extra=` replaces all but the learning rates."""
        lrs = {k: v for k, v in self._values.items() if k in ("client_lr", "server_lr")}
        return HParams(self._values if extra is None else {**lrs, **extra}, **values)

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

    def __eq__(self, other: object) -> bool:
        return type(other) is HParams and self.to_dict() == other.to_dict()

    def __repr__(self) -> str:
        return f"HParams({', '.join(f'{k}={v!r}' for k, v in self._values.items())})"


def _f32(v) -> jax.Array:
    """A float32 array of `v` (host numbers transferred, arrays and tracers converted)."""
    if isinstance(v, jax.Array):
        return jnp.asarray(v, jnp.float32)
    return jax.device_put(np.asarray(v, np.float32))


RECORDS.update({False: Static, True: HParams})
option("client_lr", 0.05, "client (local) SGD learning rate", tunable=True,
       group="federation", gt=0)
option("server_lr", 1.0, "server learning rate", tunable=True, group="federation", gt=0)


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


def split_overrides(values: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Split a flat dict of keys into (RunConfig kwargs, HParams kwargs)."""
    run_keys, hp_keys = set(field_names(RunConfig)), set(field_names(HParams))
    return ({k: v for k, v in values.items() if k in run_keys},
            {k: v for k, v in values.items() if k in hp_keys})
