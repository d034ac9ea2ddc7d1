"""Per-seed paired differences of two arms' runs (matched by seed) and how the tables
print them: mean ± std with the sign in every seed, and whether the paper's direction held
in every seed."""

from __future__ import annotations

import numpy as np


def paired(a: list[dict], b: list[dict], key: str, scale: float = 1.0) -> dict:
    """Per-seed differences a - b of `key` (runs matched by seed)."""
    bs = {r["seed"]: r[key] for r in b}
    d = np.array([(r[key] - bs[r["seed"]]) * scale for r in a if r["seed"] in bs])
    return {"diffs": d.tolist(), "mean": float(d.mean()) if d.size else float("nan"),
            "std": float(d.std()) if d.size else float("nan"),
            "signs": "".join(sign(x) for x in d)}


def sign(x: float) -> str:
    return "+" if x > 0 else "-" if x < 0 else "0"


def pair_cell(p: dict) -> str:
    return f"{p['mean']:+.2f} ± {p['std']:.2f} ({p['signs']})"


def verdict(p: dict, want: str) -> str:
    """'held' when every seed's difference has the paper's sign `want` ('-' or '+')."""
    return "held" if p["signs"] and set(p["signs"]) == {want} else "not held"
