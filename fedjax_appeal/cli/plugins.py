"""`--plugin MODULE` (and a config file's `plugin = [...]`): the modules imported before
the parser is built, so that the components they register can be named."""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from pathlib import Path

from ..core.config import ConfigError
from ..run.schema import read_config_raw


def plugin_names(argv: list[str]) -> list[str]:
    """Modules named by --plugin flags and by the `plugin` key of a --config file."""
    names, it = [], iter(argv)
    config = None
    for a in it:
        if a in ("--plugin", "--config"):
            v = next(it, None)
            if v is not None:
                names, config = ((names + [v], config) if a == "--plugin" else (names, v))
        elif a.startswith("--plugin="):
            names.append(a.split("=", 1)[1])
        elif a.startswith("--config="):
            config = a.split("=", 1)[1]
    if config:
        try:  # keys unchecked: the plugins register some of them (tunables)
            from_file = read_config_raw(config).get("plugin", [])
        except ConfigError:
            from_file = []  # the config file's own error is reported when it is read again
        names = ([from_file] if isinstance(from_file, str) else list(from_file)) + names
    return names


def load_plugins(names: list[str]) -> None:
    """Import each plugin module (a module name on the path or in the working folder, or a
    .py file), so that its registrations reach the parser, validation and `list`."""
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    for name in names:
        try:
            if name.endswith(".py") or os.sep in name:
                path = Path(name)
                if not path.is_file():
                    raise ConfigError(f"--plugin {name}: no such file")
                spec = importlib.util.spec_from_file_location(f"fedjax_plugin_{path.stem}",
                                                              path)
                mod = importlib.util.module_from_spec(spec)
                sys.modules[spec.name] = mod
                spec.loader.exec_module(mod)
            else:
                importlib.import_module(name)
        except ConfigError:
            raise
        except Exception as e:  # noqa: BLE001 - any failure of user code is one line
            raise ConfigError(f"--plugin {name}: importing it failed ({type(e).__name__}: "
                              f"{e}); pass an importable module name or a .py file") from None

