"""Command-line interface: `fedjax-appeal run|list|install-data ...`.

The flags of `run` are generated from the fields of `RunConfig` and `HParams`
(`client_lr` -> `--client-lr`); `--config FILE` (TOML or JSON) takes the same keys.
Precedence: defaults < config file < flags given on the command line. Bad input prints
one line `fedjax-appeal: error: ...` and exits with code 2 before anything is written.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .config import ConfigError, HParams, RunConfig, load_config_file, split_overrides

EXIT_USAGE = 2


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, exit 2
        print(f"fedjax-appeal: error: {message}", file=sys.stderr)
        raise SystemExit(EXIT_USAGE)


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


def add_config_flags(p: argparse.ArgumentParser) -> None:
    """One flag per RunConfig/HParams field, defaulting to 'not given'."""
    g = p.add_argument_group("run configuration")
    for f in dataclasses.fields(RunConfig):
        kw: dict[str, Any] = dict(default=argparse.SUPPRESS, dest=f.name,
                                  help=f"{f.metadata.get('help', '')} (default: {f.default!r})")
        t = _type_of(f)
        if f.type in ("bool", bool):
            kw["action"] = argparse.BooleanOptionalAction
        else:
            kw["type"] = t
            kw["metavar"] = f.name.upper()
        g.add_argument(_flag(f.name), **kw)
    h = p.add_argument_group("hyperparameters (vmappable)")
    for f in dataclasses.fields(HParams):
        h.add_argument(_flag(f.name), type=_hp_float, default=argparse.SUPPRESS, dest=f.name,
                       metavar="X", help=f"{f.metadata.get('help', '')} (default: {f.default})")
    p.add_argument("--config", default=None, metavar="FILE",
                   help="TOML or JSON file with the same keys as the flags")


def resolve(args: argparse.Namespace, base: dict[str, Any] | None = None
            ) -> tuple[RunConfig, HParams]:
    """(RunConfig, HParams) from defaults < `base` < config file < explicit flags."""
    values: dict[str, Any] = dict(base or {})
    if getattr(args, "config", None):
        values.update(load_config_file(args.config))
    values.update({k: v for k, v in vars(args).items()
                   if k not in ("config", "command", "func")})
    run_kw, hp_kw = split_overrides(values)
    types = {f.name: _type_of(f) for f in dataclasses.fields(RunConfig)}
    try:
        run_kw = {k: types[k](v) if not isinstance(v, bool) else v for k, v in run_kw.items()}
        hp_kw = {k: _hp_float(v) for k, v in hp_kw.items()}
    except (TypeError, ValueError) as e:
        raise ConfigError(f"bad value in configuration: {e}") from None
    return RunConfig(**run_kw), HParams(**hp_kw)


def default_out(cfg: RunConfig) -> str:
    return str(Path("runs") / f"{cfg.algorithm}_{cfg.dataset.replace(':', '_').replace('/', '_')}"
               f"_s{cfg.seed}")


def cmd_run(args: argparse.Namespace) -> int:
    from .checkpoint import resume_base
    from .data import load_federated
    from .experiment import run_config
    from .report import run_writers, write_outputs
    from .simulate import progress_printer
    from .validate import validate

    cfg, hp = resolve(args, base=resume_base(getattr(args, "resume", "")))
    if not cfg.out:
        cfg = cfg.replace(out=default_out(cfg))
    validate(cfg, hp)
    data, dataset = load_federated(cfg)  # data problems surface before any output
    print(f"fedjax-appeal: {cfg.algorithm} on {cfg.dataset} ({cfg.partition}), "
          f"{data.num_clients} clients + {data.num_unseen} unseen, cohort {cfg.cohort}, "
          f"{cfg.rounds} rounds -> {cfg.out}", file=sys.stderr)
    results, _ = run_config(cfg, hp, data=data, dataset=dataset,
                            on_eval=progress_printer(cfg.algorithm, cfg.rounds))
    title = f"{cfg.algorithm} on {cfg.dataset} ({cfg.partition})"
    out = write_outputs(cfg.out, run_writers(results, title))
    last = results["history"][-1]
    t = results["timing"]
    empty = sum(1 for a in results["round_metrics"].get("available", []) if a == 0)
    if empty:
        print(f"fedjax-appeal: warning: {empty} of {cfg.rounds} rounds had no available client "
              "(flexible participation: the global model appealed to nobody), so the model did "
              "not change in them; see round_metrics.available in results.json",
              file=sys.stderr)
    acc = last.get("test_acc_seen", float("nan"))
    print(f"final round {last['round']}: test_acc_seen {acc:.4f}"
          + (f"  test_acc_unseen {last['test_acc_unseen']:.4f}" if "test_acc_unseen" in last
             else "")
          + f"  ({t.get('sec_per_round', float('nan')):.4f} s/round, compile "
          f"{t['compile_s']:.1f}s); wrote {out}/results.json, history.csv, accuracy.png")
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    from .algorithms import ALGORITHMS
    from .config import DATASETS, PARTITIONS
    from .models import MODELS
    from .server import SERVER_OPTS

    print("algorithms:  " + ", ".join(sorted(ALGORITHMS)))
    print("datasets:    " + ", ".join(DATASETS))
    print("partitions:  " + ", ".join(PARTITIONS))
    print("models:      auto, " + ", ".join(MODELS))
    print("server opts: " + ", ".join(SERVER_OPTS))
    return 0


def cmd_install_data(args: argparse.Namespace) -> int:
    """Install Debian's dataset-fashion-mnist when missing (root, or sudo available)."""
    from .data.sources import FMNIST_DEFAULT_DIR

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


# name -> (configure parser, handler, help); other modules add their subcommands here.
SUBCOMMANDS: dict[str, tuple[Callable[[argparse.ArgumentParser], None],
                             Callable[[argparse.Namespace], int], str]] = {
    "run": (add_config_flags, cmd_run, "run one simulation and write its results"),
    "list": (lambda p: None, cmd_list, "list algorithms, datasets, partitions, models"),
    "install-data": (lambda p: None, cmd_install_data,
                     "install Debian's Fashion-MNIST package if it is missing"),
}


def _load_plugins() -> None:
    """Import modules that register further subcommands (reproduce, sweep, ...)."""
    import importlib

    for mod in ("fedjax_appeal.reproduce", "fedjax_appeal.sweep_cli"):
        try:
            importlib.import_module(mod)
        except ModuleNotFoundError as e:
            if e.name != mod:
                raise


def make_parser() -> argparse.ArgumentParser:
    _load_plugins()
    p = _Parser(prog="fedjax-appeal", description="JAX-vectorized federated-learning simulator")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for name, (configure, handler, help_) in SUBCOMMANDS.items():
        sp = sub.add_parser(name, help=help_, description=help_)
        configure(sp)
        sp.set_defaults(func=handler)
    return p


def main(argv: list[str] | None = None) -> int:
    args = make_parser().parse_args(argv)
    try:
        return args.func(args)
    except ConfigError as e:
        print(f"fedjax-appeal: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt as e:
        print(f"fedjax-appeal: interrupted; no results written{'; ' + str(e) if str(e) else ''}",
              file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
