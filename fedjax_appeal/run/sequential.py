"""Seeds until decided: a group-sequential paired comparison whose intervals stay valid
however often they are looked at.

Seeds are added in batches; after each batch (a *look*) the paired differences
d_s = first − second of the seeds so far get a 95% **repeated confidence interval**
(Jennison & Turnbull 1989, "Interim analyses: the repeated confidence interval approach",
JRSS B 51(3):305–361; their book "Group Sequential Methods with Applications to Clinical
Trials", 2000, ch. 9), and seeds stop coming as soon as the interval excludes 0 (the
direction is decided: held or reversed) or the maximum is reached. The looks are fixed
before the first seed: `batch`, 2·`batch`, ... seeds up to `max_seeds` (`SeedDesign`).

Boundaries. With n_k seeds at look k and information fraction t_k = n_k / max_seeds, the
two-sided error α = 0.05 is spent over the looks by the Lan–DeMets Pocock-type spending
function α(t) = α · ln(1 + (e − 1) t) (Lan & DeMets 1983, "Discrete sequential boundaries
for clinical trials", Biometrika 70(3):659–663); an O'Brien–Fleming-type function
α(t) = 2 − 2Φ(z_{1−α/2} / √t) is the alternative (`spending="obf"`). The interval at look
k is

    mean_k ± c_k · sd_k / √n_k        (sd with ddof = 1),

with boundaries c_k on the paired t statistic T_k = mean_k / (sd_k / √n_k) such that,
under no effect, P(|T_1| ≤ c_1, ..., |T_{k−1}| ≤ c_{k−1}, |T_k| > c_k) = α(t_k) −
α(t_{k−1}): the group-sequential t-test (Jennison & Turnbull 1991, "Exact calculations
for sequential t, χ² and F tests", Biometrika 78(1):133–141). The first boundary is the
Student-t quantile t_{n_1−1}(1 − α(t_1)/2). For the later ones the joint law of
(T_1, ..., T_K) is sampled: for normal differences it does not depend on the unknown
scale, and it is a function of each batch's sum (normal) and within-batch sum of squares
(χ² with batch − 1 degrees of freedom, independent of the sum), so 2^20 paths of those
(a fixed seed: the same boundaries every time) give c_k as the value that exactly the
spent share of the paths first exceeds at look k; the sampling error of the spent α is
about ±0.0002 (one standard deviation). With one look (max_seeds = batch) the interval is
the fixed-n paired t interval of `paired.paired_report`.

What is assumed: the per-seed differences are independent and normal with an unknown
variance (the paired t interval's own assumption); then every interval of the sequence
covers the true mean difference simultaneously with probability 95% (repeated confidence
intervals: the boundaries at the true mean are those of the test), so stopping at the
first decided look, or at any look, keeps the 95% guarantee: under no effect a false
"held" happens 2.5% of the time and "held or reversed" 5%. `tests/test_sequential.py`
checks the error rates by simulation and `tools/sequential_sim.py` measures them, their
sensitivity to non-normal differences and the power (docs/verdicts.md has its numbers).
Looking at the fixed-n t interval after every batch instead does not keep them.

Differences with no spread beyond rounding (a coarse metric, identical cohorts) get the
sign-flip permutation interval (`paired.perm_interval`) at the look's nominal level
P(|t_{n_k−1}| > c_k), as the fixed-n rule does. A seed without a finite value in either
arm stops the comparison as inconclusive (a diverged run is evidence, not a gap to skip).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Mapping
from typing import NamedTuple

import numpy as np

from .paired import LEVEL, fmt_signed, perm_interval

SPENDING = ("pocock", "obf")
DEFAULT_MAX = 40  # `--seeds auto` = auto:40
DEFAULT_BATCH = 10  # `--seed-batch`
ALPHA = round(1 - LEVEL, 12)  # 0.05, without float noise
MIN_FIRST_LOOK = 3  # a spread needs two degrees of freedom at least


@dataclasses.dataclass(frozen=True)
class SeedDesign:
    """The looks (seeds after each batch, increasing; the last is the maximum), the
    two-sided error `alpha` and the spending function ("pocock" or "obf")."""

    looks: tuple[int, ...]
    alpha: float = ALPHA
    spending: str = "pocock"

    @property
    def max_seeds(self) -> int:
        return self.looks[-1]

    @property
    def batch(self) -> int:
        return self.looks[0]

    def text(self) -> str:
        """'looks at 10, 20, 30, 40 seeds, Pocock-type α-spending (Lan–DeMets), 95%'."""
        kind = {"pocock": "Pocock", "obf": "O'Brien–Fleming"}[self.spending]
        return (f"looks at {', '.join(map(str, self.looks))} seeds, {kind}-type α-spending "
                f"(Lan–DeMets), {100 * (1 - self.alpha):g}% repeated confidence intervals")


def seed_design(max_seeds: int = DEFAULT_MAX, batch: int | None = None,
                alpha: float = ALPHA, spending: str = "pocock") -> SeedDesign:
    """Looks after every `batch` seeds (None: `DEFAULT_BATCH`, or `max_seeds` when fewer)
    up to `max_seeds` (the last look at `max_seeds`).

    Raises:
      ValueError: a batch below 3 seeds, a maximum below the batch, an unknown spending
        function or an alpha outside (0, 1).
    """
    if batch is None:
        batch = min(DEFAULT_BATCH, max_seeds)
    if batch < MIN_FIRST_LOOK:
        raise ValueError(f"a batch of seeds needs at least {MIN_FIRST_LOOK} seeds (got "
                         f"{batch}): its first look estimates the spread of the differences")
    if max_seeds < batch:
        raise ValueError(f"the maximum number of seeds ({max_seeds}) is below the batch "
                         f"({batch}): give auto:MAX with MAX >= the batch")
    if spending not in SPENDING:
        raise ValueError(f"spending must be one of {', '.join(SPENDING)} (got {spending!r})")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must lie in (0, 1) (got {alpha})")
    looks = list(range(batch, max_seeds + 1, batch))
    if looks[-1] != max_seeds:
        looks.append(max_seeds)
    return SeedDesign(tuple(looks), float(alpha), spending)


def parse_auto_seeds(text: str) -> int | None:
    """The maximum of `auto` / `auto:MAX` (None: `text` is not of that form).

    Raises:
      ValueError: `auto:` followed by something that is not a positive integer.
    """
    t = text.strip().lower()
    if t == "auto":
        return DEFAULT_MAX
    if not t.startswith("auto:"):
        return None
    try:
        m = int(t[5:])
    except ValueError:
        m = 0
    if m < 1:
        raise ValueError(f"--seeds {text!r}: write auto or auto:MAX with MAX a positive "
                         "integer, e.g. auto:40")
    return m


def spent(t: float, alpha: float, spending: str) -> float:
    """α(t): the error spent by information fraction t (see the module docstring)."""
    # lazy: scipy.stats costs 600 ms of import (measured), paid only when a quantile is needed
    from scipy.stats import norm

    if t <= 0:
        return 0.0
    if spending == "pocock":
        return alpha * math.log(1 + (math.e - 1) * min(t, 1.0))
    return float(2 - 2 * norm.cdf(norm.ppf(1 - alpha / 2) / math.sqrt(min(t, 1.0))))


CALIBRATION_PATHS = 1 << 20  # sampled paths of the t statistics (`t_bounds`)
CALIBRATION_SEED = 20240917


@functools.lru_cache(maxsize=64)
def t_bounds(d: SeedDesign) -> tuple[float, ...]:
    """The boundaries c_k on the paired t statistic of each look (see the module
    docstring): the first exact, the later ones from the sampled joint law under no effect
    (`CALIBRATION_PATHS` paths of each batch's sum and within-batch sum of squares, seed
    `CALIBRATION_SEED`, normal differences of unit variance: the law does not depend on
    the scale)."""
    # lazy: scipy.stats costs 600 ms of import (measured), paid only when a quantile is needed
    from scipy.stats import t

    n_max, paths = d.max_seeds, CALIBRATION_PATHS
    rng = np.random.default_rng(CALIBRATION_SEED)
    alive = np.ones(paths, bool)
    total = np.zeros(paths)  # sum of the differences so far
    ss = np.zeros(paths)  # their sum of squares about their mean
    done, prev = 0.0, 0  # α spent so far (the first look exactly, then sampled shares)
    bounds: list[float] = []
    for k, n in enumerate(d.looks):
        b = n - prev
        bsum = rng.standard_normal(paths) * math.sqrt(b)
        bss = rng.chisquare(b - 1, paths) if b > 1 else np.zeros(paths)
        if prev:  # merge the batch (Chan, Golub & LeVeque's update of the sum of squares)
            ss += bss + (bsum / b - total / prev) ** 2 * prev * b / n
        else:
            ss = bss
        total += bsum
        prev = n
        need = spent(n / n_max, d.alpha, d.spending) - done
        if k == 0:
            c = float(t.ppf(1 - need / 2, n - 1))
            done = need
        else:
            live = (np.abs(total / n) / np.sqrt(ss / (n - 1) / n))[alive]
            m = int(round(need * paths))  # paths that first cross here
            if m <= 0:
                c = float(live.max()) if live.size else math.inf
            elif m >= live.size:
                c = 0.0
            else:  # halfway between the m-th and the (m+1)-th largest
                j = live.size - m
                part = np.partition(live, (j - 1, j))
                c = float((part[j - 1] + part[j]) / 2)
            done += m / paths
        stat = np.abs(total / n) / np.sqrt(np.maximum(ss, 1e-300) / max(n - 1, 1) / n)
        alive &= stat <= c
        bounds.append(c)
    return tuple(bounds)


@functools.lru_cache(maxsize=64)
def nominal_levels(d: SeedDesign) -> tuple[float, ...]:
    """The two-sided nominal error of each look, P(|t_{n_k−1}| > c_k)."""
    # lazy: scipy.stats costs 600 ms of import (measured), paid only when a quantile is needed
    from scipy.stats import t

    return tuple(float(2 * t.sf(c, n - 1)) for c, n in zip(t_bounds(d), d.looks, strict=True))


class Look(NamedTuple):
    """One look: its seeds, the mean difference, its repeated interval, the decision."""

    n: int
    mean: float
    sd: float
    interval: tuple[float, float]
    side: str  # "+" / "-": the interval lies above / below 0; "0": it contains 0


class SequentialReport(NamedTuple):
    """The comparison of `first` − `second` under the paper's direction `want`, looked at
    after every batch of `design`."""

    design: SeedDesign
    want: str  # "+" or "-"
    seeds: tuple[int, ...]  # seeds used, in order (those of the looks taken)
    diffs: tuple[float, ...]
    looks: tuple[Look, ...]  # the looks taken, the last one decides
    verdict: str  # "held", "reversed", "inconclusive", or "undecided" (more seeds to run)
    reason: str  # why it stopped (or what it waits for)
    next_seeds: int  # seeds the next look needs (0: stopped)

    @property
    def n(self) -> int:
        return self.looks[-1].n if self.looks else 0

    @property
    def interval(self) -> tuple[float, float]:
        return self.looks[-1].interval if self.looks else (math.nan, math.nan)

    @property
    def mean(self) -> float:
        return self.looks[-1].mean if self.looks else math.nan

    @property
    def stopped(self) -> bool:
        return self.next_seeds == 0


def look_interval(d: np.ndarray, k: int, des: SeedDesign) -> tuple[float, float]:
    """The repeated 95% interval of look `k` (0-based) for its differences `d`."""
    n = d.size
    m = float(d.mean())
    flat = float(d.std()) <= 1e-6 * max(abs(m), 1e-12)
    if flat:  # no spread: the sign-flip interval at the look's nominal level
        return perm_interval(d, 1 - nominal_levels(des)[k])
    half = t_bounds(des)[k] * float(d.std(ddof=1)) / math.sqrt(n)
    return (m - half, m + half)


def sequential_report(first: Mapping[int, float], second: Mapping[int, float], want: str,
                      des: SeedDesign) -> SequentialReport:
    """Walk the looks of `des` over the seeds both arms have (in increasing seed order):
    stop at the first look whose repeated interval excludes 0, at the maximum, at a seed
    without a finite value, or where the seeds run out before the next look ("undecided":
    run `next_seeds` seeds in all, then call again).

    Raises:
      ValueError: `want` is not "+" or "-".
    """
    if want not in ("+", "-"):
        raise ValueError(f"want must be '+' or '-' (got {want!r})")
    seeds = sorted(s for s in first if s in second)
    looks: list[Look] = []
    diffs: list[float] = []
    for k, n in enumerate(des.looks):
        if len(seeds) < n:
            have = looks[-1].n if looks else 0
            return SequentialReport(des, want, tuple(seeds[:have]), tuple(diffs), tuple(looks),
                                    "undecided", f"the next look needs {n} seeds "
                                    f"({len(seeds)} available)", n)
        use = seeds[:n]
        vals = [(float(first[s]), float(second[s])) for s in use]
        bad = [s for s, (a, b) in zip(use, vals, strict=True)
               if not (math.isfinite(a) and math.isfinite(b))]
        diffs = [a - b for a, b in vals]
        if bad:
            return SequentialReport(des, want, tuple(use), tuple(diffs), tuple(looks),
                                    "inconclusive", f"seed {bad[0]} has no finite value in "
                                    "one of the arms", 0)
        d = np.asarray(diffs, np.float64)
        lo, hi = look_interval(d, k, des)
        side = "+" if lo > 0 else "-" if hi < 0 else "0"
        looks.append(Look(n, float(d.mean()), float(d.std(ddof=1)), (lo, hi), side))
        if side != "0":
            verdict = "held" if side == want else "reversed"
            return SequentialReport(des, want, tuple(use), tuple(diffs), tuple(looks),
                                    verdict, f"decided at look {k + 1} of {len(des.looks)}",
                                    0)
    return SequentialReport(des, want, tuple(seeds[:des.max_seeds]), tuple(diffs),
                            tuple(looks), "inconclusive",
                            f"the maximum of {des.max_seeds} seeds reached", 0)


def sequential_text(r: SequentialReport, scale: float = 1.0, digits: int = 2) -> str:
    """'held after 20 seeds (look 2 of 4): mean +0.54, 95% repeated interval [+0.31,
    +0.78]' and the like."""
    if not r.looks:
        return f"{r.verdict}: no look yet ({r.reason})"
    lo, hi = r.interval
    iv = (f"[{fmt_signed(lo, scale, digits)}, {fmt_signed(hi, scale, digits)}]"
          if math.isfinite(lo) and math.isfinite(hi) else "n/a")
    when = f"{r.n} seeds, look {len(r.looks)} of {len(r.design.looks)}"
    return (f"{r.verdict} after {when} ({r.reason}): mean "
            f"{fmt_signed(r.mean, scale, digits)}, 95% repeated interval {iv}")
