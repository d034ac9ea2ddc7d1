"""`fedjax-appeal sweep --seeds auto[:MAX] --baseline GROUP`: add seeds in batches until
every grid point's comparison with the baseline point is decided.

Seeds 0, 1, ... run in batches of `--seed-batch` (default 10), each batch a whole sweep of
the grid (one vmapped program, as any sweep) into `OUT/seed-batches/seeds-A-B/`. After
each batch every other grid point is compared with the baseline point seed by seed on
the final `--metric` with the group-sequential design of `run.sequential` (looks after
every batch, 95% repeated confidence intervals, Pocock-type α-spending); the sweep stops
when every comparison is decided (better or worse) or at MAX seeds. Each comparison keeps
its own 95% guarantee (there is no correction across the grid's comparisons).

OUT then holds the sweep's usual files over all the seeds run (`sweep.json` with a
`seeds_until_decided` entry, `sweep.csv`, `summary.md`, `sweep.png`) and `decided.md`;
the batch folders are removed. Until then, the same command started again reads the
finished batches back and continues an interrupted one from its checkpoint.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..core.config import ConfigError
from ..run import report  # write_outputs through its module: tests replace it
from ..run.compare import lower_is_better, sequential_record
from ..run.report import to_jsonable
from ..run.sequential import parse_auto_seeds, seed_design, sequential_report, sequential_text
from ..run.sweep import check_grid, parse_grid_arg, summarize_sweep

BATCHES = "seed-batches"


def _same(have: Any, text: str) -> bool:
    """A grid value against a value as written (numbers compared as numbers)."""
    try:
        return math.isclose(float(have), float(text), rel_tol=1e-9)
    except (TypeError, ValueError):
        return str(have) == text


def parse_baseline(baseline: str) -> dict[str, str]:
    """"key=value[,key=value]" as {key: value}."""
    want: dict[str, str] = {}
    for part in baseline.split(","):
        k, eq, v = part.partition("=")
        if not eq or not k.strip():
            raise ConfigError(f"--baseline {baseline!r}: write KEY=VALUE[,KEY=VALUE], e.g. "
                              "--baseline client_lr=0.01")
        want[k.strip().replace("-", "_")] = v.strip()
    return want


def check_baseline(grid_args: list[str], baseline: str) -> None:
    """Refuse, before any run, a baseline that names no value of the grid."""
    grid = check_grid(dict(parse_grid_arg(g) for g in grid_args))
    for k, v in parse_baseline(baseline).items():
        if k not in grid:
            raise ConfigError(f"--baseline {baseline}: {k} is not a --grid key of this sweep "
                              f"({', '.join(grid) or 'no --grid'})")
        if not any(_same(g, v) for g in grid[k]):
            raise ConfigError(f"--baseline {baseline}: no grid point has {k}={v}; its values: "
                              f"{', '.join(map(str, grid[k]))}")


def baseline_label(rows: list[dict[str, Any]], baseline: str) -> str:
    """The label of the grid point named by `baseline` ("key=value[,key=value]"; values
    compared as numbers where both are numbers, so client_lr=0.01 = client_lr=1e-2)."""
    want = parse_baseline(baseline)
    same = _same
    labels = []
    for r in rows:
        values = {**r["static"], **r["hparams"]}
        if all(k in values and same(values[k], v) for k, v in want.items()):
            if r["label"] not in labels:
                labels.append(r["label"])
    if len(labels) != 1:
        points = sorted({r["label"] for r in rows})
        what = "no grid point" if not labels else f"{len(labels)} grid points"
        raise ConfigError(f"--baseline {baseline}: {what} of this sweep match(es); its "
                          f"points: {'; '.join(points)}")
    return labels[0]


def decisions(rows: list[dict[str, Any]], base: str, metric: str, mode: str, design
              ) -> dict[str, Any]:
    """Per grid point other than `base`: its `SequentialReport` against `base` on the
    final `metric` ("+" wanted: higher is better, or lower for "min" / losses)."""
    lower = lower_is_better(metric) if mode == "auto" else mode == "min"
    by: dict[str, dict[int, float]] = {}
    for r in rows:
        by.setdefault(r["label"], {})[int(r["seed"])] = float(
            r["final"].get(metric, float("nan")))
    return {label: sequential_report(vals, by[base], "-" if lower else "+", design)
            for label, vals in by.items() if label != base}


def decided_md(reps: dict[str, Any], base: str, metric: str, design) -> str:
    lines = [f"# Seeds until decided: every grid point against {base}", "",
             f"Final `{metric}`, grid point − {base}, seed by seed; {design.text()}. A "
             "comparison is decided when its repeated interval excludes 0 (better: on the "
             "better side).", "", "| grid point − baseline | verdict |", "|---|---|"]
    word = {"held": "better", "reversed": "worse"}
    for label, rep in reps.items():
        text = sequential_text(rep, 1.0, 4)
        for k, v in word.items():
            text = text.replace(k, v, 1) if text.startswith(k) else text
        lines.append(f"| {label} − {base} | {text} |")
    return "\n".join(lines) + "\n"


def cmd_sweep_auto(args: argparse.Namespace, cmd_sweep: Callable[[argparse.Namespace], int],
                   files: dict[str, Callable]) -> int:
    """`sweep --seeds auto[:MAX]`: see the module docstring. `cmd_sweep` runs one batch
    (the sweep command with explicit seeds); `files` holds the sweep's writers of
    sweep.csv (rows), summary.md (summary, metric, title) and sweep.png (path, rows,
    summary, metric, title), named "csv", "summary" and "plot"."""
    try:
        design = seed_design(parse_auto_seeds(args.seeds), args.seed_batch)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    if not args.baseline:
        raise ConfigError("--seeds auto compares every grid point with one: give --baseline "
                          "KEY=VALUE (a grid point, e.g. --baseline client_lr=0.01)")
    check_baseline(args.grid, args.baseline)
    if not args.out:
        raise ConfigError("--seeds auto keeps its batches in the output folder: give --out")
    if getattr(args, "resume", ""):
        raise ConfigError("--seeds auto continues by itself: start the same command again "
                          "(finished batches are read back), without --resume")
    out = Path(args.out)
    if (out / "sweep.json").is_file():
        if not getattr(args, "overwrite", False):
            raise ConfigError(f"{out} holds a finished sweep: give another --out, or "
                              "--overwrite to replace it")
        shutil.rmtree(out / BATCHES, ignore_errors=True)
    metric = args.metric or "test_acc_seen"
    mode = args.metric_mode or "auto"
    rows: list[dict[str, Any]] = []
    last: dict[str, Any] = {}
    reps: dict[str, Any] = {}
    base = ""
    prev = 0
    for k, n in enumerate(design.looks):
        sub = out / BATCHES / f"seeds-{prev}-{n - 1}"
        done = sub / "sweep.json"
        if not done.is_file():
            print(f"fedjax-appeal: look {k + 1} of {len(design.looks)}: seeds {prev}..{n - 1} "
                  f"into {sub}", file=sys.stderr, flush=True)
            one = argparse.Namespace(**vars(args))
            one.seeds, one.out, one.baseline, one.seed_batch = (
                ",".join(map(str, range(prev, n))), str(sub), None, None)
            one.resume = str(sub) if (sub / "sweep-checkpoint").is_dir() else ""
            code = cmd_sweep(one)
            if code != 0 or not done.is_file():
                return code or 1
        last = json.loads(done.read_text())
        rows += last["rows"]
        prev = n
        base = base or baseline_label(rows, args.baseline)
        reps = decisions(rows, base, metric, mode, design)
        if all(r.stopped for r in reps.values()):
            break
    if not reps:
        raise ConfigError("--seeds auto needs a grid of two points at least (--grid KEY=A,B)")
    summary = summarize_sweep(rows, metric, mode)
    seeds = sorted({int(r["seed"]) for r in rows})
    results = {**last, "command": "fedjax-appeal " + " ".join(sys.argv[1:]), "seeds": seeds,
               "rows": rows, "summary": summary, "best": summary[0] if summary else {},
               "seeds_until_decided": {"baseline": base, "metric": metric,
                                       "design": design.text(),
                                       "comparisons": {label: sequential_record(rep)
                                                       for label, rep in reps.items()}}}
    title = f"{results.get('title', 'sweep')} (seeds until decided)"
    md = decided_md(reps, base, metric, design)
    report.write_outputs(out, {
        "sweep.json": lambda p: p.write_text(json.dumps(to_jsonable(results), indent=1,
                                                        allow_nan=False)),
        "sweep.csv": lambda p: p.write_text(files["csv"](rows)),
        "summary.md": lambda p: p.write_text(files["summary"](summary, metric, title)),
        "sweep.png": lambda p: files["plot"](p, rows, summary, metric, title),
        "decided.md": lambda p: p.write_text(md)})
    # every row is in sweep.json now: the batches are no longer needed (and `compare OUT`
    # would count their runs twice)
    shutil.rmtree(out / BATCHES, ignore_errors=True)
    print(md + f"wrote {out}/sweep.json, sweep.csv, summary.md, sweep.png, decided.md "
          f"({len(seeds)} seeds)")
    return 0
