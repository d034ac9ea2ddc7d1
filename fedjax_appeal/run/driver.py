"""The one driver of runs and sweeps: compiled init, evaluation and chunks of rounds, the
history of every run, the per-round metrics, and the loop between evaluation and
checkpoint points (`loop.run_loop`).

A `Driver` runs either one run (`runs=None`: no runs axis; what `simulate` and a sweep of a
single combination use, so the two are the same program) or a batch of P runs with a
leading runs axis (`runs=P`: stacked hyperparameters and keys, `lanes` of them side by side
in a vmap, the rest in a `lax.map` of the same program; with a mesh, the runs axis is
sharded over its devices). The layout is decided once, here, from `runs`, `lanes` and
`mesh`. What differs between a run and a sweep (the NaN guard, checkpoints, progress, what
an interruption saves) comes in as the loop's hooks.

Every program takes the run's root key and derives its own inside: init programs
`init_key(root)`, chunks `train_key(root)`, and round r `fold_in(train_key, r)`, so a run
resumed at round r draws exactly what an uninterrupted run draws, and no program is
compiled for the keys alone. Every program is compiled ahead of time (`lower`,
then `compile`) into `compiled`, which a caller may share between drivers of the same
shapes (a sweep's batches).
"""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec

from ..algorithms.base import FederatedAlgorithm
from ..core.arrays import FederatedData
from ..core.config import HParams
from ..core.memo import shared
from ..evaluate.metrics import summarize
from ..execute.distributed import AXIS, fetch, over_rows, replicate, shard_leading
from ..execute.runtime import release_programs_if_crowded
from .loop import Hooks, run_loop, stop_points
from .pre_memo import PRE_MEMO
from .progress import phase, training


def init_key(root: jax.Array) -> jax.Array:
    """The key a run's init programs draw from: `fold_in(root, 0)`."""
    return jax.random.fold_in(root, 0)


def train_key(root: jax.Array) -> jax.Array:
    """The key a run's rounds draw from: `fold_in(root, 1)` (round r: `fold_in` of it)."""
    return jax.random.fold_in(root, 1)


def split_key(key: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(init key, training key) of a run's root key."""
    return init_key(key), train_key(key)


# seeds [P] -> root keys [P], one small program per number of runs (deriving them op by op
# compiles a program per op and shape)
root_keys = jax.jit(jax.vmap(jax.random.key))


@shared
def from_root(fn: Callable) -> Callable:
    """`fn(key, *rest)` as a function of the run's root key: `fn(init_key(root), *rest)`.

    The driver's programs take the root key and derive their own key inside (integer
    arithmetic, the same bits as deriving it outside), so that no program is compiled
    for the keys alone. One wrapper per function (when it is hashable), so that drivers of
    the same algorithm reuse its traced program.
    """
    @functools.wraps(fn)
    def rooted(root, *rest):
        return fn(init_key(root), *rest)

    return rooted


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


def rooted_chunk(alg: FederatedAlgorithm) -> Callable:
    """`make_chunk(alg)` as a function of the run's root key: chunk(state, data, root, hp,
    rounds[L]) trains with `train_key(root)`."""
    rounds_of = make_chunk(alg)

    def chunk(state, data, root, hp, rounds):
        return rounds_of(state, data, train_key(root), hp, rounds)

    return chunk


@shared
def _chunk_of(alg: FederatedAlgorithm) -> Callable:
    """`rooted_chunk(alg)`, one function per algorithm, so that runs of the same algorithm
    reuse its traced program."""
    return rooted_chunk(alg)


def combine_lanes(fn: Callable, lanes: int, p: int, mesh=None) -> Callable:
    """`fn(state, data, key, hp, rounds)` over P runs (state, key, hp stacked [P]): `lanes`
    of them side by side in a vmap, the groups of lanes one after another in a `lax.map`
    inside the same program (lanes <= 0 or >= P: one vmap over all P).

    With a `mesh` of D devices that divide P, each device takes P / D consecutive runs and
    runs them `lanes` at a time (`distributed.over_rows`).
    """
    def run(state, data, key, hp, rounds):
        return over_rows(lambda r, s: fn(r[0], s[0], r[1], r[2], s[1]), (state, key, hp), lanes,
                         mesh, shared=(data, rounds))

    return run


def eval_rounds(total: int, every: int) -> list[int]:
    """Rounds after which a run evaluates: every `every` rounds and the last one."""
    pts = list(range(every, total, every)) if every > 0 else []
    return pts + [total] if total > 0 else []


@shared
def _initial_of(initial):
    """pre_init's output for an algorithm without one: its initial model only, as a
    function of the run's root key."""
    def pre(root):
        return {"initial": initial(init_key(root))}

    return pre


@shared
def _vmap_of(fn, in_axes):
    """`jax.vmap(fn, in_axes)`, one per function: batches of the same shapes (the arms of a
    comparison, when they share a function) reuse its traced program."""
    return jax.vmap(fn, in_axes=in_axes)


# what the heartbeat calls each program while it compiles (`progress`)
PROGRAMS = {"pre_init": "the solo models' program", "initial": "the initial model's program",
            "init": "the initial state's program", "eval": "the evaluation program"}


def _block(tree):
    return jax.tree.map(lambda a: a.block_until_ready() if hasattr(a, "block_until_ready") else a,
                        tree)


class Driver:
    """Runs `alg` on `data` for one run or a batch of runs (see the module docstring).

    Args:
      alg, data: the algorithm and the federated data.
      hp: hyperparameters as arrays, on the device or the host (stacked [P] with
        `runs=P`).
      keys: the root key `jax.random.key(seed)` of the run, or [P] keys with `runs=P`.
      runs: None for one run without a runs axis, or P.
      lanes: with `runs`, runs side by side in one vmap (0 = all P).
      mesh: a `distributed` mesh: one run replicates data and state over it (its algorithm
        shards the cohort); a batch shards the runs axis over it.
      compiled: the cache of compiled programs ("pre_init", "init", "eval", ("chunk",
        length)).
      keep_metric: which per-round metrics the driver keeps (name, host array) -> bool.
      account: `alg.account` of DP runs: privacy entries added to each history entry.
      before_training: called once, with the state and the number of per-round metric
        values a round returns (all runs together), after the first chunk is compiled and
        before it runs (the free-space check of checkpointed runs).
      programs: an `execute.programs.ProgramCache` for the functions of `alg` (its context
        names what built them): programs found there are neither traced nor compiled.
      heartbeat: a `progress.Heartbeat` told what the driver is doing (compiling which
        program, training the solo models, evaluating, training which rounds, with the
        pace and the time left), so that it writes a line while a step lasts long.
    """

    def __init__(self, alg: FederatedAlgorithm, data: FederatedData, hp: HParams,
                 keys: jax.Array, *, runs: int | None = None, lanes: int = 0, mesh=None,
                 compiled: dict | None = None,
                 keep_metric: Callable[[str, np.ndarray], bool] | None = None,
                 account: Callable | None = None,
                 before_training: Callable[[Any, int], None] | None = None,
                 programs=None, heartbeat=None):
        # every run, sweep and grid compiles through a driver: a long process (a sweep of
        # many configurations, `reproduce all`) drops JAX's programs before it runs out of
        # memory mappings (`execute.runtime.release_programs_if_crowded`)
        release_programs_if_crowded()
        self.alg, self.runs, self.mesh = alg, runs, mesh
        self.heartbeat = heartbeat
        self._total, self._evals = 0, set()  # the rounds and evaluations of `run`
        self.programs = programs
        self.layout = repr((runs, lanes, None if mesh is None else
                            (tuple(mesh.shape.items()), mesh.devices.tolist())))
        self.compiled = {} if compiled is None else compiled
        self.keep_metric, self.account = keep_metric, account
        self.before_training = before_training
        self.timing = {"init_compile_s": 0.0, "eval_compile_s": 0.0, "compile_s": 0.0}
        self.eval_times: list[float] = []
        self.round_times: list[float] = []  # seconds per round of each chunk
        self.train_s = 0.0  # seconds of all chunks
        self.init_s = 0.0  # seconds running the init program (compiling excluded)
        self.start = 0  # the round the current `run` started from
        self.histories: list[list[dict]] = [[] for _ in range(runs or 1)]
        self.per_round: list[dict[str, np.ndarray]] = []
        self.latest: list[Any] | None = None  # the latest evaluation `run` committed
        self.given_data = data  # as the caller gave it (the key of `PRE_MEMO`)
        if mesh is None:  # host values (a sweep's stacked hyperparameters): transferred
            hp = jax.device_put(hp)
        if runs is None:
            self._out = {}
            if mesh is not None:
                data, hp = replicate((data, hp), mesh)
            self._chunk = _chunk_of(alg)
        else:
            self._out = {}  # every output has the runs axis first: keep it sharded
            if mesh is not None:
                data = replicate(data, mesh)
                hp, keys = shard_leading((hp, keys), mesh)
                self._out = {"out_shardings": NamedSharding(mesh, PartitionSpec(AXIS))}
            self._chunk = combine_lanes(rooted_chunk(alg), lanes, runs, mesh)
        self.data, self.hp = data, hp
        self.keys = keys  # root keys: every program derives its own (`init_key`, `train_key`)

    def _scope(self):
        """The context programs are traced in: one run with a mesh traces under it
        (`jax.set_mesh`), so passes over all clients (evaluation, solo models) spread
        their rows over its devices (`distributed.spread`); a batch of runs shards the
        runs axis instead and traces without it."""
        if self.mesh is None or self.runs is not None:
            return contextlib.nullcontext()
        return jax.set_mesh(self.mesh)

    def _compile(self, role: str, fn, args: tuple):
        """`jax.jit(fn)` lowered for `args` (in the driver's scope) and compiled, or its
        executable read back from `programs`."""
        def lower():
            with self._scope():
                return jax.jit(fn, **self._out).lower(*args)

        length = role.split()[1] if role.startswith("chunk") else ""
        with phase(self.heartbeat, f"compiling {PROGRAMS.get(role, f'the {role} program')}"
                   if not length else f"compiling the round program ({length} round"
                   f"{'' if length == '1' else 's'} a chunk)"):
            if self.programs is None:
                return lower().compile()
            return self.programs.compiled(f"{role} {self.layout}", args, lower)

    def _vmapped(self, fn, in_axes):
        return fn if self.runs is None else _vmap_of(fn, in_axes)

    def _trace(self, fn, args: tuple):
        """`jax.jit(fn)` traced for `args` in the driver's scope, as `_compile` lowers it.
        JAX keeps the trace: compiling the same function later for values of these shapes
        (and placement) does not trace it again."""
        with self._scope():
            return jax.jit(fn, **self._out).trace(*args)

    def _like_outputs(self, info):
        """Shapes standing for a program's outputs as the next program receives them:
        sharded over the runs axis when the driver shards it, else unplaced."""
        sharding = self._out.get("out_shardings")
        return jax.tree.map(lambda s: jax.ShapeDtypeStruct(
            s.shape, s.dtype, weak_type=s.weak_type, sharding=sharding), info)

    def eval_shapes(self):
        """What one run's evaluation returns (a tree of `jax.ShapeDtypeStruct`, without the
        runs axis), found without running anything: the init programs and the evaluation
        are traced for the shapes of their inputs, the traces the driver then compiles (a
        sweep's metric check costs no tracing of its own)."""
        args = (self.keys, self.data, self.hp)
        axes = (0, None, 0)
        if self.alg.pre_init is not None or self.alg.initial is not None:
            pre = (self._trace(self._vmapped(from_root(self.alg.pre_init), axes), args)
                   if self.alg.pre_init is not None else
                   self._trace(self._vmapped(_initial_of(self.alg.initial), (0,)), args[:1]))
            args, axes = (*args, self._like_outputs(pre.out_info)), (*axes, 0)
        init = self._trace(self._vmapped(from_root(self.alg.init), axes), args)
        state = self._like_outputs(init.out_info)
        out = self._trace(self._vmapped(self.alg.evaluate, (0, None, 0)),
                          (state, self.data, self.hp)).out_info
        if self.runs is None:
            return out
        return jax.tree.map(lambda s: jax.ShapeDtypeStruct(s.shape[1:], s.dtype), out)

    def _init_program(self, role: str, fn, in_axes, args: tuple):
        if role not in self.compiled:
            t = time.perf_counter()
            self.compiled[role] = self._compile(role, self._vmapped(fn, in_axes), args)
            self.timing["init_compile_s"] += time.perf_counter() - t
        return self.compiled[role]

    def _run_init(self, role: str, fn, in_axes, args: tuple, what: str):
        """Compile (once) and run an init program, the heartbeat told `what` it does; its
        run time counts as `init_s`."""
        program = self._init_program(role, fn, in_axes, args)
        t = time.perf_counter()
        with phase(self.heartbeat, what):
            out = _block(program(*args))
        self.init_s += time.perf_counter() - t
        return out

    def init(self):
        """The initial server state(s). The part of init that does not depend on the
        algorithm runs first as a program of its own, whose compiled form the arms of a
        comparison (and runs of one model) share: an algorithm's `pre_init` (the solo
        models), else its `initial` model."""
        args = (self.keys, self.data, self.hp)
        if self.alg.pre_init is not None:  # the same outputs for equal inputs: `pre_memo`
            fn = from_root(self.alg.pre_init)
            pre = PRE_MEMO.get_or_compute(
                fn, self.layout, self.given_data, self.keys, self.hp,
                lambda: self._run_init("pre_init", fn, (0, None, 0), args,
                                       "training the solo models (appeal protocol)"))
        elif self.alg.initial is not None:
            pre = self._run_init("initial", _initial_of(self.alg.initial), (0,), args[:1],
                                 "building the initial model")
        else:  # (what init trains: features)
            return self._run_init("init", from_root(self.alg.init), (0, None, 0), args,
                                  "computing the initial state")
        # (what init trains: features, solo models of an algorithm without pre_init)
        return self._run_init("init", from_root(self.alg.init), (0, None, 0, 0), (*args, pre),
                              "computing the initial state")

    def place(self, state):
        """A state read from a checkpoint, laid out as the driver's own."""
        if self.mesh is None:
            return state
        return replicate(state, self.mesh) if self.runs is None else shard_leading(state,
                                                                                  self.mesh)

    def evaluate(self, state) -> list[Any]:
        """The host-side evaluation of every run (per-client arrays)."""
        if "eval" not in self.compiled:
            t = time.perf_counter()
            self.compiled["eval"] = self._compile(
                "eval", self._vmapped(self.alg.evaluate, (0, None, 0)),
                (state, self.data, self.hp))
            self.timing["eval_compile_s"] += time.perf_counter() - t
        t0 = time.perf_counter()
        with phase(self.heartbeat, "evaluating every client"):
            ev = fetch(self.compiled["eval"](state, self.data, self.hp))
        self.eval_times.append(time.perf_counter() - t0)
        if self.runs is None:
            return [ev]
        return [jax.tree.map(lambda a, i=i: a[i], ev) for i in range(self.runs)]

    def record(self, r: int, evals: list[Any]) -> list[dict]:
        """Append round r's history entry of every run; returns the entries."""
        entries = []
        for h, ev in zip(self.histories, evals, strict=True):
            entry = {"round": r, **summarize(ev)}
            if self.account is not None:  # DP: epsilon after r rounds (host-side accountant)
                entry.update(self.account(r))
            h.append(entry)
            entries.append(entry)
        return entries

    def advance(self, state, r: int, stop: int):
        """(state after round `stop`, host per-round metrics of rounds r+1 .. stop)."""
        length = stop - r
        rarr = jnp.arange(r, stop, dtype=jnp.int32)
        ck = ("chunk", length)
        if ck not in self.compiled:
            t0 = time.perf_counter()
            self.compiled[ck] = self._compile(f"chunk {length}", self._chunk,
                                              (state, self.data, self.keys, self.hp, rarr))
            self.timing["compile_s"] += time.perf_counter() - t0
            if self.before_training is not None:
                values = sum(int(np.prod(a.shape)) for a in
                             jax.tree.leaves(self.compiled[ck].out_info[1])) // length
                self.before_training(state, values)
                self.before_training = None
        t0 = time.perf_counter()
        with phase(self.heartbeat, self._training(r, stop)):
            new_state, metrics = self.compiled[ck](state, self.data, self.keys, self.hp, rarr)
            _block(new_state)
        took = time.perf_counter() - t0
        self.train_s += took
        self.round_times.append(took / length)
        metrics = fetch(metrics)
        if self.keep_metric is not None:
            metrics = {k: v for k, v in metrics.items() if self.keep_metric(k, v)}
        return new_state, metrics

    def _training(self, r: int, stop: int) -> Callable[[float], str]:
        """The heartbeat's text for the chunk of rounds r+1 .. stop (see `progress`)."""
        total = max(self._total, stop)
        pace = float(np.median(self.round_times)) if self.round_times else None
        evals = self.eval_times[1:] or self.eval_times
        eval_s = float(np.median(evals)) if evals else 0.0
        return training(r, stop, total, pace, eval_s, sum(1 for e in self._evals if e > r))

    def round_metrics(self, per_round: list[dict[str, np.ndarray]] | None = None
                      ) -> dict[str, np.ndarray]:
        """The per-round metrics so far (or of `per_round`, chunks as `self.per_round`
        holds them), concatenated over chunks along the rounds axis (axis 0 for one run, 1
        behind the runs axis)."""
        axis = 0 if self.runs is None else 1
        per_round = self.per_round if per_round is None else per_round
        if not per_round:
            return {}
        return {k: np.concatenate([np.asarray(m[k]) for m in per_round], axis=axis)
                for k in per_round[0]}

    def at_round(self, r: int) -> tuple[list[list[dict]], list[dict[str, np.ndarray]]]:
        """(histories, per-round metric chunks) as they stood after round `r`: what a
        checkpoint of round r holds. A Ctrl-C can land after a chunk's bookkeeping and
        before the loop moves on to its round (`loop.run_loop` then reports the round
        before); the entries past r are left out, so that a resume from r adds them once."""
        axis = 0 if self.runs is None else 1
        histories = [[e for e in h if e["round"] <= r] for h in self.histories]
        kept, covered = [], 0
        for m in self.per_round:
            length = next((int(np.shape(v)[axis]) for v in m.values()), 0)
            if covered + length > r:
                break
            kept.append(m)
            covered += length
        return histories, kept

    def run(self, state, start: int, *, rounds: int, eval_every: int, saves=(),
            guard: Callable | None = None, after: Callable | None = None,
            interrupted: Callable | None = None):
        """Train from round `start` to `rounds`, evaluating at `eval_rounds` and stopping at
        `saves`; returns (state, last round, the latest evaluation or None).

        `guard(state, r, metrics)` may refuse a chunk before it is committed; `after(r,
        state, entries)` runs once a chunk is committed with the history entries it added
        (checkpoints, progress); `interrupted(r, state)` on Ctrl-C (see `loop.Hooks`).
        """
        self.start = start
        evals = set(eval_rounds(rounds, eval_every))
        self._total, self._evals = rounds, evals
        latest: list[Any] = []
        fresh: list[dict] = []

        def commit(stop, new_state, metrics):
            ev = self.evaluate(new_state) if stop in evals else None
            self.per_round.append(metrics)  # a Ctrl-C before this keeps round r
            if ev is not None:
                fresh.extend(self.record(stop, ev))
                latest[:] = [ev]
                self.latest = ev

        def after_chunk(r, st):
            entries = list(fresh)
            fresh.clear()
            if after is not None:
                after(r, st, entries)

        state, r = run_loop(state, start, stop_points(start, evals, set(saves)), self.advance,
                            Hooks(guard=guard, commit=commit, after=after_chunk,
                                  interrupted=interrupted))
        return state, r, (latest[0] if latest else None)
