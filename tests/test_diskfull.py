"""A full disk never loses finished work: too little space is refused before training, a
checkpoint that cannot be written leaves the previous one in place, results that cannot be
written leave the trained state in a checkpoint; each is one line and a non-zero exit.

The disk is a small tmpfs mounted for the test and filled for real (`ENOSPC` from the
kernel). Where mounting is not allowed (no root), the same tests run with the write failure
injected (numpy's writer raising `ENOSPC`), so they never skip.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest

from fedjax_appeal.cli.commands import main
from fedjax_appeal.run import checkpoint as checkpoint_mod
from fedjax_appeal.run import diskspace
from fedjax_appeal.run import report as report_mod
from fedjax_appeal.run.checkpoint import read_meta

TINY = ["--dataset", "synthetic", "--clients", "6", "--unseen-clients", "2", "--cohort", "3",
        "--rounds", "8", "--local-steps", "2", "--batch-size", "4", "--eval-every", "4",
        "--min-samples", "4", "--partition", "natural"]
ENOSPC = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


@contextlib.contextmanager
def small_disk(tmp_path: Path, size_kib: int):
    """(folder, fill) on a tmpfs of `size_kib` KiB: `fill()` writes a file until the kernel
    answers ENOSPC. Without permission to mount, (folder in tmp_path, None): the caller
    injects the failure instead."""
    mnt = tmp_path / "disk"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_kib}k", "tmpfs", str(mnt)],
                       capture_output=True)
    if r.returncode != 0:
        print("tmpfs not available (", r.stderr.decode().strip(), "): injecting ENOSPC")
        yield mnt, None
        return

    def fill():
        with contextlib.suppress(OSError), open(mnt / "filler", "wb", buffering=0) as f:
            while True:
                f.write(b"\0" * 4096)

    try:
        yield mnt, fill
    finally:
        subprocess.run(["umount", str(mnt)], check=True)


def fail_writes(monkeypatch, after: int = 0):
    """Make numpy's npz writer and `Path.write_text` raise ENOSPC after `after` calls."""
    calls = {"n": 0}
    savez, write_text = np.savez, Path.write_text

    def counted(orig):
        def f(*a, **k):
            calls["n"] += 1
            if calls["n"] > after:
                raise ENOSPC
            return orig(*a, **k)
        return f

    monkeypatch.setattr(np, "savez", counted(savez))
    monkeypatch.setattr(Path, "write_text", counted(write_text))


def _history(out: Path) -> list[dict]:
    return json.loads((out / "results.json").read_text())["history"]


def test_too_little_space_is_refused_before_training(tmp_path, monkeypatch, capsys):
    with small_disk(tmp_path, 64) as (disk, fill):
        if fill is None:  # no tmpfs: report 64 KiB free
            usage = diskspace.shutil.disk_usage(tmp_path)
            monkeypatch.setattr(diskspace.shutil, "disk_usage",
                                lambda p: usage._replace(free=64 * 1024))
        out = disk / "run"
        assert main(["run", *TINY, "--checkpoint-every", "4", "--out", str(out)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        m = re.fullmatch(r"fedjax-appeal: error: (.+): the file system has ([\d.]+) KiB free and "
                         r"this run will write about ([\d.]+) KiB \(checkpoints and results\); "
                         r"free space or choose another --out", err[-1])
        assert m and m[1] == str(out) and float(m[2]) <= 64 < float(m[3])
        assert not out.exists()  # nothing written, the lock removed with its folder


def test_disk_full_during_the_run_keeps_the_last_checkpoint(tmp_path, monkeypatch, capsys):
    ref = tmp_path / "ref"
    assert main(["run", *TINY, "--out", str(ref)]) == 0
    with small_disk(tmp_path, 1024) as (disk, fill):
        out = disk / "run"
        save = checkpoint_mod.Checkpointer.save

        def save_then_fill(self, *a, **k):  # the disk fills up after the first checkpoint
            path = save(self, *a, **k)
            if fill is not None:
                fill()
            else:
                fail_writes(monkeypatch)
            return path

        monkeypatch.setattr(checkpoint_mod.Checkpointer, "save", save_then_fill)
        assert main(["run", *TINY, "--checkpoint-every", "2", "--out", str(out)]) == 1
        err = capsys.readouterr().err.strip().splitlines()[-1]
        assert err == (f"fedjax-appeal: error: could not write the checkpoint of round 4 to "
                       f"{out}/checkpoint.npz (No space left on device); the checkpoint of "
                       f"round 2 stays in {out}: free space, then continue with --resume {out}")
        assert read_meta(out)["round"] == 2
        assert sorted(p.name for p in out.iterdir()) == ["checkpoint.npz"]  # no temp file
        monkeypatch.undo()
        (disk / "filler").unlink(missing_ok=True)
        assert main(["run", "--resume", str(out)]) == 0
        assert _history(out) == _history(ref)


@pytest.mark.parametrize("every", [8, 0])
def test_results_that_cannot_be_written_leave_the_trained_state(tmp_path, monkeypatch, capsys,
                                                               every):
    """With a checkpoint of the last round (`--checkpoint-every 8`) the message says how to
    write the results; without one the run tries to write it, and says what was lost when
    the disk is full for that too."""
    with small_disk(tmp_path, 1024) as (disk, fill):
        out = disk / "run"
        write = report_mod.write_outputs

        def fill_then_write(*a, **k):
            if fill is not None:
                fill()
            else:
                fail_writes(monkeypatch)
            return write(*a, **k)

        monkeypatch.setattr(report_mod, "write_outputs", fill_then_write)
        assert main(["run", *TINY, "--checkpoint-every", str(every), "--out", str(out)]) == 1
        err = capsys.readouterr().err.strip().splitlines()[-1]
        assert err.startswith(f"fedjax-appeal: error: could not write the results to {out} "
                              "(No space left on device); ")
        left = sorted(p.name for p in out.iterdir()) if out.exists() else []
        if every:
            assert err.endswith(f"the trained state of round 8 is kept in {out}/checkpoint.npz:"
                                f" free space, then --resume {out} writes the results without "
                                "training")
            assert left == ["checkpoint.npz"] and read_meta(out)["round"] == 8
            monkeypatch.undo()
            (disk / "filler").unlink(missing_ok=True)
            assert main(["run", "--resume", str(out)]) == 0
            assert _history(out)[-1]["round"] == 8
        else:
            assert err.endswith("the trained state could not be kept either (no space for a "
                                "checkpoint); free space and run again")
            assert left == []
