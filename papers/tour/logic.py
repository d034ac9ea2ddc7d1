"""Pure parts of the tour: per-seed paired verdicts, the scorecard count, throughput and
the screen lines. No JAX, no files: everything here is checked on hand-made numbers."""

from __future__ import annotations

import re
from collections.abc import Sequence

from papers.pairs import paired, sign

HOLDS = "holds in every seed"
# Verdict phrases of the scorecard's "held" column, most specific first (see `row_verdict`).
TUNED_ONLY = "held at tuned lrs only"
PHRASES = (TUNED_ONLY, "not held", "held")


def paired_verdict(first: dict[int, float], second: dict[int, float], want: str
                   ) -> dict:
    """first − second per seed (matched by seed) and whether the paper's sign `want`
    ("+" or "-") holds in every seed; a tie (0) does not hold.

    Returns {"seeds", "diffs", "signs", "held", "verdict"}.
    """
    if want not in ("+", "-"):
        raise ValueError(f"want must be '+' or '-' (got {want!r})")
    seeds = [s for s in first if s in second]
    p = paired([{"seed": s, "v": first[s]} for s in seeds],
               [{"seed": s, "v": second[s]} for s in seeds], "v")
    held = bool(p["signs"]) and set(p["signs"]) == {want}
    verdict = HOLDS if held else (f"does not hold in every seed (signs {p['signs'] or '-'}, "
                                  f"the paper's is {want})")
    return {"seeds": seeds, "diffs": p["diffs"], "signs": p["signs"], "held": held,
            "verdict": verdict}


def held_at(per_lr: dict[float, dict]) -> tuple[int, int]:
    """(k, n): at how many of the grid's shared lrs the direction held in every seed."""
    return sum(bool(v["held"]) for v in per_lr.values()), len(per_lr)


def row_verdict(cell: str) -> str | None:
    """The verdict of one cell of the scorecard's "held" column: the leftmost of the phrases
    "held at tuned lrs only", "not held" and "held" (bold marks and case ignored; at one
    position the longer phrase wins); None when the cell names none (e.g. "—")."""
    text = cell.replace("*", "").lower()
    best: tuple[int, int, str] | None = None
    for i, phrase in enumerate(PHRASES):
        m = re.search(r"\b" + re.escape(phrase) + r"\b", text)
        if m and (best is None or (m.start(), i) < best[:2]):
            best = (m.start(), i, phrase)
    return None if best is None else best[2]


def count_scorecard(text: str) -> dict[str, int]:
    """Counts of the scorecard's rows by verdict.

    Rule: in every markdown table of `text` whose header has a column named "held..."
    (e.g. "held?", "held / not"), each row's cell in that column gets `row_verdict`; rows
    without a verdict phrase are not counted. Returns {"held", "tuned_only", "not_held",
    "rows"} ("rows": rows counted).
    """
    counts = {"held": 0, "tuned_only": 0, "not_held": 0, "rows": 0}
    col: int | None = None
    for line in text.splitlines():
        s = line.strip()
        if not s.startswith("|"):
            col = None  # a table ends at its first non-table line
            continue
        cells = [c.strip() for c in s.strip("|").split("|")]
        if col is None:  # a header line (or a table without a "held" column: -1)
            names = [c.replace("*", "").lower() for c in cells]
            col = next((i for i, n in enumerate(names) if n.startswith("held")), -1)
            continue
        if col < 0 or set("".join(cells)) <= set("-: ") or col >= len(cells):
            continue
        v = row_verdict(cells[col])
        if v is None:
            continue
        counts["rows"] += 1
        counts[{"held": "held", "not held": "not_held", TUNED_ONLY: "tuned_only"}[v]] += 1
    return counts


def scorecard_line(counts: dict[str, int] | None, path: str) -> str:
    if counts is None:
        return f"scorecard: {path} not found (it lists every paper table, held or not)"
    return (f"scorecard {path}: {counts['held']} rows held, {counts['tuned_only']} held at "
            f"tuned lrs only, {counts['not_held']} not held (its \"held\" column)")


def throughput(groups: Sequence[dict]) -> dict[str, float]:
    """Client-steps/s and rounds/s of training over sweep groups; each group: {"runs",
    "rounds", "cohort", "local_steps", "run_s", "compile_s", "eval_s"}. A client-step is
    one local SGD step of one cohort slot (runs × rounds × cohort × τ)."""
    steps = sum(g["runs"] * g["rounds"] * g["cohort"] * g["local_steps"] for g in groups)
    rounds = sum(g["runs"] * g["rounds"] for g in groups)
    train = sum(g["run_s"] for g in groups)
    return {"client_steps": steps, "run_rounds": rounds, "train_s": train,
            "compile_s": sum(g["compile_s"] for g in groups),
            "eval_s": sum(g["eval_s"] for g in groups),
            "runs": sum(g["runs"] for g in groups),
            "client_steps_per_s": steps / train if train > 0 else float("nan"),
            "rounds_per_s": rounds / train if train > 0 else float("nan")}


def fmt(v: float, scale: float, digits: int) -> str:
    return "n/a" if v != v else f"{v * scale:.{digits}f}"


def family_lines(n: int, total: int, fam, setting: str, values: dict[str, dict[int, float]],
                 verdict: dict, seeds: Sequence[int], lr: float,
                 second: dict[str, dict[int, float]] | None = None,
                 grid_held: tuple[int, int] | None = None) -> list[str]:
    """The screen block of one family: title, setting, the per-seed table of both arms,
    the per-seed difference with its sign and the verdict."""
    (a_lab, _), (b_lab, _) = fam.arms
    w = max(len(a_lab), len(b_lab), len("difference"), len(fam.short)) + 2
    nan = float("nan")

    def row(label: str, vals: dict[int, float], signed: bool = False) -> str:
        cells = []
        for s in seeds:
            v = vals.get(s, nan)
            cells.append(("+" if signed and v > 0 else "") + fmt(v, fam.scale, fam.digits))
        return f"    {label:{w}s}" + "".join(f"{c:>9s}" for c in cells)

    out = [f"{n}/{total} {fam.title} — {fam.paper}",
           f"    {setting}",
           f"    claim: {fam.claim}; client lr {lr:g} for both arms",
           f"    {fam.short:{w}s}" + "".join(f"{'seed ' + str(s):>9s}" for s in seeds),
           row(a_lab, values[a_lab]), row(b_lab, values[b_lab]),
           row("difference", dict(zip(verdict["seeds"], verdict["diffs"], strict=True)),
               signed=True) + f"   → {verdict['verdict']}"]
    if second:
        sv = paired_verdict(second[a_lab], second[b_lab], "+")
        out.append(f"    {fam.second_label} {a_lab} − {b_lab}: " + ", ".join(
            f"{d * fam.second_scale:+.1f}" for d in sv["diffs"]) + f" ({sv['signs']})")
    if grid_held is not None:
        lrs = ", ".join(f"{x:g}" for x in fam.lr_grid)
        out.append(f"    over the shared client lrs {lrs}: held at {grid_held[0]} of "
                   f"{grid_held[1]} (table.md)")
    return out


def signs_text(diffs: Sequence[float]) -> str:
    return "".join(sign(d) for d in diffs)
