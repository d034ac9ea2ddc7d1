"""Checkpoint / resume: one `checkpoint.npz` per run folder, written atomically.

A checkpoint holds everything a run needs to continue exactly where it stopped:

  * the server state (every leaf of the `ServerState` pytree; PRNG-key leaves as their key
    data and implementation name),
  * the round r it was taken after, the history so far and the per-round metrics so far,
  * the run's configuration, hyperparameters and seed (the training key of round r is
    `fold_in(train_key(seed), r)`, so nothing else about the random stream is needed).

Format: a plain `.npz` (one array per state leaf, named by its pytree path under `state/`,
e.g. `state/params/Dense_0/kernel` or `state/opt_state/0/mu/Dense_0/bias`; per-round metrics
`rm_<name>` and a JSON document `meta` stored as uint8 bytes), readable without pickle on
any jax version (`np.load(path)["state/params/Dense_0/kernel"]`). Checkpoints of format 1,
whose leaves are `leaf_00000`, ... in flattening order, still load. Format 3 names the
stages' states by their typed fields (`state/algo/c/...`, `state/hetero/key`); a format-2
checkpoint of a run with such state (its leaves under `state/extra/...`) is refused in one
line, one without (FedAvg's) still loads. It
is written to a temporary file in the same folder, fsynced and moved into place with
`os.replace`, so a run killed at any moment (SIGKILL included) leaves either the previous
or the new checkpoint, never a torn one. We chose this over orbax-checkpoint because the
whole state is small host-side data and a single-file atomic write keeps the behaviour
identical on jax 0.10 and 0.11 (no async managers, no extra dependency).
"""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ..core.config import ConfigError
from ..core.fields import option
from ..data.sources import read_npz
from ..execute.distributed import fetch, is_main
from .diskspace import WriteFailed, check_free, estimate_bytes, reason
from .report import to_jsonable

option("checkpoint_every", 0, "checkpoint every this many rounds (0 = on Ctrl-C only)",
       group="scale", ge=0)
option("resume", "", "continue the run whose checkpoint is in this folder", group="scale")

FILE = "checkpoint.npz"
FORMAT = 3  # 3: typed stage fields; 2: stages under extra/ (refused when present);
# 1: leaf_00000, ... (still read)
PREFIX = "state/"
OLD_STAGES = "extra/"  # format 2's leaves of the stages' state (`ServerState.extra`)
# RunConfig fields that may differ between a run and its resumption.
RESUMABLE_CHANGES = ("rounds", "out", "resume", "checkpoint_every", "devices", "client_chunk",
                     "client_lanes", "layout", "data_dir", "fmnist_dir", "cache_dir", "log",
                     "dp_publish_client_stats")


def _is_key(a) -> bool:
    return hasattr(a, "dtype") and jax.dtypes.issubdtype(a.dtype, jax.dtypes.prng_key)


def path_name(path) -> str:
    """A pytree path as a '/'-joined name: `.params['Dense_0']['kernel']` ->
    `params/Dense_0/kernel`, `.opt_state[0].mu[...]` -> `opt_state/0/mu/...`."""
    tu = jax.tree_util
    parts = []
    for k in path:
        if isinstance(k, tu.DictKey):
            parts.append(str(k.key))
        elif isinstance(k, tu.GetAttrKey):
            parts.append(k.name)
        elif isinstance(k, tu.SequenceKey):
            parts.append(str(k.idx))
        elif isinstance(k, tu.FlattenedIndexKey):
            parts.append(str(k.key))
        else:
            parts.append(str(k))
    return "/".join(parts) or "leaf"


def leaf_names(tree) -> tuple[list[str], list[Any], Any]:
    """(unique names by pytree path, leaves, treedef) of `tree`, in flattening order; a
    name that two paths share (dict keys holding '/') gets a `#i` suffix."""
    with_path, treedef = jax.tree_util.tree_flatten_with_path(tree)
    names, seen = [], set()
    for i, (path, _) in enumerate(with_path):
        n = path_name(path)
        if n in seen:
            n = f"{n}#{i}"
        seen.add(n)
        names.append(n)
    return names, [leaf for _, leaf in with_path], treedef


def _state_arrays(state) -> tuple[dict[str, np.ndarray], dict[str, str], list[str]]:
    """(npz arrays `state/<path>`, key implementation per PRNG-key leaf, names) of a state
    already fetched to the host."""
    names, leaves, _ = leaf_names(state)
    arrays: dict[str, np.ndarray] = {}
    key_impls: dict[str, str] = {}
    for name, leaf in zip(names, leaves, strict=True):
        if _is_key(leaf):
            key_impls[name] = str(jax.random.key_impl(leaf))
            leaf = jax.random.key_data(leaf)
        arrays[PREFIX + name] = np.asarray(leaf)
    return arrays, key_impls, names


def _restore_leaves(z, meta: dict[str, Any], template, where: str, *, check_shapes: bool = True):
    """The leaves of `template` read from the open npz `z` (named, or format-1 `leaf_NNNNN`)."""
    names, leaves, treedef = leaf_names(template)
    stored = meta.get("leaf_names")
    if stored is None:  # format 1: leaf_00000, ... in flattening order
        if meta["num_leaves"] != len(leaves) or ("treedef" in meta
                                                 and meta["treedef"] != str(treedef)):
            raise ConfigError(f"{where} holds a different state structure (other algorithm or "
                              "model); resume with the same configuration")
        keys = [f"leaf_{i:05d}" for i in range(len(leaves))]
    else:
        missing = [n for n in names if n not in stored][:1]
        extra = [n for n in stored if n not in names][:1]
        if (missing or extra) and any(n.startswith(OLD_STAGES) for n in stored):
            raise ConfigError(f"{where} was written by an earlier version that kept the "
                              "stages' state under 'extra' (format 2); start a new run")
        if missing or extra:  # read by name: the order of the stored leaves does not matter
            what = (f"it lacks {missing[0]}" if missing else
                    f"it holds {extra[0]}, which the run does not have")
            raise ConfigError(f"{where} holds a different state structure ({what}; other "
                              "algorithm or model); resume with the same configuration")
        keys = [PREFIX + n for n in names]
    impls = meta.get("key_impls", {})
    out = []
    for key, name, t in zip(keys, names, leaves, strict=True):
        a = z[key]
        impl = impls.get(key if stored is None else name)
        if impl is not None:
            out.append(jax.random.wrap_key_data(jnp.asarray(a), impl=impl))
            continue
        if check_shapes and (a.shape != np.shape(t) or a.dtype != np.asarray(t).dtype):
            raise ConfigError(f"{where}: {name} has shape {a.shape} {a.dtype}, the run "
                              f"expects {np.shape(t)} {np.asarray(t).dtype}; resume with the "
                              "same configuration")
        out.append(jnp.asarray(a))
    return jax.tree.unflatten(treedef, out)


@dataclasses.dataclass
class Restored:
    state: Any  # the ServerState after `round` rounds
    round: int
    history: list[dict[str, float]]
    round_metrics: dict[str, np.ndarray]  # [round - 0, ...] per-round values so far
    meta: dict[str, Any]


@dataclasses.dataclass
class Checkpointer:
    """Saves into `directory/checkpoint.npz` every `every` rounds and after the last one
    (0 = only when asked: Ctrl-C, the NaN guard).

    `meta` (configuration, hyperparameters, seed) is stored with every checkpoint and
    checked against the resuming run.
    """

    directory: Path
    every: int = 0
    meta: dict[str, Any] = dataclasses.field(default_factory=dict)
    last_round: int | None = None  # round of the newest checkpoint on disk

    @property
    def path(self) -> Path:
        return Path(self.directory) / FILE

    def due(self, start: int, total: int) -> list[int]:
        """Rounds in (start, total] after which a checkpoint is taken: every `every` rounds
        and always the last one, so a finished run can be extended with --resume."""
        if self.every <= 0:
            return []
        return [r for r in [*range(self.every, total, self.every), total] if r > start]

    def kept(self) -> str:
        """Where the last good state is, and how to go on from it (for error messages)."""
        d = self.directory
        if self.last_round is None:
            return f"no earlier checkpoint exists in {d}: free space and start the run again"
        return (f"the checkpoint of round {self.last_round} stays in {d}: free space, then "
                f"continue with --resume {d}")

    def check_space(self, state, metric_values: int) -> None:
        """Refuse in one line, before training, when the output file system has less free
        space than the checkpoints and results of this run need (`diskspace`);
        `metric_values` counts the per-round metric values of the whole run."""
        if is_main():
            check_free(self.directory, estimate_bytes(state, metric_values))

    def check_space_for(self, rounds: int):
        """`driver.Driver`'s `before_training` hook: `check_space` for a run of `rounds`
        rounds, given the per-round metric values one round returns."""
        return lambda state, per_round: self.check_space(state, per_round * rounds)

    def save(self, state, rnd: int, history: list[dict], round_metrics: dict[str, np.ndarray]
             ) -> Path:
        arrays, key_impls, names = _state_arrays(fetch(state))  # every process takes part
        for k, v in round_metrics.items():
            arrays[f"rm_{k}"] = np.asarray(v)
        meta = {"format": FORMAT, "round": int(rnd), "history": history,
                "num_leaves": len(names), "leaf_names": names, "key_impls": key_impls,
                "round_metrics": sorted(round_metrics), "time": time.time(), **self.meta}
        arrays["meta"] = np.frombuffer(json.dumps(_jsonable(meta)).encode(), np.uint8)
        if not is_main():  # one writer: process 0 (the others hold the same values)
            self.last_round = int(rnd)
            return self.path
        try:
            _atomic_write(self.path, lambda f: np.savez(f, **arrays))
        except OSError as e:
            raise WriteFailed(f"could not write the checkpoint of round {rnd} to {self.path} "
                              f"({reason(e)}); {self.kept()}") from None
        self.last_round = int(rnd)
        delay = os.environ.get("FEDJAX_APPEAL_TEST_SLEEP_AFTER_CHECKPOINT")
        if delay:  # test-only: widen the window in which a test kills the process
            time.sleep(float(delay))
        return self.path


def _jsonable(obj):
    return to_jsonable(obj)


def read_meta(directory: str | Path) -> dict[str, Any]:
    """The metadata (config, hparams, round, history) of the checkpoint in `directory`."""
    p = Path(directory) / FILE
    if not p.is_file():
        raise ConfigError(f"no checkpoint in {directory} (expected {p}); run with --out "
                          f"{directory} first, or give the folder of an interrupted run")
    try:
        with np.load(p, allow_pickle=False) as z:
            return json.loads(z["meta"].tobytes().decode())
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as e:
        raise ConfigError(f"checkpoint {p} is unreadable ({type(e).__name__}); start a new "
                          "run") from None


def load(directory: str | Path, template) -> Restored:
    """Restore the checkpoint in `directory` into the structure of `template` (a state)."""
    meta = read_meta(directory)
    z = read_npz(Path(directory) / FILE, "start a new run (the checkpoint cannot be used)")
    state = _restore_leaves(z, meta, template, f"checkpoint in {directory}")
    rm = {k: z[f"rm_{k}"] for k in meta["round_metrics"]}
    history = [{k: (float("nan") if v is None else v) for k, v in h.items()}
               for h in meta["history"]]
    return Restored(state, int(meta["round"]), history, rm, meta)


def check_compatible(meta: dict[str, Any], config: dict[str, Any], hparams: dict[str, Any],
                     directory: str | Path) -> None:
    """Raise `ConfigError` if the resuming run differs from the checkpointed one."""
    for k, v in meta.get("config", {}).items():
        if k in RESUMABLE_CHANGES or k not in config:
            continue
        if config[k] != v:
            raise ConfigError(f"checkpoint in {directory} was made with --{k.replace('_', '-')} "
                              f"{v!r}, not {config[k]!r}: drop the flag or start a new run")
    for k, v in meta.get("hparams", {}).items():
        if k in hparams and not np.isclose(float(hparams[k]), float(v), rtol=1e-6, atol=0):
            raise ConfigError(f"checkpoint in {directory} was made with --{k.replace('_', '-')} "
                              f"{v}, not {hparams[k]}: drop the flag or start a new run")


def resume_base(directory: str) -> dict[str, Any]:
    """Configuration keys of the checkpointed run in `directory` (CLI defaults for --resume)."""
    if not directory:
        return {}
    meta = read_meta(directory)
    return {**{k: v for k, v in meta.get("config", {}).items() if k not in ("resume", "out")},
            **meta.get("hparams", {}), "out": str(directory)}


class NonFiniteError(ConfigError):
    """The server parameters became NaN/Inf; the message names the round."""


class Interrupted(KeyboardInterrupt):
    """Ctrl-C during a run; the message says where the checkpoint was saved."""


def _none_to_nan(obj):
    if isinstance(obj, dict):
        return {k: _none_to_nan(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_none_to_nan(v) for v in obj]
    return float("nan") if obj is None else obj


def _atomic_write(path: Path, write) -> None:
    """`write(file)` into a temporary file beside `path`, fsync, then `os.replace`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}-", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _sweep_write(path: Path, write) -> None:
    """`_atomic_write` of a sweep checkpoint file; a failed write is one line."""
    try:
        _atomic_write(path, write)
    except OSError as e:
        raise WriteFailed(f"could not write {path} ({reason(e)}); the sweep's earlier "
                          f"progress stays in {path.parent}: free space, then continue with "
                          f"`fedjax-appeal sweep --resume {path.parent.parent}`") from None


SWEEP_DIR = "sweep-checkpoint"


@dataclasses.dataclass
class SweepCheckpoint:
    """Progress of a sweep in `directory` (`OUT/sweep-checkpoint/`), written atomically.

    * `spec.json`: what the sweep is (configuration, hyperparameters, grid, seeds, the
      batch size of each group); `--resume` refuses a sweep that differs.
    * `rows.json`: the rows of every finished batch, keyed `"group/batch"`.
    * `batch.npz`: the running batch (its stacked server states, the round, the histories
      and per-round metrics so far), saved every `every` rounds and on Ctrl-C; removed
      when the batch finishes.

    Only the main process writes (the others hold the same values).
    """

    directory: Path
    every: int = 0
    spec: dict[str, Any] = dataclasses.field(default_factory=dict)

    def _main(self) -> bool:
        return is_main()

    def write_spec(self) -> None:
        if self._main():
            text = json.dumps(_jsonable(self.spec), indent=1).encode()
            _sweep_write(Path(self.directory) / "spec.json", lambda f: f.write(text))

    def read_spec(self) -> dict[str, Any]:
        return read_sweep_spec(self.directory)

    def finished(self) -> dict[str, list[dict[str, Any]]]:
        p = Path(self.directory) / "rows.json"
        if not p.is_file():
            return {}
        try:
            return _none_to_nan(json.loads(p.read_text()))
        except (OSError, ValueError) as e:
            raise ConfigError(f"sweep checkpoint {p} is unreadable ({e}); start the sweep "
                              "again with --overwrite") from None

    def save_rows(self, done: dict[str, list[dict[str, Any]]]) -> None:
        if self._main():
            text = json.dumps(_jsonable(done), allow_nan=False).encode()
            _sweep_write(Path(self.directory) / "rows.json", lambda f: f.write(text))

    def save_batch(self, key: str, state, rnd: int, histories, per_round) -> None:
        """The running batch after round `rnd` (every process takes part in the fetch)."""
        host = fetch(state)
        if not self._main():
            return
        arrays, impls, names = _state_arrays(host)
        for j, m in enumerate(per_round):
            for k, v in m.items():
                arrays[f"rm_{j:04d}_{k}"] = np.asarray(v)
        meta = {"batch": key, "round": int(rnd), "histories": histories,
                "num_leaves": len(names), "leaf_names": names, "key_impls": impls,
                "chunks": len(per_round)}
        arrays["meta"] = np.frombuffer(json.dumps(_jsonable(meta)).encode(), np.uint8)
        _sweep_write(Path(self.directory) / "batch.npz", lambda f: np.savez(f, **arrays))

    def load_batch(self, key: str, template):
        """(state, round, histories, per_round) of batch `key`, or None if not saved."""
        p = Path(self.directory) / "batch.npz"
        if not p.is_file():
            return None
        with np.load(p, allow_pickle=False) as z:
            meta = json.loads(z["meta"].tobytes().decode())
            if meta["batch"] != key:
                return None
            try:
                state = _restore_leaves(z, meta, template, f"sweep checkpoint {p}",
                                        check_shapes=False)
            except ConfigError:
                raise ConfigError(f"sweep checkpoint {p} holds a different state structure; "
                                  "start the sweep again with --overwrite") from None
            per_round = []
            for j in range(meta["chunks"]):
                pre = f"rm_{j:04d}_"
                per_round.append({k[len(pre):]: z[k] for k in z.files if k.startswith(pre)})
        return (state, int(meta["round"]), _none_to_nan(meta["histories"]), per_round)

    def clear_batch(self) -> None:
        if self._main():
            (Path(self.directory) / "batch.npz").unlink(missing_ok=True)


def resumed_split(folder: str | Path) -> tuple[int | None, dict[str, Any]]:
    """(the CPU split recorded by the sweep checkpoint of the sweep folder `folder`, or
    None; its configuration), read before JAX starts (`cli.process.cpu_devices_for`);
    (None, {}) when there is no readable checkpoint (the command then refuses the folder in
    one line)."""
    try:
        spec = read_sweep_spec(Path(folder) / SWEEP_DIR)
    except ConfigError:
        return None, {}
    split = spec.get("cpu_devices")
    return (None if split is None else int(split)), spec.get("config", {})


def read_sweep_spec(directory: str | Path) -> dict[str, Any]:
    """The `spec.json` of a sweep checkpoint folder (one-line error when missing)."""
    p = Path(directory) / "spec.json"
    if not p.is_file():
        raise ConfigError(f"no sweep checkpoint in {Path(directory).parent} (expected {p}): "
                          "give the --out folder of an interrupted sweep")
    try:
        return json.loads(p.read_text())
    except (OSError, ValueError) as e:
        raise ConfigError(f"sweep checkpoint {p} is unreadable ({e}); start the sweep again "
                          "with --overwrite") from None
