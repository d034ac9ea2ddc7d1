"""Command-line interface: `fedjax-appeal run|list|install-data ...`.

The flags of `run` are generated from the fields of `RunConfig` and `HParams`
(`client_lr` -> `--client-lr`), plus one flag per tunable a plugin registered and
`--hp NAME=X` for any hyperparameter; `--config FILE` (TOML or JSON) takes the same keys.
Precedence: defaults < config file < flags given on the command line. Bad input prints
one line `fedjax-appeal: error: ...` and exits with code 2 before anything is written.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

from ..core.config import (
    ConfigError,
    HParams,
    RunConfig,
    split_overrides,
)
from ..run.schema import check_types, load_config_file

EXIT_USAGE = 2
EXIT_OUT_OF_MEMORY = 1


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, exit 2
        print(f"fedjax-appeal: error: {message}", file=sys.stderr)
        raise SystemExit(EXIT_USAGE)

    def _check_value(self, action, value):
        """A value outside an option's `choices` is refused with the closest choice."""
        if action.choices is not None and value not in action.choices:
            from ..core.registry import did_you_mean

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
                    _hp_float: ("float", "a number")}.get(action.type)
            if kind is None or not action.option_strings:
                raise
            flag = action.option_strings[-1]
            raise argparse.ArgumentError(
                action, f"invalid {kind[0]} value: {arg_string!r}; give {kind[1]}, e.g. "
                f"{flag} {_example(action, 10 if action.type is int else 0.05)}") from None


def _example(action: argparse.Action, fallback: float) -> str:
    """An example value of a numeric flag: its default (the declared one of a configuration
    field or tunable), else `fallback`."""
    from ..core.fields import OPTIONS

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


def _hp_float(v: Any) -> float:
    """A hyperparameter value; 'same' (used by --solo-lr: the client lr) reads as 0."""
    if isinstance(v, str) and v.strip().lower() == "same":
        return 0.0
    return float(v)


def registries() -> dict[str, Any]:
    """RunConfig field -> the Registry of its allowed names (built-ins and plugins), from
    the fields' declarations (`registry=` or a Registry of choices)."""
    from ..core.config import Registry, declarations
    from ..run.validate import component_registries

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
    from ..run.schema import range_text

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
    from ..core.config import GROUPS, declarations

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
            _flag(f.name), type=_hp_float, default=argparse.SUPPRESS, dest=f.name,
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
    from ..core.config import field_names

    out: dict[str, float] = {}
    for item in items:
        name, eq, raw = item.partition("=")
        name = name.strip().replace("-", "_")
        if not eq or not name or not raw.strip():
            raise ConfigError(f"--hp {item!r}: write NAME=VALUE (e.g. --hp client_lr=0.1)")
        if name not in field_names(HParams):
            from ..core.tunables import check_tunable

            check_tunable(name, field_names(HParams))
        try:
            out[name] = _hp_float(raw)
        except ValueError:
            raise ConfigError(f"--hp {item!r}: {raw.strip()!r} is not a number") from None
    return out


# Flags of the process, not of the simulation (never part of a RunConfig).
PROCESS_KEYS = ("coordinator_address", "num_processes", "process_id", "heartbeat_timeout",
                "overwrite", "cpu_devices")


def add_process_flags(p: argparse.ArgumentParser) -> None:
    """--overwrite and the multi-process flags (see `distributed.initialize`)."""
    p.add_argument("--overwrite", action="store_true",
                   help="replace the results and checkpoint of another run in --out")
    p.add_argument("--cpu-devices", type=int, default=None, metavar="N",
                   help="split the host CPU into N JAX devices (jax_num_cpu_devices), so that "
                        "--devices N (or 0) shards the cohort over the cores: each device runs "
                        "its own share of the clients' matmuls (0 = JAX's default, one device; "
                        "default: chosen by --layout auto, see execute/layout.py)")
    g = p.add_argument_group("several processes (one simulation over all their devices)")
    g.add_argument("--coordinator-address", default="", metavar="HOST:PORT",
                   help="address of process 0 (with --num-processes, --process-id); without "
                        "these flags a SLURM / Open MPI job is detected automatically")
    g.add_argument("--num-processes", type=int, default=0, metavar="N",
                   help="number of processes of the job")
    g.add_argument("--process-id", type=int, default=-1, metavar="I",
                   help="this process's index, 0 .. N-1 (0 writes the files)")
    g.add_argument("--heartbeat-timeout", type=int, default=30, metavar="S",
                   help="seconds after which a silent process counts as dead and the others "
                        "stop (default: 30)")


def start_processes(args: argparse.Namespace) -> bool:
    """Start the multi-process runtime from the flags / the environment (before JAX runs)."""
    from ..execute.distributed import initialize, split_cpu

    if not hasattr(args, "coordinator_address"):
        return False
    if args.cpu_devices is not None:
        split_cpu(args.cpu_devices)
    else:  # the automatic layout's split; where JAX already runs (a caller's process), none
        try:
            split_cpu(cpu_devices_for(args))
        except ConfigError:
            pass
    if args.heartbeat_timeout < 1:
        raise ConfigError(f"--heartbeat-timeout must be >= 1 second (got "
                          f"{args.heartbeat_timeout})")
    return initialize(args.coordinator_address, args.num_processes, args.process_id,
                      heartbeat_timeout_s=args.heartbeat_timeout)


def cpu_devices_for(args: argparse.Namespace) -> int:
    """The CPU split of this process (before JAX runs): `--cpu-devices` as given, else the
    automatic layout's (`layout.cpu_split`) unless the layout is manual (`--layout manual`,
    or `--devices` / `--client-lanes` given) or the job has several processes. A resumed
    sweep takes the split it recorded when it started (`checkpoint.resumed_split`): another
    split would run other programs, whose float results differ in the last bits."""
    from ..execute.distributed import detected_cluster
    from ..execute.layout import LAYOUT_FIELDS, cpu_split, host_cores

    if args.cpu_devices is not None:
        return args.cpu_devices
    if args.coordinator_address or args.num_processes > 0 or detected_cluster():
        return 0
    given = given_keys(args)
    values: dict[str, Any] = {}
    if getattr(args, "resume", "") and args.command == "sweep":
        from ..run.checkpoint import resumed_split

        split, config = resumed_split(args.resume)
        if split is not None and "layout" not in given and not given & set(LAYOUT_FIELDS):
            return split  # the split the sweep ran with: the same programs, the same bits
        values.update(config)
    elif getattr(args, "resume", ""):
        from ..run.checkpoint import resume_base

        values.update(resume_base(args.resume))
    if getattr(args, "config", None):
        values.update(load_config_file(args.config))
    values.update(vars(args))
    if values.get("layout", "auto") == "manual" or given & set(LAYOUT_FIELDS):
        return 0
    if args.command == "sweep":  # a sweep shards its grid: every core
        return host_cores() if host_cores() > 1 else 0
    cohort = values.get("cohort", RunConfig.cohort)
    try:
        return cpu_split(int(cohort))
    except (TypeError, ValueError):
        return 0  # validation reports the bad value


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
    from ..core.config import field_names

    known = set(field_names(RunConfig)) | set(field_names(HParams))
    return (keys | {k for k in vars(args) if k in known}
            | set(parse_hp_args(getattr(args, "hp", None) or [])))


def agree_or_raise(error: ConfigError | None) -> None:
    """Raise `error` here; with several processes, stop every process if process 0 failed.

    Process 0 alone checks the output folder (the others write nothing), so its verdict
    is broadcast (one collective) and the other processes stop with one line too.
    """
    from ..execute.distributed import agree

    if not agree(error is None):
        raise error or ConfigError("process 0 refused the configuration (see its error line); "
                                   "nothing was run")
    if error is not None:
        raise error


def prepare_out(out: str, holds: tuple[str, ...], args: argparse.Namespace,
                resume: str = "") -> None:
    """Check the output folder (process 0) before any data is loaded; see `check_out`."""
    from ..execute.distributed import is_main
    from ..run.validate import check_out

    overwrite = bool(getattr(args, "overwrite", False))
    if overwrite and resume:
        raise ConfigError("--overwrite and --resume contradict each other: --resume continues "
                          "the run in the folder, --overwrite replaces it; give one")
    err = None
    if is_main():
        try:
            check_out(out, holds=holds, reuse=overwrite or bool(resume))
        except ConfigError as e:
            err = e
    agree_or_raise(err)


def clear_old_run(out: str, names: tuple[str, ...]) -> None:
    """--overwrite: remove the files of the previous run (its checkpoint included)."""
    import shutil

    from ..execute.distributed import is_main

    if not is_main():
        return
    for n in names:
        p = Path(out) / n
        if p.is_dir():
            shutil.rmtree(p, ignore_errors=True)
        else:
            p.unlink(missing_ok=True)


def _peer_advice(folder: str, checkpoint_every: int) -> None:
    """What a process says if another one dies: where the checkpoint is, how to go on."""
    from ..execute.distributed import set_peer_message

    set_peer_message(f"the last checkpoint stays in {folder}: start every process again with "
                     f"--resume {folder}" if checkpoint_every > 0 else
                     "no checkpoints were taken (--checkpoint-every 0): start the job again")


def cmd_run(args: argparse.Namespace) -> int:
    from ..execute.distributed import check_processes
    from ..run.checkpoint import check_compatible, read_meta, resume_base
    from ..run.validate import RUN_FILES, check_ignored, check_source_size, validate

    cfg, hp = resolve(args, base=resume_base(getattr(args, "resume", "")))
    if not cfg.out:
        cfg = cfg.replace(out=default_out(cfg))
    validate(cfg, hp)
    if cfg.resume:  # the checkpoint's configuration must be this one (before any loading)
        meta = read_meta(cfg.resume)
        check_compatible(meta, cfg.as_dict(), hp.to_dict(), cfg.resume)
        if cfg.rounds < int(meta["round"]):
            raise ConfigError(f"--rounds {cfg.rounds} is below round {meta['round']} of the "
                              f"checkpoint in {cfg.resume}: a resumed run continues from it; "
                              f"give --rounds {meta['round']} or more")
    check_ignored(cfg, given_keys(args))
    check_source_size(cfg)
    cfg, layout = run_layout(cfg, given_keys(args))
    check_processes(cfg.devices)
    prepare_out(cfg.out, RUN_FILES, args, cfg.resume)
    _peer_advice(cfg.resume or cfg.out, cfg.checkpoint_every)
    from ..run.outlock import out_lock

    with out_lock(cfg.out):  # one run per folder
        return _run_locked(args, cfg, hp, layout)


def run_layout(cfg: RunConfig, given: set[str]):
    """(cfg, Layout) with the layout resolved (`experiment.run_layout`); a layout field
    given on the command line or in the config file makes the layout manual."""
    from ..execute.layout import LAYOUT_FIELDS
    from ..run.experiment import run_layout as resolved

    if "layout" not in given and given & set(LAYOUT_FIELDS):
        cfg = cfg.replace(layout="manual")
    return resolved(cfg)


def _run_locked(args: argparse.Namespace, cfg, hp, layout) -> int:
    """`cmd_run` once the configuration is checked and the output folder is ours."""
    import contextlib

    from ..execute.distributed import is_main
    from ..run.progress import Heartbeat

    main = is_main()
    # a line every few seconds while a step lasts long (process 0 speaks for the job)
    heartbeat = Heartbeat(lambda msg: print(f"fedjax-appeal: {msg}", file=sys.stderr,
                                            flush=True)) if main else None
    with heartbeat or contextlib.nullcontext():
        return _run_with(args, cfg, hp, layout, heartbeat)


def _run_with(args: argparse.Namespace, cfg, hp, layout, heartbeat) -> int:
    """`_run_locked` with its heartbeat (None in the processes other than 0)."""
    import time

    from ..core.models import model_for
    from ..data import load_federated
    from ..data.text import tokenizer_writers
    from ..execute.distributed import is_main
    from ..execute.layout import conv_impl_for
    from ..protocols.appeal.requirement import appeal_reason
    from ..run.experiment import Prepared, loading_phase, run_config
    from ..run.export import model_writers
    from ..run.progress import phase
    from ..run.report import run_writers, write_outputs
    from ..run.simulate import progress_printer
    from ..run.validate import RUN_FILES

    main = is_main()
    t0 = time.perf_counter()
    with phase(heartbeat, loading_phase(cfg)):
        data, dataset = load_federated(cfg)  # data problems surface before any output
    load_s = time.perf_counter() - t0
    # ... and a model that misfits; built as the run builds it (`assemble`)
    model = model_for(cfg.model, data, dataset, conv_impl_for(cfg), cfg.precision)
    if getattr(args, "overwrite", False):
        clear_old_run(cfg.out, RUN_FILES)
    if main:
        print(f"fedjax-appeal: {cfg.algorithm} on {cfg.dataset} ({cfg.partition}), "
              f"{data.num_clients} clients + {data.num_unseen} unseen, cohort {cfg.cohort}, "
              f"{cfg.rounds} rounds, {appeal_reason(cfg)} -> {cfg.out}", file=sys.stderr)
        conv = getattr(model.module, "conv_impl", None)
        print(f"fedjax-appeal: {layout.describe()}"
              + (f"; convolutions: {conv}" if conv else ""), file=sys.stderr)
        if cfg.dp != "off":
            from ..aggregate.accounting import HEADER_OPTIONS as ACCOUNTING
            from ..aggregate.accounting import header as dp_header

            line = dp_header(cfg.view(ACCOUNTING, "the privacy accounting"), hp,
                             data.num_clients)
            print(f"fedjax-appeal: {line}", file=sys.stderr)
        if heartbeat is not None:
            heartbeat.mark()
    tracker = None
    if main and cfg.log:
        from ..run.records import recorded_config, recorded_hparams
        from ..run.tracking import LOG_DIR, Tracker, parse_kinds

        tracker = Tracker(parse_kinds(cfg.log), Path(cfg.out) / LOG_DIR,
                          Path(cfg.out).name, recorded_config(cfg, model.name),
                          recorded_hparams(cfg, hp))
    printer = progress_printer(cfg.algorithm, cfg.rounds) if main else None
    if printer is not None and heartbeat is not None:  # its lines count as progress
        shown = printer
        printer = lambda entry: (shown(entry), heartbeat.mark())  # noqa: E731
    if main:
        from ..run.report import prefetch_plotting

        prefetch_plotting()
    try:
        from ..execute.runtime import program_cache_folder

        results, sim = run_config(cfg, hp, data=data, dataset=dataset,
                                  on_eval=(printer if tracker is None else
                                           lambda e: (printer(e), tracker.eval(e))),
                                  program_cache=program_cache_folder(),
                                  prepared=Prepared(layout, model), heartbeat=heartbeat)
    except BaseException:
        if tracker is not None:
            tracker.close()
        raise
    if tracker is not None:
        tracker.finish(results["round_metrics"], results["history"][-1])
    if not main:  # the other processes computed the same results; process 0 writes them
        return 0
    title = f"{cfg.algorithm} on {cfg.dataset} ({cfg.partition})"
    clock = getattr(args, "clock", None)
    t = results["timing"]
    if clock is not None:  # the process up to the writing of the results
        from ..run.wallclock import command_split

        results["timing"]["process"] = command_split(clock, t["train_total_s"],
                                                     t["eval_total_s"], load_s)
    try:
        with phase(heartbeat, f"writing the results into {cfg.out}"):
            out = write_outputs(cfg.out, {**run_writers(results, title),
                                          **model_writers(model, sim.final_state.params,
                                                          sim.final_state.model_state),
                                          **tokenizer_writers(dataset)})
    except OSError as e:
        from ..run.diskspace import WriteFailed, reason
        from ..run.experiment import keep_final_state

        raise WriteFailed(f"could not write the results to {cfg.out} ({reason(e)}); "
                          f"{keep_final_state(cfg, hp, sim)}") from None
    last = results["history"][-1]
    empty = sum(1 for a in results["round_metrics"].get("available", []) if a == 0)
    if empty:
        print(f"fedjax-appeal: warning: {empty} of {cfg.rounds} rounds had no available client "
              "(flexible participation: the global model appealed to nobody), so the model did "
              "not change in them; see round_metrics.available in results.json",
              file=sys.stderr)
    acc = last.get("test_acc_seen", float("nan"))
    spr = t.get("sec_per_round")
    from ..run.records import headline

    print(f"final round {last['round']}: test_acc_seen {acc:.4f}"
          + (f"  test_acc_unseen {last['test_acc_unseen']:.4f}" if "test_acc_unseen" in last
             else "") + headline(cfg, last)
          + (f"  ({spr:.4f} s/round, " if spr is not None else "  (no round trained, ")
          + f"compile {t['compile_s']:.1f}s); wrote {out}/results.json, history.csv, "
          "accuracy.png, model.msgpack (load_model)")
    if clock is not None:
        print_split(clock, t["train_total_s"], t["eval_total_s"], load_s)
    return 0


def print_split(clock, train_s: float, eval_s: float, data_s: float) -> None:
    """The last line of a command: where its wall time went (`run.wallclock`)."""
    from ..run.wallclock import command_split, split_text

    s = command_split(clock, train_s, eval_s, data_s)
    print(split_text(s, s["programs"]), file=sys.stderr)


def cmd_list(args: argparse.Namespace) -> int:
    from ..protocols.appeal.appeal import APPEAL_DEFS
    from ..run.tracking import KINDS

    reg = registries()
    for label, key in (("algorithms", "algorithm"), ("datasets", "dataset"),
                       ("partitions", "partition"), ("models", "model"),
                       ("server opts", "server_opt"), ("selectors", "selector"),
                       ("aggregations", "aggregation")):
        print(f"{label + ':':<13} " + ", ".join(reg[key].choices()))
    from ..core.tunables import TUNABLES

    print(f"{'tunables:':<13} " + (", ".join(f"{k} (default {t.default:g})"
                                           for k, t in TUNABLES.items()) or "none registered"))
    print(f"{'appeal defs:':<13} " + ", ".join(APPEAL_DEFS))
    print(f"{'trackers:':<13} " + ", ".join(KINDS))
    for label, names in listings().items():  # lists of the command modules (experiments)
        print(f"{label + ':':<13} " + ", ".join(names()))
    return 0


def cmd_install_data(args: argparse.Namespace) -> int:
    """Install Debian's dataset-fashion-mnist when missing (root, or sudo available)."""
    from ..data.sources import FMNIST_DEFAULT_DIR

    if Path(FMNIST_DEFAULT_DIR, "train-images-idx3-ubyte.gz").is_file():
        print(f"Fashion-MNIST is present in {FMNIST_DEFAULT_DIR}")
        return 0
    if shutil.which("apt-get") is None:
        raise ConfigError("Fashion-MNIST is missing and apt-get is not available: download the "
                          "four IDX .gz files and pass --fmnist-dir DIR")
    prefix = [] if os.geteuid() == 0 else (["sudo", "-n"] if shutil.which("sudo") else None)
    if prefix is None:
        raise ConfigError("Fashion-MNIST is missing: run 'sudo apt-get install "
                          "dataset-fashion-mnist' as an administrator, or pass --fmnist-dir DIR")
    print("installing dataset-fashion-mnist with apt-get ...", file=sys.stderr)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    ok = subprocess.call(prefix + ["apt-get", "install", "-y", "-q", "dataset-fashion-mnist"],
                         env=env) == 0
    if not ok:
        ok = (subprocess.call(prefix + ["apt-get", "update", "-q"], env=env) == 0 and
              subprocess.call(prefix + ["apt-get", "install", "-y", "-q",
                                        "dataset-fashion-mnist"], env=env) == 0)
    if not ok:
        raise ConfigError("apt-get could not install dataset-fashion-mnist: install it by hand "
                          "or pass --fmnist-dir DIR")
    return 0


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


# The library's subcommands, in `--help` order. A "module:function" entry is imported when
# the parser is built and `function()` returns its Subcommand.
SUBCOMMANDS: dict[str, Subcommand | str] = {
    "run": Subcommand(lambda p: (add_config_flags(p), add_process_flags(p)), cmd_run,
                      "run one simulation and write its results"),
    "list": Subcommand(lambda p: None, cmd_list,
                       "list algorithms, datasets, partitions, models", computes=False),
    "install-data": Subcommand(lambda p: None, cmd_install_data,
                               "install Debian's Fashion-MNIST package if it is missing",
                               computes=False),
    "compare": "fedjax_appeal.cli.compare:subcommand",
    "sweep": "fedjax_appeal.cli.sweep:subcommand",
}
# Entry-point group of further subcommands (a package's `[project.entry-points]`): the
# entry point's name is the subcommand, its value a function returning a Subcommand.
ENTRY_POINT_GROUP = "fedjax_appeal.commands"


def _resolve_ref(ref: str) -> Subcommand:
    import importlib

    module, _, attr = ref.partition(":")
    return getattr(importlib.import_module(module), attr)()


def _plugin_commands() -> dict[str, Subcommand]:
    """The subcommands of the entry-point group; one that fails to load or to add its
    arguments to a parser (or names a built-in command) is left out with one line on
    stderr."""
    from importlib.metadata import entry_points

    out: dict[str, Subcommand] = {}
    for ep in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
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
    from ..core.config import declarations
    from ..run.validate import ignored_reason

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
        from ..run.schema import read_config_raw

        try:  # keys unchecked: the plugins register some of them (tunables)
            from_file = read_config_raw(config).get("plugin", [])
        except ConfigError:
            from_file = []  # the config file's own error is reported when it is read again
        names = ([from_file] if isinstance(from_file, str) else list(from_file)) + names
    return names


def load_plugins(names: list[str]) -> None:
    """Import each plugin module (a module name on the path or in the working folder, or a
    .py file), so that its registrations reach the parser, validation and `list`."""
    import importlib
    import importlib.util

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


def unknown_message(parser: argparse.ArgumentParser, command: str, unknown: list[str]) -> str:
    """'unrecognized argument --cohrt (did you mean --cohort?)': the first unknown option
    of `command` with the closest option of that command, or the unrecognised values."""
    from ..core.registry import did_you_mean

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


def add_runtime_flags(p: argparse.ArgumentParser) -> None:
    """--compile-cache and --deterministic (see `execute.runtime`)."""
    from ..execute.runtime import COMPILE_CACHE_ENV, DETERMINISTIC_ENV

    g = p.add_argument_group("compilation and determinism")
    g.add_argument("--compile-cache", action=argparse.BooleanOptionalAction, default=None,
                   help="keep every compiled program in $FEDJAX_APPEAL_CACHE/xla and reuse it "
                        "when a later run compiles the same program (default: on; "
                        f"{COMPILE_CACHE_ENV}=off turns it off; JAX_COMPILATION_CACHE_DIR "
                        "names another folder)")
    g.add_argument("--deterministic", action=argparse.BooleanOptionalAction, default=None,
                   help="XLA's deterministic GPU kernels, so that a seeded run repeats bit for "
                        "bit in every process (default: on; --no-deterministic or "
                        f"{DETERMINISTIC_ENV}=off trades that for speed on GPUs; XLA:CPU is "
                        "deterministic either way)")


def prepare_runtime(args: argparse.Namespace) -> None:
    """Before JAX starts: the compilation cache and deterministic kernels as the flags (or
    their environment variables) say; both on by default."""
    from ..execute.runtime import (
        COMPILE_CACHE_ENV,
        DETERMINISTIC_ENV,
        enable_compilation_cache,
        enable_determinism,
        env_setting,
    )

    cache = args.compile_cache if args.compile_cache is not None else env_setting(
        COMPILE_CACHE_ENV)
    det = args.deterministic if args.deterministic is not None else env_setting(
        DETERMINISTIC_ENV)
    if det:  # where JAX already runs (a caller's process) it is recorded as not in effect
        enable_determinism(strict=False)
    if cache:
        enable_compilation_cache()


def main(argv: list[str] | None = None, started: float | None = None) -> int:
    """Run the command line `argv` (default: the process's); `started` is the
    `time.perf_counter()` value from which the command's wall clock counts (default:
    now; the `fedjax-appeal` program passes its start, before its imports)."""
    import time

    from ..execute.runtime import CompileLog
    from ..run.wallclock import CommandClock

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
    previous = _stop_on_signals(received)
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
        from ..execute.distributed import is_peer_failure
        from ..execute.runtime import out_of_memory, out_of_memory_message

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


STOP_SIGNALS = ("SIGTERM", "SIGHUP")  # handled like Ctrl-C (timeout, kill, schedulers)


def _stop_on_signals(received: list[int]) -> dict:
    """Make SIGTERM and SIGHUP stop a run as Ctrl-C does: the current chunk is abandoned,
    a checkpoint of the last finished one is written, temporary files are removed and the
    process exits with 128 + the signal's number. Returns the handlers it replaced (none
    outside the main thread, where Python cannot install handlers)."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        return {}

    def stop(signum, frame):
        received.append(signum)
        raise KeyboardInterrupt

    previous = {}
    for name in STOP_SIGNALS:
        sig = getattr(signal, name, None)
        if sig is not None:
            previous[sig] = signal.signal(sig, stop)
    return previous


def peer_failed(args: argparse.Namespace, exc: BaseException) -> int:
    """One line when another process of the job died, then exit at once (see
    `distributed.stop_for_peer`)."""
    from ..execute.distributed import EXIT_PEER, stop_for_peer

    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    stop_for_peer(first)
    return EXIT_PEER
