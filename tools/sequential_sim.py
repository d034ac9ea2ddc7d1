"""Error rates and power of `--seeds auto` (`fedjax_appeal.run.sequential`) by simulation.

Each simulated comparison draws per-seed paired differences, runs `sequential_report` on
them (looks after every batch, stop when the repeated interval excludes 0 or at the
maximum) and records its verdict and the seeds it used. Printed per design and effect (in
units of the per-seed standard deviation): the rate of "held" (a false "held" when the
effect is 0), of "reversed", their 95% Clopper-Pearson intervals, the mean number of seeds,
and, for comparison, the fixed-n t interval looked at after every batch (what the
sequential boundaries replace) and the fixed-n t interval at the maximum only.

    python tools/sequential_sim.py [--runs 10000] [--seed 0]
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np
from scipy.stats import binomtest, t

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fedjax_appeal.run.sequential import seed_design, sequential_report  # noqa: E402

DISTS = {
    "normal": lambda rng, size: rng.normal(0.0, 1.0, size),
    # heavy tails, unit variance
    "t3": lambda rng, size: rng.standard_t(3, size) / math.sqrt(3.0),
    # skewed (centred exponential), unit variance
    "skewed": lambda rng, size: rng.exponential(1.0, size) - 1.0,
}


def ci(k: int, n: int) -> str:
    lo, hi = binomtest(k, n).proportion_ci(0.95)
    return f"{k / n:.4f} [{lo:.4f}, {hi:.4f}]"


def simulate(des, effect: float, dist: str, runs: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    zeros = {s: 0.0 for s in range(des.max_seeds)}
    held = rev = used = naive = fixed = 0
    for _ in range(runs):
        d = effect + DISTS[dist](rng, des.max_seeds)
        r = sequential_report(dict(enumerate(d)), zeros, "+", des)
        held += r.verdict == "held"
        rev += r.verdict == "reversed"
        used += r.n
        for n in des.looks:  # the fixed-n t interval after every batch
            x = d[:n]
            if abs(x.mean()) > t.ppf(0.975, n - 1) * x.std(ddof=1) / math.sqrt(n):
                naive += 1
                break
        x = d  # the fixed-n t interval at the maximum only
        fixed += abs(x.mean()) > t.ppf(0.975, x.size - 1) * x.std(ddof=1) / math.sqrt(x.size)
    return {"held": held, "reversed": rev, "seeds": used / runs, "naive": naive,
            "fixed": fixed}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=10_000)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    t0 = time.perf_counter()
    cases = [(seed_design(40, 10), e, "normal") for e in (0.0, 0.3, 0.5, 0.8, 1.2)]
    cases += [(seed_design(40, 5), e, "normal") for e in (0.0, 0.5)]
    cases += [(seed_design(40, 10, spending="obf"), e, "normal") for e in (0.0, 0.5, 0.8)]
    cases += [(seed_design(40, 10), 0.0, "t3"), (seed_design(40, 10), 0.0, "skewed")]
    print(f"{args.runs} simulated comparisons per row, numpy seed {args.seed}; rates with "
          "95% Clopper-Pearson intervals")
    print("| design | differences | effect (sd) | held | reversed | mean seeds | "
          "fixed-n t at every look: decided | fixed-n t at the maximum: decided |")
    print("|---|---|---|---|---|---|---|---|")
    for i, (des, effect, dist) in enumerate(cases):
        r = simulate(des, effect, dist, args.runs, args.seed + i)
        looks = "/".join(map(str, des.looks))
        print(f"| {des.spending}, looks {looks} | {dist} | {effect:g} | "
              f"{ci(r['held'], args.runs)} | {ci(r['reversed'], args.runs)} | "
              f"{r['seeds']:.1f} | {ci(r['naive'], args.runs)} | "
              f"{ci(r['fixed'], args.runs)} |")
    print(f"({time.perf_counter() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
