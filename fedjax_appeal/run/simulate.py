"""Run an algorithm: chunks of rounds under one `jax.jit` + `lax.scan`, evaluations between.

The round key of round r is `fold_in(train_key, r)`, so a run resumed at round r draws
exactly what an uninterrupted run draws. Compilation is done ahead of time (`lower` then
`compile`), so `timing` separates compile time from steady-state seconds per round, and
evaluation time from training time.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

from ..algorithms.base import FederatedAlgorithm
from ..core.arrays import FederatedData
from ..core.config import ConfigError, HParams
from ..core.round import ServerState
from ..evaluate.metrics import per_client
from .checkpoint import Checkpointer, Interrupted, NonFiniteError, load
from .driver import Driver


def asks_stop(value: Any) -> bool:
    """Whether an `on_eval` hook's return value asks to stop: `True` (a Python or NumPy
    bool); None and every other value continue."""
    return isinstance(value, bool | np.bool_) and bool(value)


class _Stop(Exception):
    """Raised from the loop's hook when `on_eval` asked to stop; `state` is the state of
    the round just evaluated."""

    def __init__(self, state: Any):
        super().__init__("stopped by on_eval")
        self.state = state


@dataclasses.dataclass
class SimulationResult:
    history: list[dict[str, float]]  # one entry per evaluation (round 0 included)
    round_metrics: dict[str, np.ndarray]  # per-round values, [rounds] or [rounds, m] each
    final_state: ServerState
    final_eval: dict[str, Any]  # per-client arrays of the last evaluation
    timing: dict[str, float]


def check_key(key: Any) -> None:
    """Refuse, in one line, a `key` that is not one PRNG key (`jax.random.key(seed)`, or a
    raw `jax.random.PRNGKey(seed)`)."""
    typed = isinstance(key, jax.Array) and jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key)
    raw = isinstance(key, jax.Array) and key.dtype == np.uint32 and key.shape == (2,)
    if not ((typed and key.shape == ()) or raw):
        shown = (f"an array {key.dtype}{list(key.shape)}" if hasattr(key, "shape")
                 else f"{type(key).__name__} {key!r}")
        raise ConfigError(f"key must be one PRNG key, jax.random.key(seed) (got {shown})")


def simulate(alg: FederatedAlgorithm, data: FederatedData, hp: HParams, key: jax.Array, *,
             rounds: int, eval_every: int,
             on_eval: Callable[[dict[str, float]], None] | None = None,
             state: ServerState | None = None, start_round: int = 0,
             checkpoint: Checkpointer | None = None, resume: bool = False,
             nan_guard: bool = True, mesh=None, programs=None,
             heartbeat=None) -> SimulationResult:
    """Train for `rounds` rounds, evaluating every client every `eval_every` rounds.

    One run of the shared `driver.Driver` (no runs axis).

    Args:
      alg: the algorithm.
      data: the federated data (on device).
      hp: hyperparameters (converted to float32 arrays).
      key: the run's root key, `jax.random.key(seed)`.
      rounds: total number of rounds.
      eval_every: evaluate after every this many rounds (and at round 0 and the end).
      on_eval: a hook `on_eval(entry) -> bool | None` called with each history entry, in
        round order: the round-0 evaluation at once (not on `resume`, whose restored
        entries are not replayed), then each later evaluation after the chunk of rounds
        that ends in it has been committed and before that round's checkpoint is written.
        `entry` maps "round" (int) and every metric of `metrics.summarize` (floats:
        "train_loss", "test_acc_seen", ...; with DP the accountant's epsilon) to its
        value; it is the history's own dict, so the hook must not modify it. It runs on
        the host between compiled chunks (progress lines, trackers, your own logger), so
        the rounds between two evaluations stay one compiled chunk. Returning `True` stops
        the run after this evaluation (early stopping): the result holds the history,
        state and evaluation of that round (a checkpoint due then is written first);
        any other return value continues. An exception it raises ends the run (a
        `KeyboardInterrupt` in a call after round 0 counts as Ctrl-C after that round:
        checkpoint, then `checkpoint.Interrupted`). None: no hook.
      state, start_round: continue from a given state (round `start_round`).
      checkpoint: saves every `checkpoint.every` rounds and when interrupted (Ctrl-C, then
        `checkpoint.Interrupted` is raised); with `resume` the run continues from the
        checkpoint in `checkpoint.directory` (state, round, history, per-round metrics).
        Before the first round trains, the free space of its folder is checked.
      nan_guard: stop with `checkpoint.NonFiniteError` naming the round in which the server
        parameters became NaN/Inf (the last good checkpoint is kept / written).
      mesh: a `distributed` mesh; data and server state are replicated over it.
      programs: an `execute.programs.ProgramCache` whose context names what built `alg`
        (`run.assemble.program_context`): programs found there are not traced again.
      heartbeat: a `progress.Heartbeat`, told each step (compiling, solo models,
        evaluation, training rounds with the pace and the time left), so that a long one
        gets a line every few seconds; the work is the same with or without it.
    """
    check_key(key)
    if alg.check is not None:
        alg.check(data, hp)
    hp = hp.as_arrays()
    drv = Driver(alg, data, hp, key, mesh=mesh,
                 account=(None if alg.account is None else
                          lambda r: alg.account(r, hp, data.num_clients)),
                 before_training=None if checkpoint is None else checkpoint.check_space_for(
                     rounds), programs=programs, heartbeat=heartbeat)
    t = time.perf_counter()
    if state is None:
        state = drv.init()
    if resume:
        restored = load(checkpoint.directory, state)
        state, start_round = restored.state, restored.round
        drv.histories[0][:] = restored.history
        if restored.round_metrics:
            drv.per_round.append(restored.round_metrics)
        checkpoint.last_round = start_round
    state = drv.place(state)
    timing = {"init_s": time.perf_counter() - t}
    history = drv.histories[0]

    def guard(st, r, metrics):
        finite = np.asarray(metrics["params_finite"])
        if nan_guard and not finite.all():
            bad = r + 1 + int(np.argmin(finite))
            where = ""
            if checkpoint is not None:
                if checkpoint.last_round != r:
                    checkpoint.save(st, r, history, drv.round_metrics())
                where = f"; the last good checkpoint (round {r}) is in {checkpoint.directory}"
            raise NonFiniteError(f"server parameters became NaN/Inf in round {bad}{where}; "
                                 "lower the learning rates (--client-lr, --server-lr, or "
                                 "the optimizers' learning_rate)")

    def after(r, st, entries):  # progress (a Ctrl-C in it is a Ctrl-C after round r), checkpoint
        stop = False
        for entry in entries:
            if on_eval is not None:
                stop = asks_stop(on_eval(entry)) or stop
        if r in saves:
            checkpoint.save(st, r, history, drv.round_metrics())
        if stop:
            raise _Stop(st)

    def interrupted(r, st):
        if checkpoint is None:
            return
        histories, per_round = drv.at_round(r)
        checkpoint.save(st, r, histories[0], drv.round_metrics(per_round))
        raise Interrupted(f"checkpoint of round {r} saved in {checkpoint.directory}; continue "
                          f"with --resume {checkpoint.directory}") from None

    saves = set(checkpoint.due(start_round, rounds)) if checkpoint is not None else set()
    last_eval, stopped = None, False
    if not resume:
        last_eval = drv.evaluate(state)[0]
        (entry,) = drv.record(start_round, [last_eval])
        if on_eval is not None:
            stopped = asks_stop(on_eval(entry))
    latest = None
    if not stopped:
        try:
            state, _, latest = drv.run(state, start_round, rounds=rounds, eval_every=eval_every,
                                       saves=saves, guard=guard, after=after,
                                       interrupted=interrupted)
        except _Stop as stop:  # the hook asked to stop after the latest evaluation
            state, latest = stop.state, drv.latest
    if latest is not None:
        last_eval = latest[0]
    if last_eval is None:  # resumed at the end: evaluate for the per-client results only
        last_eval = drv.evaluate(state)[0]

    timing["compile_s"] = drv.timing["compile_s"]
    timing["eval_compile_s"] = drv.timing["eval_compile_s"]
    if drv.round_times:
        timing["sec_per_round"] = float(np.median(drv.round_times))
        timing["sec_per_round_min"] = float(np.min(drv.round_times))
    timing["eval_s"] = float(np.median(drv.eval_times)) if drv.eval_times else 0.0
    # every chunk of rounds and the init program (solo models, selector features),
    # compiling excluded
    timing["train_total_s"] = drv.train_s + drv.init_s
    timing["eval_total_s"] = float(sum(drv.eval_times))  # every evaluation, the same
    return SimulationResult(history, drv.round_metrics(), state, per_client(dict(last_eval)),
                            timing)


def progress_printer(alg_name: str, total: int, stream=None) -> Callable:
    """An `on_eval` callback printing one line per evaluation with elapsed time and ETA.

    The ETA is the pace of the latest stretch between two evaluations after the first one
    (which holds the compilation of the chunk of rounds) times the rounds left, so it
    counts training and evaluation only; the first evaluation after round 0 shows none.
    """
    t0 = time.perf_counter()
    seen: list[tuple[float, int]] = []  # (elapsed, round) of each evaluation

    def show(entry: dict[str, float]):
        r = int(entry["round"])
        el = time.perf_counter() - t0
        seen.append((el, r))
        eta = float("nan")
        if len(seen) >= 3 and r > seen[-2][1]:
            (e0, r0), (e1, r1) = seen[-2], seen[-1]
            eta = (e1 - e0) / (r1 - r0) * (total - r)
        parts = [f"[{alg_name}] round {r:>4}/{total}"]
        if "train_loss" in entry:  # absent from what a DP run publishes
            parts.append(f"train_loss {entry['train_loss']:.4f}")
        parts.append(f"test_acc_seen {entry.get('test_acc_seen', float('nan')):.4f}")
        if "test_acc_unseen" in entry:
            parts.append(f"unseen {entry['test_acc_unseen']:.4f}")
        parts.append(f"elapsed {el:.0f}s" + (f" eta {eta:.0f}s" if eta == eta else ""))
        print("  ".join(parts), file=stream or sys.stderr, flush=True)

    return show
