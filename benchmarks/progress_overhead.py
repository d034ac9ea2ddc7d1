"""What the progress heartbeat costs a run (`fedjax_appeal/run/progress.py`).

The heartbeat is a thread that wakes every `poll` seconds (0.25) and writes a line when a
step has run `every` seconds (10) without one; the compiled programs are the same with or
without it. This times one `simulate` three ways, interleaved (each repeat runs every side
once, so load changes on a shared machine hit all alike), after a warm-up that compiles
every program:

  * no heartbeat;
  * the commands' heartbeat (every 10 s, poll 0.25 s): no line in a run this short;
  * a stress heartbeat (every 0 s, poll 0.001 s): a line (to a discarding sink) every
    millisecond while the run lasts.

It reports the wall seconds of the whole `simulate` (training and evaluation) and the
steady seconds per round (the driver's median over chunks), min / median over repeats,
and checks that every side's history is the same, bit for bit. On a shared machine the
wall times move with the load more than with the heartbeat; so it also measures what the
heartbeat itself takes, independent of the load: the CPU seconds of the process while a
heartbeat runs over `--idle-s` seconds with nothing else to do (a phase open, no line
due), per second of wall time, for the commands' poll and for the stress poll.

    python benchmarks/progress_overhead.py --rounds 20 --repeats 5
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import jax

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import append_results  # noqa: E402

from fedjax_appeal import Heartbeat, HParams, RunConfig, load_federated, simulate  # noqa: E402
from fedjax_appeal.algorithms import build  # noqa: E402
from fedjax_appeal.core.models import model_for  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--eval-every", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--idle-s", type=float, default=20.0)
    ap.add_argument("--no-append", action="store_true",
                    help="do not append a section to benchmarks/RESULTS.md")
    a = ap.parse_args()
    cfg = RunConfig(dataset="fmnist", partition="dirichlet", alpha=0.5, clients=100, cohort=10)
    data, ds = load_federated(cfg)
    alg = build("fedavg", model_for(cfg.model, data, ds), cfg)
    hp = HParams(client_lr=0.05)
    lines = [0]

    def sink(msg: str) -> None:
        lines[0] += 1

    sides = {"no heartbeat": None, "heartbeat (every 10 s, poll 0.25 s)": (10.0, 0.25),
             "stress (every 0 s, poll 0.001 s)": (0.0, 0.001)}
    wall = {k: [] for k in sides}
    spr = {k: [] for k in sides}
    written = {k: 0 for k in sides}
    history = {}

    def once(name):
        lines[0] = 0
        t = time.perf_counter()
        if sides[name] is None:
            res = simulate(alg, data, hp, jax.random.key(0), rounds=a.rounds,
                           eval_every=a.eval_every)
        else:
            every, poll = sides[name]
            with Heartbeat(sink, every=every, poll=poll) as hb:
                res = simulate(alg, data, hp, jax.random.key(0), rounds=a.rounds,
                               eval_every=a.eval_every, heartbeat=hb)
        took = time.perf_counter() - t
        history.setdefault(name, res.history)
        assert res.history == history[name], "a side's history changed between repeats"
        return took, res.timing["sec_per_round"], lines[0]

    for name in sides:  # warm-up: every program compiled
        once(name)
    for _ in range(a.repeats):
        for name in sides:
            took, s, n = once(name)
            wall[name].append(took)
            spr[name].append(s)
            written[name] += n
    cpu = {}
    for name, (every, poll) in (("commands' heartbeat (poll 0.25 s)", (1e9, 0.25)),
                                ("stress (poll 0.001 s, a line each poll)", (0.0, 0.001))):
        with Heartbeat(sink, every=every, poll=poll) as hb, hb.phase("idle"):
            c, t = time.process_time(), time.perf_counter()
            time.sleep(a.idle_s)
            cpu[name] = (time.process_time() - c) / (time.perf_counter() - t)
    base = history["no heartbeat"]
    same = all(h == base for h in history.values())
    ref = statistics.median(wall["no heartbeat"])
    rows = ["| side | run wall s (min / median) | × no heartbeat (median) | s/round (min / "
            "median) | lines written per run |", "|---|---|---|---|---|"]
    for name in sides:
        w, s = wall[name], spr[name]
        rows.append(f"| {name} | {min(w):.3f} / {statistics.median(w):.3f} | "
                    f"{statistics.median(w) / ref:.3f} | {min(s):.4f} / "
                    f"{statistics.median(s):.4f} | {written[name] / a.repeats:.0f} |")
    rows += ["", "| heartbeat alone | CPU seconds per wall second |", "|---|---|"]
    rows += [f"| {name} | {v:.2e} |" for name, v in cpu.items()]
    table = "\n".join(rows)
    notes = (f"Workload: FedAvg FMNIST Dirichlet(0.5), MLP[64,30], tau=50, b=64, 100 clients, "
             f"cohort 10, {a.rounds} rounds, evaluation every {a.eval_every}; one CPU device; "
             f"{a.repeats} interleaved repeats after a warm-up. Histories of all sides equal "
             f"bit for bit: {'yes' if same else 'NO'}.")
    print(table)
    print(notes)
    if not same:
        raise SystemExit("the heartbeat changed a history")
    if not a.no_append:
        append_results("Progress heartbeat overhead (cpu)", table, notes)


if __name__ == "__main__":
    main()
