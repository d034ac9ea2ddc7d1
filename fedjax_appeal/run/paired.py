"""Paired comparisons of two arms run on the same seeds, and their verdict.

For each seed the difference d_s = first − second of one metric; the report gives the
per-seed differences, their mean and sample standard deviation, two 95% intervals for the
mean difference, how many seeds lie on the paper's side, and a verdict:

* the paired t interval: mean ± t(n−1, 0.975) · sd / √n;
* the sign-flip permutation interval: every δ for which the exact two-sided sign-flip test
  of the differences d_s − δ (all 2^n sign patterns for n ≤ 16, else 20,000 patterns drawn
  with a fixed seed) does not reject at 5%. It assumes only that each seed's difference is
  symmetric about δ; with fewer than 6 seeds no pattern can reach 5% (the smallest
  two-sided p-value is 2 / 2^n), so the interval is the whole line.

Verdict, from the paired t interval: **held** when it lies strictly on the paper's side of
0, **reversed** when it lies strictly on the other side, **inconclusive** when it contains 0
(or fewer than two finite pairs). When the differences have no spread beyond rounding
(every seed the same difference, as a coarse metric can give; a spread below a millionth of
the mean) the t interval is a point and says nothing about the uncertainty; the sign-flip
interval decides then (it needs at least 6 seeds to exclude 0). The sign-flip interval is
reported beside the t interval in every case, as a check that needs no normality.

One function (`paired_report`) computes it for the tour, the paper tables, the scorecard
and `compare`.

Size, where the paper gives a number: `size_verdict` asks whether the paper's effect lies
inside the interval that decides the direction (**consistent** with the paper's size) or
outside it: **smaller** than the paper's (the interval lies between the paper's effect and
the other side of it, toward 0 and beyond) or **larger** (the interval lies beyond it), each
excluded at 95%. An interval with an unbounded or undefined end decides no size.

`min_seeds` is the number of seeds below which one of the two intervals is undefined or the
whole line (the sign-flip interval needs 6 at 95%); `compare` gives no verdict below it and
`interval_text` prints "n/a" for such an interval, never infinite bounds.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from typing import NamedTuple

import numpy as np

VERDICTS = ("held", "reversed", "inconclusive")
SIZE_VERDICTS = ("consistent", "smaller", "larger")
LEVEL = 0.95
EXACT_UP_TO = 16  # seeds for which every sign pattern is enumerated
DRAWN = 20_000  # sign patterns drawn beyond that (fixed seed)


class PairedReport(NamedTuple):
    """first − second per seed and what it says about the paper's direction `want`."""

    seeds: tuple[int, ...]  # seeds with a finite value in both arms, in the given order
    diffs: tuple[float, ...]  # first − second per seed
    mean: float
    sd: float  # sample standard deviation (ddof = 1); NaN below two seeds
    t_interval: tuple[float, float]  # paired t, 95%
    perm_interval: tuple[float, float]  # sign-flip permutation, 95%
    toward: int  # seeds whose difference lies strictly on the paper's side
    want: str  # "+" or "-": the sign of first − second the paper claims
    verdict: str  # one of VERDICTS
    missing: tuple[int, ...] = ()  # seeds without a finite value in one of the arms

    @property
    def n(self) -> int:
        return len(self.diffs)


def t_quantile(df: int, level: float = LEVEL) -> float:
    """The two-sided Student-t quantile t(df, (1 + level) / 2)."""
    # lazy: scipy.stats costs 600 ms of import (measured), paid only when a quantile is needed
    from scipy.stats import t

    return float(t.ppf((1 + level) / 2, df))


def t_interval(d: np.ndarray, level: float = LEVEL) -> tuple[float, float]:
    """mean ± t(n−1) · sd / √n of the differences `d` (NaN, NaN below two)."""
    n = d.size
    if n < 2:
        return (math.nan, math.nan)
    half = t_quantile(n - 1, level) * float(d.std(ddof=1)) / math.sqrt(n)
    m = float(d.mean())
    return (m - half, m + half)


def _signs(n: int) -> np.ndarray:
    """[P, n] sign patterns: all 2^n for n <= EXACT_UP_TO, else DRAWN with a fixed seed."""
    if n <= EXACT_UP_TO:
        return np.array(list(itertools.product((1.0, -1.0), repeat=n)))
    rng = np.random.default_rng(0)
    return rng.choice((1.0, -1.0), size=(DRAWN, n))


def sign_flip_p(d: np.ndarray, delta: float = 0.0, signs: np.ndarray | None = None) -> float:
    """Two-sided p-value of the sign-flip test that the differences are symmetric about
    `delta`: the share of sign patterns s with |mean(s · (d − δ))| >= |mean(d − δ)|."""
    x = d - delta
    s = _signs(d.size) if signs is None else signs
    stat = abs(x.mean())
    flipped = np.abs(s @ x) / d.size
    return float(np.mean(flipped >= stat * (1 - 1e-12)))  # ties count, up to rounding


def perm_interval(d: np.ndarray, level: float = LEVEL) -> tuple[float, float]:
    """Every δ the sign-flip test does not reject at 1 − `level`, as [lo, hi]: the
    endpoints found by bisection between the mean and the farthest difference (the set
    is an interval for the mean statistic up to ties; NaN, NaN below two differences)."""
    n = d.size
    if n < 2:
        return (math.nan, math.nan)
    alpha = 1 - level
    if n <= EXACT_UP_TO and 2 / 2 ** n > alpha:  # no sign pattern can reject: every δ
        return (-math.inf, math.inf)
    s = _signs(n)
    m = float(d.mean())
    spread = max(float(np.max(np.abs(d - m))), 1e-12 * max(1.0, abs(m)))

    def accepted(delta: float) -> bool:
        return sign_flip_p(d, delta, s) > alpha

    def edge(direction: float) -> float:
        inside, outside = m, m + direction * 2 * spread  # beyond every difference
        if accepted(outside):  # (drawn patterns only) nothing rejects: unbounded
            return direction * math.inf
        for _ in range(60):
            mid = (inside + outside) / 2
            if accepted(mid):
                inside = mid
            else:
                outside = mid
        return inside

    return (edge(-1.0), edge(1.0))


def _side(lo: float, hi: float) -> str:
    """'+' / '-' for an interval strictly above / below 0, else '0' (NaN bounds: '0')."""
    if math.isnan(lo) or math.isnan(hi):
        return "0"
    return "+" if lo > 0 else "-" if hi < 0 else "0"


def no_spread(d: np.ndarray) -> bool:
    """Whether the differences `d` (two or more) are the same up to rounding: a spread of at
    most a millionth of their mean (float32 metrics differ in their 7th digit)."""
    return d.size > 1 and float(d.std()) <= 1e-6 * max(abs(float(d.mean())), 1e-12)


def paired_report(first: Mapping[int, float], second: Mapping[int, float], want: str,
                  level: float = LEVEL) -> PairedReport:
    """The paired comparison of `first` and `second` (seed -> value) under the paper's
    direction `want` ("+": first above second; "-": below); see the module docstring.

    Seeds present in only one arm are ignored; a seed with a non-finite value in either
    arm is left out of the statistics and listed in `missing`.

    Raises:
      ValueError: `want` is not "+" or "-".
    """
    if want not in ("+", "-"):
        raise ValueError(f"want must be '+' or '-' (got {want!r})")
    common = [s for s in first if s in second]
    seeds, diffs, missing = [], [], []
    for s in common:
        a, b = float(first[s]), float(second[s])
        if math.isfinite(a) and math.isfinite(b):
            seeds.append(s)
            diffs.append(a - b)
        else:
            missing.append(s)
    d = np.asarray(diffs, np.float64)
    ti, pi = t_interval(d, level), perm_interval(d, level)
    # the t interval decides; with no spread beyond rounding (a millionth of the mean
    # difference: float32 metrics differ in their 7th digit) it is a point, and the
    # sign-flip interval decides
    side = _side(*(pi if no_spread(d) else ti))
    verdict = ("held" if side == want else "inconclusive" if side == "0" else "reversed")
    toward = int(np.sum(d > 0)) if want == "+" else int(np.sum(d < 0))
    return PairedReport(tuple(seeds), tuple(float(x) for x in d),
                        float(d.mean()) if d.size else math.nan,
                        float(d.std(ddof=1)) if d.size > 1 else math.nan,
                        ti, pi, toward, want, verdict, tuple(missing))


def deciding_interval(r: PairedReport) -> tuple[float, float]:
    """The interval the verdict of `r` comes from: the t interval, or the sign-flip
    interval when the differences have no spread (`no_spread`)."""
    return r.perm_interval if no_spread(np.asarray(r.diffs, np.float64)) else r.t_interval


def size_verdict(interval: tuple[float, float], paper: float | None, want: str
                 ) -> str | None:
    """Whether the paper's effect `paper` (first − second, in the interval's units) lies
    in `interval`: "consistent"; else "smaller" when the interval lies on the near side of
    it (below it for the paper's direction `want` = "+", above it for "-"), "larger" when
    beyond it. None when there is no paper number or the interval has an unbounded or
    undefined end.

    Raises:
      ValueError: `want` is not "+" or "-".
    """
    if want not in ("+", "-"):
        raise ValueError(f"want must be '+' or '-' (got {want!r})")
    lo, hi = (float(v) for v in interval)
    if paper is None or not all(math.isfinite(v) for v in (lo, hi, float(paper))):
        return None
    if lo <= paper <= hi:
        return "consistent"
    below = hi < paper  # the interval lies below the paper's effect
    return "smaller" if below == (want == "+") else "larger"


def size_text(verdict: str | None, paper: float | None, scale: float = 1.0,
              digits: int = 2) -> str:
    """"consistent with the paper's size (+0.47)", "smaller than the paper's +0.47,
    excluded at 95%", "larger than ...", or "n/a" (no size verdict)."""
    if verdict is None or paper is None:
        return "n/a"
    p = fmt_signed(float(paper), scale, digits)
    if verdict == "consistent":
        return f"consistent with the paper's size ({p})"
    return f"{verdict} than the paper's {p}, excluded at {100 * LEVEL:g}%"


def min_seeds(level: float = LEVEL) -> int:
    """The fewest seeds for which both intervals can exclude a value: the t interval needs
    2, the sign-flip interval n with 2 / 2^n <= 1 − level (6 at 95%)."""
    n = 2
    while 2 / 2 ** n > 1 - level:
        n += 1
    return n


def compare_verdict(r: PairedReport, better: str = "better", worse: str = "worse") -> str:
    """The verdict `compare` prints: `better` (held), `worse` (reversed), "inconclusive",
    or, below `min_seeds` seeds, "no verdict (needs at least 6 seeds, has 2)"."""
    need = min_seeds()
    if r.n < need:
        return f"no verdict (needs at least {need} seeds, has {r.n})"
    return {"held": better, "reversed": worse}.get(r.verdict, "inconclusive")


def fmt_signed(v: float, scale: float = 1.0, digits: int = 2) -> str:
    """'+0.54'; an unbounded end '-inf' / '+inf'; NaN 'n/a'."""
    if math.isnan(v):
        return "n/a"
    if math.isinf(v):
        return "+inf" if v > 0 else "-inf"
    return f"{v * scale:+.{digits}f}"


def _bounds_text(iv: tuple[float, float], need: int, scale: float, digits: int) -> str:
    """'[+0.31, +0.78]'; an interval with an unbounded or undefined end: 'n/a (needs at
    least `need` seeds)'."""
    if not all(math.isfinite(v) for v in iv):
        return f"n/a (needs at least {need} seeds)"
    return "[" + ", ".join(fmt_signed(v, scale, digits) for v in iv) + "]"


def interval_text(r: PairedReport, scale: float = 1.0, digits: int = 2) -> str:
    """'mean +0.54, 95% t [+0.31, +0.78], sign-flip [+0.45, +0.64]'; an interval that
    needs more seeds than `r` has reads 'n/a (needs at least 6 seeds)'."""
    t = _bounds_text(r.t_interval, 2, scale, digits)
    p = _bounds_text(r.perm_interval, min_seeds(), scale, digits)
    return f"mean {fmt_signed(r.mean, scale, digits)}, 95% t {t}, sign-flip {p}"


def verdict_text(r: PairedReport) -> str:
    """'held (10 seeds, 9 in the paper's direction)' and the like."""
    more = (f"; {len(r.missing)} seed(s) without a finite value left out" if r.missing
            else "")
    return f"{r.verdict} ({r.n} seeds, {r.toward} in the paper's direction{more})"
