"""`fedjax-appeal reproduce NAME`: named experiments that regenerate the papers' tables.

An experiment is a function `fn(ctx) -> None` registered with `@experiment(name, help)`;
it runs its configurations through `ctx.run(...)` (progress shown), then writes its files
(a markdown table with the paper's numbers beside ours, a JSON of all numbers, plots) with
`ctx.write(...)`, all-or-nothing, into `ctx.out` (default `runs/reproduce/NAME`, or
`runs/reproduce/NAME-quick` with `--quick`: a user's own folder, so running an experiment
never rewrites the committed reports in `results/`; `--out results/NAME` does, when asked).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import importlib
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

import fedjax_appeal  # run_config through the package: tests replace it
from fedjax_appeal import (
    ConfigError,
    Heartbeat,
    HParams,
    RunConfig,
    cache_dir,
    check_out,
    did_you_mean,
    parse_auto_seeds,
    program_cache_folder,
    seed_design,
    sequential_text,
    to_jsonable,
    write_outputs,
)
from papers.cost import Spent, cost_lines, cost_record
from papers.decide import annotate, run_until_decided


@dataclasses.dataclass
class Context:
    """What an experiment gets: seeds, output folder, data locations, quick mode."""

    name: str
    seeds: list[int]
    out: Path
    quick: bool = False
    data_dir: str = ""
    fmnist_dir: str = ""
    cache_dir: str = ""
    command: str = ""
    reuse: bool = True  # serve runs finished earlier with the same code from the run cache
    options: dict[str, str] = dataclasses.field(default_factory=dict)  # `--set KEY=VALUE`
    robustness: bool = False  # `--robustness`: the shared-lr check instead of the table
    client_lr: float | None = None  # set: every run's client lr (`papers.shared_lr`)
    t0: float = dataclasses.field(default_factory=time.perf_counter)
    clock: Any = None  # the command's `CommandClock` (its start and compile log), if any
    spent: Spent = dataclasses.field(default_factory=Spent)  # what the computed runs took
    # `--seeds auto` (`papers.decide`): the looks, the main claim, the last look's decision
    design: Any = None  # a `fedjax_appeal.SeedDesign`
    claim: Any = None  # a `papers.decide.MainClaim`
    decision: Any = None  # a `fedjax_appeal.SequentialReport`
    # a `fedjax_appeal.Heartbeat` writing through `line` while the experiment runs (set by
    # the command): told each step of the runs, it writes a line when one lasts long
    heartbeat: Any = None

    def base(self, **kw) -> RunConfig:
        """A RunConfig with this context's data locations, then `kw`."""
        loc = {k: v for k, v in (("data_dir", self.data_dir), ("fmnist_dir", self.fmnist_dir),
                                 ("cache_dir", self.cache_dir)) if v}
        return RunConfig(**{**loc, **kw})

    def option(self, key: str, default: str = "") -> str:
        """The value given with `--set KEY=VALUE` (declared by the experiment), or
        `default`."""
        return self.options.get(key, default)

    def flag(self, key: str) -> bool:
        """A yes/no option: `--set KEY=1|true|yes|on` or `0|false|no|off` (default off)."""
        v = self.option(key).lower()
        if v in ("", "0", "false", "no", "off"):
            return False
        if v in ("1", "true", "yes", "on"):
            return True
        raise ConfigError(f"--set {key}={v}: give 1/true/yes/on or 0/false/no/off")

    def line(self, msg: str) -> None:
        """Write one progress line: `[NAME  seconds] msg` on stderr."""
        sys.stderr.write(f"[{self.name} {time.perf_counter() - self.t0:7.0f}s] {msg}\n")
        sys.stderr.flush()

    def log(self, msg: str) -> None:
        self.line(msg)
        if self.heartbeat is not None:
            self.heartbeat.mark()

    def phase(self, what: str):
        """`with ctx.phase("loading ..."):` names a step for the heartbeat (if any)."""
        return (contextlib.nullcontext() if self.heartbeat is None else
                self.heartbeat.phase(what))

    def _cache_path(self, cfg: RunConfig, hp: HParams) -> Path | None:
        """Where the run cache keeps this run (None without `reuse`)."""
        if self.client_lr is not None:
            hp = hp.replace(client_lr=self.client_lr)
        return run_cache(self.cache_dir) / f"{run_key(cfg, hp)}.json" if self.reuse else None

    def cached(self, cfg: RunConfig, hp: HParams) -> bool:
        """Whether `run(cfg, hp)` would be served from the run cache."""
        path = self._cache_path(cfg, hp)
        return path is not None and path.is_file()

    def run(self, cfg: RunConfig, hp: HParams, label: str = "", **kw):
        """Run one configuration (see `experiment.run_config`); logs start and end.

        Returns (results dict, simulation result). Finished runs are kept in the run cache
        (`run_cache`), keyed by configuration, hyperparameters and code only: an interrupted
        experiment re-run with the same code continues where it stopped, and experiments
        that share a configuration (e.g. the FedAvg/MaxFL runs of several appeal tables)
        compute it once; a run served from the cache returns None as simulation result.
        """
        path = self._cache_path(cfg, hp)
        if self.client_lr is not None:
            hp = hp.replace(client_lr=self.client_lr)
        what = f"{label or cfg.algorithm} seed {cfg.seed}"
        if path is not None and path.is_file():
            results = json.loads(path.read_text())
            self.log(f"{what}: finished earlier with this code (cached in {path.parent})")
            self.spent.cached += 1
            return results, None
        self.log(f"{what}: {cfg.rounds} rounds ...")
        kw.setdefault("program_cache", program_cache_folder())
        kw.setdefault("heartbeat", self.heartbeat)
        results, sim = fedjax_appeal.run_config(cfg, hp, **kw)
        self.spent.add_run(results)
        last = results["history"][-1]
        self.log(f"{what}: done, test_acc_seen {last.get('test_acc_seen', float('nan')):.4f}")
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps(results, default=_plain))
            os.replace(tmp, path)
        return results, sim

    def cost(self) -> dict[str, Any]:
        """What the experiment cost so far (`papers.cost.cost_record`)."""
        return cost_record(self.spent, self.t0, self.clock)

    def write(self, files: dict[str, Callable[[Path], None] | str | dict]) -> Path:
        """Write files all-or-nothing; values are writer functions, text, or JSON data.

        A report records its cost (`papers.cost`): JSON data gets a `cost` entry and a
        markdown text ends with a "Cost" section. With `--seeds auto` the look's decision
        is added first (`papers.decide.annotate`)."""
        if self.design is not None:
            files = annotate(self, files)
        rec = self.cost()
        files = {name: ({**v, "cost": rec} if isinstance(v, dict) and name.endswith(".json")
                        else v.rstrip("\n") + "\n" + "\n".join(cost_lines(rec))
                        if isinstance(v, str) and name.endswith(".md") else v)
                 for name, v in files.items()}
        writers = {}
        for name, v in files.items():
            if callable(v):
                writers[name] = v
            elif isinstance(v, str):
                writers[name] = lambda p, v=v: p.write_text(v)
            else:
                writers[name] = lambda p, v=v: p.write_text(
                    json.dumps(to_jsonable(v), indent=1, allow_nan=False))
        return write_outputs(self.out, writers)


def _plain(obj: Any) -> Any:
    """json `default`: numpy scalars/arrays to Python (NaN kept, unlike `to_jsonable`)."""
    a = np.asarray(obj)
    return a.item() if a.ndim == 0 else a.tolist()


@functools.cache
def source_hash() -> str:
    """sha256 of the library's Python sources (`fedjax_appeal/`; the experiments here only
    choose the configurations: a run is fully described by its configuration and the library
    code): a cached run is reused only by the same library code."""
    h = hashlib.sha256()
    root = Path(fedjax_appeal.__file__).resolve().parent
    for f in sorted(root.rglob("*.py")):
        h.update(str(f.relative_to(root)).encode())
        h.update(f.read_bytes())
    return h.hexdigest()


def run_key(cfg: RunConfig, hp: HParams) -> str:
    """Cache key of one run: its configuration (data locations aside), hyperparameters and
    the package's source hash."""
    c = {k: v for k, v in cfg.as_dict().items()
         if k not in ("data_dir", "fmnist_dir", "cache_dir", "out")}
    h = hp.to_dict()
    blob = json.dumps({"config": c, "hparams": h, "code": source_hash()}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:24]


def run_cache(explicit: str = "") -> Path:
    """Folder of finished experiment runs: `<cache>/runs` (see `data.sources.cache_dir`)."""
    return cache_dir(explicit or None) / "runs"


EXPERIMENTS: dict[str, tuple[Callable[[Context], None], str]] = {}
OPTIONS: dict[str, dict[str, str]] = {}  # experiment -> its `--set` options (key -> help)
ROBUST: set[str] = set()  # experiments with a `--robustness` mode (`papers.robustness`)
CLAIMS: dict[str, Any] = {}  # experiment -> its main claim (`papers.decide.MainClaim`)
# Modules whose import registers experiments.
MODULES: list[str] = [
    "papers.tour.tour",  # the tour: one paired comparison per paper family
    "papers.appeal.tables",  # MaxFL and IncFL appeal tables
    "papers.appeal.mean_estimation_figure",  # MaxFL Figure 2 (mean estimation)
    "papers.appeal.tune",  # the hyperparameter search of those tables
    "papers.selection.tables",  # client selection tables
    "papers.expalpha.tables",  # Exp-alpha tables
    "papers.expalpha.gaps",  # Exp-alpha diagnostic
    "papers.hetero.tables",  # FedNova, FedBuff tables
]


DEFAULT_SEEDS = (0, 1, 2)
SEEDS: dict[str, tuple[int, ...]] = {}  # experiment -> its default seeds


def experiment(name: str, help: str, options: dict[str, str] | None = None,
               robustness: bool = False, shared_lr: Any = None,
               seeds: Sequence[int] = DEFAULT_SEEDS, claim: Any = None):
    """Register experiment `name`; `options` declares what `--set KEY=VALUE` may set for it
    (key -> help), read with `ctx.option(KEY)` / `ctx.flag(KEY)`; `robustness`: it reads
    `ctx.robustness` (`reproduce NAME --robustness`); `shared_lr` (a
    `papers.shared_lr.SharedLr`): `--robustness` reruns the whole experiment at each of its
    lrs (its `check`); `seeds`: the seeds it runs without `--seeds`; `claim` (a
    `papers.decide.MainClaim`): its main claim, which `--seeds auto` decides."""
    def deco(fn: Callable[[Context], None]):
        def run(ctx: Context) -> None:
            if ctx.robustness and shared_lr is not None:
                shared_lr.check(ctx, fn)
            else:
                fn(ctx)

        EXPERIMENTS[name] = (run if shared_lr is not None else fn, help)
        OPTIONS[name] = dict(options or {})
        SEEDS[name] = tuple(int(s) for s in seeds)
        if claim is not None:
            CLAIMS[name] = claim
        if robustness or shared_lr is not None:
            ROBUST.add(name)
        return fn

    return deco


def parse_options(name: str, items: Sequence[str]) -> dict[str, str]:
    """`--set KEY=VALUE` items of experiment `name`, checked against its declared options."""
    declared = OPTIONS.get(name, {})
    out: dict[str, str] = {}
    for item in items:
        key, eq, value = item.partition("=")
        key = key.strip().replace("-", "_")
        if not eq or not key:
            raise ConfigError(f"--set {item!r}: write KEY=VALUE (e.g. --set profile=gpu)")
        if key not in declared:
            known = (f"its options: {', '.join(f'{k} ({h})' for k, h in declared.items())}"
                     if declared else "it takes no --set options")
            close = did_you_mean(key, declared)
            hint = f" (did you mean {close!r}?)" if close else ""
            raise ConfigError(f"reproduce {name} has no option {key!r}{hint}; {known}")
        out[key] = value.strip()
    return out


def mean_std(values: Sequence[float], scale: float = 1.0, digits: int = 2) -> str:
    """'mean ± std' (population std over seeds) of `values * scale`."""
    a = np.asarray([v for v in values if v is not None], np.float64) * scale
    if a.size == 0:
        return "n/a"
    return f"{a.mean():.{digits}f} ± {a.std():.{digits}f}"


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(str(h) for h in header) + " |",
             "| " + " | ".join("---" for _ in header) + " |"]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def load_modules() -> None:
    """Import the modules of `MODULES` (they register their experiments)."""
    for mod in MODULES:
        importlib.import_module(mod)


def make_context(args: Any, name: str, out: Path | None = None,
                 command: str | None = None):
    """The `papers.reproduce.Context` of `reproduce NAME` with these arguments (seeds or
    the `--seeds auto` design and main claim, options, output folder), every argument
    checked before any slow work; `out` replaces the default folder."""
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
    # a line while a step lasts long; steps the experiment does not name are "reproduce NAME"
    with Heartbeat(ctx.line) as ctx.heartbeat, ctx.heartbeat.phase(f"reproduce {ctx.name}"):
        if ctx.design is None:
            fn(ctx)
            print(f"wrote {ctx.out}")
            return
        rep = run_until_decided(ctx, fn)
    print(f"{ctx.claim.label}: {sequential_text(rep, 1.0, ctx.claim.digits)}")
    print(f"wrote {ctx.out}")


def auto_design(args: Any, has_claim: bool, name: str):
    """The `fedjax_appeal.SeedDesign` of `--seeds auto[:MAX]` and `--seed-batch` (None for
    explicit seeds), refused in one line where it cannot apply."""
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
