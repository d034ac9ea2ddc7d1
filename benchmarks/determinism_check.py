"""Do seeded runs repeat bit for bit in fresh processes, and what does that cost?

Runs one seeded command `--processes` times in fresh processes with XLA's deterministic GPU
kernels (the default) and as many times with `--no-deterministic`, each with an empty
compilation cache (so every process compiles and, on a GPU, autotunes for itself), and
reports per setting whether every history is identical, the distinct final test
accuracies, and the median seconds per round (compiling and evaluation excluded): the
speed cost of the setting. On XLA:CPU both settings repeat exactly and cost the same; the
flag matters on GPUs.

    python benchmarks/determinism_check.py --processes 3 [--cohort 100 --rounds 50]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import append_results  # noqa: E402


def program() -> list[str]:
    exe = Path(sys.executable).with_name("fedjax-appeal")
    return [str(exe)] if exe.is_file() else [sys.executable, "-m", "fedjax_appeal"]


def run(flags: list[str], out: Path, cache: Path) -> dict:
    env = {**os.environ, "FEDJAX_APPEAL_CACHE": str(cache)}
    env.pop("JAX_COMPILATION_CACHE_DIR", None)
    p = subprocess.run(program() + ["run", *flags, "--out", str(out)], env=env,
                       capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"run failed:\n{p.stderr[-3000:]}")
    return json.loads((out / "results.json").read_text())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--processes", type=int, default=3)
    ap.add_argument("--cohort", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=50)
    ap.add_argument("--no-append", action="store_true")
    args = ap.parse_args()
    flags = ["--algorithm", "fedavg", "--cohort", str(args.cohort), "--rounds",
             str(args.rounds), "--eval-every", "10", "--seed", "0"]
    rows, device = [], ""
    with tempfile.TemporaryDirectory(prefix="fedjax-appeal-determinism-") as tmp:
        for det in (True, False):
            results = []
            for i in range(args.processes):
                name = f"{'det' if det else 'fast'}-{i}"
                results.append(run(flags + ([] if det else ["--no-deterministic"]),
                                   Path(tmp) / name, Path(tmp) / f"cache-{name}"))
                print(f"{name}: acc {results[-1]['history'][-1]['test_acc_seen']:.5f}",
                      file=sys.stderr, flush=True)
            device = results[0]["environment"]["backend"]
            same = all(r["history"] == results[0]["history"] for r in results)
            accs = sorted({round(r["history"][-1]["test_acc_seen"], 6) for r in results})
            spr = statistics.median(r["timing"]["sec_per_round"] for r in results)
            rows.append([("on (default)" if det else "off (--no-deterministic)"),
                         str(args.processes), "identical" if same else "DIFFERENT",
                         ", ".join(f"{a:.5f}" for a in accs), f"{1000 * spr:.2f}",
                         str(results[0]["runtime"]["deterministic_ops"])])
    header = ["deterministic kernels", "processes", "histories", "final test acc (distinct)",
              "ms / round (median)", "recorded deterministic_ops"]
    table = "\n".join(["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
                      + ["| " + " | ".join(r) + " |" for r in rows])
    cost = float(rows[0][4]) / float(rows[1][4])
    notes = (f"Backend: {device}. Command: `fedjax-appeal run {' '.join(flags)}` in fresh "
             f"processes, each with an empty cache. Deterministic / default ms per round: "
             f"{cost:.2f}.")
    print(table + "\n\n" + notes)
    if not args.no_append:
        append_results("Seeded runs in fresh processes, with and without deterministic "
                       "kernels", table, notes)


if __name__ == "__main__":
    main()
