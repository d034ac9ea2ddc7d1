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
import sys
from pathlib import Path

from fedjax_appeal.cli import Subcommand


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
    p.add_argument("--fresh", action="store_true",
                   help="rerun every configuration (default: reuse runs finished earlier with "
                        "the same code, kept in <cache>/runs)")


def cmd(args: argparse.Namespace) -> int:
    from fedjax_appeal import ConfigError

    from .reproduce import CLAIMS, EXPERIMENTS, OPTIONS, ROBUST, SEEDS, load_modules

    load_modules()
    if args.name == "list":
        for n, (_, h) in sorted(EXPERIMENTS.items()):
            seeds = ",".join(map(str, SEEDS.get(n, ())))
            print(f"{n:24s} {h}" + (" [--robustness]" if n in ROBUST else "")
                  + (" [auto]" if n in CLAIMS else "") + f" (seeds {seeds})")
            for k, oh in OPTIONS.get(n, {}).items():
                print(f"{'':24s}   --set {k}=...: {oh}")
        return 0
    if args.name == "all":
        from .scorecard import run_all

        return run_all(args)
    if args.plan:
        raise ConfigError("--plan goes with `reproduce all`: drop it, or run reproduce all "
                          "--plan")
    ctx = make_context(args, args.name)
    run_context(ctx, EXPERIMENTS[args.name][0])
    return 0


def make_context(args: argparse.Namespace, name: str, out: Path | None = None,
                 command: str | None = None):
    """The `papers.reproduce.Context` of `reproduce NAME` with these arguments (seeds or
    the `--seeds auto` design and main claim, options, output folder), every argument
    checked before any slow work; `out` replaces the default folder."""
    from fedjax_appeal import ConfigError, check_out, did_you_mean

    from .reproduce import (
        CLAIMS,
        DEFAULT_SEEDS,
        EXPERIMENTS,
        ROBUST,
        SEEDS,
        Context,
        parse_options,
    )

    if name not in EXPERIMENTS:
        names = sorted(EXPERIMENTS)
        guess = did_you_mean(name, names)
        raise ConfigError(f"unknown experiment '{name}'; "
                          + (f"did you mean '{guess}'? " if guess else "")
                          + f"choose one of: all, {', '.join(names) or '(none registered)'}")
    design = auto_design(args, name in CLAIMS, name)
    try:
        seeds = (list(range(design.batch)) if design is not None
                 else [int(s) for s in args.seeds.split(",") if s.strip()]
                 if args.seeds is not None else list(SEEDS.get(name, DEFAULT_SEEDS)))
    except ValueError:
        raise ConfigError(f"--seeds must be comma-separated integers or auto[:MAX] (got "
                          f"{args.seeds!r})") from None
    if not seeds:
        raise ConfigError("--seeds needs at least one seed")
    if args.robustness and name not in ROBUST:
        raise ConfigError(f"reproduce {name} has no --robustness mode; tables with one: "
                          f"{', '.join(sorted(ROBUST)) or '(none)'}")
    if args.robustness and design is not None:
        raise ConfigError("--seeds auto decides a table's main claim, --robustness reruns "
                          "it at other lrs: give the seeds the table was decided on, e.g. "
                          "--seeds 0,1,...,19, with --robustness")
    options = parse_options(name, args.options)
    out = out or Path(args.out or Path("runs") / "reproduce" / (name + ("-quick" if args.quick
                                                                      else "")))
    check_out(str(out), "--out")  # a report folder is refreshed in place: no reuse check
    ctx = Context(name, seeds, out, args.quick,
                  args.data_dir, args.fmnist_dir, args.cache_dir,
                  command=command or "fedjax-appeal reproduce " + " ".join(sys.argv[2:]),
                  reuse=not args.fresh, options=options, robustness=args.robustness,
                  clock=getattr(args, "clock", None))
    if design is not None:
        ctx.design, ctx.claim = design, CLAIMS[name]
    return ctx


def run_context(ctx, fn) -> None:
    """Run experiment `fn` in `ctx`: once, or with `--seeds auto` look by look
    (`papers.decide.run_until_decided`); prints where the report went."""
    if ctx.design is None:
        fn(ctx)
        print(f"wrote {ctx.out}")
        return
    from fedjax_appeal import sequential_text

    from .decide import run_until_decided

    rep = run_until_decided(ctx, fn)
    print(f"{ctx.claim.label}: {sequential_text(rep, 1.0, ctx.claim.digits)}")
    print(f"wrote {ctx.out}")


def auto_design(args: argparse.Namespace, has_claim: bool, name: str):
    """The `fedjax_appeal.SeedDesign` of `--seeds auto[:MAX]` and `--seed-batch` (None for
    explicit seeds), refused in one line where it cannot apply."""
    from fedjax_appeal import ConfigError, parse_auto_seeds, seed_design

    try:
        top = parse_auto_seeds(args.seeds) if args.seeds is not None else None
    except ValueError as e:
        raise ConfigError(str(e)) from None
    if top is None:
        if args.seed_batch is not None:
            raise ConfigError("--seed-batch goes with --seeds auto[:MAX]: drop it, or give "
                              "--seeds auto")
        return None
    if args.quick:
        raise ConfigError("--seeds auto decides a table's main claim; --quick runs a reduced "
                          "setting (often one seed, some arms left out) that cannot: drop "
                          "--quick, or give explicit --seeds")
    if not has_claim:
        raise ConfigError(f"reproduce {name} names no main claim to decide, so it "
                          "cannot choose its seeds: give them (--seeds 0,1,2); experiments "
                          "marked [auto] in `reproduce list` can")
    try:
        return seed_design(top, args.seed_batch)
    except ValueError as e:
        raise ConfigError(f"--seeds {args.seeds} --seed-batch {args.seed_batch}: {e}"
                          ) from None


def experiment_names() -> list[str]:
    from .reproduce import EXPERIMENTS, load_modules

    load_modules()
    return sorted(EXPERIMENTS)


def register() -> Subcommand:
    """The entry point: the `reproduce` subcommand and its `list` line."""
    return Subcommand(configure, cmd, "run a named paper experiment and write its report",
                      listings={"experiments": experiment_names})
