"""`reproduce NAME --seeds auto[:MAX]`: run an experiment on more seeds, batch by batch,
until its main claim is decided.

An experiment names its main claim where it is registered (`experiment(..., claim=...)`):
a `MainClaim` reads the per-seed paired differences first − second of that claim from the
`results.json` the experiment writes, and the paper's direction (and, where the paper
gives one, its effect in the same units). `run_until_decided` runs the whole experiment
on the first `batch` seeds (0, 1, ...), then on the first 2·`batch`, ..., each time
through the run cache (the seeds of earlier looks are not run again), and after each look
asks `fedjax_appeal.sequential_report` whether the claim's 95% repeated confidence
interval excludes 0 (a group-sequential design with Pocock-type α-spending: the guarantee
holds however many looks are taken; see `fedjax_appeal/run/sequential.py`). It stops at
the first decided look or at the maximum. Every look rewrites the experiment's report; its
`table.md` ends with a section "Seeds until decided" (the design, every look, the
verdict, the seeds it took, and the size verdict where the paper gives a number) and its
`results.json` holds the same as `seeds_until_decided`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

from fedjax_appeal import ConfigError, sequential_report, sequential_text, size_text, size_verdict

SECTION = "## Seeds until decided"


@dataclasses.dataclass(frozen=True)
class MainClaim:
    """The claim that decides how many seeds an experiment runs.

    `values(results, seeds)` gives {seed: first − second} from the experiment's
    results.json data and the seeds it ran (None: the claim is not in these results);
    `want` is the paper's direction ("+" or "-"); `paper` its effect in the same units
    (None: the paper gives no number, or the results give it per run, see `paper_of`).
    """

    label: str
    want: str
    values: Callable[[dict, list[int]], dict[int, float] | None]
    paper: float | None = None
    paper_of: Callable[[dict], float | None] | None = None  # the paper's effect from results
    digits: int = 3
    # per shared client lr, this claim's per-seed differences in the table's
    # robustness.json (`reproduce NAME --robustness`); None: that rerun does not hold it
    shared_lrs: Callable[[dict], dict[float, list[float]] | None] | None = None


def node(data: Any, path: str | tuple[str, ...]) -> Any:
    """The value at `path` of `data` ("/"-separated keys, or a tuple of keys for keys that
    hold a "/"), or None."""
    for key in (path.split("/") if isinstance(path, str) else path):
        if not isinstance(data, dict) or key not in data:
            return None
        data = data[key]
    return data


def per_seed(diffs: list, seeds: list[int]) -> dict[int, float]:
    """{seed: difference}; a missing difference (None) becomes NaN."""
    return {int(s): (math.nan if d is None else float(d))
            for s, d in zip(seeds, diffs, strict=False)}


def record_claim(path: str, want: str, label: str, paper: float | None = None,
                 digits: int = 3) -> MainClaim:
    """A claim whose paired record (`{"diffs": [...]}` or `{"diff": [...]}`, with its
    "seeds" or in the order of the seeds run) is at `path` of results.json."""
    def values(data: dict, seeds: list[int]) -> dict[int, float] | None:
        rec = node(data, path)
        if not isinstance(rec, dict):
            return None
        diffs = rec.get("diffs", rec.get("diff"))
        return None if diffs is None else per_seed(diffs, rec.get("seeds") or seeds)

    def shared_lrs(rob: dict) -> dict[float, list[float]] | None:
        for v in rob.get("verdicts") or []:
            if isinstance(v, dict) and v.get("path") == path:
                return {float(lr): d.get("diffs", d.get("diff"))
                        for lr, d in v.get("per_lr", {}).items()}
        return None

    return MainClaim(label, want, values, paper, digits=digits, shared_lrs=shared_lrs)


def runs_claim(first: str | tuple[str, ...], second: str | tuple[str, ...],
               value: Callable[[dict, dict], float | None],
               want: str, label: str, paper: float | None = None, digits: int = 3,
               shared_lrs: Callable[[dict], dict[float, list[float]] | None] | None = None
               ) -> MainClaim:
    """A claim on two arms' per-seed runs (lists of records with a "seed") at paths
    `first` and `second` of results.json: per seed value(first run, results) −
    value(second run, results); a value of None makes that seed's difference missing."""
    def values(data: dict, seeds: list[int]) -> dict[int, float] | None:
        a, b = node(data, first), node(data, second)
        if not isinstance(a, list) or not isinstance(b, list):
            return None
        rb = {r["seed"]: r for r in b}
        out = {}
        for r in a:
            if r["seed"] in rb:
                x, y = value(r, data), value(rb[r["seed"]], data)
                out[int(r["seed"])] = math.nan if x is None or y is None else x - y
        return out

    return MainClaim(label, want, values, paper, digits=digits, shared_lrs=shared_lrs)


def decide(ctx: Any, data: dict) -> Any:
    """The sequential report of `ctx.claim` on the results `data` just built (None when
    the claim is not in them)."""
    c = ctx.claim
    vals = c.values(data, list(ctx.seeds))
    if vals is None:
        return None
    return sequential_report(vals, {s: 0.0 for s in vals}, c.want, ctx.design)


def paper_effect(ctx: Any, data: dict) -> float | None:
    c = ctx.claim
    return c.paper if c.paper is not None else (c.paper_of(data) if c.paper_of else None)


def record(ctx: Any, rep: Any, paper: float | None) -> dict[str, Any]:
    """`seeds_until_decided` of results.json."""
    des = ctx.design
    size = size_verdict(rep.interval, paper, rep.want) if rep.stopped else None
    return {"claim": ctx.claim.label, "want": rep.want, "design": des.text(),
            "looks_planned": list(des.looks), "verdict": rep.verdict, "reason": rep.reason,
            "seeds_used": rep.n, "seeds": list(rep.seeds), "diffs": list(rep.diffs),
            "looks": [{"n": lk.n, "mean": lk.mean, "sd": lk.sd,
                       "interval": list(lk.interval), "side": lk.side} for lk in rep.looks],
            "paper_effect": paper, "size": size}


def section(ctx: Any, rep: Any, paper: float | None) -> str:
    """The "Seeds until decided" section of table.md."""
    c, des = ctx.claim, ctx.design
    dg = c.digits
    rows = ["| look | seeds | mean | 95% repeated interval | decision |",
            "| --- | --- | --- | --- | --- |"]
    for i, lk in enumerate(rep.looks):
        lo, hi = lk.interval
        iv = (f"[{lo:+.{dg}f}, {hi:+.{dg}f}]" if math.isfinite(lo) and math.isfinite(hi)
              else "n/a")
        dec = {"+": "above 0", "-": "below 0", "0": "contains 0"}[lk.side]
        rows.append(f"| {i + 1} | {lk.n} | {lk.mean:+.{dg}f} | {iv} | {dec} |")
    size = size_verdict(rep.interval, paper, rep.want) if rep.stopped else None
    size_line = (f"Size: {size_text(size, paper, 1.0, dg)}." if paper is not None and
                 rep.stopped else "Size: the paper gives no number for this claim."
                 if paper is None else "Size: decided when the seeds stop.")
    state = (f"It took **{rep.n} seeds**." if rep.stopped else
             f"Not decided yet: the next look needs {rep.next_seeds} seeds.")
    return (f"\n{SECTION}\n\n`--seeds auto:{des.max_seeds}` with batches of {des.batch}: "
            f"{des.text()}. Main claim: {c.label} (the paper's direction: {c.want}). "
            "Each look's interval keeps its 95% coverage however many looks are taken "
            "(`fedjax_appeal/run/sequential.py`); the fixed-n t intervals above are "
            "reported for reference and do not decide this claim.\n\n"
            + "\n".join(rows) + f"\n\n**Verdict**: {sequential_text(rep, 1.0, dg)}. "
            f"{state} {size_line}\n")


def annotate(ctx: Any, files: dict[str, Any]) -> dict[str, Any]:
    """The report files with the look's decision added (results.json: a
    `seeds_until_decided` entry; table.md: the section); sets `ctx.decision`."""
    data = files.get("results.json")
    if not isinstance(data, dict):
        return files
    rep = decide(ctx, data)
    if rep is None:
        raise ConfigError(f"reproduce {ctx.name}: its main claim ({ctx.claim.label}) is not "
                          "in the results of this run (a --set option that leaves its "
                          "setting or arms out?); give explicit --seeds instead of auto")
    ctx.decision = rep
    paper = paper_effect(ctx, data)
    out = dict(files)
    out["results.json"] = {**data, "seeds_until_decided": record(ctx, rep, paper)}
    if isinstance(out.get("table.md"), str):
        out["table.md"] = out["table.md"].rstrip("\n") + "\n" + section(ctx, rep, paper)
    return out


def run_until_decided(ctx: Any, fn: Callable[[Any], None]) -> Any:
    """Run experiment `fn` on the looks of `ctx.design` (seeds 0 .. n_k − 1) until its
    main claim `ctx.claim` is decided or the maximum is reached; returns the last look's
    `SequentialReport`."""
    des = ctx.design
    for k, n in enumerate(des.looks):
        ctx.seeds = list(range(n))
        ctx.decision = None
        ctx.log(f"look {k + 1} of {len(des.looks)}: seeds 0..{n - 1} (those of earlier "
                "looks come from the run cache)")
        fn(ctx)
        rep = ctx.decision
        if rep is None:
            raise ConfigError(f"reproduce {ctx.name} wrote no results.json to decide on; "
                              "give explicit --seeds")
        ctx.log(f"{ctx.claim.label}: {sequential_text(rep, 1.0, ctx.claim.digits)}")
        if rep.stopped:
            return rep
        if rep.next_seeds <= n:  # fewer seeds in the results than this look ran
            raise ConfigError(f"reproduce {ctx.name} ran fewer than {n} seeds for its main "
                              "claim: give explicit --seeds")
    return ctx.decision
