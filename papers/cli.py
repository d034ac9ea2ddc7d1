"""The `reproduce` subcommand of `fedjax-appeal`, added through the entry-point group
`fedjax_appeal.commands` (pyproject.toml: `reproduce = "papers.cli:register"`).

`fedjax-appeal reproduce NAME [--quick] [--seeds 0,1,2 | auto[:MAX]] [--set KEY=VALUE]
[--robustness]` runs a named experiment of `papers.reproduce.EXPERIMENTS` (`--seeds auto`:
seeds until its main claim is decided, `papers.decide`); `reproduce all` runs every table
with a main claim and writes the scorecard (`papers.scorecard`); `reproduce list` lists
them (marking those with a `--robustness` mode and those with a main claim), and
`fedjax-appeal list` shows their names under "experiments".
"""

from __future__ import annotations

import argparse

from fedjax_appeal import ConfigError
from fedjax_appeal.cli import Subcommand

from . import reproduce  # its tables and load_modules through it: tests replace them
from .scorecard import run_all


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("name", help="experiment name (see `fedjax-appeal reproduce list`), or all: "
                   "every table with a main claim, then their scorecard")
    p.add_argument("--seeds", default=None,
                   help="comma-separated seeds (default: the experiment's, `reproduce list`; "
                        "the tour 0..9, the paper tables 0,1,2), or auto[:MAX]: seeds 0, 1, "
                        "... in batches (--seed-batch) until the experiment's main claim is "
                        "decided by a 95%% group-sequential interval, at most MAX seeds "
                        "(default 40; experiments with a main claim are marked [auto] in "
                        "`reproduce list`)")
    p.add_argument("--seed-batch", type=int, default=None, metavar="B",
                   help="with --seeds auto: seeds added before each look (default 10)")
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
    p.add_argument("--plan", action="store_true",
                   help="with `all`: print the tables, in order, with their estimated time "
                        "(from the committed reports' costs), and stop")
    p.add_argument("--from-results", action="store_true",
                   help="with `all`: run nothing; the scorecard of the main claims from the "
                        "committed reports in results/ (written there, or to --out)")
    p.add_argument("--fresh", action="store_true",
                   help="rerun every configuration (default: reuse runs finished earlier with "
                        "the same code, kept in <cache>/runs)")


def cmd(args: argparse.Namespace) -> int:
    reproduce.load_modules()
    if args.name == "list":
        for n, (_, h) in sorted(reproduce.EXPERIMENTS.items()):
            seeds = ",".join(map(str, reproduce.SEEDS.get(n, ())))
            print(f"{n:24s} {h}" + (" [--robustness]" if n in reproduce.ROBUST else "")
                  + (" [auto]" if n in reproduce.CLAIMS else "") + f" (seeds {seeds})")
            for k, oh in reproduce.OPTIONS.get(n, {}).items():
                print(f"{'':24s}   --set {k}=...: {oh}")
        return 0
    if args.name == "all":
        return run_all(args)
    if args.from_results:
        raise ConfigError("--from-results goes with `reproduce all`: run reproduce all "
                          "--from-results")
    if args.plan:
        raise ConfigError("--plan goes with `reproduce all`: drop it, or run reproduce all "
                          "--plan")
    ctx = reproduce.make_context(args, args.name)
    reproduce.run_context(ctx, reproduce.EXPERIMENTS[args.name][0])
    return 0



def experiment_names() -> list[str]:
    reproduce.load_modules()
    return sorted(reproduce.EXPERIMENTS)


def register() -> Subcommand:
    """The entry point: the `reproduce` subcommand and its `list` line."""
    return Subcommand(configure, cmd, "run a named paper experiment and write its report",
                      listings={"experiments": experiment_names})
