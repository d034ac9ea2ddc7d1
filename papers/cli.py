"""The `reproduce` subcommand of `fedjax-appeal`, added through the entry-point group
`fedjax_appeal.commands` (pyproject.toml: `reproduce = "papers.cli:register"`).

`fedjax-appeal reproduce NAME [--quick] [--seeds 0,1,2] [--set KEY=VALUE] [--robustness]`
runs a named experiment of `papers.reproduce.EXPERIMENTS`; `reproduce list` lists them
(marking those with a `--robustness` mode), and `fedjax-appeal list` shows their names
under "experiments".
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from fedjax_appeal.cli import Subcommand


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("name", help="experiment name (see `fedjax-appeal reproduce list`)")
    p.add_argument("--seeds", default=None,
                   help="comma-separated seeds (default: the experiment's, `reproduce list`; "
                        "the tour 0..9, the paper tables 0,1,2)")
    p.add_argument("--out", default="", help="output folder (default runs/reproduce/NAME; "
                   "runs/reproduce/NAME-quick with --quick; --out results/NAME replaces the "
                   "committed report)")
    p.add_argument("--quick", action="store_true",
                   help="a short variant (fewer rounds/clients) that finishes in minutes")
    p.add_argument("--data-dir", default="", help="npz data directory (default "
                   "$FEDJAX_APPEAL_DATA)")
    p.add_argument("--fmnist-dir", default="", help="Fashion-MNIST IDX directory")
    p.add_argument("--cache-dir", default="", help="cache for decoded arrays and finished runs")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", dest="options",
                   help="an option the experiment declares (repeatable; `reproduce list` "
                        "shows them), e.g. --set profile=gpu for the Exp-alpha tables")
    p.add_argument("--robustness", action="store_true",
                   help="instead of the table: rerun each setting with ONE client lr shared "
                        "by all arms, for every lr of the grid the arms' lrs were tuned over "
                        "(tables whose arms already share one lr: that lr, a fifth of it and "
                        "twice it), same seeds; writes robustness.md / robustness.json into "
                        "the table's folder (tables marked [--robustness] in `reproduce "
                        "list`)")
    p.add_argument("--fresh", action="store_true",
                   help="rerun every configuration (default: reuse runs finished earlier with "
                        "the same code, kept in <cache>/runs)")


def cmd(args: argparse.Namespace) -> int:
    from fedjax_appeal import ConfigError, check_out, did_you_mean

    from .reproduce import (
        EXPERIMENTS,
        OPTIONS,
        ROBUST,
        SEEDS,
        Context,
        load_modules,
        parse_options,
    )

    load_modules()
    if args.name == "list":
        for n, (_, h) in sorted(EXPERIMENTS.items()):
            seeds = ",".join(map(str, SEEDS.get(n, ())))
            print(f"{n:24s} {h}" + (" [--robustness]" if n in ROBUST else "")
                  + f" (seeds {seeds})")
            for k, oh in OPTIONS.get(n, {}).items():
                print(f"{'':24s}   --set {k}=...: {oh}")
        return 0
    if args.name not in EXPERIMENTS:
        names = sorted(EXPERIMENTS)
        guess = did_you_mean(args.name, names)
        raise ConfigError(f"unknown experiment '{args.name}'; "
                          + (f"did you mean '{guess}'? " if guess else "")
                          + f"choose one of: {', '.join(names) or '(none registered)'}")
    try:
        seeds = ([int(s) for s in args.seeds.split(",") if s.strip()]
                 if args.seeds is not None else list(SEEDS[args.name]))
    except ValueError:
        raise ConfigError(f"--seeds must be comma-separated integers (got {args.seeds!r})"
                          ) from None
    if not seeds:
        raise ConfigError("--seeds needs at least one seed")
    fn, _ = EXPERIMENTS[args.name]
    if args.robustness and args.name not in ROBUST:
        raise ConfigError(f"reproduce {args.name} has no --robustness mode; tables with one: "
                          f"{', '.join(sorted(ROBUST)) or '(none)'}")
    options = parse_options(args.name, args.options)
    out = Path(args.out or Path("runs") / "reproduce" / (args.name + ("-quick" if args.quick
                                                                    else "")))
    check_out(str(out), "--out")  # a report folder is refreshed in place: no reuse check
    ctx = Context(args.name, seeds, out, args.quick,
                  args.data_dir, args.fmnist_dir, args.cache_dir,
                  command="fedjax-appeal reproduce " + " ".join(sys.argv[2:]),
                  reuse=not args.fresh, options=options, robustness=args.robustness,
                  clock=getattr(args, "clock", None))
    from fedjax_appeal import Heartbeat

    # a line while a step lasts long; steps the experiment does not name are "reproduce NAME"
    with Heartbeat(ctx.line) as ctx.heartbeat, ctx.heartbeat.phase(f"reproduce {args.name}"):
        fn(ctx)
    print(f"wrote {ctx.out}")
    return 0


def experiment_names() -> list[str]:
    from .reproduce import EXPERIMENTS, load_modules

    load_modules()
    return sorted(EXPERIMENTS)


def register() -> Subcommand:
    """The entry point: the `reproduce` subcommand and its `list` line."""
    return Subcommand(configure, cmd, "run a named paper experiment and write its report",
                      listings={"experiments": experiment_names})
