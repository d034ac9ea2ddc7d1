"""Pure parts of the tour: per-seed paired verdicts, the scorecard count, throughput and
the screen lines. No JAX, no files: everything here is checked on hand-made numbers."""

from __future__ import annotations

import re
from collections.abc import Sequence

from fedjax_appeal import PairedReport, interval_text, paired_report
from papers.pairs import sign

# Verdict phrases of the scorecard's "held" column, most specific first (see `row_verdict`).
TUNED_ONLY = "held at tuned lrs only"
PHRASES = (TUNED_ONLY, "inconclusive", "reversed", "not held", "held")


def paired_verdict(first: dict[int, float], second: dict[int, float], want: str) -> dict:
    """first − second per seed (matched by seed) and its verdict under the paper's sign
    `want` ("+" or "-"), from the 95% intervals of `fedjax_appeal.paired_report` (held /
    reversed / inconclusive).

    Returns the report as a dict ("seeds", "diffs", "mean", "sd", "t_interval",
    "perm_interval", "toward", "want", "verdict", "missing") with "signs" (the sign of
    each difference) and "held" (verdict == "held").
    """
    r = paired_report(first, second, want)
    return {**r._asdict(), "seeds": list(r.seeds), "diffs": list(r.diffs),
            "signs": "".join(sign(d) for d in r.diffs), "held": r.verdict == "held"}


def verdict_line(v: dict, scale: float = 1.0, digits: int = 2) -> str:
    """'held: mean +0.06, 95% t [+0.03, +0.09], sign-flip [+0.03, +0.09]; 9 of 10 seeds
    in the paper's direction'."""
    r = PairedReport(**{k: (tuple(x) if isinstance(x, list) else x) for k, x in v.items()
                        if k in PairedReport._fields})
    return (f"{r.verdict}: {interval_text(r, scale, digits)}; {r.toward} of {r.n} seeds in "
            "the paper's direction")


def held_at(per_lr: dict[float, dict]) -> tuple[int, int]:
    """(k, n): at how many of the grid's shared lrs the verdict is "held"."""
    return sum(v["verdict"] == "held" for v in per_lr.values()), len(per_lr)


def row_verdict(cell: str) -> str | None:
    """The verdict of one cell of the scorecard's "held" column: the leftmost of `PHRASES`
    ("held at tuned lrs only", "inconclusive", "reversed", "not held", "held"; bold marks
    and case ignored; at one position the longer phrase wins); None when the cell names
    none (e.g. "—")."""
    text = cell.replace("*", "").lower()
    best: tuple[int, int, str] | None = None
    for i, phrase in enumerate(PHRASES):
        m = re.search(r"\b" + re.escape(phrase) + r"\b", text)
        if m and (best is None or (m.start(), i) < best[:2]):
            best = (m.start(), i, phrase)
    return None if best is None else best[2]


COUNT_KEYS = {"held": "held", TUNED_ONLY: "tuned_only", "inconclusive": "inconclusive",
              "reversed": "reversed", "not held": "not_held"}


def count_scorecard(text: str) -> dict[str, int]:
    """Counts of the scorecard's rows by verdict.

    Rule: in every markdown table of `text` whose header has a column named "held..."
    (e.g. "held?", "held / not"), each row's cell in that column gets `row_verdict`; rows
    without a verdict phrase are not counted. Returns {"held", "tuned_only",
    "inconclusive", "reversed", "not_held", "rows"} ("rows": rows counted).
    """
    counts = {k: 0 for k in COUNT_KEYS.values()} | {"rows": 0}
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
        counts[COUNT_KEYS[v]] += 1
    return counts


# Size verdict phrases of the scorecard's "size" column (`size_of_cell`).
SIZE_PHRASES = ("consistent", "smaller", "larger")


def size_of_cell(cell: str) -> str:
    """The size verdict of one cell of the scorecard's "size" column: the leftmost of
    "consistent", "smaller", "larger" (whole words, bold marks and case ignored), else
    "none" (no paper number, "—", "n/a")."""
    text = cell.replace("*", "").lower()
    hits = [(m.start(), p) for p in SIZE_PHRASES
            if (m := re.search(r"\b" + p + r"\b", text))]
    return min(hits)[1] if hits else "none"


def count_sizes(text: str) -> dict[str, int]:
    """Counts of the scorecard's rows by size verdict.

    Rule: in every markdown table of `text` with a column named "held..." and a column
    named "size...", each row counted by `count_scorecard` (its "held" cell names a
    verdict) gets `size_of_cell` of its "size" cell. Returns {"consistent", "smaller",
    "larger", "none", "rows"} ("none": no size verdict, e.g. no paper number).
    """
    counts = {k: 0 for k in (*SIZE_PHRASES, "none", "rows")}
    cols: tuple[int, int] | None = None
    for line in text.splitlines():
        s = line.strip()
        if not s.startswith("|"):
            cols = None
            continue
        cells = [c.strip() for c in s.strip("|").split("|")]
        if cols is None:
            names = [c.replace("*", "").lower() for c in cells]
            held = next((i for i, n in enumerate(names) if n.startswith("held")), -1)
            size = next((i for i, n in enumerate(names) if n.startswith("size")), -1)
            cols = (held, size) if held >= 0 and size >= 0 else (-1, -1)
            continue
        held, size = cols
        if held < 0 or set("".join(cells)) <= set("-: ") or max(held, size) >= len(cells):
            continue
        if row_verdict(cells[held]) is None:
            continue
        counts["rows"] += 1
        counts[size_of_cell(cells[size])] += 1
    return counts


def scorecard_line(counts: dict[str, int] | None, path: str,
                   sizes: dict[str, int] | None = None) -> str:
    """'scorecard PATH: 11 rows held, 21 inconclusive, 4 reversed (its "held" column)',
    with `sizes` (`count_sizes`, when it counted rows) '; size: 3 consistent with the
    paper's, 12 smaller, 1 larger, 20 without a size verdict'."""
    if counts is None:
        return f"scorecard: {path} not found (it lists every paper table and its verdict)"
    parts = [f"{counts['held']} rows held"]
    parts += [f"{counts[k]} {label}" for k, label in (
        ("tuned_only", "held at tuned lrs only"), ("inconclusive", "inconclusive"),
        ("reversed", "reversed"), ("not_held", "not held")) if counts.get(k)]
    line = f"scorecard {path}: {', '.join(parts)} (its \"held\" column)"
    if sizes and sizes.get("rows"):
        line += (f"; size: {sizes['consistent']} consistent with the paper's, "
                 f"{sizes['smaller']} smaller, {sizes['larger']} larger, {sizes['none']} "
                 "without a size verdict (its \"size\" column)")
    return line


def throughput(groups: Sequence[dict]) -> dict[str, float]:
    """Client-steps/s and rounds/s of training over sweep groups; each group: {"runs",
    "rounds", "cohort", "local_steps", "run_s", "compile_s", "eval_s"}. A client-step is
    one local SGD step of one cohort slot (runs × rounds × cohort × τ)."""
    steps = sum(g["runs"] * g["rounds"] * g["cohort"] * g["local_steps"] for g in groups)
    rounds = sum(g["runs"] * g["rounds"] for g in groups)
    train = sum(g["run_s"] for g in groups)
    return {"client_steps": steps, "run_rounds": rounds, "train_s": train,
            "init_s": sum(g.get("init_s", 0.0) for g in groups),
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
    """The screen block of one family: title, setting, the per-seed table of both arms and
    of their difference, the verdict with its intervals (`verdict_line`), the second
    metric's mean difference and interval, and the shared-lr grid's count."""
    (a_lab, _), (b_lab, _) = fam.arms
    w = max(len(a_lab), len(b_lab), len("difference"), len(fam.short)) + 2
    nan = float("nan")
    col = 8 if len(seeds) <= 5 else 7

    def row(label: str, vals: dict[int, float], signed: bool = False) -> str:
        cells = []
        for s in seeds:
            v = vals.get(s, nan)
            cells.append(("+" if signed and v > 0 else "") + fmt(v, fam.scale, fam.digits))
        return f"    {label:{w}s}" + "".join(f"{c:>{col}s}" for c in cells)

    head = "seed " if len(seeds) <= 5 else "s"
    out = [f"{n}/{total} {fam.title} — {fam.paper}",
           f"    {setting}",
           f"    claim: {fam.claim}; client lr {lr:g} for both arms",
           f"    {fam.short:{w}s}" + "".join(f"{head + str(s):>{col}s}" for s in seeds),
           row(a_lab, values[a_lab]), row(b_lab, values[b_lab]),
           row("difference", dict(zip(verdict["seeds"], verdict["diffs"], strict=True)),
               signed=True),
           f"    → {verdict_line(verdict, fam.scale, fam.digits)}"]
    if second:
        sv = paired_verdict(second[a_lab], second[b_lab], "+")
        out.append(f"    {fam.second_label} {a_lab} − {b_lab}: "
                   + verdict_line(sv, fam.second_scale, 1).split(": ", 1)[1].split(";")[0])
    if grid_held is not None:
        lrs = ", ".join(f"{x:g}" for x in fam.lr_grid)
        out.append(f"    over the shared client lrs {lrs}: held at {grid_held[0]} of "
                   f"{grid_held[1]} (table.md)")
    return out


def signs_text(diffs: Sequence[float]) -> str:
    return "".join(sign(d) for d in diffs)
