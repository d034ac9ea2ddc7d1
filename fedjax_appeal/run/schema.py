"""Values against their declarations: config files, types, choices and ranges.

Every check reads the option's declaration (`core.fields.option`): its type (strictly: an
int option takes an int only, never a truncated 4.7), its `choices`, its range (`ge`, `gt`,
`le`, `lt`) and `hint`. Config files (TOML or JSON) take the keys of `RunConfig` and
`HParams` with dashes or underscores; each refusal is one line naming the key or flag.
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..core.config import SEED_LIMIT, ConfigError, HParams, RunConfig, declarations, field_names
from ..core.fields import OPTIONS, in_range
from ..core.registry import Registry, did_you_mean


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
