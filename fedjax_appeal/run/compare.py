"""Several runs and seeds in one figure and one table (what `fedjax-appeal compare` writes).

Reads the results of `fedjax-appeal run` (a folder with `results.json`) and of
`fedjax-appeal sweep` (a folder with `sweep.json`, one run per row), or any folder below
which such files lie. Every run's settings are its resolved values (`records.runs_of`: the
model that was built, the appeal protocol on or off, the hyperparameters its configuration
uses), also for older files that hold `model = auto` or `appeal = auto`, which are resolved
here (the dataset's default model, `data.pool.default_model`; `appeal_on`); so a
run and a sweep row of one configuration fall into one group. Runs are grouped by the
values of `--group-by` keys (config or hparams names; by default every key whose value
differs between the runs, the seed excepted), the seeds of a group are aligned round by
round, and each group is drawn as its mean with a band: ± one sample standard deviation
(`std`; ddof = 1, `records.sample_std`, the std of the sweep summary too; none for a
single seed), a 95% Student-t confidence interval of the mean (`ci95`), or the range over
seeds (`minmax`). Written (all-or-nothing): `compare.{png,pdf,svg}`, `compare.md` (final
values: mean ± std, n, per-seed values), `compare.csv` (the aligned curves) and
`compare.json`.

A seed that appears twice for one configuration is a warning (`records.duplicate_seeds`),
a run whose history lacks the metric an error (`check_metric`), one line each.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
from pathlib import Path
from typing import Any

import numpy as np

from ..core.config import ConfigError
from ..core.registry import did_you_mean
from .paired import PairedReport, compare_verdict, interval_text, paired_report, t_quantile
from .records import NOT_A_SETTING, mean_std_text, runs_of, sample_std
from .sequential import sequential_report

BANDS = ("std", "ci95", "minmax")
FORMATS = ("png", "pdf", "svg")


def _runs_in(path: Path) -> list[dict[str, Any]]:
    """Every run (settings, seed, history, source) in a results.json / sweep.json / folder."""
    files = ([path] if path.is_file() else
             sorted([*path.rglob("results.json"), *path.rglob("sweep.json")]))
    runs = []
    for f in files:
        try:
            res = json.loads(f.read_text())
        except (OSError, ValueError) as e:
            raise ConfigError(f"cannot read {f}: {e}; pass run or sweep folders") from None
        if f.name == "sweep.json" and "rows" not in res:
            res = {**res, "rows": []}
        runs += runs_of(res, str(f))
    return runs


def load_runs(paths: list[str]) -> list[dict[str, Any]]:
    """The runs below `paths`; a path without any run is an error."""
    runs = []
    for p in paths:
        path = Path(p)
        if not path.exists():
            raise ConfigError(f"{p} does not exist: pass folders written by `run` or `sweep`")
        found = _runs_in(path)
        if not found:
            raise ConfigError(f"no results.json or sweep.json under {p}: pass folders written "
                              "by `run` or `sweep`")
        runs += found
    return runs


def check_metric(runs: list[dict[str, Any]], metric: str) -> None:
    """Refuse, in one line, a metric that no run's history holds or that one run lacks
    (naming the metric and the first such run's file)."""
    have = [any(h.get(metric) is not None for h in r["history"]) for r in runs]
    if not any(have):
        metrics = sorted({k for r in runs for h in r["history"] for k in h})
        guess = did_you_mean(metric, metrics)
        raise ConfigError(f"--metric {metric}: not in these runs' history; "
                          + (f"did you mean '{guess}'? " if guess else "")
                          + f"choose from {', '.join(metrics)}")
    lacking = [r["source"] for r, ok in zip(runs, have, strict=True) if not ok]
    if lacking:
        more = f" (and {len(lacking) - 1} more)" if len(lacking) > 1 else ""
        raise ConfigError(f"--metric {metric}: the run {lacking[0]}{more} has no value of "
                          f"{metric} in its history; compare runs that all record it, or "
                          "choose another --metric")


def default_group_keys(runs: list[dict[str, Any]]) -> list[str]:
    """Settings whose value differs between runs (the seed and output paths excepted)."""
    keys = sorted({k for r in runs for k in r["settings"]} - NOT_A_SETTING)
    return [k for k in keys
            if len({json.dumps(r["settings"].get(k), sort_keys=True) for r in runs}) > 1]


def group_runs(runs: list[dict[str, Any]], keys: list[str]) -> dict[str, list[dict[str, Any]]]:
    """label -> runs; the label is `k=v, ...` over `keys` (or 'all runs')."""
    known = {k for r in runs for k in r["settings"]}
    bad = [k for k in keys if k not in known]
    if bad:
        guess = did_you_mean(bad[0], sorted(known - NOT_A_SETTING))
        raise ConfigError(f"--group-by {','.join(bad)}: not a setting of these runs; "
                          + (f"did you mean '{guess}'? " if guess else "")
                          + f"choose from {', '.join(sorted(known - NOT_A_SETTING))}")
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in runs:
        label = ", ".join(f"{k}={r['settings'].get(k)}" for k in keys) or "all runs"
        groups.setdefault(label, []).append(r)
    return groups


def curves(group: list[dict[str, Any]], metric: str, x_key: str = "round"
           ) -> tuple[np.ndarray, np.ndarray]:
    """(x [T], values [n_runs, T]) on the x values every run of the group evaluated."""
    per_run = [{h[x_key]: h[metric] for h in r["history"]
                if h.get(metric) is not None and x_key in h} for r in group]
    xs = sorted(set.intersection(*(set(d) for d in per_run))) if per_run else []
    return np.asarray(xs, float), np.asarray([[d[x] for x in xs] for d in per_run], float)


def band(values: np.ndarray, kind: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(mean, low, high) over axis 0 of values [n, T].

    `std` and `ci95` use the sample std (`records.sample_std`, ddof = 1); with a single
    seed they have no band (low = high = the mean).
    """
    mean = values.mean(0)
    n = values.shape[0]
    if kind == "minmax":
        return mean, values.min(0), values.max(0)
    if n < 2:
        return mean, mean.copy(), mean.copy()
    sd = sample_std(values, axis=0)
    half = sd if kind == "std" else t_quantile(n - 1) * sd / math.sqrt(n)
    return mean, mean - half, mean + half


def metric_range(metric: str) -> tuple[float, float]:
    """The values a history metric can take, which a band never leaves: accuracies and
    shares of clients (appeal, preferred-model accuracy) lie in [0, 1]; losses, the client
    dissimilarity (a standard deviation), epsilon and counts in [0, inf); anything else is
    unbounded."""
    name = metric.lower()
    if any(w in name for w in ("acc", "appeal", "preferred", "share", "frac")):
        return (0.0, 1.0)
    if any(w in name for w in ("loss", "dissimilarity", "epsilon", "count", "rounds")):
        return (0.0, math.inf)
    return (-math.inf, math.inf)


def lower_is_better(metric: str) -> bool:
    """Losses and the client dissimilarity: smaller is better."""
    return any(w in metric.lower() for w in ("loss", "dissimilarity"))


def summarise(groups: dict[str, list[dict[str, Any]]], metric: str, kind: str,
              x_key: str = "round") -> list[dict[str, Any]]:
    """Per group: the aligned curve with its band (clipped to `metric_range`), and the
    final value per seed."""
    out = []
    lo_m, hi_m = metric_range(metric)
    for label, rs in groups.items():
        xs, vals = curves(rs, metric, x_key)
        if xs.size == 0:
            raise ConfigError(f"group {label!r} has no common {x_key} with {metric!r}: "
                              "compare runs evaluated at the same rounds")
        mean, lo, hi = band(vals, kind)
        lo, hi = np.clip(lo, lo_m, hi_m), np.clip(hi, lo_m, hi_m)
        final = vals[:, -1]
        out.append({"label": label, "n": len(rs), "seeds": [r["seed"] for r in rs],
                    "x": xs.tolist(), "mean": mean.tolist(), "low": lo.tolist(),
                    "high": hi.tolist(), "final": final.tolist(),
                    "final_mean": float(final.mean()), "final_std": sample_std(final),
                    "sources": [r["source"] for r in rs]})
    return out


# "k=v, k2=v2": a group label (`group_runs`), split before each "key=" (a value may hold
# ", ", as a list does)
_LABEL_PARTS = re.compile(r",\s*(?=[A-Za-z_][\w.-]*=)")


def label_items(label: str) -> list[tuple[str, str]]:
    """[(key, value text)] of a group label or of a `--baseline` given as one."""
    return [(k.strip(), v.strip()) for k, _, v in
            (part.partition("=") for part in _LABEL_PARTS.split(label.strip()))]


def _number(text: str) -> float | None:
    try:
        v = float(text)
    except ValueError:
        return None
    return v if math.isfinite(v) else None


def find_group(rows: list[dict[str, Any]], baseline: str) -> str:
    """The label of the group `baseline` names: the label itself, or the same keys with
    equal values, numbers compared as numbers (`temper_t=1` is the group `temper_t=1.0`).
    Refused in one line otherwise: a key that is not a group key, a value of the wrong
    type (naming the type the groups hold and an example), or no such group (the closest
    label and the groups)."""
    labels = [r["label"] for r in rows]
    if baseline in labels:
        return baseline
    want = label_items(baseline)
    keys = [k for k, _ in label_items(labels[0])] if labels else []
    example = labels[0] if labels else ""
    if any(not v for _, v in want) or sorted(k for k, _ in want) != sorted(keys):
        raise ConfigError(f"--baseline {baseline!r}: name a group by its "
                          f"{'keys' if len(keys) > 1 else 'key'} {', '.join(keys)} as "
                          f"KEY=VALUE, e.g. --baseline {example!r}; the groups: "
                          + ", ".join(labels))
    given = dict(want)
    for key in keys:
        values = [dict(label_items(lab))[key] for lab in labels]
        if all(_number(v) is not None for v in values) and _number(given[key]) is None:
            raise ConfigError(f"--baseline {baseline!r}: {key} is a number in these runs, "
                              f"not {given[key]!r}; e.g. --baseline {example!r}")
    for lab in labels:
        have = dict(label_items(lab))
        if all(have[k] == given[k] or (_number(have[k]) is not None
                                       and _number(have[k]) == _number(given[k]))
               for k in keys):
            return lab
    guess = did_you_mean(baseline, labels)
    raise ConfigError(f"--baseline {baseline!r} is not a group"
                      + (f" (did you mean {guess!r}?)" if guess else "")
                      + f"; the groups: {', '.join(labels)}")


def paired_rows(rows: list[dict[str, Any]], baseline: str, metric: str,
                design: Any = None) -> list[dict[str, Any]]:
    """Every other group against `baseline`, seed by seed on the final value
    (`paired.paired_report`; "better" is higher, or lower for `lower_is_better` metrics):
    per group the report and "better" / "worse" / "inconclusive", or "no verdict" below
    the seeds both intervals need (`paired.compare_verdict`).

    With `design` (a `sequential.SeedDesign`, `--seeds auto`) the verdict is the
    group-sequential one instead (`sequential.sequential_report`: the seeds in increasing
    order, looked at after every batch; "undecided" while the next look's seeds are
    missing), recorded under "sequential"."""
    baseline = find_group(rows, baseline)
    by = {r["label"]: r for r in rows}
    base = dict(zip(by[baseline]["seeds"], by[baseline]["final"], strict=True))
    want = "-" if lower_is_better(metric) else "+"
    out = []
    for r in rows:
        if r["label"] == baseline:
            continue
        rep = paired_report(dict(zip(r["seeds"], r["final"], strict=True)), base, want)
        row = {"label": r["label"], "baseline": baseline, "report": rep._asdict(),
               "verdict": compare_verdict(rep)}
        if design is not None:
            seq = sequential_report(dict(zip(r["seeds"], r["final"], strict=True)), base,
                                    want, design)
            row["verdict"] = {"held": "better", "reversed": "worse"}.get(seq.verdict,
                                                                        seq.verdict)
            row["sequential"] = sequential_record(seq)
        out.append(row)
    return out


def sequential_record(seq: Any) -> dict[str, Any]:
    """A `SequentialReport` as JSON data (compare.json, the sweep's decision)."""
    return {"design": seq.design.text(), "looks_planned": list(seq.design.looks),
            "verdict": seq.verdict, "reason": seq.reason, "seeds_used": seq.n,
            "next_seeds": seq.next_seeds, "mean": seq.mean, "interval": list(seq.interval),
            "looks": [{"n": lk.n, "mean": lk.mean, "interval": list(lk.interval),
                       "side": lk.side} for lk in seq.looks]}


def paired_table(pairs: list[dict[str, Any]], metric: str) -> str:
    """compare.md's paired table (`paired_rows`); an interval that too few seeds leave
    unbounded is 'n/a (needs at least 6 seeds)', never infinite bounds."""
    lines = [f"| group − baseline | seeds | final {metric}: mean and 95% intervals | "
             "per seed | verdict |", "|---|---|---|---|---|"]
    for p in pairs:
        rep = PairedReport(**p["report"])
        per = ", ".join(f"{s}: {d:+.4f}" for s, d in zip(rep.seeds, rep.diffs, strict=True))
        text = interval_text(rep, 1.0, 4)
        seq = p.get("sequential")
        if seq is not None:  # the repeated interval of the look that decides
            lo, hi = seq["interval"]
            iv = (f"[{lo:+.4f}, {hi:+.4f}]" if math.isfinite(lo) and math.isfinite(hi)
                  else "n/a (no look yet)")
            text = (f"95% repeated {iv} after {seq['seeds_used']} seeds ({seq['reason']}); "
                    f"fixed-n: {text}")
        lines.append(f"| {p['label']} − {p['baseline']} | {rep.n} | "
                     f"{text} | {per} | {p['verdict']} |")
    return "\n".join(lines) + "\n"


def write_figure(stem: Path, rows: list[dict[str, Any]], metric: str, kind: str, x_key: str,
            title: str, formats: list[str]) -> None:
    # lazy: matplotlib costs 330 ms of import (measured), paid only when a figure is drawn
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for r in rows:
        line, = ax.plot(r["x"], r["mean"], marker="o", ms=3, label=f"{r['label']} (n={r['n']})")
        ax.fill_between(r["x"], r["low"], r["high"], color=line.get_color(), alpha=0.2, lw=0)
    ax.set_xlabel(x_key)
    ax.set_ylabel(f"{metric} (mean, band: {kind})")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    for fmt in formats:
        fig.savefig(stem.with_suffix("." + fmt), dpi=150)
    plt.close(fig)


def markdown_table(rows: list[dict[str, Any]], metric: str) -> str:
    """compare.md's table: per group n, final mean ± sample std (n/a for one seed), seeds."""
    lines = [f"| group | n | final {metric} (mean ± std) | per seed |", "|---|---|---|---|"]
    for r in rows:
        per = ", ".join(f"{s}: {v:.4f}" for s, v in zip(r["seeds"], r["final"], strict=True))
        lines.append(f"| {r['label']} | {r['n']} | "
                     f"{mean_std_text(r['final_mean'], r['final_std'])} | {per} |")
    return "\n".join(lines) + "\n"


def csv_text(rows: list[dict[str, Any]], x_key: str) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["group", x_key, "mean", "low", "high"])
    for r in rows:
        for x, m, lo, hi in zip(r["x"], r["mean"], r["low"], r["high"], strict=True):
            w.writerow([r["label"], x, m, lo, hi])
    return buf.getvalue()
