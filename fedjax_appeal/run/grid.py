"""A grid of hyperparameters of one algorithm, run as one compiled program (`simulate_grid`).

The library's counterpart of `run.sweep.sweep`, for an algorithm object instead of a
configuration: every (grid point, seed) pair is a run of the same `FederatedAlgorithm` on
the same data, the points differ only in values of the `HParams` pytree, so all of them
are stacked on a leading runs axis and trained by the driver of sweeps
(`sweep.run_batch`): one init, one evaluation and one chunk-of-rounds program for the
whole grid, whatever its size. A grid key is a library algorithm's dotted hyperparameter
("client.momentum", see `core.hyper`), or, for an algorithm built from a configuration
(`build`), a field of `HParams` ("client_lr") or a declared tunable; a key the algorithm
would ignore is refused (`FederatedAlgorithm.check`). Row i equals `simulate` of its point
and seed up to float reassociation of the batched arithmetic (a grid of one run is
`simulate`'s own program, bit for bit).
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ..algorithms.base import FederatedAlgorithm
from ..core.arrays import FederatedData
from ..core.config import ConfigError, HParams
from .sweep import _batch, auto_lanes, run_batch


@dataclasses.dataclass
class GridRun:
    hparams: dict[str, float]  # the grid point: its keys and values
    seed: int
    history: list[dict[str, float]]  # one entry per evaluation, as `simulate`'s
    round_metrics: dict[str, np.ndarray]  # per-round values, [rounds] or [rounds, m] each


@dataclasses.dataclass
class GridResult:
    runs: list[GridRun]  # point by point, each point's seeds in order
    timing: dict[str, float]  # compile_s, run_s, init_s, eval_s over all batches
    # the driver's programs compiled for the whole grid, each once: the initial model (or
    # pre-init), init, evaluation and one chunk of rounds per chunk length
    programs: list[str] = dataclasses.field(default_factory=list)

    def best(self, metric: str = "test_acc_seen", lower: bool = False) -> dict[str, Any]:
        """The point whose mean over seeds of `metric` in the last evaluation is best:
        {"hparams", "mean", "values"}; a point with a NaN value ranks last."""
        by: dict[tuple, list[float]] = {}
        for run in self.runs:
            key = tuple(sorted(run.hparams.items()))
            by.setdefault(key, []).append(float(run.history[-1].get(metric, math.nan)))

        def rank(item):
            mean = float(np.mean(item[1]))
            return (1, 0.0) if not math.isfinite(mean) else (0, mean if lower else -mean)

        key, vals = min(by.items(), key=rank)
        return {"hparams": dict(key), "mean": float(np.mean(vals)), "values": vals}


def grid_points(grid: Mapping[str, Sequence[float]] | Sequence[Mapping[str, float]]
                ) -> list[dict[str, float]]:
    """The points of a grid: the product of a {key: values} mapping (in key order), or a
    list of {key: value} points as they are; every point has the same keys and finite
    numbers."""
    if isinstance(grid, Mapping):
        for k, vals in grid.items():
            if isinstance(vals, str | bytes) or not isinstance(vals, Sequence) or not vals:
                raise ConfigError(f"grid {k}: give a non-empty list of values")
        keys = list(grid)
        points = [dict(zip(keys, combo, strict=True))
                  for combo in itertools.product(*grid.values())]
    else:
        points = [dict(p) for p in grid]
    if not points:
        raise ConfigError("the grid is empty: give at least one point")
    for p in points:
        if set(p) != set(points[0]):
            raise ConfigError(f"every point of the grid needs the same keys: {sorted(p)} vs "
                              f"{sorted(points[0])}")
        for k, v in p.items():
            if isinstance(v, bool) or not isinstance(v, int | float | np.number) or not (
                    math.isfinite(float(v))):
                raise ConfigError(f"grid {k}: {v!r} is not a finite number")
    return [{k: float(v) for k, v in p.items()} for p in points]


def point_hparams(point: Mapping[str, float], base: HParams | None = None) -> HParams:
    """`base` (default `HParams()`) with the values of a grid point: HParams fields and
    declared tunables by name (an unknown name is refused in one line), dotted keys of a
    library algorithm into `extra`."""
    base = HParams() if base is None else base
    keyed = {k: v for k, v in base.extra.items() if "." in k}  # `with_values` takes names
    plain = {k: v for k, v in point.items() if "." not in k}
    hp = base.replace(extra={k: v for k, v in base.extra.items() if k not in keyed})
    hp = hp.with_values(**plain) if plain else hp
    dotted = {k: v for k, v in point.items() if "." in k}
    return hp.replace(extra={**hp.extra, **keyed, **dotted})


def simulate_grid(alg: FederatedAlgorithm, data: FederatedData,
                  grid: Mapping[str, Sequence[float]] | Sequence[Mapping[str, float]],
                  seeds: Sequence[int] = (0,), *, rounds: int, eval_every: int,
                  base: HParams | None = None, lanes: int | None = None,
                  max_parallel: int = 0, progress: Callable[[str], None] | None = None
                  ) -> GridResult:
    """Train `alg` on `data` at every (grid point, seed), as one compiled program.

    Args:
      alg, data: the algorithm (a library factory's or `build`'s) and the federated data.
      grid: {key: [values]} (their product) or a list of {key: value} points; keys are
        the algorithm's dotted hyperparameters (a library factory's algorithm reads no
        other) or, for an algorithm built from a configuration, `HParams` fields and
        declared tunables.
      seeds: training seeds; each point runs once per seed (`jax.random.key(seed)`, as
        `simulate`).
      rounds, eval_every: as `simulate`'s.
      base: the hyperparameters of keys not in the grid (default `HParams()`).
      lanes: runs trained side by side in one vmap, the others following in a `lax.map`
        inside the same program (None = 1 on CPU, all on accelerators; 0 = all).
      max_parallel: runs per batch (0 = all of them in one batch); every batch reuses the
        one compiled program (a batch that is not full is padded with its first run).
      progress: called with one-line progress messages.
    """
    points = grid_points(grid)
    hps = [point_hparams(p, base) for p in points]
    if alg.check is not None:
        for hp in hps:
            alg.check(data, hp)
    seeds = [int(s) for s in seeds]
    if not seeds or len(set(seeds)) != len(seeds) or min(seeds) < 0:
        raise ConfigError(f"give distinct non-negative seeds (got {seeds})")
    if max_parallel < 0:
        raise ConfigError(f"max_parallel must be >= 0 (got {max_parallel})")
    combos = [(pi, s) for pi in range(len(points)) for s in seeds]
    par = min(max_parallel or len(combos), len(combos))
    lanes = auto_lanes() if lanes is None else lanes
    compiled: dict = {}
    runs: list[GridRun] = []
    timing = {"compile_s": 0.0, "run_s": 0.0, "init_s": 0.0, "eval_s": 0.0}
    n_batches = -(-len(combos) // par)
    for bi in range(n_batches):
        batch, stacked, bseeds = _batch(combos, par, hps, bi)
        hist, rm, t = run_batch(alg, data, stacked, bseeds, rounds=rounds,
                                eval_every=eval_every, compiled=compiled, progress=progress,
                                label=f"[batch {bi + 1}/{n_batches}] ", lanes=lanes)
        for k in timing:
            timing[k] += t[k]
        for i, (pi, s) in enumerate(batch):
            runs.append(GridRun(points[pi], s, hist[i], {k: v[i] for k, v in rm.items()}))
    return GridResult(runs, timing, [k if isinstance(k, str) else f"{k[0]} of {k[1]} rounds"
                                     for k in compiled])
