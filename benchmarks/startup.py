"""Start-up time of the command line and of `import fedjax_appeal`.

Times, in fresh processes, the wall seconds of `fedjax-appeal --help`, `fedjax-appeal run
--help`, `fedjax-appeal list` and `python -c "import fedjax_appeal"`, and records which
heavy libraries each one imported. Each source tree given with `--tree LABEL=DIR` (a
folder holding the `fedjax_appeal` and `papers` packages, e.g. an exported older commit)
is measured in the same interleaved repeats as the checkout itself, so that the load of a
shared machine hits every side alike:

    python benchmarks/startup.py --repeats 5
    git archive HEAD~3 fedjax_appeal papers | tar -x -C /tmp/before
    python benchmarks/startup.py --repeats 5 --tree before=/tmp/before

Every side runs through the same launcher (the `fedjax-appeal` program's `console()`, or
the import), with its tree first on the path and the editable install's finder removed.

A second table gives what each library that the package imports inside a function would
add to every command if it were imported at the top: the wall time of `import LIB` in a
fresh process that has already imported everything `fedjax-appeal --help` imports (the
checkout's `fedjax_appeal.cli.commands` and its subcommands).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import append_results  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HEAVY = ("jax", "flax", "optax", "matplotlib", "scipy", "orbax", "tensorboardX",
         "dp_accounting")
COMMANDS = {
    "fedjax-appeal --help": ["--help"],
    "fedjax-appeal run --help": ["run", "--help"],
    "fedjax-appeal list": ["list"],
    'python -c "import fedjax_appeal"': None,
}
LAZY = {"matplotlib.pyplot": "import matplotlib; matplotlib.use('Agg'); import matplotlib.pyplot",
        "scipy.stats": "import scipy.stats",
        "tensorflow_datasets": "import tensorflow_datasets",
        "tensorboardX": "import tensorboardX",
        "wandb": "import wandb"}
LAZY_LAUNCHER = """
import sys, time
from fedjax_appeal.cli.commands import all_commands
all_commands()
t = time.perf_counter()
{statement}
print(time.perf_counter() - t)
"""
LAUNCHER = """
import atexit, json, sys
sys.meta_path[:] = [f for f in sys.meta_path if 'editable' not in str(f)]
sys.path.insert(0, {tree!r})
def record():
    with open({record!r}, 'w') as f:
        json.dump({{'modules': len(sys.modules), 'file': sys.modules['fedjax_appeal'].__file__,
                   'heavy': [m for m in {heavy!r} if m in sys.modules]}}, f)
atexit.register(record)
import fedjax_appeal
if {argv!r} is not None:
    from fedjax_appeal.cli import console
    sys.argv = ['fedjax-appeal', *{argv!r}]
    console()
"""


def once(tree: str, argv: list[str] | None) -> tuple[float, dict]:
    """Wall seconds of one fresh process, and what it imported."""
    with tempfile.TemporaryDirectory() as tmp:
        record = os.path.join(tmp, "record.json")
        code = LAUNCHER.format(tree=tree, record=record, heavy=HEAVY, argv=argv)
        t = time.perf_counter()
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              cwd=tmp)
        wall = time.perf_counter() - t
        if proc.returncode != 0:
            raise SystemExit(f"{argv}: exit {proc.returncode}: {proc.stderr[-2000:]}")
        with open(record) as f:
            info = json.load(f)
    if not info["file"].startswith(os.path.abspath(tree)):
        raise SystemExit(f"{tree}: fedjax_appeal was imported from {info['file']}")
    return wall, info


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--tree", action="append", default=[], metavar="LABEL=DIR",
                    help="another source tree to time beside this checkout (repeatable)")
    ap.add_argument("--no-append", action="store_true",
                    help="do not append a section to benchmarks/RESULTS.md")
    a = ap.parse_args()
    trees = {"this checkout": ROOT}
    for item in a.tree:
        label, _, folder = item.partition("=")
        trees[label] = os.path.abspath(folder)
    walls: dict[tuple[str, str], list[float]] = {}
    infos: dict[tuple[str, str], dict] = {}
    for r in range(a.repeats + 1):  # the first round warms the file cache, not counted
        for name, argv in COMMANDS.items():
            for label, tree in trees.items():
                wall, info = once(tree, argv)
                if r:
                    walls.setdefault((name, label), []).append(wall)
                infos[(name, label)] = info
    rows = ["| command | tree | wall s (min / median) | modules imported | heavy libraries "
            "imported |", "|---|---|---|---|---|"]
    for name in COMMANDS:
        for label in trees:
            w, info = walls[(name, label)], infos[(name, label)]
            rows.append(f"| `{name}` | {label} | {min(w):.3f} / {statistics.median(w):.3f} | "
                        f"{info['modules']} | {', '.join(info['heavy']) or 'none'} |")
    lazy: dict[str, list[float]] = {}
    for r in range(a.repeats + 1):
        for name, statement in LAZY.items():
            proc = subprocess.run([sys.executable, "-c", LAZY_LAUNCHER.format(
                statement=statement)], capture_output=True, text=True, cwd=ROOT)
            if proc.returncode != 0:
                raise SystemExit(f"{name}: exit {proc.returncode}: {proc.stderr[-2000:]}")
            if r:
                lazy.setdefault(name, []).append(float(proc.stdout.split()[-1]))
    rows += ["", "| library imported inside functions | its import after the CLI's, ms "
             "(min / median) |", "|---|---|"]
    rows += [f"| `{name}` | {1e3 * min(w):.0f} / {1e3 * statistics.median(w):.0f} |"
             for name, w in lazy.items()]
    table = "\n".join(rows)
    print(table)
    if not a.no_append:
        append_results(
            "Start-up: `--help`, `run --help`, `list`, `import fedjax_appeal` (cpu)", table,
            f"{a.repeats} interleaved repeats of each command and tree, fresh processes, after "
            "one warm-up round; wall time of the whole process (interpreter start included).")
    json.dump({f"{k[0]} | {k[1]}": v for k, v in walls.items()}, sys.stderr)


if __name__ == "__main__":
    main()
