"""One paper table's cost, split by phase: this checkout against a baseline commit.

Each side runs the table as `fedjax-appeal reproduce NAME` does (`papers.runner.run_table`:
every setting x arm x seed asked, each run through `Context.run`; no report is written) in
a fresh process with an empty cache folder (no compiled program, no finished run: what a
rerun after a code change meets) and with the compilation cache and deterministic kernels
on, as the commands set them. The process times every phase of every run, in wall seconds
and in process CPU seconds (all its threads; the machine may be shared, CPU time is what
a phase costs whatever else runs):

  data      loading (and padding) the federations, outside the runs
  compile   tracing, lowering and compiling the driver's programs (pre-init, init,
            chunks of rounds, evaluation), or reading them back
  solo      running the pre-init program (the initial model and every solo model)
  init      running the init program
  rounds    running the chunks of rounds
  eval      running the evaluations
  finetune  the personalization after training (compiling its program included)
  other     the rest of each run (setting up, host-side metrics, results)

and its own total from start to end (imports included). Sides alternate within each
repeat; every figure is the min and median over repeats. Every run's values (history,
per-round metrics, per-client results, personalization) must be identical on both sides
and in every repeat: the script stops otherwise.

    python benchmarks/table_cost.py --table appeal-flexible --seeds 0,1,2 \\
        --baseline 7219ab0 --repeats 2 [--set rounds=50] [--arms FedAvg,MaxFL] \\
        [--settings 0] [--quick] [--no-append]

`--set KEY=VALUE` changes a configuration field of every run (a shorter schedule keeps
the overheads and shrinks the rounds); the section appended to RESULTS.md says which.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import append_results, stats  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
PHASES = ("data", "compile", "solo", "init", "rounds", "eval", "finetune", "other")
# the driver's program roles -> the phase their runs count in
RUN_PHASE = {"pre_init": "solo", "init": "init", "initial": "init", "chunk": "rounds",
             "eval": "eval"}


def find_table(name: str):
    """The `papers.spec.Table` registered as `name` (the appeal and selection tables)."""
    import papers.appeal.specs as appeal
    import papers.selection.specs as selection

    tables = [*appeal.TABLES, *(v for v in vars(selection).values()
                                if type(v).__name__ == "Table")]
    for t in tables:
        if t.name == name:
            return t
    raise SystemExit(f"table_cost: no table {name!r}; tables: "
                     f"{', '.join(sorted(t.name for t in tables))}")


def narrowed(table, settings: list[int] | None, arms: list[str] | None, overrides: dict):
    """`table` with the chosen settings and arms, every run's configuration updated."""
    import dataclasses

    cols = [c for i, c in enumerate(table.settings) if settings is None or i in settings]
    cols = [dataclasses.replace(c, cfg={**c.cfg, **overrides},
                                quick=None if c.quick is None else {**c.quick, **overrides})
            for c in cols]
    rows = [a for a in table.arms if arms is None or a.label in arms]
    if not cols or not rows:
        raise SystemExit("table_cost: no setting or no arm left to run")
    return dataclasses.replace(table, settings=tuple(cols), arms=tuple(rows))


def values_digest(res: dict) -> str:
    """A digest of a run's values (not its timings)."""
    keep = {k: res.get(k) for k in ("history", "round_metrics", "participation",
                                    "final_clients", "personalized")}
    return hashlib.sha256(json.dumps(keep, sort_keys=True, default=str).encode()).hexdigest()


class Clock:
    """Wall and process CPU seconds added to the current run's phases."""

    def __init__(self):
        self.runs: list[dict] = []
        self.outside = {p: [0.0, 0.0] for p in PHASES}
        self.current: dict | None = None

    def add(self, phase: str, wall: float, cpu: float) -> None:
        acc = self.current["phases"] if self.current is not None else self.outside
        acc[phase][0] += wall
        acc[phase][1] += cpu

    def timed(self, phase: str, fn):
        def call(*a, **k):
            w, c = time.perf_counter(), time.process_time()
            try:
                return fn(*a, **k)
            finally:
                self.add(phase, time.perf_counter() - w, time.process_time() - c)

        return call


def child(args: argparse.Namespace) -> None:
    """Run the table in this process and write what it measured to `args.child`."""
    w0, c0 = time.perf_counter(), time.process_time()
    import fedjax_appeal
    from fedjax_appeal import enable_compilation_cache, enable_determinism

    enable_determinism(strict=False)
    enable_compilation_cache()
    import jax

    from fedjax_appeal.run import driver, experiment
    from papers.reproduce import Context
    from papers.runner import run_table

    clock = Clock()

    class Timed:  # a compiled program whose calls are timed (and waited for)
        def __init__(self, exe, role):
            self.exe, self.phase = exe, RUN_PHASE.get(role.split()[0], "other")

        @property
        def out_info(self):
            return self.exe.out_info

        def __call__(self, *a):
            w, c = time.perf_counter(), time.process_time()
            out = jax.block_until_ready(self.exe(*a))
            clock.add(self.phase, time.perf_counter() - w, time.process_time() - c)
            return out

    compile_program = driver.Driver._compile

    def _compile(self, role, fn, a):
        w, c = time.perf_counter(), time.process_time()
        exe = compile_program(self, role, fn, a)
        clock.add("compile", time.perf_counter() - w, time.process_time() - c)
        return Timed(exe, role)

    driver.Driver._compile = _compile
    experiment.finetune_report = clock.timed("finetune", experiment.finetune_report)
    for name in ("load_federated", "pad_federation"):  # (pad_federation: not in older code)
        if hasattr(fedjax_appeal, name):
            setattr(fedjax_appeal, name, clock.timed("data", getattr(fedjax_appeal, name)))

    table = narrowed(find_table(args.table), args.settings, args.arms, args.overrides)
    tmp = Path(os.environ["FEDJAX_APPEAL_CACHE"])
    ctx = Context(table.name, args.seeds, tmp / "out", quick=args.quick,
                  data_dir=os.environ.get("FEDJAX_APPEAL_DATA", ""), cache_dir=str(tmp))
    run = ctx.run

    def timed_run(cfg, hp, label="", **kw):
        clock.current = {"label": f"{label} seed {cfg.seed}",
                         "phases": {p: [0.0, 0.0] for p in PHASES}}
        w, c = time.perf_counter(), time.process_time()
        res, sim = run(cfg, hp, label=label, **kw)
        total = (time.perf_counter() - w, time.process_time() - c)
        ph = clock.current["phases"]
        ph["other"] = [total[i] - sum(v[i] for k, v in ph.items() if k != "other")
                       for i in (0, 1)]
        clock.current.update(total=total, values=values_digest(res),
                             timing=res.get("timing", {}))
        clock.runs.append(clock.current)
        clock.current = None
        return res, sim

    ctx.run = timed_run
    run_table(ctx, table, lambda res, data: {})
    out = {"runs": clock.runs, "outside": clock.outside,
           "process": (time.perf_counter() - w0, time.process_time() - c0),
           "code": str(Path(fedjax_appeal.__file__).resolve().parent.parent)}
    Path(args.child).write_text(json.dumps(out))


def extract(rev: str, into: Path) -> Path:
    """The tree of commit `rev` of this repository, written under `into`."""
    blob = subprocess.run(["git", "-C", str(ROOT), "archive", "--format=tar", rev],
                          capture_output=True, check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(blob)) as tar:
        tar.extractall(into, filter="data")
    return into


def side_totals(measured: dict) -> dict[str, tuple[float, float]]:
    """phase -> (wall, cpu) summed over the runs and outside them; plus the process."""
    out = {p: [measured["outside"][p][0], measured["outside"][p][1]] for p in PHASES}
    for r in measured["runs"]:
        for p in PHASES:
            out[p][0] += r["phases"][p][0]
            out[p][1] += r["phases"][p][1]
    out["process"] = list(measured["process"])
    return {k: tuple(v) for k, v in out.items()}


def fmt(xs: list[float]) -> str:
    s = stats(xs)
    return f"{s['min']:.1f} / {s['median']:.1f}"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--table", required=True, help="table name (appeal and selection tables)")
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--settings", default=None, help="setting indices, e.g. 0 (default all)")
    p.add_argument("--arms", default=None, help="arm labels, e.g. FedAvg,MaxFL (default all)")
    p.add_argument("--quick", action="store_true", help="the table's --quick settings")
    p.add_argument("--set", action="append", default=[], dest="sets", metavar="KEY=VALUE",
                   help="a configuration field of every run (int, float or text)")
    p.add_argument("--baseline", default=None, help="the commit to compare with (default: "
                   "measure this checkout only)")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--no-append", action="store_true", help="print, do not append to "
                   "RESULTS.md")
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    args.seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    args.settings = None if args.settings is None else [int(s) for s in args.settings.split(",")]
    args.arms = None if args.arms is None else args.arms.split(",")
    args.overrides = {}
    for item in args.sets:
        k, _, v = item.partition("=")
        for cast in (int, float):
            try:
                v = cast(v)
                break
            except ValueError:
                continue
        args.overrides[k.strip()] = v
    if args.child:
        child(args)
        return

    with tempfile.TemporaryDirectory(prefix="table_cost_") as tmp:
        sides = {"this checkout": ROOT}
        if args.baseline:
            sides = {f"baseline {args.baseline}": extract(args.baseline, Path(tmp) / "base"),
                     **sides}
        forward = [a for a in sys.argv[1:] if a != "--no-append"]
        measured: dict[str, list[dict]] = {s: [] for s in sides}
        digests: dict[str, str] = {}
        for rep in range(args.repeats):
            order = list(sides) if rep % 2 == 0 else list(sides)[::-1]
            for side in order:
                cache = Path(tmp) / f"cache-{rep}-{len(measured[side])}-{side[:4]}"
                out = Path(tmp) / "child.json"
                env = {**os.environ, "FEDJAX_APPEAL_CACHE": str(cache),
                       "PYTHONPATH": str(sides[side])}
                t = time.perf_counter()
                subprocess.run([sys.executable, str(Path(__file__).resolve()), *forward,
                                "--child", str(out)], env=env, check=True,
                               cwd=str(sides[side]))
                m = json.loads(out.read_text())
                measured[side].append(m)
                for r in m["runs"]:
                    if digests.setdefault(r["label"], r["values"]) != r["values"]:
                        raise SystemExit(f"table_cost: {r['label']} computed other values "
                                         f"on {side} (repeat {rep})")
                print(f"[repeat {rep}] {side}: {len(m['runs'])} runs, "
                      f"{time.perf_counter() - t:.0f} s", file=sys.stderr, flush=True)

    rows = [*PHASES, "process"]
    totals = {s: [side_totals(m) for m in ms] for s, ms in measured.items()}
    head = ["phase"] + [f"{s}: {kind} s (min / median)" for s in sides
                        for kind in ("CPU", "wall")]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for ph in rows:
        cells = [ph if ph != "process" else "**process total**"]
        for s in sides:
            cells += [fmt([t[ph][1] for t in totals[s]]), fmt([t[ph][0] for t in totals[s]])]
        lines.append("| " + " | ".join(cells) + " |")
    runs = len(next(iter(measured.values()))[0]["runs"])
    notes = (f"Table `{args.table}`, seeds {','.join(map(str, args.seeds))}"
             + (f", settings {args.settings}" if args.settings else "")
             + (f", arms {','.join(args.arms)}" if args.arms else "")
             + (" (--quick)" if args.quick else "")
             + (f", every run with {args.overrides}" if args.overrides else "")
             + f": {runs} runs per side, {args.repeats} repeat(s), each in a fresh process "
             "with an empty cache folder, sides alternating. Phase totals over the runs "
             "(CPU: process CPU seconds, all threads); 'process total' from the process's "
             "start (imports included). The runs' values are identical on every side and "
             "repeat (checked).")
    if len(sides) == 2:
        (b, a) = sides
        med = {s: stats([t["process"][1] for t in totals[s]])["median"] for s in sides}
        medw = {s: stats([t["process"][0] for t in totals[s]])["median"] for s in sides}
        notes += (f" Process total, median: CPU {med[b]:.0f} -> {med[a]:.0f} s "
                  f"({med[b] / med[a]:.2f}x), wall {medw[b]:.0f} -> {medw[a]:.0f} s "
                  f"({medw[b] / medw[a]:.2f}x).")
    table_md = "\n".join(lines)
    print(table_md)
    print(notes)
    if not args.no_append:
        append_results(f"Paper-table cost by phase, `{args.table}` (cpu)", table_md, notes)


if __name__ == "__main__":
    main()
