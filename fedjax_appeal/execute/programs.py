"""A cache of compiled programs that skips tracing: `ProgramCache`.

JAX's persistent compilation cache (`runtime.enable_compilation_cache`) saves XLA's work,
but a process still traces and lowers every program before it can look one up: on a
2-core CPU that is 0.7 s of a warm FedAvg run and 5 s of a warm tour. A `ProgramCache`
keeps each compiled executable (`jax.experimental.serialize_executable`) under a key made
of everything that decides the program without tracing it:

* the code: the path, size and modification time of every source file of
  `fedjax_appeal` and of every imported module that is not part of the Python
  installation (`papers`, plugins, the user's own scripts; `code_fingerprint`);
* what the caller says built the function (`context`: for a run, its whole
  configuration, the dataset's normalisation constants and the fingerprint of its small
  data arrays; see `run.assemble.program_context`);
* the program's role (init, eval, a chunk of L rounds) and the layout (runs, lanes, mesh);
* every argument's tree structure, shape, dtype and sharding;
* jax and jaxlib versions, the backend and its devices, XLA_FLAGS and JAX's flags.

A program whose key was seen before is read back (milliseconds) instead of traced,
lowered and compiled; the executable is the one the first process compiled, so results
are identical. Anything the key does not name must not change a program: callers that
cannot vouch for that (a library user's own algorithm) pass no cache.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import jax
import jaxlib
import numpy as np
from jax.experimental import serialize_executable

FORMAT = 1  # bump when the stored layout changes
MAX_BYTES = 1 << 30  # beyond this the least recently used entries are deleted
# JAX monitoring event of each executable read back (its seconds): `runtime.CompileLog`
LOAD_EVENT = "/fedjax_appeal/program_cache/load_duration"
# JAX flags that only concern caches, logging or debugging output, never a program
_FLAG_WORDS_IGNORED = ("cache", "log", "explain", "traceback", "profil", "coordination",
                       "distributed", "debug_infs", "debug_nans", "num_cpu_devices")


def _files_digest(paths: Iterable[Path]) -> str:
    """A digest of the files' paths, sizes and modification times (a file's content
    changes its size or time; reading every file instead cost 0.2 s a run)."""
    h = hashlib.blake2b(digest_size=16)
    for p in sorted(paths):
        st = p.stat()
        h.update(repr((str(p), st.st_size, st.st_mtime_ns)).encode())
    return h.hexdigest()


def code_fingerprint() -> str:
    """A digest of the source files of `fedjax_appeal` (every file) and of every imported
    module that is not installed with Python or in its site-packages: `papers`, plugins,
    the user's own scripts and modules (`_files_digest`)."""
    roots = [Path(__file__).resolve().parents[1]]
    papers = sys.modules.get("papers")
    if papers is not None and getattr(papers, "__file__", None):
        roots.append(Path(papers.__file__).resolve().parent)
    files = {p for r in roots for p in r.rglob("*.py")}
    prefixes = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    installed = tuple({os.path.abspath(p) for p in prefixes}
                      | {os.path.realpath(p) for p in prefixes})
    for mod in list(sys.modules.values()):
        f = getattr(mod, "__file__", None)
        if not f or not f.endswith(".py") or os.path.abspath(f).startswith(installed):
            continue  # (a string test first: resolving every module's path costs 0.4 s)
        p = Path(f).resolve()
        if not str(p).startswith(installed) and p.is_file():
            files.add(p)
    return _files_digest(files)


def environment_fingerprint() -> str:
    """jax / jaxlib versions, the backend's devices, XLA_FLAGS and JAX's flags."""
    flags = {k: repr(v) for k, v in jax.config.values.items()
             if not any(w in k for w in _FLAG_WORDS_IGNORED)}
    devices = [(d.platform, d.device_kind, d.id, d.process_index) for d in jax.devices()]
    return repr((jax.__version__, jaxlib.__version__, jax.default_backend(), devices,
                 os.environ.get("XLA_FLAGS", ""), sorted(flags.items())))


def arrays_digest(tree: Any, max_elements: int = 1 << 20) -> str:
    """A digest of a pytree's structure and of its arrays: every array's shape and dtype,
    and the values of the arrays of at most `max_elements` elements (labels, offsets,
    counts; the large feature arrays enter only through their shapes)."""
    h = hashlib.blake2b(digest_size=16)
    leaves, treedef = jax.tree.flatten(tree)
    h.update(str(treedef).encode())
    for a in leaves:
        shape, dtype = np.shape(a), getattr(a, "dtype", type(a))
        h.update(repr((shape, str(dtype))).encode())
        if int(np.prod(shape)) <= max_elements and not jax.dtypes.issubdtype(
                dtype, jax.dtypes.prng_key):
            h.update(np.ascontiguousarray(np.asarray(a)).tobytes())
    return h.hexdigest()


def signature(args: Any) -> str:
    """The tree structure, shapes, dtypes and shardings of a program's arguments."""
    leaves, treedef = jax.tree.flatten(args)
    parts = [str(treedef)]
    for a in leaves:
        sharding = getattr(a, "sharding", None)
        parts.append(repr((np.shape(a), str(getattr(a, "dtype", type(a))),
                           None if sharding is None else repr(sharding))))
    return "\n".join(parts)


class ProgramCache:
    """Compiled executables on disk, keyed as the module docstring says.

    Args:
      folder: where the executables are kept (one file per program).
      context: what built the functions whose programs are cached (a string the caller
        vouches for: every value that is baked into the programs).
      code: the code fingerprint (default `code_fingerprint()`).
    """

    def __init__(self, folder: str | Path, context: str, code: str | None = None):
        self.folder = Path(folder)
        self.base = repr((FORMAT, code or code_fingerprint(), environment_fingerprint(),
                          context))
        self.hits = 0
        self.stored = 0

    def with_context(self, context: str) -> ProgramCache:
        """The same cache for functions built from another `context`."""
        other = ProgramCache.__new__(ProgramCache)
        other.folder, other.hits, other.stored = self.folder, 0, 0
        other.base = repr((self.base, context))
        return other

    def key(self, role: str, args: Any) -> str:
        h = hashlib.blake2b(digest_size=20)
        h.update(self.base.encode())
        h.update(role.encode())
        h.update(signature(args).encode())
        return h.hexdigest()

    def compiled(self, role: str, args: tuple, lower: Callable[[], Any]):
        """The executable of `role` for `args`: read back when stored, else
        `lower().compile()`, stored when XLA compiled it afresh.

        An executable that XLA itself read from its persistent cache is not stored again:
        measured on XLA:CPU (jaxlib 0.10), serializing such an executable drops compiled
        functions, and the copy fails when it runs ("Function ... not found"). An entry
        read back here whose first call fails is deleted and the program compiled
        afresh, so a bad entry costs one compile, never a run.
        """
        t0 = time.perf_counter()
        path = self.folder / f"{self.key(role, args)}.bin"
        if path.is_file():
            try:
                payload, in_tree, out_tree = pickle.loads(path.read_bytes())
                exe = serialize_executable.deserialize_and_load(payload, in_tree, out_tree)
                os.utime(path)  # recently used: evicted last
                self.hits += 1
                jax.monitoring.record_event_duration_secs(LOAD_EVENT,
                                                          time.perf_counter() - t0)
                return _FirstCallChecked(exe, path, lower)
            except Exception:  # noqa: BLE001 - a stale or torn entry is compiled afresh
                path.unlink(missing_ok=True)
        lowered = lower()  # may run small programs of its own (their arguments), outside
        with _PersistentCacheHits() as hits:  # ... the count: only this program's compile
            exe = lowered.compile()
        if hits.count:
            return exe
        try:
            blob = pickle.dumps(serialize_executable.serialize(exe))
        except Exception:  # noqa: BLE001 - not serializable here (constants, callbacks)
            return exe
        tmp = None
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.folder, suffix=".tmp")
            with os.fdopen(fd, "wb") as f:
                f.write(blob)
            os.replace(tmp, path)  # whole entries only, whatever runs beside
            self.stored += 1
            prune(self.folder, MAX_BYTES)
        except OSError:  # a full or read-only disk: the run goes on without the entry
            if tmp is not None:
                Path(tmp).unlink(missing_ok=True)
        return exe


def prune(folder: Path, max_bytes: int) -> int:
    """Delete the least recently used entries (oldest modification time: a hit touches
    its file) until the folder holds at most 80% of `max_bytes`, once it holds more than
    `max_bytes`. Returns the number of entries deleted."""
    entries = []
    for p in folder.glob("*.bin"):
        try:
            st = p.stat()
        except OSError:  # deleted by another process meanwhile
            continue
        entries.append((st.st_mtime, st.st_size, p))
    total = sum(size for _, size, _ in entries)
    if total <= max_bytes:
        return 0
    deleted = 0
    for _, size, p in sorted(entries):
        if total <= 0.8 * max_bytes:
            break
        p.unlink(missing_ok=True)
        total -= size
        deleted += 1
    return deleted


class _PersistentCacheHits:
    """Counts the executables JAX reads from its persistent cache while open."""

    def __init__(self):
        self.count = 0

    def _event(self, event: str, **_: Any) -> None:
        if event == "/jax/compilation_cache/cache_hits":
            self.count += 1

    def __enter__(self) -> _PersistentCacheHits:
        jax.monitoring.register_event_listener(self._event)
        return self

    def __exit__(self, *exc) -> None:
        jax.monitoring.unregister_event_listener(self._event)


class _FirstCallChecked:
    """An executable read back from a `ProgramCache`: its first call that fails in the
    runtime deletes the entry and runs a fresh compilation of the program instead."""

    def __init__(self, exe, path: Path, lower: Callable[[], Any]):
        self._exe, self._path, self._lower = exe, path, lower

    @property
    def out_info(self):
        return self._exe.out_info

    def __call__(self, *args):
        if self._lower is None:
            return self._exe(*args)
        try:
            out = self._exe(*args)
            jax.block_until_ready(out)
        except jax.errors.JaxRuntimeError:
            self._path.unlink(missing_ok=True)
            self._exe = self._lower().compile()
            out = self._exe(*args)
        self._lower = None
        return out
