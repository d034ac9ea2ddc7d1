"""The process around a command: its output folder, its several processes, the runtime set
up before JAX starts (compilation cache, deterministic kernels) and the signals that stop
it."""

from __future__ import annotations

import argparse
import shutil
import signal
import threading
from pathlib import Path
from typing import Any

from ..core.config import ConfigError, RunConfig
from ..execute import layout  # host_cores through its module: tests replace it
from ..execute.distributed import (
    EXIT_PEER,
    agree,
    detected_cluster,
    initialize,
    is_main,
    set_peer_message,
    split_cpu,
    stop_for_peer,
)
from ..execute.layout import LAYOUT_FIELDS, cpu_split
from ..execute.runtime import (
    COMPILE_CACHE_ENV,
    DETERMINISTIC_ENV,
    enable_compilation_cache,
    enable_determinism,
    env_setting,
)
from ..run.checkpoint import resume_base, resumed_split
from ..run.schema import load_config_file
from ..run.validate import check_out
from .options import given_keys


def add_process_flags(p: argparse.ArgumentParser) -> None:
    """--overwrite and the multi-process flags (see `distributed.initialize`)."""
    p.add_argument("--overwrite", action="store_true",
                   help="replace the results and checkpoint of another run in --out")
    p.add_argument("--cpu-devices", type=int, default=None, metavar="N",
                   help="split the host CPU into N JAX devices (jax_num_cpu_devices), so that "
                        "--devices N (or 0) shards the cohort over the cores: each device runs "
                        "its own share of the clients' matmuls (0 = JAX's default, one device; "
                        "default: chosen by --layout auto, see execute/layout.py)")
    g = p.add_argument_group("several processes (one simulation over all their devices)")
    g.add_argument("--coordinator-address", default="", metavar="HOST:PORT",
                   help="address of process 0 (with --num-processes, --process-id); without "
                        "these flags a SLURM / Open MPI job is detected automatically")
    g.add_argument("--num-processes", type=int, default=0, metavar="N",
                   help="number of processes of the job")
    g.add_argument("--process-id", type=int, default=-1, metavar="I",
                   help="this process's index, 0 .. N-1 (0 writes the files)")
    g.add_argument("--heartbeat-timeout", type=int, default=30, metavar="S",
                   help="seconds after which a silent process counts as dead and the others "
                        "stop (default: 30)")


def start_processes(args: argparse.Namespace) -> bool:
    """Start the multi-process runtime from the flags / the environment (before JAX runs)."""
    if not hasattr(args, "coordinator_address"):
        return False
    if args.cpu_devices is not None:
        split_cpu(args.cpu_devices)
    else:  # the automatic layout's split; where JAX already runs (a caller's process), none
        try:
            split_cpu(cpu_devices_for(args))
        except ConfigError:
            pass
    if args.heartbeat_timeout < 1:
        raise ConfigError(f"--heartbeat-timeout must be >= 1 second (got "
                          f"{args.heartbeat_timeout})")
    return initialize(args.coordinator_address, args.num_processes, args.process_id,
                      heartbeat_timeout_s=args.heartbeat_timeout)


def cpu_devices_for(args: argparse.Namespace) -> int:
    """The CPU split of this process (before JAX runs): `--cpu-devices` as given, else the
    automatic layout's (`layout.cpu_split`) unless the layout is manual (`--layout manual`,
    or `--devices` / `--client-lanes` given) or the job has several processes. A resumed
    sweep takes the split it recorded when it started (`checkpoint.resumed_split`): another
    split would run other programs, whose float results differ in the last bits."""
    if args.cpu_devices is not None:
        return args.cpu_devices
    if args.coordinator_address or args.num_processes > 0 or detected_cluster():
        return 0
    given = given_keys(args)
    values: dict[str, Any] = {}
    if getattr(args, "resume", "") and args.command == "sweep":
        split, config = resumed_split(args.resume)
        if split is not None and "layout" not in given and not given & set(LAYOUT_FIELDS):
            return split  # the split the sweep ran with: the same programs, the same bits
        values.update(config)
    elif getattr(args, "resume", ""):
        values.update(resume_base(args.resume))
    if getattr(args, "config", None):
        values.update(load_config_file(args.config))
    values.update(vars(args))
    if values.get("layout", "auto") == "manual" or given & set(LAYOUT_FIELDS):
        return 0
    if args.command == "sweep":  # a sweep shards its grid: every core
        return layout.host_cores() if layout.host_cores() > 1 else 0
    cohort = values.get("cohort", RunConfig.cohort)
    try:
        return cpu_split(int(cohort))
    except (TypeError, ValueError):
        return 0  # validation reports the bad value


def agree_or_raise(error: ConfigError | None) -> None:
    """Raise `error` here; with several processes, stop every process if process 0 failed.

    Process 0 alone checks the output folder (the others write nothing), so its verdict
    is broadcast (one collective) and the other processes stop with one line too.
    """
    if not agree(error is None):
        raise error or ConfigError("process 0 refused the configuration (see its error line); "
                                   "nothing was run")
    if error is not None:
        raise error


def prepare_out(out: str, holds: tuple[str, ...], args: argparse.Namespace,
                resume: str = "") -> None:
    """Check the output folder (process 0) before any data is loaded; see `check_out`."""
    overwrite = bool(getattr(args, "overwrite", False))
    if overwrite and resume:
        raise ConfigError("--overwrite and --resume contradict each other: --resume continues "
                          "the run in the folder, --overwrite replaces it; give one")
    err = None
    if is_main():
        try:
            check_out(out, holds=holds, reuse=overwrite or bool(resume))
        except ConfigError as e:
            err = e
    agree_or_raise(err)


def clear_old_run(out: str, names: tuple[str, ...]) -> None:
    """--overwrite: remove the files of the previous run (its checkpoint included)."""
    if not is_main():
        return
    for n in names:
        p = Path(out) / n
        if p.is_dir():
            shutil.rmtree(p, ignore_errors=True)
        else:
            p.unlink(missing_ok=True)


def peer_advice(folder: str, checkpoint_every: int) -> None:
    """What a process says if another one dies: where the checkpoint is, how to go on."""
    set_peer_message(f"the last checkpoint stays in {folder}: start every process again with "
                     f"--resume {folder}" if checkpoint_every > 0 else
                     "no checkpoints were taken (--checkpoint-every 0): start the job again")


def add_runtime_flags(p: argparse.ArgumentParser) -> None:
    """--compile-cache and --deterministic (see `execute.runtime`)."""
    g = p.add_argument_group("compilation and determinism")
    g.add_argument("--compile-cache", action=argparse.BooleanOptionalAction, default=None,
                   help="keep every compiled program in $FEDJAX_APPEAL_CACHE/xla and reuse it "
                        "when a later run compiles the same program (default: on; "
                        f"{COMPILE_CACHE_ENV}=off turns it off; JAX_COMPILATION_CACHE_DIR "
                        "names another folder)")
    g.add_argument("--deterministic", action=argparse.BooleanOptionalAction, default=None,
                   help="XLA's deterministic GPU kernels, so that a seeded run repeats bit for "
                        "bit in every process (default: on; --no-deterministic or "
                        f"{DETERMINISTIC_ENV}=off trades that for speed on GPUs; XLA:CPU is "
                        "deterministic either way)")


def prepare_runtime(args: argparse.Namespace) -> None:
    """Before JAX starts: the compilation cache and deterministic kernels as the flags (or
    their environment variables) say; both on by default."""
    cache = args.compile_cache if args.compile_cache is not None else env_setting(
        COMPILE_CACHE_ENV)
    det = args.deterministic if args.deterministic is not None else env_setting(
        DETERMINISTIC_ENV)
    if det:  # where JAX already runs (a caller's process) it is recorded as not in effect
        enable_determinism(strict=False)
    if cache:
        enable_compilation_cache()


STOP_SIGNALS = ("SIGTERM", "SIGHUP")  # handled like Ctrl-C (timeout, kill, schedulers)


def stop_on_signals(received: list[int]) -> dict:
    """Make SIGTERM and SIGHUP stop a run as Ctrl-C does: the current chunk is abandoned,
    a checkpoint of the last finished one is written, temporary files are removed and the
    process exits with 128 + the signal's number. Returns the handlers it replaced (none
    outside the main thread, where Python cannot install handlers)."""
    if threading.current_thread() is not threading.main_thread():
        return {}

    def stop(signum, frame):
        received.append(signum)
        raise KeyboardInterrupt

    previous = {}
    for name in STOP_SIGNALS:
        sig = getattr(signal, name, None)
        if sig is not None:
            previous[sig] = signal.signal(sig, stop)
    return previous


def peer_failed(args: argparse.Namespace, exc: BaseException) -> int:
    """One line when another process of the job died, then exit at once (see
    `distributed.stop_for_peer`)."""
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    stop_for_peer(first)
    return EXIT_PEER

