"""`fedjax-appeal compare`: the command's flags and its run (see `run.compare`)."""

from __future__ import annotations

import argparse
import json
import sys

from ..core.config import ConfigError
from ..run import report  # write_outputs through its module: tests replace it
from ..run.compare import (
    BANDS,
    FORMATS,
    check_metric,
    csv_text,
    default_group_keys,
    group_runs,
    load_runs,
    markdown_table,
    paired_rows,
    paired_table,
    summarise,
    write_figure,
)
from ..run.records import duplicate_seeds
from ..run.report import to_jsonable
from ..run.sequential import parse_auto_seeds, seed_design
from .commands import Subcommand


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("paths", nargs="+", metavar="DIR",
                   help="run folders (results.json), sweep folders (sweep.json), or folders "
                        "holding them")
    p.add_argument("--metric", default="test_acc_seen", help="history column to draw")
    p.add_argument("--group-by", default=None,
                   help="comma list of config/hparams keys (default: the keys that differ)")
    p.add_argument("--band", default="std", choices=BANDS,
                   help="band around the mean over seeds")
    p.add_argument("--x", default="round", help="history column on the x axis")
    p.add_argument("--formats", default="png,pdf",
                   help=f"comma list of figure formats ({', '.join(FORMATS)})")
    p.add_argument("--title", default=None)
    p.add_argument("--baseline", default=None, metavar="GROUP",
                   help="compare every other group with this one seed by seed on the final "
                        "metric: mean difference, 95%% paired t and sign-flip intervals, and "
                        "better / worse / inconclusive (the t interval above, below or around "
                        "0; no verdict below 6 paired seeds, which the sign-flip interval "
                        "needs); a group as its label, e.g. client_lr=0.1 (numbers match as "
                        "numbers: client_lr=1 is client_lr=1.0)")
    p.add_argument("--seeds", default=None, metavar="auto[:MAX]",
                   help="with --baseline: judge each comparison as seeds added until decided "
                        "would (`sweep --seeds auto`): the seeds in increasing order, looked "
                        "at after every --seed-batch, a 95%% group-sequential interval "
                        "(default MAX 40); says how many seeds the next look needs when "
                        "undecided")
    p.add_argument("--seed-batch", type=int, default=None, metavar="B",
                   help="with --seeds auto: seeds per look (default 10)")
    p.add_argument("--out", required=True, help="folder for compare.* (written all-or-nothing)")


def cmd_compare(args: argparse.Namespace) -> int:
    formats = [f for f in args.formats.split(",") if f]
    if not formats or set(formats) - set(FORMATS):
        raise ConfigError(f"--formats {args.formats}: choose from {', '.join(FORMATS)}")
    design = seed_design_of(args)
    runs = load_runs(args.paths)
    check_metric(runs, args.metric)
    for msg in duplicate_seeds(runs):
        print(f"fedjax-appeal: warning: {msg}", file=sys.stderr)
    keys = ([k for k in args.group_by.split(",") if k] if args.group_by is not None
            else default_group_keys(runs))
    rows = summarise(group_runs(runs, keys), args.metric, args.band, args.x)
    title = args.title or f"{args.metric} by {', '.join(keys) or 'run'}"
    pairs = paired_rows(rows, args.baseline, args.metric, design) if args.baseline else []
    result = {"metric": args.metric, "band": args.band, "group_by": keys, "x": args.x,
              "groups": rows, **({"paired": pairs} if args.baseline else {})}

    def figure(fmt: str):
        return lambda p: write_figure(p.with_suffix(""), rows, args.metric, args.band, args.x,
                                      title, [fmt])

    writers = {f"compare.{fmt}": figure(fmt) for fmt in formats}
    writers["compare.md"] = lambda p: p.write_text(
        f"# {title}\n\n" + markdown_table(rows, args.metric)
        + (f"\nPaired with {pairs[0]['baseline']} (seed by seed; better = the 95% "
           + (f"repeated interval of the group-sequential design ({design.text()})"
              if design is not None else "paired t interval")
           + " on the better side of 0; no verdict below 6 seeds, where the sign-flip "
           "interval is undefined):\n\n" + paired_table(pairs, args.metric)
           if pairs else ""))
    writers["compare.csv"] = lambda p: p.write_text(csv_text(rows, args.x))
    writers["compare.json"] = lambda p: p.write_text(json.dumps(to_jsonable(result), indent=1,
                                                                allow_nan=False))
    out = report.write_outputs(args.out, writers)
    print(markdown_table(rows, args.metric)
          + (paired_table(pairs, args.metric) if pairs else "")
          + f"wrote {out}/compare.{{{','.join(formats)}}}, "
          "compare.md, compare.csv, compare.json")
    return 0


def seed_design_of(args: argparse.Namespace):
    """The `sequential.SeedDesign` of `--seeds auto[:MAX]` / `--seed-batch` (None
    without), refused in one line where it cannot apply."""
    if args.seeds is None:
        if args.seed_batch is not None:
            raise ConfigError("--seed-batch goes with --seeds auto[:MAX]: drop it, or give "
                              "--seeds auto")
        return None
    try:
        top = parse_auto_seeds(args.seeds)
        if top is None:
            raise ValueError(f"--seeds {args.seeds!r}: compare reads the seeds its runs "
                             "have; --seeds takes auto or auto:MAX (the group-sequential "
                             "verdict), e.g. --seeds auto:40")
        if not args.baseline:
            raise ValueError("--seeds auto judges the --baseline comparisons: give "
                             "--baseline GROUP too")
        return seed_design(top, args.seed_batch)
    except ValueError as e:
        raise ConfigError(str(e)) from None


def subcommand() -> Subcommand:
    return Subcommand(configure, cmd_compare,
                      "put several runs and seeds in one figure (mean and band) and one table",
                      computes=False)
