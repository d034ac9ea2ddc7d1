"""Results files of a run: results.json, history.csv, accuracy.png — written atomically.

All files are first written into a temporary folder beside the output folder and then
moved into place, so an interrupted or failed run leaves nothing half-written.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import shutil
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ..core.fields import option

option("out", "", "output folder (results.json, history.csv, ...)", group="output",
       shown="runs/ALGORITHM_DATASET_sSEED; a sweep: runs/sweep_ALGORITHM_DATASET")


def to_jsonable(obj: Any) -> Any:
    """numpy/jax scalars and arrays to plain Python; NaN/Inf to None (strict JSON)."""
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [to_jsonable(v) for v in obj]
    if hasattr(obj, "__array__") and not isinstance(obj, str | bytes):
        a = np.asarray(obj)
        return to_jsonable(a.item() if a.ndim == 0 else a.tolist())
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, np.generic):
        return to_jsonable(obj.item())
    return obj


def history_csv(history: list[dict[str, float]]) -> str:
    cols: list[str] = []
    for h in history:
        cols += [k for k in h if k not in cols]
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=cols, lineterminator="\n")
    w.writeheader()
    for h in history:
        w.writerow({k: h.get(k, "") for k in cols})
    return buf.getvalue()


def prefetch_plotting() -> threading.Thread:
    """Import matplotlib (Agg) and pyplot in a daemon thread, so that a command's figures
    do not wait for the import at the end: it overlaps with compiling and training, which
    release the GIL (measured: 0.55 s of a FedAvg run's writing). Returns the thread."""
    def load():
        try:  # lazy, in a thread: matplotlib costs 330 ms of import (measured)
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot  # noqa: F401
        except Exception:  # noqa: BLE001 - the writer imports it again and reports
            pass

    t = threading.Thread(target=load, name="fedjax-appeal-prefetch-matplotlib", daemon=True)
    t.start()
    return t


def plot_lines(path: Path, x_key: str, history: list[dict[str, float]],
               series: dict[str, str], ylabel: str, title: str = "") -> bool:
    """Line plot of history columns (label -> column); False if no column is present."""
    # lazy: matplotlib costs 330 ms of import (measured), paid only when a figure is drawn
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    drawn = False
    for label, col in series.items():
        pts = [(h[x_key], h[col]) for h in history if h.get(col) is not None]
        if pts:
            xs, ys = zip(*pts, strict=True)
            ax.plot(xs, ys, marker="o", ms=3, label=label)
            drawn = True
    ax.set_xlabel(x_key)
    ax.set_ylabel(ylabel)
    if x_key == "round":  # rounds are whole numbers: no tick at round 0.25
        from matplotlib.ticker import MaxNLocator

        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    if title:
        ax.set_title(title)
    ax.grid(alpha=0.3)
    if drawn:
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return drawn


def write_outputs(out: str | Path, writers: dict[str, Callable[[Path], None]]) -> Path:
    """Write files into `out` all-or-nothing.

    `writers` maps a file name to a function that writes that file at the given path.
    Everything is produced in a temporary sibling folder, then each file is moved into
    `out` with `os.replace` (existing files of the same names are replaced).
    """
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    try:
        for name, write in writers.items():
            write(tmp / name)
        out.mkdir(exist_ok=True)
        for name in writers:
            os.replace(tmp / name, out / name)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def run_writers(results: dict[str, Any], title: str) -> dict[str, Callable[[Path], None]]:
    """The standard files of `fedjax-appeal run`."""
    history = results["history"]

    def w_json(p: Path):
        p.write_text(json.dumps(to_jsonable(results), indent=1, allow_nan=False))

    def w_csv(p: Path):
        p.write_text(history_csv(history))

    def w_png(p: Path):
        plot_lines(p, "round", history, {"seen clients": "test_acc_seen",
                                         "unseen clients": "test_acc_unseen"},
                   "mean test accuracy over clients", title)

    return {"results.json": w_json, "history.csv": w_csv, "accuracy.png": w_png}
