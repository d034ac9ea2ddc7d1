"""Hyperparameter sweeps as one compiled program: `jax.vmap` over (HParams, seed).

Every grid key that is a field of `HParams` (learning rates, FedProx mu, MaxFL epsilon,
...) only enters arithmetic, so all its values and all seeds run as ONE vmapped program:
the server state, the hyperparameters and the run keys get a leading "combination" axis,
and the chunk of rounds (`driver.make_chunk`) and the evaluation are vmapped over it, in the
one driver that runs use too (`driver.Driver`).
Grid keys that are fields of `RunConfig` (local steps, batch size, cohort, model,
algorithm, ...) change shapes or program structure; each of their combinations is a
separate group with its own compilation.

With `cfg.appeal` (the default) every run gets the appeal protocol of MaxFL, as
`fedjax-appeal run` does (`appeal.with_appeal`: solo models per combination, since they
depend on the client lr; GM-Appeal / preferred-model metrics; opt-out participation), so a
sweep can rank configurations by `gm_appeal_seen`. Fine-tuning personalization
(`--finetune-steps`) is evaluated by `run` only, not by sweeps.

Seeds vary the run key (model init, cohort sampling, minibatches, dropout) exactly as
`simulate(..., key=jax.random.key(seed))` does, so row i of a sweep equals the run of its
configuration by `simulate` (up to float reassociation of the batched matmuls; a batch of
one combination has no runs axis, so it is the run's own program, equal bit for bit). The data
partition is fixed by `data_seed(cfg)` for a static group (one federation, all its runs on
it); `--grid data_seed=0,1,2` makes the partition a static key, one federation per value.

When the vmapped batch would not fit in memory, a group's combinations run in batches of
`max_parallel` one after another (estimated from the parameter count, cohort, batch size
and the device's memory; see `auto_parallel`). A batch that is not full is padded with
copies of its first combination, so every batch of a group reuses one compilation.
"""

from __future__ import annotations

import dataclasses
import difflib
import itertools
import math
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import jax
import numpy as np

from ..core.arrays import FederatedData
from ..core.config import (
    ConfigError,
    HParams,
    RunConfig,
    field_names,
)
from ..core.fields import OPTIONS
from ..core.memory import memory_budget
from ..core.models import abstract_key
from ..core.registry import did_you_mean
from ..core.tunables import plugin_tunables
from ..data import Dataset, data_fields, load_federated
from ..evaluate.metrics import summarize
from ..execute.programs import ProgramCache
from ..protocols.appeal.requirement import appeal_on
from .assemble import assemble, program_context
from .compare import lower_is_better
from .driver import Driver, eval_rounds, root_keys
from .experiment import loading_phase
from .progress import Heartbeat, phase, scope
from .records import sample_std
from .schema import declared_error
from .validate import component_registries, validate

# Keys a grid may not sweep (they name the sweep itself or its output).
FORBIDDEN = {"seed": "give training seeds with --seeds (the data seed is --data-seed)",
             "out": "the sweep writes one output folder (--out)",
             "resume": "continue a sweep with --resume OUT",
             "checkpoint_every": "all runs of a sweep share --checkpoint-every",
             "rounds": "all runs of a sweep share --rounds", "eval_every":
             "all runs of a sweep share --eval-every"}


@dataclasses.dataclass
class SweepResult:
    # one per (config, seed): hparams (its grid point), static (its RunConfig grid values,
    # with the resolved model and appeal setting), seed, history, final
    rows: list[dict[str, Any]]
    summary: list[dict[str, Any]]  # one per config: mean/std of the metric over seeds, ranked
    best: dict[str, Any]  # the first entry of `summary`
    timing: dict[str, Any]


def _convert(key: str, raw: Any) -> Any:
    """A grid value (string from the CLI, or a Python value) as the option's type."""
    t = OPTIONS[key].type
    try:
        if t == "float":
            v = float(raw)
            if not math.isfinite(v):
                raise ValueError
            return v
        if t == "int":
            if isinstance(raw, float) and not raw.is_integer():
                raise ValueError
            return int(raw)
        if t == "bool":
            if isinstance(raw, bool):
                return raw
            if str(raw).lower() in ("1", "true", "yes", "on", "0", "false", "no", "off"):
                return str(raw).lower() in ("1", "true", "yes", "on")
            raise ValueError
        return str(raw)
    except (TypeError, ValueError):
        raise ConfigError(f"grid {key}: {raw!r} is not a valid {t} value") from None


def declared(key: str, value: Any) -> str | None:
    """The declaration's refusal of one value of an option."""
    o = OPTIONS[key]
    if o.registry:
        try:
            component_registries()[o.registry].check(value)
        except ConfigError as e:
            return str(e)
    return declared_error(key, value, o.metadata, o.type)


def check_grid(grid: dict[str, Sequence[Any]]) -> dict[str, list[Any]]:
    """Validate grid keys and convert values; raises `ConfigError` (one line) on bad input."""
    known_hp, known_run = set(field_names(HParams)), set(field_names(RunConfig))
    out: dict[str, list[Any]] = {}
    for key, values in grid.items():
        k = key.replace("-", "_")
        if k in FORBIDDEN:
            raise ConfigError(f"grid key '{key}' cannot be swept: {FORBIDDEN[k]}")
        if k not in known_hp and k not in known_run:
            names = sorted(known_hp | known_run)
            guess = did_you_mean(k, names)
            close = ([guess] if guess else
                     [n for n in names if k.lower() in n or n in k.lower()][:3])
            hint = f" (did you mean {', '.join(close)}?)" if close else ""
            raise ConfigError(f"unknown grid key '{key}'{hint}; use a hyperparameter "
                              "(e.g. client_lr, qffl_q), a plugin's registered tunable "
                              f"({', '.join(plugin_tunables()) or 'none'}) or a static "
                              "option (e.g. local_steps)")
        if isinstance(values, str | bytes) or not isinstance(values, Sequence) or not values:
            raise ConfigError(f"grid {key}: give a non-empty list of values")
        vals = [_convert(k, v) for v in values]
        for v in vals:  # each value within its field's declaration
            err = declared(k, v)
            if err:
                raise ConfigError(f"grid {key}: {err}")
        if len(set(vals)) != len(vals):
            raise ConfigError(f"grid {key}: repeated value in {list(values)}")
        out[k] = vals
    return out


def groups_of(cfg: RunConfig, grid: dict[str, list[Any]]) -> list[RunConfig]:
    """The configuration of each static group of a checked grid (RunConfig keys only)."""
    run_keys = [k for k in grid if k not in field_names(HParams)]
    return [cfg.replace(**dict(zip(run_keys, v, strict=True)))
            for v in itertools.product(*(grid[k] for k in run_keys))]


def parse_grid_arg(text: str) -> tuple[str, list[str]]:
    """'client_lr=0.1,0.05' -> ('client_lr', ['0.1', '0.05'])."""
    if "=" not in text:
        raise ConfigError(f"--grid {text!r}: write KEY=V1,V2,... (e.g. client_lr=0.1,0.05)")
    key, _, vals = text.partition("=")
    items = [v.strip() for v in vals.split(",")]
    if not key.strip() or not any(items):
        raise ConfigError(f"--grid {text!r}: write KEY=V1,V2,... (e.g. client_lr=0.1,0.05)")
    if not all(items):
        raise ConfigError(f"--grid {text!r}: a value between two commas (or after the last) is "
                          "empty: write KEY=V1,V2,... with every value given")
    return key.strip(), items


def _stack(hps: list[HParams]) -> HParams:
    """The runs' hyperparameters stacked [P] on the host (numpy: stacking on the device
    compiles a program per number of runs; the driver places them, sharded or not)."""
    arrs = [h.as_arrays() for h in hps]
    return jax.tree.map(lambda *xs: np.stack([np.asarray(x) for x in xs]), *arrs)


def _batch(combos: list, par: int, hps: list[HParams], bi: int):
    """Batch `bi` of a group: its (point, seed) combinations, and their hyperparameters and
    seeds padded to `par` runs (padding repeats the first combination)."""
    batch = combos[bi * par:(bi + 1) * par]
    padded = batch + [batch[0]] * (par - len(batch))
    return (batch, _stack([hps[pi] for pi, _ in padded]),
            np.array([s for _, s in padded], dtype=np.uint32))


def combo_bytes(n_params: int, cfg: RunConfig, data: FederatedData) -> int:
    """Rough bytes one vmapped run needs at peak (float32).

    Per cohort client: delta, local params, gradients, optimiser slot (4 copies of the
    parameters) and the minibatch activations; plus the server state (params, optimiser
    state) and the evaluation chunk of 2048 rows.
    """
    in_dim = int(np.prod(data.input_shape))
    per_client = 4 * n_params + 4 * cfg.batch_size * (in_dim + 512)
    return 4 * (cfg.cohort * per_client // 4 + 6 * n_params + 2048 * (in_dim + 512))


def auto_parallel(n_params: int, cfg: RunConfig, data: FederatedData,
                  budget: int | None = None) -> int:
    """How many runs fit in one vmapped batch (at least 1)."""
    budget = memory_budget() if budget is None else budget
    return max(1, int(budget // max(1, combo_bytes(n_params, cfg, data))))


def auto_lanes() -> int:
    """Lanes of a sweep that names none: 1 on CPU, 0 (all runs of a batch) elsewhere.

    On CPU a wide vmap multiplies the working set of every batched matmul by the number of
    lanes (15 FedAvg runs of cohort 10 with batch 128 hold 150 client models at once):
    measured, one compiled `lax.map` over the runs costs 0.58x the CPU time of a 15-wide
    vmap and the same as 15 separate runs; in wall time the two layouts tie on an idle
    2-core machine (0.99 / 0.98 of the one-by-one throughput) and the narrow one holds up
    under load (0.88 against 0.67; benchmarks/RESULTS.md, sweep throughput). GPUs need the
    width to fill their cores.
    """
    return 1 if jax.default_backend() == "cpu" else 0


def batch_driver(alg, data: FederatedData, hps: HParams, seeds: np.ndarray, *, lanes: int = 0,
                 mesh=None, compiled: dict | None = None, programs=None,
                 heartbeat: Heartbeat | None = None) -> Driver:
    """The `driver.Driver` of P combinations (stacked `hps` [P], `seeds` [P]); one
    combination runs without the runs axis (the program of `simulate`)."""
    p = int(seeds.shape[0])
    one = p == 1
    keys = root_keys(jax.device_put(np.asarray(seeds, np.uint32)))
    if one:  # no runs axis: the program of a single run
        hps, keys = jax.tree.map(lambda a: a[0], (hps, keys))
    return Driver(alg, data, hps, keys, runs=None if one else p, lanes=lanes, mesh=mesh,
                  compiled=compiled, keep_metric=lambda k, v: np.ndim(v) == (1 if one else 2),
                  programs=programs, heartbeat=heartbeat)


def run_batch(alg, data: FederatedData, hps: HParams, seeds: np.ndarray, *, rounds: int,
              eval_every: int, compiled: dict, progress: Callable[[str], None] | None = None,
              label: str = "", mesh=None, restore: Callable | None = None,
              save: Callable | None = None, save_every: int = 0, lanes: int = 0,
              programs=None, metric: str = "test_acc_seen", lower: bool = False,
              configs: Sequence[str] | None = None, heartbeat: Heartbeat | None = None
              ) -> tuple[list[list[dict]], dict[str, np.ndarray], dict]:
    """Run P combinations (stacked `hps` [P], `seeds` [P]) as one compiled program of the
    shared `driver.Driver`; a batch of one combination runs without the runs axis, so it is
    the same program as `simulate` (and `fedjax-appeal run`) and gives the same numbers bit
    for bit.

    Returns per combination its history (same schedule as `simulate`), per-round scalar
    metrics [P, rounds], and timing. `compiled` caches executables across batches of a group.

    Args:
      mesh: a `distributed` mesh: the combination axis (P, a multiple of the mesh size) is
        sharded over its devices (every process's, with several processes), the data
        replicated.
      restore: `restore(state_template)` -> (state, round, histories, per_round) of a
        saved batch, or None (start at round 0).
      save, save_every: `save(state, round, histories, per_round)` every `save_every`
        rounds (and, on Ctrl-C, at the last finished chunk before `KeyboardInterrupt` is
        raised again).
      lanes: combinations trained side by side (`driver.combine_lanes`; 0 = all P; with a
        mesh, of each device's P / D); the rest follows inside the same program.
      programs: an `execute.programs.ProgramCache` for `alg` (see `driver.Driver`).
      metric, lower, configs: what the progress line reports, the statistic the summary
        ranks by: the best mean of `metric` over the seeds of one configuration (`configs`:
        the configuration label of each of the first len(configs) runs; the others are
        padding; lower: smaller is better).
      heartbeat: a `progress.Heartbeat` told each step of the batch; its lines start with
        `label`.
    """
    with scope(heartbeat, label):
        return _run_batch(alg, data, hps, seeds, rounds=rounds, eval_every=eval_every,
                          compiled=compiled, progress=progress, label=label, mesh=mesh,
                          restore=restore, save=save, save_every=save_every, lanes=lanes,
                          programs=programs, metric=metric, lower=lower, configs=configs,
                          heartbeat=heartbeat)


def _run_batch(alg, data, hps, seeds, *, rounds, eval_every, compiled, progress, label, mesh,
               restore, save, save_every, lanes, programs, metric, lower, configs, heartbeat):
    """`run_batch` inside its heartbeat scope."""
    drv = batch_driver(alg, data, hps, seeds, lanes=lanes, mesh=mesh, compiled=compiled,
                       programs=programs, heartbeat=heartbeat)
    one = drv.runs is None
    state = drv.init()
    restored = restore(state) if restore is not None else None
    if restored is not None:
        state, r, histories, per_round = restored
        drv.histories[:] = [list(h) for h in histories]
        drv.per_round[:] = per_round
        state = drv.place(state)
    else:
        r = 0
        drv.record(0, drv.evaluate(state))
    start = r
    evals = set(eval_rounds(rounds, eval_every))
    saves = set(range(save_every, rounds, save_every)) if save and save_every > 0 else set()
    t_start = time.perf_counter()

    def after(r, st, entries):
        if r in saves:
            save(st, r, drv.histories, drv.per_round)
        if progress is not None and r in evals:
            el = time.perf_counter() - t_start
            best, n = best_mean(drv.histories, configs, metric, lower)
            # the pace of training and evaluation only: the driver times both without
            # compiling
            busy = drv.train_s + sum(drv.eval_times[1:])  # [0]: the round-0 evaluation
            eta = busy / max(1, r - start) * (rounds - r)
            progress(f"{label}round {r}/{rounds}  best {metric} {best:.4f} (mean of {n} "
                     f"seed(s))  elapsed {el:.0f}s eta {eta:.0f}s")

    def interrupted(r, st):
        if save is not None and r > start:
            save(st, r, *drv.at_round(r))

    drv.run(state, start, rounds=rounds, eval_every=eval_every, saves=saves, after=after,
            interrupted=interrupted)
    rm = drv.round_metrics()
    if one:
        rm = {k: v[None] for k, v in rm.items()}
    t = drv.timing
    timing = {"compile_s": t["init_compile_s"] + t["eval_compile_s"] + t["compile_s"],
              "run_s": drv.train_s, "init_s": drv.init_s,
              "eval_s": float(sum(drv.eval_times))}
    return drv.histories, rm, timing


def best_mean(histories: Sequence[list[dict]], configs: Sequence[str] | None, metric: str,
              lower: bool) -> tuple[float, int]:
    """(best mean, its number of seeds): the mean of `metric` in each run's latest history
    entry over the runs of one configuration (`configs[i]`, the label of run i; runs past
    len(configs) are padding; None: every run its own), the best of those (NaN means rank
    last, as in `summarize_sweep`)."""
    labels = list(configs) if configs is not None else [str(i) for i in range(len(histories))]
    by: dict[str, list[float]] = {}
    for lab, h in zip(labels, histories, strict=False):
        by.setdefault(lab, []).append(float(h[-1].get(metric, float("nan"))))
    scored = [(float(np.mean(v)), len(v)) for v in by.values()]
    finite = [x for x in scored if math.isfinite(x[0])]
    if not finite:
        return float("nan"), scored[0][1] if scored else 0
    return (min if lower else max)(finite, key=lambda x: x[0])


def check_metric(alg, data: FederatedData, hp: HParams, metric: str) -> None:
    """Refuse a ranking metric the history will not hold, before anything trains.

    The history keys come from `metrics.summarize` applied to zeros of the shapes that
    `alg.evaluate` returns (`jax.eval_shape`: nothing is computed). A sweep checks its
    first batch's shapes instead (`metric_check`), which cost no tracing of their own.
    """
    hp = hp.as_arrays()
    state = jax.eval_shape(alg.init, abstract_key(), data, hp)
    metric_check(metric)(jax.eval_shape(alg.evaluate, state, data, hp))


def metric_check(metric: str) -> Callable[[Any], None]:
    """check(shapes): refuse `metric` unless the history of a run whose evaluation returns
    `shapes` holds it."""
    def check(shapes) -> None:
        zeros = jax.tree.map(lambda a: np.ones(a.shape, a.dtype), shapes)
        with np.errstate(all="ignore"):
            keys = [k for k in summarize(zeros) if k != "round"]
        _refuse_unknown(metric, keys)

    return check


def _refuse_unknown(metric: str, keys: list[str]) -> None:
    if metric not in keys:
        first = did_you_mean(metric, keys)
        close = [first] if first else []
        close += [k for k in difflib.get_close_matches(metric.lower(), keys, n=3)
                  if k not in close][:3 - len(close)]
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        raise ConfigError(f"--metric {metric!r} is not in the history{hint}; choose one of: "
                          + ", ".join(keys))


def point_label(static: dict[str, Any], point: dict[str, float]) -> str:
    """A configuration's label: its static grid values, then its hyperparameters."""
    return ", ".join([f"{k}={v}" for k, v in static.items()]
                     + [f"{k}={v:g}" for k, v in point.items()]) or "base"


def summarize_sweep(rows: list[dict[str, Any]], metric: str, mode: str = "auto"
                    ) -> list[dict[str, Any]]:
    """Per configuration: mean and std over seeds of the final `metric`, best first.

    The std is the sample standard deviation (ddof = 1, `records.sample_std`, as in
    `compare`): NaN for a single seed. A configuration with a diverged seed (NaN) has mean
    and std NaN and ranks last. `mode` is "max", "min" or "auto" (min for losses and the
    client dissimilarity, `compare.lower_is_better`).
    """
    lower = lower_is_better(metric) if mode == "auto" else mode == "min"
    by: dict[str, list[dict]] = {}
    for row in rows:
        by.setdefault(row["label"], []).append(row)
    out = []
    for label, rs in by.items():
        vals = np.array([r["final"].get(metric, float("nan")) for r in rs], dtype=float)
        ok = np.isfinite(vals).all()
        out.append({"label": label, "static": rs[0]["static"], "hparams": rs[0]["hparams"],
                    "seeds": [r["seed"] for r in rs], "values": vals.tolist(),
                    f"{metric}_mean": float(vals.mean()) if ok else float("nan"),
                    f"{metric}_std": sample_std(vals) if ok else float("nan")})
    key = f"{metric}_mean"

    def rank(e):
        v = e[key]
        return (1, 0.0) if not math.isfinite(v) else (0, v if lower else -v)

    return sorted(out, key=rank)


def sweep(cfg: RunConfig, grid: dict[str, Sequence[Any]], seeds: Sequence[int], *,
          hp: HParams | None = None, metric: str = "test_acc_seen", mode: str = "auto",
          max_parallel: int = 0, data: FederatedData | None = None,
          dataset: Dataset | None = None, progress: Callable[[str], None] | None = None,
          checkpoint=None, resume: bool = False, mesh=None, lanes: int | None = None,
          program_cache: str | Path | None = None, heartbeat: Heartbeat | None = None
          ) -> SweepResult:
    """Run every (grid point, seed) of `cfg.algorithm`; HParams keys share one program.

    Args:
      cfg: the base configuration (its `seed` fixes the data partition).
      grid: key -> list of values; keys are hyperparameters (`HParams` fields and declared
        tunables: vmapped) or static options (`RunConfig` fields and declared options: a
        compilation per combination of their values).
      seeds: training seeds; each configuration runs once per seed.
      hp: base hyperparameters for keys not in the grid.
      metric, mode: the metric of the final evaluation that ranks configurations (mean over
        seeds; mode "max", "min" or "auto" = min for losses and the client
        dissimilarity, `compare.lower_is_better`).
      max_parallel: runs per vmapped batch (0 = as many as fit, see `auto_parallel`).
      data, dataset: an already loaded federation for `cfg` (reused by groups whose data
        fields equal `cfg`'s).
      progress: called with one-line progress messages.
      checkpoint: a `checkpoint.SweepCheckpoint`: finished batches' rows are saved after
        each batch, the running batch every `checkpoint.every` rounds and on Ctrl-C.
      resume: continue from `checkpoint` (finished batches are not run again; a saved
        running batch continues at its round), giving the rows of an uninterrupted sweep.
      mesh: a `distributed` mesh over which each batch's combinations are sharded (the
        batch size is rounded up to a multiple of its size); None = one device.
      lanes: combinations of a batch trained side by side in one vmap; the others of the
        batch follow in a `lax.map` inside the same compiled program (None = `auto_lanes`:
        1 on CPU, all on accelerators; 0 = all).
      program_cache: a folder of compiled programs (`execute.programs.ProgramCache`): a
        group's programs compiled there before for the same configuration, data and code
        are read back instead of traced and compiled.
      heartbeat: a `progress.Heartbeat` told each step (loading data, compiling, training
        rounds with the pace and the time left), so that a long one gets a line every few
        seconds; None with `progress`: one of its own, writing through `progress`.
    """
    if heartbeat is None and progress is not None:
        with Heartbeat(progress) as heartbeat:
            return sweep(cfg, grid, seeds, hp=hp, metric=metric, mode=mode,
                         max_parallel=max_parallel, data=data, dataset=dataset,
                         progress=heartbeat.say, checkpoint=checkpoint, resume=resume,
                         mesh=mesh, lanes=lanes, program_cache=program_cache,
                         heartbeat=heartbeat)
    hp = hp or HParams()
    grid = check_grid(grid)
    seeds = [int(s) for s in seeds]
    if not seeds:
        raise ConfigError("give at least one seed (--seeds 0,1,2)")
    if len(set(seeds)) != len(seeds):
        raise ConfigError(f"repeated seed in --seeds {seeds}")
    if max_parallel < 0:
        raise ConfigError(f"--max-parallel must be >= 0 (got {max_parallel})")
    if lanes is not None and lanes < 0:
        raise ConfigError(f"--lanes must be >= 0 (got {lanes}; 0 = all runs of a batch)")
    lanes = auto_lanes() if lanes is None else lanes
    lower = lower_is_better(metric) if mode == "auto" else mode == "min"
    hp_keys = [k for k in grid if k in field_names(HParams)]
    run_keys = [k for k in grid if k not in hp_keys]
    statics = [dict(zip(run_keys, v, strict=True))
               for v in itertools.product(*(grid[k] for k in run_keys))]
    points = [dict(zip(hp_keys, v, strict=True))
              for v in itertools.product(*(grid[k] for k in hp_keys))]
    say = progress or (lambda msg: None)
    # Validate everything before running anything.
    groups = []
    for st in statics:
        cfg_g = cfg.replace(**st)
        hps = [hp.with_values(**pt) for pt in points]
        for h in hps:
            validate(cfg_g, h)
        if cfg_g.dp != "off":  # its accountant runs per run, between evaluations
            raise ConfigError("a sweep does not account privacy: run each --dp configuration "
                              "with `fedjax-appeal run`, which reports epsilon")
        groups.append((st, cfg_g, hps))

    data_cache: dict[Any, tuple[FederatedData, Dataset]] = {}

    def data_key(c: RunConfig):
        return tuple(getattr(c, f) for f in data_fields())

    if data is not None:
        data_cache[data_key(cfg)] = (data, dataset)
    rows: list[dict[str, Any]] = []
    timing: dict[str, Any] = {"groups": [], "data_s": 0.0}
    t_all = time.perf_counter()
    n_runs = len(statics) * len(points) * len(seeds)
    done = checkpoint.finished() if (checkpoint is not None and resume) else {}
    spec_par = (checkpoint.spec.get("parallel", {}) if checkpoint is not None else {})
    n_dev = 1 if mesh is None else int(mesh.devices.size)
    for gi, (st, cfg_g, hps) in enumerate(groups):
        dk = data_key(cfg_g)
        if dk not in data_cache:
            t_data = time.perf_counter()
            with phase(heartbeat, loading_phase(cfg_g)):
                data_cache[dk] = load_federated(cfg_g)
            timing["data_s"] += time.perf_counter() - t_data
        gdata, gds = data_cache[dk]
        # the grid, not the cohort, is sharded in a sweep: the algorithm gets no mesh;
        # `assemble` composes it exactly as `experiment.run_config` does
        cfg_b = cfg_g.replace(devices=1)
        alg, model, _, _, _ = assemble(cfg_b, data=gdata, dataset=gds, mesh=None)
        # rows record what the group resolved: the model built, the appeal protocol on/off
        resolved = {"model": model.name, "appeal": "on" if appeal_on(cfg_g) else "off"}
        programs = None
        if program_cache:
            programs = ProgramCache(program_cache, program_context(cfg_b, model, gdata))
        if gi == 0 and "0/0" in done:  # the first batch finished before: check alone
            check_metric(alg, gdata, hps[0], metric)
        combos = [(pi, s) for pi in range(len(points)) for s in seeds]
        n_params = sum(int(np.prod(a.shape)) for a in jax.tree.leaves(
            jax.eval_shape(model.init, abstract_key())[0]))
        par = max_parallel or auto_parallel(n_params, cfg_g, gdata)
        par = min(par, len(combos))
        par = -(-par // n_dev) * n_dev  # whole rows per device
        par = int(spec_par.get(str(gi), par))  # a resumed sweep keeps its batches

        if gi == 0:
            if "0/0" not in done:  # on the first batch's own traces, reused when it runs
                _, stacked, bseeds = _batch(combos, par, hps, 0)
                with phase(heartbeat, "tracing the first programs (checking --metric)"):
                    metric_check(metric)(batch_driver(alg, gdata, stacked, bseeds,
                                                      lanes=lanes, mesh=mesh).eval_shapes())
            say(f"sweep: {cfg.algorithm}, {len(points)} hparam point(s) x {len(seeds)} seed(s) "
                f"x {len(statics)} static group(s) = {n_runs} runs, {cfg.rounds} rounds each")
        if checkpoint is not None and spec_par.get(str(gi)) is None:
            spec_par[str(gi)] = par
            checkpoint.spec["parallel"] = spec_par
            checkpoint.write_spec()
        n_batches = -(-len(combos) // par)
        compiled: dict = {}
        g_t = {"static": st, "runs": len(combos), "parallel": par, "batches": n_batches,
               "lanes": min(lanes, par // n_dev) if lanes else par // n_dev,
               "compile_s": 0.0, "run_s": 0.0, "init_s": 0.0, "eval_s": 0.0}
        gname = ", ".join(f"{k}={v}" for k, v in st.items()) or "all"
        for bi in range(n_batches):
            batch, stacked, bseeds = _batch(combos, par, hps, bi)
            label = (f"[group {gi + 1}/{len(groups)} ({gname}) batch {bi + 1}/{n_batches}, "
                     f"{len(batch)} runs] ")
            bkey = f"{gi}/{bi}"
            if bkey in done:  # finished before the interruption
                for row in done[bkey]:
                    rows.append({**row, "id": len(rows),
                                 "static": {**row["static"], **resolved}})
                say(f"{label}finished before: taken from the checkpoint")
                continue
            ck_kw = {}
            if checkpoint is not None:
                ck_kw = dict(
                    restore=(lambda tmpl, bkey=bkey: checkpoint.load_batch(bkey, tmpl))
                    if resume else None,
                    save=lambda *a, bkey=bkey: checkpoint.save_batch(bkey, *a),
                    save_every=checkpoint.every)
            configs = [point_label(st, points[pi]) for pi, _ in batch]
            hist, rm, t = run_batch(alg, gdata, stacked, bseeds, rounds=cfg_g.rounds,
                                    eval_every=cfg_g.eval_every, compiled=compiled,
                                    progress=say, label=label, mesh=mesh, lanes=lanes,
                                    programs=programs, metric=metric, lower=lower,
                                    configs=configs, heartbeat=heartbeat, **ck_kw)
            for k in ("compile_s", "run_s", "init_s", "eval_s"):
                g_t[k] += t[k]
            first = len(rows)
            for i, (pi, s) in enumerate(batch):
                finite = rm.get("params_finite")
                bad = (np.flatnonzero(~finite[i].astype(bool)) if finite is not None
                       else np.array([], int))
                pt = points[pi]
                lab = point_label(st, pt)
                rows.append({
                    "id": len(rows), "label": lab, "static": {**st, **resolved},
                    "hparams": pt, "seed": s,
                    "final": hist[i][-1], "history": hist[i],
                    "diverged_round": int(bad[0]) + 1 if bad.size else None,
                    "cohort_loss": rm["cohort_loss"][i].tolist() if "cohort_loss" in rm
                    else []})
            if checkpoint is not None:
                done[bkey] = rows[first:]
                checkpoint.save_rows(done)
                checkpoint.clear_batch()
        g_t["sec_per_round_per_run"] = g_t["run_s"] / max(1, cfg_g.rounds * len(combos))
        timing["groups"].append(g_t)
        say(f"group {gi + 1}/{len(groups)} ({gname}) done: {len(combos)} runs in "
            f"{n_batches} batch(es) of {par}, compile {g_t['compile_s']:.1f}s, "
            f"train {g_t['run_s']:.1f}s, eval {g_t['eval_s']:.1f}s")
    timing["total_s"] = time.perf_counter() - t_all
    summary = summarize_sweep(rows, metric, mode)
    return SweepResult(rows, summary, summary[0] if summary else {}, timing)
