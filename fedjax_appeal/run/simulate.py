"""Run an algorithm: chunks of rounds under one `jax.jit` + `lax.scan`, evaluations between.

The round key of round r is `fold_in(train_key, r)`, so a run resumed at round r draws
exactly what an uninterrupted run draws. Compilation is done ahead of time (`lower` then
`compile`), so `timing` separates compile time from steady-state seconds per round, and
evaluation time from training time.
"""

from __future__ import annotations

import dataclasses
import functools
import sys
import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ..algorithms.base import FederatedAlgorithm
from ..core.config import HParams
from ..core.round import ServerState
from ..data.arrays import FederatedData
from ..evaluate.metrics import per_client, summarize
from ..execute.distributed import fetch
from .checkpoint import Checkpointer, Interrupted, NonFiniteError
from .loop import Hooks, run_loop, stop_points


@dataclasses.dataclass
class SimulationResult:
    history: list[dict[str, float]]  # one entry per evaluation (round 0 included)
    round_metrics: dict[str, np.ndarray]  # per-round values, [rounds] or [rounds, m] each
    final_state: ServerState
    final_eval: dict[str, Any]  # per-client arrays of the last evaluation
    timing: dict[str, float]


def split_key(key: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(init key, training key) of a run's root key."""
    return jax.random.fold_in(key, 0), jax.random.fold_in(key, 1)


def params_finite(params) -> jax.Array:
    """[] bool: every server parameter is finite (the NaN/Inf guard's per-round flag)."""
    return jnp.all(jnp.stack([jnp.all(jnp.isfinite(a)) for a in jax.tree.leaves(params)]))


def make_chunk(alg: FederatedAlgorithm) -> Callable:
    """chunk(state, data, train_key, hp, rounds[L]) -> (state, metrics[L]): L rounds.

    Besides the round's metrics, each round reports `params_finite` (see `params_finite`).
    """

    def chunk(state, data, train_key, hp, rounds):
        def body(s, r):
            s, m = alg.round(s, data, jax.random.fold_in(train_key, r), hp)
            return s, {**m, "params_finite": params_finite(s.params)}

        return jax.lax.scan(body, state, rounds)

    return chunk


@functools.lru_cache(maxsize=32)
def _chunk_jit(alg: FederatedAlgorithm):
    """One jitted chunk per algorithm, so repeated `simulate` calls reuse its compilation."""
    return jax.jit(make_chunk(alg))


def eval_rounds(total: int, every: int) -> list[int]:
    """Rounds after which the run evaluates: every `every` rounds and the last one."""
    pts = list(range(every, total, every)) if every > 0 else []
    return pts + [total] if total > 0 else []


def _block(tree):
    return jax.tree.map(lambda a: a.block_until_ready() if hasattr(a, "block_until_ready") else a,
                        tree)


def simulate(alg: FederatedAlgorithm, data: FederatedData, hp: HParams, key: jax.Array, *,
             rounds: int, eval_every: int,
             on_eval: Callable[[dict[str, float]], None] | None = None,
             state: ServerState | None = None, start_round: int = 0,
             checkpoint: Checkpointer | None = None, resume: bool = False,
             nan_guard: bool = True, mesh=None) -> SimulationResult:
    """Train for `rounds` rounds, evaluating every client every `eval_every` rounds.

    Args:
      alg: the algorithm.
      data: the federated data (on device).
      hp: hyperparameters (converted to float32 arrays).
      key: the run's root key, `jax.random.key(seed)`.
      rounds: total number of rounds.
      eval_every: evaluate after every this many rounds (and at round 0 and the end).
      on_eval: a hook `on_eval(entry) -> None` called with each history entry, in round
        order: the round-0 evaluation at once (not on `resume`, whose restored entries are
        not replayed), then each later evaluation after the chunk of rounds that ends in it
        has been committed and before that round's checkpoint is written. `entry` maps
        "round" (int) and every metric of `metrics.summarize` (floats: "train_loss",
        "test_acc_seen", ...; with DP the accountant's epsilon) to its value; it is the
        history's own dict, so the hook must not modify it. It runs on the host between
        compiled chunks (progress lines, trackers) in the process that calls `simulate`;
        an exception it raises ends the run (a `KeyboardInterrupt` in a call after round
        0 counts as Ctrl-C after that round: checkpoint, then `checkpoint.Interrupted`).
        None: no hook.
      state, start_round: continue from a given state (round `start_round`).
      checkpoint: saves every `checkpoint.every` rounds and when interrupted (Ctrl-C, then
        `checkpoint.Interrupted` is raised); with `resume` the run continues from the
        checkpoint in `checkpoint.directory` (state, round, history, per-round metrics).
      nan_guard: stop with `checkpoint.NonFiniteError` naming the round in which the server
        parameters became NaN/Inf (the last good checkpoint is kept / written).
      mesh: a `distributed` mesh; data and server state are replicated over it.
    """
    hp = hp.as_arrays()
    k_init, k_train = split_key(key)
    timing = {"compile_s": 0.0, "eval_compile_s": 0.0}
    if mesh is not None:
        from ..execute.distributed import replicate

        data, hp = replicate((data, hp), mesh)

    t = time.perf_counter()
    if state is None:
        state = jax.jit(alg.init)(k_init, data, hp)
        _block(state)
    history: list[dict[str, float]] = []
    per_round: list[dict[str, np.ndarray]] = []
    if resume:
        from .checkpoint import load

        restored = load(checkpoint.directory, state)
        state, start_round = restored.state, restored.round
        history = list(restored.history)
        if restored.round_metrics:
            per_round.append(restored.round_metrics)
        checkpoint.last_round = start_round
    if mesh is not None:
        state = replicate(state, mesh)
    timing["init_s"] = time.perf_counter() - t

    t = time.perf_counter()
    evaluate = jax.jit(alg.evaluate).lower(state, data, hp).compile()
    timing["eval_compile_s"] = time.perf_counter() - t

    chunk_jit = _chunk_jit(alg)
    compiled: dict[int, Any] = {}
    eval_times, round_times = [], []

    def evaluate_at(r: int, st: ServerState):
        t0 = time.perf_counter()
        ev = fetch(evaluate(st, data, hp))
        eval_times.append(time.perf_counter() - t0)
        return ev

    def keep(r: int, ev) -> dict:
        entry = {"round": r, **summarize(ev)}
        if alg.account is not None:  # DP: epsilon after r rounds (host-side accountant)
            entry.update(alg.account(r, hp, data.num_clients))
        history.append(entry)
        return entry

    def round_metrics():
        return ({k: np.concatenate([np.asarray(m[k]) for m in per_round])
                 for k in per_round[0]} if per_round else {})

    def advance(st, r, stop):
        length = stop - r
        rarr = jnp.arange(r, stop, dtype=jnp.int32)
        if length not in compiled:
            t0 = time.perf_counter()
            lowered = chunk_jit.lower(st, data, k_train, hp, rarr)
            if not compiled and checkpoint is not None:  # before the first round trains
                per_round_values = sum(int(np.prod(a.shape)) for a in
                                       jax.tree.leaves(lowered.out_info[1])) // length
                checkpoint.check_space(st, per_round_values * rounds)
            compiled[length] = lowered.compile()
            timing["compile_s"] += time.perf_counter() - t0
        t0 = time.perf_counter()
        new_state, metrics = compiled[length](st, data, k_train, hp, rarr)
        _block(new_state)
        round_times.append((time.perf_counter() - t0) / length)
        return new_state, fetch(metrics)

    def guard(st, r, metrics):
        finite = np.asarray(metrics["params_finite"])
        if nan_guard and not finite.all():
            bad = r + 1 + int(np.argmin(finite))
            where = ""
            if checkpoint is not None:
                if checkpoint.last_round != r:
                    checkpoint.save(st, r, history, round_metrics())
                where = f"; the last good checkpoint (round {r}) is in {checkpoint.directory}"
            raise NonFiniteError(f"server parameters became NaN/Inf in round {bad}{where}; "
                                 "lower the learning rates (--client-lr, --server-lr)")

    last_eval = []  # the latest evaluation (per-client arrays)

    shown = []  # history entries not yet passed to `on_eval`

    def commit(stop, new_state, metrics):
        ev = evaluate_at(stop, new_state) if stop in evals else None
        per_round.append(metrics)
        if ev is not None:
            shown.append(keep(stop, ev))
            last_eval[:] = [ev]

    def after(r, st):  # progress (a Ctrl-C in it is a Ctrl-C after round r), checkpoint
        while shown:
            entry = shown.pop(0)
            if on_eval is not None:
                on_eval(entry)
        if r in saves:
            checkpoint.save(st, r, history, round_metrics())

    def interrupted(r, st):
        if checkpoint is None:
            return
        checkpoint.save(st, r, history, round_metrics())
        raise Interrupted(f"checkpoint of round {r} saved in {checkpoint.directory}; continue "
                          f"with --resume {checkpoint.directory}") from None

    evals = set(eval_rounds(rounds, eval_every))
    saves = set(checkpoint.due(start_round, rounds)) if checkpoint is not None else set()
    if not resume:
        last_eval[:] = [evaluate_at(start_round, state)]
        entry = keep(start_round, last_eval[0])
        if on_eval is not None:
            on_eval(entry)
    state, r = run_loop(state, start_round, stop_points(start_round, evals, saves), advance,
                        Hooks(guard=guard, commit=commit, after=after, interrupted=interrupted))
    last_eval = last_eval[0] if last_eval else None
    if last_eval is None:  # resumed at the end: evaluate for the per-client results only
        last_eval = evaluate_at(r, state)

    if round_times:
        timing["sec_per_round"] = float(np.median(round_times))
        timing["sec_per_round_min"] = float(np.min(round_times))
    timing["eval_s"] = float(np.median(eval_times)) if eval_times else 0.0
    final = dict(last_eval)
    return SimulationResult(history, round_metrics(), state, per_client(final), timing)


def progress_printer(alg_name: str, total: int, stream=None) -> Callable:
    """An `on_eval` callback printing one line per evaluation with elapsed time and ETA."""
    t0 = time.perf_counter()

    def show(entry: dict[str, float]):
        r = int(entry["round"])
        el = time.perf_counter() - t0
        eta = el / r * (total - r) if r else float("nan")
        parts = [f"[{alg_name}] round {r:>4}/{total}"]
        if "train_loss" in entry:  # absent from what a DP run publishes
            parts.append(f"train_loss {entry['train_loss']:.4f}")
        parts.append(f"test_acc_seen {entry.get('test_acc_seen', float('nan')):.4f}")
        if "test_acc_unseen" in entry:
            parts.append(f"unseen {entry['test_acc_unseen']:.4f}")
        parts.append(f"elapsed {el:.0f}s" + (f" eta {eta:.0f}s" if r else ""))
        print("  ".join(parts), file=stream or sys.stderr, flush=True)

    return show
