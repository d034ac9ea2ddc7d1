"""`fedjax-appeal sweep`: every (grid point, seed) of an algorithm in one compiled program.

    fedjax-appeal sweep --algorithm fedavg --grid client_lr=0.1,0.05,0.01 \
        --grid server_lr=1,0.5 --seeds 0,1,2 [run flags] --metric test_acc_seen --out DIR

Writes into DIR (all-or-nothing): `sweep.json` (one row per run: grid values with the
resolved model and appeal setting, seed, final metrics, history; the ranked summary; the
best configuration; timing; the config and the hyperparameters the configurations use, as
`run` records them, see `run/records.py`), `sweep.csv` (one row per run, final metrics),
`summary.md` (configurations ranked by the metric, mean ± sample std over seeds, the std
`compare` reports) and `sweep.png` (the metric over rounds of the best configurations).
Seeds repeated for one configuration (grid values that resolve alike) are a one-line
warning.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import sys
from pathlib import Path
from typing import Any

import jax

from ..core.config import SEED_LIMIT, ConfigError
from ..execute.distributed import check_processes, is_main, make_mesh
from ..execute.layout import LAYOUT_FIELDS
from ..execute.runtime import program_cache_folder, runtime_record
from ..protocols.appeal.requirement import appeal_on, appeal_reason
from ..run import report  # write_outputs through its module: tests replace it
from ..run.checkpoint import (
    RESUMABLE_CHANGES,
    SWEEP_DIR,
    Interrupted,
    SweepCheckpoint,
    read_sweep_spec,
)
from ..run.diskspace import WriteFailed, reason
from ..run.outlock import out_lock
from ..run.records import (
    duplicate_seeds,
    mean_std_text,
    recorded_config,
    recorded_hparams,
    resolved_model,
    runs_of,
)
from ..run.report import prefetch_plotting, to_jsonable
from ..run.sequential import parse_auto_seeds
from ..run.sweep import check_grid, groups_of, parse_grid_arg, sweep
from ..run.tracking import LOG_DIR, log_finished_run, parse_kinds
from ..run.validate import SWEEP_FILES, check_ignored, check_source_size
from ..run.wallclock import command_split, split_text
from .commands import Subcommand
from .options import add_config_flags, given_keys, resolve
from .process import add_process_flags, clear_old_run, peer_advice, prepare_out
from .sweep_auto import cmd_sweep_auto
from .sweep_files import plot_sweep, summary_md, sweep_csv, sweep_hparams, sweep_title


def configure(p: argparse.ArgumentParser) -> None:
    add_config_flags(p)
    add_process_flags(p)
    s = p.add_argument_group("sweep")
    s.add_argument("--grid", action="append", default=[], metavar="KEY=V1,V2,...",
                   help="values of one HParams or RunConfig field (repeatable); HParams keys "
                        "share one vmapped program, RunConfig keys split compilations")
    s.add_argument("--seeds", default=None, metavar="S1,S2,...",
                   help="training seeds, one run per configuration and seed (default: 0); "
                        "--seed fixes the data partition; auto[:MAX] (with --baseline): "
                        "seeds 0, 1, ... in batches until every grid point's comparison "
                        "with the baseline is decided by a 95%% group-sequential interval, "
                        "at most MAX (default 40)")
    s.add_argument("--seed-batch", type=int, default=None, metavar="B",
                   help="with --seeds auto: seeds per batch (default 10)")
    s.add_argument("--baseline", default=None, metavar="KEY=VALUE",
                   help="with --seeds auto: the grid point every other one is compared "
                        "with, seed by seed on the final --metric (e.g. client_lr=0.01)")
    s.add_argument("--metric", default=None,
                   help="final-history metric ranking the configurations (mean over seeds; "
                        "default: test_acc_seen)")
    s.add_argument("--metric-mode", default=None, choices=("auto", "max", "min"),
                   help="maximise or minimise the metric (default auto: minimise losses "
                        "and the client dissimilarity)")
    s.add_argument("--max-parallel", type=int, default=None, metavar="N",
                   help="runs per vmapped batch (default 0 = as many as fit in memory)")
    s.add_argument("--lanes", type=int, default=None, metavar="N",
                   help="runs of a batch trained side by side in one vmap; the others follow "
                        "in a loop inside the same compiled program (default: 1 on CPU, "
                        "where a wide vmap spills the caches; all on GPU/TPU; 0 = all; with "
                        "--devices D, of each device's share)")
    p.epilog = ("Checkpoints: finished batches of combinations are kept in "
                "OUT/sweep-checkpoint/ as they finish, the running batch every "
                "--checkpoint-every rounds and on Ctrl-C; `sweep --resume OUT` continues "
                "(with the same grid, seeds and configuration).")


def _seeds(text: str) -> list[int]:
    try:
        seeds = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise ConfigError(f"--seeds {text!r}: give integers separated by commas, "
                          "e.g. --seeds 0,1,2") from None
    bad = [s for s in seeds if not 0 <= s < SEED_LIMIT]
    if bad:
        raise ConfigError(f"--seeds: {bad[0]} is not a seed; seeds lie in 0 .. 2^63 - 1")
    return seeds


def _resume_spec(args: argparse.Namespace) -> dict[str, Any]:
    """The spec of the sweep checkpoint named by --resume (empty without --resume)."""
    folder = getattr(args, "resume", "")
    return read_sweep_spec(Path(folder) / SWEEP_DIR) if folder else {}


def _check_same_sweep(spec: dict[str, Any], now: dict[str, Any], folder: str) -> None:
    """Refuse to resume a sweep whose grid, seeds or configuration changed."""
    free = set(RESUMABLE_CHANGES) - {"rounds"}  # a sweep's finished rows fix its rounds
    for part in ("grid", "seeds", "metric", "metric_mode", "max_parallel"):
        if spec.get(part) != now[part]:
            raise ConfigError(f"sweep checkpoint in {folder} was made with {part} "
                              f"{spec.get(part)!r}, not {now[part]!r}: drop the flag or "
                              "start a new sweep")
    for k, v in spec.get("config", {}).items():
        if k not in free and k in now["config"] and now["config"][k] != v:
            raise ConfigError(f"sweep checkpoint in {folder} was made with "
                              f"--{k.replace('_', '-')} {v!r}, not {now['config'][k]!r}: "
                              "drop the flag or start a new sweep")
    for k, v in spec.get("hparams", {}).items():
        if k in now["hparams"] and not math.isclose(float(v), now["hparams"][k],
                                                    rel_tol=1e-6):
            raise ConfigError(f"sweep checkpoint in {folder} was made with "
                              f"--{k.replace('_', '-')} {v}, not {now['hparams'][k]}: drop "
                              "the flag or start a new sweep")


def cpu_split_now() -> int:
    """The CPU split this process runs with (0: none), recorded for a resume."""
    n = jax.local_device_count()
    return n if jax.default_backend() == "cpu" and n > 1 else 0


def cmd_sweep(args: argparse.Namespace) -> int:

    try:
        auto = args.seeds is not None and parse_auto_seeds(args.seeds) is not None
    except ValueError as e:
        raise ConfigError(str(e)) from None
    if auto:
        return cmd_sweep_auto(args, cmd_sweep, {"csv": sweep_csv, "summary": summary_md,
                                                "plot": plot_sweep})
    if args.baseline is not None or args.seed_batch is not None:
        raise ConfigError("--baseline and --seed-batch go with --seeds auto[:MAX] (to compare "
                          "finished runs: fedjax-appeal compare --baseline)")
    del args.baseline, args.seed_batch
    spec = _resume_spec(args)
    given = given_keys(args)
    grid_args = args.grid
    seeds = _seeds(args.seeds) if args.seeds is not None else spec.get("seeds", [0])
    metric = args.metric or spec.get("metric", "test_acc_seen")
    mode = args.metric_mode or spec.get("metric_mode", "auto")
    max_par = args.max_parallel if args.max_parallel is not None else spec.get(
        "max_parallel", 0)
    for name in ("grid", "seeds", "metric", "metric_mode", "max_parallel"):
        delattr(args, name)
    base = {**{k: v for k, v in spec.get("config", {}).items() if k not in ("resume", "out")},
            **spec.get("hparams", {})}
    if spec:
        base["out"] = args.resume
    cfg, hp = resolve(args, base=base)
    if cfg.appeal == "auto" and metric.startswith(APPEAL_METRICS):  # ranked by its metrics
        cfg = cfg.replace(appeal="on")
    grid: dict[str, list[str]] = {}
    for g in grid_args:
        k, vals = parse_grid_arg(g)
        if k.replace("-", "_") in grid:
            raise ConfigError(f"--grid {k} given twice: list all its values in one --grid")
        grid[k.replace("-", "_")] = vals
    if spec and not grid:
        grid = spec.get("grid", {})
    if not cfg.out:
        cfg = cfg.replace(out=str(Path("runs") / f"sweep_{cfg.algorithm}_{cfg.dataset}"
                                  .replace(":", "_").replace("/", "_")))
    checked = check_grid(grid)
    for cfg_g in groups_of(cfg, checked):
        check_ignored(cfg_g, given | set(checked))
        check_source_size(cfg_g)
    # the layout is resolved before it is recorded, so that a resumed sweep (whose flags
    # come from the record) runs the same layout, hence the same programs
    if "layout" not in given and given & set(LAYOUT_FIELDS):
        cfg = cfg.replace(layout="manual")  # a layout flag given: taken as given
    elif cfg.layout == "auto":  # the grid sharded over every device (execute/layout.py)
        cfg = cfg.replace(devices=0)
    if args.lanes is None and spec.get("lanes") is not None:
        args.lanes = spec["lanes"]
    now = {"config": cfg.as_dict(),
           "hparams": hp.to_dict(),
           "grid": {k: [to_jsonable(v) for v in vs] for k, vs in checked.items()},
           "seeds": seeds, "metric": metric, "metric_mode": mode, "max_parallel": max_par}
    if spec:
        _check_same_sweep(spec, now, cfg.resume)
    check_processes(cfg.devices)
    prepare_out(cfg.out, SWEEP_FILES, args, cfg.resume)
    with out_lock(cfg.out):  # one sweep per folder
        return _sweep_locked(args, cfg, hp, checked, grid, seeds, metric, mode, max_par, spec,
                             now)


def _sweep_locked(args, cfg, hp, checked, grid, seeds, metric, mode, max_par, spec, now
                  ) -> int:
    """`cmd_sweep` once the configuration is checked and the output folder is ours."""
    if getattr(args, "overwrite", False):
        clear_old_run(cfg.out, SWEEP_FILES)
    ck_dir = Path(cfg.out) / SWEEP_DIR
    ckpt = SweepCheckpoint(ck_dir, cfg.checkpoint_every,
                           {**now, "parallel": spec.get("parallel", {}),
                            "cpu_devices": cpu_split_now(), "lanes": args.lanes})
    peer_advice(cfg.out, 1)
    main = is_main()

    def say(msg: str) -> None:
        if main:
            print(f"fedjax-appeal: {msg}", file=sys.stderr, flush=True)

    if main:
        prefetch_plotting()
    folder = program_cache_folder()
    try:
        res = sweep(cfg, checked, seeds, hp=hp, metric=metric, mode=mode,
                    max_parallel=max_par, progress=say, checkpoint=ckpt,
                    resume=bool(spec), mesh=make_mesh(cfg.devices), lanes=args.lanes,
                    program_cache=None if folder is None else str(folder))
    except KeyboardInterrupt:
        raise Interrupted(f"finished combinations are kept in {ck_dir}: continue with "
                          f"`fedjax-appeal sweep --resume {cfg.out}`") from None
    if not main:
        return 0
    title = sweep_title(cfg, checked)
    results = {"command": "fedjax-appeal " + " ".join(sys.argv[1:]),
               "config": recorded_config(cfg, resolved_model(cfg)),
               "hparams": sweep_hparams(cfg, hp, checked),
               "appeal_protocol": {"on": appeal_on(cfg), "why": appeal_reason(cfg)},
               "grid": grid, "seeds": seeds, "metric": metric, "best": res.best,
               "summary": res.summary, "rows": res.rows, "timing": res.timing,
               "runtime": {**runtime_record(),
                           "program_cache": None if folder is None else str(folder)}}
    clock = getattr(args, "clock", None)
    if clock is not None:  # the process up to the writing of the results
        res.timing["process"] = _process_split(clock, res.timing)
    writers = {
        "sweep.json": lambda p: p.write_text(json.dumps(to_jsonable(results), indent=1,
                                                        allow_nan=False)),
        "sweep.csv": lambda p: p.write_text(sweep_csv(res.rows)),
        "summary.md": lambda p: p.write_text(summary_md(res.summary, metric, title)),
        "sweep.png": lambda p: plot_sweep(p, res.rows, res.summary, metric, title),
    }
    try:
        out = report.write_outputs(cfg.out, writers)
    except OSError as e:
        raise WriteFailed(f"could not write the sweep's results to {cfg.out} ({reason(e)}); "
                          f"every finished run stays in {ck_dir / 'rows.json'}: free space, "
                          f"then `fedjax-appeal sweep --resume {cfg.out}` writes them without "
                          "training") from None
    # the results are written: the finished batches kept for a resume are no longer needed
    shutil.rmtree(ck_dir, ignore_errors=True)
    if cfg.log:  # one tracked run per (grid point, seed)
        for row in res.rows:
            name = f"{row['label']}/seed-{row['seed']}"
            cfg_row = cfg.replace(**row["static"])
            log_finished_run(parse_kinds(cfg.log), Path(out) / LOG_DIR / name, name,
                             {**recorded_config(cfg_row, row["static"]["model"]),
                              "seed": row["seed"]},
                             recorded_hparams(cfg_row, hp.with_values(**row["hparams"])),
                             row["history"])
    for msg in duplicate_seeds(runs_of(to_jsonable(results), str(Path(out) / "sweep.json"))):
        print(f"fedjax-appeal: warning: {msg}", file=sys.stderr)
    b = res.best
    print(f"best ({metric}, mean over {len(seeds)} seed(s)): {b['label']}  "
          f"{mean_std_text(b[f'{metric}_mean'], b[f'{metric}_std'])}; {len(res.rows)} runs in "
          f"{res.timing['total_s']:.1f}s; wrote {out}/sweep.json, sweep.csv, summary.md, "
          "sweep.png")
    if clock is not None:
        s = _process_split(clock, res.timing)
        print(split_text(s, s["programs"]), file=sys.stderr)
    return 0


def _process_split(clock, timing: dict[str, Any]) -> dict[str, Any]:
    """The sweep's wall clock so far: compile / train / eval / data / other."""
    groups = timing["groups"]
    return command_split(clock, sum(g["run_s"] + g["init_s"] for g in groups),
                         sum(g["eval_s"] for g in groups), timing["data_s"])


# History metrics that only the appeal protocol computes.
APPEAL_METRICS = ("gm_appeal", "preferred_acc", "appeal_", "solo_")


def subcommand() -> Subcommand:
    return Subcommand(configure, cmd_sweep,
                      "run a grid of hyperparameters x seeds as one vmapped program")
