"""The lock a run holds on its output folder, so that two runs never write the same one.

`OutLock(folder).acquire()` creates `folder/.fedjax-appeal.lock` atomically (O_EXCL) with
the process id, host and start time. A second run on the folder finds it and stops with one
line naming the owner, before any data is loaded. A lock left by a process that no longer
runs on this host (killed with SIGKILL, a crashed machine) is reported in one line and
taken over, so that `--resume` works after a kill; a lock from another host is never taken
over. `release()` removes the lock (and the folder, if the lock created it and it is still
empty).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
import time
from pathlib import Path

from ..core.config import ConfigError
from ..execute.distributed import is_main

LOCK_FILE = ".fedjax-appeal.lock"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


class OutLock:
    """The run's claim on `folder` (see the module docstring)."""

    def __init__(self, folder: str | Path):
        self.folder = Path(folder).expanduser()
        self.path = self.folder / LOCK_FILE
        self.created = False
        self.held = False

    def _write(self) -> bool:
        info = {"pid": os.getpid(), "host": socket.gethostname(),
                "started": time.strftime("%Y-%m-%d %H:%M:%S %Z")}
        try:
            fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return False
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(info, f)
        except OSError as e:
            self.path.unlink(missing_ok=True)
            self._cleanup()
            raise ConfigError(f"--out {self.folder}: cannot write the lock {self.path} "
                              f"({e.strerror or e}); free space or choose another --out"
                              ) from None
        return True

    def _owner(self) -> dict:
        try:
            return json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}

    def acquire(self) -> OutLock:
        """Claim the folder or raise `ConfigError` naming the run that holds it."""
        self.created = not self.folder.exists()
        self.folder.mkdir(parents=True, exist_ok=True)
        for _ in range(2):
            if self._write():
                self.held = True
                return self
            owner = self._owner()
            pid, host = owner.get("pid"), owner.get("host", "?")
            if host == socket.gethostname() and isinstance(pid, int) and not _alive(pid):
                print(f"fedjax-appeal: {self.path} was left by process {pid} (started "
                      f"{owner.get('started', '?')}), which no longer runs; taking it over",
                      file=sys.stderr)
                self.path.unlink(missing_ok=True)
                continue
            self._cleanup()
            raise ConfigError(f"--out {self.folder} is in use by process {pid} on {host} since "
                              f"{owner.get('started', '?')} (lock {self.path}): wait for that "
                              "run to end, or choose another --out")
        self._cleanup()
        raise ConfigError(f"--out {self.folder}: cannot take the lock {self.path}; remove it "
                          "if no run uses the folder")

    def _cleanup(self) -> None:
        if self.created:
            try:
                self.folder.rmdir()  # only if still empty
            except OSError:
                pass

    def release(self) -> None:
        """Drop the lock (ours only) and a folder the lock created that stayed empty."""
        if self.held and self._owner().get("pid") == os.getpid():
            self.path.unlink(missing_ok=True)
        self.held = False
        self._cleanup()

    def __enter__(self) -> OutLock:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


def out_lock(folder: str | Path):
    """A context that holds the lock of `folder` in process 0 (the only writer); the other
    processes of a multi-process job take none."""
    return OutLock(folder) if is_main() else contextlib.nullcontext()
