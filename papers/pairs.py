"""Per-seed paired differences of two arms' runs (matched by seed), how the tables print
them, and their verdict: every table, the tour, the robustness checks and the scorecard
decide with `fedjax_appeal.paired_report` (held when the 95% paired t interval of the mean
difference lies on the paper's side of 0; reversed when it lies on the other side;
inconclusive when it contains 0; the 95% sign-flip interval is reported beside it and
decides when every seed has the same difference)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from fedjax_appeal import deciding_interval, paired_report, size_text, size_verdict


def paired(a: list[dict], b: list[dict], key: str, scale: float = 1.0) -> dict:
    """Per-seed differences a - b of `key` (runs matched by seed): "seeds", "diffs",
    "mean", "std" (the sample std, ddof = 1), "signs", and the 95% intervals "t_interval"
    and "perm_interval" (`fedjax_appeal.paired_report`)."""
    bs = {r["seed"]: r[key] for r in b}
    seeds = [r["seed"] for r in a if r["seed"] in bs]
    d = np.array([(r[key] - bs[r["seed"]]) * scale for r in a if r["seed"] in bs])
    rep = paired_report({i: float(x) for i, x in enumerate(d)},
                        {i: 0.0 for i in range(d.size)}, "+")
    return {"seeds": seeds, "diffs": d.tolist(),
            "mean": float(d.mean()) if d.size else float("nan"),
            "std": float(d.std(ddof=1)) if d.size > 1 else float("nan"),
            "signs": "".join(sign(x) for x in d),
            "t_interval": list(rep.t_interval), "perm_interval": list(rep.perm_interval)}


RULE = ("a direction counts as held only when the 95% paired t interval of the mean "
        "difference lies on the paper's side of 0 (reversed: on the other side; "
        "inconclusive: it contains 0); when every seed has the same difference the 95% "
        "sign-flip interval decides, which needs 6 seeds to exclude 0")


def sign(x: float) -> str:
    return "+" if x > 0 else "-" if x < 0 else "0"


def verdict_of(diffs: Sequence[float | None], want: str) -> str:
    """"held", "reversed" or "inconclusive" for per-seed differences (first − second) under
    the paper's sign `want` ("+" or "-"); a seed without a value (None, NaN: a diverged
    run, a target never reached) makes it inconclusive, never silently dropped."""
    if not diffs or any(d is None or not math.isfinite(d) for d in diffs):
        return "inconclusive"
    return paired_report({i: float(d) for i, d in enumerate(diffs)},
                         {i: 0.0 for i in range(len(diffs))}, want).verdict


def held(diffs: Sequence[float | None], want: str) -> bool:
    """Whether the verdict of `diffs` is "held" (`verdict_of`)."""
    return verdict_of(diffs, want) == "held"


def size_of(p: dict, paper: float | None, want: str) -> str | None:
    """The size verdict of a `paired` result against the paper's effect `paper` (same
    units): "consistent", "smaller", "larger" or None (`fedjax_appeal.size_verdict` on
    the interval that decides the direction)."""
    d = [float(x) for x in p["diffs"]]
    if not d or any(not math.isfinite(x) for x in d):
        return None
    rep = paired_report(dict(enumerate(d)), dict.fromkeys(range(len(d)), 0.0), want)
    return size_verdict(deciding_interval(rep), paper, want)


def size_cell(p: dict, paper: float | None, want: str) -> str:
    """'smaller than the paper's -0.93, excluded at 95%' and the like, '—' without a paper
    number (`size_of`)."""
    return "—" if paper is None else size_text(size_of(p, paper, want), paper)


def pair_cell(p: dict) -> str:
    """'+0.54 [t +0.31, +0.78] (+++)': the mean difference, its 95% t interval, the signs."""
    lo, hi = p.get("t_interval", (float("nan"), float("nan")))
    iv = ("" if not (math.isfinite(lo) and math.isfinite(hi))
          else f" [t {lo:+.2f}, {hi:+.2f}]")
    return f"{p['mean']:+.2f}{iv} ({p['signs']})"


def verdict(p: dict, want: str) -> str:
    """The verdict of a `paired` result under the paper's sign `want` (`verdict_of`)."""
    return verdict_of(p["diffs"], want)
