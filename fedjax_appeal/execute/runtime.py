"""What a process sets up before JAX compiles anything, and what its compiling cost.

* `enable_compilation_cache(folder)`: JAX's persistent compilation cache in the project's
  cache folder (`$FEDJAX_APPEAL_CACHE/xla`, default `~/.cache/fedjax_appeal/xla`). A
  program compiled before (the same lowered module, compile options, jax/jaxlib version and
  device kind) is read back from disk instead of compiled again, by a later process or by
  the same process (the two arms of a comparison often share their evaluation program).
  The executable read back is the one the compiler wrote, so no value changes.
* `enable_determinism()`: XLA's deterministic GPU kernels (`--xla_gpu_deterministic_ops`:
  no atomics in scatters and reductions, only deterministic GEMM / convolution
  algorithms), so that a seeded run repeats bit for bit in every process. XLA reads its
  flags when the backend starts: call it before JAX's first operation. XLA:CPU is
  deterministic without it; the flag changes nothing there.
* `release_programs_if_crowded()`: drop JAX's compiled programs held in memory when the
  process nears the kernel's limit on memory mappings (each XLA:CPU program holds about 20;
  at `vm.max_map_count`, 65,530 by default, the next compilation crashes the process). A
  long process (a test session, `reproduce all`, a sweep of many configurations) compiles
  thousands; every run's driver (`run.driver.Driver`) checks before it compiles. A dropped
  program is read back from the persistent cache when it is needed again, so no value
  changes.
* `CompileLog`: while open, counts the programs XLA compiled or read from the cache and
  the seconds spent tracing, lowering and in XLA (JAX's monitoring events).

The commands (`run`, `sweep`, `reproduce`) turn both settings on unless told otherwise
(`--no-compile-cache` / `FEDJAX_APPEAL_COMPILE_CACHE=off`, `--no-deterministic` /
`FEDJAX_APPEAL_DETERMINISTIC=off`) and record `runtime_record()` in their results. Importing
the library changes no setting of JAX.
"""

from __future__ import annotations

import gc
import os
import re
import sys
import threading
from pathlib import Path
from typing import Any

import jax
from jax import monitoring

from ..core.config import ConfigError
from ..data.sources import cache_dir
from .programs import LOAD_EVENT

COMPILE_CACHE_ENV = "FEDJAX_APPEAL_COMPILE_CACHE"
XLA_CACHE_BYTES = 2 << 30  # JAX evicts the least recently used programs beyond this
DETERMINISTIC_ENV = "FEDJAX_APPEAL_DETERMINISTIC"
DETERMINISTIC_FLAG = "--xla_gpu_deterministic_ops=true"
_OFF = ("0", "off", "false", "no")


def env_setting(name: str, default: bool = True) -> bool:
    """An on/off environment variable (`0`, `off`, `false`, `no` = off; unset = default)."""
    v = os.environ.get(name, "").strip().lower()
    return default if not v else v not in _OFF


def default_cache_folder() -> Path:
    """`$FEDJAX_APPEAL_CACHE/xla` (default `~/.cache/fedjax_appeal/xla`)."""
    return cache_dir() / "xla"


def enable_compilation_cache(folder: str | Path | None = None) -> Path:
    """Turn JAX's persistent compilation cache on, in `folder` (default
    `default_cache_folder()`), and cache every program, however fast it compiled; beyond
    `XLA_CACHE_BYTES` the least recently used programs are evicted.

    A cache folder the process already has (`JAX_COMPILATION_CACHE_DIR`, or an earlier
    `jax.config.update("jax_compilation_cache_dir", ...)`) is kept. Returns the folder in
    use. Call it before the first compilation: JAX decides once per process whether it
    uses the cache.

    Raises:
      ConfigError: the folder cannot be created.
    """
    current = jax.config.jax_compilation_cache_dir
    if current:
        return Path(current)
    path = Path(folder).expanduser() if folder else default_cache_folder()
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ConfigError(f"cannot create the compilation cache folder {path} "
                          f"({e.strerror or e}): set {COMPILE_CACHE_ENV}=off or point "
                          "FEDJAX_APPEAL_CACHE at a writable folder") from None
    adopt_entries(path)
    jax.config.update("jax_compilation_cache_dir", str(path))
    # measured on the tour: programs of 0.05 s and less are a third of its programs; reading
    # one back costs about 10 ms
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_compilation_cache_max_size", XLA_CACHE_BYTES)  # (needs filelock)
    return path


def adopt_entries(folder: Path) -> int:
    """Give every entry of XLA's cache `folder` that has no access-time file one (its
    modification time); returns how many it gave.

    JAX's size-bounded cache (`jax_compilation_cache_max_size`) reads an access time for
    every entry before it writes a new one, and one entry without it (written by a process
    without the bound, e.g. an earlier version of this project, or cut short between its
    two files) makes every later write fail with a warning: the folder would never warm up
    again. Measured: a folder of 198 entries, 107 of them without access times, recompiled
    39 of the tour's programs on every run.
    """
    made = 0
    for entry in folder.glob("*-cache"):
        atime = entry.with_name(entry.name.removesuffix("-cache") + "-atime")
        if atime.exists():
            continue
        try:
            atime.write_bytes(entry.stat().st_mtime_ns.to_bytes(8, "little"))
            made += 1
        except OSError:  # removed meanwhile, or a read-only folder: JAX copes or warns
            continue
    return made


def program_cache_folder() -> Path | None:
    """`$FEDJAX_APPEAL_CACHE/programs` (`execute.programs.ProgramCache`) when the
    persistent compilation cache is on in this process, else None: the commands keep their
    compiled programs there, so that a second run of a command neither traces nor
    compiles."""
    return cache_dir() / "programs" if compilation_cache_folder() else None


def compilation_cache_folder() -> str | None:
    """The persistent compilation cache folder in effect, or None."""
    if not jax.config.jax_enable_compilation_cache:
        return None
    return jax.config.jax_compilation_cache_dir or None


MAPS_FRACTION = 0.5  # of vm.max_map_count, beyond which compiled programs are dropped


def memory_maps() -> tuple[int, int] | None:
    """(this process's memory mappings, the kernel's limit), or None where /proc has
    neither (not Linux)."""
    try:
        with open("/proc/self/maps", "rb") as f:
            used = f.read().count(b"\n")  # one line per mapping
        with open("/proc/sys/vm/max_map_count") as f:
            limit = int(f.read().strip())
    except (OSError, ValueError):
        return None
    return used, limit


def release_programs_if_crowded(fraction: float = MAPS_FRACTION) -> bool:
    """`jax.clear_caches()` when this process's memory mappings exceed `fraction` of
    `vm.max_map_count`; returns whether it did. The programs a later call needs again are
    traced anew and read back from the persistent compilation cache."""
    maps = memory_maps()
    if maps is None or maps[0] <= fraction * maps[1]:
        return False
    jax.clear_caches()
    gc.collect()
    return True


def _backend_started() -> bool:
    """Whether JAX's backend has started in this process (JAX has no public call for it:
    its internal one, and where that is missing, whether JAX was imported at all)."""
    try:  # lazy and guarded: JAX's internal module, which another JAX version may lack
        from jax._src import xla_bridge

        return bool(xla_bridge.backends_are_initialized())
    except (ImportError, AttributeError):
        return "jax" in sys.modules


def enable_determinism(strict: bool = True) -> bool:
    """Add `--xla_gpu_deterministic_ops=true` to `XLA_FLAGS` (unless it names that flag
    already, which is then left as given). Returns whether the flag is in effect.

    Args:
      strict: raise when JAX's backend already started without the flag (it can no longer
        take effect in this process); False returns False instead.
    """
    flags = os.environ.get("XLA_FLAGS", "")
    if "xla_gpu_deterministic_ops" in flags:
        return deterministic_ops()
    if _backend_started():
        if strict:
            raise ConfigError("deterministic GPU kernels must be asked for before JAX starts: "
                              "call fedjax_appeal.enable_determinism() before the first JAX "
                              f"operation, or set XLA_FLAGS={DETERMINISTIC_FLAG}")
        return False
    os.environ["XLA_FLAGS"] = f"{flags} {DETERMINISTIC_FLAG}".strip()
    return True


def deterministic_ops() -> bool:
    """Whether `XLA_FLAGS` asks for XLA's deterministic GPU kernels."""
    for item in os.environ.get("XLA_FLAGS", "").split():
        if item.startswith("--xla_gpu_deterministic_ops"):
            _, _, v = item.partition("=")
            return v.strip().lower() in ("", "true", "1")
    return False


def runtime_record() -> dict[str, Any]:
    """What `results.json` records of the process: the compilation cache folder (None when
    off), whether XLA's deterministic GPU kernels are on, and XLA_FLAGS as given."""
    return {"compilation_cache": compilation_cache_folder(),
            "deterministic_ops": deterministic_ops(),
            "xla_flags": os.environ.get("XLA_FLAGS", "")}


_EVENTS = {"/jax/core/compile/jaxpr_trace_duration": "trace_s",
           "/jax/core/compile/jaxpr_to_mlir_module_duration": "lower_s",
           "/jax/core/compile/backend_compile_duration": "xla_s"}


class CompileLog:
    """Counts what JAX compiled while the log is open (a context manager).

    Attributes (all since `__enter__`):
      programs: programs handed to XLA (compiled, or read back from XLA's cache).
      cache_hits: of those, programs read back from XLA's persistent cache.
      reused, reuse_s: programs read back whole from a `programs.ProgramCache` (neither
        traced nor handed to XLA), and the seconds that took.
      trace_s, lower_s, xla_s: seconds tracing Python into jaxprs, lowering jaxprs to XLA
        modules, and in XLA (compiling, or reading a cached executable).
    """

    def __init__(self):
        self.programs = self.cache_hits = self.reused = 0
        self.trace_s = self.lower_s = self.xla_s = self.reuse_s = 0.0
        self._lock = threading.Lock()

    @property
    def compile_s(self) -> float:
        """Tracing + lowering + XLA + reading whole programs back."""
        return self.trace_s + self.lower_s + self.xla_s + self.reuse_s

    def _duration(self, event: str, secs: float, **_: Any) -> None:
        if event == LOAD_EVENT:
            with self._lock:
                self.reused += 1
                self.reuse_s += float(secs)
            return
        name = _EVENTS.get(event)
        if name is None:
            return
        with self._lock:
            setattr(self, name, getattr(self, name) + float(secs))
            if name == "xla_s":
                self.programs += 1

    def _event(self, event: str, **_: Any) -> None:
        if event == "/jax/compilation_cache/cache_hits":
            with self._lock:
                self.cache_hits += 1

    def __enter__(self) -> CompileLog:
        monitoring.register_event_duration_secs_listener(self._duration)
        monitoring.register_event_listener(self._event)
        return self

    def __exit__(self, *exc) -> None:
        monitoring.unregister_event_duration_listener(self._duration)
        monitoring.unregister_event_listener(self._event)

    def record(self) -> dict[str, Any]:
        return {"programs": self.programs, "cache_hits": self.cache_hits,
                "compiled": self.programs - self.cache_hits, "reused": self.reused,
                "compile_s": self.compile_s, "trace_s": self.trace_s,
                "lower_s": self.lower_s, "xla_s": self.xla_s, "reuse_s": self.reuse_s}


def out_of_memory(exc: BaseException) -> bool:
    """Whether `exc` is XLA running out of device memory (RESOURCE_EXHAUSTED)."""
    text = str(exc)
    return isinstance(exc, jax.errors.JaxRuntimeError) and (
        "RESOURCE_EXHAUSTED" in text or "out of memory" in text.lower())


def out_of_memory_message(exc: BaseException, command: str) -> str:
    """One line for an out-of-memory error: how much XLA asked for, and the options of
    `command` that lower it."""
    text = str(exc)
    m = (re.search(r"allocat\w*\s+([0-9][0-9,]*)\s*bytes", text)
         or re.search(r"([0-9][0-9,]*)\s*bytes", text))
    asked = ""
    if m:
        n = int(m.group(1).replace(",", ""))
        asked = f" asking for {n / 2**30:.2f} GiB ({n:,} bytes)"
    fixes = ("--client-chunk N (clients trained at once; 0 = the whole cohort), a smaller "
             "--cohort or --batch-size, or --devices to spread the cohort")
    if command == "sweep":
        fixes = "--max-parallel N (runs per vmapped batch), --lanes N, " + fixes
    elif command == "reproduce":
        fixes = "--quick or fewer --seeds, or run the table on a device with more memory"
    return f"the device ran out of memory{asked}: lower what runs at once with {fixes}"
