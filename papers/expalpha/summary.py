"""Per-run summaries of the Exp-alpha tables (rounds to each target, accuracy at R/2 and
R) and their paired per-seed comparison Exp-alpha − proportional, as table rows."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

from papers import pairs
from papers.expalpha.metrics import acc_at, acc_x
from papers.expalpha.specs import ALPHA, HISTORY_KEYS


def run_summary(history: Sequence[dict], rounds: int, key: str,
                xs: Sequence[float], extra: dict | None = None) -> dict[str, Any]:
    """Rounds to each target (`reach`: {"70": round or None}), accuracy at R/2 and R
    (fractions) of one run's history on metric `key`."""
    return {"reach": {f"{round(100 * x)}": acc_x(history, x, key) for x in xs},
            "acc_half": acc_at(history, rounds / 2, key),
            "acc_final": acc_at(history, rounds, key),
            "history": [{k: h[k] for k in HISTORY_KEYS if k in h} for h in history],
            **(extra or {})}


def sign(d: float) -> str:
    return "+" if d > 0 else ("−" if d < 0 else "0")


def paired(prop: Sequence[float | None], exp: Sequence[float | None], lower_better: bool,
           censor: float | None = None) -> dict[str, Any]:
    """Paired per-seed comparison Exp-alpha − proportional.

    `None` (a target never reached) counts as `censor` (rounds + 1) in the difference;
    returns {'diff': [per seed], 'mean', 'std' (sample std), 'signs': '−−−', 'held': bool}
    where held means the verdict is "held" in the paper's direction (fewer rounds / higher
    accuracy; `papers.pairs.verdict_of`).
    """
    fill = lambda v: censor if v is None else v
    d = [None if (fill(p) is None or fill(e) is None) else float(fill(e) - fill(p))
         for p, e in zip(prop, exp, strict=True)]
    ok = [x for x in d if x is not None]
    return {"diff": d, "mean": float(np.mean(ok)) if ok else None,
            "std": float(np.std(ok, ddof=1)) if len(ok) > 1 else None,
            "signs": "".join(sign(x) if x is not None else "?" for x in d),
            "verdict": pairs.verdict_of(d, "-" if lower_better else "+"),
            "held": pairs.held(d, "-" if lower_better else "+")}


def fmt_seeds(values: Sequence[float | None], scale: float = 1.0, rounds: int | None = None,
              digits: int = 1) -> str:
    """'mean ± std (v0, v1, v2)'; a target never reached shows '>R' and is left out of the
    mean (with how many reached)."""
    if not values:
        return "n/a"
    hit = [v * scale for v in values if v is not None]
    each = ", ".join(f">{rounds}" if v is None else f"{v * scale:.{digits}f}" for v in values)
    if not hit:
        return f"never ({each})"
    cell = f"{np.mean(hit):.{digits}f} ± {np.std(hit):.{digits}f}"
    if len(hit) < len(values):
        cell += f" [{len(hit)}/{len(values)} reached]"
    return f"{cell} ({each})"


def paired_rows(label: str, prop: list[dict], exp: list[dict], rounds: int,
                xs: Sequence[float], paper: dict | None = None) -> list[list[str]]:
    """Rows (backbone, metric, proportional, Exp-α, Δ mean ± std, per-seed signs, held,
    paper Δ) for rounds-to-target and accuracy at R/2, R of paired seeds."""
    rows = []
    pp = (paper or {}).get("proportional", {})
    pe = (paper or {}).get("exp-alpha", {})
    for x in xs:
        k = f"{round(100 * x)}"
        a = [r["reach"][k] for r in prop]
        b = [r["reach"][k] for r in exp]
        pr = paired(a, b, True, censor=rounds + 1)
        ref = (f"{pe['acc40'] - pp['acc40']:+.2f} (acc40)" if "acc40" in pp else "—")
        rows.append([label, f"acc{k} (rounds)", fmt_seeds(a, rounds=rounds, digits=0),
                     fmt_seeds(b, rounds=rounds, digits=0),
                     "n/a" if pr["mean"] is None else f"{pr['mean']:+.1f} ± "
                     + ("n/a" if pr["std"] is None else f"{pr['std']:.1f}"),
                     pr["signs"], pr["verdict"], ref if x == xs[0] else ""])
    for key, name in (("acc_half", f"acc @ R/2={rounds // 2} (%)"),
                      ("acc_final", f"acc @ R={rounds} (%)")):
        a = [r[key] for r in prop]
        b = [r[key] for r in exp]
        pr = paired(a, b, False)
        ref = (f"{pe['acc_final'] - pp['acc_final']:+.2f} (final)"
               if key == "acc_final" and "acc_final" in pp else "")
        rows.append([label, name, fmt_seeds(a, 100, digits=2), fmt_seeds(b, 100, digits=2),
                     "n/a" if pr["mean"] is None else
                     f"{100 * pr['mean']:+.2f} ± "
                     + ("n/a" if pr["std"] is None else f"{100 * pr['std']:.2f}"),
                     pr["signs"], pr["verdict"], ref])
    return rows


PAIRED_HEADER = ["backbone", "metric", "proportional: mean ± std (per seed)",
                 f"Exp-α (α={ALPHA:g}): mean ± std (per seed)", "Δ Exp-α − prop",
                 "per-seed sign", "direction", "paper Δ (CIFAR-10, E=20)"]


def mean_traces(traces: Sequence[dict[str, list[float]]]) -> dict[str, list[float]]:
    """Per group, the nan-mean over seeds of per-round weight traces (equal lengths)."""
    out: dict[str, list[float]] = {}
    for g in sorted({g for t in traces for g in t}):
        arr = np.asarray([t[g] for t in traces if g in t], np.float64)
        with warnings.catch_warnings():  # rounds in which no seed had a member: NaN
            warnings.simplefilter("ignore", RuntimeWarning)
            out[g] = np.nanmean(arr, axis=0).tolist()
    return out
