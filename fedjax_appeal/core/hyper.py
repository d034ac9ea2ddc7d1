"""The hyperparameters of a library-built algorithm in the vmappable `HParams` pytree.

An algorithm built by a factory of `fedjax_appeal.algorithms.library` (`fedavg(model,
optax.sgd(0.05), ...)`) names each of its hyperparameters by a dotted key
"<part>.<name>":

  * "client.<name>", "server.<name>": a numeric hyperparameter of the client or server
    optimizer, when that optimizer was made with `optax.inject_hyperparams` (e.g.
    `optax.inject_hyperparams(optax.sgd)(learning_rate=0.05, momentum=0.9)` has
    "client.learning_rate" and "client.momentum"); a plain optax transformation has none;
  * the algorithm's and its parts' own: "fedprox.mu", "maxfl.eps", "maxfl.solo_lr",
    "exp_alpha.alpha", "subtrunc.lambda", "subtrunc.b", "unionfl.mu".

The value given to the factory is the run's value, a constant of the compiled program. When
the `HParams` passed to `simulate` (or `simulate_grid`) hold the key in `extra`, the value
there is used instead: it is part of the pytree, so a grid of values is a `jax.vmap` over
stacked `HParams` and runs as one compiled program. A dotted key can never be a declared
tunable (those are identifiers), so `HParams.as_arrays`, which fills every declared tunable
with its default, never fills one: a key is in `extra` only if the caller put it there. A
dotted key the algorithm does not have is refused in one line, so a typo is never ignored.

Parts of the package that a library algorithm reuses read their hyperparameter under its
`HParams` name (`hp.exp_alpha`, `hp.maxfl_eps`, `hp.subtrunc_lambda`, ...): each `Hyper`
names that `target`, and `resolve` sets it from the dotted key (or the factory's value) for
the duration of a call.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

import jax
import numpy as np
import optax

from .config import HParams
from .errors import ConfigError
from .registry import did_you_mean


class Hyper(NamedTuple):
    """One hyperparameter of a library algorithm.

    key: its dotted key in `HParams.extra` ("fedprox.mu").
    value: the factory's value, used when `HParams.extra` lacks the key.
    target: the `HParams` tunable a reused part of the package reads it as ("prox_mu"), or
      "" when only the library's own code reads it (by `value_of`).
    """

    key: str
    value: float
    target: str = ""


def value_of(hp: HParams, key: str, value: float) -> Any:
    """The value of hyperparameter `key`: `hp.extra[key]` when present, else `value`."""
    return hp.extra[key] if key in hp.extra else value


def check_keys(hp: HParams, known: Iterable[str], what: str) -> None:
    """Refuse, in one line, a dotted key of `hp.extra` that is not in `known` (the keys of
    algorithm `what`)."""
    known = sorted(set(known))
    unknown = [k for k in hp.extra if "." in k and k not in known]
    if unknown:
        guess = did_you_mean(unknown[0], known)
        raise ConfigError(
            f"hyperparameter '{unknown[0]}' is not one of {what}'s ("
            f"{', '.join(known) or 'it has none'})"
            + (f"; did you mean '{guess}'?" if guess else "")
            + ("; an optimizer's hyperparameters are keys only when it is made with "
               "optax.inject_hyperparams" if unknown[0].split(".")[0] in ("client", "server")
               else ""))


def _is_rate(key: str) -> bool:
    name = key.rsplit(".", 1)[-1]
    return name == "learning_rate" or name.endswith("_lr")


def check_hparams(hp: HParams, hypers: Iterable[Hyper], keys: Iterable[str], what: str,
                  optimizers: Mapping[str, bool] | None = None) -> None:
    """Refuse, in one line, `HParams` that algorithm `what` (built by a library factory)
    would not read as given: a dotted key it does not have (`check_keys`), a negative
    learning rate under a dotted key, or an `HParams` field ("client_lr", "exp_alpha", ...)
    given a value other than its default. Such an algorithm reads its hyperparameters from
    its factory's arguments and from dotted keys only (the fields of a part it reuses are
    set from those, `resolve`), so a field would be silently ignored; the message names the
    dotted key or the optimizer that sets it instead.

    Args:
      hp: the caller's hyperparameters (host values, one run; not yet `as_arrays`).
      hypers, keys: the algorithm's `Hyper`s and its other dotted keys (an optimizer's).
      what: the algorithm's name, for messages.
      optimizers: {"client": has a client optimizer, "server": has a server optimizer}:
        where a learning-rate field is refused, whether to point at the optimizer.
    """
    hypers = tuple(hypers)
    known = (*keys, *(h.key for h in hypers))
    check_keys(hp, known, what)
    by_target = {h.target: h.key for h in hypers if h.target}
    defaults = HParams()
    for name, value in hp.given().items():
        v = np.asarray(value, np.float32)
        if "." in name:
            if _is_rate(name) and np.any(v < 0):
                raise ConfigError(f"hyperparameter '{name}' must be >= 0 (got "
                                  f"{value!r}): give a non-negative learning rate")
            continue
        try:
            default = np.float32(defaults.get(name))
        except ConfigError:
            default = None
        if default is not None and not np.any(v != default):
            continue  # its default (as `as_arrays` fills it): not a value that was asked for
        shown = value if v.ndim == 0 else f"{v.tolist()}"
        ignored = f"{what} would ignore HParams field {name}={shown}"
        if name in by_target:
            raise ConfigError(f"{ignored}; it reads that value from the dotted key "
                              f"'{by_target[name]}': give HParams(extra={{'{by_target[name]}': "
                              f"{shown}}}) or set it in the factory")
        part = {"client_lr": "client", "server_lr": "server"}.get(name)
        if part is not None and (optimizers or {}).get(part, False):
            key = f"{part}.learning_rate"
            how = (f"give HParams(extra={{'{key}': {shown}}})" if key in known else
                   f"set it in {part}_optimizer, e.g. optax.sgd({shown}); to vary it in "
                   f"HParams, make that optimizer with optax.inject_hyperparams(optax.sgd)"
                   f"(learning_rate=...) and give extra={{'{key}': ...}}")
            raise ConfigError(f"{ignored}: its {part} learning rate is its {part}_optimizer's; "
                              f"{how}")
        raise ConfigError(f"{ignored}: it has no such hyperparameter (its dotted keys: "
                          f"{', '.join(sorted(set(known))) or 'none'})")


def resolve(hp: HParams, hypers: Iterable[Hyper]) -> HParams:
    """`hp` with the `target` of each hyperparameter set to its value (`value_of`), so that
    the package's parts read it under their own name."""
    targets = {h.target: value_of(hp, h.key, h.value) for h in hypers if h.target}
    if not targets:
        return hp
    return hp.replace(extra={**hp.extra, **targets})


# --- optimizers made with optax.inject_hyperparams ---------------------------------------

def _inject_states(state) -> list:
    """The `inject_hyperparams` states in an optimizer state: the state itself, or the
    members of a chain (a tuple of states), searched depth first."""
    if hasattr(state, "hyperparams") and hasattr(state, "hyperparams_states"):
        return [state]
    if isinstance(state, tuple) and not hasattr(state, "_fields"):
        return [s for member in state for s in _inject_states(member)]
    return []


def injected(tx: optax.GradientTransformation) -> tuple[str, ...]:
    """The names of the numeric hyperparameters an optimizer made with
    `optax.inject_hyperparams` keeps in its state (those given a schedule excluded: the
    schedule sets them every step); () for a plain optax transformation. Found from the
    shapes of its state (`jax.eval_shape`): nothing is computed."""
    try:
        state = jax.eval_shape(tx.init, {"w": jax.ShapeDtypeStruct((1,), "float32")})
    except Exception:  # noqa: BLE001 - an optimizer whose state needs real parameters
        return ()
    names: list[str] = []
    for s in _inject_states(state):
        names += [k for k in s.hyperparams if k not in s.hyperparams_states
                  and getattr(s.hyperparams[k], "shape", None) == ()]
    return tuple(dict.fromkeys(names))


def _with_values(state, values: Mapping[str, Any]):
    if hasattr(state, "hyperparams") and hasattr(state, "hyperparams_states"):
        hps = dict(state.hyperparams)
        for k, v in values.items():
            if k in hps and k not in state.hyperparams_states:
                hps[k] = jax.numpy.asarray(v, hps[k].dtype)
        return state._replace(hyperparams=hps)
    if isinstance(state, tuple) and not hasattr(state, "_fields"):
        return tuple(_with_values(s, values) for s in state)
    return state


def optimizer_keys(tx: optax.GradientTransformation, part: str) -> tuple[str, ...]:
    """The dotted keys of `tx`'s injected hyperparameters: "<part>.<name>"."""
    return tuple(f"{part}.{name}" for name in injected(tx))


def with_hparams(tx: optax.GradientTransformation, hp: HParams, part: str
                 ) -> optax.GradientTransformation:
    """`tx` whose injected hyperparameters come from `hp.extra["<part>.<name>"]` where present
    (set in the state that `init` returns; `inject_hyperparams`' update reads them from
    there), else keep the values `tx` was made with. A plain transformation is returned as
    it is."""
    values = {k.split(".", 1)[1]: hp.extra[k] for k in optimizer_keys(tx, part)
              if k in hp.extra}
    if not values:
        return tx

    def init(params):
        return _with_values(tx.init(params), values)

    return optax.GradientTransformationExtraArgs(init, tx.update)
