"""The run loop shared by `simulate.simulate` (one run) and `sweep.run_batch` (a vmapped
batch of runs): chunks of rounds between evaluation and checkpoint points, with the NaN
guard, the bookkeeping, checkpoints and progress as hooks."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

from ..core.fields import option

option("rounds", 200, "communication rounds", group="federation", ge=1,
       hint="a run trains at least one round (its history starts with the initial model's "
       "evaluation, round 0)")
option("eval_every", 10, "evaluate all clients every this many rounds", group="output", ge=1,
       hint="to evaluate only at the start and the end use --eval-every equal to --rounds")
# advance(state, r, stop) -> (state after round stop, host metrics of rounds r+1..stop)
Advance = Callable[[Any, int, int], tuple[Any, dict]]


class Hooks(NamedTuple):
    """What the loop does around each chunk of rounds (every hook is optional).

    guard(state, r, metrics): called before a chunk is committed; raising stops the run
      with the state of round r (the NaN guard).
    commit(stop, new_state, metrics): records the chunk (per-round metrics, evaluation).
    after(r, state): once the chunk is committed (checkpoints, progress).
    interrupted(r, state): on Ctrl-C, with the last committed round and state (saves a
      checkpoint); `KeyboardInterrupt` is raised again unless the hook raises.
    """

    guard: Callable[[Any, int, dict], None] | None = None
    commit: Callable[[int, Any, dict], None] | None = None
    after: Callable[[int, Any], None] | None = None
    interrupted: Callable[[int, Any], None] | None = None


def stop_points(start: int, evals: Iterable[int], saves: Iterable[int]) -> list[int]:
    """The rounds after `start` at which a chunk ends: evaluations and checkpoints."""
    return sorted(p for p in set(evals) | set(saves) if p > start)


def run_loop(state, start: int, stops: Iterable[int], advance: Advance, hooks: Hooks
             ) -> tuple[Any, int]:
    """Advance `state` from round `start` through every stop; returns (state, round)."""
    r = start
    try:
        for stop in stops:
            new_state, metrics = advance(state, r, stop)
            if hooks.guard is not None:
                hooks.guard(state, r, metrics)
            if hooks.commit is not None:
                hooks.commit(stop, new_state, metrics)
            state, r = new_state, stop
            if hooks.after is not None:
                hooks.after(r, state)
    except KeyboardInterrupt:
        if hooks.interrupted is not None:
            hooks.interrupted(r, state)
        raise
    return state, r
