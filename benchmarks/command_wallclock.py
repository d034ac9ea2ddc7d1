"""Whole commands as a user runs them, cold and warm: where each one's wall time goes.

Each command runs in a fresh process, first with an empty cache folder
(`FEDJAX_APPEAL_CACHE`: no compiled program, no decoded data; "cold"), then again with
the same folder ("warm", `--repeats` times). Per run it reads the split the command itself
records (`timing.process` of results.json, sweep.json's, the tour's `time`: compile /
train / eval / data / other, and the programs compiled, read from XLA's cache and reused
whole) and measures the process's wall time from outside. It also checks that every run of
a command gives the same history (seeded runs repeat bit for bit, warm or cold).

Commands (`--commands`, default all three):

  * run:   the README's FedAvg command (`run --algorithm fedavg --rounds 50
    --eval-every 10`);
  * sweep: `sweep --algorithm fedavg --grid client_lr=0.1,0.05,0.02,0.01 --seeds 0,1,2
    --rounds 30 --eval-every 10` (12 runs, one group);
  * tour:  `reproduce tour` (the main job).

    python benchmarks/command_wallclock.py --repeats 2 [--commands run,tour] [--no-append]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import append_results, stats  # noqa: E402

COMMANDS = {
    "run": ["run", "--algorithm", "fedavg", "--rounds", "50", "--eval-every", "10"],
    "sweep": ["sweep", "--algorithm", "fedavg", "--grid", "client_lr=0.1,0.05,0.02,0.01",
              "--seeds", "0,1,2", "--rounds", "30", "--eval-every", "10"],
    "tour": ["reproduce", "tour"],
}
PHASES = ("compile", "train", "eval", "data", "other")


def program() -> list[str]:
    """The `fedjax-appeal` program beside this Python (the console script), else -m."""
    exe = Path(sys.executable).with_name("fedjax-appeal")
    return [str(exe)] if exe.is_file() else [sys.executable, "-m", "fedjax_appeal"]


def read_split(name: str, out: Path) -> tuple[dict, object]:
    """(the command's own split, what must repeat: histories / per-seed values)."""
    if name == "run":
        r = json.loads((out / "results.json").read_text())
        return r["timing"]["process"], r["history"]
    if name == "sweep":
        r = json.loads((out / "sweep.json").read_text())
        return r["timing"]["process"], [row["history"] for row in r["rows"]]
    r = json.loads((out / "results.json").read_text())
    return r["time"], {k: f["values"] for k, f in r["families"].items()}


def run_once(name: str, cache: Path, work: Path, i: int, extra_env: dict) -> dict:
    out = work / f"{name}-{i}"
    env = {**os.environ, "FEDJAX_APPEAL_CACHE": str(cache), **extra_env}
    env.pop("JAX_COMPILATION_CACHE_DIR", None)
    cmd = program() + COMMANDS[name] + ["--out", str(out)]
    t = time.perf_counter()
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=work)
    wall = time.perf_counter() - t
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{p.stderr[-3000:]}")
    split, repeat = read_split(name, out)
    return {"wall": wall, "split": split, "repeat": repeat}


def row(name: str, kind: str, runs: list[dict]) -> list[str]:
    walls = [r["wall"] for r in runs]
    med = sorted(runs, key=lambda r: r["wall"])[len(runs) // 2]
    s = med["split"]
    log = s.get("programs", {})
    progs = (f"{log.get('compiled', '?')} / {log.get('cache_hits', '?')} / "
             f"{log.get('reused', '?')}")
    w = stats(walls)
    return [name, kind, str(len(runs)), f"{w['min']:.1f}", f"{w['median']:.1f}",
            *[f"{s[k]:.1f}" for k in PHASES], f"{s['compile'] / s['wall']:.0%}", progs]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--commands", default="run,sweep,tour")
    ap.add_argument("--repeats", type=int, default=2, help="warm runs per command")
    ap.add_argument("--no-deterministic", action="store_true",
                    help="run the commands with FEDJAX_APPEAL_DETERMINISTIC=off")
    ap.add_argument("--no-append", action="store_true", help="print only")
    args = ap.parse_args()
    names = [n for n in args.commands.split(",") if n]
    bad = [n for n in names if n not in COMMANDS]
    if bad:
        raise SystemExit(f"unknown command {bad[0]!r}; choose from {', '.join(COMMANDS)}")
    extra = {"FEDJAX_APPEAL_DETERMINISTIC": "off"} if args.no_deterministic else {}
    rows, same = [], []
    with tempfile.TemporaryDirectory(prefix="fedjax-appeal-wallclock-") as tmp:
        for name in names:
            cache = Path(tmp) / f"cache-{name}"
            work = Path(tmp) / f"work-{name}"
            work.mkdir()
            cold = [run_once(name, cache, work, 0, extra)]
            print(f"{name} cold: {cold[0]['wall']:.1f} s", file=sys.stderr, flush=True)
            warm = []
            for i in range(args.repeats):
                warm.append(run_once(name, cache, work, i + 1, extra))
                print(f"{name} warm: {warm[-1]['wall']:.1f} s", file=sys.stderr, flush=True)
            rows += [row(name, "cold", cold), row(name, "warm", warm)]
            identical = all(r["repeat"] == cold[0]["repeat"] for r in warm)
            same.append(f"{name}: {'identical' if identical else 'DIFFERENT'} in all "
                        f"{1 + len(warm)} runs")
            ratio = (stats([r['wall'] for r in warm])['median'] / cold[0]['wall'])
            same[-1] += f"; warm / cold wall (median) {ratio:.2f}"
    header = ["command", "cache", "runs", "wall min (s)", "wall median (s)",
              *[f"{k} (s)" for k in PHASES], "compile share",
              "programs compiled / from XLA's cache / reused whole"]
    table = "\n".join(["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
                      + ["| " + " | ".join(r) + " |" for r in rows])
    notes = ("Phases are each command's own split of the median run (its `results.json`, "
             "`sweep.json` or the tour's `time`; `other`: imports, set-up, writing). Wall "
             "is measured around the process. Cold: an empty FEDJAX_APPEAL_CACHE (no "
             "compiled program); warm: the same folder again. Histories: "
             + "; ".join(same) + ".")
    print(table + "\n\n" + notes)
    if not args.no_append:
        append_results("Whole commands, cold and warm: compile / train / eval / data / other"
                       + (" (--no-deterministic)" if args.no_deterministic else ""),
                       table, notes)


if __name__ == "__main__":
    main()
