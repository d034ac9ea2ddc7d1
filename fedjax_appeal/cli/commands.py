"""Command-line interface: `fedjax-appeal run|list|install-data|compare|sweep ...`.

The table of subcommands (`SUBCOMMANDS`, each in its own module: `run`, `listing`,
`install_data`, `compare`, `sweep`; further ones from the entry-point group
`fedjax_appeal.commands`), the parser and `main`. The flags of `run` are generated from the
fields of `RunConfig` and `HParams` (`client_lr` -> `--client-lr`), plus one flag per
tunable a plugin registered and `--hp NAME=X` for any hyperparameter; `--config FILE` (TOML
or JSON) takes the same keys (`options`). Precedence: defaults < config file < flags given
on the command line. Bad input prints one line `fedjax-appeal: error: ...` and exits with
code 2 before anything is written.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import signal
import sys
import time
from collections.abc import Callable
from typing import NamedTuple

from ..core.config import ConfigError, HParams, RunConfig, declarations
from ..core.registry import did_you_mean
from ..execute.distributed import is_peer_failure
from ..execute.runtime import CompileLog, out_of_memory, out_of_memory_message
from ..run.validate import ignored_reason
from ..run.wallclock import CommandClock
from .options import example_value, hp_float, resolve
from .plugins import load_plugins, plugin_names
from .process import (
    add_runtime_flags,
    peer_failed,
    prepare_runtime,
    start_processes,
    stop_on_signals,
)

EXIT_USAGE = 2
EXIT_OUT_OF_MEMORY = 1


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, exit 2
        print(f"fedjax-appeal: error: {message}", file=sys.stderr)
        raise SystemExit(EXIT_USAGE)

    def _check_value(self, action, value):
        """A value outside an option's `choices` is refused with the closest choice."""
        if action.choices is not None and value not in action.choices:
            choices = [str(c) for c in action.choices]
            guess = did_you_mean(value, choices)
            raise argparse.ArgumentError(
                action, f"invalid choice: {value!r}; "
                + (f"did you mean '{guess}'? " if guess else "")
                + f"choose from {', '.join(choices)}")

    def _get_value(self, action, arg_string):
        """A value that is not of the flag's type is refused naming the type and an
        example (the flag's default where it has one): `--rounds ten` says "invalid int
        value: 'ten'; give an integer, e.g. --rounds 200"."""
        try:
            return super()._get_value(action, arg_string)
        except argparse.ArgumentError:
            kind = {int: ("int", "an integer"), float: ("float", "a number"),
                    hp_float: ("float", "a number")}.get(action.type)
            if kind is None or not action.option_strings:
                raise
            flag = action.option_strings[-1]
            raise argparse.ArgumentError(
                action, f"invalid {kind[0]} value: {arg_string!r}; give {kind[1]}, e.g. "
                f"{flag} {example_value(action, 10 if action.type is int else 0.05)}") from None


class Subcommand(NamedTuple):
    """A subcommand: `configure(parser)` adds its arguments, `run(args)` returns the exit
    status; `listings` adds lines to `fedjax-appeal list` (label -> function giving names);
    `computes`: the command runs JAX programs, so it gets `--compile-cache` and
    `--deterministic` (`add_runtime_flags`), set up before JAX starts, and `args.clock`
    (a `run.wallclock.CommandClock`: the command's start and its `CompileLog`)."""

    configure: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]
    help: str
    listings: dict[str, Callable[[], list[str]]] | None = None
    computes: bool = True


# The library's subcommands, in `--help` order: "module:function", the module imported when
# the parser is built and `function()` returning its Subcommand (as for the entry-point
# group below: the modules import this one).
SUBCOMMANDS: dict[str, Subcommand | str] = {
    "run": "fedjax_appeal.cli.run:subcommand",
    "list": "fedjax_appeal.cli.listing:subcommand",
    "install-data": "fedjax_appeal.cli.install_data:subcommand",
    "compare": "fedjax_appeal.cli.compare:subcommand",
    "sweep": "fedjax_appeal.cli.sweep:subcommand",
}


# Entry-point group of further subcommands (a package's `[project.entry-points]`): the
# entry point's name is the subcommand, its value a function returning a Subcommand.
ENTRY_POINT_GROUP = "fedjax_appeal.commands"


def _resolve_ref(ref: str) -> Subcommand:
    module, _, attr = ref.partition(":")
    return getattr(importlib.import_module(module), attr)()


def _plugin_commands() -> dict[str, Subcommand]:
    """The subcommands of the entry-point group; one that fails to load or to add its
    arguments to a parser (or names a built-in command) is left out with one line on
    stderr."""
    out: dict[str, Subcommand] = {}
    for ep in sorted(importlib.metadata.entry_points(group=ENTRY_POINT_GROUP),
                     key=lambda e: e.name):
        if ep.name in SUBCOMMANDS or ep.name in out:
            print(f"fedjax-appeal: warning: command plugin {ep.name!r} ({ep.value}) ignored: "
                  "that command already exists", file=sys.stderr)
            continue
        try:
            cmd = ep.load()()
            if not isinstance(cmd, Subcommand):
                cmd = Subcommand(*cmd)
            cmd.configure(argparse.ArgumentParser(add_help=False))  # its flags build
        except Exception as e:  # noqa: BLE001 - a broken plugin must not break the CLI
            print(f"fedjax-appeal: warning: command plugin {ep.name!r} ({ep.value}) is not "
                  f"available: {type(e).__name__}: {e}".splitlines()[0], file=sys.stderr)
            continue
        out[ep.name] = cmd
    return out


_COMMANDS: dict[str, Subcommand] | None = None


def all_commands() -> dict[str, Subcommand]:
    """Every subcommand: the library's (`SUBCOMMANDS`), then the entry-point group's."""
    global _COMMANDS
    if _COMMANDS is None:
        cmds = {name: _resolve_ref(c) if isinstance(c, str) else c
                for name, c in SUBCOMMANDS.items()}
        _COMMANDS = {**cmds, **_plugin_commands()}
    return _COMMANDS


def listings() -> dict[str, Callable[[], list[str]]]:
    """`list` label -> names, from the subcommands' `listings` (e.g. reproduce:
    "experiments")."""
    return {label: fn for c in all_commands().values() for label, fn in (c.listings or {}).items()}


class HiddenOptions(frozenset):
    """The options a combination would refuse (left out of its `--help`), with a short
    description of the combination."""

    describe: str = ""


def hidden_for_help(argv: list[str]) -> HiddenOptions:
    """For `run --help` / `sweep --help`: the options that the combination the other flags
    name (defaults otherwise) would refuse as having no effect (`validate.check_ignored`'s
    reasons); none with `--help-all` or for other commands."""
    if "--help-all" in argv or not argv or argv[0] not in ("run", "sweep"):
        return HiddenOptions()
    rest = [a for a in argv if a not in ("-h", "--help")]
    try:
        args, _ = make_parser().parse_known_args(rest)
        cfg, _ = resolve(args)
    except (ConfigError, SystemExit):
        cfg = RunConfig()
    names = [f.name for f in (*declarations(RunConfig), *declarations(HParams))]
    out = HiddenOptions(n for n in names if ignored_reason(n, cfg) is not None)
    out.describe = (f"--algorithm {cfg.algorithm}, --selector {cfg.selector}, "
                    f"--dataset {cfg.dataset}, --partition {cfg.partition}")
    return out


def make_parser(hidden: frozenset = frozenset()) -> argparse.ArgumentParser:
    """The command line's parser; `hidden`: options left out of `run` / `sweep --help`."""
    p = _Parser(prog="fedjax-appeal", description="JAX-vectorized federated-learning simulator")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for name, (configure, handler, help_, _, computes) in all_commands().items():
        # no abbreviations: `reproduce tour --seed 3` would be read as `--seeds 3`
        sp = sub.add_parser(name, help=help_, description=help_, allow_abbrev=False)
        sp.hidden_options = hidden if name in ("run", "sweep") else frozenset()
        configure(sp)
        if computes:
            add_runtime_flags(sp)
        sp.add_argument("--plugin", action="append", default=[], metavar="MODULE",
                        help="import MODULE (a module name, or a .py file) first, so that "
                             "the components it registers can be named (repeatable; also "
                             "`plugin = [...]` in a config file); see docs/extending.md")
        sp.set_defaults(func=handler)
    return p


def unknown_message(parser: argparse.ArgumentParser, command: str, unknown: list[str]) -> str:
    """'unrecognized argument --cohrt (did you mean --cohort?)': the first unknown option
    of `command` with the closest option of that command, or the unrecognised values."""
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    options = [o for o in sub.choices[command]._option_string_actions if o.startswith("--")]
    for item in unknown:
        if item.startswith("--"):
            flag = item.split("=", 1)[0]
            guess = did_you_mean(flag, options)
            return (f"unrecognized argument {flag}"
                    + (f" (did you mean {guess}?)" if guess else "")
                    + f"; `fedjax-appeal {command} --help` lists the options")
    return f"unrecognized arguments: {' '.join(unknown)}"


def main(argv: list[str] | None = None, started: float | None = None) -> int:
    """Run the command line `argv` (default: the process's); `started` is the
    `time.perf_counter()` value from which the command's wall clock counts (default:
    now; the `fedjax-appeal` program passes its start, before its imports)."""
    started = time.perf_counter() if started is None else started
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        load_plugins(plugin_names(argv))
    except ConfigError as e:
        print(f"fedjax-appeal: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    wants_help = any(a in ("-h", "--help", "--help-all") for a in argv)
    parser = make_parser(hidden_for_help(argv) if wants_help else frozenset())
    if "--help-all" in argv:
        argv = [a if a != "--help-all" else "--help" for a in argv]
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        parser.error(unknown_message(parser, args.command, unknown))
    received: list[int] = []  # the signal that stopped the run (SIGINT raises by itself)
    previous = stop_on_signals(received)
    log = None
    try:
        if hasattr(args, "compile_cache"):
            prepare_runtime(args)
            log = CompileLog().__enter__()
            args.clock = CommandClock(started, log)
        start_processes(args)
        return args.func(args)
    except ConfigError as e:
        print(f"fedjax-appeal: error: {e}", file=sys.stderr)
        return getattr(e, "exit_code", EXIT_USAGE)  # 1 for a failed write (diskspace)
    except KeyboardInterrupt as e:
        sig = received[-1] if received else signal.SIGINT
        print(f"fedjax-appeal: interrupted by {signal.Signals(sig).name}; no results written"
              f"{'; ' + str(e) if str(e) else ''}", file=sys.stderr)
        return 128 + int(sig)  # the shell's convention: 130 for SIGINT, 143 for SIGTERM
    except Exception as e:  # noqa: BLE001 - only peer failures and memory are handled
        if out_of_memory(e):
            print(f"fedjax-appeal: error: {out_of_memory_message(e, args.command)}",
                  file=sys.stderr)
            return EXIT_OUT_OF_MEMORY
        if not is_peer_failure(e):
            raise
        return peer_failed(args, e)
    finally:
        if log is not None:
            log.__exit__(None, None, None)
        for sig, handler in previous.items():
            signal.signal(sig, handler)

